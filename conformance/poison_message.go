package conformance

import (
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// poisonMessageScenarios checks the attempt counts the runtime's poison
// detection relies on:
//   - a message's first delivery has attempt count 1, and every later
//     delivery (after abandon or lock expiry) one more, on both queues;
//   - counts are stored per message: one message's redeliveries do not
//     raise another's, and an orchestration item reports the highest count
//     among its messages;
//   - abandoning with ignoreAttempt takes back the fetch's count, never
//     below zero, and only on the messages that fetch locked: a message
//     delivered earlier and still hidden by its abandon delay keeps its
//     count.
func poisonMessageScenarios() []Scenario {
	return []Scenario{
		{"orchestration_attempt_count_starts_at_one", poisonOrchStartsAtOne},
		{"orchestration_attempt_count_increments_on_refetch", poisonOrchIncrements},
		{"worker_attempt_count_starts_at_one", poisonWorkerStartsAtOne},
		{"worker_attempt_count_increments_on_lock_expiry", poisonWorkerIncrementsOnExpiry},
		{"attempt_count_is_per_message", poisonPerMessage},
		{"abandon_work_item_ignore_attempt_decrements", poisonWorkerIgnoreAttempt},
		{"abandon_orchestration_item_ignore_attempt_decrements", poisonOrchIgnoreAttempt},
		{"ignore_attempt_never_goes_negative", poisonWorkerNeverNegative},
		{"max_attempt_count_across_message_batch", poisonMaxAcrossBatch},
		{"orchestration_attempt_count_increments_on_lock_expiry", poisonOrchIncrementsOnExpiry},
		{"orchestration_ignore_attempt_never_goes_negative", poisonOrchNeverNegative},
		{"abandon_ignore_attempt_undoes_only_this_fetch", poisonOrchIgnoreAttemptScope},
	}
}

// poisonFetchOrch fetches the only instance with work and checks its attempt count.
func poisonFetchOrch(h *H, instance string, want uint32, what string) *durable.OrchestrationItem {
	h.T.Helper()
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, instance, item.Instance)
	require.Equal(h.T, want, item.AttemptCount, what)
	return item
}

// poisonFetchWork fetches a work item of instance and checks its attempt count.
func poisonFetchWork(h *H, instance string, want uint32, what string) *durable.LockedWorkItem {
	h.T.Helper()
	w := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, instance, w.Item.TargetInstance())
	require.Equal(h.T, want, w.AttemptCount, what)
	return w
}

func poisonOrchStartsAtOne(h *H) {
	id := h.ID("poison-1")
	h.Enqueue(h.P, StartItem(id))
	item := poisonFetchOrch(h, id, 1, "first delivery")
	require.Equal(h.T, uint32(1), h.MaxAttemptCount(id), "the stored count of the locked message")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))

	// A new message starts at one again, whatever the instance went through.
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "evt", Data: "1"})
	poisonFetchOrch(h, id, 1, "first delivery of a later message")
}

func poisonOrchIncrements(h *H) {
	id := h.ID("poison-2")
	h.Enqueue(h.P, StartItem(id))
	for attempt := uint32(1); attempt <= 3; attempt++ {
		item := poisonFetchOrch(h, id, attempt, "delivery after abandons")
		require.Equal(h.T, attempt, h.MaxAttemptCount(id))
		if attempt < 3 {
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
			require.Equal(h.T, attempt, h.MaxAttemptCount(id), "a plain abandon keeps the count")
		} else {
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
		}
	}
}

func poisonWorkerStartsAtOne(h *H) {
	id := h.ID("poison-3")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := poisonFetchWork(h, id, 1, "first delivery")
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, w))
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "done")))
	h.NoWork(h.P)
}

func poisonWorkerIncrementsOnExpiry(h *H) {
	id := h.ID("poison-4")
	lt := h.Options().LockTimeout
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	first := h.MustFetchWork(h.P, lt)
	require.Equal(h.T, uint32(1), first.AttemptCount)

	h.Sleep(lockExpiryWait(h))
	second := poisonFetchWork(h, id, 2, "delivery after the lock expired")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, second.LockToken, queueCompletion(id, 1, "done")))
}

func poisonPerMessage(h *H) {
	a, b := h.ID("poison-5a"), h.ID("poison-5b")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(a, 1)))
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(b, 2)))

	// Both are fresh: 1 each.
	byInstance := map[string]*durable.LockedWorkItem{}
	for range 2 {
		w := h.MustFetchWork(h.P, LongLock)
		require.Equal(h.T, uint32(1), w.AttemptCount, "first delivery of %q", w.Item.TargetInstance())
		byInstance[w.Item.TargetInstance()] = w
	}
	require.Len(h.T, byInstance, 2)

	// Redeliver a twice while b stays locked.
	token := byInstance[a].LockToken
	for attempt := uint32(2); attempt <= 3; attempt++ {
		require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, token, 0, false))
		w := poisonFetchWork(h, a, attempt, "redelivery of the first item")
		token = w.LockToken
	}
	// b's count is its own.
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, byInstance[b].LockToken, 0, false))
	poisonFetchWork(h, b, 2, "the second item counts only its own deliveries")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, token, queueCompletion(a, 1, "done")))
}

func poisonWorkerIgnoreAttempt(h *H) {
	id := h.ID("poison-ignore-1")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := poisonFetchWork(h, id, 1, "first delivery")
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, false))
	w = poisonFetchWork(h, id, 2, "after a plain abandon")
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true))
	w = poisonFetchWork(h, id, 2, "after an ignore-attempt abandon (decremented, then re-incremented)")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "done")))
}

func poisonOrchIgnoreAttempt(h *H) {
	id := h.ID("poison-ignore-2")
	h.Enqueue(h.P, StartItem(id))
	item := poisonFetchOrch(h, id, 1, "first delivery")
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
	item = poisonFetchOrch(h, id, 2, "after a plain abandon")
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
	require.Equal(h.T, uint32(1), h.MaxAttemptCount(id), "the ignore-attempt abandon took the count back")
	item = poisonFetchOrch(h, id, 2, "after an ignore-attempt abandon (decremented, then re-incremented)")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
}

func poisonWorkerNeverNegative(h *H) {
	id := h.ID("poison-never-neg")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := poisonFetchWork(h, id, 1, "first delivery")
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true))
	// The same token again: it no longer holds the item, so nothing is
	// undone a second time (a count taken below zero would wrap).
	_ = h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true)
	w = poisonFetchWork(h, id, 1, "after an ignore-attempt abandon from 1, repeated with the same token")
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true))
	w = poisonFetchWork(h, id, 1, "after a second ignore-attempt abandon: never below zero")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "done")))
}

func poisonMaxAcrossBatch(h *H) {
	id := h.ID("poison-batch")
	h.Enqueue(h.P, StartItem(id))
	item := poisonFetchOrch(h, id, 1, "first delivery")
	require.Len(h.T, item.Messages, 1)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))

	item = poisonFetchOrch(h, id, 2, "second delivery")
	// A completion arrives during the lock; it has never been delivered.
	h.Enqueue(h.P, queueCompletion(id, 1, "activity result"))
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))

	// Start: 3rd delivery; completion: 1st. The item reports the highest.
	item = lockingFetchBatch(h, h.P, LongLock, 2)
	require.Equal(h.T, []durable.WorkItem{StartItem(id), queueCompletion(id, 1, "activity result")}, item.Messages)
	require.Equal(h.T, uint32(3), item.AttemptCount, "the highest count among the batch's messages")
	require.Equal(h.T, uint32(3), h.MaxAttemptCount(id))
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
}

func poisonOrchIncrementsOnExpiry(h *H) {
	id := h.ID("poison-orch-expiry")
	lt := h.Options().LockTimeout
	h.Enqueue(h.P, StartItem(id))
	first := h.MustFetchOrch(h.P, lt)
	require.Equal(h.T, uint32(1), first.AttemptCount)

	h.Sleep(lockExpiryWait(h))
	second := poisonFetchOrch(h, id, 2, "delivery after the lock expired")
	require.Equal(h.T, uint32(2), h.MaxAttemptCount(id))
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, second.LockToken, creationFirstTurn(id)))
}

func poisonOrchNeverNegative(h *H) {
	id := h.ID("poison-orch-never-neg")
	h.Enqueue(h.P, StartItem(id))
	item := poisonFetchOrch(h, id, 1, "first delivery")
	// A message that arrives while the batch is locked is not the fetch's:
	// the abandon leaves its count (0) alone.
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "late", Data: "1"})
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
	require.Equal(h.T, uint32(0), h.MaxAttemptCount(id), "the locked message back to 0, the late one never below")
	// The same token again: it no longer holds the instance.
	_ = h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true)
	require.Equal(h.T, uint32(0), h.MaxAttemptCount(id), "nothing undone twice")
	item = poisonFetchOrch(h, id, 1, "after an ignore-attempt abandon from 1")
	require.Len(h.T, item.Messages, 2)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
	require.Equal(h.T, uint32(0), h.MaxAttemptCount(id), "never below zero")
	item = poisonFetchOrch(h, id, 1, "after a second ignore-attempt abandon")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
}

func poisonOrchIgnoreAttemptScope(h *H) {
	id := h.ID("poison-ignore-scope")
	h.Enqueue(h.P, StartItem(id))
	first := poisonFetchOrch(h, id, 1, "first delivery of the start")
	// Abandoned with a long delay: the start keeps its count (1) and stays
	// hidden for the rest of the scenario, however slow the run.
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, first.LockToken, LongLock, false))
	require.Equal(h.T, uint32(1), h.MaxAttemptCount(id))

	late := durable.ExternalRaised{Instance: id, Name: "late", Data: "1"}
	h.Enqueue(h.P, late)
	item := poisonFetchOrch(h, id, 1, "first delivery of the late message")
	require.Equal(h.T, []durable.WorkItem{late}, item.Messages, "the delayed start is not part of this fetch")
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
	require.Equal(h.T, uint32(1), h.MaxAttemptCount(id),
		"the late message back to 0; the start, which this fetch did not lock, keeps its 1")

	item = poisonFetchOrch(h, id, 1, "the late message's abandoned delivery did not count")
	require.Equal(h.T, []durable.WorkItem{late}, item.Messages)
}
