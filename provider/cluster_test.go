package provider

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
)

// TestInspectCluster: an event-driven replica describes the leases (who
// holds which slots), the replicas with their hosts and heartbeats, and
// its feed figures; a view is served again for a second; polling mode
// has no leases and says so.
func TestInspectCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	container := freshContainer("cluster")
	part := "$leases-" + randomID()
	cfg := func(id string) testCfg {
		c := eventConfig(container)
		c.ReplicaID, c.leasePartition, c.LeaseBlocks, c.joinEagerly = id, part, 4, true
		return c
	}
	a := openProvider(t, cfg("ra"))
	b := openProvider(t, cfg("rb"))

	var v durable.ClusterView
	require.Eventually(t, func() bool {
		var err error
		v, err = a.InspectCluster(ctx)
		require.NoError(t, err)
		held := map[string]int{}
		for _, l := range v.Leases {
			held[l.Owner]++
		}
		live := 0
		for _, r := range v.Replicas {
			if r.Live && !r.LastHeartbeat.IsZero() {
				live++
			}
		}
		return len(v.Leases) == 4 && held["ra"] == 2 && held["rb"] == 2 && live == 2
	}, hang, 50*time.Millisecond, "both replicas live, two blocks each: %+v", v)
	_ = b

	require.Equal(t, durable.DispatchEventDriven, v.Mode)
	require.Equal(t, "ra", v.Replica)
	blocks := slots.Split(4)
	for i, l := range v.Leases {
		require.Equal(t, blocks[i].First, l.FirstSlot)
		require.Equal(t, blocks[i].Last, l.LastSlot)
		require.Positive(t, l.Epoch)
		require.False(t, l.Since.IsZero())
	}
	require.Len(t, v.Replicas, 2)
	for _, r := range v.Replicas {
		require.Equal(t, r.ID == "ra", r.Self, r.ID)
		require.Equal(t, 2, r.Leases, r.ID)
		require.Equal(t, "live", r.State, r.ID)
		require.NotEmpty(t, r.Host, "the heartbeat names the host")
		require.WithinDuration(t, time.Now(), r.LastHeartbeat, time.Minute)
	}
	require.NotNil(t, v.Feed)
	require.Empty(t, v.Note)

	// Within a second the same view is served (one heartbeat read).
	again, err := a.InspectCluster(ctx)
	require.NoError(t, err)
	if time.Since(v.ObservedAt) < clusterTTL/2 {
		require.Equal(t, v.ObservedAt, again.ObservedAt, "served from the cache")
	}
	again.Leases[0].Owner = "changed"
	third, err := a.InspectCluster(ctx)
	require.NoError(t, err)
	require.NotEqual(t, "changed", third.Leases[0].Owner, "a caller's copy is its own")

	poll := openProvider(t, testConfig(container))
	pv, err := poll.InspectCluster(ctx)
	require.NoError(t, err)
	require.Equal(t, durable.DispatchPolling, pv.Mode)
	require.Empty(t, pv.Leases)
	require.Empty(t, pv.Replicas)
	require.NotEmpty(t, pv.Note)
	require.Nil(t, pv.Feed)
}
