package provider

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
)

// instanceOwnedBy returns an instance name whose slot p owns.
func instanceOwnedBy(t *testing.T, p *Provider, prefix string) string {
	t.Helper()
	owned := p.ev().Owned()
	for i := range 10_000 {
		inst := fmt.Sprintf("%s-%d", prefix, i)
		if owned.Contains(slots.Of(inst)) {
			return inst
		}
	}
	require.FailNow(t, "no instance name found in the replica's slots")
	return ""
}

// dueWork counts the due wakeups of p's worker hub.
func dueWork(p *Provider) int {
	_, work := p.ev().Pending()
	n := 0
	for _, w := range work.Pending {
		if w.Due {
			n++
		}
	}
	return n
}

// TestBusyReplicaIgnoresOverflowHint: a replica follows another's
// overflow hint (more due items than fetches, all of which the owner
// could take) only once it has no due work of its own; its own items
// come first even when they arrive after the hint, and then it helps.
func TestBusyReplicaIgnoresOverflowHint(t *testing.T) {
	t.Parallel()
	container := freshContainer("busy-helper")
	cfg := replicaConfig(container)
	cfg.joinEagerly = true
	cfgA, cfgB := cfg, cfg
	cfgA.ReplicaID, cfgB.ReplicaID = "a", "b"
	a := openProvider(t, cfgA)
	b := openProvider(t, cfgB)
	require.Eventually(t, func() bool {
		return ownedOnce(a, b) && ownedCount(a) > 0 && ownedCount(b) > 0 && a.ev().Positioned() && b.ev().Positioned()
	}, hang, 5*time.Millisecond)
	ctx := context.Background()
	instA, instB := instanceOwnedBy(t, a, "a"), instanceOwnedBy(t, b, "b")
	enqueue := func(inst string, id uint64) {
		require.NoError(t, a.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: id, Name: "A", Input: "{}"}))
	}

	// b has one item of its own waiting; a, which never fetches, has
	// three (more than its one fetcher) and hints at them.
	enqueue(instB, 1)
	require.Eventually(t, func() bool { return dueWork(b) == 1 }, hang, time.Millisecond)
	for id := uint64(1); id <= 3; id++ {
		enqueue(instA, id)
	}
	require.Eventually(t, func() bool { return slices.Contains(b.ev().Hinting(), "a") }, hang, 5*time.Millisecond, "b sees a's hint")
	// An item of b's own arrives after the hint.
	enqueue(instB, 2)
	require.Eventually(t, func() bool { return dueWork(b) == 2 }, hang, time.Millisecond)

	for range 2 {
		got, err := b.FetchWorkItem(ctx, time.Minute, time.Second, nil, durable.DefaultOnlyTags())
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, instB, got.Item.(durable.ActivityExecute).Instance, "b takes its own items first")
		require.Zero(t, b.ev().Stats().HintScans, "no scan for a while b has work of its own")
	}
	// Now idle, b helps.
	got, err := b.FetchWorkItem(ctx, time.Minute, hang, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.NotNil(t, got)
	require.Equal(t, instA, got.Item.(durable.ActivityExecute).Instance)
	require.Positive(t, b.ev().Stats().HintScans)
}
