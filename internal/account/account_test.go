package account_test

import (
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/emuproc"
)

// accountID names the emulator's account in Resource Manager.
const accountID = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/tests/providers/Microsoft.DocumentDB/databaseAccounts/" +
	cosmosemu.DefaultAccountName

func start(t *testing.T, opts cosmosemu.Options) *cosmosemu.Server {
	t.Helper()
	srv, err := cosmosemu.Start(t.Context(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// TestOpenProvisionedAndServerless: on a provisioned account the run's
// database gets the shared throughput asked for; on a serverless one the
// service's refusal of throughput is recognised and the database created
// without. Either way Info reports the account, containers can be created
// and deleted, the meter sees the requests, and Close deletes the
// database.
func TestOpenProvisionedAndServerless(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		serverless bool
		throughput account.Throughput
		want       string
	}{
		{"provisioned, default", false, account.Throughput{}, "autoscale up to 10000 RU/s"},
		{"provisioned, manual", false, account.Throughput{Manual: 400}, "400 RU/s manual"},
		{"serverless", true, account.Throughput{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := start(t, cosmosemu.Options{Serverless: tt.serverless, Region: "West Europe", ConsistencyLevel: "Session"})
			a, err := account.Open(t.Context(), account.Options{Endpoint: srv.Endpoint(), Key: srv.Key(),
				ClientOptions: srv.ClientOptions, Throughput: tt.throughput, Prefix: "test"})
			require.NoError(t, err)
			info := a.Info()
			require.Equal(t, tt.serverless, info.Serverless)
			require.Equal(t, tt.want, info.Throughput)
			require.Equal(t, []string{"West Europe"}, info.Regions)
			require.Equal(t, "Session", info.Consistency)
			require.Equal(t, "key", info.Auth)
			require.True(t, strings.HasPrefix(info.Database, "test-"), info.Database)

			require.NoError(t, a.CreateContainer(t.Context(), "c"))
			cc, err := a.Client().NewContainer(a.Database(), "c")
			require.NoError(t, err)
			_, err = cc.Read(t.Context(), nil)
			require.NoError(t, err)
			require.NotEmpty(t, a.Meter().Container(a.Database(), "c"))
			require.Positive(t, a.Meter().Total().Requests)
			require.NoError(t, a.DeleteContainer(t.Context(), "c"))
			require.NoError(t, a.DeleteContainer(t.Context(), "c"), "a container already gone")

			cl, err := srv.NewClient()
			require.NoError(t, err)
			require.Equal(t, []string{info.Database}, emuproc.Databases(t, cl))
			require.NoError(t, a.Close())
			require.Empty(t, emuproc.Databases(t, cl))
		})
	}
}

// TestOpenWithEntraID: with a token credential the run's database and
// containers are managed through Resource Manager (the data plane
// refuses management to tokens), serverless is read from the account's
// capabilities there, and without the account's resource id Open says
// what is missing.
func TestOpenWithEntraID(t *testing.T) {
	t.Parallel()
	const tenant, principal = "t-1", "p-1"
	for _, serverless := range []bool{false, true} {
		srv := start(t, cosmosemu.Options{Serverless: serverless, Auth: &cosmosemu.AuthOptions{DisableLocalAuth: true, TenantID: tenant,
			RoleAssignments: []cosmosemu.RoleAssignment{{PrincipalID: principal, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/"}}}})
		cred := cosmosemu.TokenCredential{TenantID: tenant, ObjectID: principal}
		opts := account.Options{Endpoint: srv.Endpoint(), Credential: cred, ClientOptions: srv.ClientOptions}
		_, err := account.Open(t.Context(), opts)
		require.ErrorContains(t, err, "COSMOS_ACCOUNT_ID")

		opts.AccountID, opts.ARMEndpoint = accountID, srv.ARMEndpoint()
		a, err := account.Open(t.Context(), opts)
		require.NoError(t, err)
		require.Equal(t, "Entra ID", a.Info().Auth)
		require.Equal(t, serverless, a.Info().Serverless)
		require.NoError(t, a.CreateContainer(t.Context(), "c"))
		cc, err := a.Client().NewContainer(a.Database(), "c")
		require.NoError(t, err)
		_, err = cc.CreateItem(t.Context(), azcosmos.NewPartitionKeyString("i"), []byte(`{"id":"x","instanceId":"i"}`), nil)
		require.NoError(t, err)
		require.NoError(t, a.Close())
		cl, err := azcosmos.NewClient(srv.Endpoint(), cred, srv.ClientOptions())
		require.NoError(t, err)
		require.Empty(t, emuproc.Databases(t, cl))
	}
}
