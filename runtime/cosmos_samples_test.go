package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime/runtimetest"
	"github.com/durafeed/durafeed/store"
)

// TestSamplesOnCosmos runs every end-to-end sample on the Cosmos DB
// provider against an embedded cosmosemu with 4 physical partitions: one
// emulator for the test, one container per sample, and every provider a
// sample opens (one per runtime replica and client) on that container,
// in the provider's default (event-driven) mode.
func TestSamplesOnCosmos(t *testing.T) {
	t.Parallel()
	emu, err := cosmosemu.Start(context.Background(), cosmosemu.Options{PartitionCount: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })

	factory := func(tb testing.TB) func() durable.Provider {
		container := "sample-" + randomSuffix(tb)
		return func() durable.Provider {
			p, err := provider.New(context.Background(), provider.Config{
				Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), Database: "samples", Container: container,
					ClientOptions: emu.ClientOptions()},
				Polling: &polling.Options{OrchestrationDispatchers: 4, WorkerDispatchers: 4},
			})
			require.NoError(tb, err)
			tb.Cleanup(func() { _ = p.Close() })
			return p
		}
	}
	runtimetest.RunSamples(t, factory)
}

func randomSuffix(tb testing.TB) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(tb, err)
	return hex.EncodeToString(b)
}
