// Package httpauthtest is a local OpenID Connect token issuer for tests
// of APIs behind package httpauth: an httptest server publishing a
// discovery document and a key set, and RS256 access tokens shaped like
// Entra ID's v2.0 ones (iss, aud, exp, nbf, iat, oid, azp, roles), signed
// with RSA keys generated for the test.
//
//	iss := httpauthtest.NewIssuer(t)
//	v, _ := httpauth.New(httpauth.Options{Issuer: iss.URL, Audiences: []string{"api://test"}})
//	tok := iss.Token(t, httpauthtest.Claims{Audience: []string{"api://test"}, Roles: []string{"Durafeed.Reader"}})
//
// The issuer can rotate its signing key, sign with keys it does not
// publish, hold or fail its answers, and counts the key set's fetches.
package httpauthtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"
)

// Key is a signing key and its key id.
type Key struct {
	ID      string
	Private *rsa.PrivateKey
}

// NewKey generates a 2048-bit RSA key named kid.
func NewKey(t testing.TB, kid string) Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return Key{ID: kid, Private: k}
}

// Issuer is a running local issuer. Its methods are safe for concurrent
// use.
type Issuer struct {
	// URL is the issuer's URL: its tokens' iss, and the base of its
	// discovery document (URL + "/.well-known/openid-configuration").
	URL string

	mu        sync.Mutex
	published []Key // the key set; the last one signs
	fetches   int   // key set requests answered
	failing   int   // requests still to answer with 503
	hold      chan struct{}
}

// NewIssuer starts an issuer with one signing key ("key-1"); the test's
// cleanup stops it.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	i := &Issuer{published: []Key{NewKey(t, "key-1")}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if !i.gate(w, r) {
			return
		}
		writeJSON(w, map[string]any{"issuer": i.URL, "jwks_uri": i.URL + "/keys",
			"authorization_endpoint": i.URL + "/authorize", "token_endpoint": i.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"RS256"}, "response_types_supported": []string{"code"},
			"subject_types_supported": []string{"pairwise"}})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		if !i.gate(w, r) {
			return
		}
		i.mu.Lock()
		i.fetches++
		set := jose.JSONWebKeySet{}
		for _, k := range i.published {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.Private.PublicKey, KeyID: k.ID, Algorithm: "RS256", Use: "sig"})
		}
		i.mu.Unlock()
		writeJSON(w, set)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	i.URL = srv.URL
	return i
}

// gate holds a request while Hold's hold lasts and fails it while Fail's
// count lasts; it reports whether to answer.
func (i *Issuer) gate(w http.ResponseWriter, r *http.Request) bool {
	i.mu.Lock()
	hold := i.hold
	i.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return false
		}
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.failing > 0 {
		i.failing--
		http.Error(w, `{"error":"temporarily_unavailable"}`, http.StatusServiceUnavailable)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Hold makes the issuer's answers wait until release is called.
func (i *Issuer) Hold() (release func()) {
	c := make(chan struct{})
	i.mu.Lock()
	i.hold = c
	i.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			i.mu.Lock()
			i.hold = nil
			i.mu.Unlock()
			close(c)
		})
	}
}

// Fail makes the issuer answer its next n requests with 503.
func (i *Issuer) Fail(n int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.failing = n
}

// KeyFetches returns how many times the key set was served.
func (i *Issuer) KeyFetches() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.fetches
}

// Rotate publishes a new signing key named kid, beside the others, and
// signs with it from now on; it returns the key.
func (i *Issuer) Rotate(t testing.TB, kid string) Key {
	t.Helper()
	k := NewKey(t, kid)
	i.mu.Lock()
	defer i.mu.Unlock()
	i.published = append(i.published, k)
	return k
}

// SigningKey returns the key the issuer signs with.
func (i *Issuer) SigningKey() Key {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.published[len(i.published)-1]
}

// Claims are a token's claims. Zero fields take defaults: Issuer the
// issuer's URL, Expiry an hour from now, NotBefore and IssuedAt a minute
// ago, ObjectID and Subject fixed test values.
type Claims struct {
	Issuer    string
	Audience  []string
	Subject   string
	ObjectID  string
	AppID     string
	Roles     []string
	Expiry    time.Time
	NotBefore time.Time
	IssuedAt  time.Time
}

// Token returns an access token with claims c signed with the issuer's
// signing key.
func (i *Issuer) Token(t testing.TB, c Claims) string {
	t.Helper()
	return i.SignedBy(t, i.SigningKey(), c)
}

// SignedBy returns an access token with claims c signed with k, which
// the issuer may or may not publish.
func (i *Issuer) SignedBy(t testing.TB, k Key, c Claims) string {
	t.Helper()
	now := time.Now()
	def := func(v, d time.Time) time.Time {
		if v.IsZero() {
			return d
		}
		return v
	}
	if c.Issuer == "" {
		c.Issuer = i.URL
	}
	if c.Subject == "" {
		c.Subject = "test-subject"
	}
	if c.ObjectID == "" {
		c.ObjectID = "00000000-0000-0000-0000-00000000000a"
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.Private, KeyID: k.ID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(t, err)
	claims := map[string]any{"iss": c.Issuer, "aud": c.Audience, "sub": c.Subject, "oid": c.ObjectID, "ver": "2.0",
		"exp": jwt.NewNumericDate(def(c.Expiry, now.Add(time.Hour))),
		"nbf": jwt.NewNumericDate(def(c.NotBefore, now.Add(-time.Minute))),
		"iat": jwt.NewNumericDate(def(c.IssuedAt, now.Add(-time.Minute)))}
	if c.AppID != "" {
		claims["azp"] = c.AppID
	}
	if c.Roles != nil {
		claims["roles"] = c.Roles
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	require.NoError(t, err, "signing with %s", k.ID)
	return tok
}
