package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

// TestPayloadLimitsOnCosmos: every input the HTTP API accepts can finish
// on the Cosmos DB provider, and a turn that cannot be written for its
// size fails its orchestration at once, with the limit in the error and
// without the payload, instead of running again until it is poisoned.
func TestPayloadLimitsOnCosmos(t *testing.T) {
	t.Parallel()
	emu, err := cosmosemu.Start(context.Background(), cosmosemu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Close() })
	p, err := provider.New(context.Background(), provider.Config{
		Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), Database: "limits", Container: "limits",
			ClientOptions: emu.ClientOptions()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	reg := runtime.NewRegistry()
	runtime.RegisterOrchestration(reg, "Echo", func(ctx *runtime.OrchestrationContext, in json.RawMessage) (json.RawMessage, error) {
		return in, nil
	})
	var tripled atomic.Int32
	runtime.RegisterOrchestration(reg, "Triple", func(ctx *runtime.OrchestrationContext, in string) (string, error) {
		tripled.Add(1)
		return strings.Repeat(in, 3), nil
	})
	// A turn with an 800 KiB payload is slow under the race detector on a
	// loaded machine: locks long enough that it is not taken for lost.
	rt := start(t, p, reg, func(o *runtime.Options) {
		o.OrchestratorLockTimeout, o.WorkerLockTimeout = time.Minute, time.Minute
	})
	c := rt.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // catches hangs only
	defer cancel()

	// An input of the largest stored size the API accepts, plain and
	// quote-heavy (a JSON string of quotes: each is \" in the input,
	// eight bytes stored), echoed as output.
	limit := httpapi.DefaultMaxInputBytes
	plain, _ := json.Marshal(strings.Repeat("x", limit-16))
	quoted, _ := json.Marshal(strings.Repeat(`"`, (limit-16)/8))
	for id, in := range map[string][]byte{"plain": plain, "quoted": quoted} {
		require.LessOrEqual(t, httpapi.StoredSize(string(in)), limit, id)
		require.Greater(t, httpapi.StoredSize(string(in)), limit-64, id)
		require.NoError(t, c.StartOrchestrationRaw(ctx, id, "Echo", string(in)))
		st, err := c.WaitForOrchestration(ctx, id)
		require.NoError(t, err)
		require.Equal(t, runtime.StateCompleted, st.State, "%s: %v", id, st.Failure)
		require.Equal(t, string(in), st.Output, id)
	}

	// An output three times its input does not fit the commit batch: the
	// orchestration fails on its first run, naming the limit.
	in := strings.Repeat("y", 400_000)
	require.NoError(t, c.StartOrchestration(ctx, "triple", "Triple", in))
	st, err := c.WaitForOrchestration(ctx, "triple")
	require.NoError(t, err)
	require.Equal(t, runtime.StateFailed, st.State)
	require.NotNil(t, st.Failure)
	msg := st.Failure.DisplayMessage()
	require.Contains(t, msg, "the limit is")
	require.NotContains(t, msg, "yyyy", "no payload in the error")
	require.Less(t, len(msg), 2000)
	require.Equal(t, int32(1), tripled.Load(), "failed at once, not run again")
	info, err := p.GetInstanceInfo(ctx, "triple")
	require.NoError(t, err)
	require.Equal(t, durable.StatusFailed, info.Status)
}
