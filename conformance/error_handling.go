package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// errorHandlingScenarios checks how failures are reported:
//   - unknown, consumed or expired lock tokens are permanent errors
//     (*ProviderError matching durable.ErrPermanent) and commit nothing;
//     abandoning an unknown work-item token is the one documented success;
//   - a duplicate event id is a permanent error that leaves history as it was;
//   - reads of an unknown instance or execution are empty, not errors;
//   - undecodable stored history is surfaced (HistoryError on fetch, an
//     error from Read), never silently dropped;
//   - a work item without a target instance is rejected permanently and
//     nothing is queued;
//   - a call with a cancelled context fails with an error wrapping
//     context.Canceled and holds no lock and counts no attempt.
func errorHandlingScenarios() []Scenario {
	return []Scenario{
		{"invalid_lock_token_on_ack", errInvalidTokenOnAck},
		{"duplicate_event_id_rejection", errDuplicateEventID},
		{"missing_instance_metadata", errMissingInstance},
		{"corrupted_serialization_data", errCorruptedData},
		{"lock_expiration_during_ack", errLockExpirationDuringAck},
		{"enqueue_rejects_empty_instance_id", errEnqueueEmptyInstance},
		{"fetch_with_cancelled_context_holds_no_lock", errCancelledFetch},
		{"unknown_work_item_tokens", errUnknownWorkTokens},
	}
}

// errRequireProviderError asserts err is a *ProviderError (possibly wrapped)
// matching class (durable.ErrPermanent or durable.ErrRetryable; nil for
// either).
func errRequireProviderError(h *H, err error, class error, what string) {
	h.T.Helper()
	require.Error(h.T, err, what)
	var pe *durable.ProviderError
	require.True(h.T, errors.As(err, &pe), "%s: error %v (%T) is not a *durable.ProviderError", what, err, err)
	if class != nil {
		require.ErrorIs(h.T, err, class, what)
	}
}

func errInvalidTokenOnAck(h *H) {
	id := h.ID("instance-a")
	turn := creationFirstTurn(id)
	turn.WorkerItems = []durable.WorkItem{queueActivity(id, 2)}
	turn.OrchestratorItems = []durable.WorkItem{durable.ExternalRaised{Instance: id, Name: "evt", Data: "1"}}
	err := h.P.AckOrchestrationItem(h.Ctx, "invalid-token", turn)
	errRequireProviderError(h, err, durable.ErrPermanent, "ack with an unknown token")
	creationRequireAbsent(h, h.P, id)
	h.NoOrchOrWork(h.P)

	// A consumed token is as dead as an unknown one.
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
	err = h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{Event(id, 1, 2, history.ExternalEvent{Name: "evt", Data: "1"})}})
	errRequireProviderError(h, err, durable.ErrPermanent, "second ack of one lock")
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 1, "the second ack must not append")
}

func errDuplicateEventID(h *H) {
	id := h.ID("instance-a")
	h.CreateInstance(h.P, id)
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "evt", Data: "1"})
	item := h.MustFetchOrch(h.P, LongLock)

	err := h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{Event(id, 1, 1, history.ActivityScheduled{Name: "Activity", Input: "{}"})}})
	errRequireProviderError(h, err, durable.ErrPermanent, "ack appending an existing event id")

	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 1)
	require.Equal(h.T, Started(id, 1).Kind, events[0].Kind, "the stored event is not overwritten")
}

func errMissingInstance(h *H) {
	id := h.ID("non-existent-instance")
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err, "reading an unknown instance is not an error")
	require.Empty(h.T, events)
	events, err = h.P.ReadWithExecution(h.Ctx, id, 1)
	require.NoError(h.T, err)
	require.Empty(h.T, events)
	stats, err := h.P.GetInstanceStats(h.Ctx, id)
	require.NoError(h.T, err)
	require.Nil(h.T, stats)

	if a, ok := h.P.Admin(); ok {
		_, err := a.GetInstanceInfo(h.Ctx, id)
		errRequireProviderError(h, err, durable.ErrPermanent, "instance info of an unknown instance")
		_, err = a.LatestExecutionID(h.Ctx, id)
		errRequireProviderError(h, err, durable.ErrPermanent, "latest execution of an unknown instance")
		execs, err := a.ListExecutions(h.Ctx, id)
		require.NoError(h.T, err)
		require.Empty(h.T, execs)
	}

	// A known instance's missing execution reads empty too.
	known := h.ID("known")
	h.CreateInstance(h.P, known)
	events, err = h.P.ReadWithExecution(h.Ctx, known, 7)
	require.NoError(h.T, err)
	require.Empty(h.T, events)
}

func errCorruptedData(h *H) {
	id := h.ID("corrupt")
	h.CreateInstance(h.P, id)
	h.CorruptHistory(id)

	// Reads report the corruption instead of returning less history.
	_, err := h.P.Read(h.Ctx, id)
	errRequireProviderError(h, err, durable.ErrPermanent, "reading undecodable history")
	_, err = h.P.ReadWithExecution(h.Ctx, id, 1)
	errRequireProviderError(h, err, durable.ErrPermanent, "reading undecodable history")

	// A fetch still hands the work out, locked and counted, with the error.
	raised := durable.ExternalRaised{Instance: id, Name: "evt", Data: "1"}
	h.Enqueue(h.P, raised)
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.NotEmpty(h.T, item.HistoryError, "undecodable history must be reported on the item")
	require.Empty(h.T, item.History)
	require.Equal(h.T, []durable.WorkItem{raised}, item.Messages)
	require.Equal(h.T, uint32(1), item.AttemptCount)
	h.NoOrch(h.P) // the lock is held

	// Released, the same message comes back, counted again, with the error.
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, again.Instance)
	require.Equal(h.T, []durable.WorkItem{raised}, again.Messages)
	require.NotEmpty(h.T, again.HistoryError)
	require.Equal(h.T, uint32(2), again.AttemptCount)
}

func errLockExpirationDuringAck(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, lt)
	h.Sleep(lockExpiryWait(h))

	err := h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id))
	errRequireProviderError(h, err, durable.ErrPermanent, "ack after the lock expired")
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, events, "the late ack must commit nothing")

	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{StartItem(id)}, again.Messages, "the message was not consumed")
	require.Equal(h.T, uint32(2), again.AttemptCount)
}

func errEnqueueEmptyInstance(h *H) {
	orch := []durable.WorkItem{
		durable.StartOrchestration{Orchestration: TestOrchestration, Input: "{}", ExecutionID: 1},
		durable.ExternalRaised{Name: "evt", Data: "1"},
		durable.ActivityCompleted{ExecutionID: 1, ID: 1, Result: "r"},
		durable.SubOrchCompleted{ParentExecutionID: 1, ParentID: 2, Result: "r"},
		durable.QueueMessage{Name: "q", Data: "1"},
		nil,
	}
	for _, item := range orch {
		err := h.P.EnqueueForOrchestrator(h.Ctx, item, 0)
		errRequireProviderError(h, err, durable.ErrPermanent, "enqueue of an item without instance")
	}
	err := h.P.EnqueueForOrchestrator(h.Ctx, durable.ExternalRaised{Name: "later"}, time.Minute)
	errRequireProviderError(h, err, durable.ErrPermanent, "delayed enqueue of an item without instance")
	err = h.P.EnqueueForWorker(h.Ctx, durable.ActivityExecute{ExecutionID: 1, ID: 1, Name: "A", Input: "{}"})
	errRequireProviderError(h, err, durable.ErrPermanent, "worker enqueue of an item without instance")
	err = h.P.EnqueueForWorker(h.Ctx, nil)
	errRequireProviderError(h, err, durable.ErrPermanent, "worker enqueue of nil")

	h.NoOrchOrWork(h.P)
	if a, ok := h.P.Admin(); ok {
		d, err := a.GetQueueDepths(h.Ctx)
		require.NoError(h.T, err)
		require.Equal(h.T, durable.QueueDepths{}, d, "rejected items must not be queued")
	}
}

func errCancelledFetch(h *H) {
	id := h.ID("cancelled")
	h.Enqueue(h.P, StartItem(id))
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	// Make sure both are visible, then put them back uncounted.
	item := h.MustFetchOrch(h.P, LongLock)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
	w := h.MustFetchWork(h.P, LongLock)
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true))

	ctx, cancel := context.WithCancel(h.Ctx)
	cancel()
	got, err := h.P.FetchOrchestrationItem(ctx, LongLock, 0, nil)
	errRequireProviderError(h, err, nil, "orchestration fetch with a cancelled context")
	require.ErrorIs(h.T, err, context.Canceled)
	require.Nil(h.T, got)
	gotWork, err := h.P.FetchWorkItem(ctx, LongLock, 0, nil, durable.AnyTag())
	errRequireProviderError(h, err, nil, "work fetch with a cancelled context")
	require.ErrorIs(h.T, err, context.Canceled)
	require.Nil(h.T, gotWork)

	// No lock was left behind (the long lock would outlast the retries) and
	// no attempt was counted.
	item = h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, uint32(1), item.AttemptCount)
	w = h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, w))
	require.Equal(h.T, uint32(1), w.AttemptCount)
}

func errUnknownWorkTokens(h *H) {
	id := h.ID("work-tokens")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	held := h.MustFetchWork(h.P, LongLock)

	err := h.P.AckWorkItem(h.Ctx, "no-such-token", queueCompletion(id, 1, "stolen"))
	errRequireProviderError(h, err, durable.ErrPermanent, "work ack with an unknown token")
	err = h.P.RenewWorkItemLock(h.Ctx, "no-such-token", LongLock)
	errRequireProviderError(h, err, durable.ErrPermanent, "work renew with an unknown token")
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, "no-such-token", 0, false),
		"abandoning an unknown work-item token succeeds")

	// None of it touched the held item or enqueued a completion: the item
	// is still locked (and its ack below still commits).
	h.NoOrchOrWork(h.P)
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, held.LockToken, queueCompletion(id, 1, "done")))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 1, "done")}, item.Messages)
}
