package provider

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// The write that enqueues a message locks its turn when a fetch of the
// writer waits for it (store.EnqueueLocked, engine.LockOnWrite).

// writeLockFixture is one event-driven replica with an instance whose
// first turn it committed (so it remembers the instance document).
type writeLockFixture struct {
	p         *Provider
	container string
	inst      string
	took      func() []keyedOp
	next      uint64 // the next history event id
}

func newWriteLockFixture(t *testing.T, name string) *writeLockFixture {
	t.Helper()
	f := &writeLockFixture{container: freshContainer(name), inst: name + "-1"}
	cfg := eventConfig(f.container)
	cfg.joinEagerly = true
	f.p = openProvider(t, cfg)
	f.took = middleware.record(f.container, f.inst)
	startCommitted(t, f.p, f.inst)
	f.next = 2
	f.took()
	return f
}

// startCommitted starts instance through p and commits its first turn
// (its history: the start), so that p remembers its document.
func startCommitted(t *testing.T, p *Provider, instance string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: instance, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item := fetchOf(t, p, instance)
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(instance, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
}

// raise enqueues the event name (request id rid) while a fetch of the
// replica waits, and returns the turn that fetch got and the requests
// made from the enqueue to the fetch's return, in the order they were
// answered.
func (f *writeLockFixture) raise(t *testing.T, name, rid string) (*durable.OrchestrationItem, []string) {
	t.Helper()
	got := waitingFetch(t, context.Background(), f.p, lockLong)
	f.took()
	require.NoError(t, f.p.EnqueueForOrchestrator(context.Background(), durable.ExternalRaised{Instance: f.inst, Name: name, Data: "{}", RequestID: rid}, 0))
	item := <-got
	require.NotNil(t, item)
	return item, ops(f.took())
}

// ack commits a turn that took one event.
func (f *writeLockFixture) ack(t *testing.T, item *durable.OrchestrationItem) {
	t.Helper()
	require.Len(t, item.Messages, 1)
	e, ok := item.Messages[0].(durable.ExternalRaised)
	require.True(t, ok)
	require.NoError(t, f.p.AckOrchestrationItem(context.Background(), item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, f.next, history.ExternalEvent{Name: e.Name, Data: e.Data})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	f.next++
}

// queued counts the instance's orchestrator messages.
func (f *writeLockFixture) queued(t *testing.T) int {
	t.Helper()
	q := rawContainer(t, f.container).NewQueryItemsPager("SELECT VALUE COUNT(1) FROM c WHERE c.type = 'orch_queue'",
		azcosmos.NewPartitionKeyString(f.inst), nil)
	page, err := q.NextPage(context.Background())
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	var n int
	_, err = fmt.Sscan(string(page.Items[0]), &n)
	require.NoError(t, err)
	return n
}

// waitingFetch starts an orchestration fetch of p (lock lockTimeout,
// long poll) and returns once it is in flight; the channel gets its item
// (nil for none or an error).
func waitingFetch(t *testing.T, ctx context.Context, p *Provider, lockTimeout time.Duration) <-chan *durable.OrchestrationItem {
	t.Helper()
	got := make(chan *durable.OrchestrationItem, 1)
	go func() {
		item, err := p.FetchOrchestrationItem(ctx, lockTimeout, hang, nil)
		if err != nil {
			item = nil
		}
		got <- item
	}()
	require.Eventually(t, func() bool { return p.ev().Stats().OrchFetching == 1 }, hang, time.Millisecond, "the fetch is in flight")
	return got
}

// TestEnqueueLocksItsTurn: an event enqueued while the replica's fetch
// waits is written locked, in the batch that locks the instance's turn
// (and writes the call's request record), with the turn's query at the
// same time: the fetch returns it with no request of its own. A resend
// of the call writes nothing (its record exists): no second message, no
// second turn.
func TestEnqueueLocksItsTurn(t *testing.T) {
	t.Parallel()
	f := newWriteLockFixture(t, "writelock")
	before := f.p.s.Stats().WriteLocks
	var item *durable.OrchestrationItem
	var rec []string
	// The fetch counted in flight may not wait on its hub yet when the
	// enqueue looks: then the turn is locked the usual way; try again.
	for k := 0; ; k++ {
		require.Less(t, k, 20, "no enqueue locked its turn")
		item, rec = f.raise(t, fmt.Sprint("e", k), fmt.Sprint("r", k))
		if f.p.s.Stats().WriteLocks > before {
			break
		}
		f.ack(t, item)
	}
	slices.Sort(rec) // the lock batch and the query go at once
	require.Equal(t, []string{"Batch", "Query"}, rec, "one lock batch with the enqueue, the turn's query beside it")
	require.Equal(t, int64(1), f.p.ev().Stats().WriteLocked)
	e := item.Messages[0].(durable.ExternalRaised)
	require.Equal(t, uint32(1), item.AttemptCount)
	require.Len(t, item.History, int(f.next-1), "the turn sees the committed history")

	msg := readDoc(t, f.container, f.inst, "instance")
	require.Equal(t, item.LockToken, msg["lockToken"], "the instance is locked by the turn")
	require.Equal(t, 1, f.queued(t))
	f.ack(t, item)
	require.Zero(t, f.queued(t), "the ack consumed the message")

	// The same call again (same request id) while a fetch waits: the
	// batch fails on the record and writes nothing; the usual enqueue
	// finds the call taken effect.
	locks := f.p.s.Stats().WriteLocks
	ctx, cancel := context.WithCancel(context.Background())
	got := waitingFetch(t, ctx, f.p, lockLong)
	require.NoError(t, f.p.EnqueueForOrchestrator(context.Background(), e, 0))
	require.Zero(t, f.queued(t), "no second message")
	cancel()
	require.Nil(t, <-got, "no second turn (none to take until the cancel)")
	require.Equal(t, locks, f.p.s.Stats().WriteLocks)
	h, err := f.p.ReadHistory(context.Background(), f.inst)
	require.NoError(t, err)
	require.Len(t, h, int(f.next-1))
}

// TestEnqueueLockStaleDocument: a remembered document another process
// changed fails the enqueue's lock batch, which then wrote nothing; the
// event is enqueued the usual way and its turn runs once, with what the
// other process wrote.
func TestEnqueueLockStaleDocument(t *testing.T) {
	t.Parallel()
	f := newWriteLockFixture(t, "writelock-stale")
	raw := rawContainer(t, f.container)
	before := f.p.s.Stats()
	for k := 0; ; k++ {
		require.Less(t, k, 20, "no enqueue tried a lock from the stale document")
		var pt azcosmos.PatchOperations
		pt.AppendSet("/customStatus", fmt.Sprint("set elsewhere ", k))
		_, err := raw.PatchItem(context.Background(), azcosmos.NewPartitionKeyString(f.inst), "instance", pt, nil)
		require.NoError(t, err)
		item, rec := f.raise(t, fmt.Sprint("e", k), "")
		require.Len(t, item.Messages, 1, "one message, written once")
		f.ack(t, item)
		require.Zero(t, f.queued(t))
		// Tried when the enqueue's lock batch failed, then the usual
		// enqueue created the message (a call without a request id);
		// else the fetch did not wait yet and the enqueue was the usual.
		failed, created := slices.Index(rec, "Batch:Multi-Status"), slices.Index(rec, "Create")
		if failed >= 0 && created > failed {
			break
		}
	}
	require.Greater(t, f.p.s.Stats().StaleCache, before.StaleCache)
	require.Equal(t, before.WriteLocks, f.p.s.Stats().WriteLocks)
	d := readDoc(t, f.container, f.inst, "instance")
	require.Contains(t, d["customStatus"], "set elsewhere", "the turn started from the current document")
}

// TestEnqueueLockWriterKilled: a writer whose enqueue locked the turn of
// an instance in a slot another replica owns, and which died before its
// ack, loses nothing: the owner runs the event's turn once the lock
// expires.
func TestEnqueueLockWriterKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	container := freshContainer("writelock-killed")
	cfg := eventConfig(container)
	cfg.joinEagerly = true
	b := openProvider(t, cfg)
	wcfg := cfg
	wcfg.ReplicaID = "w"
	w := openProvider(t, wcfg)
	requireOwnership(t, "b and w", &replica{p: b}, &replica{p: w})
	requireBalanced(t, &replica{p: b}, &replica{p: w})
	inst := instancesIn(t, b.ev().Owned(), "writelock-killed", 1)[0]
	startCommitted(t, b, inst)
	var taken *durable.OrchestrationItem
	for k := 0; taken == nil; k++ {
		require.Less(t, k, 20, "w never locked a turn with its enqueue")
		_, err := w.GetInstanceInfo(ctx, inst) // w remembers the document it read
		require.NoError(t, err)
		got := waitingFetch(t, ctx, w, time.Second)
		require.NoError(t, w.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: fmt.Sprint("e", k), Data: "{}"}, 0))
		item := <-got
		if w.ev().Stats().WriteLocked > 0 {
			taken = item
			break
		}
		if item != nil { // taken the usual way: let it go and try again
			require.NoError(t, w.AbandonOrchestrationItem(ctx, item.LockToken, 0, true))
		}
		// b runs what w left (the event's turn), so the next try starts
		// from a committed document again.
		next := fetchOf(t, b, inst)
		require.NoError(t, b.AckOrchestrationItem(ctx, next.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	}
	require.NotNil(t, taken)
	want := taken.Messages[0].(durable.ExternalRaised).Name
	w.Crash() // no ack: the turn dies with the process

	item := fetchOf(t, b, inst)
	require.Len(t, item.Messages, 1)
	require.Equal(t, want, item.Messages[0].(durable.ExternalRaised).Name, "the owner runs the dead writer's event")
	require.Equal(t, uint32(2), item.AttemptCount, "the second attempt")
	require.NoError(t, b.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		Metadata: durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
}

// blindFixture is two replicas: b owns the instance, whose first turn it
// committed, and w, which remembers no instance document
// (InstanceCacheSize -1), writes: its locks on enqueue are blind.
type blindFixture struct {
	b, w      *Provider
	container string
	inst      string
	took      func() []keyedOp
}

func newBlindFixture(t *testing.T, name string) *blindFixture {
	t.Helper()
	f := &blindFixture{container: freshContainer(name)}
	cfg := eventConfig(f.container)
	cfg.joinEagerly, cfg.ReplicaID = true, "b"
	f.b = openProvider(t, cfg)
	wcfg := cfg
	wcfg.ReplicaID, wcfg.InstanceCacheSize = "w", -1
	f.w = openProvider(t, wcfg)
	rb, rw := &replica{p: f.b}, &replica{p: f.w}
	requireOwnership(t, name, rb, rw)
	requireBalanced(t, rb, rw)
	f.inst = instancesIn(t, f.b.ev().Owned(), name, 1)[0]
	f.took = middleware.record(f.container, f.inst)
	startCommitted(t, f.b, f.inst)
	return f
}

// ifRunning calls w's EnqueueIfRunning for the event name of instance
// while a fetch of w waits, until the engine lets the write lock (it
// may look before the fetch waits on its hub; then nothing is written).
// It returns what the call said, the turn w's fetch got (nil for none)
// and the requests to instance's partition from the call to the fetch's
// return.
func (f *blindFixture) ifRunning(t *testing.T, instance, name string) (bool, *durable.OrchestrationItem, []string) {
	t.Helper()
	rec := middleware.record(f.container, instance)
	for k := 0; k < 20; k++ {
		ctx, cancel := context.WithCancel(context.Background())
		got := waitingFetch(t, ctx, f.w, lockLong)
		rec()
		enqueued, err := f.w.EnqueueIfRunning(context.Background(), durable.ExternalRaised{Instance: instance, Name: name, Data: "{}"})
		require.NoError(t, err)
		if !enqueued {
			cancel()
		}
		item := <-got
		cancel()
		ops := ops(rec())
		if enqueued || len(ops) > 0 {
			return enqueued, item, ops
		}
	}
	t.Fatal("the engine never let the write lock its turn")
	return false, nil, nil
}

// TestEnqueueIfRunning: without a remembered document, an event for a
// running instance is enqueued with its turn locked by one batch whose
// condition checks that the instance runs, the turn's query beside it;
// an instance that completed, or that does not exist, gets nothing
// written, and the caller learns it must read the state first.
func TestEnqueueIfRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newBlindFixture(t, "ifrunning")

	enqueued, item, rec := f.ifRunning(t, f.inst, "go")
	require.True(t, enqueued)
	slices.Sort(rec)
	require.Equal(t, []string{"Batch", "Query"}, rec, "one conditional lock batch, the turn's query beside it")
	require.NotNil(t, item)
	require.Equal(t, []durable.WorkItem{durable.ExternalRaised{Instance: f.inst, Name: "go", Data: "{}"}}, item.Messages)
	require.Len(t, item.History, 1, "the committed history")
	require.Zero(t, f.w.s.Stats().BlindRereads)
	require.Equal(t, item.LockToken, readDoc(t, f.container, f.inst, "instance")["lockToken"])
	out := `"done"`
	require.NoError(t, f.w.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 2, history.ExternalEvent{Name: "go", Data: "{}"}),
			ev(f.inst, 1, 3, history.OrchestrationCompleted{Output: out})},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &out, OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))

	// Completed: the condition fails and nothing is written.
	enqueued, item, rec = f.ifRunning(t, f.inst, "late")
	require.False(t, enqueued)
	require.Nil(t, item)
	require.Contains(t, rec, "Batch:Multi-Status")
	require.NotContains(t, rec, "Batch")
	q := writeLockFixture{container: f.container, inst: f.inst}
	require.Zero(t, q.queued(t))

	// Not found: nothing is written either.
	enqueued, item, rec = f.ifRunning(t, "ifrunning-none", "lost")
	require.False(t, enqueued)
	require.Nil(t, item)
	require.Equal(t, []string{"Batch:Multi-Status"}, slices.DeleteFunc(rec, func(op string) bool { return op == "Query" }))
	q.inst = "ifrunning-none"
	require.Zero(t, q.queued(t))
}

// TestEnqueueIfRunningReadsAgain: a turn that commits between the blind
// lock's query and its batch makes the query's answer stale: the lock
// reads the turn's inputs again under the lock, so the turn sees that
// commit and not the message it consumed.
func TestEnqueueIfRunningReadsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newBlindFixture(t, "ifrunning-again")
	require.NoError(t, f.b.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: f.inst, Name: "first", Data: "{}"}, 0))

	held, release := middleware.holdNth(f.container, cosmosemu.OpBatch, 1)
	defer release()
	defer middleware.disarm(f.container)
	got := waitingFetch(t, ctx, f.w, lockLong)
	f.took()
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := f.w.EnqueueIfRunning(ctx, durable.ExternalRaised{Instance: f.inst, Name: "second", Data: "{}"})
		done <- result{ok, err}
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("the write did not lock its turn (the fetch did not wait yet?): %+v", r)
	}
	// w's batch waits; once its query has read the instance, b runs the
	// first event's turn.
	require.Eventually(t, func() bool { return slices.Contains(ops(f.took()), "Query") }, hang, time.Millisecond)
	item := fetchOf(t, f.b, f.inst)
	require.NoError(t, f.b.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(f.inst, 1, 2, history.ExternalEvent{Name: "first", Data: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}}))
	release()
	r := <-done
	require.NoError(t, r.err)
	require.True(t, r.ok)
	turn := <-got
	require.NotNil(t, turn)
	require.Equal(t, int64(1), f.w.s.Stats().BlindRereads)
	require.Len(t, turn.Messages, 1, "the first event's message was consumed")
	require.Equal(t, "second", turn.Messages[0].(durable.ExternalRaised).Name)
	require.Len(t, turn.History, 2, "b's commit is in the turn")
}

// TestEnqueueLockLostAnswer: an enqueue whose lock batch had its answer
// lost is read back, as a lock's is: landed, its turn goes to the
// waiting fetch; not landed, nothing was written and the usual enqueue
// follows. Either way the event is written once and its turn runs once.
func TestEnqueueLockLostAnswer(t *testing.T) {
	t.Parallel()
	status := unknownOutcomes[0]
	for _, tc := range []struct {
		name string
		arm  func(container string)
		// tried tells an enqueue that locked (or tried to) from one the
		// fault met on the usual path (the fetch was not waiting yet).
		tried func(f *writeLockFixture, locksBefore int64, rec []string) bool
	}{
		{name: "committed, the answer lost",
			arm: func(c string) { middleware.loseNthAnswer(c, cosmosemu.OpBatch, 1, status) },
			tried: func(f *writeLockFixture, before int64, _ []string) bool {
				return f.p.s.Stats().WriteLocks > before
			}},
		{name: "not committed",
			arm: func(c string) { middleware.failNth(c, cosmosemu.OpBatch, 1, status) },
			tried: func(_ *writeLockFixture, _ int64, rec []string) bool {
				return slices.Contains(rec, "Read") // the read back; the usual path resends instead
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newWriteLockFixture(t, "writelock-lost")
			for k := 0; ; k++ {
				require.Less(t, k, 20, "no enqueue tried to lock its turn")
				before := f.p.s.Stats().WriteLocks
				tc.arm(f.container)
				item, rec := f.raise(t, fmt.Sprint("e", k), fmt.Sprint("r", k))
				require.True(t, middleware.disarm(f.container))
				require.Equal(t, 1, f.queued(t), "one message: %v", rec)
				f.ack(t, item)
				require.Zero(t, f.queued(t))
				if tc.tried(f, before, rec) {
					break
				}
			}
		})
	}
}
