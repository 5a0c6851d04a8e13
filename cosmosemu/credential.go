package cosmosemu

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/google/uuid"
)

// TokenCredential issues tokens for one principal in the shape Microsoft
// Entra ID issues them (a JWT with aud, iss, tid, oid, iat, nbf and exp),
// as an azcore.TokenCredential: a client takes it where it takes an
// azidentity credential (a managed identity's, say), so the whole token
// path runs against the emulator. The tokens are not signed: the
// emulator checks their claims, not signatures. The audience is the
// requested scope without "/.default", as Entra ID sets it.
type TokenCredential struct {
	// TenantID and ObjectID are the tid and oid claims (the principal
	// role assignments name).
	TenantID, ObjectID string
	// TTL is the tokens' lifetime (default one hour).
	TTL time.Duration
}

// GetToken implements azcore.TokenCredential.
func (c TokenCredential) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if len(opts.Scopes) != 1 {
		return azcore.AccessToken{}, errors.New("cosmosemu: TokenCredential wants exactly one scope")
	}
	ttl := c.TTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	now := time.Now()
	exp := now.Add(ttl)
	claims := map[string]any{
		"aud": strings.TrimSuffix(opts.Scopes[0], "/.default"),
		"iss": "https://sts.windows.net/" + c.TenantID + "/",
		"tid": c.TenantID, "oid": c.ObjectID, "sub": c.ObjectID,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": exp.Unix(),
		"uti": uuid.NewString(),
	}
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	tok := enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("unsigned"))
	return azcore.AccessToken{Token: tok, ExpiresOn: exp}, nil
}
