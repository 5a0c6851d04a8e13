package conformance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// lockExpirationScenarios checks the lifetime of orchestration and work-item
// locks:
//   - a lock expires after its timeout: the work becomes fetchable again (by
//     any replica) under a new token, and the old token can no longer ack,
//     renew or otherwise act;
//   - ack and abandon release a lock at once (abandon with a delay hides
//     the work until the delay passes, but only the messages the fetch
//     locked: a message that arrived during the lock is fetchable at once);
//   - renewal extends a held lock to now+extendFor, and fails permanently
//     for an unknown, expired or already acked token;
//   - a work-item ack after expiry, or after another worker took the item
//     over, fails and leaves the item (and no completion) behind;
//   - a fetch cancelled at any point leaves no lock, or one whole lock
//     (instance and messages together) that expires after its timeout like
//     any other: the work is then fetched again, complete.
func lockExpirationScenarios() []Scenario {
	return []Scenario{
		{"lock_expires_after_timeout", expiryLockExpires},
		{"abandon_releases_lock_immediately", expiryAbandonReleases},
		{"lock_renewal_on_ack", expiryAckReleases},
		{"concurrent_lock_attempts_respect_expiration", expiryConcurrentAttempts},
		{"worker_lock_renewal_success", expiryWorkerRenewalSuccess},
		{"worker_lock_renewal_invalid_token", expiryWorkerRenewalInvalidToken},
		{"worker_lock_renewal_after_expiration", expiryWorkerRenewalAfterExpiration},
		{"worker_lock_renewal_extends_timeout", expiryWorkerRenewalExtends},
		{"worker_lock_renewal_after_ack", expiryWorkerRenewalAfterAck},
		{"abandon_work_item_releases_lock", expiryAbandonWorkItemReleases},
		{"abandon_work_item_with_delay", expiryAbandonWorkItemWithDelay},
		{"worker_ack_fails_after_lock_expiry", expiryWorkerAckAfterExpiry},
		{"orchestration_lock_renewal_after_expiration", expiryOrchRenewalAfterExpiration},
		{"orchestration_lock_renewal_extends_timeout", expiryOrchRenewalExtends},
		{"abandon_orchestration_item_with_delay", expiryAbandonOrchWithDelay},
		{"worker_ack_fails_after_lock_taken_over", expiryWorkerAckAfterTakeover},
		{"abandon_delay_applies_only_to_locked_messages", expiryAbandonDelayScope},
		{"cancelled_fetch_lock_expires", expiryCancelledFetch},
	}
}

// lockMargin is the slack added to a lock timeout (or visibility delay)
// before a scenario relies on it having passed.
func lockMargin(h *H) time.Duration { return h.Options().LockTimeout/2 + 100*time.Millisecond }

// lockExpiryWait is how long to wait for a lock of Options().LockTimeout,
// taken just before, to have expired.
func lockExpiryWait(h *H) time.Duration { return h.Options().LockTimeout + lockMargin(h) }

// withheldUntil is the last moment an absence check may rely on work being
// withheld by a lock of timeout d, or a visibility delay d, taken at or
// after since: lockMargin before d passes, so that no fetch of the check is
// still in flight when the work comes back (see H.NoOrchUntil).
func withheldUntil(h *H, since time.Time, d time.Duration) time.Time {
	return since.Add(d - lockMargin(h))
}

// longHide is the visibility delay (of an abandon or a delayed enqueue) of
// work a scenario keeps hidden through its checks, absence checks
// included, and fetches back at its end, proving it was withheld, not
// lost. As long as LongLock: only a run stalled that long (a hang, by the
// suite's standards) could see the work back during the checks, and its
// absence checks then fail rather than pass vacuously (H.NoOrchUntil).
// No call can end a delay early, so the scenario waits it out at its end.
const longHide = LongLock

// expiryMustFetchOrch is MustFetchOrch also returning when the fetch that
// found the item started: a lock it took was taken no earlier.
func expiryMustFetchOrch(h *H, p durable.Provider, lock time.Duration) (*durable.OrchestrationItem, time.Time) {
	h.T.Helper()
	var item *durable.OrchestrationItem
	var since time.Time
	h.Eventually(func() bool {
		since = time.Now()
		var err error
		item, err = p.FetchOrchestrationItem(h.Ctx, lock, 0, nil)
		require.NoError(h.T, err)
		return item != nil
	}, "an orchestration item to fetch")
	return item, since
}

func expiryLockExpires(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	p2 := h.Open()
	h.Enqueue(h.P, StartItem(id))
	first, lockedSince := expiryMustFetchOrch(h, h.P, lt)

	// Another dispatcher (replica) watches for the instance from now on: it
	// recovers it once the lock expired, never before. (While a lock holds
	// however slow the run, see exclusive_instance_lock.)
	second := h.MustFetchOrchAfter(p2, LongLock, lockedSince.Add(lt))
	require.Equal(h.T, id, second.Instance)
	require.NotEqual(h.T, first.LockToken, second.LockToken, "a new lock needs a new token")
	require.Equal(h.T, first.Messages, second.Messages)

	// The expired token is dead for every operation and does not disturb the new lock.
	err := h.P.AckOrchestrationItem(h.Ctx, first.LockToken, creationFirstTurn(id))
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with an expired token")
	require.ErrorIs(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, first.LockToken, LongLock), durable.ErrPermanent,
		"renew with an expired token")
	h.NoOrch(h.P)
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, events, "the rejected ack must not have written history")
	require.NoError(h.T, p2.AckOrchestrationItem(h.Ctx, second.LockToken, creationFirstTurn(id)))
}

func expiryAbandonReleases(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, StartItem(id))
	// A long lock: only the abandon can make the instance fetchable within the scenario.
	first := h.MustFetchOrch(h.P, LongLock)
	h.NoOrch(h.P)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, first.LockToken, 0, false))

	second := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, second.Instance)
	require.Equal(h.T, first.Messages, second.Messages)
	require.NotEqual(h.T, first.LockToken, second.LockToken)
	require.ErrorIs(h.T, h.P.AckOrchestrationItem(h.Ctx, first.LockToken, creationFirstTurn(id)), durable.ErrPermanent,
		"the abandoned token is released")
}

func expiryAckReleases(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, StartItem(id))
	first := h.MustFetchOrch(h.P, LongLock)
	h.NoOrch(h.P)

	// Work arriving during the lock waits for it.
	raised := durable.ExternalRaised{Instance: id, Name: "evt", Data: "1"}
	h.Enqueue(h.P, raised)
	h.NoOrch(h.P)

	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, first.LockToken, creationFirstTurn(id)))
	// Released by the ack, long before the lock would expire.
	second := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, second.Instance)
	require.Equal(h.T, []durable.WorkItem{raised}, second.Messages)
	require.Len(h.T, second.History, 1)
}

// expiryFetchOnce fetches once, retrying a lost race (a retryable error).
func expiryFetchOnce(h *H, p durable.Provider, lock time.Duration) (*durable.OrchestrationItem, error) {
	var err error
	for range 5 {
		var item *durable.OrchestrationItem
		item, err = p.FetchOrchestrationItem(h.Ctx, lock, 0, nil)
		if err == nil || !errors.Is(err, durable.ErrRetryable) {
			return item, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

func expiryConcurrentAttempts(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	providers := []durable.Provider{h.P, h.Open()}
	h.Enqueue(h.P, StartItem(id))
	// A long lock while the concurrent fetchers below must find it held,
	// however slow the run; then cut to lt by a renewal, to let it expire.
	first := h.MustFetchOrch(h.P, LongLock)

	type result struct {
		item *durable.OrchestrationItem
		err  error
	}
	attempt := func(stagger time.Duration) []result {
		results := make(chan result, 5)
		var wg sync.WaitGroup
		for i := range 5 {
			p := providers[i%len(providers)]
			wg.Go(func() {
				time.Sleep(time.Duration(i) * stagger)
				item, err := expiryFetchOnce(h, p, LongLock)
				results <- result{item, err}
			})
		}
		wg.Wait()
		close(results)
		var out []result
		for r := range results {
			out = append(out, r)
		}
		return out
	}

	// While the lock is held, concurrent fetchers all come back empty.
	for _, r := range attempt(lt / 10) {
		require.NoError(h.T, r.err)
		require.Nil(h.T, r.item, "instance fetched while its lock was held")
	}

	require.NoError(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, first.LockToken, lt))
	h.Sleep(lockExpiryWait(h))
	// Once it expired, exactly one of several concurrent fetchers wins it.
	var winners []*durable.OrchestrationItem
	for _, r := range attempt(0) {
		require.NoError(h.T, r.err)
		if r.item != nil {
			winners = append(winners, r.item)
		}
	}
	require.Len(h.T, winners, 1, "exactly one dispatcher must acquire the expired lock")
	require.Equal(h.T, id, winners[0].Instance)
	require.NotEqual(h.T, first.LockToken, winners[0].LockToken)
	require.Equal(h.T, uint32(2), winners[0].AttemptCount)
}

func expiryWorkerRenewalSuccess(h *H) {
	id := h.ID("renew")
	lt := h.Options().LockTimeout
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	// A long lock: it still holds at the renewal however slow the run.
	w := h.MustFetchWork(h.P, LongLock)
	h.NoWork(h.P)
	h.Sleep(lt / 5)

	require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock))
	h.NoWork(h.P)
	// The renewed token is still the item's lock.
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "done")))
	h.NoWork(h.P)
}

func expiryWorkerRenewalInvalidToken(h *H) {
	err := h.P.RenewWorkItemLock(h.Ctx, "invalid-token-123", LongLock)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "renewing an unknown work-item token")

	// Also when real locks exist: an unknown token matches none of them.
	id := h.ID("renew-invalid")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := h.MustFetchWork(h.P, LongLock)
	err = h.P.RenewWorkItemLock(h.Ctx, w.LockToken+"-not", LongLock)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "renewing an unknown work-item token")
	require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock))
}

func expiryWorkerRenewalAfterExpiration(h *H) {
	id := h.ID("renew-expired")
	lt := h.Options().LockTimeout
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := h.MustFetchWork(h.P, lt)
	h.Sleep(lockExpiryWait(h))

	err := h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "renewing an expired work-item lock")
	// The failed renewal did not resurrect the lock.
	again := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, again))
	require.NotEqual(h.T, w.LockToken, again.LockToken)
}

func expiryWorkerRenewalExtends(h *H) {
	id := h.ID("renew-extends")
	lt := h.Options().LockTimeout
	// A running orchestration whose turn scheduled the activity.
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	turn := creationFirstTurn(id)
	turn.WorkerItems = []durable.WorkItem{queueActivity(id, 2)}
	turn.Metadata.Status = durable.StatusRunning
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, turn))

	w := h.MustFetchWork(h.P, lt)
	fetched := time.Now()
	// Renewed at once to a long lock: past the original expiry the item
	// is still held, however slow the run.
	require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock))
	h.Sleep(time.Until(fetched.Add(lockExpiryWait(h))))
	h.NoWork(h.P)
	// Renewal is to now+extendFor, not a maximum: renewed to a short
	// lock, the item comes back once that expires.
	require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, w.LockToken, lt))
	h.Sleep(lockExpiryWait(h))
	again := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 2), queueActivityOf(h, again))
	require.Equal(h.T, uint32(2), again.AttemptCount)
}

func expiryWorkerRenewalAfterAck(h *H) {
	id := h.ID("renew-acked")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := h.MustFetchWork(h.P, LongLock)
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "done")))

	err := h.P.RenewWorkItemLock(h.Ctx, w.LockToken, LongLock)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "renewing the lock of an acked work item")
	h.NoWork(h.P)
}

func expiryAbandonWorkItemReleases(h *H) {
	id := h.ID("abandon-work")
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	// A long lock: only the abandon can release it within the scenario.
	w := h.MustFetchWork(h.P, LongLock)
	h.NoWork(h.P)
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, false))

	again := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, again))
	require.NotEqual(h.T, w.LockToken, again.LockToken, "a new lock needs a new token")
	require.ErrorIs(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "stale")), durable.ErrPermanent,
		"the abandoned token no longer holds the item")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, again.LockToken, queueCompletion(id, 1, "done")))
	h.NoWork(h.P)
}

func expiryAbandonWorkItemWithDelay(h *H) {
	id := h.ID("abandon-delay")
	// Abandoned with a long delay: hidden for the rest of the scenario's
	// checks, however slow the run, then back at its end.
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	hidden := h.MustFetchWork(h.P, LongLock)
	hiddenAt := time.Now()
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, hidden.LockToken, longHide, false))
	h.NoWorkUntil(h.P, withheldUntil(h, hiddenAt, longHide))

	// Abandoned with a short delay: back once it passed, never before.
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 2)))
	w := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 2), queueActivityOf(h, w))
	delay := h.Options().LockTimeout
	abandoned := time.Now()
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, delay, false))
	again := h.MustFetchWorkAfter(h.P, LongLock, abandoned.Add(delay))
	require.Equal(h.T, queueActivity(id, 2), queueActivityOf(h, again))
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, again.LockToken, queueCompletion(id, 2, "done")))
	h.NoWorkUntil(h.P, withheldUntil(h, hiddenAt, longHide))

	// The long delay passes too: the first item is back.
	h.Sleep(time.Until(hiddenAt.Add(longHide)))
	back := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, back))
	require.Equal(h.T, uint32(2), back.AttemptCount)
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, back.LockToken, queueCompletion(id, 1, "done")))
	h.NoWork(h.P)
}

func expiryWorkerAckAfterExpiry(h *H) {
	id := h.ID("ack-expiry")
	lt := h.Options().LockTimeout
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	w := h.MustFetchWork(h.P, lt)
	h.Sleep(lockExpiryWait(h))

	// Nobody took the item over, yet the expired lock cannot ack it.
	err := h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 1, "late"))
	require.ErrorIs(h.T, err, durable.ErrPermanent, "acking with an expired work-item lock")
	h.NoOrch(h.P)

	again := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 1), queueActivityOf(h, again), "the item stays queued")
	require.Equal(h.T, uint32(2), again.AttemptCount)
}

func expiryOrchRenewalAfterExpiration(h *H) {
	id := h.ID("orch-renew-expired")
	lt := h.Options().LockTimeout
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, lt)
	h.Sleep(lockExpiryWait(h))

	err := h.P.RenewOrchestrationItemLock(h.Ctx, item.LockToken, LongLock)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "renewing an expired orchestration lock")
	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, again.Instance, "the failed renewal did not resurrect the lock")
}

func expiryOrchRenewalExtends(h *H) {
	id := h.ID("orch-renew-extends")
	lt := h.Options().LockTimeout
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, lt)
	fetched := time.Now()
	// Renewed at once to a long lock: past the original expiry the lock
	// still holds and can commit, however slow the run.
	require.NoError(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, item.LockToken, LongLock))
	h.Sleep(time.Until(fetched.Add(lockExpiryWait(h))))
	h.NoOrch(h.P)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)),
		"ack within the renewed lock")
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 1)
	require.ErrorIs(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, "invalid-token", LongLock), durable.ErrPermanent,
		"renewing an unknown orchestration token")
}

func expiryAbandonOrchWithDelay(h *H) {
	// Abandoned with a long delay: hidden for the rest of the scenario's
	// checks, however slow the run, then back at its end.
	hiddenID := h.ID("orch-abandon-hidden")
	h.Enqueue(h.P, StartItem(hiddenID))
	hidden := h.MustFetchOrch(h.P, LongLock)
	hiddenAt := time.Now()
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, hidden.LockToken, longHide, false))
	h.NoOrchUntil(h.P, withheldUntil(h, hiddenAt, longHide))

	// Abandoned with a short delay: back once it passed, never before.
	id := h.ID("orch-abandon-delay")
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	delay := h.Options().LockTimeout
	abandoned := time.Now()
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, delay, false))
	again := h.MustFetchOrchAfter(h.P, LongLock, abandoned.Add(delay))
	require.Equal(h.T, id, again.Instance)
	require.Equal(h.T, item.Messages, again.Messages)
	require.Equal(h.T, uint32(2), again.AttemptCount)
	h.NoOrchUntil(h.P, withheldUntil(h, hiddenAt, longHide))

	// The long delay passes too: the first instance's start is back.
	h.Sleep(time.Until(hiddenAt.Add(longHide)))
	back := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, hiddenID, back.Instance)
	require.Equal(h.T, hidden.Messages, back.Messages)
	require.Equal(h.T, uint32(2), back.AttemptCount)
}

func expiryWorkerAckAfterTakeover(h *H) {
	id := h.ID("takeover")
	lt := h.Options().LockTimeout
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 1)))
	stale := h.MustFetchWork(h.P, lt)
	h.Sleep(lockExpiryWait(h))

	p2 := h.Open()
	fresh := h.MustFetchWork(p2, LongLock)
	require.NotEqual(h.T, stale.LockToken, fresh.LockToken)

	err := h.P.AckWorkItem(h.Ctx, stale.LockToken, queueCompletion(id, 1, "stale"))
	require.ErrorIs(h.T, err, durable.ErrPermanent, "acking after another worker took the item over")
	require.ErrorIs(h.T, h.P.RenewWorkItemLock(h.Ctx, stale.LockToken, LongLock), durable.ErrPermanent,
		"renewing after another worker took the item over")
	// No completion was enqueued, and the item stays locked by p2 (whose
	// ack below still commits).
	h.NoOrchOrWork(h.P)

	require.NoError(h.T, p2.AckWorkItem(h.Ctx, fresh.LockToken, queueCompletion(id, 1, "fresh")))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 1, "fresh")}, item.Messages,
		"only the current lock holder's completion is delivered")
}

func expiryAbandonDelayScope(h *H) {
	id := h.ID("abandon-scope")
	other := h.Open()
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{StartItem(id)}, item.Messages)
	// Arrives while the instance is locked: not part of the fetched batch.
	late := durable.ExternalRaised{Instance: id, Name: "late", Data: "1"}
	h.Enqueue(h.P, late)

	// A delay that keeps the start hidden through the checks below,
	// however slow the run, then lets it back.
	abandoned := time.Now()
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, longHide, false))

	// The late message was never locked by that fetch, so the delay does
	// not hold it back.
	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, again.Instance)
	require.Equal(h.T, []durable.WorkItem{late}, again.Messages,
		"only the message that arrived during the lock: the abandoned start waits out its delay")
	require.Equal(h.T, uint32(1), again.AttemptCount, "the late message's first delivery")
	// Not before its delay: the start is neither fetchable nor locked with the late message.
	h.NoOrchUntil(other, withheldUntil(h, abandoned, longHide))

	// After it (waited out: no call ends a delay early), the start is
	// back: once the late message is released too, one lock takes both (a
	// batch of the late message alone, from a provider that shows the start
	// a little after its due time, is put back uncounted).
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, again.LockToken, 0, true))
	h.Sleep(time.Until(abandoned.Add(longHide)))
	both := lockingFetchBatch(h, h.P, LongLock, 2)
	require.Equal(h.T, id, both.Instance)
	require.ElementsMatch(h.T, []durable.WorkItem{StartItem(id), late}, both.Messages)
	require.Equal(h.T, uint32(2), both.AttemptCount, "the start's second delivery")
}

func expiryCancelledFetch(h *H) {
	id := h.ID("cancelled-fetch")
	lt := h.Options().LockTimeout
	msgs := []durable.WorkItem{StartItem(id), durable.ExternalRaised{Instance: id, Name: "evt", Data: "1"}}
	for _, m := range msgs {
		h.Enqueue(h.P, m)
	}
	// Wait until the provider serves the work: fetched once (under a short
	// lock), then abandoned, so the cancelled fetches below race a real lock.
	first := lockingFetchBatch(h, h.P, lt, len(msgs))
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, first.LockToken, 0, false))

	// Fetches cancelled before they start, as they start, and at growing
	// points of their round trips. A fetch that still returns an item holds
	// a proper lock; one that returns an error may or may not have locked.
	calls := 1
	var held *durable.OrchestrationItem
	var heldSince time.Time
	for _, after := range []time.Duration{-1, 0, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
		4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond, 32 * time.Millisecond} {
		ctx, cancel := context.WithCancel(h.Ctx)
		if after < 0 {
			cancel()
		} else {
			timer := time.AfterFunc(after, cancel)
			defer timer.Stop()
		}
		fetchedAt := time.Now()
		item, err := h.P.FetchOrchestrationItem(ctx, lt, 0, nil)
		cancel()
		calls++
		if err != nil {
			require.Nil(h.T, item, "a fetch that fails returns no item")
			continue
		}
		if item != nil {
			held, heldSince = item, fetchedAt
			break
		}
	}
	if held != nil {
		require.Equal(h.T, msgs, held.Messages, "a lock takes every waiting message")
		// Not fetchable while held: the lock, a proper one, is extended
		// for the check, however slow the run, then cut back to lt. Only
		// a run stalled past lt since the fetch finds it expired already;
		// the recovery below still checks it did not end early.
		if err := h.P.RenewOrchestrationItemLock(h.Ctx, held.LockToken, LongLock); err == nil {
			h.NoOrch(h.Open())
			heldSince = time.Now()
			require.NoError(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, held.LockToken, lt))
		} else {
			require.ErrorIs(h.T, err, durable.ErrPermanent, "renewing the held lock")
			h.T.Logf("the held lock expired before it could be extended (%v after its fetch began): no absence check",
				time.Since(heldSince))
		}
	}

	// After at most one lock timeout the work is fetchable again, whole:
	// no lock outlives its timeout, and no message stays locked apart from
	// its instance (or the reverse). A held lock ends no earlier than its
	// timeout after it was taken (or last renewed).
	var again *durable.OrchestrationItem
	var recovered time.Time
	h.Eventually(func() bool {
		item, err := h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
		recovered = time.Now()
		if err != nil && !errors.Is(err, durable.ErrRetryable) {
			require.NoError(h.T, err)
		}
		again = item
		return item != nil
	}, "the work of cancelled fetches to be fetchable again")
	if held != nil {
		require.False(h.T, recovered.Before(heldSince.Add(lt-withheldSlack)),
			"the held lock ended %v before its timeout", heldSince.Add(lt).Sub(recovered))
	}
	require.Equal(h.T, id, again.Instance)
	require.Equal(h.T, msgs, again.Messages, "every message, once")
	require.GreaterOrEqual(h.T, again.AttemptCount, uint32(2))
	require.LessOrEqual(h.T, again.AttemptCount, uint32(calls+1), "at most one increment per fetch")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, again.LockToken, creationFirstTurn(id)),
		"the recovering fetch holds a proper lock")
}
