package cosmosemu_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
)

// useIdentityEndpoint makes azidentity's managed identity the App Service
// one at endpoint with the header secret for the rest of the test (which
// must not be parallel), clearing the variables that would select
// another credential or identity.
func useIdentityEndpoint(t *testing.T, endpoint, header string) {
	t.Helper()
	for _, k := range []string{"AZURE_TOKEN_CREDENTIALS", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET",
		"AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_USERNAME", "AZURE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE",
		"IDENTITY_SERVER_THUMBPRINT", "MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT"} {
		t.Setenv(k, "") // restored after the test
		require.NoError(t, os.Unsetenv(k))
	}
	t.Setenv("IDENTITY_ENDPOINT", endpoint)
	t.Setenv("IDENTITY_HEADER", header)
}

// claimsOf decodes a JWT's claims.
func claimsOf(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(b, &c))
	return c
}

// identityServer is an emulator with Entra ID enforced (no keys), whose
// managed identity oid may manage it through ARM and holds Data
// Contributor on the account.
func identityServer(t *testing.T, oid string) *cosmosemu.Server {
	t.Helper()
	return startServer(t, cosmosemu.Options{
		Auth: &cosmosemu.AuthOptions{TenantID: tenant, DisableLocalAuth: true, ManagementPrincipals: []string{oid},
			RoleAssignments: []cosmosemu.RoleAssignment{{PrincipalID: oid, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/"}}},
		Identity: &cosmosemu.IdentityOptions{Header: "s3cret", ObjectID: oid},
	})
}

// useBothPlanes creates a database and container through ARM with cred,
// then writes and reads an item through the data plane with cred: the path
// a tool on Azure Container Apps takes.
func useBothPlanes(t *testing.T, srv *cosmosemu.Server, cred azcore.TokenCredential) {
	t.Helper()
	ctx := context.Background()
	mgr := armClient(t, srv, cred)
	_, err := armPut(ctx, mgr, armPath("cosmosemu", "db", ""), map[string]any{"properties": map[string]any{"resource": map[string]any{"id": "db"}}})
	require.NoError(t, err)
	_, err = armPut(ctx, mgr, armPath("cosmosemu", "db", "c"), containerBody("c", map[string]any{"autoscaleSettings": map[string]any{"maxThroughput": 1000}}))
	require.NoError(t, err)
	client, err := azcosmos.NewClient(srv.Endpoint(), cred, srv.ClientOptions())
	require.NoError(t, err)
	c, err := client.NewContainer("db", "c")
	require.NoError(t, err)
	pk := azcosmos.NewPartitionKeyString("p")
	_, err = c.CreateItem(ctx, pk, []byte(`{"id":"a","pk":"p"}`), nil)
	require.NoError(t, err)
	_, err = c.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	status, err := armDelete(ctx, mgr, armPath("cosmosemu", "db", ""))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, status)
}

// TestIdentityManagedIdentityCredential: azidentity's
// ManagedIdentityCredential, configured by IDENTITY_ENDPOINT and
// IDENTITY_HEADER only, gets tokens from the emulator that both planes
// accept. Each credential names a fresh client id: MSAL caches managed
// identity tokens process-wide by client id and resource.
func TestIdentityManagedIdentityCredential(t *testing.T) {
	oid := uuid.NewString()
	srv := identityServer(t, oid)
	useIdentityEndpoint(t, srv.IdentityEndpoint(), "s3cret")
	require.Equal(t, strings.TrimSuffix(srv.Endpoint(), "/")+"/_emulator/identity/token", srv.IdentityEndpoint())
	cred, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
		ClientOptions: azcore.ClientOptions{Transport: srv.HTTPClient()}, ID: azidentity.ClientID(uuid.NewString())})
	require.NoError(t, err)
	tok, err := cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{"https://127.0.0.1/.default"}})
	require.NoError(t, err)
	claims := claimsOf(t, tok.Token)
	require.Equal(t, "https://127.0.0.1", claims["aud"])
	require.Equal(t, oid, claims["oid"])
	require.Equal(t, tenant, claims["tid"], "the Auth tenant by default")
	useBothPlanes(t, srv, cred)

	// A wrong header is refused (401), and the credential says so.
	useIdentityEndpoint(t, srv.IdentityEndpoint(), "wrong")
	bad, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{
		ClientOptions: azcore.ClientOptions{Transport: srv.HTTPClient()}, ID: azidentity.ClientID(uuid.NewString())})
	require.NoError(t, err)
	_, err = bad.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{"https://127.0.0.1/.default"}})
	require.ErrorContains(t, err, "401")
}

// TestIdentityDefaultAzureCredential: DefaultAzureCredential, with
// nothing but the environment an App Service or Container Apps host sets,
// reaches the emulator's identity endpoint.
func TestIdentityDefaultAzureCredential(t *testing.T) {
	oid := uuid.NewString()
	srv := identityServer(t, oid)
	useIdentityEndpoint(t, srv.IdentityEndpoint(), "s3cret")
	t.Setenv("AZURE_CLIENT_ID", uuid.NewString()) // a user-assigned identity, and a fresh MSAL cache key
	cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
		ClientOptions: azcore.ClientOptions{Transport: srv.HTTPClient()}})
	require.NoError(t, err)
	tok, err := cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{"https://management.azure.com/.default"}})
	require.NoError(t, err)
	require.Equal(t, "https://management.azure.com", claimsOf(t, tok.Token)["aud"])
	useBothPlanes(t, srv, cred)
}

func TestIdentityEndpointRefusals(t *testing.T) {
	t.Parallel()
	_, err := cosmosemu.Start(context.Background(), cosmosemu.Options{Identity: &cosmosemu.IdentityOptions{ObjectID: writer}})
	require.Error(t, err, "a header is required")

	srv := startServer(t, cosmosemu.Options{Identity: &cosmosemu.IdentityOptions{Header: "s3cret", ObjectID: writer, TenantID: tenant}})
	call := func(method, query string, header string) (int, map[string]any) {
		req, err := http.NewRequest(method, srv.IdentityEndpoint()+query, nil)
		require.NoError(t, err)
		if header != "" {
			req.Header.Set("X-IDENTITY-HEADER", header)
		}
		resp, err := srv.HTTPClient().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return resp.StatusCode, v
	}
	q := "?api-version=2019-08-01&resource=https://127.0.0.1"
	status, v := call(http.MethodGet, q+"&client_id=abc", "s3cret")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "Bearer", v["token_type"])
	require.Equal(t, "https://127.0.0.1", v["resource"])
	require.Equal(t, "abc", v["client_id"])
	require.IsType(t, "", v["expires_on"], "Unix seconds as a string")
	claims := claimsOf(t, v["access_token"].(string))
	require.Equal(t, writer, claims["oid"])
	require.Equal(t, tenant, claims["tid"])

	for _, tc := range []struct {
		name, method, query, header string
		status                      int
	}{
		{"no header", http.MethodGet, q, "", http.StatusBadRequest},
		{"wrong header", http.MethodGet, q, "nope", http.StatusUnauthorized},
		{"no resource", http.MethodGet, "?api-version=2019-08-01", "s3cret", http.StatusBadRequest},
		{"old api-version", http.MethodGet, "?api-version=2017-09-01&resource=x", "s3cret", http.StatusBadRequest},
		{"another identity", http.MethodGet, q + "&object_id=" + reader, "s3cret", http.StatusBadRequest},
		{"not GET", http.MethodPost, q, "s3cret", http.StatusMethodNotAllowed},
	} {
		status, v := call(tc.method, tc.query, tc.header)
		require.Equal(t, tc.status, status, tc.name)
		require.Equal(t, float64(tc.status), v["statusCode"], tc.name)
		require.NotEmpty(t, v["message"], tc.name)
	}

	// Without Options.Identity there is no endpoint.
	none := startServer(t, cosmosemu.Options{})
	require.Empty(t, none.IdentityEndpoint())
	status, _ = adminCall(t, none, http.MethodGet, "/_emulator/identity/token"+q, "")
	require.Equal(t, http.StatusNotFound, status)
}
