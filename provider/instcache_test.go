package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// ops renders recorded requests as "Operation", or "Operation:status" for
// a failure (a failed transactional batch answers 207 Multi-Status).
func ops(rec []keyedOp) []string {
	out := make([]string, len(rec))
	for i, r := range rec {
		out[i] = string(r.op)
		if r.status >= 300 || r.status == http.StatusMultiStatus {
			out[i] += ":" + http.StatusText(r.status)
		}
	}
	return out
}

// instCacheFixture is an event-driven provider with one instance whose
// first turn (history: started, two activities scheduled) is committed
// through it.
type instCacheFixture struct {
	p         *Provider
	container string
	inst      string
	took      func() []keyedOp
	// first are the requests of the first fetch and ack.
	firstFetch, firstAck []string
}

func newInstCacheFixture(t *testing.T, cacheSize int) *instCacheFixture {
	t.Helper()
	ctx := context.Background()
	f := &instCacheFixture{container: freshContainer("instcache"), inst: "ic-1"}
	cfg := eventConfig(f.container)
	cfg.InstanceCacheSize = cacheSize
	cfg.joinEagerly = true
	cfg.noHeads = true // the paths without feed heads (heads_test.go has those)
	f.p = openProvider(t, cfg)
	f.took = middleware.record(f.container, f.inst)

	require.NoError(t, f.p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: f.inst, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	f.took()
	item := f.fetch(t)
	f.firstFetch = ops(f.took())
	require.Empty(t, item.History)
	require.NoError(t, f.p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
			ev(f.inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"}),
			ev(f.inst, 1, 3, history.ActivityScheduled{Name: "B", Input: "{}"})},
		Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	f.firstAck = ops(f.took())
	return f
}

func (f *instCacheFixture) fetch(t *testing.T) *durable.OrchestrationItem {
	t.Helper()
	return fetchOf(t, f.p, f.inst)
}

// fetchOf fetches the next orchestration item of p, which must be
// instance's.
func fetchOf(t *testing.T, p *Provider, instance string) *durable.OrchestrationItem {
	t.Helper()
	item, err := p.FetchOrchestrationItem(context.Background(), lockLong, 5*time.Second, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, instance, item.Instance)
	return item
}

// nextTurn enqueues the activity's result and fetches the turn it makes,
// checking that it sees the first turn exactly as committed.
func (f *instCacheFixture) nextTurn(t *testing.T) *durable.OrchestrationItem {
	t.Helper()
	require.NoError(t, f.p.EnqueueForOrchestrator(context.Background(), durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 2, Result: "r"}, 0))
	f.took()
	item := f.fetch(t)
	require.Len(t, item.History, 3)
	require.Equal(t, uint64(3), item.History[2].EventID)
	require.Equal(t, "O", item.OrchestrationName)
	require.Len(t, item.Messages, 1)
	return item
}

// TestTurnRequests: in event-driven mode a turn's fetch is one query and
// the lock batch, and its ack the commit batch alone, when this process
// wrote the instance document last; the seeds' instance read comes back
// only where nothing is remembered.
func TestTurnRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		cacheSize           int
		nextFetch, firstAck []string
		// secondAck writes a KV entry and lastAck completes the
		// orchestration (merging it), so both need the KV documents.
		secondAck, lastAck []string
	}{
		{name: "remembered", cacheSize: 0,
			nextFetch: []string{"Query", "Batch"}, firstAck: []string{"Batch"}, secondAck: []string{"Batch"},
			lastAck: []string{"Batch"}},
		{name: "nothing remembered", cacheSize: -1,
			nextFetch: []string{"Query", "Query", "Batch"}, firstAck: []string{"Read", "Batch"}, secondAck: []string{"Read", "Query", "Batch"},
			lastAck: []string{"Read", "Query", "Batch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newInstCacheFixture(t, tc.cacheSize)
			require.Equal(t, []string{"Query", "Batch"}, f.firstFetch, "a new instance: one query and the lock")
			require.Equal(t, tc.firstAck, f.firstAck)

			item := f.nextTurn(t)
			require.Equal(t, tc.nextFetch, ops(f.took()))
			require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(f.inst, 1, 4, history.ActivityCompleted{Result: "r"}),
					ev(f.inst, 1, 5, history.KeyValueSet{Key: "k", Value: "v", LastUpdatedAtMS: 1})},
				Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
			require.Equal(t, tc.secondAck, ops(f.took()))

			ctx := context.Background()
			require.NoError(t, f.p.EnqueueForOrchestrator(ctx, durable.ActivityCompleted{Instance: f.inst, ExecutionID: 1, ID: 3, Result: "r"}, 0))
			f.took()
			item = f.fetch(t)
			require.Len(t, item.History, 5)
			require.Empty(t, item.KVSnapshot, "the current execution's writes are not in the snapshot")
			require.Equal(t, tc.nextFetch, ops(f.took()))
			out := `"done"`
			require.NoError(t, f.p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(f.inst, 1, 6, history.ActivityCompleted{Result: "r"}),
					ev(f.inst, 1, 7, history.OrchestrationCompleted{Output: out})},
				Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &out, OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
			require.Equal(t, tc.lastAck, ops(f.took()))
			require.Zero(t, f.p.s.Stats().StaleCache)

			v, ok, err := f.p.GetKVValue(ctx, f.inst, "k")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "v", v)
			kd := readDoc(t, f.container, f.inst, "kv:k")
			require.Equal(t, true, kd["has"], "the completion merged the execution's write into the snapshot")
			require.Nil(t, kd["delta"])
			info, err := f.p.GetInstanceInfo(ctx, f.inst)
			require.NoError(t, err)
			require.Equal(t, durable.StatusCompleted, info.Status)
			h, err := f.p.ReadHistory(ctx, f.inst)
			require.NoError(t, err)
			require.Len(t, h, 7)
		})
	}
}

// TestStaleRememberedDocument: a write of another process to the instance
// document between two turns makes the remembered document stale; the
// fetch's lock batch then fails on its ETag, the full read follows at
// once, and the turn keeps what the other process wrote.
func TestStaleRememberedDocument(t *testing.T) {
	t.Parallel()
	f := newInstCacheFixture(t, 0)
	raw := rawContainer(t, f.container)
	var pt azcosmos.PatchOperations
	pt.AppendSet("/customStatus", "set elsewhere")
	_, err := raw.PatchItem(context.Background(), azcosmos.NewPartitionKeyString(f.inst), "instance", pt, nil)
	require.NoError(t, err)

	item := f.nextTurn(t)
	require.Equal(t, []string{"Query", "Batch:Multi-Status", "Query", "Query", "Batch"}, ops(f.took()))
	require.Equal(t, int64(1), f.p.s.Stats().StaleCache)

	require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 4, history.ActivityCompleted{Result: "r"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	require.Equal(t, []string{"Batch"}, ops(f.took()))
	d := readDoc(t, f.container, f.inst, "instance")
	require.Equal(t, "set elsewhere", d["customStatus"], "the lock and the commit started from the current document")
}

// TestReadRemembersInstance: a status read remembers the instance
// document it read as a write of this process would be: the next fetch
// locks from it (one query and the lock batch) although what this
// process wrote last went stale; a read of a locked document forgets
// the instance.
func TestReadRemembersInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newInstCacheFixture(t, 0)
	raw := rawContainer(t, f.container)
	var pt azcosmos.PatchOperations
	pt.AppendSet("/customStatus", "set elsewhere")
	_, err := raw.PatchItem(ctx, azcosmos.NewPartitionKeyString(f.inst), "instance", pt, nil)
	require.NoError(t, err)

	info, err := f.p.GetInstanceInfo(ctx, f.inst)
	require.NoError(t, err)
	require.NotNil(t, info.CustomStatus)
	require.Equal(t, "set elsewhere", *info.CustomStatus)
	item := f.nextTurn(t)
	require.Equal(t, []string{"Query", "Batch"}, ops(f.took()), "locked from the document the read remembered")
	require.Zero(t, f.p.s.Stats().StaleCache)

	require.NoError(t, f.p.AbandonOrchestrationItem(ctx, item.LockToken, 0, false))

	// A read of a document another process holds locked forgets the
	// instance: the fetch after that lock reads the document instead of
	// trying the stale one this process wrote.
	g := newInstCacheFixture(t, 0)
	var lock azcosmos.PatchOperations
	lock.AppendSet("/lockToken", "o.elsewhere")
	lock.AppendSet("/lockedUntil", time.Now().Add(time.Hour).UnixMilli())
	graw := rawContainer(t, g.container)
	_, err = graw.PatchItem(ctx, azcosmos.NewPartitionKeyString(g.inst), "instance", lock, nil)
	require.NoError(t, err)
	_, err = g.p.GetInstanceInfo(ctx, g.inst)
	require.NoError(t, err)
	var unlock azcosmos.PatchOperations
	unlock.AppendSet("/lockToken", "")
	unlock.AppendSet("/lockedUntil", 0)
	_, err = graw.PatchItem(ctx, azcosmos.NewPartitionKeyString(g.inst), "instance", unlock, nil)
	require.NoError(t, err)
	g.nextTurn(t)
	require.Equal(t, []string{"Query", "Query", "Batch"}, ops(g.took()), "the document read first, no stale lock tried")
	require.Zero(t, g.p.s.Stats().StaleCache)
}

// TestStaleHeldDocument: a change to the instance document while a turn
// holds its lock makes the document the lock batch wrote stale; the ack's
// commit from it fails on its ETag and the ack commits from a read.
func TestStaleHeldDocument(t *testing.T) {
	t.Parallel()
	f := newInstCacheFixture(t, 0)
	item := f.nextTurn(t)
	raw := rawContainer(t, f.container)
	var pt azcosmos.PatchOperations
	pt.AppendSet("/updatedAt", 7)
	_, err := raw.PatchItem(context.Background(), azcosmos.NewPartitionKeyString(f.inst), "instance", pt, nil)
	require.NoError(t, err)
	f.took()

	require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 4, history.ActivityCompleted{Result: "r"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	require.Equal(t, []string{"Batch:Multi-Status", "Read", "Batch"}, ops(f.took()))
	h, err := f.p.ReadHistory(context.Background(), f.inst)
	require.NoError(t, err)
	require.Len(t, h, 4)

	// The lock is gone: a second ack of it fails, remembered or not.
	err = f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1})
	require.ErrorIs(t, err, durable.ErrPermanent)
}

// readDoc point-reads a document with the SDK alone.
func readDoc(t *testing.T, container, partition, id string) map[string]any {
	t.Helper()
	resp, err := rawContainer(t, container).ReadItem(context.Background(), azcosmos.NewPartitionKeyString(partition), id, nil)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	return doc
}
