package conformance

import (
	"sync"

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
//     a duplicate id (against stored events or within itself) writes nothing.
func atomicityScenarios() []Scenario {
	return []Scenario{
		{"atomicity_failure_rollback", atomicityFailureRollback},
		{"multi_operation_atomic_ack", atomicityMultiOperationAck},
		{"lock_released_only_on_successful_ack", atomicityLockReleasedOnlyOnSuccess},
		{"concurrent_ack_prevention", atomicityConcurrentAck},
		{"append_with_execution_rejects_duplicates_atomically", atomicityAppendDuplicates},
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
	h.NoWork(h.P)
	// Neither the other instance's start was enqueued nor was the lock released.
	h.NoOrch(h.P)
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
	h.MustFetchOrch(h.P, lt)
	h.NoOrch(h.P)

	err := h.P.AckOrchestrationItem(h.Ctx, "invalid-lock-token", creationFirstTurn(id))
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with an invalid token")
	// Still locked, nothing written.
	h.NoOrch(h.P)
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, events)

	// Only expiry frees it; the start message is still there.
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
