package conformance

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// instanceLockingScenarios checks the instance-level lock of orchestration
// fetches:
//   - while an instance is locked no other fetch, on any replica and under
//     any concurrency, returns it; exactly one of many racing fetchers wins;
//   - every fetch issues a fresh, unique lock token; unknown tokens are
//     rejected permanently by ack, abandon and renew and disturb no lock;
//   - messages arriving during a lock wait for it, and the ack deletes only
//     the messages locked by its fetch;
//   - a lock on one instance never blocks another instance;
//   - an expired lock (a crashed dispatcher) is recovered by another one.
func instanceLockingScenarios() []Scenario {
	return []Scenario{
		{"exclusive_instance_lock", lockingExclusive},
		{"lock_token_uniqueness", lockingTokenUniqueness},
		{"invalid_lock_token_rejection", lockingInvalidToken},
		{"concurrent_instance_fetching", lockingConcurrentFetching},
		{"completions_arriving_during_lock_blocked", lockingCompletionsDuringLock},
		{"cross_instance_lock_isolation", lockingCrossInstance},
		{"message_tagging_during_lock", lockingMessageTagging},
		{"ack_only_affects_locked_messages", lockingAckOnlyLocked},
		{"multi_threaded_lock_contention", lockingContention},
		{"multi_threaded_no_duplicate_processing", lockingNoDuplicates},
		{"multi_threaded_lock_expiration_recovery", lockingExpirationRecovery},
	}
}

// lockingFetchBatch fetches an orchestration item holding exactly want
// messages. Providers may make messages visible a little after their enqueue
// returns, so a smaller batch is abandoned (without counting the attempt)
// and fetched again, for a while; a larger batch fails the scenario.
func lockingFetchBatch(h *H, p durable.Provider, lock time.Duration, want int) *durable.OrchestrationItem {
	h.T.Helper()
	var item *durable.OrchestrationItem
	h.Eventually(func() bool {
		got, err := p.FetchOrchestrationItem(h.Ctx, lock, 0, nil)
		require.NoError(h.T, err)
		if got == nil {
			return false
		}
		require.LessOrEqual(h.T, len(got.Messages), want, "fetched more messages than were enqueued for %q", got.Instance)
		if len(got.Messages) < want {
			require.NoError(h.T, p.AbandonOrchestrationItem(h.Ctx, got.LockToken, 0, true))
			return false
		}
		item = got
		return true
	}, fmt.Sprintf("an orchestration item with %d messages", want))
	return item
}

// lockingResult is one concurrent fetcher's outcome.
type lockingResult struct {
	worker int
	item   *durable.OrchestrationItem
	err    error
}

// lockingActivityIDs returns the ids of the ActivityCompleted messages.
func lockingActivityIDs(msgs []durable.WorkItem) []uint64 {
	var ids []uint64
	for _, m := range msgs {
		if c, ok := m.(durable.ActivityCompleted); ok {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

func lockingExclusive(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	p2 := h.Open()
	h.Enqueue(h.P, StartItem(id))
	// A long lock, so that the checks below run while it holds however
	// slow the run; then cut to lt, to let it expire.
	first := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, first.Instance)

	// Neither this dispatcher nor another replica can take the locked instance.
	h.NoOrch(h.P)
	h.NoOrch(p2)

	require.NoError(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, first.LockToken, lt))
	h.Sleep(lockExpiryWait(h))
	second := h.MustFetchOrch(p2, lt)
	require.Equal(h.T, id, second.Instance)
	require.Equal(h.T, first.Messages, second.Messages, "the work the lock withheld")
	require.NotEqual(h.T, first.LockToken, second.LockToken)
}

func lockingTokenUniqueness(h *H) {
	const n = 5
	for i := range n {
		h.Enqueue(h.P, StartItem(h.ID(fmt.Sprintf("inst-%d", i))))
	}
	tokens := map[string]bool{}
	instances := map[string]bool{}
	for range n {
		item := h.MustFetchOrch(h.P, LongLock)
		require.NotEmpty(h.T, item.LockToken)
		tokens[item.LockToken] = true
		instances[item.Instance] = true
	}
	require.Len(h.T, tokens, n, "every fetch needs its own lock token")
	require.Len(h.T, instances, n, "each instance is fetched once while locked")
	h.NoOrch(h.P)
}

func lockingInvalidToken(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)

	for _, bad := range []string{"invalid-token", "", item.LockToken + "x"} {
		err := h.P.AckOrchestrationItem(h.Ctx, bad, creationFirstTurn(id))
		require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with unknown token %q", bad)
		err = h.P.AbandonOrchestrationItem(h.Ctx, bad, 0, false)
		require.ErrorIs(h.T, err, durable.ErrPermanent, "abandon with unknown token %q", bad)
		err = h.P.RenewOrchestrationItemLock(h.Ctx, bad, LongLock)
		require.ErrorIs(h.T, err, durable.ErrPermanent, "renew with unknown token %q", bad)
	}

	// Nothing was committed or released, and the real lock still works.
	h.NoOrch(h.P)
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, events)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
}

func lockingConcurrentFetching(h *H) {
	const n = 10
	for i := range n {
		h.Enqueue(h.P, StartItem(h.ID(fmt.Sprintf("inst-%d", i))))
	}
	providers := []durable.Provider{h.P, h.Open()}
	results := make(chan lockingResult, n)
	var wg sync.WaitGroup
	for i := range n {
		p := providers[i%len(providers)]
		wg.Go(func() {
			// Each fetcher holds at most one instance, so with n instances
			// every fetcher must eventually get one unless one is handed
			// out twice.
			deadline := time.Now().Add(EventuallyDeadline)
			for {
				item, err := p.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
				switch {
				case err != nil && !errors.Is(err, durable.ErrRetryable):
					results <- lockingResult{i, nil, err}
					return
				case item != nil:
					results <- lockingResult{i, item, nil}
					return
				case time.Now().After(deadline) || h.Ctx.Err() != nil:
					results <- lockingResult{i, nil, nil}
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(results)

	fetched := map[string]int{}
	tokens := map[string]bool{}
	for r := range results {
		require.NoError(h.T, r.err, "fetcher %d", r.worker)
		require.NotNil(h.T, r.item, "fetcher %d found no instance: some instance was fetched twice or lost", r.worker)
		fetched[r.item.Instance]++
		tokens[r.item.LockToken] = true
	}
	require.Len(h.T, fetched, n, "every instance fetched: %v", fetched)
	for inst, c := range fetched {
		require.Equal(h.T, 1, c, "instance %q fetched by %d dispatchers at once", inst, c)
	}
	require.Len(h.T, tokens, n)
	h.NoOrch(h.P)
}

func lockingCompletionsDuringLock(h *H) {
	id := h.ID("instance-a")
	lt := h.Options().LockTimeout
	p2 := h.Open()
	h.Enqueue(h.P, StartItem(id))
	// A long lock, so that the checks below run while it holds however
	// slow the run; then cut to lt, to let it expire.
	first := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, first.Instance)

	for i := range uint64(3) {
		h.Enqueue(h.P, queueCompletion(id, i+1, fmt.Sprintf("result-%d", i+1)))
	}
	// The new messages do not make the locked instance fetchable.
	h.NoOrch(h.P)
	h.NoOrch(p2)

	require.NoError(h.T, h.P.RenewOrchestrationItemLock(h.Ctx, first.LockToken, lt))
	h.Sleep(lockExpiryWait(h))
	item := lockingFetchBatch(h, p2, LongLock, 4)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, StartItem(id), item.Messages[0])
	require.Equal(h.T, []uint64{1, 2, 3}, lockingActivityIDs(item.Messages), "the completions, in arrival order")
	require.Equal(h.T, uint32(2), item.AttemptCount, "the start message is on its second delivery")
}

func lockingCrossInstance(h *H) {
	a, b := h.ID("instance-a"), h.ID("instance-b")
	h.CreateInstance(h.P, a)
	h.CreateInstance(h.P, b)
	h.Enqueue(h.P, durable.ExternalRaised{Instance: a, Name: "evt", Data: "a"})
	h.Enqueue(h.P, durable.ExternalRaised{Instance: b, Name: "evt", Data: "b"})

	// Lock one instance; the other stays fetchable (fetch order between
	// instances is unspecified).
	first := h.MustFetchOrch(h.P, LongLock)
	second := h.MustFetchOrch(h.P, LongLock)
	require.ElementsMatch(h.T, []string{a, b}, []string{first.Instance, second.Instance})

	// Release the second; new work for it is fetchable while the first stays locked.
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, second.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
	h.Enqueue(h.P, queueCompletion(second.Instance, 1, "done"))
	again := h.MustFetchOrch(h.Open(), LongLock)
	require.Equal(h.T, second.Instance, again.Instance)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(second.Instance, 1, "done")}, again.Messages)
	h.NoOrch(h.P)

	// Released, the first instance's work comes back.
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, first.LockToken, 0, true))
	back := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, first.Instance, back.Instance)
	require.Equal(h.T, first.Messages, back.Messages)
}

func lockingMessageTagging(h *H) {
	id := h.ID("instance-a")
	h.CreateInstance(h.P, id)
	h.Enqueue(h.P, queueCompletion(id, 1, "msg1"))
	h.Enqueue(h.P, queueCompletion(id, 2, "msg2"))
	item := lockingFetchBatch(h, h.P, LongLock, 2)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, []uint64{1, 2}, lockingActivityIDs(item.Messages))

	// Arrives during the lock: not part of the fetched batch.
	h.Enqueue(h.P, queueCompletion(id, 3, "msg3"))
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))

	next := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, next.Instance)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 3, "msg3")}, next.Messages,
		"the ack must delete only the messages its fetch locked")
}

func lockingAckOnlyLocked(h *H) {
	id := h.ID("instance-a")
	h.CreateInstance(h.P, id)
	h.Enqueue(h.P, queueCompletion(id, 1, "msg1"))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 1, "msg1")}, item.Messages)

	h.Enqueue(h.P, queueCompletion(id, 2, "msg2"))
	h.Enqueue(h.P, queueCompletion(id, 3, "msg3"))
	h.NoOrch(h.P)

	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))
	next := lockingFetchBatch(h, h.P, LongLock, 2)
	require.Equal(h.T, id, next.Instance)
	require.Equal(h.T, []uint64{2, 3}, lockingActivityIDs(next.Messages), "messages 2 and 3 survive the ack")
	require.Equal(h.T, uint32(1), next.AttemptCount, "messages that arrived during a lock were never delivered")
}

func lockingContention(h *H) {
	id := h.ID("contention")
	h.Enqueue(h.P, StartItem(id))
	// Make sure the instance is visible before the race.
	primed := h.MustFetchOrch(h.P, LongLock)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, primed.LockToken, 0, true))

	const n = 10
	providers := []durable.Provider{h.P, h.Open(), h.Open()}
	start := make(chan struct{})
	results := make(chan lockingResult, n)
	var wg sync.WaitGroup
	for i := range n {
		p := providers[i%len(providers)]
		wg.Go(func() {
			<-start
			item, err := expiryFetchOnce(h, p, LongLock)
			results <- lockingResult{i, item, err}
		})
	}
	close(start)
	wg.Wait()
	close(results)

	var winners []lockingResult
	for r := range results {
		require.NoError(h.T, r.err, "fetcher %d", r.worker)
		if r.item != nil {
			winners = append(winners, r)
		}
	}
	require.Len(h.T, winners, 1, "exactly one of %d racing fetchers may lock the instance", n)
	won := winners[0].item
	require.Equal(h.T, id, won.Instance)
	h.NoOrch(h.P)

	// Released, the instance's work comes back.
	p := providers[winners[0].worker%len(providers)]
	require.NoError(h.T, p.AbandonOrchestrationItem(h.Ctx, won.LockToken, 0, true))
	back := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, back.Instance)
	require.Equal(h.T, []durable.WorkItem{StartItem(id)}, back.Messages)
}

func lockingNoDuplicates(h *H) {
	const instances = 20
	const fetchers = 2 * instances
	want := map[string]bool{}
	for i := range instances {
		id := h.ID(fmt.Sprintf("dup-test-%d", i))
		want[id] = true
		h.Enqueue(h.P, StartItem(id))
	}
	providers := []durable.Provider{h.P, h.Open()}
	results := make(chan lockingResult, fetchers)
	var wg sync.WaitGroup
	for i := range fetchers {
		p := providers[i%len(providers)]
		wg.Go(func() {
			time.Sleep(time.Duration((i*3)%50) * time.Millisecond)
			item, err := expiryFetchOnce(h, p, LongLock)
			results <- lockingResult{i, item, err}
		})
	}
	wg.Wait()
	close(results)

	fetched := map[string]int{}
	for r := range results {
		require.NoError(h.T, r.err, "fetcher %d", r.worker)
		if r.item != nil {
			fetched[r.item.Instance]++
		}
	}
	for inst, c := range fetched {
		require.Equal(h.T, 1, c, "instance %q processed by %d fetchers at once", inst, c)
		require.True(h.T, want[inst], "unexpected instance %q", inst)
	}
	// Whatever the race left over is still fetchable, once each.
	for len(fetched) < instances {
		item := h.MustFetchOrch(h.P, LongLock)
		require.Zero(h.T, fetched[item.Instance], "instance %q fetched again while locked", item.Instance)
		fetched[item.Instance]++
	}
	h.NoOrch(h.P)
}

func lockingExpirationRecovery(h *H) {
	id := h.ID("expiration")
	lt := h.Options().LockTimeout
	h.Enqueue(h.P, StartItem(id))
	p1, p2, p3 := h.Open(), h.Open(), h.Open()

	acquired := make(chan struct{})
	tried := make(chan struct{})
	cut := make(chan struct{})
	var crashed *durable.OrchestrationItem // written by the first worker before acquired closes
	errs := make(chan error, 4)
	blocked := make(chan *durable.OrchestrationItem, 1)
	recovered := make(chan *durable.OrchestrationItem, 1)
	var wg sync.WaitGroup

	// Worker 1 takes the lock and crashes (never acks). Its lock is long,
	// so that worker 2 finds it held however slow the run; once worker 2
	// tried, it is cut to lt (as if worker 1 had last renewed it so), to
	// expire.
	wg.Go(func() {
		defer close(acquired)
		deadline := time.Now().Add(EventuallyDeadline)
		for time.Now().Before(deadline) && h.Ctx.Err() == nil {
			item, err := p1.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
			if err != nil && !errors.Is(err, durable.ErrRetryable) {
				errs <- fmt.Errorf("worker 1: %w", err)
				return
			}
			if item != nil {
				crashed = item
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		errs <- errors.New("worker 1 never fetched the instance")
	})
	// Worker 2 tries while the lock is held.
	wg.Go(func() {
		defer close(tried)
		<-acquired
		time.Sleep(lt / 4)
		item, err := expiryFetchOnce(h, p2, lt)
		if err != nil {
			errs <- fmt.Errorf("worker 2: %w", err)
		}
		blocked <- item
	})
	// Worker 3 tries after the lock expired.
	wg.Go(func() {
		<-cut
		time.Sleep(lockExpiryWait(h))
		item, err := expiryFetchOnce(h, p3, LongLock)
		if err != nil {
			errs <- fmt.Errorf("worker 3: %w", err)
		}
		recovered <- item
	})
	<-tried
	if crashed != nil {
		if err := p1.RenewOrchestrationItemLock(h.Ctx, crashed.LockToken, lt); err != nil {
			errs <- fmt.Errorf("cutting worker 1's lock: %w", err)
		}
	}
	close(cut)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(h.T, err)
	}
	require.NotNil(h.T, crashed)
	require.Nil(h.T, <-blocked, "the instance was fetched while worker 1's lock was held")
	got := <-recovered
	require.NotNil(h.T, got, "the expired lock was not recoverable")
	require.Equal(h.T, id, got.Instance)
	require.NotEqual(h.T, crashed.LockToken, got.LockToken)
	require.Equal(h.T, uint32(2), got.AttemptCount)
}
