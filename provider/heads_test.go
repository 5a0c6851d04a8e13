package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// headsFixture is an event-driven provider whose instance's messages
// arrive from another provider (a client), so that its fetches are woken
// by its change feed, with the feed's heads.
type headsFixture struct {
	p, client *Provider
	container string
	inst      string
	took      func() []keyedOp
}

func newHeadsFixture(t *testing.T, cacheSize int) *headsFixture {
	t.Helper()
	f := &headsFixture{container: freshContainer("heads"), inst: "h-1"}
	cfg := eventConfig(f.container)
	cfg.InstanceCacheSize = cacheSize
	cfg.joinEagerly, cfg.idleLeave = true, time.Hour // fetches come late on a loaded machine
	f.p = openProvider(t, cfg)
	require.Eventually(t, func() bool { return positioned(f.p) && f.p.ev().HeadsComplete(f.inst) }, hang, 5*time.Millisecond)
	f.client = openProvider(t, eventConfig(f.container))
	f.took = middleware.record(f.container, f.inst)
	return f
}

// positioned reports whether p owns every slot and each of its change-feed
// readers has fixed its starting point, so that whatever is written from
// now on reaches p through its feed (a message written before would reach
// it through the catch-up query instead, and be no head).
func positioned(p *Provider) bool {
	// Ownership is recorded with the lease's unpinned mark (both in
	// leasestore's OnChange): every lease counted here is in Positioned.
	return p.ev().Owned().Len() == slots.Count && p.ev().Positioned()
}

// send enqueues items through the client and waits until the feed has
// delivered every one of them to the provider as a head.
func (f *headsFixture) send(t *testing.T, items ...durable.WorkItem) {
	t.Helper()
	for _, it := range items {
		require.NoError(t, f.client.EnqueueForOrchestrator(context.Background(), it, 0))
	}
	require.Eventually(t, func() bool { return f.heads() == len(items) }, hang, 5*time.Millisecond)
	f.took()
}

// heads returns how many heads the provider holds for the instance.
func (f *headsFixture) heads() int { return f.p.ev().HeadCount(f.inst) }

// raw runs a query in the instance's partition with the SDK alone.
func (f *headsFixture) raw(t *testing.T, sql string) []map[string]any {
	t.Helper()
	pager := rawContainer(t, f.container).NewQueryItemsPager(sql, azcosmos.NewPartitionKeyString(f.inst), nil)
	var out []map[string]any
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		for _, it := range page.Items {
			var doc map[string]any
			require.NoError(t, json.Unmarshal(it, &doc))
			out = append(out, doc)
		}
	}
	return out
}

// feedHeads returns the instance's waiting messages as heads, as the
// change feed would deliver them after edit (which keeps a message when
// it returns true); the requests it makes are not counted.
func (f *headsFixture) feedHeads(t *testing.T, edit func(doc map[string]any) bool) []store.Head {
	t.Helper()
	var heads []store.Head
	for _, doc := range f.raw(t, "SELECT * FROM c WHERE c.type = 'orch_queue'") {
		if !edit(doc) {
			continue
		}
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		h, err := store.DecodeHead(b)
		require.NoError(t, err)
		heads = append(heads, h)
	}
	f.took()
	return heads
}

// lock locks the instance through the store with the given heads, as a
// feed-woken fetch does with those its engine holds.
func (f *headsFixture) lock(t *testing.T, heads []store.Head) *durable.OrchestrationItem {
	t.Helper()
	r, err := f.p.s.LockInstance(context.Background(), store.LockRequest{Instance: f.inst, LockTimeout: lockLong, Read: store.FromHeads{Heads: heads}})
	require.NoError(t, err)
	require.NotNil(t, r.Item)
	return r.Item
}

func (f *headsFixture) fetch(t *testing.T) *durable.OrchestrationItem {
	t.Helper()
	return fetchOf(t, f.p, f.inst)
}

// firstTurn fetches and commits the instance's first turn (started, two
// activities scheduled).
func (f *headsFixture) firstTurn(t *testing.T) {
	t.Helper()
	f.send(t, durable.StartOrchestration{Instance: f.inst, Orchestration: "O", Input: "{}", ExecutionID: 1})
	item := f.fetch(t)
	require.Empty(t, item.History)
	require.Equal(t, "O", item.OrchestrationName)
	require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
			ev(f.inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"}),
			ev(f.inst, 1, 3, history.ActivityScheduled{Name: "B", Input: "{}"})},
		Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	f.took()
}

// TestFetchFromHeads: a feed-woken fetch locks from the feed's heads. A
// new instance whose heads are complete costs the lock batch alone; a
// remembered instance's next turn sends the batch together with the
// turn-input query (its history), concurrent, and no more.
func TestFetchFromHeads(t *testing.T) {
	t.Parallel()
	f := newHeadsFixture(t, 0)
	f.send(t, durable.StartOrchestration{Instance: f.inst, Orchestration: "O", Input: "{}", ExecutionID: 1})
	item := f.fetch(t)
	require.Equal(t, []string{"Batch"}, ops(f.took()))
	require.Equal(t, int64(1), f.p.s.Stats().HeadLocks)
	require.Equal(t, int64(1), f.p.s.Stats().BareLocks)
	require.Empty(t, item.History)
	require.Equal(t, uint64(1), item.ExecutionID)
	require.Equal(t, uint32(1), item.AttemptCount)
	require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
			ev(f.inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"}),
			ev(f.inst, 1, 3, history.KeyValueSet{Key: "k", Value: "v", LastUpdatedAtMS: 1})},
		Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	f.took()

	f.send(t, durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 2, Result: "r"})
	item = f.fetch(t)
	require.ElementsMatch(t, []string{"Query", "Batch"}, ops(f.took()))
	require.Equal(t, int64(2), f.p.s.Stats().HeadLocks)
	require.Len(t, item.History, 3, "the history the query read under the lock")
	require.Empty(t, item.KVSnapshot, "the current execution's writes are not in the snapshot, as on the other paths")
	require.Equal(t, []durable.WorkItem{durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 2, Result: "r"}}, item.Messages)
	require.Zero(t, f.p.s.Stats().StaleHeads)
	require.Zero(t, f.p.s.Stats().StaleCache)
}

// TestBareLockNeedsCompleteHeads: a new instance's turn is locked from
// its heads alone only when they hold all of its messages. A message
// written before the replica's feed began (the catch-up query found it),
// or one too large to keep as a head, makes the fetch run the query, and
// the turn holds every message.
func TestBareLockNeedsCompleteHeads(t *testing.T) {
	t.Parallel()
	container := freshContainer("bare")
	client := openProvider(t, eventConfig(container))
	ctx := context.Background()
	start := func(inst string) durable.StartOrchestration {
		return durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: "{}", ExecutionID: 1}
	}
	early := durable.ExternalRaised{Instance: "early", Name: "go", Data: "1"}
	require.NoError(t, client.EnqueueForOrchestrator(ctx, early, 0))

	cfg := eventConfig(container)
	cfg.joinEagerly, cfg.idleLeave = true, time.Hour
	p := openProvider(t, cfg)
	require.Eventually(t, func() bool { return positioned(p) && p.ev().HeadsComplete("fresh") }, hang, 5*time.Millisecond)
	require.False(t, p.ev().HeadsComplete("early"))

	big := durable.ExternalRaised{Instance: "big", Name: "go", Data: strings.Repeat("x", engine.MaxHeadItemBytes)}
	small := durable.ExternalRaised{Instance: "fresh", Name: "go", Data: "2"}
	for _, it := range []durable.WorkItem{start("early"), big, start("big"), small, start("fresh")} {
		require.NoError(t, client.EnqueueForOrchestrator(ctx, it, 0))
	}
	headsOf := p.ev().HeadCount
	require.Eventually(t, func() bool { return headsOf("early") == 1 && headsOf("big") == 1 && headsOf("fresh") == 2 },
		hang, 5*time.Millisecond, "the feed delivers the starts and the small event as heads")
	require.False(t, p.ev().HeadsComplete("big"))
	require.True(t, p.ev().HeadsComplete("fresh"))

	got := map[string]*durable.OrchestrationItem{}
	for range 3 {
		item, err := p.FetchOrchestrationItem(ctx, lockLong, hang, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		got[item.Instance] = item
	}
	require.ElementsMatch(t, []durable.WorkItem{early, start("early")}, got["early"].Messages)
	require.ElementsMatch(t, []durable.WorkItem{big, start("big")}, got["big"].Messages)
	require.ElementsMatch(t, []durable.WorkItem{small, start("fresh")}, got["fresh"].Messages)
	require.Equal(t, int64(1), p.s.Stats().BareLocks, "only the instance with complete heads skips the query")
}

// TestStaleHead: a head whose message changed since the feed delivered it
// fails the lock batch on its ETag; the fetch then locks from the query
// it ran alongside, with one more request.
func TestStaleHead(t *testing.T) {
	t.Parallel()
	f := newHeadsFixture(t, 0)
	f.firstTurn(t)
	f.send(t, durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 2, Result: "r"})
	// The head as the feed delivered it, but of an older version.
	heads := f.feedHeads(t, func(doc map[string]any) bool {
		doc["_etag"] = `"00000000-0000-0000-0000-000000000000"`
		return true
	})
	item := f.lock(t, heads)
	require.ElementsMatch(t, []string{"Query", "Batch:Multi-Status", "Batch"}, ops(f.took()))
	require.Equal(t, int64(1), f.p.s.Stats().StaleHeads)
	require.Zero(t, f.p.s.Stats().StaleCache, "the remembered document was fine")
	require.Len(t, item.History, 3)
	require.Len(t, item.Messages, 1)
	require.Equal(t, uint32(1), item.AttemptCount)
}

// TestHeadsMissAMessage: a message the heads lack (one the feed delivered
// before this process owned the slot, or not yet) is found by the query
// that runs with the lock batch and joins the turn, in enqueue order, in
// a second batch under the lock.
func TestHeadsMissAMessage(t *testing.T) {
	t.Parallel()
	f := newHeadsFixture(t, 0)
	f.firstTurn(t)
	first := durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 2, Result: "a"}
	second := durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 3, Result: "b"}
	f.send(t, first, second)
	require.Equal(t, 2, f.heads())
	// The heads as the feed delivered them, but for the first message.
	heads := f.feedHeads(t, func(doc map[string]any) bool { return !strings.Contains(doc["workItem"].(string), `"a"`) })
	require.Len(t, heads, 1)
	item := f.lock(t, heads)
	require.ElementsMatch(t, []string{"Query", "Batch", "Batch"}, ops(f.took()))
	require.Equal(t, []durable.WorkItem{first, second}, item.Messages)
	require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 4, history.ActivityCompleted{Result: "a"}), ev(f.inst, 1, 5, history.ActivityCompleted{Result: "b"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	require.Empty(t, f.raw(t, "SELECT * FROM c WHERE c.type = 'orch_queue'"), "both messages were consumed by the turn")
}

// TestHeadsGuessNewWrongly: a first execution's start for an instance
// that exists, with nothing remembered, makes the lock batch's create fail;
// the fetch goes on with the head query it ran alongside and locks the
// existing instance.
func TestHeadsGuessNewWrongly(t *testing.T) {
	t.Parallel()
	f := newHeadsFixture(t, -1)
	f.firstTurn(t)
	again := durable.StartOrchestration{Instance: f.inst, Orchestration: "O", Input: "{}", ExecutionID: 1}
	f.send(t, again)
	item := f.fetch(t)
	require.Equal(t, int64(1), f.p.s.Stats().StaleHeads)
	require.Len(t, item.History, 3, "the existing instance's turn")
	require.Equal(t, []durable.WorkItem{again}, item.Messages)
	got := ops(f.took())
	require.Contains(t, got, "Batch:Multi-Status")
	require.Equal(t, "Batch", got[len(got)-1])
}

// TestLostLeaseDropsHeads: when a joining replica takes leases from the
// replica that held every slot, that replica drops the heads of the slots
// it lost.
func TestLostLeaseDropsHeads(t *testing.T) {
	t.Parallel()
	container := freshContainer("heads-handoff")
	replica := func(id string) *Provider {
		cfg := eventConfig(container)
		cfg.ReplicaID, cfg.joinEagerly, cfg.idleLeave = id, true, time.Hour // holds leases, never fetches
		return openProvider(t, cfg)
	}
	const n = 32
	instances := func(p *Provider) []string {
		var out []string
		for i := range n {
			if inst := fmt.Sprint("handoff-", i); p.ev().HeadCount(inst) > 0 {
				out = append(out, inst)
			}
		}
		return out
	}
	a := replica("a")
	require.Eventually(t, func() bool { return positioned(a) }, hang, 5*time.Millisecond)
	client := openProvider(t, eventConfig(container))
	for i := range n {
		require.NoError(t, client.EnqueueForOrchestrator(context.Background(),
			durable.StartOrchestration{Instance: fmt.Sprint("handoff-", i), Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	}
	require.Eventually(t, func() bool { return len(instances(a)) == n }, hang, 5*time.Millisecond, "every start is a head")

	b := replica("b")
	require.Eventually(t, func() bool { return ownedCount(b) > 0 }, hang, 5*time.Millisecond, "b gets a share")
	require.Eventually(t, func() bool {
		owned := a.ev().Owned()
		kept := instances(a)
		for _, inst := range kept {
			if !owned.Contains(slots.Of(inst)) {
				return false
			}
		}
		// Some lost (b owns slots holding some of the n); none kept
		// outside a's share. Whether any are kept depends on the share a
		// ends with: under load its heartbeats may be late enough for b
		// to take every lease for a while (TestHeadIndex covers keeping).
		return len(kept) < n
	}, hang, 5*time.Millisecond, "a keeps no head of a slot it lost")
}

// TestLeaveDropsHeads: a replica that leaves dispatch (no orchestration
// fetch for a while) hands every lease off and drops every head.
func TestLeaveDropsHeads(t *testing.T) {
	t.Parallel()
	f := newHeadsFixture(t, 0)
	f.send(t, durable.StartOrchestration{Instance: f.inst, Orchestration: "O", Input: "{}", ExecutionID: 1})
	require.True(t, f.p.ev().Joined())
	f.p.ev().Leave()
	require.Zero(t, f.heads())
	require.Zero(t, f.p.ev().HeadCount(""))
}
