package account

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	armpolicy "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// armAPIVersion is the Microsoft.DocumentDB api-version of the management
// requests (the Bicep's; infra/bicep).
const armAPIVersion = "2025-04-15"

const defaultARM = "https://management.azure.com"

// armClient manages the run's database and containers through Azure
// Resource Manager, with azcore's ARM pipeline (bearer token, retries,
// long-running operations).
type armClient struct {
	c        *arm.Client
	endpoint string
	account  string // the account's resource id, without a trailing slash
}

func newARMClient(o Options, cred azcore.TokenCredential) (*armClient, error) {
	endpoint := strings.TrimSuffix(o.ARMEndpoint, "/")
	if endpoint == "" {
		endpoint = defaultARM
	}
	audience := o.ARMAudience
	if audience == "" {
		audience = defaultARM
	}
	id := strings.TrimSuffix(o.AccountID, "/")
	if !strings.HasPrefix(id, "/subscriptions/") || !strings.Contains(strings.ToLower(id), "/providers/microsoft.documentdb/databaseaccounts/") {
		return nil, fmt.Errorf("account: COSMOS_ACCOUNT_ID %q is not an account's resource id (/subscriptions/…/resourceGroups/…/providers/Microsoft.DocumentDB/databaseAccounts/…)", o.AccountID)
	}
	opts := &armpolicy.ClientOptions{DisableRPRegistration: true}
	opts.Cloud = cloud.Configuration{Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
		cloud.ResourceManager: {Endpoint: endpoint, Audience: audience}}}
	if o.ClientOptions != nil {
		if base := o.ClientOptions(); base != nil && base.Transport != nil {
			opts.Transport = base.Transport
		}
	}
	c, err := arm.NewClient("durafeed-account", "v1.0.0", cred, opts)
	if err != nil {
		return nil, fmt.Errorf("account: the Resource Manager client: %w", err)
	}
	return &armClient{c: c, endpoint: endpoint, account: id}, nil
}

func (c *armClient) databasePath(db string) string { return c.account + "/sqlDatabases/" + db }

// do sends one management request and waits for its operation to end.
func (c *armClient) do(ctx context.Context, method, path string, body any, ok ...int) (*http.Response, error) {
	req, err := runtime.NewRequest(ctx, method, c.endpoint+path)
	if err != nil {
		return nil, err
	}
	q := req.Raw().URL.Query()
	q.Set("api-version", armAPIVersion)
	req.Raw().URL.RawQuery = q.Encode()
	if body != nil {
		if err := runtime.MarshalAsJSON(req, body); err != nil {
			return nil, err
		}
	}
	resp, err := c.c.Pipeline().Do(req)
	if err != nil {
		return nil, err
	}
	if !runtime.HasStatusCode(resp, ok...) {
		return nil, runtime.NewResponseError(resp)
	}
	if resp.StatusCode == http.StatusAccepted || (method == http.MethodPut && resp.StatusCode == http.StatusCreated) {
		p, err := runtime.NewPoller[json.RawMessage](resp, c.c.Pipeline(), nil)
		if err != nil {
			return nil, err
		}
		if _, err := p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: 2 * time.Second}); err != nil {
			return nil, fmt.Errorf("account: %s %s: %w", method, path, err)
		}
	}
	return resp, nil
}

func (c *armClient) serverless(ctx context.Context) (bool, error) {
	resp, err := c.do(ctx, http.MethodGet, c.account, nil, http.StatusOK)
	if err != nil {
		return false, fmt.Errorf("account: read the account from Resource Manager: %w", err)
	}
	var acct struct {
		Properties struct {
			Capabilities []struct {
				Name string `json:"name"`
			} `json:"capabilities"`
		} `json:"properties"`
	}
	if err := runtime.UnmarshalAsJSON(resp, &acct); err != nil {
		return false, err
	}
	for _, cp := range acct.Properties.Capabilities {
		if strings.EqualFold(cp.Name, "EnableServerless") {
			return true, nil
		}
	}
	return false, nil
}

func (c *armClient) putDatabase(ctx context.Context, db string, t Throughput, serverless bool) error {
	options := map[string]any{}
	if !serverless {
		if t.Manual > 0 {
			options["throughput"] = t.Manual
		} else {
			options["autoscaleSettings"] = map[string]any{"maxThroughput": t.AutoscaleMax}
		}
	}
	body := map[string]any{"properties": map[string]any{"resource": map[string]any{"id": db}, "options": options}}
	if _, err := c.do(ctx, http.MethodPut, c.databasePath(db), body, http.StatusOK, http.StatusCreated, http.StatusAccepted); err != nil {
		return fmt.Errorf("account: create database %q through Resource Manager: %w", db, err)
	}
	return nil
}

func (c *armClient) putContainer(ctx context.Context, db string, p azcosmos.ContainerProperties) error {
	pk := map[string]any{"paths": p.PartitionKeyDefinition.Paths, "kind": string(p.PartitionKeyDefinition.Kind), "version": p.PartitionKeyDefinition.Version}
	res := map[string]any{"id": p.ID, "partitionKey": pk}
	if p.DefaultTimeToLive != nil {
		res["defaultTtl"] = *p.DefaultTimeToLive
	}
	if p.IndexingPolicy != nil {
		res["indexingPolicy"] = p.IndexingPolicy
	}
	body := map[string]any{"properties": map[string]any{"resource": res, "options": map[string]any{}}}
	if _, err := c.do(ctx, http.MethodPut, c.databasePath(db)+"/containers/"+p.ID, body, http.StatusOK, http.StatusCreated, http.StatusAccepted); err != nil {
		return fmt.Errorf("account: create container %q through Resource Manager: %w", p.ID, err)
	}
	return nil
}

func (c *armClient) delete(ctx context.Context, path string) error {
	if _, err := c.do(ctx, http.MethodDelete, path, nil, http.StatusOK, http.StatusAccepted, http.StatusNoContent, http.StatusNotFound); err != nil {
		return fmt.Errorf("account: delete %s through Resource Manager: %w", path, err)
	}
	return nil
}
