package wakeup

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/internal/clock/clocktest"
	"github.com/durafeed/durafeed/slots"
)

// env is the state a scripted step acts on.
type env struct {
	t     *testing.T
	h     *Hub
	clk   *clocktest.Manual
	taken []Wakeup
}

type step func(e *env)

func at(off time.Duration) time.Time { return epoch.Add(off) }

func sig(slot int, inst string, off time.Duration) step {
	return func(e *env) { e.h.Signal(slot, inst, at(off)) }
}

func sigAt(slot int, inst string, off time.Duration) step {
	return func(e *env) { e.h.SignalAt(slot, inst, at(off)) }
}

func sigScan(slot int, off time.Duration) step {
	return func(e *env) { e.h.SignalScan(slot, at(off)) }
}

func advance(d time.Duration) step { return func(e *env) { e.clk.Advance(d) } }

func take(set Set, kind Kind, slot int, inst string, off time.Duration) step {
	return func(e *env) {
		e.t.Helper()
		w, ok := e.h.Wait(context.Background(), set, 0)
		require.True(e.t, ok, "expected a wakeup for slot %d %q", slot, inst)
		require.Equal(e.t, Wakeup{Kind: kind, Slot: slot, Instance: inst, VisibleAt: at(off)}, public(w))
		e.taken = append(e.taken, w)
	}
}

func takeInst(set Set, slot int, inst string, off time.Duration) step {
	return take(set, Instance, slot, inst, off)
}

func none(set Set) step {
	return func(e *env) {
		e.t.Helper()
		w, ok := e.h.Wait(context.Background(), set, 0)
		require.False(e.t, ok, "unexpected wakeup %+v", w)
	}
}

func pending(set Set, n int) step {
	return func(e *env) {
		e.t.Helper()
		require.Equal(e.t, n, e.h.Pending(set))
	}
}

func hasDue(set Set, want bool) step {
	return func(e *env) {
		e.t.Helper()
		require.Equal(e.t, want, e.h.HasDue(set))
	}
}

func dueCounts(set Set, want map[int]int) step {
	return func(e *env) {
		e.t.Helper()
		per, total := e.h.DueCounts(set)
		sum := 0
		for _, n := range want {
			sum += n
		}
		require.Equal(e.t, want, per)
		require.Equal(e.t, sum, total)
	}
}

func requeueLast() step {
	return func(e *env) { e.h.Requeue(e.taken[len(e.taken)-1]) }
}

func collapses(n uint64) step {
	return func(e *env) {
		e.t.Helper()
		require.Equal(e.t, n, e.h.Snapshot().Collapses)
	}
}

func drop(set Set) step { return func(e *env) { e.h.Drop(set) } }

type script struct {
	name  string
	opts  Options
	steps []step
}

func runScripts(t *testing.T, cases []script) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, clk, _ := testHub(t, tc.opts)
			e := &env{t: t, h: h, clk: clk}
			for _, s := range tc.steps {
				s(e)
			}
		})
	}
}

var all = All(slots.Count)

func TestImmediateTake(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "due now", steps: []step{sig(3, "a", 0), takeInst(SetOf(3), 3, "a", 0), none(all), pending(all, 0)}},
		{name: "visible in the past", steps: []step{sig(3, "a", -time.Hour), takeInst(SetOf(1, 3), 3, "a", -time.Hour)}},
		{name: "zero visibleAt is due", steps: []step{
			func(e *env) { e.h.Signal(7, "z", time.Time{}) },
			func(e *env) {
				w, ok := e.h.Wait(context.Background(), SetOf(7), 0)
				require.True(t, ok)
				require.Equal(t, Wakeup{Kind: Instance, Slot: 7, Instance: "z"}, public(w))
			},
		}},
		{name: "other slot", steps: []step{sig(4, "a", 0), none(SetOf(3)), pending(SetOf(4), 1), pending(SetOf(3), 0)}},
		{name: "future not yet", steps: []step{sig(3, "a", time.Second), none(SetOf(3)), pending(SetOf(3), 1)}},
		{name: "scan", steps: []step{sigScan(3, 0), take(SetOf(3), Scan, 3, "", 0), none(all)}},
		{name: "empty set", steps: []step{sig(3, "a", 0), none(Set{}), pending(all, 1)}},
		{name: "slot beyond the hub is ignored", opts: Options{Slots: 8}, steps: []step{sig(7, "a", 0), none(SetOf(100)), takeInst(Range(0, 4095), 7, "a", 0)}},
		{name: "take removes", steps: []step{sig(0, "a", 0), sig(255, "b", 0), takeInst(all, 0, "a", 0), takeInst(all, 255, "b", 0), none(all)}},
	})
}

func TestHasDue(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "empty", steps: []step{hasDue(all, false)}},
		{name: "due in the set", steps: []step{sig(3, "a", 0), hasDue(SetOf(3), true), hasDue(SetOf(1, 3), true), hasDue(SetOf(4), false)}},
		{name: "future until its time", steps: []step{sig(3, "a", time.Second), hasDue(all, false), pending(all, 1),
			advance(time.Second), hasDue(SetOf(3), true), takeInst(all, 3, "a", time.Second), hasDue(all, false)}},
		{name: "scan", steps: []step{sigScan(5, 0), hasDue(SetOf(5), true), hasDue(SetOf(6), false)}},
		{name: "does not take", steps: []step{sig(2, "a", 0), hasDue(all, true), hasDue(all, true), takeInst(all, 2, "a", 0), hasDue(all, false)}},
	})
}

func TestDueCounts(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "empty", steps: []step{dueCounts(all, map[int]int{})}},
		{name: "per slot, within the set", steps: []step{sig(3, "a", 0), sig(3, "b", 0), sig(9, "c", 0),
			dueCounts(all, map[int]int{3: 2, 9: 1}), dueCounts(SetOf(9), map[int]int{9: 1}), dueCounts(SetOf(4), map[int]int{})}},
		{name: "coalesced signals count once", steps: []step{sig(3, "a", 0), sig(3, "a", 0), dueCounts(all, map[int]int{3: 1})}},
		{name: "future until its time", steps: []step{sig(3, "a", time.Second), sig(3, "b", 0), dueCounts(all, map[int]int{3: 1}),
			advance(time.Second), dueCounts(all, map[int]int{3: 2})}},
		{name: "a scan counts one", steps: []step{sig(5, "a", 0), sig(5, "b", 0), sigScan(5, 0), dueCounts(all, map[int]int{5: 1})}},
		{name: "taken", steps: []step{sig(2, "a", 0), sig(2, "b", 0), takeInst(all, 2, "a", 0), dueCounts(all, map[int]int{2: 1}),
			takeInst(all, 2, "b", 0), dueCounts(all, map[int]int{})}},
	})
}

func TestCoalescing(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "same instance keeps earliest", steps: []step{
			sig(3, "a", 0), sig(3, "a", -time.Second), sig(3, "a", 0), pending(all, 1),
			takeInst(all, 3, "a", -time.Second), none(all), pending(all, 0),
		}},
		{name: "SignalAt coalesces with Signal", steps: []step{
			sigAt(3, "a", -time.Second), sig(3, "a", 0), pending(all, 1), takeInst(all, 3, "a", -time.Second), none(all),
		}},
		{name: "distinct instances do not coalesce", steps: []step{
			sig(3, "a", 0), sig(3, "b", 0), pending(all, 2), takeInst(all, 3, "a", 0), takeInst(all, 3, "b", 0),
		}},
		{name: "same instance in two slots does not coalesce", steps: []step{
			sig(3, "a", 0), sig(4, "a", 0), pending(all, 2), takeInst(all, 3, "a", 0), takeInst(all, 4, "a", 0),
		}},
		{name: "future time is kept as follow-up", steps: []step{
			sig(3, "a", 0), sig(3, "a", 10*time.Second), pending(all, 1),
			takeInst(all, 3, "a", 0), pending(all, 1), none(all),
			advance(10*time.Second - 1), none(all), advance(1), takeInst(all, 3, "a", 10*time.Second), pending(all, 0),
		}},
		{name: "reached follow-ups are covered by the take", steps: []step{
			sig(3, "a", 5*time.Second), sig(3, "a", 10*time.Second), sig(3, "a", 20*time.Second),
			advance(12 * time.Second), takeInst(all, 3, "a", 5*time.Second), none(all), pending(all, 1),
			advance(8 * time.Second), takeInst(all, 3, "a", 20*time.Second), pending(all, 0),
		}},
		{name: "earlier future time moves the wakeup forward", steps: []step{
			sig(3, "a", 10*time.Second), sig(3, "a", 5*time.Second),
			advance(5 * time.Second), takeInst(all, 3, "a", 5*time.Second), none(all),
			advance(5 * time.Second), takeInst(all, 3, "a", 10*time.Second),
		}},
		{name: "due signal pulls a future wakeup forward", steps: []step{
			sig(3, "a", time.Minute), sig(3, "a", 0), takeInst(all, 3, "a", 0),
			advance(time.Minute), takeInst(all, 3, "a", time.Minute),
		}},
		{name: "duplicate follow-ups are one", steps: []step{
			sig(3, "a", 0), sig(3, "a", time.Second), sig(3, "a", time.Second),
			func(e *env) { require.Equal(t, []time.Time{at(time.Second)}, e.h.Snapshot().Pending[0].Later) },
		}},
	})
}

func TestDueOrdering(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "by due time across slots", steps: []step{
			sig(9, "a", 30*time.Second), sig(1, "b", 10*time.Second), sig(200, "c", 20*time.Second), sig(5, "d", 0),
			advance(30 * time.Second),
			takeInst(all, 5, "d", 0), takeInst(all, 1, "b", 10*time.Second),
			takeInst(all, 200, "c", 20*time.Second), takeInst(all, 9, "a", 30*time.Second),
		}},
		{name: "ties in arrival order", steps: []step{
			sig(9, "a", 0), sig(1, "b", 0), sig(5, "c", 0),
			takeInst(all, 9, "a", 0), takeInst(all, 1, "b", 0), takeInst(all, 5, "c", 0),
		}},
		{name: "due from when it was signalled, not its past visibility", steps: []step{
			sig(1, "old", 0), advance(time.Second), sig(2, "late", -time.Hour),
			takeInst(all, 1, "old", 0), takeInst(all, 2, "late", -time.Hour),
		}},
		{name: "exactly when due", steps: []step{
			sig(1, "a", time.Minute), advance(time.Minute - time.Nanosecond), none(all),
			advance(time.Nanosecond), takeInst(all, 1, "a", time.Minute),
		}},
		{name: "busy slot does not starve others", steps: []step{
			sig(1, "a1", 0), sig(1, "a2", 0), advance(time.Second), sig(2, "b", time.Second), sig(1, "a3", time.Second),
			takeInst(all, 1, "a1", 0), takeInst(all, 1, "a2", 0), takeInst(all, 2, "b", time.Second), takeInst(all, 1, "a3", time.Second),
		}},
	})
}

// TestTimerWakesBlockedWaiter checks the timer goroutine: a blocked waiter
// is handed a future wakeup exactly when the clock reaches it.
func TestTimerWakesBlockedWaiter(t *testing.T) {
	t.Parallel()
	h, clk, blocked := testHub(t, Options{})
	res := waitAsync(context.Background(), h, SetOf(5), time.Hour)
	blocked.await(1)
	h.Signal(5, "t", at(time.Minute))
	h.Signal(6, "other", at(30*time.Second))
	clk.Advance(time.Minute - time.Nanosecond)
	require.Equal(t, 1, h.Snapshot().Waiters)
	clk.Advance(time.Nanosecond)
	r := <-res
	require.True(t, r.ok)
	require.Equal(t, Wakeup{Kind: Instance, Slot: 5, Instance: "t", VisibleAt: at(time.Minute)}, public(r.w))
	require.Equal(t, 1, h.Pending(all))
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "keeps its place ahead of newer", steps: []step{
			sig(1, "a", 0), advance(time.Second), sig(2, "b", time.Second),
			takeInst(all, 1, "a", 0), advance(time.Second), sig(3, "c", 2*time.Second), requeueLast(),
			takeInst(all, 1, "a", 0), takeInst(all, 2, "b", time.Second), takeInst(all, 3, "c", 2*time.Second),
		}},
		{name: "merges with a re-armed follow-up", steps: []step{
			sig(1, "a", 0), sig(1, "a", time.Minute), takeInst(all, 1, "a", 0), requeueLast(), pending(all, 1),
			takeInst(all, 1, "a", 0), none(all), advance(time.Minute), takeInst(all, 1, "a", time.Minute),
		}},
		{name: "scan", steps: []step{sigScan(4, 0), take(all, Scan, 4, "", 0), requeueLast(), take(all, Scan, 4, "", 0)}},
		{name: "zero wakeup ignored", steps: []step{func(e *env) { e.h.Requeue(Wakeup{}) }, pending(all, 0)}},
		{name: "hand-made wakeup is a signal", steps: []step{
			sig(1, "a", 0),
			func(e *env) { e.h.Requeue(Wakeup{Kind: Instance, Slot: 2, Instance: "x", VisibleAt: epoch}) },
			takeInst(all, 1, "a", 0), takeInst(all, 2, "x", 0),
		}},
	})
}

func TestDrop(t *testing.T) {
	t.Parallel()
	runScripts(t, []script{
		{name: "due and future", steps: []step{
			sig(0, "a", 0), sig(1, "b", time.Minute), sig(4, "c", 0), sig(5, "d", time.Minute), sig(5, "d", 0),
			drop(Range(0, 3)), pending(Range(0, 3), 0), pending(all, 2),
			advance(time.Minute), takeInst(all, 4, "c", 0), takeInst(all, 5, "d", 0), none(all), // the take at 1m covers d's 1m follow-up
		}},
		{name: "scan", opts: Options{MaxPendingPerSlot: 1}, steps: []step{
			sig(2, "a", 0), sig(2, "b", time.Minute), pending(all, 1), drop(SetOf(2)), pending(all, 0),
			advance(time.Minute), none(all), sig(2, "c", 0), takeInst(all, 2, "c", 0),
		}},
		{name: "empty and beyond", opts: Options{Slots: 8}, steps: []step{sig(1, "a", 0), drop(SetOf(100, 2)), pending(all, 1)}},
	})
}

func TestOverflowCollapsesToScan(t *testing.T) {
	t.Parallel()
	max3 := Options{MaxPendingPerSlot: 3}
	runScripts(t, []script{
		{name: "too many instances", opts: max3, steps: []step{
			sig(7, "a", 0), sig(7, "b", -time.Second), sig(7, "c", 0), collapses(0), pending(SetOf(7), 3),
			sig(7, "d", 0), collapses(1), pending(SetOf(7), 1),
			take(all, Scan, 7, "", -time.Second), none(all), pending(all, 0),
			sig(7, "e", 0), takeInst(all, 7, "e", 0),
		}},
		{name: "follow-ups count; the scan forgets them", opts: max3, steps: []step{
			sig(7, "a", 0), sig(7, "a", time.Second), sig(7, "a", 2*time.Second), collapses(0),
			sig(7, "b", 0), collapses(1),
			take(all, Scan, 7, "", 0), pending(all, 0), none(all),
			advance(time.Second), none(all), // the scan's taker signals a's 1s again if it is still there
		}},
		{name: "a taken scan leaves nothing to fold its taker's signals into", opts: max3, steps: []step{
			sig(7, "a", 0), sig(7, "b", time.Minute), sig(7, "c", 0), sig(7, "d", 0), collapses(1),
			take(all, Scan, 7, "", 0), pending(all, 0),
			sig(7, "a", 0), sig(7, "b", time.Minute), takeInst(all, 7, "a", 0), none(all), pending(all, 1),
		}},
		{name: "the hub's bound collapses the heaviest slot", opts: Options{MaxPending: 4}, steps: []step{
			sig(1, "a", 0), sig(2, "b", 0), sig(2, "c", 0), sig(3, "d", 0), collapses(0), pending(all, 4),
			sig(3, "e", 0), collapses(1), pending(SetOf(2), 1), pending(SetOf(3), 2), // a tie: the lowest slot
			sig(3, "f", 0), collapses(2), pending(SetOf(3), 1), pending(all, 3),
			takeInst(all, 1, "a", 0), take(all, Scan, 2, "", 0), take(all, Scan, 3, "", 0), none(all),
			sig(4, "g", 0), takeInst(all, 4, "g", 0),
		}},
		{name: "single wakeups never collapse", opts: Options{MaxPending: 2}, steps: []step{
			sig(1, "a", 0), sig(2, "b", 0), sig(3, "c", 0), collapses(0), pending(all, 3),
			takeInst(all, 1, "a", 0), takeInst(all, 2, "b", 0), takeInst(all, 3, "c", 0),
		}},
		{name: "signals fold into a pending scan", opts: Options{MaxPendingPerSlot: 1}, steps: []step{
			sig(7, "a", 0), sig(7, "b", 0), collapses(1),
			sig(7, "c", -time.Hour), sig(7, "d", time.Minute), pending(all, 1),
			take(all, Scan, 7, "", -time.Hour), advance(time.Minute), none(all),
		}},
		{name: "all future", opts: Options{MaxPendingPerSlot: 1}, steps: []step{
			sig(7, "a", time.Minute), sig(7, "b", 2*time.Minute), none(all),
			advance(time.Minute), take(all, Scan, 7, "", time.Minute), none(all),
			advance(time.Minute), none(all),
		}},
		{name: "scan keeps the place of the oldest", opts: Options{MaxPendingPerSlot: 2}, steps: []step{
			sig(7, "a", 0), advance(time.Second), sig(8, "x", time.Second), sig(7, "b", time.Second), sig(7, "c", time.Second),
			take(all, Scan, 7, "", 0), takeInst(all, 8, "x", time.Second),
		}},
		{name: "SignalScan folds instance wakeups", steps: []step{
			sig(7, "a", 0), sig(7, "b", time.Minute), sigScan(7, time.Second), pending(all, 1),
			take(all, Scan, 7, "", 0), none(all), advance(time.Second), none(all), // the 1s scan folded into the due one
			advance(time.Minute), none(all), // b's 1m was forgotten: the scan's taker re-signals what it sees
		}},
		{name: "other slots unaffected", opts: Options{MaxPendingPerSlot: 1}, steps: []step{
			sig(7, "a", 0), sig(7, "b", 0), sig(8, "c", 0), take(all, Scan, 7, "", 0), takeInst(all, 8, "c", 0),
		}},
	})
}

func TestNoCrossSlotWakeups(t *testing.T) {
	t.Parallel()
	h, _, blocked := testHub(t, Options{})
	const n = 32
	shares := blocks(n)
	results := make([]<-chan result, n)
	for i := range n {
		results[i] = waitAsync(context.Background(), h, SetOf(i*8), time.Hour)
	}
	blocked.await(n)
	// Signals on slots no waiter holds wake nobody.
	for sl := range all.All() {
		if sl%8 != 0 {
			h.Signal(sl, "x", epoch)
		}
	}
	st := h.Snapshot()
	require.Equal(t, n, st.Waiters)
	require.Zero(t, st.Handoffs)
	// A signal on one waiter's slot wakes that waiter only.
	for i := range n {
		h.Signal(i*8, fmt.Sprint("w", i), epoch)
		r := <-results[i]
		require.True(t, r.ok)
		require.Equal(t, i*8, r.w.Slot)
		st := h.Snapshot()
		require.Equal(t, n-i-1, st.Waiters)
		require.Equal(t, uint64(i+1), st.Handoffs)
		require.Equal(t, 7, h.Pending(shares[i]))
	}
}

// TestOldestWaiterFirst: blocked waiters with overlapping sets are served
// in the order they started waiting.
func TestOldestWaiterFirst(t *testing.T) {
	t.Parallel()
	h, _, blocked := testHub(t, Options{})
	first := waitAsync(context.Background(), h, SetOf(1, 2), time.Hour)
	blocked.await(1)
	second := waitAsync(context.Background(), h, SetOf(2, 3), time.Hour)
	blocked.await(2)
	h.Signal(2, "a", epoch)
	r := <-first
	require.Equal(t, "a", r.w.Instance)
	require.Equal(t, 1, h.Snapshot().Waiters)
	h.Signal(2, "b", epoch)
	r = <-second
	require.Equal(t, "b", r.w.Instance)
}

func TestTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	t.Run("timeout zero never blocks", func(t *testing.T) {
		t.Parallel()
		h, _, _ := testHub(t, Options{})
		_, ok := h.Wait(context.Background(), all, 0)
		require.False(t, ok)
		_, ok = h.Wait(context.Background(), all, -time.Second)
		require.False(t, ok)
		require.Zero(t, h.Snapshot().Waiters)
	})
	t.Run("timeout on the hub clock", func(t *testing.T) {
		t.Parallel()
		h, clk, blocked := testHub(t, Options{})
		res := waitAsync(context.Background(), h, SetOf(1), time.Minute)
		blocked.await(1)
		clk.Advance(time.Minute - time.Nanosecond)
		require.Equal(t, 1, h.Snapshot().Waiters)
		clk.Advance(time.Nanosecond)
		require.False(t, (<-res).ok)
		require.Zero(t, h.Snapshot().Waiters)
		h.Signal(1, "a", epoch) // not lost to the departed waiter
		require.Equal(t, 1, h.Pending(all))
	})
	t.Run("ctx cancelled while blocked", func(t *testing.T) {
		t.Parallel()
		h, _, blocked := testHub(t, Options{})
		ctx, cancel := context.WithCancel(context.Background())
		res := waitAsync(ctx, h, SetOf(1), time.Hour)
		blocked.await(1)
		cancel()
		require.False(t, (<-res).ok)
		require.Zero(t, h.Snapshot().Waiters)
	})
	t.Run("ctx already done takes nothing", func(t *testing.T) {
		t.Parallel()
		h, _, _ := testHub(t, Options{})
		h.Signal(1, "a", epoch)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, ok := h.Wait(ctx, all, time.Hour)
		require.False(t, ok)
		require.Equal(t, 1, h.Pending(all))
	})
	t.Run("cancel racing delivery loses nothing", func(t *testing.T) {
		t.Parallel()
		h, _, blocked := testHub(t, Options{})
		got := 0
		for i := range 2000 {
			ctx, cancel := context.WithCancel(context.Background())
			res := waitAsync(ctx, h, SetOf(1), time.Hour)
			blocked.await(i + 1)
			go cancel()
			h.Signal(1, fmt.Sprint(i), epoch)
			r := <-res
			cancel()
			// Exactly one of: taken by the waiter, or left pending.
			n := h.Pending(all)
			if r.ok {
				n++
				got++
			}
			require.Equal(t, 1, n, "round %d", i)
			h.Drop(all)
		}
		t.Logf("taken %d of 2000 (the rest requeued)", got)
	})
}

// TestLevelTriggeredRace hammers the window between a fetch's failed
// attempt and its wait: each round, the producer signals right after the
// consumer's non-blocking check failed, racing its blocking Wait. A lost
// signal would hang the test.
func TestLevelTriggeredRace(t *testing.T) {
	t.Parallel()
	h, err := New(Options{})
	require.NoError(t, err)
	defer h.Close()
	const pairs, rounds = 16, 2000
	var wg sync.WaitGroup
	var received atomic.Int64
	for p := range pairs {
		checked := make(chan struct{})
		wg.Add(2)
		go func() { // consumer
			defer wg.Done()
			set := SetOf(p)
			for range rounds {
				if _, ok := h.Wait(context.Background(), set, 0); ok {
					panic("nothing should be pending before the check")
				}
				checked <- struct{}{}
				if _, ok := h.Wait(context.Background(), set, time.Hour); ok {
					received.Add(1)
				}
			}
		}()
		go func() { // producer
			defer wg.Done()
			for r := range rounds {
				<-checked
				if r%3 == 0 {
					runtime.Gosched()
				}
				h.Signal(p, fmt.Sprint("i", r), time.Now())
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(pairs*rounds), received.Load())
	require.Zero(t, h.Pending(all))
}

// TestExactlyOnce: 100k signals, 16 waiters on overlapping sets; every
// wakeup is delivered exactly once.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	const signals, waiters, producers = 100_000, 16, 4
	h, err := New(Options{MaxPendingPerSlot: signals})
	require.NoError(t, err)
	defer h.Close()
	shares := blocks(waiters)
	counts := make([]atomic.Int32, signals)
	var delivered atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range waiters {
		set := shares[i].Union(shares[(i+1)%waiters]) // overlapping sets
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				w, ok := h.Wait(ctx, set, time.Hour)
				if !ok {
					return
				}
				var n int
				_, _ = fmt.Sscan(w.Instance, &n)
				counts[n].Add(1)
				if delivered.Add(1) == signals {
					cancel()
				}
			}
		}()
	}
	var pw sync.WaitGroup
	for p := range producers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			for n := p; n < signals; n += producers {
				h.Signal(n%slots.Count, fmt.Sprint(n), time.Now())
			}
		}()
	}
	pw.Wait()
	wg.Wait()
	require.Equal(t, int64(signals), delivered.Load())
	for n := range counts {
		if c := counts[n].Load(); c != 1 {
			t.Fatalf("instance %d delivered %d times", n, c)
		}
	}
	require.Zero(t, h.Pending(all))
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Slots: -1}, {Slots: MaxSlots + 1}, {MaxPendingPerSlot: -1}, {MaxPending: -1}} {
		_, err := New(o)
		require.Error(t, err, "%+v", o)
	}
	h, err := New(Options{Slots: 16})
	require.NoError(t, err)
	defer h.Close()
	require.Panics(t, func() { h.Signal(16, "a", epoch) })
	require.Panics(t, func() { h.Signal(-1, "a", epoch) })
}

func TestKindString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "instance", Instance.String())
	require.Equal(t, "scan", Scan.String())
	require.Equal(t, "Kind(0)", Kind(0).String())
}

// TestCloseStopsEverything is not parallel: it compares the process's
// goroutine count with its own baseline, which parallel tests would
// disturb (they are paused while non-parallel tests run).
func TestCloseStopsEverything(t *testing.T) {
	base := runtime.NumGoroutine()
	h, err := New(Options{})
	require.NoError(t, err)
	blocked := &blockCounter{}
	blocked.cond = sync.NewCond(&blocked.mu)
	h.onBlock = blocked.hook
	h.Signal(1, "timer", time.Now().Add(time.Hour)) // starts the timer goroutine
	h.Signal(2, "due", time.Now())
	var wg sync.WaitGroup
	var returned atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := h.Wait(context.Background(), SetOf(3), time.Hour); !ok {
				returned.Add(1)
			}
		}()
	}
	blocked.await(8)
	h.Close()
	wg.Wait()
	require.Equal(t, int32(8), returned.Load())
	h.Close() // idempotent
	h.Signal(2, "after", time.Now())
	h.SignalScan(2, time.Now())
	h.Requeue(Wakeup{Kind: Instance, Slot: 2, Instance: "x"})
	_, ok := h.Wait(context.Background(), all, time.Hour)
	require.False(t, ok)
	require.Zero(t, h.Pending(all))
	st := h.Snapshot()
	require.Zero(t, st.Waiters)
	require.Empty(t, st.Pending)
	for i := 0; runtime.NumGoroutine() > base; i++ {
		if i > 1_000_000 {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d > baseline %d\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}
