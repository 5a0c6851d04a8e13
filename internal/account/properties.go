package account

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// accountResource is the part of the data plane's database account
// resource (GET on the endpoint's root) the run reports.
type accountResource struct {
	WritableLocations []struct {
		Name string `json:"name"`
	} `json:"writableLocations"`
	ReadableLocations []struct {
		Name string `json:"name"`
	} `json:"readableLocations"`
	UserConsistencyPolicy struct {
		DefaultConsistencyLevel string `json:"defaultConsistencyLevel"`
	} `json:"userConsistencyPolicy"`
}

// readProperties reads the account's regions and consistency from the data
// plane and, when Resource Manager is reachable, whether it is serverless
// (the data plane does not say; with a key alone, createDatabase learns it
// from the service's refusal of throughput).
func (a *Account) readProperties(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(a.opts.Endpoint, "/")+"/", nil)
	if err != nil {
		return fmt.Errorf("account: endpoint %q: %w", a.opts.Endpoint, err)
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2020-07-15")
	if a.opts.Key != "" {
		sig, err := signKey(a.opts.Key, http.MethodGet, "", "", date)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", sig)
	} else {
		scope := fmt.Sprintf("%s://%s/.default", req.URL.Scheme, req.URL.Hostname())
		tok, err := a.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{scope}})
		if err != nil {
			return fmt.Errorf("account: Entra ID token for %s: %w", scope, err)
		}
		req.Header.Set("Authorization", url.QueryEscape("type=aad&ver=1.0&sig="+tok.Token))
	}
	base := a.baseOptions()
	resp, err := base.Transport.Do(req)
	if err != nil {
		return fmt.Errorf("account: read the account: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("account: read the account: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var r accountResource
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("account: the account resource: %w", err)
	}
	seen := map[string]bool{}
	for _, l := range append(r.WritableLocations, r.ReadableLocations...) {
		if !seen[l.Name] {
			seen[l.Name] = true
			a.info.Regions = append(a.info.Regions, l.Name)
		}
	}
	a.info.Consistency = r.UserConsistencyPolicy.DefaultConsistencyLevel
	if a.arm != nil {
		serverless, err := a.arm.serverless(ctx)
		if err != nil {
			return err
		}
		a.info.Serverless = serverless
	}
	return nil
}

// signKey returns the Authorization header of a key-signed request.
func signKey(key, verb, resourceType, resourceLink, date string) (string, error) {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return "", fmt.Errorf("account: the key is not base64: %w", err)
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte(strings.ToLower(verb) + "\n" + resourceType + "\n" + resourceLink + "\n" + strings.ToLower(date) + "\n\n"))
	return url.QueryEscape("type=master&ver=1.0&sig=" + base64.StdEncoding.EncodeToString(m.Sum(nil))), nil
}
