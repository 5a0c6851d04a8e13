package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/httpapi"
)

// fakeAuth accepts the tokens "reader", "operator", "admin" (a caller
// with that role) and "norole" (a caller with another app's role),
// answers "down" as unavailable, and refuses any other token. It counts
// its calls.
type fakeAuth struct{ calls atomic.Int64 }

func (a *fakeAuth) Authenticate(_ context.Context, token string) (httpapi.Principal, error) {
	a.calls.Add(1)
	role := map[string]string{"reader": "Durafeed.Reader", "operator": "Durafeed.Operator", "admin": "Durafeed.Admin",
		"norole": "Other.Admin"}[token]
	switch {
	case token == "down":
		return httpapi.Principal{}, fmt.Errorf("%w: keys not loaded", httpapi.ErrAuthUnavailable)
	case role == "":
		return httpapi.Principal{}, errors.New("token expired")
	}
	p := httpapi.Principal{ID: token + "-oid", Roles: []string{role}}
	if token == "admin" {
		p.Name = "Ada Admin"
	}
	return p, nil
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

func authFixture(t *testing.T) (*fixture, *fakeAuth) {
	t.Helper()
	auth := &fakeAuth{}
	return newFixture(t, func(o *httpapi.Options) { o.Authenticator = auth }), auth
}

// TestAuthRefusalsWriteNothing: a request without a valid token, or whose
// caller lacks the route's role, is answered 401, 403 or 503 with the
// API's error body before anything is read or written: the store stays
// empty.
func TestAuthRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	f, _ := authFixture(t)
	start := `{"name":"Echo","instanceId":"x","input":1}`
	for _, tc := range []struct {
		method, path, body string
		header             []string
		status             int
		code, challenge    string
	}{
		{"POST", "/v1/instances", start, nil, 401, "unauthenticated", `Bearer realm="durafeed"`},
		{"POST", "/v1/instances", start, []string{"Authorization", "Basic YWRtaW46YWRtaW4="}, 401, "unauthenticated", `Bearer realm="durafeed"`},
		{"POST", "/v1/instances", start, []string{"Authorization", "Bearer"}, 401, "unauthenticated", `Bearer realm="durafeed", error="invalid_token"`},
		{"POST", "/v1/instances", start, bearer("forged"), 401, "unauthenticated", `Bearer realm="durafeed", error="invalid_token"`},
		{"POST", "/v1/instances", start, bearer("down"), 503, "unavailable", ""},
		{"POST", "/v1/instances", start, bearer("norole"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"POST", "/v1/instances", start, bearer("reader"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"POST", "/v1/instances", start, append(bearer("reader"), "Idempotency-Key", "k1"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"POST", "/v1/instances/x/events/go", `{"a":1}`, bearer("reader"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"POST", "/v1/instances/x/cancel", `{}`, bearer("reader"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"POST", "/v1/instances/x/cancel", `{}`, nil, 401, "unauthenticated", `Bearer realm="durafeed"`},
		{"DELETE", "/v1/instances/x", "", bearer("operator"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"DELETE", "/v1/instances/x?force=true", "", bearer("operator"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"GET", "/v1/instances?force=true", "", bearer("operator"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"GET", "/v1/instances", "", nil, 401, "unauthenticated", `Bearer realm="durafeed"`},
		{"GET", "/v1/instances/x", "", bearer("norole"), 403, "forbidden", `Bearer realm="durafeed", error="insufficient_scope"`},
		{"GET", "/v1/instances/x?wait=1s", "", bearer("forged"), 401, "unauthenticated", `Bearer realm="durafeed", error="invalid_token"`},
		{"GET", "/nowhere", "", nil, 401, "unauthenticated", `Bearer realm="durafeed"`},
		{"PUT", "/v1/instances/x", "", nil, 401, "unauthenticated", `Bearer realm="durafeed"`},
	} {
		name := fmt.Sprintf("%s %s %v", tc.method, tc.path, tc.header)
		a := f.do(t, tc.method, tc.path, tc.body, tc.header...)
		require.Equal(t, tc.status, a.status, "%s: %s", name, a.raw)
		require.Equal(t, tc.code, a.code(), name)
		require.Equal(t, tc.challenge, a.header.Get("WWW-Authenticate"), name)
		if tc.status == http.StatusServiceUnavailable {
			require.Equal(t, "1", a.header.Get("Retry-After"), name)
		}
		f.nothingWritten(t)
	}
	a := f.do(t, "POST", "/v1/instances", start, bearer("forged")...)
	require.Contains(t, a.body["error"].(map[string]any)["message"], "token expired", "the Authenticator's reason")
	a = f.do(t, "POST", "/v1/instances", start, bearer("reader")...)
	require.Contains(t, a.body["error"].(map[string]any)["message"], "Durafeed.Operator", "the role needed")
}

// TestRolesAllow: each role may do what it includes, and the probes need
// no token.
func TestRolesAllow(t *testing.T) {
	t.Parallel()
	f, auth := authFixture(t)
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/healthz", "").status)
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/readyz", "").status)
	require.Zero(t, auth.calls.Load(), "the probes ask for no token")

	require.Equal(t, http.StatusOK, f.do(t, "GET", "/v1/instances", "", bearer("reader")...).status)
	require.Equal(t, http.StatusNotFound, f.do(t, "GET", "/v1/instances/w", "", bearer("reader")...).status)
	require.Equal(t, http.StatusNotFound, f.do(t, "GET", "/nowhere", "", bearer("reader")...).status)
	require.Equal(t, http.StatusMethodNotAllowed, f.do(t, "PUT", "/v1/instances/w", "", bearer("reader")...).status)

	// Operator: start, raise, cancel, and read.
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"w"}`, bearer("operator")...).status)
	require.Eventually(t, func() bool {
		a := f.do(t, "GET", "/v1/instances/w", "", bearer("operator")...)
		return a.status == http.StatusOK && a.body["state"] == "Running"
	}, hang, 5*time.Millisecond)
	require.Equal(t, http.StatusAccepted, f.do(t, "POST", "/v1/instances/w/events/go", `"done"`, bearer("operator")...).status)
	a := f.do(t, "GET", "/v1/instances/w?wait=20s", "", bearer("reader")...)
	require.Equal(t, "Completed", a.body["state"], a.raw)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"c"}`, bearer("operator")...).status)
	require.Eventually(t, func() bool { return f.do(t, "GET", "/v1/instances/c", "", bearer("reader")...).status == http.StatusOK }, hang, 5*time.Millisecond)
	require.Equal(t, http.StatusAccepted, f.do(t, "POST", "/v1/instances/c/cancel", `{"reason":"r"}`, bearer("operator")...).status)
	require.Equal(t, http.StatusForbidden, f.do(t, "DELETE", "/v1/instances/w", "", bearer("operator")...).status)
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/v1/instances/w", "", bearer("operator")...).status, "the refused delete deleted nothing")

	// Admin: delete, and force.
	require.Equal(t, http.StatusOK, f.do(t, "DELETE", "/v1/instances/w", "", bearer("admin")...).status)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"r"}`, bearer("admin")...).status)
	require.Eventually(t, func() bool { return f.do(t, "GET", "/v1/instances/r", "", bearer("admin")...).status == http.StatusOK }, hang, 5*time.Millisecond)
	require.Equal(t, http.StatusForbidden, f.do(t, "DELETE", "/v1/instances/r?force=true", "", bearer("operator")...).status)
	a = f.do(t, "DELETE", "/v1/instances/r", "", bearer("admin")...)
	require.Equal(t, "instance_running", a.code(), "past the role check, the API's own rule: force a running instance")
	a = f.do(t, "DELETE", "/v1/instances/r?force=true", "", bearer("admin")...)
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.Equal(t, http.StatusNotFound, f.do(t, "GET", "/v1/instances/r", "", bearer("admin")...).status)
}

func TestPrincipalHas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		roles                   []string
		reader, operator, admin bool
	}{
		{nil, false, false, false},
		{[]string{"Other.Role", "durafeed.admin"}, false, false, false}, // role names are exact
		{[]string{"Durafeed.Reader"}, true, false, false},
		{[]string{"Durafeed.Operator"}, true, true, false},
		{[]string{"Other", "Durafeed.Admin"}, true, true, true},
	} {
		p := httpapi.Principal{Roles: tc.roles}
		require.Equal(t, tc.reader, p.Has(httpapi.RoleReader), "%v", tc.roles)
		require.Equal(t, tc.operator, p.Has(httpapi.RoleOperator), "%v", tc.roles)
		require.Equal(t, tc.admin, p.Has(httpapi.RoleAdmin), "%v", tc.roles)
		require.False(t, p.Has(""), "no role is the empty one")
	}
}

// TestRequireRole: a handler behind RequireRole is reached with the role
// only; without an Authenticator it is the handler itself.
func TestRequireRole(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached.Add(1) })
	srv := httptest.NewServer(httpapi.RequireRole(&fakeAuth{}, httpapi.RoleReader, h))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		token  string
		status int
	}{{"", 401}, {"forged", 401}, {"down", 503}, {"norole", 403}, {"reader", 200}, {"admin", 200}} {
		req, err := http.NewRequest("GET", srv.URL+"/metrics", nil)
		require.NoError(t, err)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, tc.token)
	}
	require.EqualValues(t, 2, reached.Load())
	httpapi.RequireRole(nil, httpapi.RoleAdmin, h).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	require.EqualValues(t, 3, reached.Load(), "no Authenticator: open")
}
