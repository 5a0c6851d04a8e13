package cosmosemu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
)

const manager = "55555555-5555-5555-5555-555555555555"

// armClient is an ARM client of srv's ARM surface, as a tool builds one
// for management.azure.com, authenticated by cred and trusting srv's
// certificate.
func armClient(t *testing.T, srv *cosmosemu.Server, cred azcore.TokenCredential) *arm.Client {
	t.Helper()
	c, err := arm.NewClient("cosmosemu.test", "v1.0.0", cred, &arm.ClientOptions{
		ClientOptions: policy.ClientOptions{
			Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: cloud.AzurePublic.ActiveDirectoryAuthorityHost,
				Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
					cloud.ResourceManager: {Endpoint: srv.ARMEndpoint(), Audience: "https://management.azure.com"},
				}},
			Transport: srv.HTTPClient(),
		},
		DisableRPRegistration: true,
	})
	require.NoError(t, err)
	return c
}

// armPath is the ARM path of account acct's database db, or of its
// container coll when coll is not empty.
func armPath(acct, db, coll string) string {
	p := "/subscriptions/00000000-0000-0000-0000-00000000aaaa/resourceGroups/rg/providers/Microsoft.DocumentDB/databaseAccounts/" + acct
	if db != "" {
		p += "/sqlDatabases/" + db
	}
	if coll != "" {
		p += "/containers/" + coll
	}
	return p
}

func armRequest(ctx context.Context, c *arm.Client, method, path string, body any) (*policy.Request, error) {
	req, err := runtime.NewRequest(ctx, method, runtime.JoinPaths(c.Endpoint(), path))
	if err != nil {
		return nil, err
	}
	q := req.Raw().URL.Query()
	q.Set("api-version", cosmosemu.ARMAPIVersion)
	req.Raw().URL.RawQuery = q.Encode()
	req.Raw().Header.Set("Accept", "application/json")
	if body != nil {
		if err := runtime.MarshalAsJSON(req, body); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// armPut creates or updates a resource as a generated ARM client does:
// 200 or 202, then the long-running-operation poller.
func armPut(ctx context.Context, c *arm.Client, path string, body any) (map[string]any, error) {
	req, err := armRequest(ctx, c, http.MethodPut, path, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.Pipeline().Do(req)
	if err != nil {
		return nil, err
	}
	if !runtime.HasStatusCode(resp, http.StatusOK, http.StatusAccepted) {
		return nil, runtime.NewResponseError(resp)
	}
	p, err := runtime.NewPoller[map[string]any](resp, c.Pipeline(), nil)
	if err != nil {
		return nil, err
	}
	return p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Second})
}

// armDelete deletes a resource as the generated armcosmos client does:
// 202 or 204 (nothing else), then the poller.
func armDelete(ctx context.Context, c *arm.Client, path string) (int, error) {
	req, err := armRequest(ctx, c, http.MethodDelete, path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Pipeline().Do(req)
	if err != nil {
		return 0, err
	}
	if !runtime.HasStatusCode(resp, http.StatusAccepted, http.StatusNoContent) {
		return resp.StatusCode, runtime.NewResponseError(resp)
	}
	p, err := runtime.NewPoller[struct{}](resp, c.Pipeline(), nil)
	if err != nil {
		return resp.StatusCode, err
	}
	_, err = p.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Second})
	return resp.StatusCode, err
}

// armGet reads a resource.
func armGet(ctx context.Context, c *arm.Client, path string) (map[string]any, error) {
	req, err := armRequest(ctx, c, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Pipeline().Do(req)
	if err != nil {
		return nil, err
	}
	if !runtime.HasStatusCode(resp, http.StatusOK) {
		return nil, runtime.NewResponseError(resp)
	}
	var out map[string]any
	return out, runtime.UnmarshalAsJSON(resp, &out)
}

// armCode returns an ARM refusal's status and error code.
func armCode(t *testing.T, err error) (int, string) {
	t.Helper()
	var re *azcore.ResponseError
	require.ErrorAs(t, err, &re)
	return re.StatusCode, re.ErrorCode
}

// dig follows keys through nested JSON objects.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func containerBody(name string, opts map[string]any) map[string]any {
	return map[string]any{"properties": map[string]any{
		"resource": map[string]any{"id": name, "partitionKey": map[string]any{"paths": []string{"/pk"}, "kind": "Hash", "version": 2}, "defaultTtl": -1},
		"options":  opts,
	}}
}

func TestARMCreateUseDelete(t *testing.T) {
	t.Parallel()
	srv := startServer(t, cosmosemu.Options{AccountName: "acct", Auth: &cosmosemu.AuthOptions{TenantID: tenant,
		RoleAssignments: []cosmosemu.RoleAssignment{{PrincipalID: writer, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/"}}}})
	mgr := armClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: manager})
	keyClient, err := srv.NewClient()
	require.NoError(t, err)
	tokClient := tokenClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: writer})
	ctx := context.Background()

	for _, tc := range []struct {
		name                string
		dbOptions, cOptions map[string]any
		wantDB, wantC       any   // ARM options read back; nil: no offer
		manual, autoscale   int32 // the container's throughput as the data plane reads it
	}{
		{name: "none"},
		{name: "manual", cOptions: map[string]any{"throughput": 400}, wantC: map[string]any{"throughput": float64(400)}, manual: 400},
		{name: "autoscale", cOptions: map[string]any{"autoscaleSettings": map[string]any{"maxThroughput": 4000}},
			wantC: map[string]any{"autoscaleSettings": map[string]any{"maxThroughput": float64(4000)}}, autoscale: 4000},
		{name: "shared", dbOptions: map[string]any{"throughput": 1000}, wantDB: map[string]any{"throughput": float64(1000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dbName := "db-" + tc.name
			got, err := armPut(ctx, mgr, armPath("acct", dbName, ""), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": dbName}, "options": tc.dbOptions}})
			require.NoError(t, err)
			require.Equal(t, armPath("acct", dbName, ""), got["id"])
			require.Equal(t, dbName, got["name"])
			require.Equal(t, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases", got["type"])
			require.Equal(t, dbName, dig(got, "properties", "resource", "id"))
			require.NotEmpty(t, dig(got, "properties", "resource", "_rid"))
			require.Equal(t, tc.wantDB, dig(got, "properties", "options"))

			got, err = armPut(ctx, mgr, armPath("acct", dbName, "c"), containerBody("c", tc.cOptions))
			require.NoError(t, err)
			require.Equal(t, armPath("acct", dbName, "c"), got["id"])
			require.Equal(t, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers", got["type"])
			res := dig(got, "properties", "resource").(map[string]any)
			require.Equal(t, "c", res["id"])
			require.Equal(t, []any{"/pk"}, dig(res, "partitionKey", "paths"))
			require.Equal(t, float64(-1), res["defaultTtl"])
			for _, k := range []string{"_rid", "_ts", "_etag"} {
				require.NotEmpty(t, res[k], k)
			}
			require.Equal(t, tc.wantC, dig(got, "properties", "options"))
			read, err := armGet(ctx, mgr, armPath("acct", dbName, "c"))
			require.NoError(t, err)
			require.Equal(t, got, read)

			// The data plane sees the container at once, with its offer,
			// for the key and for a token with a data role.
			pk := azcosmos.NewPartitionKeyString("p")
			kc, err := keyClient.NewContainer(dbName, "c")
			require.NoError(t, err)
			_, err = kc.CreateItem(ctx, pk, []byte(`{"id":"a","pk":"p"}`), nil)
			require.NoError(t, err)
			th, err := kc.ReadThroughput(ctx, nil)
			switch {
			case tc.manual != 0:
				require.NoError(t, err)
				n, ok := th.ThroughputProperties.ManualThroughput()
				require.True(t, ok)
				require.Equal(t, tc.manual, n)
			case tc.autoscale != 0:
				require.NoError(t, err)
				n, ok := th.ThroughputProperties.AutoscaleMaxThroughput()
				require.True(t, ok)
				require.Equal(t, tc.autoscale, n)
			default:
				require.Equal(t, http.StatusNotFound, statusOf(err), "no dedicated offer")
			}
			tc2, err := tokClient.NewContainer(dbName, "c")
			require.NoError(t, err)
			_, err = tc2.CreateItem(ctx, pk, []byte(`{"id":"b","pk":"p"}`), nil)
			require.NoError(t, err)
			_, err = tc2.ReadItem(ctx, pk, "a", nil)
			require.NoError(t, err)

			// Deleting through ARM removes it from the data plane.
			status, err := armDelete(ctx, mgr, armPath("acct", dbName, "c"))
			require.NoError(t, err)
			require.Equal(t, http.StatusAccepted, status)
			_, err = kc.Read(ctx, nil)
			require.Equal(t, http.StatusNotFound, statusOf(err))
			_, err = armGet(ctx, mgr, armPath("acct", dbName, "c"))
			status, code := armCode(t, err)
			require.Equal(t, http.StatusNotFound, status)
			require.Equal(t, "ResourceNotFound", code)
			status, err = armDelete(ctx, mgr, armPath("acct", dbName, "c"))
			require.NoError(t, err)
			require.Equal(t, http.StatusNoContent, status, "already gone")

			status, err = armDelete(ctx, mgr, armPath("acct", dbName, ""))
			require.NoError(t, err)
			require.Equal(t, http.StatusAccepted, status)
			kdb, err := keyClient.NewDatabase(dbName)
			require.NoError(t, err)
			_, err = kdb.Read(ctx, nil)
			require.Equal(t, http.StatusNotFound, statusOf(err))
		})
	}
}

// armRaw sends one ARM request with the given Authorization header (none
// when empty) and returns the status and the error code of the answer.
func armRaw(t *testing.T, srv *cosmosemu.Server, method, pathAndQuery, authz string, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, srv.ARMEndpoint()+pathAndQuery, bytes.NewReader(body))
	require.NoError(t, err)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := srv.HTTPClient().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Code, b
}

func bearer(t *testing.T, cred azcore.TokenCredential, scope string) string {
	t.Helper()
	tok, err := cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{scope}})
	require.NoError(t, err)
	return "Bearer " + tok.Token
}

func TestARMAuthentication(t *testing.T) {
	t.Parallel()
	srv := startServer(t, cosmosemu.Options{Auth: &cosmosemu.AuthOptions{TenantID: tenant, DisableLocalAuth: true, ManagementPrincipals: []string{manager}}})
	arm := "https://management.azure.com/.default"
	good := bearer(t, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: manager}, arm)
	exp := float64(time.Now().Add(time.Hour).Unix())
	claims := func(mut func(claimsCredential)) string {
		c := claimsCredential{"aud": "https://management.azure.com", "iss": "https://sts.windows.net/" + tenant + "/", "tid": tenant, "oid": manager, "exp": exp}
		mut(c)
		return bearer(t, c, arm)
	}
	acct := armPath("cosmosemu", "", "")
	q := "?api-version=" + cosmosemu.ARMAPIVersion
	for _, tc := range []struct {
		name, path, authz string
		status            int
		code              string
	}{
		{"valid", acct + q, good, http.StatusOK, ""},
		{"valid, other audience spelling", acct + q, claims(func(c claimsCredential) { c["aud"] = "https://management.core.windows.net/" }), http.StatusOK, ""},
		{"valid, any api-version", acct + "?api-version=2021-04-15", good, http.StatusOK, ""},
		{"path segments in any case", strings.ToUpper(acct[:len(acct)-len("cosmosemu")]) + "COSMOSEMU" + q, good, http.StatusOK, ""},
		{"no authorization", acct + q, "", http.StatusUnauthorized, "AuthenticationFailed"},
		{"not a bearer token", acct + q, "Basic dXNlcjpwdw==", http.StatusUnauthorized, "AuthenticationFailed"},
		{"malformed token", acct + q, "Bearer abc", http.StatusUnauthorized, "InvalidAuthenticationToken"},
		{"data-plane audience", acct + q, bearer(t, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: manager}, "https://127.0.0.1/.default"), http.StatusUnauthorized, "InvalidAuthenticationTokenAudience"},
		{"other tenant", acct + q, bearer(t, cosmosemu.TokenCredential{TenantID: "66666666-6666-6666-6666-666666666666", ObjectID: manager}, arm), http.StatusUnauthorized, "InvalidAuthenticationTokenTenant"},
		{"expired", acct + q, claims(func(c claimsCredential) { c["exp"] = float64(time.Now().Add(-time.Hour).Unix()) }), http.StatusUnauthorized, "ExpiredAuthenticationToken"},
		{"no object id", acct + q, claims(func(c claimsCredential) { delete(c, "oid") }), http.StatusUnauthorized, "InvalidAuthenticationToken"},
		{"not a manager", acct + q, bearer(t, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: writer}, arm), http.StatusForbidden, "AuthorizationFailed"},
		{"no api-version", acct, good, http.StatusBadRequest, "MissingApiVersionParameter"},
		{"other account", armPath("other", "", "") + q, good, http.StatusNotFound, "ResourceNotFound"},
		{"unserved path", acct + "/listKeys" + q, good, http.StatusNotFound, "InvalidResourceType"},
		{"absent database", armPath("cosmosemu", "nodb", "") + q, good, http.StatusNotFound, "ResourceNotFound"},
	} {
		status, code, body := armRaw(t, srv, http.MethodGet, tc.path, tc.authz, nil)
		require.Equal(t, tc.status, status, "%s: %s", tc.name, body)
		require.Equal(t, tc.code, code, tc.name)
	}
	status, _, _ := armRaw(t, srv, http.MethodPost, acct+q, good, nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)

	// Without ManagementPrincipals any authenticated principal manages.
	srv.SetAuth(&cosmosemu.AuthOptions{TenantID: tenant})
	status, _, body := armRaw(t, srv, http.MethodGet, acct+q, bearer(t, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: writer}, arm), nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
}

func TestARMAccountAndValidation(t *testing.T) {
	t.Parallel()
	var seen atomic.Int64
	count := func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			seen.Add(1)
			return next(ctx, req)
		}
	}
	srv := startServer(t, cosmosemu.Options{Auth: &cosmosemu.AuthOptions{DisableLocalAuth: true}, ConsistencyLevel: "Session",
		Middleware: []cosmosemu.Middleware{count}})
	mgr := armClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: manager})
	ctx := context.Background()

	acct, err := armGet(ctx, mgr, armPath("CosmosEmu", "", ""))
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"id": armPath("cosmosemu", "", ""), "name": "cosmosemu", "type": "Microsoft.DocumentDB/databaseAccounts",
		"location": "southcentralus", "kind": "GlobalDocumentDB",
	}, map[string]any{"id": acct["id"], "name": acct["name"], "type": acct["type"], "location": acct["location"], "kind": acct["kind"]})
	require.Equal(t, "Succeeded", dig(acct, "properties", "provisioningState"))
	require.Equal(t, srv.Endpoint(), dig(acct, "properties", "documentEndpoint"))
	require.Equal(t, "Session", dig(acct, "properties", "consistencyPolicy", "defaultConsistencyLevel"))
	require.Equal(t, []any{}, dig(acct, "properties", "capabilities"))
	require.Equal(t, true, dig(acct, "properties", "disableLocalAuth"))
	require.Equal(t, "South Central US", dig(acct, "properties", "locations").([]any)[0].(map[string]any)["locationName"])

	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", ""), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "db"}}})
	require.NoError(t, err)
	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", ""), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "db"}}})
	require.NoError(t, err, "PUT is create or update")
	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", "c"), containerBody("c", nil))
	require.NoError(t, err)

	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"resource id differs from the path", armPath("cosmosemu", "db", "x"), containerBody("y", nil), http.StatusBadRequest, "BadRequest"},
		{"no resource", armPath("cosmosemu", "db2", ""), map[string]any{"properties": map[string]any{}}, http.StatusBadRequest, "BadRequest"},
		{"database absent", armPath("cosmosemu", "nodb", "c"), containerBody("c", nil), http.StatusNotFound, "ResourceNotFound"},
		{"throughput below 400", armPath("cosmosemu", "db", "x"), containerBody("x", map[string]any{"throughput": 300}), http.StatusBadRequest, "BadRequest"},
		{"autoscale below 1000", armPath("cosmosemu", "db", "x"), containerBody("x", map[string]any{"autoscaleSettings": map[string]any{"maxThroughput": 500}}), http.StatusBadRequest, "BadRequest"},
		{"both throughputs", armPath("cosmosemu", "db", "x"), containerBody("x", map[string]any{"throughput": 400, "autoscaleSettings": map[string]any{"maxThroughput": 4000}}), http.StatusBadRequest, "BadRequest"},
		{"no partition key", armPath("cosmosemu", "db", "x"), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "x"}}}, http.StatusBadRequest, "BadRequest"},
		{"partition key changed", armPath("cosmosemu", "db", "c"), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "c", "partitionKey": map[string]any{"paths": []string{"/other"}, "kind": "Hash"}}}}, http.StatusBadRequest, "BadRequest"},
	} {
		_, err := armPut(ctx, mgr, tc.path, tc.body)
		status, code := armCode(t, err)
		require.Equal(t, tc.status, status, tc.name)
		require.Equal(t, tc.code, code, tc.name)
	}
	_, err = armGet(ctx, mgr, armPath("cosmosemu", "db", "x"))
	status, _ := armCode(t, err)
	require.Equal(t, http.StatusNotFound, status, "no refused create left anything behind")

	// PUT of an existing container replaces its properties as the data
	// plane's replace does.
	body := containerBody("c", nil)
	dig(body, "properties", "resource").(map[string]any)["defaultTtl"] = 60
	got, err := armPut(ctx, mgr, armPath("cosmosemu", "db", "c"), body)
	require.NoError(t, err)
	require.Equal(t, float64(60), dig(got, "properties", "resource", "defaultTtl"))
	require.Zero(t, seen.Load(), "ARM requests do not pass through the middleware")
	srv.SetAuth(nil)
	kc, err := srv.NewClient()
	require.NoError(t, err)
	c, err := kc.NewContainer("db", "c")
	require.NoError(t, err)
	props, err := c.Read(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int32(60), *props.ContainerProperties.DefaultTimeToLive)

	require.NotZero(t, seen.Load(), "data-plane requests do")

	// DELETE answers 202 with both of ARM's polling headers, on the host
	// the request addressed: operationsStatus says Succeeded,
	// operationResults answers 204.
	token := bearer(t, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: manager}, "https://management.azure.com/.default")
	send := func(method, u string) *http.Response {
		req, err := http.NewRequest(method, u, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", token)
		resp, err := srv.HTTPClient().Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	resp := send(http.MethodDelete, srv.ARMEndpoint()+armPath("cosmosemu", "db", "")+"?api-version="+cosmosemu.ARMAPIVersion)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	for header, want := range map[string]int{"Azure-AsyncOperation": http.StatusOK, "Location": http.StatusNoContent} {
		u := resp.Header.Get(header)
		require.True(t, strings.HasPrefix(u, srv.ARMEndpoint()+"/subscriptions/"), "%s: %s", header, u)
		require.Contains(t, u, "api-version="+cosmosemu.ARMAPIVersion)
		poll := send(http.MethodGet, u)
		require.Equal(t, want, poll.StatusCode, header)
		if want == http.StatusOK {
			var v map[string]any
			require.NoError(t, json.NewDecoder(poll.Body).Decode(&v))
			require.Equal(t, "Succeeded", v["status"])
		}
	}
	status, code, _ := armRaw(t, srv, http.MethodGet, "/subscriptions/s/providers/Microsoft.DocumentDB/locations/southcentralus/operationsStatus/nope?api-version=1", token, nil)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "ResourceNotFound", code)
}
