package changefeed_test

import (
	"context"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/require"
)

// TestTransientErrorsAreRetried injects throttling, unavailability,
// timeouts and dropped connections into a fifth of the change-feed reads
// (the SDK's own retries disabled, so the processor sees them all): every
// change still arrives, in order.
func TestTransientErrorsAreRetried(t *testing.T) {
	t.Parallel()
	feed := []cosmosemu.OperationType{cosmosemu.OpChangeFeed}
	e := newEnv(t, envOptions{noSDKRetries: true, cfg: knobs.Config{FaultSeed: 7, Faults: []knobs.FaultRule{
		{Kind: knobs.FaultThrottle, RetryAfter: 3 * time.Millisecond, Operations: feed, Probability: 0.1, Count: 40},
		{Kind: knobs.FaultUnavailable, Operations: feed, Probability: 0.05, Count: 20},
		{Kind: knobs.FaultTimeout, Operations: feed, Probability: 0.05, Count: 20},
		{Kind: knobs.FaultDrop, Operations: feed, Probability: 0.02, Count: 5},
	}}})
	store := newMemStore()
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(asLeases(mixedLeases(store))...), rec.handle, changefeed.Options{
		MaxItemCount: 10, RetryInitial: time.Millisecond, RetryMax: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	run(t, p)
	keys := keysIn(t, "t", changefeed.FullRange, 32)
	const total = 20
	e.writeAll(t, keys, 0, total)
	rec.waitAll(t, keys, total)
	requireExactlyInOrder(t, rec.snapshot(), keys, total)
	require.Positive(t, e.k.Faults().TotalFired())
	require.Positive(t, p.Stats().ReadErrors)
}

// TestRetryHonoursRetryAfter: a 429's x-ms-retry-after-ms sets the pause
// before the retry; an error without one backs off from RetryInitial.
func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	feed := []cosmosemu.OperationType{cosmosemu.OpChangeFeed}
	e := newEnv(t, envOptions{noSDKRetries: true, cfg: knobs.Config{Faults: []knobs.FaultRule{
		{Kind: knobs.FaultThrottle, RetryAfter: 7 * time.Second, Operations: feed, Count: 1},
		{Kind: knobs.FaultUnavailable, Operations: feed, Count: 1},
	}}})
	require.NoError(t, e.write(context.Background(), "x", 0))
	clk := newFakeClock()
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("all", changefeed.FullRange)), rec.handle,
		changefeed.Options{Clock: clk, RetryInitial: 300 * time.Millisecond})
	require.NoError(t, err)
	run(t, p)

	tm := clk.next(t)
	require.Equal(t, 7*time.Second, tm.d, "throttled: wait what the service asked")
	require.True(t, tm.fire())
	tm = clk.next(t)
	require.InDelta(t, 300*time.Millisecond, tm.d, float64(60*time.Millisecond), "503: first backoff step")
	require.True(t, tm.fire())
	for rec.batchCount() == 0 {
		// The four physical partitions are read in turn; keep time moving.
		clk.next(t).fire()
	}
	require.Equal(t, int64(2), p.Stats().ReadErrors)
}

// TestHungReadTimesOut: reads that hang (30 s of injected latency) time out
// after ReadTimeout and are retried; once the network recovers, changes
// arrive.
func TestHungReadTimesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noSDKRetries: true})
	require.NoError(t, e.k.Latency().Set(knobs.LatencyConfig{PerOperation: map[cosmosemu.OperationType]knobs.LatencySpec{
		cosmosemu.OpChangeFeed: {Base: 30 * time.Second},
	}}))
	require.NoError(t, e.write(context.Background(), "x", 0))
	logs, logger := newLogWatch()
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("all", changefeed.FullRange)), rec.handle, changefeed.Options{
		ReadTimeout: 20 * time.Millisecond, RetryInitial: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	run(t, p)
	logs.wait(t, "changefeed: read change feed failed", 2)
	require.NoError(t, e.k.Latency().Set(knobs.LatencyConfig{}))
	rec.waitUntil(t, "the change", func() bool { return len(rec.all) == 1 })
	require.GreaterOrEqual(t, p.Stats().ReadErrors, int64(2))
}
