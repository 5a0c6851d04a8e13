package changefeed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// TestWarmHoldKeepsActiveDelay: after a change, an empty read pauses only
// ActiveDelay until WarmHold has passed since the change, then backs off
// as usual.
func TestWarmHoldKeepsActiveDelay(t *testing.T) {
	t.Parallel()
	const active = 10 * time.Millisecond
	e, clk, _, rec, p0 := pollingEnv(t, changefeed.Options{ActiveDelay: active, IdleCeiling: time.Second, WarmHold: 100 * time.Millisecond})
	key := keysIn(t, "h", p0, 1)[0]
	tm := clk.next(t)
	require.NoError(t, e.write(context.Background(), key, 0))
	require.True(t, tm.fire())
	var delays []time.Duration
	for range 13 {
		tm = clk.next(t)
		delays = append(delays, tm.d)
		require.True(t, tm.fire())
	}
	require.Equal(t, 1, rec.batchCount())
	// The change's cycle, nine empty cycles within the 100 ms hold, then
	// the back-off from ActiveDelay.
	require.Equal(t, []time.Duration{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 20, 40, 80}, msList(delays))
}

// TestWarmHoldSpansReaders: a change found by one reader makes the
// processor warm, so another reader, deep in its idle pause, is woken and
// keeps reading every ActiveDelay: a change in its range written long
// after is read without any Wake.
func TestWarmHoldSpansReaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	phys := e.physical(t)
	ra, rb := pkRange(phys[0]), pkRange(phys[1])
	store := newMemStore()
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(store.lease("a", ra), store.lease("b", rb)), rec.handle, changefeed.Options{
		ActiveDelay: 2 * time.Millisecond, BackoffFactor: 100, IdleCeiling: time.Hour, Jitter: -1, WarmHold: time.Hour})
	require.NoError(t, err)
	run(t, p)
	require.Eventually(t, func() bool { return p.Stats().EmptyReads >= 4 }, liveness, time.Millisecond)

	ctx := context.Background()
	ka, kb := keysIn(t, "a", ra, 1)[0], keysIn(t, "b", rb, 1)[0]
	require.NoError(t, e.write(ctx, ka, 0))
	p.Wake(ra)
	rec.waitUntil(t, "the woken read of a", func() bool { return len(rec.all) == 1 })
	// Without the hold both readers would be back in their hour-long
	// pause after two more empty reads each.
	base := p.Stats().EmptyReads
	require.Eventually(t, func() bool { return p.Stats().EmptyReads >= base+50 }, liveness, time.Millisecond)
	require.NoError(t, e.write(ctx, kb, 0))
	rec.waitUntil(t, "b's read while warm", func() bool { return len(rec.all) == 2 })
	require.Equal(t, kb, rec.snapshot()[1].PK)
}

// halves returns the two leases' ranges splitting physical partition p in
// two (the emulator's partitions are the even split of the EPK space in
// four, so the even split in eight halves each).
func halves(t *testing.T, p epk.Range) (epk.Range, epk.Range) {
	t.Helper()
	for i, r := range epk.SplitEven(8) {
		if r.Min == p.Min {
			next := epk.SplitEven(8)[i+1]
			require.Equal(t, p.Max, next.Max, "partition %v is not two eighths", p)
			return r, next
		}
	}
	t.Fatalf("partition %v does not start an eighth", p)
	return epk.Range{}, epk.Range{}
}

// halvesProcessor runs a processor with leases "a" and "b" on the halves
// of the first physical partition, recording what it delivers.
func halvesProcessor(t *testing.T, o changefeed.Options) (*env, *changefeed.Processor, *recorder, epk.Range, epk.Range) {
	t.Helper()
	e := newEnv(t, envOptions{})
	ra, rb := halves(t, pkRange(e.physical(t)[0]))
	store := newMemStore()
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(store.lease("a", ra), store.lease("b", rb)), rec.handle, o)
	require.NoError(t, err)
	run(t, p)
	return e, p, rec, ra, rb
}

// TestReadersOfOnePartitionTakeTurns: two leases on the halves of one
// physical partition, polling at a fixed pace. While the partition is
// idle, one reader's read tells the other there is nothing new, so they
// take turns instead of both reading; changes in either half are still
// delivered without any Wake.
func TestReadersOfOnePartitionTakeTurns(t *testing.T) {
	t.Parallel()
	e, p, rec, ra, rb := halvesProcessor(t, changefeed.Options{
		ActiveDelay: 10 * time.Millisecond, IdleCeiling: 10 * time.Millisecond, BackoffFactor: 1, Jitter: -1})
	require.Eventually(t, func() bool { return p.Stats().Reads >= 10 }, liveness, time.Millisecond)
	s0 := p.Stats()
	require.Eventually(t, func() bool { return p.Stats().Reads >= s0.Reads+100 }, liveness, time.Millisecond)
	s1 := p.Stats()
	reads, skipped := s1.Reads-s0.Reads, s1.SkippedReads-s0.SkippedReads+s1.SharedPages-s0.SharedPages
	t.Logf("reads %d, skipped %d", reads, skipped)
	// Alone, each reader would read at every cycle (skipped = 0); taking
	// turns (a skip, or a sibling's shared page), about half the cycles
	// make no request. Scheduling noise may let both read in one round,
	// never let both go without.
	require.GreaterOrEqual(t, skipped*2, reads, "reads %d, skipped %d", reads, skipped)

	ctx := context.Background()
	ka, kb := keysIn(t, "a", ra, 1)[0], keysIn(t, "b", rb, 1)[0]
	require.NoError(t, e.write(ctx, kb, 0))
	rec.waitUntil(t, "b's change", func() bool { return len(rec.all) == 1 })
	require.NoError(t, e.write(ctx, ka, 0))
	rec.waitUntil(t, "a's change", func() bool { return len(rec.all) == 2 })
	got := rec.snapshot()
	require.Equal(t, []string{kb, ka}, []string{got[0].PK, got[1].PK})
	require.Equal(t, "b", got[0].lease)
	require.Equal(t, "a", got[1].lease)
}

// TestWokenReaderReadsDespiteFreshObservation: time stands still, so every
// observation is fresh; a reader woken by Wake still reads, because the
// write that woke it may postdate the other reader's observation.
func TestWokenReaderReadsDespiteFreshObservation(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	e, p, rec, ra, rb := halvesProcessor(t, changefeed.Options{Clock: clk, Jitter: -1})
	clk.next(t)
	clk.next(t) // both readers read once and are pausing
	reads := p.Stats().Reads
	p.Wake(ra) // a reads again: the newest observation is a's
	require.Eventually(t, func() bool { return p.Stats().Reads == reads+1 }, liveness, time.Millisecond)
	clk.next(t)

	kb := keysIn(t, "b", rb, 1)[0]
	require.NoError(t, e.write(context.Background(), kb, 0))
	p.Wake(rb)
	rec.waitUntil(t, "b's woken read", func() bool { return len(rec.all) == 1 })
	require.Equal(t, kb, rec.snapshot()[0].PK)
	require.Zero(t, p.Stats().SkippedReads)
	require.Zero(t, p.Stats().SharedPages)
}

// TestPacingIgnoresTimerLateness: a pause counts from when the cycle was
// due, not from when its timer fired, so a late timer shortens the next
// pause instead of pushing every later read back.
func TestPacingIgnoresTimerLateness(t *testing.T) {
	t.Parallel()
	const active = 20 * time.Millisecond
	_, clk, _, _, _ := pollingEnv(t, changefeed.Options{ActiveDelay: active, IdleCeiling: active, BackoffFactor: 1})
	tm := clk.next(t)
	require.Equal(t, active, tm.d)
	clk.advance(3 * time.Millisecond) // the timer fires 3 ms late
	require.True(t, tm.fire())
	tm = clk.next(t)
	require.Equal(t, active-3*time.Millisecond, tm.d)
	require.True(t, tm.fire())
	require.Equal(t, active, clk.next(t).d, "on time again")
}

// TestPartitionsReadOnTheirPhase: while changes flow, partition k of the
// container's n is read at k/n of ActiveDelay past the processor's
// start, so the reads of different partitions do not start together.
func TestPartitionsReadOnTheirPhase(t *testing.T) {
	t.Parallel()
	const active = 20 * time.Millisecond
	for _, tc := range []struct {
		partition int
		first     time.Duration
	}{{0, active}, {1, active * 5 / 4}, {2, active / 2}, {3, active * 3 / 4}} {
		t.Run(fmt.Sprint("partition ", tc.partition), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			rng := pkRange(e.physical(t)[tc.partition])
			require.NoError(t, e.write(context.Background(), keysIn(t, "ph", rng, 1)[0], 0))
			clk := newFakeClock()
			rec := newRecorder()
			p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("l", rng)), rec.handle, changefeed.Options{
				Clock: clk, Jitter: -1, ActiveDelay: active, WarmHold: time.Hour})
			require.NoError(t, err)
			run(t, p)
			// The first cycle finds the change; the pause after it ends on
			// the partition's phase (k/4 of 20 ms, or a whole period when
			// that is less than half a period away), the next ones a
			// period apart.
			tm := clk.next(t)
			require.Equal(t, tc.first, tm.d)
			require.True(t, tm.fire())
			require.Equal(t, active, clk.next(t).d)
		})
	}
}
