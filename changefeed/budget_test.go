package changefeed_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
)

// budgetEnv is an emulator charging the documented model (a 304 is 1 RU).
func budgetEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
}

// TestEmptyReadBudgetPacesIdleReads: under a budget, an idle reader reads
// once per period (partitions × charge of an empty read ÷ budget), on its
// phase; a change brings one read after ActiveDelay, and the first empty
// read after it returns the reader to its period's slots.
func TestEmptyReadBudgetPacesIdleReads(t *testing.T) {
	t.Parallel()
	const active = 10 * time.Millisecond
	const budget = 0.5 // RU/s: one partition, 1 RU a read, so a read every 2 s
	e := budgetEnv(t)
	clk := newFakeClock()
	p0 := pkRange(e.physical(t)[0])
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("p0", p0)), rec.handle, changefeed.Options{
		ActiveDelay: active, EmptyReadBudget: budget, IdleCeiling: time.Hour, Clock: clk})
	require.NoError(t, err)
	run(t, p)
	key := keysIn(t, "b", p0, 1)[0]

	tm := clk.next(t)
	period := 2 * time.Second
	require.Equal(t, period, tm.d, "the first empty read is followed by a whole period")
	st := p.Stats()
	require.InDelta(t, 1.0, st.EmptyReadCharge, 1e-9)
	require.Equal(t, period, st.IdlePeriod)

	base := e.feedRequests()
	for range 30 { // one simulated minute
		require.Equal(t, period, tm.d)
		require.True(t, tm.fire())
		tm = clk.next(t)
	}
	require.Equal(t, int64(30), e.feedRequests()-base, "a minute at 0.5 RU/s of 1 RU reads")
	require.Zero(t, rec.batchCount())

	// A change is read at the next slot, then once more after ActiveDelay;
	// that read finds nothing and the reader returns to its slots.
	require.NoError(t, e.write(context.Background(), key, 0))
	require.True(t, tm.fire())
	tm = clk.next(t)
	require.Equal(t, 1, rec.batchCount())
	require.Equal(t, active, tm.d)
	require.True(t, tm.fire())
	tm = clk.next(t)
	require.Equal(t, period-active, tm.d, "back on the period's phase")
	require.True(t, tm.fire())
	require.Equal(t, period, clk.next(t).d)
}

// TestMaxIdlePeriodBoundsThePeriod: MaxIdlePeriod caps the budget's
// period, so an idle partition is read at least that often whatever the
// budget; a cap above the period changes nothing.
func TestMaxIdlePeriodBoundsThePeriod(t *testing.T) {
	t.Parallel()
	const budget = 0.5 // RU/s: one partition, 1 RU a read, so a period of 2 s
	for _, tc := range []struct {
		name      string
		max, want time.Duration
	}{
		{"a cap below the period", 500 * time.Millisecond, 500 * time.Millisecond},
		{"a cap above the period", 5 * time.Second, 2 * time.Second},
		{"no cap", 0, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := budgetEnv(t)
			clk := newFakeClock()
			p0 := pkRange(e.physical(t)[0])
			rec := newRecorder()
			p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("p0", p0)), rec.handle, changefeed.Options{
				ActiveDelay: 10 * time.Millisecond, EmptyReadBudget: budget, MaxIdlePeriod: tc.max, IdleCeiling: time.Hour, Clock: clk})
			require.NoError(t, err)
			run(t, p)
			tm := clk.next(t) // the first read has ended
			base := e.feedRequests()
			for range 5 {
				require.Equal(t, tc.want, tm.d)
				require.True(t, tm.fire())
				tm = clk.next(t)
			}
			require.Equal(t, tc.want, p.Stats().IdlePeriod)
			require.Equal(t, int64(5), e.feedRequests()-base, "one read per period")
		})
	}
}

// TestEmptyReadBudgetBoundsSpend: four leases, one per physical partition,
// under a budget of 40 RU/s of 1 RU reads: an idle reader pauses 100 ms,
// the processor reads no partition more than once per period (whatever the
// machine's load: a slow read only makes fewer), and a write is still
// found without any Wake.
func TestEmptyReadBudgetBoundsSpend(t *testing.T) {
	t.Parallel()
	const budget = 40.0
	e := budgetEnv(t)
	phys := e.physical(t)
	store := newMemStore()
	var leases []changefeed.Lease
	for i, fr := range phys {
		leases = append(leases, store.lease(string(rune('a'+i)), pkRange(fr)))
	}
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(leases...), rec.handle, changefeed.Options{
		ActiveDelay: 5 * time.Millisecond, EmptyReadBudget: budget})
	require.NoError(t, err)
	run(t, p)
	require.Eventually(t, func() bool { return p.Stats().EmptyReads >= int64(2*len(phys)) }, liveness, time.Millisecond)
	period := time.Duration(float64(len(phys)) / budget * float64(time.Second))
	require.Equal(t, period, p.Stats().IdlePeriod)

	from, start := p.Stats().Reads, time.Now()
	require.Eventually(t, func() bool { return p.Stats().Reads >= from+int64(5*len(phys)) }, liveness, time.Millisecond)
	reads, elapsed := p.Stats().Reads-from, time.Since(start)
	slots := int64(elapsed/period) + 2 // a slot under way at each end
	require.LessOrEqual(t, reads, int64(len(phys))*slots, "%d reads in %v of %v periods", reads, elapsed, period)

	key := keysIn(t, "w", pkRange(phys[2]), 1)[0]
	require.NoError(t, e.write(context.Background(), key, 0))
	rec.waitUntil(t, "the write's read", func() bool { return len(rec.all) == 1 })
}

// TestReadsPerChangeRaisesTheBudget: changes raise the budget by
// ReadsPerChange reads each (decaying over seconds), so a reader that
// just found changes idles for a fraction of its quiet period, and
// returns to the quiet period once the changes are a few time constants
// old.
func TestReadsPerChangeRaisesTheBudget(t *testing.T) {
	t.Parallel()
	const budget = 0.5 // a read every 2 s when quiet
	e := budgetEnv(t)
	clk := newFakeClock()
	p0 := pkRange(e.physical(t)[0])
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("p0", p0)), rec.handle, changefeed.Options{
		ActiveDelay: 10 * time.Millisecond, EmptyReadBudget: budget, ReadsPerChange: 10, Clock: clk})
	require.NoError(t, err)
	run(t, p)
	quiet := 2 * time.Second
	tm := clk.next(t)
	require.Equal(t, quiet, tm.d)

	// Eight changes: a rate of 4 a second, so a budget of 0.5 + 10·4 RU/s
	// and a period of about 25 ms.
	keys := keysIn(t, "c", p0, 8)
	e.writeAll(t, keys, 0, 1)
	require.True(t, tm.fire())
	tm = clk.next(t) // ActiveDelay after the changes
	require.Equal(t, 8, len(rec.snapshot()))
	require.True(t, tm.fire())
	tm = clk.next(t)
	require.Less(t, tm.d, 100*time.Millisecond, "a busy reader idles briefly")
	require.Less(t, p.Stats().IdlePeriod, 100*time.Millisecond)

	// Empty reads while the rate decays: the pause grows back to the
	// quiet period (once on its phase again: the first pause of a longer
	// period may be up to half a period longer).
	atQuiet := 0
	for i := 0; atQuiet < 3; i++ {
		require.Less(t, i, 1000, "the pause never returned to the quiet period")
		if tm.d == quiet {
			atQuiet++
		} else {
			atQuiet = 0
		}
		require.True(t, tm.fire())
		tm = clk.next(t)
	}
	require.Equal(t, 8, len(rec.snapshot()), "nothing new")
}
