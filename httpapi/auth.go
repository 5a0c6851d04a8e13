package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Role is an app role a caller holds: what it may do with the API. The
// values are the roles' names as an identity provider puts them in a
// token's roles claim (Entra ID's app roles). Each role includes the ones
// below it.
type Role string

// The roles, from the least to the most.
const (
	// RoleReader may read: an instance's status, the list (and, in the
	// service, /metrics).
	RoleReader Role = "Durafeed.Reader"
	// RoleOperator is a reader that may also start instances, raise
	// events to them and cancel them.
	RoleOperator Role = "Durafeed.Operator"
	// RoleAdmin is an operator that may also delete instances, and make
	// any forced request (force=true).
	RoleAdmin Role = "Durafeed.Admin"
)

// anyRole is what a route open to every authenticated caller needs
// (GET /v1/me): a valid token, whatever its roles.
const anyRole Role = "*authenticated"

// callerKey is the request context's key of the authenticated caller
// (a Principal), set once the caller is authorized.
type callerKey struct{}

// rank orders the roles; 0 for a name that is not one.
func rank(r Role) int {
	switch r {
	case RoleReader:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Principal is an authenticated caller.
type Principal struct {
	// ID names the caller in debug logs: the object id (oid) of the user
	// or service principal, or the token's subject. Never a secret.
	ID string
	// App is the client application's id (azp or appid), if the token
	// names one.
	App string
	// Roles are the caller's app roles (the token's roles claim); names
	// that are not a Role are ignored.
	Roles []string
	// Name is the caller's display name (the token's name claim), if the
	// Authenticator reads one: shown to the caller by GET /v1/me, never
	// logged.
	Name string
}

// Has reports whether p holds r or a role that includes it.
func (p Principal) Has(r Role) bool {
	need := rank(r)
	if need == 0 {
		return false
	}
	for _, s := range p.Roles {
		if rank(Role(s)) >= need {
			return true
		}
	}
	return false
}

// Authenticator verifies bearer tokens (package httpauth verifies Entra
// ID's).
type Authenticator interface {
	// Authenticate returns the caller a bearer token stands for. An error
	// wrapping ErrAuthUnavailable says the token cannot be verified now
	// (the issuer's keys are not loaded yet): the request is answered
	// 503. Any other error says the token is not valid: 401. The error's
	// text is sent to the caller and logged at Debug, so it must hold
	// neither the token nor its claims.
	Authenticate(ctx context.Context, token string) (Principal, error)
}

// AuthenticatorFunc is a function that is an Authenticator.
type AuthenticatorFunc func(ctx context.Context, token string) (Principal, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, token string) (Principal, error) {
	return f(ctx, token)
}

// ErrAuthUnavailable is wrapped by an Authenticator's error when it
// cannot verify tokens yet.
var ErrAuthUnavailable = errors.New("httpapi: tokens cannot be verified yet")

// bearerChallenge is the WWW-Authenticate value of a 401 or 403 (RFC
// 6750), with its error code when there is one.
func bearerChallenge(code string) string {
	if code == "" {
		return `Bearer realm="durafeed"`
	}
	return `Bearer realm="durafeed", error="` + code + `"`
}

// authorize checks that the caller of r holds need (any valid token for
// anyRole), before anything else is read or written: with auth nil
// everyone does. Otherwise it answers
// 401 (no bearer token, or an invalid one), 403 (a valid token without
// the role) or 503 (tokens cannot be verified yet) and reports false.
// The caller is returned when known, for the request log; authErr is the
// Authenticator's refusal, for the log too.
func authorize(auth Authenticator, need Role, w http.ResponseWriter, r *http.Request) (caller Principal, authErr error, ok bool) {
	if auth == nil {
		return Principal{}, nil, true
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		w.Header().Set("WWW-Authenticate", bearerChallenge(""))
		writeError(w, apiError{status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: "this API requires a bearer token: Authorization: Bearer <access token>"})
		return Principal{}, nil, false
	}
	p, err := auth.Authenticate(r.Context(), strings.TrimSpace(token))
	switch {
	case errors.Is(err, ErrAuthUnavailable):
		writeError(w, apiError{status: http.StatusServiceUnavailable, Code: "unavailable",
			Message: "bearer tokens cannot be verified yet (the issuer's signing keys are not loaded); retry"})
		return Principal{}, err, false
	case err != nil:
		w.Header().Set("WWW-Authenticate", bearerChallenge("invalid_token"))
		writeError(w, apiError{status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: "the bearer token is not valid: " + err.Error()})
		return Principal{}, err, false
	case need != anyRole && !p.Has(need):
		w.Header().Set("WWW-Authenticate", bearerChallenge("insufficient_scope"))
		writeError(w, apiError{status: http.StatusForbidden, Code: "forbidden",
			Message: fmt.Sprintf("this request needs the app role %s, or one that includes it; nothing was written", need)})
		return p, nil, false
	}
	return p, nil, true
}

// forced reports whether r asks to force its operation (force=true):
// whatever its route, such a request needs RoleAdmin.
func forced(r *http.Request) bool {
	b, err := strconv.ParseBool(r.URL.Query().Get("force"))
	return err == nil && b
}

// RequireRole returns h behind the API's authorization: a request
// reaches h only with a bearer token that auth accepts and whose caller
// holds need (or a role that includes it); any other is answered as the
// API answers it (401, 403 or 503, with the API's error body). With auth
// nil it returns h. The service puts /metrics behind it.
func RequireRole(auth Authenticator, need Role, h http.Handler) http.Handler {
	if auth == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := authorize(auth, need, w, r); ok {
			h.ServeHTTP(w, r)
		}
	})
}
