package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/httpauth/httpauthtest"
)

const (
	testAudience = "api://durafeed-service-test"
	testTenant   = "72f988bf-86f1-41af-91ab-2d7cd011db47"
)

// TestConfigAuth: the API's authentication and the listen address's
// default, and the refusal to serve an open API beyond loopback.
func TestConfigAuth(t *testing.T) {
	t.Parallel()
	entra := "https://login.microsoftonline.com/" + testTenant + "/v2.0"
	for _, tc := range []struct {
		name                 string
		vars                 map[string]string
		listen, issuer, auth string
		audiences            []string
		none                 bool
	}{
		{"nothing: loopback, open", nil, "127.0.0.1:8080", "", "none (loopback only)", nil, false},
		{"loopback listener", map[string]string{"DURAFEED_LISTEN": "127.0.0.2:9000"}, "127.0.0.2:9000", "", "none (loopback only)", nil, false},
		{"localhost", map[string]string{"DURAFEED_LISTEN": "localhost:0"}, "localhost:0", "", "none (loopback only)", nil, false},
		{"IPv6 loopback", map[string]string{"DURAFEED_LISTEN": "[::1]:8080"}, "[::1]:8080", "", "none (loopback only)", nil, false},
		{"none, on purpose", map[string]string{"DURAFEED_LISTEN": ":8080", "DURAFEED_AUTH": "none"}, ":8080", "", "none (DURAFEED_AUTH=none)", nil, true},
		{"none, default listener", map[string]string{"DURAFEED_AUTH": "none"}, "127.0.0.1:8080", "", "none (DURAFEED_AUTH=none)", nil, true},
		{"Entra ID: every interface", map[string]string{"DURAFEED_AUTH_TENANT_ID": strings.ToUpper(testTenant), "DURAFEED_AUTH_AUDIENCE": "client-id"},
			":8080", entra, "bearer tokens of " + entra, []string{"client-id"}, false},
		{"audiences listed", map[string]string{"DURAFEED_AUTH_TENANT_ID": testTenant, "DURAFEED_AUTH_AUDIENCE": " client-id, api://durafeed ,"},
			":8080", entra, "bearer tokens of " + entra, []string{"client-id", "api://durafeed"}, false},
		{"the issuer wins over the tenant", map[string]string{"DURAFEED_AUTH_TENANT_ID": "not-used", "DURAFEED_AUTH_AUDIENCE": "a",
			"DURAFEED_AUTH_ISSUER": "https://login.microsoftonline.us/t/v2.0", "DURAFEED_LISTEN": "0.0.0.0:80"},
			"0.0.0.0:80", "https://login.microsoftonline.us/t/v2.0", "bearer tokens of https://login.microsoftonline.us/t/v2.0", []string{"a"}, false},
		{"a local issuer", map[string]string{"DURAFEED_AUTH_ISSUER": "http://127.0.0.1:5556", "DURAFEED_AUTH_AUDIENCE": "a"},
			":8080", "http://127.0.0.1:5556", "bearer tokens of http://127.0.0.1:5556", []string{"a"}, false},
	} {
		c, err := configFromEnv(env(tc.vars))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.listen, c.Listen, tc.name)
		require.Equal(t, tc.issuer, c.AuthIssuer, tc.name)
		require.Equal(t, tc.audiences, c.AuthAudiences, tc.name)
		require.Equal(t, tc.none, c.AuthNone, tc.name)
		require.Equal(t, tc.auth, c.apiAuth(), tc.name)
	}

	open := []string{"DURAFEED_AUTH_TENANT_ID", "DURAFEED_AUTH_AUDIENCE", "DURAFEED_AUTH=none", "DURAFEED_LISTEN=127.0.0.1:8080"}
	for _, tc := range []struct {
		vars map[string]string
		want []string
	}{
		{map[string]string{"DURAFEED_LISTEN": ":8080"}, open},
		{map[string]string{"DURAFEED_LISTEN": "0.0.0.0:8080"}, open},
		{map[string]string{"DURAFEED_LISTEN": "[::]:8080"}, open},
		{map[string]string{"DURAFEED_LISTEN": "10.0.0.4:8080"}, open},
		{map[string]string{"DURAFEED_LISTEN": "myhost:8080"}, open},
		{map[string]string{"DURAFEED_LISTEN": "8080"}, open},
		{map[string]string{"DURAFEED_AUTH": "off"}, []string{"DURAFEED_AUTH \"off\""}},
		{map[string]string{"DURAFEED_AUTH_TENANT_ID": "contoso.onmicrosoft.com", "DURAFEED_AUTH_AUDIENCE": "a"}, []string{"DURAFEED_AUTH_TENANT_ID", "GUID"}},
		{map[string]string{"DURAFEED_AUTH_TENANT_ID": testTenant}, []string{"DURAFEED_AUTH_AUDIENCE is required"}},
		{map[string]string{"DURAFEED_AUTH_ISSUER": "https://i.example", "DURAFEED_AUTH_AUDIENCE": " , "}, []string{"DURAFEED_AUTH_AUDIENCE is required"}},
		{map[string]string{"DURAFEED_AUTH_AUDIENCE": "a"}, []string{"DURAFEED_AUTH_AUDIENCE is set without"}},
		{map[string]string{"DURAFEED_AUTH": "none", "DURAFEED_AUTH_TENANT_ID": testTenant, "DURAFEED_AUTH_AUDIENCE": "a"}, []string{"choose one"}},
		{map[string]string{"DURAFEED_AUTH_ISSUER": "http://idp.example", "DURAFEED_AUTH_AUDIENCE": "a"}, []string{"DURAFEED_AUTH_ISSUER", "not https"}},
	} {
		_, err := configFromEnv(env(tc.vars))
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, "%v", tc.vars)
		}
	}
}

// TestOpenAPIBeyondLoopbackExits: the service as a process, on every
// interface without authentication, exits with status 2 and a message
// saying what to set; the image's environment (DURAFEED_LISTEN=:8080)
// alone is such a case.
func TestOpenAPIBeyondLoopbackExits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), hang) // a service that did start is killed
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DURAFEED_SERVICE_CHILD=1", "DURAFEED_LISTEN=:8080", "DURAFEED_AUTH=", "DURAFEED_AUTH_TENANT_ID=",
		"DURAFEED_AUTH_ISSUER=", "DURAFEED_AUTH_AUDIENCE=")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	for _, w := range []string{`DURAFEED_LISTEN ":8080" is not a loopback address and the API has no authentication`,
		"DURAFEED_AUTH_TENANT_ID and DURAFEED_AUTH_AUDIENCE", "DURAFEED_AUTH=none"} {
		require.Contains(t, errOut.String(), w)
	}
}

// TestOpenAPIOnPurposeWarns: DURAFEED_AUTH=none serves the API open,
// with one warning at the start; on loopback without it, no warning.
func TestOpenAPIOnPurposeWarns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars  map[string]string
		warns int
		auth  string
	}{
		{map[string]string{"DURAFEED_AUTH": "none", "DURAFEED_DRAIN": "0s"}, 1, `"api_auth":"none (DURAFEED_AUTH=none)"`},
		{map[string]string{"DURAFEED_DRAIN": "0s"}, 0, `"api_auth":"none (loopback only)"`},
	} {
		logs := &syncBuffer{}
		base, stop := startService(t, tc.vars, zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
			zapcore.AddSync(logs), zapcore.InfoLevel)))
		resp, err := http.Post(base+"/v1/instances", "application/json", strings.NewReader(`{"name":"Greet","instanceId":"open-1"}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "open: no token needed")
		require.NoError(t, stop())
		require.Equal(t, tc.warns, strings.Count(logs.String(), `"msg":"DURAFEED_AUTH=none: the API is open`), "%v", tc.vars)
		require.Contains(t, logs.String(), tc.auth)
	}
}

// call makes a request with a bearer token (none if token is empty).
func call(t *testing.T, method, url, token, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, resp.Header, m
}

func errorCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// TestServiceAuthorization runs the service with a local token issuer:
// every token that is not valid is refused with 401 and creates nothing;
// each role may do what it includes and gets 403 beyond it, writing
// nothing; the probes are open and /metrics needs Durafeed.Reader; no
// token reaches the logs, the caller's object id does at Debug.
func TestServiceAuthorization(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	logs := &syncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.DebugLevel))
	base, stop := startService(t, map[string]string{"DURAFEED_AUTH_ISSUER": iss.URL, "DURAFEED_AUTH_AUDIENCE": "api://another-name," + testAudience,
		"DURAFEED_LOG_LEVEL": "debug", "DURAFEED_DRAIN": "0s"}, log)
	token := func(role, oid string) string {
		return iss.Token(t, httpauthtest.Claims{Audience: []string{testAudience}, ObjectID: oid, AppID: "app-" + oid, Roles: []string{role}})
	}
	reader, operator, admin := token("Durafeed.Reader", "oid-reader"), token("Durafeed.Operator", "oid-operator"), token("Durafeed.Admin", "oid-admin")
	tokens := []string{reader, operator, admin}
	absent := func(id string) {
		t.Helper()
		s, _, _ := call(t, "GET", base+"/v1/instances/"+id, admin, "")
		require.Equal(t, http.StatusNotFound, s, "%s was not created", id)
		_, _, list := call(t, "GET", base+"/v1/instances", admin, "")
		require.NotContains(t, jsonString(t, list), `"`+id+`"`)
	}

	// Tokens that are not valid: 401, nothing created. Each is an admin's
	// token but for the one check it fails.
	adminClaims := func(mutate func(*httpauthtest.Claims)) httpauthtest.Claims {
		c := httpauthtest.Claims{Audience: []string{testAudience}, Roles: []string{"Durafeed.Admin"}}
		if mutate != nil {
			mutate(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name, token, challenge, reason string
	}{
		{"no token", "", `Bearer realm="durafeed"`, "requires a bearer token"},
		{"malformed", "not.a.jwt", `Bearer realm="durafeed", error="invalid_token"`, "malformed"},
		{"wrong issuer", iss.Token(t, adminClaims(func(c *httpauthtest.Claims) { c.Issuer = "https://login.microsoftonline.com/other/v2.0" })),
			`Bearer realm="durafeed", error="invalid_token"`, "another issuer"},
		{"wrong audience", iss.Token(t, adminClaims(func(c *httpauthtest.Claims) { c.Audience = []string{"api://someone-else"} })),
			`Bearer realm="durafeed", error="invalid_token"`, "another audience"},
		{"expired", iss.Token(t, adminClaims(func(c *httpauthtest.Claims) { c.Expiry = time.Now().Add(-time.Second) })),
			`Bearer realm="durafeed", error="invalid_token"`, "expired"},
		{"not yet valid", iss.Token(t, adminClaims(func(c *httpauthtest.Claims) { c.NotBefore = time.Now().Add(time.Hour) })),
			`Bearer realm="durafeed", error="invalid_token"`, "not valid yet"},
		{"signed by another key", iss.SignedBy(t, httpauthtest.NewKey(t, iss.SigningKey().ID), adminClaims(nil)),
			`Bearer realm="durafeed", error="invalid_token"`, "not signed by a key the issuer publishes"},
		{"unknown kid", iss.SignedBy(t, httpauthtest.NewKey(t, "kid-nobody-publishes"), adminClaims(nil)),
			`Bearer realm="durafeed", error="invalid_token"`, "not signed by a key the issuer publishes"},
	} {
		s, h, body := call(t, "POST", base+"/v1/instances", tc.token, `{"name":"Greet","instanceId":"refused"}`)
		require.Equal(t, http.StatusUnauthorized, s, tc.name)
		require.Equal(t, "unauthenticated", errorCode(body), tc.name)
		require.Equal(t, tc.challenge, h.Get("WWW-Authenticate"), tc.name)
		require.Contains(t, jsonString(t, body), tc.reason, tc.name)
		s, _, _ = call(t, "DELETE", base+"/v1/instances/anything?force=true", tc.token, "")
		require.Equal(t, http.StatusUnauthorized, s, tc.name)
		tokens = append(tokens, tc.token)
	}
	absent("refused")

	// Open: the probes. /metrics: readers.
	for _, path := range []string{"/healthz", "/readyz"} {
		s, _, _ := call(t, "GET", base+path, "", "")
		require.Equal(t, http.StatusOK, s, path)
	}
	s, _, _ := call(t, "GET", base+"/metrics", "", "")
	require.Equal(t, http.StatusUnauthorized, s, "/metrics without a token")
	s, _, _ = call(t, "GET", base+"/metrics", reader, "")
	require.Equal(t, http.StatusOK, s, "/metrics for a reader")

	// Reader: reads; 403 on a start, nothing created.
	s, _, _ = call(t, "GET", base+"/v1/instances", reader, "")
	require.Equal(t, http.StatusOK, s)
	s, h, body := call(t, "POST", base+"/v1/instances", reader, `{"name":"Greet","instanceId":"by-reader"}`)
	require.Equal(t, http.StatusForbidden, s)
	require.Equal(t, "forbidden", errorCode(body))
	require.Equal(t, `Bearer realm="durafeed", error="insufficient_scope"`, h.Get("WWW-Authenticate"))
	absent("by-reader")

	// Operator: start, raise, cancel; 403 on a delete and on anything forced.
	s, _, _ = call(t, "POST", base+"/v1/instances", operator, `{"name":"Approval","input":{"item":"laptop"},"instanceId":"buy-1"}`)
	require.Equal(t, http.StatusCreated, s)
	s, _, _ = call(t, "POST", base+"/v1/instances", operator, `{"name":"Approval","input":{"item":"desk"},"instanceId":"buy-2"}`)
	require.Equal(t, http.StatusCreated, s)
	for _, id := range []string{"buy-1", "buy-2"} {
		require.Eventually(t, func() bool {
			s, _, _ := call(t, "GET", base+"/v1/instances/"+id, reader, "")
			return s == http.StatusOK
		}, hang, 10*time.Millisecond)
	}
	s, _, _ = call(t, "POST", base+"/v1/instances/buy-1/events/decision", reader, `{"approved":true}`)
	require.Equal(t, http.StatusForbidden, s, "a reader raises no event")
	s, _, _ = call(t, "POST", base+"/v1/instances/buy-1/events/decision", operator, `{"approved":true,"by":"ada"}`)
	require.Equal(t, http.StatusAccepted, s)
	s, _, body = call(t, "GET", base+"/v1/instances/buy-1?wait=50s", reader, "")
	require.Equal(t, http.StatusOK, s)
	require.Equal(t, "Completed", body["state"])
	s, _, _ = call(t, "POST", base+"/v1/instances/buy-2/cancel", operator, `{"reason":"no"}`)
	require.Equal(t, http.StatusAccepted, s)
	for _, path := range []string{"/v1/instances/buy-1", "/v1/instances/buy-1?force=true", "/v1/instances/buy-2?force=true"} {
		s, _, body = call(t, "DELETE", base+path, operator, "")
		require.Equal(t, http.StatusForbidden, s, path)
		require.Contains(t, jsonString(t, body), "Durafeed.Admin", path)
	}
	s, _, _ = call(t, "GET", base+"/v1/instances/buy-1", reader, "")
	require.Equal(t, http.StatusOK, s, "the refused delete deleted nothing")

	// Admin: delete, and force a running instance's.
	s, _, _ = call(t, "DELETE", base+"/v1/instances/buy-1", admin, "")
	require.Equal(t, http.StatusOK, s)
	s, _, _ = call(t, "POST", base+"/v1/instances", admin, `{"name":"Approval","input":{"item":"chair"},"instanceId":"buy-3"}`)
	require.Equal(t, http.StatusCreated, s)
	require.Eventually(t, func() bool {
		s, _, _ := call(t, "GET", base+"/v1/instances/buy-3", admin, "")
		return s == http.StatusOK
	}, hang, 10*time.Millisecond)
	s, _, body = call(t, "DELETE", base+"/v1/instances/buy-3?force=true", admin, "")
	require.Equal(t, http.StatusOK, s, "%v", body)
	absent("buy-3")

	require.NoError(t, stop())
	out := logs.String()
	for _, tok := range tokens {
		if tok != "" && tok != "not.a.jwt" {
			require.NotContains(t, out, tok, "no token in the logs")
			require.NotContains(t, out, strings.Split(tok, ".")[1], "no claims in the logs")
		}
	}
	require.NotContains(t, out, "eyJ", "no JWT in the logs")
	require.Contains(t, out, `"caller":"oid-operator"`, "the caller's object id at Debug")
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestNotReadyUntilKeysLoad: while the issuer does not answer, the
// replica runs but is not ready and the API answers 503 (a token cannot
// be verified yet), the probes still answer; once the keys load it is
// ready and the token is accepted.
func TestNotReadyUntilKeysLoad(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	release := iss.Hold()
	defer release()
	logs := &syncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.InfoLevel))
	base, stop := launchService(t, map[string]string{"DURAFEED_AUTH_ISSUER": iss.URL, "DURAFEED_AUTH_AUDIENCE": testAudience,
		"DURAFEED_DRAIN": "0s"}, log, &hooks{})
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "not ready until the token signing keys load") }, hang, 10*time.Millisecond,
		"the replica runs")
	operator := iss.Token(t, httpauthtest.Claims{Audience: []string{testAudience}, Roles: []string{"Durafeed.Operator"}})
	s, _, _ := call(t, "GET", base+"/readyz", "", "")
	require.Equal(t, http.StatusServiceUnavailable, s)
	s, _, _ = call(t, "GET", base+"/healthz", "", "")
	require.Equal(t, http.StatusOK, s)
	s, h, body := call(t, "POST", base+"/v1/instances", operator, `{"name":"Greet","instanceId":"early"}`)
	require.Equal(t, http.StatusServiceUnavailable, s)
	require.Equal(t, "unavailable", errorCode(body))
	require.Equal(t, "1", h.Get("Retry-After"))
	require.NotContains(t, logs.String(), `"msg":"ready"`)

	release()
	require.Eventually(t, func() bool { s, _, _ := call(t, "GET", base+"/readyz", "", ""); return s == http.StatusOK }, hang, 10*time.Millisecond)
	s, _, _ = call(t, "POST", base+"/v1/instances", operator, `{"name":"Greet","instanceId":"later"}`)
	require.Equal(t, http.StatusCreated, s)
	s, _, _ = call(t, "GET", base+"/v1/instances/early", operator, "")
	require.Equal(t, http.StatusNotFound, s, "the start refused with 503 created nothing")
	require.NoError(t, stop())
	require.Equal(t, 1, strings.Count(logs.String(), `"msg":"ready"`))
	require.Contains(t, logs.String(), `"msg":"token signing keys loaded"`)
}
