package cosmosemu

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxClockSkew is how far x-ms-date may be from the server clock, as the
// service allows.
const maxClockSkew = 15 * time.Minute

// authenticate verifies the Authorization header the way the service does:
// master-key HMAC-SHA256 over verb, resource type, resource link and date,
// or an Entra ID token checked for structure only (as Microsoft's emulator
// does). rtype and link come from the normalized request path.
//
// With Options.Auth it also refuses key-signed requests when local
// authentication is disabled, and checks a token's audience, tenant,
// issuer and expiry; the principal it returns for a token is then
// authorized per request (authorize).
func (s *Server) authenticate(r *http.Request, rtype, link string) (*principal, *apiError) {
	raw := r.Header.Get("Authorization")
	if raw == "" {
		return nil, newErr(http.StatusUnauthorized, msgAuthMissing)
	}
	decoded, err := url.PathUnescape(raw)
	if err != nil {
		decoded = raw
	}
	fields := map[string]string{}
	for _, part := range strings.Split(decoded, "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	switch strings.ToLower(fields["type"]) {
	case "master":
		if a := s.auth.Load(); a != nil && a.DisableLocalAuth {
			return nil, newErrSub(http.StatusUnauthorized, subStatusLocalAuthDisabled, "Local Authorization is disabled. Use an AAD token to authorize all requests.")
		}
		return nil, s.checkMaster(r, rtype, link, fields["sig"])
	case "aad":
		claims, aerr := checkAADToken(fields["sig"])
		if aerr != nil {
			return nil, aerr
		}
		a := s.auth.Load()
		if a == nil {
			return nil, nil
		}
		return s.checkClaims(a, claims)
	default:
		return nil, newErr(http.StatusUnauthorized, "The input authorization token can't serve the request. Please check that the expected payload is built as per the protocol, and check the key being used. Learn more: https://aka.ms/cosmosdb-tsg-unauthorized")
	}
}

// aadRefusal is the service's answer to a token it does not accept.
func aadRefusal(why string) *apiError {
	return newErr(http.StatusUnauthorized, "Request blocked by Auth: the AAD token is invalid ("+why+"). Learn more: https://aka.ms/cosmosdb-tsg-unauthorized")
}

// checkClaims checks a token's claims against Options.Auth: an expiry,
// an accepted audience, the tenant and its issuer, and an object id (the
// principal roles are assigned to).
func (s *Server) checkClaims(a *AuthOptions, claims map[string]any) (*principal, *apiError) {
	str := func(k string) string { v, _ := claims[k].(string); return v }
	if _, ok := claims["exp"].(float64); !ok {
		return nil, aadRefusal("no expiry")
	}
	audiences := a.Audiences
	if len(audiences) == 0 {
		audiences = []string{"https://cosmos.azure.com"}
		if u, err := url.Parse(s.Endpoint()); err == nil {
			audiences = append(audiences, u.Scheme+"://"+u.Hostname())
		}
	}
	aud := strings.TrimSuffix(str("aud"), "/")
	found := false
	for _, want := range audiences {
		found = found || aud == strings.TrimSuffix(want, "/")
	}
	if !found {
		return nil, aadRefusal("audience " + aud + " is not this account's")
	}
	if a.TenantID != "" && !ofTenant(claims, a.TenantID) {
		return nil, aadRefusal("the token is not of this account's tenant")
	}
	oid := str("oid")
	if oid == "" {
		return nil, aadRefusal("no object id")
	}
	return &principal{oid: oid}, nil
}

func (s *Server) checkMaster(r *http.Request, rtype, link, sig string) *apiError {
	date := r.Header.Get("x-ms-date")
	if date == "" {
		date = r.Header.Get("Date")
	}
	if date == "" {
		return newErr(http.StatusUnauthorized, "The input date header is invalid format. Please pass in RFC 1123 style date format. Learn more: https://aka.ms/cosmosdb-tsg-unauthorized")
	}
	t, err := http.ParseTime(date)
	if err != nil {
		return newErr(http.StatusUnauthorized, "The input date header is invalid format. Please pass in RFC 1123 style date format. Learn more: https://aka.ms/cosmosdb-tsg-unauthorized")
	}
	if d := time.Since(t); d > maxClockSkew || d < -maxClockSkew {
		return newErr(http.StatusUnauthorized, "The authorization token is not valid at the current time. Please create another token and retry (token start time: "+t.UTC().Format(http.TimeFormat)+", current server time: "+time.Now().UTC().Format(http.TimeFormat)+").")
	}
	if rtype == string(ResourceOffer) {
		link = strings.ToLower(link)
	}
	payload := strings.ToLower(r.Method) + "\n" + strings.ToLower(rtype) + "\n" + link + "\n" + strings.ToLower(date) + "\n\n"
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(payload))
	want := mac.Sum(nil)
	got, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, want) {
		shown := strings.ReplaceAll(payload, "\n", "\\n")
		return newErr(http.StatusUnauthorized, "The input authorization token can't serve the request. The wrong key is being used or the expected payload is not built as per the protocol. For more info: https://aka.ms/cosmosdb-tsg-unauthorized. Server used the following payload to sign: '"+shown+"'")
	}
	return nil
}

// Reasons parseToken gives for refusing a token.
const (
	whyExpired     = "token expired"
	whyNotYetValid = "token not yet valid"
)

// checkAADToken accepts any well-formed, unexpired JWT: three base64url
// segments whose first two are JSON objects. Signatures are not verified.
// It returns the token's claims.
func checkAADToken(tok string) (map[string]any, *apiError) {
	claims, why := parseToken(tok)
	if why != "" {
		return nil, aadRefusal(why)
	}
	return claims, nil
}

// parseToken decodes a JWT's claims without verifying its signature, the
// token check the data plane and the ARM surface share: three base64url
// segments whose first two are JSON objects, exp not past and nbf not
// ahead (with maxClockSkew). why is "" for a token that passes, else the
// reason (whyExpired, whyNotYetValid or a malformation).
func parseToken(tok string) (claims map[string]any, why string) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return nil, "malformed token"
	}
	var header map[string]any
	for i, dst := range []*map[string]any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[i], "="))
		if err != nil {
			return nil, "segment is not base64url"
		}
		if err := json.Unmarshal(b, dst); err != nil {
			return nil, "segment is not a JSON object"
		}
	}
	now := time.Now().Unix()
	if exp, ok := claims["exp"].(float64); ok && int64(exp) < now-int64(maxClockSkew/time.Second) {
		return nil, whyExpired
	}
	if nbf, ok := claims["nbf"].(float64); ok && int64(nbf) > now+int64(maxClockSkew/time.Second) {
		return nil, whyNotYetValid
	}
	return claims, ""
}

// ofTenant reports whether a token's claims name tenant: its tid and an
// issuer of that tenant (Entra ID's v1 or v2 form).
func ofTenant(claims map[string]any, tenant string) bool {
	tid, _ := claims["tid"].(string)
	iss, _ := claims["iss"].(string)
	return tid == tenant && (iss == "https://sts.windows.net/"+tenant+"/" || iss == "https://login.microsoftonline.com/"+tenant+"/v2.0")
}
