package runtime_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/runtime/runtimetest"
	"github.com/durafeed/durafeed/store"
)

const (
	rbacTenant      = "11111111-1111-1111-1111-111111111111"
	rbacContributor = "22222222-2222-2222-2222-222222222222" // the service's user-assigned identity
	rbacReader      = "33333333-3333-3333-3333-333333333333"
)

// rbacEmulator is an emulator set up as the Bicep deployment leaves an
// account: the database and containers created beforehand (here with the
// key), then local authentication disabled, the contributor holding
// Cosmos DB Built-in Data Contributor on each container and the reader
// Data Reader.
func rbacEmulator(t *testing.T, containers ...string) *cosmosemu.Server {
	t.Helper()
	emu, err := cosmosemu.Start(context.Background(), cosmosemu.Options{PartitionCount: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	for _, c := range containers {
		_, err := store.New(context.Background(), store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), Database: "samples",
			Container: c, ClientOptions: emu.ClientOptions()})
		require.NoError(t, err)
	}
	// As infra/bicep assigns them: one assignment per container, scoped to
	// that container.
	var assignments []cosmosemu.RoleAssignment
	for _, c := range containers {
		scope := "/dbs/samples/colls/" + c
		assignments = append(assignments,
			cosmosemu.RoleAssignment{PrincipalID: rbacContributor, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: scope},
			cosmosemu.RoleAssignment{PrincipalID: rbacReader, RoleDefinitionID: cosmosemu.DataReaderRole, Scope: scope})
	}
	emu.SetAuth(&cosmosemu.AuthOptions{DisableLocalAuth: true, TenantID: rbacTenant, RoleAssignments: assignments})
	return emu
}

// entraProvider opens a provider as the deployed service does: Entra ID
// (a managed-identity-shaped token for principal), no key, no container
// creation.
func entraProvider(t testing.TB, emu *cosmosemu.Server, container, principal string) (*provider.Provider, error) {
	return provider.New(context.Background(), provider.Config{
		Store: store.Options{Endpoint: emu.Endpoint(), Credential: cosmosemu.TokenCredential{TenantID: rbacTenant, ObjectID: principal},
			Database: "samples", Container: container, ClientOptions: emu.ClientOptions()},
		Polling: &polling.Options{OrchestrationDispatchers: 4, WorkerDispatchers: 4},
	})
}

// TestSamplesWithEntraID runs every end-to-end sample on the Cosmos DB
// provider authenticated as a principal holding Data Contributor, with
// keys disabled and the containers made beforehand: no control-plane
// call, and the lease documents created through the data plane.
func TestSamplesWithEntraID(t *testing.T) {
	t.Parallel()
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("sample-%d", i)
	}
	emu := rbacEmulator(t, names...)
	var next atomic.Int64
	factory := func(tb testing.TB) func() durable.Provider {
		i := next.Add(1) - 1
		require.Less(tb, i, int64(len(names)), "more samples than containers made beforehand")
		return func() durable.Provider {
			p, err := entraProvider(tb, emu, names[i], rbacContributor)
			require.NoError(tb, err)
			tb.Cleanup(func() { _ = p.Close() })
			return p
		}
	}
	runtimetest.RunSamples(t, factory)
}

// TestEntraIDReaderCannotStart: a principal with Data Reader only cannot
// start an orchestration: the error names the missing permission, and
// nothing is written. A key client is refused, with the service's
// message; and a container that does not exist is named as missing.
func TestEntraIDReaderCannotStart(t *testing.T) {
	t.Parallel()
	emu := rbacEmulator(t, "c")
	ctx := context.Background()
	p, err := entraProvider(t, emu, "c", rbacReader)
	require.NoError(t, err, "reading the container's metadata is the reader's")
	t.Cleanup(func() { _ = p.Close() })
	err = runtime.NewClient(p).StartOrchestration(ctx, "i-1", "Hello", "x")
	require.Error(t, err)
	require.ErrorIs(t, err, durable.ErrPermanent)
	require.ErrorContains(t, err, "Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers/items/create")

	w, err := entraProvider(t, emu, "c", rbacContributor)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	admin, _ := w.Admin()
	d, err := admin.GetQueueDepths(ctx)
	require.NoError(t, err)
	require.Equal(t, durable.QueueDepths{}, d, "nothing half-written")
	ids, err := admin.ListInstances(ctx)
	require.NoError(t, err)
	require.Empty(t, ids)

	_, err = provider.New(ctx, provider.Config{Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), Database: "samples",
		Container: "c", ClientOptions: emu.ClientOptions()}})
	require.ErrorContains(t, err, "Local Authorization is disabled")

	// A container no assignment covers is refused before anything is
	// known of it, as the service refuses it; one that the identity's
	// scope covers but that does not exist is named as missing.
	_, err = entraProvider(t, emu, "missing", rbacContributor)
	require.ErrorContains(t, err, `the identity may not read container "missing" in database "samples"`)
	require.ErrorContains(t, err, "Microsoft.DocumentDB/databaseAccounts/readMetadata")
	emu.SetAuth(&cosmosemu.AuthOptions{DisableLocalAuth: true, TenantID: rbacTenant, RoleAssignments: []cosmosemu.RoleAssignment{
		{PrincipalID: rbacContributor, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/dbs/samples"}}})
	_, err = entraProvider(t, emu, "missing", rbacContributor)
	require.ErrorContains(t, err, `container "missing" in database "samples" does not exist`)
}
