package httpauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/httpauth"
	"github.com/durafeed/durafeed/httpauth/httpauthtest"
)

// hang bounds waits that only catch hangs.
const hang = 30 * time.Second

const audience = "api://durafeed-test"

// clock is a settable clock that starts at the real time.
type clock struct{ ahead atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *clock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// loaded returns a verifier of iss with its keys loaded.
func loaded(t *testing.T, iss *httpauthtest.Issuer, mutate func(*httpauth.Options)) *httpauth.Verifier {
	t.Helper()
	o := httpauth.Options{Issuer: iss.URL, Audiences: []string{"other-api", audience}}
	if mutate != nil {
		mutate(&o)
	}
	v, err := httpauth.New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	require.NoError(t, v.Load(ctx))
	require.True(t, v.Ready())
	return v
}

func reason(t *testing.T, err error) httpauth.Reason {
	t.Helper()
	var te *httpauth.TokenError
	require.ErrorAs(t, err, &te)
	return te.Reason
}

// TestAuthenticate: a valid token gives its caller and roles; every
// invalid one is refused with the check it failed, in words that hold no
// claim.
func TestAuthenticate(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	v := loaded(t, iss, nil)
	ctx := context.Background()

	p, err := v.Authenticate(ctx, iss.Token(t, httpauthtest.Claims{Audience: []string{audience}, ObjectID: "oid-1", AppID: "app-1",
		Roles: []string{"Durafeed.Reader", "Other.Role"}}))
	require.NoError(t, err)
	require.Equal(t, httpapi.Principal{ID: "oid-1", App: "app-1", Roles: []string{"Durafeed.Reader", "Other.Role"}}, p)
	require.True(t, p.Has(httpapi.RoleReader))
	require.False(t, p.Has(httpapi.RoleOperator))
	_, err = v.Authenticate(ctx, iss.Token(t, httpauthtest.Claims{Audience: []string{"unrelated", "other-api"}}))
	require.NoError(t, err, "any accepted audience")

	other := httpauthtest.NewKey(t, iss.SigningKey().ID) // the published kid, another key
	stranger := httpauthtest.NewKey(t, "key-unknown")
	hs, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: []byte("0123456789abcdef0123456789abcdef")}, nil)
	require.NoError(t, err)
	hsToken, err := jwt.Signed(hs).Claims(map[string]any{"iss": iss.URL, "aud": audience, "exp": time.Now().Add(time.Hour).Unix()}).Serialize()
	require.NoError(t, err)
	good := func(c httpauthtest.Claims) httpauthtest.Claims {
		if c.Audience == nil {
			c.Audience = []string{audience}
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		token string
		want  httpauth.Reason
	}{
		{"empty", "", httpauth.ReasonMalformed},
		{"not a JWT", "not-a-token", httpauth.ReasonMalformed},
		{"three garbage parts", "a.b.c", httpauth.ReasonMalformed},
		{"HS256, not accepted", hsToken, httpauth.ReasonMalformed},
		{"wrong issuer", iss.Token(t, good(httpauthtest.Claims{Issuer: "https://evil.example/v2.0"})), httpauth.ReasonIssuer},
		{"wrong audience", iss.Token(t, httpauthtest.Claims{Audience: []string{"api://evil-audience"}}), httpauth.ReasonAudience},
		{"no audience", iss.Token(t, httpauthtest.Claims{}), httpauth.ReasonAudience},
		{"expired", iss.Token(t, good(httpauthtest.Claims{Expiry: time.Now().Add(-time.Minute)})), httpauth.ReasonExpired},
		{"not yet valid", iss.Token(t, good(httpauthtest.Claims{NotBefore: time.Now().Add(10 * time.Minute)})), httpauth.ReasonNotYetValid},
		{"signed by another key under the published kid", iss.SignedBy(t, other, good(httpauthtest.Claims{})), httpauth.ReasonSignature},
		{"signed by an unknown key", iss.SignedBy(t, stranger, good(httpauthtest.Claims{})), httpauth.ReasonSignature},
		{"tampered payload", tamper(t, iss.Token(t, good(httpauthtest.Claims{Roles: []string{"Durafeed.Reader"}}))), httpauth.ReasonSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Authenticate(ctx, tc.token)
			require.Error(t, err)
			require.Equal(t, httpapi.Principal{}, p)
			require.Equal(t, tc.want, reason(t, err))
			require.False(t, errors.Is(err, httpapi.ErrAuthUnavailable))
			for _, claim := range []string{"evil", "oid", "test-subject", "0000000a"} {
				require.NotContains(t, err.Error(), claim, "no claim in the refusal")
			}
		})
	}
}

// tamper swaps a token's payload for one granting Durafeed.Admin, and
// keeps its signature.
func tamper(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(raw, &claims))
	claims["roles"] = []string{"Durafeed.Admin"}
	raw, err = json.Marshal(claims)
	require.NoError(t, err)
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(raw) + "." + parts[2]
}

func TestNotReadyUntilLoaded(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	release := iss.Hold()
	defer release()
	v, err := httpauth.New(httpauth.Options{Issuer: iss.URL, Audiences: []string{audience}})
	require.NoError(t, err)
	loadDone := make(chan error, 1)
	go func() { loadDone <- v.Load(context.Background()) }()

	token := iss.Token(t, httpauthtest.Claims{Audience: []string{audience}, Roles: []string{"Durafeed.Admin"}})
	require.False(t, v.Ready())
	_, err = v.Authenticate(context.Background(), token)
	require.ErrorIs(t, err, httpapi.ErrAuthUnavailable, "a valid token is not refused as invalid: it cannot be verified yet")
	var te *httpauth.TokenError
	require.False(t, errors.As(err, &te))

	release()
	select {
	case <-v.Loaded():
	case <-time.After(hang):
		t.Fatal("the keys never loaded")
	}
	require.NoError(t, <-loadDone)
	require.True(t, v.Ready())
	p, err := v.Authenticate(context.Background(), token)
	require.NoError(t, err)
	require.True(t, p.Has(httpapi.RoleAdmin))
	require.NoError(t, v.Load(context.Background()), "loaded already")
}

// TestLoadRetries: failed attempts are retried, each logged as a warning,
// until the keys load; an issuer that never answers as it should keeps
// the verifier not ready until Load's context ends.
func TestLoadRetries(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	iss.Fail(3)
	core, logs := observer.New(zapcore.InfoLevel)
	v := loaded(t, iss, func(o *httpauth.Options) {
		o.RetryInterval, o.Logger = time.Millisecond, zap.New(core)
	})
	require.Len(t, logs.FilterLevelExact(zapcore.WarnLevel).All(), 3, "one warning per failed attempt (discovery or keys)")
	require.Len(t, logs.FilterMessage("token signing keys loaded").All(), 1)

	// A discovery document naming another issuer (here: the issuer's URL
	// with a trailing slash, which the document does not have).
	core, logs = observer.New(zapcore.InfoLevel)
	v, err := httpauth.New(httpauth.Options{Issuer: iss.URL + "/", Audiences: []string{audience}, RetryInterval: time.Millisecond,
		Logger: zap.New(core)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Load(ctx) }()
	require.Eventually(t, func() bool { return logs.FilterLevelExact(zapcore.WarnLevel).Len() >= 2 }, hang, time.Millisecond)
	require.Contains(t, logs.FilterLevelExact(zapcore.WarnLevel).All()[0].ContextMap()["error"], "issuer")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.False(t, v.Ready())
}

// TestKeyRotation: after the issuer starts signing with a new key, a
// token naming it makes the key set be fetched again and is accepted;
// tokens naming uncached keys refetch at most once per MinKeyRefresh.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	var clk clock
	v := loaded(t, iss, func(o *httpauth.Options) { o.Now = clk.now })
	claims := httpauthtest.Claims{Audience: []string{audience}, Roles: []string{"Durafeed.Operator"}}
	ctx := context.Background()
	_, err := v.Authenticate(ctx, iss.Token(t, claims))
	require.NoError(t, err)
	fetches := iss.KeyFetches()

	clk.advance(httpauth.DefaultMinKeyRefresh)
	iss.Rotate(t, "key-2")
	p := accepted(t, v, iss.Token(t, claims))
	require.True(t, p.Has(httpapi.RoleOperator))
	require.Equal(t, fetches+1, iss.KeyFetches(), "the new key is fetched")

	// A rotation within MinKeyRefresh of the last fetch: refused until
	// the limit has passed, with no fetch meanwhile.
	iss.Rotate(t, "key-3")
	tok3 := iss.Token(t, claims)
	_, err = v.Authenticate(ctx, tok3)
	require.Equal(t, httpauth.ReasonSignature, reason(t, err))
	require.Equal(t, fetches+1, iss.KeyFetches())
	clk.advance(httpauth.DefaultMinKeyRefresh)
	accepted(t, v, tok3)
	require.Equal(t, fetches+2, iss.KeyFetches())

	// The keys fetched before still verify.
	_, err = v.Authenticate(ctx, iss.SignedBy(t, iss.SigningKey(), claims))
	require.NoError(t, err)
}

// accepted waits until v accepts token, which it refuses meanwhile only
// as not signed by a published key: go-oidc hands a fetch's result to the
// verifications waiting for it, and to one that comes before the fetch is
// forgotten, so a verification right after a fetch may see that fetch's
// keys instead of making its own.
func accepted(t *testing.T, v *httpauth.Verifier, token string) httpapi.Principal {
	t.Helper()
	var p httpapi.Principal
	require.Eventually(t, func() bool {
		var err error
		p, err = v.Authenticate(context.Background(), token)
		if err != nil {
			require.Equal(t, httpauth.ReasonSignature, reason(t, err))
		}
		return err == nil
	}, hang, time.Millisecond)
	return p
}

// TestForgedTokensDoNotHammerTheIssuer: a burst of tokens naming made-up
// keys, or forging a published key's signature, costs the issuer at most
// one key set fetch per MinKeyRefresh, and valid tokens still verify.
func TestForgedTokensDoNotHammerTheIssuer(t *testing.T) {
	t.Parallel()
	iss := httpauthtest.NewIssuer(t)
	frozen := time.Now() // the burst is "within MinKeyRefresh" however long a loaded machine takes
	v := loaded(t, iss, func(o *httpauth.Options) { o.Now = func() time.Time { return frozen } })
	claims := httpauthtest.Claims{Audience: []string{audience}, Roles: []string{"Durafeed.Admin"}}
	ctx := context.Background()
	valid := iss.Token(t, claims)
	_, err := v.Authenticate(ctx, valid) // caches the keys
	require.NoError(t, err)
	before := iss.KeyFetches()

	forger := httpauthtest.NewKey(t, "forger")
	var forged []string
	for i := range 50 {
		forger.ID = fmt.Sprintf("made-up-%d", i)
		if i%2 == 1 {
			forger.ID = iss.SigningKey().ID
		}
		forged = append(forged, iss.SignedBy(t, forger, claims))
	}
	var wg sync.WaitGroup
	for _, tok := range forged {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.Authenticate(ctx, tok)
			require.Equal(t, httpauth.ReasonSignature, reason(t, err))
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, iss.KeyFetches()-before, 1, "at most one fetch within MinKeyRefresh")
	_, err = v.Authenticate(ctx, valid)
	require.NoError(t, err, "the cached keys still verify")
}

func TestEntraIssuer(t *testing.T) {
	t.Parallel()
	got, err := httpauth.EntraIssuer("72F988BF-86F1-41AF-91AB-2D7CD011DB47")
	require.NoError(t, err)
	require.Equal(t, "https://login.microsoftonline.com/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0", got)
	for _, bad := range []string{"", "common", "contoso.onmicrosoft.com", "{72f988bf-86f1-41af-91ab-2d7cd011db47}",
		"urn:uuid:72f988bf-86f1-41af-91ab-2d7cd011db47"} {
		_, err := httpauth.EntraIssuer(bad)
		require.ErrorContains(t, err, "GUID", bad)
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	ok := []string{"https://login.microsoftonline.com/t/v2.0", "http://127.0.0.1:8080", "http://localhost:1/x", "http://[::1]:2"}
	for _, iss := range ok {
		require.NoError(t, httpauth.Options{Issuer: iss, Audiences: []string{"a"}}.Validate(), iss)
	}
	for _, tc := range []struct {
		o    httpauth.Options
		want string
	}{
		{httpauth.Options{Audiences: []string{"a"}}, "issuer"},
		{httpauth.Options{Issuer: "http://issuer.example", Audiences: []string{"a"}}, "not https"},
		{httpauth.Options{Issuer: "http://10.0.0.1", Audiences: []string{"a"}}, "not https"},
		{httpauth.Options{Issuer: "https://i.example/?q=1", Audiences: []string{"a"}}, "query"},
		{httpauth.Options{Issuer: "login.microsoftonline.com", Audiences: []string{"a"}}, "absolute"},
		{httpauth.Options{Issuer: "https://i.example"}, "audience"},
		{httpauth.Options{Issuer: "https://i.example", Audiences: []string{" a"}}, "audience"},
	} {
		require.ErrorContains(t, tc.o.Validate(), tc.want, "%+v", tc.o)
		_, err := httpauth.New(tc.o)
		require.Error(t, err)
	}
}
