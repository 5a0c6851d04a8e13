// Package httpauth verifies the bearer tokens of httpapi's callers: OAuth
// 2.0 access tokens that are JWTs signed by an OpenID Connect issuer,
// Microsoft Entra ID's v2.0 access tokens first of all. A Verifier is an
// httpapi.Authenticator:
//
//	v, err := httpauth.New(httpauth.Options{Issuer: issuer, Audiences: []string{clientID}, Logger: log})
//	go v.Load(ctx) // discovery and keys, retried until they load
//	api, err := httpapi.New(client, httpapi.Options{Authenticator: v, Ready: v.Ready, ...})
//
// Verification is github.com/coreos/go-oidc's: the issuer's discovery
// document (/.well-known/openid-configuration) names its key set
// (jwks_uri); a token must be signed by one of those keys with an
// accepted algorithm (RS256 by default), carry the issuer's exact iss,
// one of the accepted audiences in aud, an exp in the future and no nbf
// more than five minutes ahead (go-oidc's leeway). The keys are cached
// (go-oidc's remote key set); a token no cached key verifies, one naming
// a new key after the issuer's rotation or a forgery, makes the key set
// be fetched again, at most once per MinKeyRefresh so that forged tokens
// cannot make the service hammer the issuer. The caller's roles are the
// token's roles claim (Entra ID's app roles).
//
// Until Load has fetched the discovery document and found signing keys
// in the key set, Ready reports false and Authenticate refuses every
// token with an error wrapping httpapi.ErrAuthUnavailable (503): the
// service stays up, not ready, rather than failing, while the issuer
// cannot be reached.
//
// Nothing here logs a token or its claims: a refusal's error names the
// check that failed, never a claim's value.
package httpauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/httpapi"
)

// Defaults of Options.
const (
	// DefaultMinKeyRefresh is Options.MinKeyRefresh's default.
	DefaultMinKeyRefresh = 10 * time.Second
	// DefaultAttemptTimeout is Options.AttemptTimeout's default.
	DefaultAttemptTimeout = 10 * time.Second
	// DefaultRetryInterval and DefaultMaxRetryInterval are the defaults
	// of Options.RetryInterval and Options.MaxRetryInterval.
	DefaultRetryInterval    = time.Second
	DefaultMaxRetryInterval = 30 * time.Second
	// maxKeySetBytes bounds a key set document read by Load.
	maxKeySetBytes = 1 << 20
	// nbfLeeway is go-oidc's leeway on a token's nbf.
	nbfLeeway = 5 * time.Minute
)

// EntraIssuer returns the issuer of a Microsoft Entra ID tenant's v2.0
// tokens, https://login.microsoftonline.com/<tenant>/v2.0. tenantID must
// be the tenant's (directory's) id, a GUID, as the tokens' iss and the
// tenant's discovery document spell it (a domain name would not match
// them); it is written in lower case.
func EntraIssuer(tenantID string) (string, error) {
	id, err := uuid.Parse(tenantID)
	if err != nil || len(tenantID) != 36 {
		return "", fmt.Errorf("the tenant id %q is not a GUID such as 72f988bf-86f1-41af-91ab-2d7cd011db47 (the directory id, not a domain name)", tenantID)
	}
	return "https://login.microsoftonline.com/" + id.String() + "/v2.0", nil
}

// Options configures a Verifier. Issuer and Audiences are required.
type Options struct {
	// Issuer is the issuer's URL, exactly as its tokens' iss claim and
	// its discovery document have it (EntraIssuer for an Entra ID
	// tenant). It must be https, or http on a loopback host (a local
	// issuer in tests).
	Issuer string
	// Audiences are the accepted values of the aud claim: a token must
	// carry at least one. Entra ID's v2.0 access tokens carry the API's
	// client (application) id.
	Audiences []string
	// SigningAlgorithms are the accepted signature algorithms (default
	// RS256, what Entra ID signs its tokens with).
	SigningAlgorithms []string
	// HTTPClient fetches the discovery document and the key set (default
	// http.DefaultClient). Every request is bounded by AttemptTimeout.
	HTTPClient *http.Client
	// MinKeyRefresh is the least time between two fetches of the key set
	// that tokens naming an uncached key cause (default
	// DefaultMinKeyRefresh). Such a token arriving sooner is refused.
	MinKeyRefresh time.Duration
	// AttemptTimeout bounds one attempt of Load and each fetch of the key
	// set (default DefaultAttemptTimeout).
	AttemptTimeout time.Duration
	// RetryInterval is Load's first wait between attempts, doubling up to
	// MaxRetryInterval (defaults DefaultRetryInterval and
	// DefaultMaxRetryInterval).
	RetryInterval, MaxRetryInterval time.Duration
	// Logger receives Load's attempts: a warning per failure, an info
	// line once the keys are loaded (default none).
	Logger *zap.Logger
	// Now is the clock of the expiry checks and of MinKeyRefresh
	// (default time.Now).
	Now func() time.Time
}

// Validate checks the options that have no default.
func (o Options) Validate() error {
	if err := checkURL(o.Issuer); err != nil {
		return fmt.Errorf("httpauth: the issuer: %w", err)
	}
	if len(o.Audiences) == 0 {
		return errors.New("httpauth: at least one audience is required")
	}
	for _, a := range o.Audiences {
		if strings.TrimSpace(a) == "" || a != strings.TrimSpace(a) {
			return fmt.Errorf("httpauth: the audience %q is empty or has spaces around it", a)
		}
	}
	return nil
}

// checkURL accepts an https URL, or an http one on a loopback host.
func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return err
	case u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q is not an absolute URL without a query", s)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
		return nil
	}
	return fmt.Errorf("%q is not https (plain http is accepted on a loopback host only)", s)
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Verifier verifies bearer tokens against an issuer's published keys. It
// is an httpapi.Authenticator; it is safe for concurrent use.
type Verifier struct {
	o        Options
	keysHTTP *http.Client // the key set's client: bounded, refreshes limited
	verifier atomic.Pointer[oidc.IDTokenVerifier]
	loaded   chan struct{}
	once     sync.Once
}

// New returns a Verifier that refuses every token (as unavailable) until
// Load has loaded the issuer's keys. It makes no request.
func New(o Options) (*Verifier, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(o.SigningAlgorithms) == 0 {
		o.SigningAlgorithms = []string{string(jose.RS256)}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.MinKeyRefresh <= 0 {
		o.MinKeyRefresh = DefaultMinKeyRefresh
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.MaxRetryInterval <= 0 {
		o.MaxRetryInterval = DefaultMaxRetryInterval
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	next := o.HTTPClient.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	return &Verifier{o: o, loaded: make(chan struct{}),
		keysHTTP: &http.Client{Transport: &refreshLimit{next: next, every: o.MinKeyRefresh, now: o.Now},
			CheckRedirect: o.HTTPClient.CheckRedirect, Timeout: o.AttemptTimeout}}, nil
}

// Load fetches the issuer's discovery document and key set, retrying
// (each attempt bounded by AttemptTimeout, waits doubling from
// RetryInterval to MaxRetryInterval, a warning logged per failure) until
// they load or ctx ends. It returns nil once the keys are loaded (at once
// if they were), else ctx's error. A discovery document naming another
// issuer, or a key set without a signing key, is a failed attempt.
func (v *Verifier) Load(ctx context.Context) error {
	if v.Ready() {
		return nil
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime, b.Multiplier = v.o.RetryInterval, v.o.MaxRetryInterval, 0, 2
	attempt := 0
	return backoff.Retry(func() error {
		attempt++
		iv, keys, err := v.attempt(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			v.o.Logger.Warn("the token issuer's signing keys did not load; the API answers 503 until they do",
				zap.String("issuer", v.o.Issuer), zap.Int("attempt", attempt), zap.Error(err))
			return err
		}
		v.once.Do(func() {
			v.verifier.Store(iv)
			close(v.loaded)
			v.o.Logger.Info("token signing keys loaded", zap.String("issuer", v.o.Issuer), zap.Int("keys", keys))
		})
		return nil
	}, backoff.WithContext(b, ctx))
}

// attempt is one try of Load: discovery, then the key set.
func (v *Verifier) attempt(ctx context.Context) (*oidc.IDTokenVerifier, int, error) {
	ctx, cancel := context.WithTimeout(ctx, v.o.AttemptTimeout)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, v.o.HTTPClient), v.o.Issuer)
	if err != nil {
		return nil, 0, fmt.Errorf("discovery: %w", err)
	}
	var meta struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := p.Claims(&meta); err != nil {
		return nil, 0, fmt.Errorf("discovery: %w", err)
	}
	if err := checkURL(meta.JWKSURI); err != nil {
		return nil, 0, fmt.Errorf("discovery: jwks_uri: %w", err)
	}
	n, err := v.countKeys(ctx, meta.JWKSURI)
	if err != nil {
		return nil, 0, fmt.Errorf("the key set at %s: %w", meta.JWKSURI, err)
	}
	// go-oidc's remote key set, with its cache and its fetch of a token's
	// unknown key; it takes its HTTP client from this context.
	keys := oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), v.keysHTTP), meta.JWKSURI)
	return oidc.NewVerifier(v.o.Issuer, keys, &oidc.Config{SkipClientIDCheck: true, // Authenticate checks the audiences
		SupportedSigningAlgs: v.o.SigningAlgorithms, Now: v.o.Now}), n, nil
}

// countKeys fetches a key set and counts its signing keys (keys of a
// type go-jose does not know are skipped, as go-oidc skips them); none is
// an error.
func (v *Verifier) countKeys(ctx context.Context, uri string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return 0, err
	}
	resp, err := v.o.HTTPClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetBytes))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return 0, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	n := 0
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if json.Unmarshal(raw, &k) == nil && k.IsPublic() && (k.Use == "" || k.Use == "sig") {
			n++
		}
	}
	if n == 0 {
		return 0, errors.New("no signing key")
	}
	return n, nil
}

// Ready reports whether the issuer's keys are loaded.
func (v *Verifier) Ready() bool { return v.verifier.Load() != nil }

// Loaded is closed once the issuer's keys are loaded.
func (v *Verifier) Loaded() <-chan struct{} { return v.loaded }

// Reason is the check a refused token failed. Its text never holds a
// claim's value.
type Reason string

// The reasons a token is refused.
const (
	ReasonMalformed   Reason = "malformed (not a JWT signed with an accepted algorithm)"
	ReasonSignature   Reason = "not signed by a key the issuer publishes"
	ReasonIssuer      Reason = "issued by another issuer"
	ReasonAudience    Reason = "for another audience"
	ReasonExpired     Reason = "expired"
	ReasonNotYetValid Reason = "not valid yet (nbf)"
)

// TokenError is Authenticate's refusal of a token.
type TokenError struct {
	Reason Reason
}

// Error returns "token " and the reason.
func (e *TokenError) Error() string { return "token " + string(e.Reason) }

// Authenticate verifies a bearer token and returns its caller: ID is the
// oid claim (else sub), App the azp claim (else appid), Roles the roles
// claim. A token that is not valid is refused with a *TokenError; before
// the keys are loaded every token is refused with an error wrapping
// httpapi.ErrAuthUnavailable.
func (v *Verifier) Authenticate(ctx context.Context, token string) (httpapi.Principal, error) {
	iv := v.verifier.Load()
	if iv == nil {
		return httpapi.Principal{}, fmt.Errorf("%w: the signing keys of %s are not loaded", httpapi.ErrAuthUnavailable, v.o.Issuer)
	}
	t, err := iv.Verify(ctx, token)
	if err != nil {
		return httpapi.Principal{}, &TokenError{Reason: v.reason(token, err)}
	}
	if !slices.ContainsFunc(t.Audience, func(a string) bool { return slices.Contains(v.o.Audiences, a) }) {
		return httpapi.Principal{}, &TokenError{Reason: ReasonAudience}
	}
	var c struct {
		OID   string   `json:"oid"`
		AZP   string   `json:"azp"`
		AppID string   `json:"appid"`
		Roles []string `json:"roles"`
	}
	if err := t.Claims(&c); err != nil {
		return httpapi.Principal{}, &TokenError{Reason: ReasonMalformed}
	}
	p := httpapi.Principal{ID: c.OID, App: c.AZP, Roles: c.Roles}
	if p.ID == "" {
		p.ID = t.Subject
	}
	if p.App == "" {
		p.App = c.AppID
	}
	return p, nil
}

// reason names the check a token go-oidc refused failed. go-oidc's errors
// are text (bar expiry's) and carry claims' values, so the reason is read
// from the token's own claims instead: unverified, they only choose the
// words of a refusal that go-oidc has already made.
func (v *Verifier) reason(token string, err error) Reason {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return ReasonExpired
	}
	algs := make([]jose.SignatureAlgorithm, len(v.o.SigningAlgorithms))
	for i, a := range v.o.SigningAlgorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	t, perr := jwt.ParseSigned(token, algs)
	var c jwt.Claims
	if perr != nil || t.UnsafeClaimsWithoutVerification(&c) != nil {
		return ReasonMalformed
	}
	switch {
	case c.Issuer != v.o.Issuer:
		return ReasonIssuer
	case c.NotBefore != nil && c.NotBefore.Time().After(v.o.Now().Add(nbfLeeway)):
		return ReasonNotYetValid
	}
	return ReasonSignature
}

// refreshLimit is the key set client's transport: it lets a request
// through at most once per every, and fails the others at once. go-oidc
// fetches the key set whenever a token's signature does not verify with
// the cached keys (a new key, or a forgery); a failed fetch keeps the
// cache, so tokens signed with cached keys still verify meanwhile.
type refreshLimit struct {
	next  http.RoundTripper
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	last  time.Time // of the last request let through; zero: none yet
}

// errRefreshLimited fails a key set fetch that came too soon.
var errRefreshLimited = errors.New("httpauth: the key set was fetched less than MinKeyRefresh ago")

func (t *refreshLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	now := t.now()
	if !t.last.IsZero() && now.Sub(t.last) < t.every {
		t.mu.Unlock()
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errRefreshLimited
	}
	t.last = now
	t.mu.Unlock()
	return t.next.RoundTrip(req)
}
