package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// sessionScenarios checks session routing on the worker queue:
//
//   - FetchWorkItem with a nil session config returns only items without a
//     session; with a config it returns items without a session, items of
//     sessions its owner holds, and items of unclaimed or expired sessions,
//     in FIFO order; fetching such an item claims the session for the owner
//     for the config's LockTimeout, atomically (concurrent claimants never
//     both win), and ownership is by owner id, not by client;
//   - a session held by one owner is invisible to every other owner until
//     its lock expires, whoever then fetches (the old owner included)
//     claims it; session and work-item locks are independent (an expired
//     work-item lock redelivers to the session owner with the attempt
//     counted, an expired session lock does not stop the ack of an item
//     still locked);
//   - abandoning a session item makes it fetchable again, with
//     ignoreAttempt not counting the attempt;
//   - RenewSessionLock extends the live sessions of the listed owners that
//     saw activity within the idle timeout, returns how many, and never
//     revives an expired session; AckWorkItem and RenewWorkItemLock count as
//     session activity;
//   - CleanupOrphanedSessions deletes exactly the expired sessions that no
//     queued item references, and a deleted session is claimed afresh.
func sessionScenarios() []Scenario {
	return []Scenario{
		{"non_session_items_fetchable_by_any_worker", sessNonSessionItemsFetchableByAnyWorker},
		{"session_item_claimable_when_no_session", sessItemClaimableWhenNoSession},
		{"session_affinity_same_worker", sessAffinitySameWorker},
		{"session_affinity_blocks_other_worker", sessAffinityBlocksOtherWorker},
		{"different_sessions_different_workers", sessDifferentSessionsDifferentWorkers},
		{"mixed_session_and_non_session_items", sessMixedSessionAndNonSessionItems},
		{"session_claimable_after_lock_expiry", sessClaimableAfterLockExpiry},
		{"none_session_skips_session_items", sessNoneSessionSkipsSessionItems},
		{"some_session_returns_all_items", sessSomeSessionReturnsAllItems},
		{"renew_session_lock_active", sessRenewSessionLockActive},
		{"renew_session_lock_skips_idle", sessRenewSessionLockSkipsIdle},
		{"renew_session_lock_no_sessions", sessRenewSessionLockNoSessions},
		{"cleanup_removes_expired_no_items", sessCleanupRemovesExpiredNoItems},
		{"cleanup_keeps_sessions_with_pending_items", sessCleanupKeepsSessionsWithPendingItems},
		{"cleanup_keeps_active_sessions", sessCleanupKeepsActiveSessions},
		{"ack_updates_session_last_activity", sessAckUpdatesSessionLastActivity},
		{"renew_work_item_updates_session_last_activity", sessRenewWorkItemUpdatesSessionLastActivity},
		{"session_items_processed_in_order", sessItemsProcessedInOrder},
		{"non_session_items_returned_with_session_config", sessNonSessionItemsReturnedWithSessionConfig},
		{"shared_worker_id_any_caller_can_fetch_owned_session", sessSharedWorkerIDAnyCallerCanFetchOwnedSession},
		{"concurrent_session_claim_only_one_wins", sessConcurrentSessionClaimOnlyOneWins},
		{"session_takeover_after_lock_expiry", sessTakeoverAfterLockExpiry},
		{"cleanup_then_new_item_recreates_session", sessCleanupThenNewItemRecreatesSession},
		{"abandoned_session_item_retryable", sessAbandonedSessionItemRetryable},
		{"abandoned_session_item_ignore_attempt", sessAbandonedSessionItemIgnoreAttempt},
		{"renew_session_lock_after_expiry_returns_zero", sessRenewSessionLockAfterExpiryReturnsZero},
		{"original_worker_reclaims_expired_session", sessOriginalWorkerReclaimsExpiredSession},
		{"activity_lock_expires_session_lock_valid_same_worker_refetches", sessActivityLockExpiresSessionLockValidSameWorkerRefetches},
		{"session_lock_expires_new_owner_gets_redelivery", sessSessionLockExpiresNewOwnerGetsRedelivery},
		{"session_lock_expires_same_worker_reacquires", sessSessionLockExpiresSameWorkerReacquires},
		{"both_locks_expire_different_worker_claims", sessBothLocksExpireDifferentWorkerClaims},
		{"session_lock_expires_activity_lock_valid_ack_succeeds", sessSessionLockExpiresActivityLockValidAckSucceeds},
		{"session_lock_renewal_extends_past_original_timeout", sessSessionLockRenewalExtendsPastOriginalTimeout},
		// Checklist items no duroxide test covers.
		{"session_claim_is_atomic_under_concurrency", sessClaimIsAtomicUnderConcurrency},
		{"renew_session_lock_only_listed_owners", sessRenewSessionLockOnlyListedOwners},
	}
}

// sessionItem is an activity bound to a session.
func sessionItem(instance string, id uint64, session string) durable.ActivityExecute {
	return durable.ActivityExecute{Instance: instance, ExecutionID: 1, ID: id, Name: "SessionActivity",
		Input: "{}", SessionID: session}
}

// sessionPlainItem is an activity without a session.
func sessionPlainItem(instance string, id uint64) durable.ActivityExecute {
	return durable.ActivityExecute{Instance: instance, ExecutionID: 1, ID: id, Name: "PlainActivity", Input: "{}"}
}

// sessionCfg is a session config holding claimed sessions for LongLock.
func sessionCfg(owner string) *durable.SessionFetchConfig {
	return &durable.SessionFetchConfig{OwnerID: owner, LockTimeout: LongLock}
}

// sessionCfgLock is a session config with an explicit session lock.
func sessionCfgLock(owner string, lock time.Duration) *durable.SessionFetchConfig {
	return &durable.SessionFetchConfig{OwnerID: owner, LockTimeout: lock}
}

// sessionExpiry is how long to wait for a lock of h.Options().LockTimeout to
// have surely expired.
func sessionExpiry(h *H) time.Duration {
	l := h.Options().LockTimeout
	return l + l/2 + 100*time.Millisecond
}

// sessionEnqueue puts items on p's worker queue.
func sessionEnqueue(h *H, p durable.Provider, items ...durable.WorkItem) {
	h.T.Helper()
	for _, it := range items {
		require.NoError(h.T, p.EnqueueForWorker(h.Ctx, it))
	}
}

// sessionFetch makes one fetch with the session config (nil for none),
// accepting untagged items; it may return nil.
func sessionFetch(h *H, p durable.Provider, lock time.Duration, cfg *durable.SessionFetchConfig) *durable.LockedWorkItem {
	h.T.Helper()
	item, err := p.FetchWorkItem(h.Ctx, lock, 0, cfg, durable.DefaultOnlyTags())
	require.NoError(h.T, err)
	return item
}

// sessionMustFetch fetches with the session config, retrying briefly as
// MustFetchWork does, and fails if nothing comes.
func sessionMustFetch(h *H, p durable.Provider, lock time.Duration, cfg *durable.SessionFetchConfig) *durable.LockedWorkItem {
	h.T.Helper()
	var item *durable.LockedWorkItem
	h.Eventually(func() bool {
		item = sessionFetch(h, p, lock, cfg)
		return item != nil
	}, "a work item to fetch")
	return item
}

// sessionNone asserts that a fetch with cfg returns nothing now.
func sessionNone(h *H, p durable.Provider, cfg *durable.SessionFetchConfig, why string) {
	h.T.Helper()
	if item := sessionFetch(h, p, LongLock, cfg); item != nil {
		a := sessionActivityOf(h, item)
		h.T.Fatalf("%s: got activity %d of session %q", why, a.ID, a.SessionID)
	}
}

// sessionActivityOf returns the fetched item as an ActivityExecute.
func sessionActivityOf(h *H, item *durable.LockedWorkItem) durable.ActivityExecute {
	h.T.Helper()
	require.NotNil(h.T, item)
	a, ok := item.Item.(durable.ActivityExecute)
	require.True(h.T, ok, "worker item is %T, want ActivityExecute", item.Item)
	return a
}

// sessionAck acks a fetched item without a completion.
func sessionAck(h *H, p durable.Provider, item *durable.LockedWorkItem) {
	h.T.Helper()
	require.NoError(h.T, p.AckWorkItem(h.Ctx, item.LockToken, nil))
}

// sessionClaim enqueues an item of the session, fetches it as owner with
// the given session lock, acks it and returns: the owner then holds the
// session with no item in flight.
func sessionClaim(h *H, instance string, id uint64, session string, cfg *durable.SessionFetchConfig) {
	h.T.Helper()
	want := sessionItem(instance, id, session)
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, cfg)
	require.Equal(h.T, want, sessionActivityOf(h, item))
	sessionAck(h, h.P, item)
}

// sessionRenew calls RenewSessionLock and returns the count.
func sessionRenew(h *H, owners []string, extendFor, idle time.Duration) int {
	h.T.Helper()
	n, err := h.P.RenewSessionLock(h.Ctx, owners, extendFor, idle)
	require.NoError(h.T, err)
	return n
}

// sessionCleanup calls CleanupOrphanedSessions and returns the count.
func sessionCleanup(h *H) int {
	h.T.Helper()
	n, err := h.P.CleanupOrphanedSessions(h.Ctx, 5*time.Minute)
	require.NoError(h.T, err)
	return n
}

func sessNonSessionItemsFetchableByAnyWorker(h *H) {
	want := sessionPlainItem(h.ID("inst-1"), 1)
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, item))
	require.Equal(h.T, uint32(1), item.AttemptCount)
	require.NotEmpty(h.T, item.LockToken)
}

func sessItemClaimableWhenNoSession(h *H) {
	want := sessionItem(h.ID("inst-1"), 1, h.ID("session-1"))
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "the item keeps its session id")
}

func sessAffinitySameWorker(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("session-1")
	sessionClaim(h, inst, 1, sess, sessionCfg("worker-A"))
	want := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "the owner fetches its session's items")
}

func sessAffinityBlocksOtherWorker(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("session-1")
	sessionClaim(h, inst, 1, sess, sessionCfg("worker-A"))
	sessionEnqueue(h, h.P, sessionItem(inst, 2, sess))
	sessionNone(h, h.P, sessionCfg("worker-B"), "another owner fetched an item of a held session")
	sessionNone(h, h.P, nil, "a fetch without session config returned a session item")
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, uint64(2), sessionActivityOf(h, item).ID)
}

func sessDifferentSessionsDifferentWorkers(h *H) {
	i1, i2 := h.ID("inst-1"), h.ID("inst-2")
	s1, s2 := h.ID("session-1"), h.ID("session-2")
	sessionClaim(h, i1, 1, s1, sessionCfg("worker-A"))
	sessionClaim(h, i2, 1, s2, sessionCfg("worker-B"))
	sessionEnqueue(h, h.P, sessionItem(i1, 2, s1), sessionItem(i2, 2, s2))

	a := sessionActivityOf(h, sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A")))
	require.Equal(h.T, s1, a.SessionID, "worker-A gets its own session's item")
	sessionNone(h, h.P, sessionCfg("worker-A"), "worker-A fetched worker-B's session item")
	b := sessionActivityOf(h, sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B")))
	require.Equal(h.T, s2, b.SessionID, "worker-B gets its own session's item")
}

func sessMixedSessionAndNonSessionItems(h *H) {
	i1, s1 := h.ID("inst-1"), h.ID("session-1")
	sessionClaim(h, i1, 1, s1, sessionCfg("worker-A"))
	plain := sessionPlainItem(h.ID("inst-2"), 1)
	sessionEnqueue(h, h.P, sessionItem(i1, 2, s1), plain)

	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, plain, sessionActivityOf(h, item), "worker-B gets the plain item, not the held session's")
	sessionNone(h, h.P, sessionCfg("worker-B"), "worker-B fetched an item of worker-A's session")
}

func sessClaimableAfterLockExpiry(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("session-1")
	sessionClaim(h, inst, 1, sess, sessionCfgLock("worker-A", h.Options().LockTimeout))
	h.Sleep(sessionExpiry(h))
	want := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "an expired session is claimable by another owner")
}

func sessNoneSessionSkipsSessionItems(h *H) {
	sess := h.ID("session-1")
	sessionItemWant := sessionItem(h.ID("inst-1"), 1, sess)
	plain := sessionPlainItem(h.ID("inst-2"), 2)
	sessionEnqueue(h, h.P, sessionItemWant, plain)

	item := sessionMustFetch(h, h.P, LongLock, nil)
	require.Equal(h.T, plain, sessionActivityOf(h, item), "a fetch without session config gets the plain item")
	sessionAck(h, h.P, item)
	sessionNone(h, h.P, nil, "a fetch without session config returned a session item")

	item = sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, sessionItemWant, sessionActivityOf(h, item), "a fetch with session config gets it")
}

func sessSomeSessionReturnsAllItems(h *H) {
	sessionEnqueue(h, h.P,
		sessionItem(h.ID("inst-1"), 1, h.ID("sess-A")),
		sessionItem(h.ID("inst-2"), 2, h.ID("sess-B")),
		sessionItem(h.ID("inst-3"), 3, h.ID("sess-C")),
		sessionPlainItem(h.ID("inst-4"), 4))
	var ids []uint64
	for range 4 {
		item := sessionMustFetch(h, h.P, LongLock, sessionCfg("shared-proc"))
		ids = append(ids, sessionActivityOf(h, item).ID)
		sessionAck(h, h.P, item)
	}
	require.Equal(h.T, []uint64{1, 2, 3, 4}, ids, "every item, in FIFO order")
	sessionNone(h, h.P, sessionCfg("shared-proc"), "the queue should be empty")
}

func sessRenewSessionLockActive(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("session-1"), sessionCfg("worker-A"))
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute), "one active session")
	sessionClaim(h, h.ID("inst-2"), 1, h.ID("session-2"), sessionCfg("worker-A"))
	require.Equal(h.T, 2, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute), "two active sessions")
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-B"}, LongLock, 5*time.Minute), "worker-B owns no session")
}

func sessRenewSessionLockSkipsIdle(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("session-1"), sessionCfg("worker-A"))
	h.Sleep(50 * time.Millisecond) // so the last activity is strictly in the past
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-A"}, LongLock, 0), "with a zero idle timeout every session is idle")
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute), "the session is still held")
}

func sessRenewSessionLockNoSessions(h *H) {
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute))
	require.Equal(h.T, 0, sessionRenew(h, nil, LongLock, 5*time.Minute), "no owners")
}

func sessCleanupRemovesExpiredNoItems(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("session-1"), sessionCfgLock("worker-A", h.Options().LockTimeout))
	h.Sleep(sessionExpiry(h))
	require.Equal(h.T, 1, sessionCleanup(h), "the expired session without items is removed")
	require.Equal(h.T, 0, sessionCleanup(h), "nothing left to remove")
}

func sessCleanupKeepsSessionsWithPendingItems(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("session-1")
	sessionClaim(h, inst, 1, sess, sessionCfgLock("worker-A", h.Options().LockTimeout))
	sessionEnqueue(h, h.P, sessionItem(inst, 2, sess))
	h.Sleep(sessionExpiry(h))
	require.Equal(h.T, 0, sessionCleanup(h), "a session with a queued item is kept")
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, uint64(2), sessionActivityOf(h, item).ID)
}

func sessCleanupKeepsActiveSessions(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("session-1"), sessionCfg("worker-A"))
	require.Equal(h.T, 0, sessionCleanup(h), "a held session is kept")
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute), "the session still exists")
}

func sessAckUpdatesSessionLastActivity(h *H) {
	idle := h.Options().LockTimeout
	inst := h.ID("inst-1")
	sessionEnqueue(h, h.P, sessionItem(inst, 1, h.ID("session-1")))
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, idle), "claiming a session is activity")

	h.Sleep(sessionExpiry(h)) // longer than idle: the claim alone is stale now
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-A"}, LongLock, idle), "the session has been idle")
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, item.LockToken,
		durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 1, Result: "ok"}))
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, idle),
		"acking a session item counts as session activity")
}

func sessRenewWorkItemUpdatesSessionLastActivity(h *H) {
	idle := h.Options().LockTimeout
	sessionEnqueue(h, h.P, sessionItem(h.ID("inst-1"), 1, h.ID("session-1")))
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))

	h.Sleep(sessionExpiry(h))
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-A"}, LongLock, idle), "the session has been idle")
	require.NoError(h.T, h.P.RenewWorkItemLock(h.Ctx, item.LockToken, LongLock))
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, idle),
		"renewing a session item's lock counts as session activity")
}

func sessItemsProcessedInOrder(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("session-1")
	for id := uint64(1); id <= 3; id++ {
		sessionEnqueue(h, h.P, sessionItem(inst, id, sess))
	}
	for want := uint64(1); want <= 3; want++ {
		item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
		require.Equal(h.T, want, sessionActivityOf(h, item).ID, "session items in FIFO order")
		sessionAck(h, h.P, item)
	}
}

func sessNonSessionItemsReturnedWithSessionConfig(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("session-1"), sessionCfg("worker-A"))
	plain := sessionPlainItem(h.ID("inst-2"), 1)
	sessionEnqueue(h, h.P, plain)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, plain, sessionActivityOf(h, item), "an owner of a session still gets plain items")
}

func sessSharedWorkerIDAnyCallerCanFetchOwnedSession(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("shared-sess")
	slot2 := h.Open() // another client of the same process identity
	sessionEnqueue(h, h.P, sessionItem(inst, 1, sess), sessionItem(inst, 2, sess))

	item1 := sessionMustFetch(h, h.P, LongLock, sessionCfg("process-1"))
	require.Equal(h.T, uint64(1), sessionActivityOf(h, item1).ID)
	sessionAck(h, h.P, item1)

	item2 := sessionMustFetch(h, slot2, LongLock, sessionCfg("process-1"))
	require.Equal(h.T, uint64(2), sessionActivityOf(h, item2).ID, "ownership is by owner id, not by client")
	sessionAck(h, slot2, item2)

	sessionEnqueue(h, h.P, sessionItem(inst, 3, sess))
	sessionNone(h, h.P, sessionCfg("process-2"), "another process fetched an item of a held session")
	sessionNone(h, slot2, sessionCfg("process-2"), "another process fetched an item of a held session")
	item3 := sessionMustFetch(h, slot2, LongLock, sessionCfg("process-1"))
	require.Equal(h.T, uint64(3), sessionActivityOf(h, item3).ID)
}

func sessConcurrentSessionClaimOnlyOneWins(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("contested-sess")
	sessionEnqueue(h, h.P, sessionItem(inst, 1, sess), sessionItem(inst, 2, sess))
	a := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, uint64(1), sessionActivityOf(h, a).ID)
	sessionNone(h, h.P, sessionCfg("worker-B"), "worker-B fetched an item of the session worker-A just claimed")
	sessionAck(h, h.P, a)
	sessionNone(h, h.P, sessionCfg("worker-B"), "the session stays with worker-A after the ack")
	b := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, uint64(2), sessionActivityOf(h, b).ID)
}

func sessTakeoverAfterLockExpiry(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("takeover-sess")
	sessionClaim(h, inst, 1, sess, sessionCfgLock("worker-A", h.Options().LockTimeout))
	want := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, want)
	h.Sleep(sessionExpiry(h))

	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "worker-B takes over the expired session")
	sessionAck(h, h.P, item)
	// worker-B now holds the session: worker-A is locked out.
	sessionEnqueue(h, h.P, sessionItem(inst, 3, sess))
	sessionNone(h, h.P, sessionCfg("worker-A"), "the previous owner fetched an item of the taken-over session")
	item = sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, uint64(3), sessionActivityOf(h, item).ID)
}

func sessCleanupThenNewItemRecreatesSession(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("ephemeral-sess")
	sessionClaim(h, inst, 1, sess, sessionCfgLock("worker-A", h.Options().LockTimeout))
	h.Sleep(sessionExpiry(h))
	require.Equal(h.T, 1, sessionCleanup(h), "the expired session is removed")

	want := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "a removed session is claimed afresh")
	sessionAck(h, h.P, item)
	sessionEnqueue(h, h.P, sessionItem(inst, 3, sess))
	sessionNone(h, h.P, sessionCfg("worker-A"), "the re-created session belongs to worker-B")
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-B"}, LongLock, 5*time.Minute))
}

func sessAbandonedSessionItemRetryable(h *H) {
	want := sessionItem(h.ID("inst-1"), 1, h.ID("retry-sess"))
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, item))
	require.Equal(h.T, uint32(1), item.AttemptCount)
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, item.LockToken, 0, false))

	again := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, again), "the abandoned item is redelivered")
	require.Equal(h.T, uint32(2), again.AttemptCount, "the retry is counted")
	sessionAck(h, h.P, again)
	sessionNone(h, h.P, sessionCfg("worker-A"), "nothing remains after the ack")
}

func sessAbandonedSessionItemIgnoreAttempt(h *H) {
	want := sessionItem(h.ID("inst-1"), 1, h.ID("ignore-sess"))
	sessionEnqueue(h, h.P, want)
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, uint32(1), item.AttemptCount)
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, item.LockToken, time.Millisecond, true))

	again := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, again))
	require.Equal(h.T, uint32(1), again.AttemptCount, "an abandon with ignoreAttempt does not count the attempt")
	sessionAck(h, h.P, again)
}

func sessRenewSessionLockAfterExpiryReturnsZero(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("expired-sess"), sessionCfgLock("worker-A", h.Options().LockTimeout))
	h.Sleep(sessionExpiry(h))
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute),
		"an expired session is not renewed")
	require.Equal(h.T, 1, sessionCleanup(h), "renewal must not have revived the expired session")
}

func sessOriginalWorkerReclaimsExpiredSession(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("reclaim-sess")
	sessionClaim(h, inst, 1, sess, sessionCfgLock("worker-A", h.Options().LockTimeout))
	want := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, want)
	h.Sleep(sessionExpiry(h))

	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "the original owner re-claims its expired session")
	sessionAck(h, h.P, item)
	sessionEnqueue(h, h.P, sessionItem(inst, 3, sess))
	sessionNone(h, h.P, sessionCfg("worker-B"), "the re-claimed session is held again")
}

func sessActivityLockExpiresSessionLockValidSameWorkerRefetches(h *H) {
	want := sessionItem(h.ID("inst-1"), 1, h.ID("sticky-sess"))
	sessionEnqueue(h, h.P, want)
	first := sessionMustFetch(h, h.P, h.Options().LockTimeout, sessionCfg("worker-A"))
	require.Equal(h.T, uint32(1), first.AttemptCount)
	h.Sleep(sessionExpiry(h)) // the work-item lock expires, the session lock does not

	sessionNone(h, h.P, sessionCfg("worker-B"), "the redelivered item went to a worker that does not hold the session")
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "the session owner gets the redelivered item")
	require.Equal(h.T, uint32(2), item.AttemptCount, "the redelivery is counted")
	sessionAck(h, h.P, item)
}

func sessSessionLockExpiresNewOwnerGetsRedelivery(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("takeover2-sess")
	first := sessionItem(inst, 1, sess)
	sessionEnqueue(h, h.P, first)
	a := sessionMustFetch(h, h.P, LongLock, sessionCfgLock("worker-A", h.Options().LockTimeout))
	h.Sleep(sessionExpiry(h)) // the session lock expires, the work-item lock does not

	second := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, second)
	cfgB := sessionCfg("worker-B")
	b := sessionMustFetch(h, h.P, LongLock, cfgB)
	require.Equal(h.T, second, sessionActivityOf(h, b), "worker-B claims the expired session and gets the new item")
	sessionAck(h, h.P, b)

	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, a.LockToken, 0, false))
	sessionNone(h, h.P, sessionCfg("worker-A"), "the former owner got the redelivered item")
	b2 := sessionMustFetch(h, h.P, LongLock, cfgB)
	require.Equal(h.T, first, sessionActivityOf(h, b2), "the new owner gets the redelivered item")
	require.Equal(h.T, uint32(2), b2.AttemptCount)
	sessionAck(h, h.P, b2)
}

func sessSessionLockExpiresSameWorkerReacquires(h *H) {
	inst, sess := h.ID("inst-1"), h.ID("reacq-sess")
	cfgA := sessionCfgLock("worker-A", h.Options().LockTimeout)
	sessionClaim(h, inst, 1, sess, cfgA)
	h.Sleep(sessionExpiry(h))
	want := sessionItem(inst, 2, sess)
	sessionEnqueue(h, h.P, want)

	item := sessionMustFetch(h, h.P, LongLock, cfgA)
	require.Equal(h.T, want, sessionActivityOf(h, item), "the owner reacquires its expired session")
	sessionAck(h, h.P, item)
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute),
		"the reacquired session is held by worker-A")
}

func sessBothLocksExpireDifferentWorkerClaims(h *H) {
	want := sessionItem(h.ID("inst-1"), 1, h.ID("both-expire-sess"))
	sessionEnqueue(h, h.P, want)
	lock := h.Options().LockTimeout
	a := sessionMustFetch(h, h.P, lock, sessionCfgLock("worker-A", lock))
	h.Sleep(sessionExpiry(h))

	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-B"))
	require.Equal(h.T, want, sessionActivityOf(h, item), "worker-B claims the item and the session")
	require.Equal(h.T, uint32(2), item.AttemptCount)
	err := h.P.AckWorkItem(h.Ctx, a.LockToken, nil)
	require.ErrorIs(h.T, err, durable.ErrPermanent, "the first worker's expired lock cannot ack")
	sessionAck(h, h.P, item)
}

func sessSessionLockExpiresActivityLockValidAckSucceeds(h *H) {
	inst := h.ID("inst-1")
	sessionEnqueue(h, h.P, sessionItem(inst, 1, h.ID("sess-expires")))
	item := sessionMustFetch(h, h.P, LongLock, sessionCfgLock("worker-A", h.Options().LockTimeout))
	h.Sleep(sessionExpiry(h))

	done := durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 1, Result: "done"}
	require.NoError(h.T, h.P.AckWorkItem(h.Ctx, item.LockToken, done),
		"the work-item lock is still valid; session expiry does not govern it")
	sessionNone(h, h.P, sessionCfg("worker-A"), "the acked item is still queued")
	orch := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, inst, orch.Instance)
	require.Equal(h.T, []durable.WorkItem{done}, orch.Messages, "the ack enqueued the completion")
}

func sessSessionLockRenewalExtendsPastOriginalTimeout(h *H) {
	inst := h.ID("inst-1")
	lock := h.Options().LockTimeout
	// The renewal must land before the original lock expires. A loaded
	// run may stall past it: a renewal that finds nothing is accepted only
	// when that much time has passed, and the claim is made again under a
	// new session (at most three times).
	var sess string
	for attempt := 1; ; attempt++ {
		sess = h.ID(fmt.Sprint("renew-ext-sess-", attempt))
		claimed := time.Now()
		sessionClaim(h, inst, uint64(attempt), sess, sessionCfgLock("worker-A", lock))
		// Renewed far past the original expiry: what follows checks only
		// that the original one no longer governs, however long a loaded
		// run takes to get there.
		n := sessionRenew(h, []string{"worker-A"}, LongLock, 5*time.Minute)
		if n == 1 {
			break
		}
		require.GreaterOrEqual(h.T, time.Since(claimed), lock, "the held session is renewed")
		require.Less(h.T, attempt, 3, "the renewal came after the original expiry three times")
	}
	h.Sleep(sessionExpiry(h)) // past the original expiry, long before the renewed one

	sessionEnqueue(h, h.P, sessionItem(inst, 10, sess))
	sessionNone(h, h.P, sessionCfg("worker-B"), "the renewed session was claimed by another owner after its original timeout")
	item := sessionMustFetch(h, h.P, LongLock, sessionCfg("worker-A"))
	require.Equal(h.T, uint64(10), sessionActivityOf(h, item).ID, "worker-A still holds the session")
}

// sessClaimIsAtomicUnderConcurrency races several owners, each on its own
// provider replica, for the items of one unclaimed session: every item
// fetched must go to the single owner that won the claim.
func sessClaimIsAtomicUnderConcurrency(h *H) {
	const workers, items = 4, 4
	inst, sess := h.ID("inst-1"), h.ID("race-sess")
	providers := []durable.Provider{h.P}
	for len(providers) < workers {
		providers = append(providers, h.Open())
	}
	for id := uint64(1); id <= items; id++ {
		sessionEnqueue(h, h.P, sessionItem(inst, id, sess))
	}

	type result struct {
		owner string
		id    uint64
		err   error
	}
	winners := map[string]bool{}
	fetched := map[uint64]bool{}
	h.Eventually(func() bool {
		results := make(chan result, workers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, p := range providers {
			owner := fmt.Sprintf("worker-%d", i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				item, err := p.FetchWorkItem(h.Ctx, LongLock, 0, sessionCfg(owner), durable.DefaultOnlyTags())
				switch {
				case err != nil:
					results <- result{owner: owner, err: err}
				case item != nil:
					a, ok := item.Item.(durable.ActivityExecute)
					if !ok {
						results <- result{owner: owner, err: fmt.Errorf("worker item is %T", item.Item)}
						return
					}
					results <- result{owner: owner, id: a.ID}
				}
			}()
		}
		close(start)
		wg.Wait()
		close(results)
		for r := range results {
			if r.err != nil {
				// Losing a claim race may surface as a retryable error.
				require.True(h.T, errors.Is(r.err, durable.ErrRetryable), "fetch by %s: %v", r.owner, r.err)
				continue
			}
			require.False(h.T, fetched[r.id], "item %d delivered twice", r.id)
			fetched[r.id] = true
			winners[r.owner] = true
		}
		require.LessOrEqual(h.T, len(winners), 1, "items of one session went to several owners: %v", winners)
		return len(fetched) == items
	}, "every item of the session to be fetched")
}

func sessRenewSessionLockOnlyListedOwners(h *H) {
	sessionClaim(h, h.ID("inst-1"), 1, h.ID("session-1"), sessionCfg("worker-A"))
	sessionClaim(h, h.ID("inst-2"), 1, h.ID("session-2"), sessionCfg("worker-B"))
	sessionClaim(h, h.ID("inst-3"), 1, h.ID("session-3"), sessionCfg("worker-C"))
	sessionClaim(h, h.ID("inst-4"), 1, h.ID("session-4"), sessionCfg("worker-A"))
	require.Equal(h.T, 3, sessionRenew(h, []string{"worker-A", "worker-B"}, LongLock, 5*time.Minute),
		"renewal counts the sessions of every listed owner and no other")
	require.Equal(h.T, 1, sessionRenew(h, []string{"worker-C", "worker-D"}, LongLock, 5*time.Minute))
	require.Equal(h.T, 0, sessionRenew(h, []string{"worker-D"}, LongLock, 5*time.Minute))
}
