package changefeed_test

import (
	"context"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// pollingEnv is one reader on exactly one physical partition (one request
// per poll), driven by a fake clock.
func pollingEnv(t *testing.T, opts changefeed.Options) (*env, *fakeClock, *changefeed.Processor, *recorder, epk.Range) {
	t.Helper()
	e := newEnv(t, envOptions{})
	clk := newFakeClock()
	p0 := pkRange(e.physical(t)[0])
	store := newMemStore()
	rec := newRecorder()
	opts.Clock = clk
	opts.Jitter = -1
	p, err := changefeed.New(e.c, newMemSource(store.lease("p0", p0)), rec.handle, opts)
	require.NoError(t, err)
	run(t, p)
	return e, clk, p, rec, p0
}

// TestAdaptivePollingBacksOffAndSnapsBack measures polling by the
// emulator's request counters over simulated time: an idle reader backs
// off geometrically to the ceiling and then polls once per ceiling; the
// first change snaps it back to the active delay.
func TestAdaptivePollingBacksOffAndSnapsBack(t *testing.T) {
	t.Parallel()
	const active, ceiling = 10 * time.Millisecond, time.Second
	e, clk, _, rec, p0 := pollingEnv(t, changefeed.Options{ActiveDelay: active, IdleCeiling: ceiling})
	key := keysIn(t, "a", p0, 1)[0]

	// The first read happens at once; every timer announced afterwards
	// means the previous read is complete.
	tm := clk.next(t)
	base := e.feedRequests()
	require.Positive(t, base)

	// Idle for one simulated minute.
	var delays []time.Duration
	var elapsed time.Duration
	var steadyStart int64 = -1
	for elapsed < time.Minute {
		delays = append(delays, tm.d)
		if tm.d == ceiling && steadyStart < 0 {
			steadyStart = e.feedRequests()
			elapsed = 0 // measure the steady state over a full minute
		}
		require.True(t, tm.fire())
		elapsed += tm.d
		tm = clk.next(t)
	}
	idlePerMinute := e.feedRequests() - steadyStart
	// Geometric growth from 2×ActiveDelay, capped at the ceiling.
	require.Equal(t, []time.Duration{20, 40, 80, 160, 320, 640}, msList(delays[:6]))
	for i := 1; i < len(delays); i++ {
		require.GreaterOrEqual(t, delays[i], delays[i-1])
		require.LessOrEqual(t, delays[i], ceiling)
	}
	require.Equal(t, int64(60), idlePerMinute, "one read per ceiling")

	// The first change snaps back to ActiveDelay.
	require.NoError(t, e.write(context.Background(), key, 0))
	require.True(t, tm.fire())
	tm = clk.next(t)
	require.Equal(t, active, tm.d)
	require.Equal(t, 1, rec.batchCount())

	// While changes flow the reader polls every ActiveDelay: count requests
	// over one simulated second with a write before every poll.
	start := e.feedRequests()
	elapsed = 0
	for seq := 1; elapsed < time.Second; seq++ {
		require.Equal(t, active, tm.d)
		require.NoError(t, e.write(context.Background(), key, seq))
		require.True(t, tm.fire())
		elapsed += tm.d
		tm = clk.next(t)
	}
	activePerSecond := e.feedRequests() - start
	require.Equal(t, int64(100), activePerSecond)
	// Active polling costs ActiveDelay/IdleCeiling times more than idle.
	require.Equal(t, int64(ceiling/active), activePerSecond*60/idlePerMinute)

	// Changes stop: back off again from the active delay.
	require.True(t, tm.fire())
	require.Equal(t, 20*time.Millisecond, clk.next(t).d)
}

func msList(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / time.Millisecond
	}
	return out
}

// TestWakeReadsAtOnce: with the fake clock never advancing, only Wake can
// make the idle reader read, and only for an overlapping range.
func TestWakeReadsAtOnce(t *testing.T) {
	t.Parallel()
	e, clk, p, rec, p0 := pollingEnv(t, changefeed.Options{})
	key := keysIn(t, "w", p0, 1)[0]
	clk.next(t) // the reader read once and is pausing; time stands still

	require.NoError(t, e.write(context.Background(), key, 0))
	p.Wake(pkRange(e.physical(t)[2])) // another partition: no reader there
	require.Zero(t, p.Stats().Wakes)

	e0 := keyEPK(t, key)
	p.Wake(epk.Range{Min: e0, Max: e0 + "1"}) // just the written key
	require.Equal(t, int64(1), p.Stats().Wakes)
	rec.waitUntil(t, "the woken read", func() bool { return len(rec.all) == 1 })
	require.Equal(t, key, rec.snapshot()[0].PK)
}

// TestReadersShareBackoff: two leases on two partitions back off to a
// long pause; a change found in one wakes the other, which then backs off
// afresh from the start, so a change in its range is read within the first
// back-off step. With IndependentBackoff the other reader keeps its long
// pause.
func TestReadersShareBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		independent bool
	}{{"shared", false}, {"independent", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			phys := e.physical(t)
			ra, rb := pkRange(phys[0]), pkRange(phys[1])
			store := newMemStore()
			rec := newRecorder()
			// Pauses: 200 ms after the first empty read, then the ceiling.
			p, err := changefeed.New(e.c, newMemSource(store.lease("a", ra), store.lease("b", rb)), rec.handle, changefeed.Options{
				ActiveDelay: 2 * time.Millisecond, BackoffFactor: 100, IdleCeiling: time.Hour, Jitter: -1,
				IndependentBackoff: tc.independent})
			require.NoError(t, err)
			run(t, p)
			// Two empty reads each: both readers are in their hour-long pause.
			require.Eventually(t, func() bool { return p.Stats().EmptyReads >= 4 }, liveness, time.Millisecond)

			ka, kb := keysIn(t, "a", ra, 1)[0], keysIn(t, "b", rb, 1)[0]
			ctx := context.Background()
			require.NoError(t, e.write(ctx, ka, 0))
			p.Wake(ra)
			rec.waitUntil(t, "the woken read of a", func() bool { return len(rec.all) == 1 })
			require.NoError(t, e.write(ctx, kb, 0)) // no Wake: only b's own pacing reads it
			if tc.independent {
				time.Sleep(time.Second)
				require.Len(t, rec.snapshot(), 1, "b stays in its long pause")
				return
			}
			rec.waitUntil(t, "b's read after its fresh back-off", func() bool { return len(rec.all) == 2 })
			require.Equal(t, kb, rec.snapshot()[1].PK)
		})
	}
}
