package conformance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// longPollingScenarios checks how fetches wait for work, per the provider's
// polling mode (Options().LongPolling):
//   - a short-polling provider ignores the poll timeout: a fetch with no
//     work returns nil within Options().ShortPollThreshold;
//   - a long-polling provider waits (about) the poll timeout for work before
//     returning nil, and returns the work well before the timeout when it is
//     enqueued during the wait, by another replica; cancelling the context
//     ends the wait promptly with an error wrapping context.Canceled;
//   - on any provider a fetch with no work never waits much beyond its poll
//     timeout, and a zero poll timeout returns at once;
//   - on any provider, fetches cancelled before or while they run, many at
//     once, return no work, an error wrapping context.Canceled when
//     cancelled before they start, and leave nothing behind: work enqueued
//     after they returned goes, on its first delivery, to the next fetch.
//
// Scenarios that do not apply to the provider's mode skip, saying why.
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

// pollSkipUnless skips the scenario unless the provider polls in the mode it is about.
func pollSkipUnless(h *H, longPolling bool) {
	switch {
	case longPolling && !h.Options().LongPolling:
		h.T.Skip("provider short-polls (Options().LongPolling is false): long-poll waiting does not apply")
	case !longPolling && h.Options().LongPolling:
		h.T.Skip("provider long-polls (Options().LongPolling is true): it may wait up to the poll timeout")
	}
}

// pollTimed runs fetch on an empty store and returns how long it took; a
// first, untimed fetch with no wait warms up connections.
func pollTimed(h *H, fetch pollFetch, poll time.Duration) time.Duration {
	h.T.Helper()
	got, err := fetch(h.Ctx, h.P, 0)
	require.NoError(h.T, err)
	require.False(h.T, got, "the queue should be empty")
	start := time.Now()
	got, err = fetch(h.Ctx, h.P, poll)
	elapsed := time.Since(start)
	require.NoError(h.T, err)
	require.False(h.T, got, "the queue should be empty")
	return elapsed
}

// pollShortCheck: a short poller returns within the threshold whatever the poll timeout.
func pollShortCheck(h *H, fetch pollFetch) {
	pollSkipUnless(h, false)
	threshold := h.Options().ShortPollThreshold
	poll := max(500*time.Millisecond, 4*threshold)
	elapsed := pollTimed(h, fetch, poll)
	require.Less(h.T, elapsed, threshold,
		"a short-polling provider must return at once (poll timeout %v ignored)", poll)
}

// pollLongCheck: a long poller waits about the poll timeout for work that never comes.
func pollLongCheck(h *H, fetch pollFetch) {
	pollSkipUnless(h, true)
	poll := 500 * time.Millisecond
	elapsed := pollTimed(h, fetch, poll)
	require.GreaterOrEqual(h.T, elapsed, poll-poll/10, "a long-polling provider must wait for the poll timeout")
}

// pollUpperBoundCheck: nobody waits much beyond the poll timeout.
func pollUpperBoundCheck(h *H, fetch pollFetch) {
	poll := 300 * time.Millisecond
	elapsed := pollTimed(h, fetch, poll)
	bound := poll + h.Options().ShortPollThreshold
	require.Less(h.T, elapsed, bound, "a fetch must not wait beyond its poll timeout")
}

// pollEarlyCheck: work enqueued by another replica during a long poll ends it early.
func pollEarlyCheck(h *H, fetch pollFetch, enqueue func(p durable.Provider) error) {
	pollSkipUnless(h, true)
	poll := 4 * time.Second
	producer := h.Open()
	// Warm both up so that the wait below is about polling only.
	got, err := fetch(h.Ctx, h.P, 0)
	require.NoError(h.T, err)
	require.False(h.T, got, "the queue should be empty")
	_, err = producer.GetInstanceStats(h.Ctx, h.ID("warm-up"))
	require.NoError(h.T, err)

	delay := 300 * time.Millisecond
	enqueued := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		enqueued <- enqueue(producer)
	}()
	start := time.Now()
	got, err = fetch(h.Ctx, h.P, poll)
	elapsed := time.Since(start)
	require.NoError(h.T, <-enqueued)
	require.NoError(h.T, err)
	require.True(h.T, got, "the long poll must return the work enqueued during its wait")
	require.Less(h.T, elapsed, poll/2,
		"the long poll must return well before its timeout once work arrives (enqueued after %v)", delay)
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

func pollCancel(h *H) {
	pollSkipUnless(h, true)
	poll := 4 * time.Second
	for _, q := range []struct {
		name  string
		fetch pollFetch
	}{{"orchestrator", pollOrch}, {"worker", pollWork}} {
		ctx, cancel := context.WithCancel(h.Ctx)
		timer := time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		got, err := q.fetch(ctx, h.P, poll)
		elapsed := time.Since(start)
		timer.Stop()
		cancel()
		require.ErrorIs(h.T, err, context.Canceled, "%s long poll cancelled during its wait", q.name)
		require.False(h.T, got)
		require.Less(h.T, elapsed, poll/2, fmt.Sprintf("%s long poll must end promptly on cancellation", q.name))
	}
}

func pollZero(h *H) {
	threshold := h.Options().ShortPollThreshold
	for _, q := range []struct {
		name  string
		fetch pollFetch
	}{{"orchestrator", pollOrch}, {"worker", pollWork}} {
		elapsed := pollTimed(h, q.fetch, 0)
		require.Less(h.T, elapsed, threshold, "%s fetch with a zero poll timeout must not wait", q.name)
	}
}

func pollCancelledLeaveNothing(h *H) {
	// Warm up (connections, a long poller's first wait) with one plain fetch each.
	for _, fetch := range []pollFetch{pollOrch, pollWork} {
		got, err := fetch(h.Ctx, h.P, 0)
		require.NoError(h.T, err)
		require.False(h.T, got, "the queues should be empty")
	}
	// Many fetches of both queues, with a long poll timeout, cancelled
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
				got, err := q.fetch(ctx, h.P, LongLock)
				results <- outcome{queue: q.name, early: early, got: got, err: err, elapsed: time.Since(start)}
			}()
		}
	}
	wg.Wait()
	close(results)
	for r := range results {
		require.False(h.T, r.got, "%s fetch: the queue was empty while it ran", r.queue)
		if r.early {
			require.ErrorIs(h.T, r.err, context.Canceled, "%s fetch cancelled before it started", r.queue)
		} else if r.err != nil {
			require.ErrorIs(h.T, r.err, context.Canceled, "%s fetch cancelled while it ran", r.queue)
		}
		require.Less(h.T, r.elapsed, LongLock/2, "%s fetch must end promptly on cancellation", r.queue)
	}

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
