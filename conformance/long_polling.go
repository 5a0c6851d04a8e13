package conformance

import (
	"context"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// longPollingScenarios checks how fetches wait for work, per the provider's
// polling mode (Options().LongPolling):
//   - a short-polling provider ignores the poll timeout: a fetch with no
//     work returns nil at once, even with an hour's poll timeout;
//   - a long-polling provider waits (about) the poll timeout for work before
//     returning nil, and returns the work before the timeout when it is
//     enqueued during the wait, by another replica; cancelling the context
//     ends the wait with an error wrapping context.Canceled;
//   - on any provider a fetch with no work returns by itself once its poll
//     timeout passed, and a zero poll timeout does not wait;
//   - on any provider, fetches cancelled before or while they run, many at
//     once, return no work, an error wrapping context.Canceled when
//     cancelled before they start, and leave nothing behind: work enqueued
//     after they returned goes, on its first delivery, to the next fetch.
//
// Scenarios that do not apply to the provider's mode skip, saying why.
// Only lower bounds are timed (a long poller waits at least about its poll
// timeout: a loaded machine only makes that longer); "returns at once" and
// "ends early" are shown with an hour's poll timeout, which a fetch that
// returns at all did not wait out, and deadlines here only catch hangs.
// How fast fetches return is for the benchmarks.
func longPollingScenarios() []Scenario {
	return []Scenario{
		{"short_poll_returns_immediately", pollShortOrch},
		{"long_poll_waits_for_timeout", pollLongOrch},
		{"fetch_respects_timeout_upper_bound", pollUpperBoundOrch},
		{"short_poll_work_item_returns_immediately", pollShortWork},
		{"long_poll_work_item_waits_for_timeout", pollLongWork},
		{"work_item_fetch_respects_timeout_upper_bound", pollUpperBoundWork},
		{"long_poll_returns_early_when_work_arrives", pollEarlyOrch},
		{"long_poll_work_item_returns_early_when_work_arrives", pollEarlyWork},
		{"long_poll_honours_context_cancellation", pollCancel},
		{"zero_poll_timeout_returns_immediately", pollZero},
		{"cancelled_fetches_leave_nothing_behind", pollCancelledLeaveNothing},
	}
}

// pollFetch is one fetch, on the orchestrator queue or the worker queue,
// with the given poll timeout; it reports whether it returned work.
type pollFetch func(ctx context.Context, p durable.Provider, poll time.Duration) (bool, error)

func pollOrch(ctx context.Context, p durable.Provider, poll time.Duration) (bool, error) {
	item, err := p.FetchOrchestrationItem(ctx, LongLock, poll, nil)
	return item != nil, err
}

func pollWork(ctx context.Context, p durable.Provider, poll time.Duration) (bool, error) {
	item, err := p.FetchWorkItem(ctx, LongLock, poll, nil, durable.AnyTag())
	return item != nil, err
}

// pollForever is the poll timeout of fetches that must end on something
// else (work, a cancellation) or not wait at all: a fetch that returns
// at all did not wait it out.
const pollForever = time.Hour

// pollHang bounds how long a scenario waits for a fetch that must return
// long before pollForever (on work, a cancellation, or at once), or soon
// after a short poll timeout: generous, so that it only catches a fetch
// that waits out its poll timeout (or hangs), on a shared machine.
const pollHang = 2 * time.Minute

// pollSkipUnless skips the scenario unless the provider polls in the mode it is about.
func pollSkipUnless(h *H, longPolling bool) {
	switch {
	case longPolling && !h.Options().LongPolling:
		h.T.Skip("provider short-polls (Options().LongPolling is false): long-poll waiting does not apply")
	case !longPolling && h.Options().LongPolling:
		h.T.Skip("provider long-polls (Options().LongPolling is true): it may wait up to the poll timeout")
	}
}

// pollResult is what a fetch returned, and how long it took.
type pollResult struct {
	got     bool
	err     error
	elapsed time.Duration
}

// pollRun runs fetch with ctx and poll, and returns its result once it
// returns; it fails the scenario if the fetch has not returned after hang
// (then cancelling it).
func pollRun(h *H, ctx context.Context, fetch pollFetch, poll, hang time.Duration, what string) pollResult {
	h.T.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan pollResult, 1)
	go func() {
		start := time.Now()
		got, err := fetch(ctx, h.P, poll)
		done <- pollResult{got: got, err: err, elapsed: time.Since(start)}
	}()
	timer := time.NewTimer(hang)
	defer timer.Stop()
	select {
	case r := <-done:
		return r
	case <-timer.C:
		h.T.Fatalf("%s (poll timeout %v) had not returned after %v", what, poll, hang)
		return pollResult{}
	}
}

// pollWarmUp runs one fetch with no wait on an empty queue (to warm up
// connections, and a long poller's first wait), failing unless it returns
// nothing and no error within LongLock (see pollZero).
func pollWarmUp(h *H, fetch pollFetch) {
	h.T.Helper()
	r := pollRun(h, h.Ctx, fetch, 0, LongLock, "a warm-up fetch")
	require.NoError(h.T, r.err)
	require.False(h.T, r.got, "the queue should be empty")
}

// pollEmpty runs fetch on an empty store, as pollRun, and fails unless it
// returns nothing and no error; a first fetch with no wait warms up
// connections.
func pollEmpty(h *H, fetch pollFetch, poll, hang time.Duration, what string) time.Duration {
	h.T.Helper()
	pollWarmUp(h, fetch)
	r := pollRun(h, h.Ctx, fetch, poll, hang, what)
	require.NoError(h.T, r.err, what)
	require.False(h.T, r.got, "the queue should be empty")
	return r.elapsed
}

// pollShortCheck: a short poller returns at once whatever the poll
// timeout: with an hour's, a fetch that returns at all did not wait for it.
func pollShortCheck(h *H, fetch pollFetch) {
	pollSkipUnless(h, false)
	elapsed := pollEmpty(h, fetch, pollForever, pollHang, "a short-polling provider's fetch")
	h.T.Logf("a fetch with no work and a poll timeout of %v returned after %v", pollForever, elapsed)
}

// pollLongCheck: a long poller waits about the poll timeout for work that never comes.
func pollLongCheck(h *H, fetch pollFetch) {
	pollSkipUnless(h, true)
	poll := 500 * time.Millisecond
	elapsed := pollEmpty(h, fetch, poll, pollHang, "a long-polling provider's fetch")
	require.GreaterOrEqual(h.T, elapsed, poll-poll/10, "a long-polling provider must wait for the poll timeout")
}

// pollUpperBoundCheck: nobody waits much beyond the poll timeout. A fetch
// with a short poll timeout and no work returns by itself, with nothing,
// long before a wait of LongLock, which only a fetch that ignores its poll
// timeout (for a longer default, or for ever) reaches.
func pollUpperBoundCheck(h *H, fetch pollFetch) {
	poll := 300 * time.Millisecond
	elapsed := pollEmpty(h, fetch, poll, LongLock, "a fetch with no work")
	h.T.Logf("a fetch with no work and a poll timeout of %v returned after %v", poll, elapsed)
}

// pollEarlyCheck: work enqueued by another replica during a long poll ends
// it: with an hour's poll timeout, a fetch that returns the work at all
// returned early.
func pollEarlyCheck(h *H, fetch pollFetch, enqueue func(p durable.Provider) error) {
	pollSkipUnless(h, true)
	producer := h.Open()
	// Warm both up so that the wait below is about polling only.
	pollWarmUp(h, fetch)
	_, err := producer.GetInstanceStats(h.Ctx, h.ID("warm-up"))
	require.NoError(h.T, err)

	delay := 300 * time.Millisecond
	enqueued := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		enqueued <- enqueue(producer)
	}()
	r := pollRun(h, h.Ctx, fetch, pollForever, pollHang, "a long poll with work enqueued during its wait")
	require.NoError(h.T, <-enqueued)
	require.NoError(h.T, r.err)
	require.True(h.T, r.got, "the long poll must return the work enqueued during its wait")
	h.T.Logf("the long poll returned the work %v after it began (enqueued after %v)", r.elapsed, delay)
}

func pollShortOrch(h *H)      { pollShortCheck(h, pollOrch) }
func pollShortWork(h *H)      { pollShortCheck(h, pollWork) }
func pollLongOrch(h *H)       { pollLongCheck(h, pollOrch) }
func pollLongWork(h *H)       { pollLongCheck(h, pollWork) }
func pollUpperBoundOrch(h *H) { pollUpperBoundCheck(h, pollOrch) }
func pollUpperBoundWork(h *H) { pollUpperBoundCheck(h, pollWork) }

func pollEarlyOrch(h *H) {
	id := h.ID("early")
	pollEarlyCheck(h, pollOrch, func(p durable.Provider) error {
		return p.EnqueueForOrchestrator(h.Ctx, StartItem(id), 0)
	})
}

func pollEarlyWork(h *H) {
	id := h.ID("early-work")
	pollEarlyCheck(h, pollWork, func(p durable.Provider) error {
		return p.EnqueueForWorker(h.Ctx, queueActivity(id, 1))
	})
}

// pollCancel: cancelling the context ends a long poll: with an hour's
// poll timeout, a fetch that returns at all, cancelled, ended on the
// cancellation.
func pollCancel(h *H) {
	pollSkipUnless(h, true)
	for _, q := range []struct {
		name  string
		fetch pollFetch
	}{{"orchestrator", pollOrch}, {"worker", pollWork}} {
		ctx, cancel := context.WithCancel(h.Ctx)
		timer := time.AfterFunc(200*time.Millisecond, cancel)
		r := pollRun(h, ctx, q.fetch, pollForever, pollHang, q.name+" long poll cancelled during its wait")
		timer.Stop()
		cancel()
		require.ErrorIs(h.T, r.err, context.Canceled, "%s long poll cancelled during its wait", q.name)
		require.False(h.T, r.got)
		h.T.Logf("%s long poll cancelled after 200ms returned after %v", q.name, r.elapsed)
	}
}

// pollZero: a zero poll timeout does not wait. No fetch with no work may
// come near LongLock, which only a provider that takes 0 for a default
// long wait (or for ever) reaches.
func pollZero(h *H) {
	for _, q := range []struct {
		name  string
		fetch pollFetch
	}{{"orchestrator", pollOrch}, {"worker", pollWork}} {
		elapsed := pollEmpty(h, q.fetch, 0, LongLock, q.name+" fetch with a zero poll timeout")
		h.T.Logf("%s fetch with a zero poll timeout returned after %v", q.name, elapsed)
	}
}

func pollCancelledLeaveNothing(h *H) {
	// Warm up (connections, a long poller's first wait) with one plain fetch each.
	for _, fetch := range []pollFetch{pollOrch, pollWork} {
		pollWarmUp(h, fetch)
	}
	// Many fetches of both queues, with an hour's poll timeout, cancelled
	// before they start or at growing points while they run.
	const perQueue = 24
	type outcome struct {
		queue   string
		early   bool // cancelled before the call
		got     bool
		err     error
		elapsed time.Duration
	}
	results := make(chan outcome, 2*perQueue)
	var wg sync.WaitGroup
	for _, q := range []struct {
		name  string
		fetch pollFetch
	}{{"orchestrator", pollOrch}, {"worker", pollWork}} {
		for i := range perQueue {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(h.Ctx)
				defer cancel()
				early := i%4 == 0
				if early {
					cancel()
				} else {
					timer := time.AfterFunc(time.Duration(i)*time.Millisecond, cancel)
					defer timer.Stop()
				}
				start := time.Now()
				got, err := q.fetch(ctx, h.P, pollForever)
				results <- outcome{queue: q.name, early: early, got: got, err: err, elapsed: time.Since(start)}
			}()
		}
	}
	// With an hour's poll timeout, fetches that return at all ended on
	// their cancellation (or found the queue empty at once).
	returned := make(chan struct{})
	go func() {
		wg.Wait()
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(pollHang):
		h.T.Fatalf("cancelled fetches (poll timeout %v) had not all returned after %v", pollForever, pollHang)
	}
	close(results)
	var slowest time.Duration
	for r := range results {
		require.False(h.T, r.got, "%s fetch: the queue was empty while it ran", r.queue)
		if r.early {
			require.ErrorIs(h.T, r.err, context.Canceled, "%s fetch cancelled before it started", r.queue)
		} else if r.err != nil {
			require.ErrorIs(h.T, r.err, context.Canceled, "%s fetch cancelled while it ran", r.queue)
		}
		slowest = max(slowest, r.elapsed)
	}
	h.T.Logf("the slowest cancelled fetch returned after %v", slowest)

	// Nothing is left waiting or holding: new work goes to the next fetch,
	// as its first delivery (no cancelled fetch took it in between).
	id := h.ID("after-cancelled")
	h.Enqueue(h.P, StartItem(id))
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 2)))
	// Give anything a cancelled fetch left running time to take the work.
	h.Sleep(lockMargin(h))
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, []durable.WorkItem{StartItem(id)}, item.Messages)
	require.Equal(h.T, uint32(1), item.AttemptCount, "no cancelled fetch took the new message first")
	w := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, queueActivity(id, 2), queueActivityOf(h, w))
	require.Equal(h.T, uint32(1), w.AttemptCount, "no cancelled fetch took the new work item first")
}
