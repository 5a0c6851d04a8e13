package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// atomicityScenarios checks that commits are all-or-nothing:
//   - a failed AckOrchestrationItem (duplicate event id, invalid token)
//     leaves no trace: no history, no queued work on either queue, no
//     metadata or custom status change, and it keeps the lock (the failed
//     ack neither releases the instance nor invalidates its token);
//   - a successful ack makes every part visible together: history, worker
//     items, orchestrator items, and the deletion of the locked messages;
//   - of two acks racing on one token exactly one commits;
//   - AppendWithExecution stores events with the ids given, and a batch with
//     a duplicate id (against stored events or within itself) writes nothing;
//   - an ack whose context is cancelled, at whatever point of the commit,
//     commits the whole turn (or work-item completion) or nothing: a second
//     ack with the token then commits it or fails permanently, and every
//     part arrives exactly once.
func atomicityScenarios() []Scenario {
	return []Scenario{
		{"atomicity_failure_rollback", atomicityFailureRollback},
		{"multi_operation_atomic_ack", atomicityMultiOperationAck},
		{"lock_released_only_on_successful_ack", atomicityLockReleasedOnlyOnSuccess},
		{"concurrent_ack_prevention", atomicityConcurrentAck},
		{"append_with_execution_rejects_duplicates_atomically", atomicityAppendDuplicates},
		{"ack_cancelled_mid_commit_is_all_or_nothing", atomicityCancelledAck},
		{"work_item_ack_cancelled_mid_commit_is_all_or_nothing", atomicityCancelledWorkAck},
	}
}

func atomicityFailureRollback(h *H) {
	id := h.ID("instance-a")
	other := h.ID("other")
	h.CreateInstance(h.P, id)
	raised := durable.ExternalRaised{Instance: id, Name: "go", Data: "1"}
	h.Enqueue(h.P, raised)
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{raised}, item.Messages)

	// A turn whose last event reuses the stored event id 1: everything in it
	// must be rolled back, including the parts before the duplicate.
	out := "should-not-commit"
	err := h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		HistoryDelta: []history.Event{
			Event(id, 1, 2, history.ExternalEvent{Name: "go", Data: "1"}),
			Event(id, 1, 3, history.CustomStatusUpdated{Status: Str("half-done")}),
			Event(id, 1, 1, history.ActivityScheduled{Name: "Activity", Input: "{}"}),
		},
		WorkerItems:       []durable.WorkItem{queueActivity(id, 3)},
		OrchestratorItems: []durable.WorkItem{StartItem(other)},
		Metadata:          durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &out},
	})
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with a duplicate event id")

	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 1, "history must be unchanged after a failed ack")
	require.IsType(h.T, history.OrchestrationStarted{}, events[0].Kind)
	// No worker item was enqueued, nor the other instance's start, and the
	// lock was not released: the locked message is still queued, with the
	// attempt of its one fetch (the ack with the same token below shows
	// the lock held).
	h.NoOrchOrWork(h.P)
	require.Equal(h.T, uint32(1), h.MaxAttemptCount(id), "the failed ack must leave the locked message queued")
	status, err := h.P.GetCustomStatus(h.Ctx, id, 0)
	require.NoError(h.T, err)
	require.Nil(h.T, status, "custom status must not change on a failed ack")
	if a, ok := h.P.Admin(); ok {
		info, err := a.GetInstanceInfo(h.Ctx, id)
		require.NoError(h.T, err)
		require.Equal(h.T, durable.StatusRunning, info.Status, "metadata must not change on a failed ack")
		require.Nil(h.T, info.Output)
	}

	// The lock survived: a correct ack with the same token commits the turn.
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{Event(id, 1, 2, history.ExternalEvent{Name: "go", Data: "1"})},
	}))
	events, err = h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 2)
	h.NoOrch(h.P)
}

func atomicityMultiOperationAck(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)

	delta := []history.Event{
		Started(id, 1),
		Event(id, 1, 2, history.ActivityScheduled{Name: "Activity1", Input: "input1"}),
		Event(id, 1, 3, history.ActivityScheduled{Name: "Activity2", Input: "input2"}),
		Event(id, 1, 4, history.ActivityScheduled{Name: "Activity3", Input: "input3"}),
		Event(id, 1, 5, history.TimerCreated{FireAtMS: 1234567890}),
	}
	workers := []durable.WorkItem{queueActivity(id, 2), queueActivity(id, 3), queueActivity(id, 4)}
	// A timer already due and an event: both visible at once.
	orchestrator := []durable.WorkItem{
		durable.TimerFired{Instance: id, ExecutionID: 1, ID: 5, FireAtMS: 1234567890},
		durable.ExternalRaised{Instance: id, Name: "TestEvent", Data: "test-data"},
	}
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: delta, WorkerItems: workers, OrchestratorItems: orchestrator,
		Metadata: StartedMetadata(),
	}))

	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, len(delta), "all history events persisted")
	for i, e := range events {
		require.Equal(h.T, delta[i].EventID, e.EventID)
		require.Equal(h.T, delta[i].Kind, e.Kind)
	}

	var got []durable.WorkItem
	for range workers {
		w := h.MustFetchWork(h.P, LongLock)
		got = append(got, w.Item)
	}
	require.ElementsMatch(h.T, workers, got, "all worker items enqueued")
	h.NoWork(h.P)

	next := lockingFetchBatch(h, h.P, LongLock, len(orchestrator))
	require.Equal(h.T, id, next.Instance)
	require.Equal(h.T, orchestrator, next.Messages, "exactly the turn's orchestrator items; the start was consumed")
	require.Len(h.T, next.History, len(delta))
}

func atomicityLockReleasedOnlyOnSuccess(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	h.Enqueue(h.P, StartItem(id))
	// A long lock, so that the checks below run while it holds however
	// slow the run; then cut to lt, to let it expire.
	first := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, first.Instance)
	h.NoOrch(h.P)

	err := h.P.AckOrchestrationItem(h.Ctx, "invalid-lock-token", creationFirstTurn(id))
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with an invalid token")
	// Still locked, nothing written.
	h.NoOrch(h.P)
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, events)

	// Only expiry frees it; the start message is still there.
	require.NoError(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, first.LockToken, lt))
	h.Sleep(lockExpiryWait(h))
	again := h.MustFetchOrch(h.P, lt)
	require.Equal(h.T, id, again.Instance)
	require.Equal(h.T, []durable.WorkItem{StartItem(id)}, again.Messages)
	require.Empty(h.T, again.History)
	require.Equal(h.T, uint32(2), again.AttemptCount)
}

func atomicityConcurrentAck(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)

	// Two acks of one lock, each with its own turn.
	turns := [2]durable.OrchestrationTurn{}
	for i, name := range []string{"A", "B"} {
		turns[i] = creationFirstTurn(id)
		turns[i].HistoryDelta = append(turns[i].HistoryDelta,
			Event(id, 1, 2, history.ActivityScheduled{Name: name, Input: "{}"}))
	}
	var errs [2]error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			<-start
			errs[i] = h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turns[i])
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(h.T, -1, winner, "both acks of one lock succeeded")
			winner = i
		}
	}
	require.NotEqual(h.T, -1, winner, "neither ack succeeded: %v", errs)
	require.Error(h.T, errs[1-winner])

	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 2, "exactly one turn's history")
	require.Equal(h.T, turns[winner].HistoryDelta[1].Kind, events[1].Kind, "the winner's turn, unmixed")

	// The lock is gone for good.
	err = h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turns[1-winner])
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack of an already acked lock")
	h.NoOrch(h.P)
}

func atomicityAppendDuplicates(h *H) {
	id := h.ID("instance-a")
	h.CreateInstance(h.P, id)
	ev := func(eventID uint64, name string) history.Event {
		return Event(id, 1, eventID, history.ActivityScheduled{Name: name, Input: "{}"})
	}
	read := func() []history.Event {
		events, err := h.P.Read(h.Ctx, id)
		require.NoError(h.T, err)
		return events
	}

	err := h.P.AppendWithExecution(h.Ctx, id, 1, []history.Event{ev(2, "a"), ev(3, "b"), ev(1, "dup")})
	require.ErrorIs(h.T, err, durable.ErrPermanent, "append with an id already stored")
	require.Len(h.T, read(), 1, "nothing of the rejected batch may be written")

	err = h.P.AppendWithExecution(h.Ctx, id, 1, []history.Event{ev(2, "a"), ev(2, "b")})
	require.ErrorIs(h.T, err, durable.ErrPermanent, "append with a duplicate id within the batch")
	require.Len(h.T, read(), 1, "nothing of the rejected batch may be written")

	// The runtime's ids are stored as given.
	require.NoError(h.T, h.P.AppendWithExecution(h.Ctx, id, 1, []history.Event{ev(2, "a"), ev(3, "b")}))
	events := read()
	require.Len(h.T, events, 3)
	for i, e := range events {
		require.Equal(h.T, uint64(i+1), e.EventID)
		require.Equal(h.T, id, e.InstanceID)
	}
	require.Equal(h.T, ev(3, "b").Kind, events[2].Kind)

	err = h.P.AppendWithExecution(h.Ctx, id, 1, []history.Event{ev(4, "c"), ev(3, "again")})
	require.ErrorIs(h.T, err, durable.ErrPermanent)
	require.Len(h.T, read(), 3)
}

func atomicityCancelledAck(h *H) {
	// Small turns commit in one write; large ones may take several, which
	// gives cancellation more places to land. The context is cancelled
	// before the call, as it starts, and at growing points of its round trips.
	i := 0
	for _, c := range []struct {
		events int
		after  []time.Duration
	}{
		{3, []time.Duration{-1, 0, time.Millisecond, 5 * time.Millisecond, 15 * time.Millisecond, 40 * time.Millisecond}},
		{120, []time.Duration{0, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond}},
	} {
		for _, after := range c.after {
			atomicityCancelledAckCase(h, i, c.events, after)
			i++
		}
	}
}

// atomicityCancelledAckCase acks a turn of n events, worker items and an
// effect on another instance under a context cancelled after cancelAfter
// (before the call when negative), then checks that the turn committed
// exactly once, whole.
func atomicityCancelledAckCase(h *H, i, n int, cancelAfter time.Duration) {
	h.T.Helper()
	id := h.ID(fmt.Sprintf("cancel-ack-%d", i))
	peer := h.ID(fmt.Sprintf("cancel-ack-peer-%d", i))
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance, "case %d: earlier cases left nothing fetchable", i)

	delta := []history.Event{Started(id, 1)}
	var work []durable.WorkItem
	for e := uint64(2); e <= uint64(n); e++ {
		a := queueActivity(id, e)
		delta = append(delta, Event(id, 1, e, history.ActivityScheduled{Name: a.Name, Input: a.Input}))
		if len(work) < 3 {
			work = append(work, a)
		}
	}
	effect := durable.ExternalRaised{Instance: peer, Name: "effect", Data: id}
	turn := durable.OrchestrationTurn{ExecutionID: 1, HistoryDelta: delta, WorkerItems: work,
		OrchestratorItems: []durable.WorkItem{effect}, Metadata: StartedMetadata()}

	ctx, cancel := context.WithCancel(h.Ctx)
	if cancelAfter < 0 {
		cancel()
	} else {
		timer := time.AfterFunc(cancelAfter, cancel)
		defer timer.Stop()
	}
	first := h.P.AckOrchestrationItem(ctx, item.LockToken, turn)
	cancel()

	// Whatever point the cancellation hit, the history is all there or not at all.
	got, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Contains(h.T, []int{0, n}, len(got), "case %d: a cancelled ack left %d of its %d events", i, len(got), n)
	if first == nil {
		require.Len(h.T, got, n, "case %d: an ack that returned nil committed", i)
	}
	// Another turn under the token never commits once the first landed.
	if first == nil || len(got) == n {
		other := turn
		other.HistoryDelta = delta[:1]
		require.ErrorIs(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, other), durable.ErrPermanent,
			"case %d: another turn under a lock that committed", i)
	}
	// A second ack of the same turn with the token commits it unless the
	// first did; then it is refused, or recognised as that very commit
	// (a provider whose commit record names the turn answers nil, the
	// answer a resend after a lost answer needs). Either way it commits
	// nothing more.
	second := h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turn)
	if second != nil {
		require.ErrorIs(h.T, second, durable.ErrPermanent, "case %d: a failed second ack is a refusal", i)
	}
	got, err = h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, delta, got, "case %d: the turn committed exactly once, whole (first ack: %v; second: %v)", i, first, second)

	// Every other part of the turn arrives exactly once. The instance's next
	// turn also finishes whatever publication the commit left to it.
	ping := durable.ExternalRaised{Instance: id, Name: "ping", Data: "{}"}
	h.Enqueue(h.P, ping)
	seen := map[string]bool{}
	h.Eventually(func() bool {
		it, err := h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
		if errors.Is(err, durable.ErrRetryable) {
			return false
		}
		require.NoError(h.T, err)
		if it == nil {
			return false
		}
		require.False(h.T, seen[it.Instance], "case %d: %q delivered twice", i, it.Instance)
		seen[it.Instance] = true
		switch it.Instance {
		case id:
			require.Equal(h.T, []durable.WorkItem{ping}, it.Messages, "case %d", i)
			require.Equal(h.T, delta, it.History, "case %d", i)
		case peer:
			require.Equal(h.T, []durable.WorkItem{effect}, it.Messages, "case %d: the effect, once", i)
		default:
			h.T.Fatalf("case %d: unexpected instance %q", i, it.Instance)
		}
		require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, it.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
		return len(seen) == 2
	}, fmt.Sprintf("case %d: the ping and the turn's effect", i))
	var activities []durable.WorkItem
	for range work {
		w := h.MustFetchWork(h.P, LongLock)
		activities = append(activities, w.Item)
		require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))
	}
	require.ElementsMatch(h.T, work, activities, "case %d: every worker item, once", i)
	h.NoOrchOrWork(h.P)
}

func atomicityCancelledWorkAck(h *H) {
	for i, after := range []time.Duration{-1, 0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond} {
		id := h.ID(fmt.Sprintf("cancel-work-ack-%d", i))
		require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
		w := h.MustFetchWork(h.P, LongLock)
		require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, w), "case %d: earlier cases left no work", i)
		done := queueCompletion(id, 1, "done")

		ctx, cancel := context.WithCancel(h.Ctx)
		if after < 0 {
			cancel()
		} else {
			timer := time.AfterFunc(after, cancel)
			defer timer.Stop()
		}
		first := h.P.AckWorkItem(ctx, w.LockToken, done)
		cancel()
		// A second ack commits the completion unless the first did.
		second := h.P.AckWorkItem(h.Ctx, w.LockToken, done)
		if first == nil || second != nil {
			require.ErrorIs(h.T, second, durable.ErrPermanent, "case %d: the completion had committed already", i)
		}
		// Either way: the work item is gone and its completion arrives once
		// (both queues are then watched over one window).
		require.ErrorIs(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock), durable.ErrPermanent,
			"case %d: the acked item is gone", i)
		item := h.MustFetchOrch(h.P, LongLock)
		require.Equal(h.T, id, item.Instance)
		require.Equal(h.T, []durable.WorkItem{done}, item.Messages, "case %d: the completion, once", i)
		require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
		h.NoOrchOrWork(h.P)
	}
}
