package cosmosemu_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
)

const (
	tenant = "11111111-1111-1111-1111-111111111111"
	writer = "22222222-2222-2222-2222-222222222222"
	reader = "33333333-3333-3333-3333-333333333333"
	nobody = "44444444-4444-4444-4444-444444444444"
)

// rbacServer is an emulator with database "db" and containers "c" and
// "other" (/pk) created with the key, then local authentication disabled
// and roles assigned: writer Data Contributor on container c, reader
// Data Reader on the account.
func rbacServer(t *testing.T) *cosmosemu.Server {
	t.Helper()
	srv, client, _ := newContainer(t)
	db, err := client.NewDatabase("db")
	require.NoError(t, err)
	_, err = db.CreateContainer(context.Background(), azcosmos.ContainerProperties{ID: "other",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2}}, nil)
	require.NoError(t, err)
	srv.SetAuth(&cosmosemu.AuthOptions{DisableLocalAuth: true, TenantID: tenant, AccountName: "acct",
		RoleAssignments: []cosmosemu.RoleAssignment{
			{PrincipalID: writer, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/dbs/db/colls/c"},
			{PrincipalID: reader, RoleDefinitionID: cosmosemu.DataReaderRole, Scope: "/"},
		}})
	return srv
}

func tokenClient(t *testing.T, srv *cosmosemu.Server, cred azcore.TokenCredential) *azcosmos.Client {
	t.Helper()
	c, err := azcosmos.NewClient(srv.Endpoint(), cred, srv.ClientOptions())
	require.NoError(t, err)
	return c
}

func container(t *testing.T, c *azcosmos.Client, name string) *azcosmos.ContainerClient {
	t.Helper()
	cc, err := c.NewContainer("db", name)
	require.NoError(t, err)
	return cc
}

// refusal returns an SDK error's status, substatus and message.
func refusal(t *testing.T, err error) (int, string, string) {
	t.Helper()
	var re *azcore.ResponseError
	require.True(t, errors.As(err, &re), "a service answer: %v", err)
	return re.StatusCode, re.RawResponse.Header.Get("x-ms-substatus"), err.Error()
}

func TestKeysRefusedWhenLocalAuthDisabled(t *testing.T) {
	t.Parallel()
	srv := rbacServer(t)
	client, err := srv.NewClient()
	require.NoError(t, err)
	_, err = container(t, client, "c").ReadItem(context.Background(), azcosmos.NewPartitionKeyString("p"), "x", nil)
	status, sub, msg := refusal(t, err)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "5202", sub)
	require.Contains(t, msg, "Local Authorization is disabled. Use an AAD token to authorize all requests.")
}

func TestRoleAssignments(t *testing.T) {
	t.Parallel()
	srv := rbacServer(t)
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	w := container(t, tokenClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: writer}), "c")
	r := container(t, tokenClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: reader}), "c")

	// The contributor does everything on its container.
	_, err := w.CreateItem(ctx, pk, []byte(`{"id":"a","pk":"p","n":1}`), nil)
	require.NoError(t, err)
	_, err = w.UpsertItem(ctx, pk, []byte(`{"id":"b","pk":"p"}`), nil)
	require.NoError(t, err)
	var ops azcosmos.PatchOperations
	ops.AppendSet("/n", 2)
	_, err = w.PatchItem(ctx, pk, "a", ops, nil)
	require.NoError(t, err)
	b := w.NewTransactionalBatch(pk)
	b.DeleteItem("b", nil)
	b.CreateItem([]byte(`{"id":"c","pk":"p"}`), nil)
	res, err := w.ExecuteTransactionalBatch(ctx, b, nil)
	require.NoError(t, err)
	require.True(t, res.Success)
	_, err = w.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	pager := w.NewQueryItemsPager("SELECT * FROM c", pk, nil)
	_, err = pager.NextPage(ctx)
	require.NoError(t, err)

	// The reader reads and queries, and may not write: 403, 5301, the action named.
	_, err = r.ReadItem(ctx, pk, "a", nil)
	require.NoError(t, err)
	_, err = r.NewQueryItemsPager("SELECT * FROM c", pk, nil).NextPage(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		call   func() error
		action string
	}{
		{"create", func() error { _, err := r.CreateItem(ctx, pk, []byte(`{"id":"z","pk":"p"}`), nil); return err }, cosmosemu.ActionItemsCreate},
		{"patch", func() error { _, err := r.PatchItem(ctx, pk, "a", ops, nil); return err }, cosmosemu.ActionItemsReplace},
		{"delete", func() error { _, err := r.DeleteItem(ctx, pk, "a", nil); return err }, cosmosemu.ActionItemsDelete},
		{"batch", func() error {
			b := r.NewTransactionalBatch(pk)
			b.UpsertItem([]byte(`{"id":"y","pk":"p"}`), nil)
			_, err := r.ExecuteTransactionalBatch(ctx, b, nil)
			return err
		}, cosmosemu.ActionItemsUpsert},
	} {
		status, sub, msg := refusal(t, tc.call())
		require.Equal(t, http.StatusForbidden, status, tc.name)
		require.Equal(t, "5301", sub, tc.name)
		require.Contains(t, msg, "principal ["+reader+"] does not have required RBAC permissions to perform action ["+tc.action+"]", tc.name)
	}
	_, err = w.ReadItem(ctx, pk, "z", nil)
	require.Error(t, err, "nothing the reader tried was written")

	// The contributor's scope is its container; a principal without an
	// assignment gets nothing.
	other := container(t, tokenClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: writer}), "other")
	status, sub, _ := refusal(t, func() error { _, err := other.CreateItem(ctx, pk, []byte(`{"id":"a","pk":"p"}`), nil); return err }())
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "5301", sub)
	n := container(t, tokenClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: nobody}), "c")
	status, sub, msg := refusal(t, func() error { _, err := n.ReadItem(ctx, pk, "a", nil); return err }())
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "5301", sub)
	require.Contains(t, msg, "principal ["+nobody+"]")
}

func TestManagementRefusedToTokens(t *testing.T) {
	t.Parallel()
	srv := rbacServer(t)
	ctx := context.Background()
	client := tokenClient(t, srv, cosmosemu.TokenCredential{TenantID: tenant, ObjectID: writer})
	_, err := client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "new"}, nil)
	status, sub, msg := refusal(t, err)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "5300", sub)
	require.Contains(t, msg, "Request blocked by Auth acct : The given request [POST /dbs] cannot be authorized by AAD token in data plane.")
	db, err := client.NewDatabase("db")
	require.NoError(t, err)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "x", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}}}, nil)
	status, sub, _ = refusal(t, err)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "5300", sub)
	_, err = container(t, client, "c").Delete(ctx, nil)
	status, sub, _ = refusal(t, err)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "5300", sub)
	// Reading the container's properties is metadata, which the role
	// grants, and so is listing databases (a query on the databases feed).
	_, err = container(t, client, "c").Read(ctx, nil)
	require.NoError(t, err)
	pager := client.NewQueryDatabasesPager("SELECT * FROM c", nil)
	page, err := pager.NextPage(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, page.Databases)
}

// claimsCredential issues a token with exactly the given claims.
type claimsCredential map[string]any

func (c claimsCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	return azcore.AccessToken{Token: enc(map[string]string{"alg": "RS256"}) + "." + enc(map[string]any(c)) + ".sig", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

func TestTokenClaimsChecked(t *testing.T) {
	t.Parallel()
	srv := rbacServer(t)
	host := "https://127.0.0.1"
	exp := float64(time.Now().Add(time.Hour).Unix())
	good := func() claimsCredential {
		return claimsCredential{"aud": host, "iss": "https://sts.windows.net/" + tenant + "/", "tid": tenant, "oid": writer, "exp": exp}
	}
	for _, tc := range []struct {
		name   string
		mutate func(claimsCredential)
		want   string
	}{
		{"valid", func(claimsCredential) {}, ""},
		{"cosmos audience", func(c claimsCredential) { c["aud"] = "https://cosmos.azure.com" }, ""},
		{"other audience", func(c claimsCredential) { c["aud"] = "https://storage.azure.com" }, "audience"},
		{"other tenant", func(c claimsCredential) { c["tid"] = "55555555-5555-5555-5555-555555555555" }, "tenant"},
		{"issuer of another tenant", func(c claimsCredential) { c["iss"] = "https://sts.windows.net/x/" }, "tenant"},
		{"no expiry", func(c claimsCredential) { delete(c, "exp") }, "no expiry"},
		{"expired", func(c claimsCredential) { c["exp"] = float64(time.Now().Add(-time.Hour).Unix()) }, "expired"},
		{"no object id", func(c claimsCredential) { delete(c, "oid") }, "object id"},
	} {
		c := good()
		tc.mutate(c)
		_, err := container(t, tokenClient(t, srv, c), "c").ReadItem(context.Background(), azcosmos.NewPartitionKeyString("p"), "x", nil)
		status, _, msg := refusal(t, err)
		if tc.want == "" {
			require.Equal(t, http.StatusNotFound, status, "%s: authorized, the item is missing: %s", tc.name, msg)
			continue
		}
		require.Equal(t, http.StatusUnauthorized, status, tc.name)
		require.Contains(t, msg, tc.want, tc.name)
	}
}

// TestPatchBodyAsBareArray: a patch body that is a bare array of
// operations (as other SDKs send it) is accepted, as the service accepts
// it; a malformed one is refused with 400.
func TestPatchBodyAsBareArray(t *testing.T) {
	t.Parallel()
	srv, _, cc := newContainer(t, "/pk")
	ctx := context.Background()
	_, err := cc.CreateItem(ctx, azcosmos.NewPartitionKeyString("p"), []byte(`{"id":"a","pk":"p","n":1}`), nil)
	require.NoError(t, err)
	link := "dbs/db/colls/c/docs/a"
	h := map[string]string{"x-ms-documentdb-partitionkey": `["p"]`, "Content-Type": "application/json_patch+json"}
	resp := rawRequest(t, srv, http.MethodPatch, "/"+link, "docs", link, h, []byte(`[{"op":"set","path":"/n","value":5}]`))
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	got, err := cc.ReadItem(ctx, azcosmos.NewPartitionKeyString("p"), "a", nil)
	require.NoError(t, err)
	require.Contains(t, string(got.Value), `"n":5`)
	resp = rawRequest(t, srv, http.MethodPatch, "/"+link, "docs", link, h, []byte(`[{"op":"set","path":`))
	require.Equal(t, http.StatusBadRequest, resp.Status)
}
