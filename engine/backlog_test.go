package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// A deep backlog in one slot: a scan signals at most scanLimit of it, and
// the slot is scanned again each time what the scan signalled is taken,
// so the hub never holds more than a scan's share while every instance is
// still run exactly once.

// instancesInSlot returns n instance ids whose dispatch slot is slot.
func instancesInSlot(slot, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprint("deep-", i); slots.Of(id) == slot {
			out = append(out, id)
		}
	}
	return out
}

func TestDeepSlotDrainsThroughBoundedScans(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.joinOwning(0)
	slot, _, _ := f.leaseSlots(0).Bounds()
	limit := f.e.scanLimit(orchHubBound, orchSlotBound)
	n := 2*limit + limit/2
	insts := instancesInSlot(slot, n)
	for _, inst := range insts {
		f.fs.putMsg(t, inst, "start")
	}
	// The slot's wakeups were collapsed (the feed's pages are not handed
	// to this engine): a scan stands for them.
	f.e.orch.SignalScan(slot, f.clk.Now())

	ran := map[string]int{}
	for range n {
		item := f.fetchOrch()
		require.NotNil(t, item, "%d of %d run, then no item", len(ran), n)
		ran[item.Instance]++
		f.fs.ackTurn(item.Instance)
		require.LessOrEqual(t, f.e.Stats().PendingOrch, limit+1, "the hub holds more than a scan signals")
	}
	require.Len(t, ran, n)
	for inst, times := range ran {
		require.Equal(t, 1, times, inst)
	}
	require.Nil(t, f.fetchOrch())

	scans := 0
	for _, q := range f.fs.headQueries() {
		if q.Orchestrator && len(q.Blocks) == 1 && q.Blocks[0] == (slots.Block{First: slot, Last: slot}) {
			scans++
		}
	}
	require.Equal(t, n/limit+1, scans, "one scan, then one each time its rows were taken")
	require.Equal(t, int64(scans), f.e.Stats().Scans)
	f.e.mu.Lock()
	defer f.e.mu.Unlock()
	require.False(t, f.e.moreOrch.Contains(slot), "the last scan left nothing")
}

func TestDueFirst(t *testing.T) {
	t.Parallel()
	const now = 1_000
	row := func(id string, visible, locked int64) store.QueueHead {
		return store.QueueHead{ID: id, VisibleAt: visible, LockedUntil: locked}
	}
	for _, tc := range []struct {
		name string
		in   []store.QueueHead
		want []string
	}{
		{name: "all due keep their order", in: []store.QueueHead{row("a", 5, 0), row("b", 900, 999), row("c", 1, 0)}, want: []string{"a", "b", "c"}},
		{name: "future after due, by when", in: []store.QueueHead{row("t2", 3_000, 0), row("a", 5, 0), row("l1", 0, 2_000), row("b", 1_000, 0)},
			want: []string{"a", "b", "l1", "t2"}},
		{name: "locked past its visibility counts its lock", in: []store.QueueHead{row("x", 2_500, 4_000), row("y", 3_000, 0)}, want: []string{"y", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dueFirst(tc.in, now)
			var got []string
			for _, r := range tc.in {
				got = append(got, r.ID)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestMaintenanceScanFinishesNothing: deferred checks past the maintenance
// hub's bound collapse into a Scan, which names no instance: the loop
// leaves them to the sweep's repair pass instead of finishing instance "".
func TestMaintenanceScanFinishesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.joinOwning(0)
	slot, _, _ := f.leaseSlots(0).Bounds()
	insts := instancesInSlot(slot, wakeup.DefaultMaxPendingPerSlot+1)
	// Checks due later pile up (the loop cannot take them yet) and pass
	// the bound.
	later := f.clk.Now().Add(time.Minute)
	for _, inst := range insts {
		f.e.maint.Signal(slot, inst, later)
	}
	require.Equal(t, uint64(1), f.e.maint.Snapshot().Collapses)
	f.clk.Advance(time.Minute)
	require.Eventually(t, func() bool { return f.e.maint.Pending(wakeup.All(slots.Count)) == 0 }, hangGuard, time.Millisecond)
	// The loop is sequential: once a check signalled after the scan has
	// run, the scan has been handled.
	f.e.maint.Signal(slot, "after-the-scan", f.clk.Now())
	require.Eventually(t, func() bool {
		for _, c := range f.fs.callsOf(opFinishInstance) {
			if c.Instance == "after-the-scan" {
				return true
			}
		}
		return false
	}, hangGuard, time.Millisecond)
	for _, c := range f.fs.callsOf(opFinishInstance) {
		require.NotEmpty(t, c.Instance, "FinishInstance of no instance")
	}
}

// TestSweepLeavesFollowedScansAlone: the safety sweep does not re-signal
// the rows of a slot whose last scan left rows while that slot still holds
// what the scan signalled (its next scan reads them), but does once the
// slot holds nothing, and always for other slots.
func TestSweepLeavesFollowedScansAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.joinOwning(0)
	set := f.leaseSlots(0)
	followed, _, _ := set.Bounds()
	insts := instancesInSlot(followed, 2)
	a, held := insts[0], insts[1]
	b := instIn(t, set.Difference(wakeup.SetOf(followed)), "b")
	f.fs.putMsg(t, a, "m1")
	f.fs.putMsg(t, b, "m1")
	f.fs.setStale([]store.QueueHead{f.fs.head(t, a, "m1"), f.fs.head(t, b, "m1")}, outbox.Findings{})
	f.e.mu.Lock()
	f.e.moreOrch.Add(followed)
	f.e.mu.Unlock()
	f.e.orch.Signal(followed, orchKey(held), f.clk.Now()) // what the scan signalled

	f.e.sweepOnce(f.ctx())
	orch, _ := pendingKeys(f.e.orch)
	require.ElementsMatch(t, []string{orchKey(held), orchKey(b)}, orch)

	f.e.orch.Drop(wakeup.All(slots.Count)) // the scan's share taken
	f.e.sweepOnce(f.ctx())
	orch, _ = pendingKeys(f.e.orch)
	require.ElementsMatch(t, []string{orchKey(a), orchKey(b)}, orch)
}
