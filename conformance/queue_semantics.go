package conformance

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// queueSemanticsScenarios checks the two queues' delivery semantics:
//   - the worker queue is FIFO and peek-lock: a fetched item stays stored,
//     invisible to other fetches, until it is acked, abandoned or its lock
//     expires (a lost token is recovered by expiry, with redelivery);
//   - AckWorkItem deletes the item and enqueues its completion together;
//   - worker items are visible at once; abandoned-with-delay items are
//     skipped until the delay passes, without blocking later items;
//   - orchestrator messages enqueued with a delay (timers) stay invisible
//     until due, and a TimerFired enqueued by an ack becomes visible at its
//     FireAtMS; an orchestrator fetch locks every visible message of the
//     instance, in enqueue order, and none that is not yet visible;
//   - a QueueMessage for an instance that has not started is dropped at
//     fetch, while one for a started instance (or arriving with its
//     StartOrchestration) is delivered.
func queueSemanticsScenarios() []Scenario {
	return []Scenario{
		{"worker_queue_fifo_ordering", queueWorkerFIFO},
		{"worker_peek_lock_semantics", queueWorkerPeekLock},
		{"worker_ack_atomicity", queueWorkerAckAtomicity},
		{"timer_delayed_visibility", queueTimerDelayedVisibility},
		{"lost_lock_token_handling", queueLostLockToken},
		{"worker_item_immediate_visibility", queueWorkerImmediateVisibility},
		{"worker_delayed_visibility_skips_future_items", queueWorkerDelayedSkipsFuture},
		{"orphan_queue_messages_dropped", queueOrphanQueueMessagesDropped},
		{"orchestrator_fetch_locks_all_messages_in_enqueue_order", queueOrchestratorBatchOrder},
		{"orchestrator_delayed_message_excluded_from_batch", queueOrchestratorDelayedExcluded},
		{"timer_fired_from_ack_visible_at_fire_time", queueTimerFromAckVisibleAtFireTime},
		{"client_call_request_id_takes_effect_once", queueRequestIDOnce},
	}
}

// queueRequestIDOnce: a client call's work item carrying a request id is
// enqueued at most once per id, before and after a turn consumed it; the
// same id with other arguments is a permanent error and enqueues nothing.
// Each "nothing more" is proven by a later probe message of the same
// instance arriving alone in its fetch.
func queueRequestIDOnce(h *H) {
	inst := h.ID("rid")
	start := StartItem(inst)
	start.RequestID = "start-1"
	h.Enqueue(h.P, start)
	h.Enqueue(h.P, start) // the caller's repeat
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{start}, item.Messages, "one start for two calls with one request id")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(inst)))

	raise := durable.ExternalRaised{Instance: inst, Name: "approve", Data: "yes", RequestID: "raise-1"}
	for round, probe := range []string{"p1", "p2"} {
		h.Enqueue(h.P, raise) // first call, then a repeat after the turn consumed it
		h.Enqueue(h.P, start) // a repeat of the start, long consumed
		p := durable.ExternalRaised{Instance: inst, Name: "probe", Data: probe, RequestID: "probe-" + probe}
		h.Enqueue(h.P, p)
		got := h.MustFetchOrch(h.P, LongLock)
		want := []durable.WorkItem{raise, p}
		if round > 0 {
			want = []durable.WorkItem{p}
		}
		require.Equal(h.T, want, got.Messages, "round %d", round)
		require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, got.LockToken, durable.OrchestrationTurn{ExecutionID: got.ExecutionID}))
	}

	other := raise
	other.Data = "no"
	cancel := durable.CancelInstance{Instance: inst, Reason: "r", RequestID: "raise-1"}
	if rc, ok := h.P.(durable.RequestChecker); ok {
		// What a resending caller asks before it answers: the consumed
		// calls are recorded as done, other calls under their ids as
		// different, an unused id as unknown; nothing is written.
		for _, tc := range []struct {
			item durable.WorkItem
			want durable.RequestState
		}{
			{start, durable.RequestSame}, {raise, durable.RequestSame},
			{other, durable.RequestDifferent}, {cancel, durable.RequestDifferent},
			{durable.ExternalRaised{Instance: inst, Name: "approve", Data: "yes", RequestID: "never-used"}, durable.RequestUnknown},
			{durable.ExternalRaised{Instance: inst, Name: "approve", Data: "yes"}, durable.RequestUnknown},
			{durable.ExternalRaised{Instance: h.ID("elsewhere"), Name: "approve", Data: "yes", RequestID: "raise-1"}, durable.RequestUnknown},
		} {
			got, err := rc.CheckRequest(h.Ctx, tc.item)
			require.NoError(h.T, err)
			require.Equal(h.T, tc.want, got, "%#v", tc.item)
		}
	}
	err := h.P.EnqueueForOrchestrator(h.Ctx, other, 0)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "another call under a used request id")
	require.ErrorIs(h.T, err, durable.ErrRequestReused)
	require.ErrorIs(h.T, h.P.EnqueueForOrchestrator(h.Ctx, cancel, 0), durable.ErrRequestReused, "another kind of call under a used request id")
	p := durable.ExternalRaised{Instance: inst, Name: "probe", Data: "p3", RequestID: "probe-p3"}
	h.Enqueue(h.P, p)
	got := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{p}, got.Messages, "a refused call enqueues nothing")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, got.LockToken, durable.OrchestrationTurn{ExecutionID: got.ExecutionID}))
}

// queueActivity is an untagged, sessionless ActivityExecute of instance's
// execution 1 with activity id id.
func queueActivity(instance string, id uint64) durable.ActivityExecute {
	return durable.ActivityExecute{Instance: instance, ExecutionID: 1, ID: id,
		Name: fmt.Sprintf("Activity%d", id), Input: fmt.Sprintf("input%d", id)}
}

// queueCompletion is the ActivityCompleted answering queueActivity(instance, id).
func queueCompletion(instance string, id uint64, result string) durable.ActivityCompleted {
	return durable.ActivityCompleted{Instance: instance, ExecutionID: 1, ID: id, Result: result}
}

// queueActivityOf returns the fetched worker item as an ActivityExecute,
// failing the scenario if it is anything else.
func queueActivityOf(h *H, w *durable.LockedWorkItem) durable.ActivityExecute {
	h.T.Helper()
	require.NotNil(h.T, w)
	a, ok := w.Item.(durable.ActivityExecute)
	require.True(h.T, ok, "worker item is %T, want ActivityExecute", w.Item)
	return a
}

func queueWorkerFIFO(h *H) {
	id := h.ID("instance-a")
	for i := range uint64(5) {
		require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, i+1)))
	}
	for i := range uint64(5) {
		w := h.MustFetchWork(h.P, LongLock)
		a := queueActivityOf(h, w)
		require.Equal(h.T, i+1, a.ID, "worker items must be delivered in enqueue order")
		require.Equal(h.T, fmt.Sprintf("Activity%d", i+1), a.Name)
		require.Equal(h.T, fmt.Sprintf("input%d", i+1), a.Input)
		require.Equal(h.T, id, a.Instance)
	}
	h.NoWork(h.P)
}

func queueWorkerPeekLock(h *H) {
	id := h.ID("instance-a")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, w))

	// Locked, not removed: no fetch (from any replica) sees it.
	h.NoWork(h.P)
	h.NoWork(h.Open())

	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "result1")))
	h.NoWork(h.P)

	// The ack consumed the token: a second ack fails and enqueues nothing more.
	err := h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "again"))
	require.ErrorIs(h.T, err, durable.ErrPermanent, "acking an already acked work item")
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 1, "result1")}, item.Messages)
}

func queueWorkerAckAtomicity(h *H) {
	id := h.ID("instance-a")
	h.CreateInstance(h.P, id)
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := h.MustFetchWork(h.P, LongLock)

	// Before the ack the completion is nowhere.
	h.NoOrch(h.P)
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "result1")))

	h.NoWork(h.P)
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 1, "result1")}, item.Messages)
	require.Len(h.T, item.History, 1, "the started history comes with the completion")
}

func queueTimerDelayedVisibility(h *H) {
	id := h.ID("instance-a")
	h.CreateInstance(h.P, id)
	// A timer due after the scenario's checks: not fetchable in them,
	// however slow the run, and fetched at its end.
	lateAt := time.Now()
	late := durable.TimerFired{Instance: id, ExecutionID: 1, ID: 3,
		FireAtMS: uint64(lateAt.Add(longHide).UnixMilli())}
	require.NoError(h.T, h.P.EnqueueForOrchestrator(h.Ctx, late, longHide))
	h.NoOrchUntil(h.P, withheldUntil(h, lateAt, longHide))

	// A timer due soon: fetched once due, never before.
	delay := h.Options().LockTimeout
	enqueued := time.Now()
	timer := durable.TimerFired{Instance: id, ExecutionID: 1, ID: 2,
		FireAtMS: uint64(enqueued.Add(delay).UnixMilli())}
	require.NoError(h.T, h.P.EnqueueForOrchestrator(h.Ctx, timer, delay))
	item := h.MustFetchOrchAfter(h.P, LongLock, enqueued.Add(delay))
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, []durable.WorkItem{timer}, item.Messages, "the due timer, without the later one")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
	h.NoOrchUntil(h.P, withheldUntil(h, lateAt, longHide))

	// The later timer comes due too.
	h.Sleep(time.Until(lateAt.Add(longHide)))
	item = h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, []durable.WorkItem{late}, item.Messages, "the later timer, once due")
}

func queueLostLockToken(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	// A long lock while the item must stay hidden, however slow the run;
	// then cut to lt by a renewal, the token's last use.
	first := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, uint32(1), first.AttemptCount)
	h.NoWork(h.P)
	require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, first.LockToken, lt))

	// The worker crashes: its token is never used again.
	h.Sleep(lockExpiryWait(h))

	again := h.MustFetchWork(h.Open(), lt)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, again), "the same item is redelivered")
	require.NotEqual(h.T, first.LockToken, again.LockToken)
	require.Equal(h.T, uint32(2), again.AttemptCount, "redelivery after expiry counts an attempt")
}

func queueWorkerImmediateVisibility(h *H) {
	id := h.ID("immediate")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	// One fetch, not a retried one: visible as soon as the enqueue returns.
	w, err := h.P.FetchWorkItem(h.Ctx, LongLock, 0, nil, durable.AnyTag())
	require.NoError(h.T, err)
	require.NotNil(h.T, w, "the item is visible as soon as its enqueue returns")
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, w))
	require.Equal(h.T, uint32(1), w.AttemptCount)
	require.NotEmpty(h.T, w.LockToken)
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "done")))
	h.NoWork(h.P)
}

func queueWorkerDelayedSkipsFuture(h *H) {
	id := h.ID("delayed")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 2)))

	first := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, uint64(1), queueActivityOf(h, first).ID)
	// Delayed past the scenario's checks: unlocked but not visible in them,
	// however slow the run, so the next item is served, then none; the
	// delayed item is fetched at the end.
	hiddenAt := time.Now()
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, first.LockToken, longHide, false))
	second := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, uint64(2), queueActivityOf(h, second).ID, "a delayed item must be skipped")
	h.NoWorkUntil(h.P, withheldUntil(h, hiddenAt, longHide))

	// Delayed briefly: visible again once the delay passed, never before.
	delay := h.Options().LockTimeout
	abandoned := time.Now()
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, second.LockToken, delay, false))
	third := h.MustFetchWorkAfter(h.P, LongLock, abandoned.Add(delay))
	require.Equal(h.T, uint64(2), queueActivityOf(h, third).ID, "the delayed item is visible after its delay")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, third.LockToken, queueCompletion(id, 2, "done")))
	h.NoWorkUntil(h.P, withheldUntil(h, hiddenAt, longHide))

	// The long delay passes too: the first item is back.
	h.Sleep(time.Until(hiddenAt.Add(longHide)))
	back := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, back), "the long-delayed item is visible after its delay")
	require.Equal(h.T, uint32(2), back.AttemptCount)
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, back.LockToken, queueCompletion(id, 1, "done")))
	h.NoWork(h.P)
}

func queueOrphanQueueMessagesDropped(h *H) {
	orphan := h.ID("orphan")
	for _, data := range []string{"v1", "v2"} {
		h.Enqueue(h.P, durable.QueueMessage{Instance: orphan, Name: "ConfigUpdate", Data: data})
	}
	admin, hasAdmin := h.P.Admin()
	if hasAdmin {
		h.Eventually(func() bool {
			d, err := admin.GetQueueDepths(h.Ctx)
			require.NoError(h.T, err)
			return d.OrchestratorQueue == 2
		}, "both orphan messages to be queued")
	}
	// Fetching drops them: nothing is returned, now or on later fetches.
	h.NoOrch(h.P)
	h.NoOrch(h.P)
	if hasAdmin {
		d, err := admin.GetQueueDepths(h.Ctx)
		require.NoError(h.T, err)
		require.Zero(h.T, d.OrchestratorQueue, "orphan queue messages must be deleted, not left queued")
	}
	// The dropped messages do not resurface when the instance later starts.
	h.Enqueue(h.P, StartItem(orphan))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, orphan, item.Instance)
	require.Equal(h.T, []durable.WorkItem{StartItem(orphan)}, item.Messages)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(orphan)))

	// A QueueMessage for a started instance is delivered.
	existing := h.ID("existing")
	h.CreateInstance(h.P, existing)
	msg := durable.QueueMessage{Instance: existing, Name: "ConfigUpdate", Data: "v3"}
	h.Enqueue(h.P, msg)
	got := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, existing, got.Instance)
	require.Equal(h.T, []durable.WorkItem{msg}, got.Messages)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, got.LockToken, durable.OrchestrationTurn{ExecutionID: got.ExecutionID}))

	// A QueueMessage arriving together with its instance's start is kept.
	fresh := h.ID("fresh")
	early := durable.QueueMessage{Instance: fresh, Name: "ConfigUpdate", Data: "v4"}
	h.Enqueue(h.P, StartItem(fresh))
	h.Enqueue(h.P, early)
	batch := lockingFetchBatch(h, h.P, LongLock, 2)
	require.Equal(h.T, fresh, batch.Instance)
	require.Equal(h.T, []durable.WorkItem{StartItem(fresh), early}, batch.Messages)
}

func queueOrchestratorBatchOrder(h *H) {
	id := h.ID("batch")
	h.CreateInstance(h.P, id)
	msgs := []durable.WorkItem{
		queueCompletion(id, 2, "r2"),
		durable.ExternalRaised{Instance: id, Name: "approve", Data: "yes"},
		durable.ActivityFailed{Instance: id, ExecutionID: 1, ID: 3,
			Details: history.ApplicationError(history.AppActivityFailed, "boom", false)},
		queueCompletion(id, 4, "r4"),
		durable.QueueMessage{Instance: id, Name: "mailbox", Data: "m1"},
	}
	for _, m := range msgs {
		h.Enqueue(h.P, m)
	}
	item := lockingFetchBatch(h, h.P, LongLock, len(msgs))
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, msgs, item.Messages, "every visible message, in enqueue order")
	require.Len(h.T, item.History, 1)
	require.Equal(h.T, uint32(1), item.AttemptCount)

	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
	h.NoOrch(h.P)
}

func queueOrchestratorDelayedExcluded(h *H) {
	id := h.ID("delayed-batch")
	h.CreateInstance(h.P, id)
	delay := h.Options().LockTimeout
	now := durable.ExternalRaised{Instance: id, Name: "now", Data: "1"}
	soon := durable.ExternalRaised{Instance: id, Name: "soon", Data: "2"}
	// Due after the scenario's checks, however slow the run, and fetched at its end.
	never := durable.ExternalRaised{Instance: id, Name: "never", Data: "3"}
	neverAt := time.Now()
	require.NoError(h.T, h.P.EnqueueForOrchestrator(h.Ctx, never, longHide))
	h.Enqueue(h.P, now)

	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{now}, item.Messages, "a message not yet visible must not join the batch")
	// Enqueued delayed while the batch is locked, so it is waiting, not
	// visible, when the batch is acked.
	enqueued := time.Now()
	require.NoError(h.T, h.P.EnqueueForOrchestrator(h.Ctx, soon, delay))
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))

	rest := h.MustFetchOrchAfter(h.P, LongLock, enqueued.Add(delay))
	require.Equal(h.T, []durable.WorkItem{soon}, rest.Messages, "the delayed message survives the ack of the earlier batch")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, rest.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
	h.NoOrchUntil(h.P, withheldUntil(h, neverAt, longHide)) // never is still delayed...

	// ... and neither ack deleted it: once due, it is delivered.
	h.Sleep(time.Until(neverAt.Add(longHide)))
	last := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, last.Instance)
	require.Equal(h.T, []durable.WorkItem{never}, last.Messages, "the long-delayed message, once due")
}

func queueTimerFromAckVisibleAtFireTime(h *H) {
	id := h.ID("ack-timer")
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	delay := h.Options().LockTimeout
	fireAt := time.Now().Add(delay)
	timer := durable.TimerFired{Instance: id, ExecutionID: 1, ID: 2, FireAtMS: uint64(fireAt.UnixMilli())}
	// A second timer fires after the scenario: never fetchable in it,
	// however slow the run.
	far := durable.TimerFired{Instance: id, ExecutionID: 1, ID: 3, FireAtMS: uint64(time.Now().Add(LongLock).UnixMilli())}
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		HistoryDelta: []history.Event{Started(id, 1),
			Event(id, 1, 2, history.TimerCreated{FireAtMS: timer.FireAtMS}),
			Event(id, 1, 3, history.TimerCreated{FireAtMS: far.FireAtMS})},
		OrchestratorItems: []durable.WorkItem{timer, far},
		Metadata:          StartedMetadata(),
	}))
	h.Sleep(time.Until(fireAt.Add(lockMargin(h))))
	fired := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{timer}, fired.Messages, "the due timer, without the later one")
	require.Len(h.T, fired.History, 3)
}
