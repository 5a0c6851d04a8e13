package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// Hint rules (hints.go): the owner of a worker backlog its own fetches
// cannot start advertises it in a hint document; other replicas scan the
// hinted slots while the hint lasts.

// TestBacklogHintRules: the owner writes a hint naming the slots of its
// due or parked worker backlog after two checks in a row find more due
// items than its worker fetchers (the peak of concurrent FetchWorkItem
// calls, at least one) or items no local fetch may take; one check is not
// enough, and a backlog its fetchers can start, or one not due yet, is no
// reason.
func TestBacklogHintRules(t *testing.T) {
	t.Parallel()
	session := &durable.SessionFetchConfig{OwnerID: "worker", LockTimeout: time.Minute}
	for _, tc := range []struct {
		name string
		// setup puts worker items of inst, signals them and runs the
		// fetches the case needs.
		setup  func(f *fixture, inst string)
		hinted bool
		count  int
		parked int
	}{
		{name: "more due items than fetchers", hinted: true, count: 2, setup: func(f *fixture, inst string) {
			f.handle(f.fs.putWork(f.t, inst, "w1"), f.fs.putWork(f.t, inst, "w2"))
		}},
		{name: "no more than the fetchers start", setup: func(f *fixture, inst string) {
			f.handle(f.fs.putWork(f.t, inst, "w1"))
		}},
		{name: "items not due yet", setup: func(f *fixture, inst string) {
			later := visibleAt(f.clk.Now().UnixMilli() + time.Hour.Milliseconds())
			f.handle(f.fs.putWork(f.t, inst, "w1", later), f.fs.putWork(f.t, inst, "w2", later))
		}},
		{name: "an item of a tag no local fetch takes", hinted: true, count: 1, parked: 1, setup: func(f *fixture, inst string) {
			f.handle(f.fs.putWork(f.t, inst, "w1", tagged("gpu")))
			require.Nil(f.t, f.fetchWork())
		}},
		{name: "an item whose session another node owns", hinted: true, count: 1, parked: 1, setup: func(f *fixture, inst string) {
			f.fs.setSession("s1", false)
			f.handle(f.fs.putWork(f.t, inst, "w1", inSession("s1")))
			require.Nil(f.t, f.fetchWorkWith(session, durable.DefaultOnlyTags()))
			require.Equal(f.t, 1, f.fs.count(opClaimSession))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			tc.setup(f, inst)

			// The manual clock stands still, so the hint loop (kicked, and
			// sleeping 100 ms on that clock) runs no check of its own.
			ctx := f.ctx()
			f.e.checkHint(ctx)
			require.Empty(t, f.fs.hints(t), "one check is not enough")
			f.e.checkHint(ctx)
			if !tc.hinted {
				f.e.checkHint(ctx)
				require.Empty(t, f.fs.hints(t))
				return
			}
			require.Equal(t, []hintDoc{{ID: "hint:self", InstanceID: leasestore.DefaultPartitionKeyValue, Type: typeHint, Replica: "self",
				Slots: []int{slots.Of(inst)}, Count: tc.count, Seq: 1, Parked: tc.parked}}, f.fs.hints(t))
			require.Equal(t, leasestore.DefaultPartitionKeyValue, f.fs.callsOf(opWriteHint)[0].Partition)
		})
	}
}

// TestBacklogHintLifecycle: the hint loop, kicked by a due worker item,
// checks every 100 ms and publishes the hint by itself; once the backlog
// is drained it rewrites the hint with no slots (a later sequence
// number), and a graceful Close deletes the document.
func TestBacklogHintLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.joinOwning(0)
	inst := instIn(t, f.leaseSlots(0), "inst")
	f.handle(f.fs.putWork(t, inst, "w1"), f.fs.putWork(t, inst, "w2"))

	last := func() hintDoc {
		hs := f.fs.hints(t)
		if len(hs) == 0 {
			return hintDoc{}
		}
		return hs[len(hs)-1]
	}
	require.Eventually(t, func() bool {
		f.clk.Advance(100 * time.Millisecond)
		return last().Seq > 0
	}, hangGuard, time.Millisecond)
	published := last()
	require.Equal(t, []int{slots.Of(inst)}, published.Slots)
	require.Equal(t, 2, published.Count)

	// Locks far longer than the clock will move: their expiries never
	// bring the backlog back during the test.
	for range 2 {
		item, err := f.e.FetchWorkItem(f.ctx(), 1000*time.Hour, 0, nil, durable.DefaultOnlyTags())
		require.NoError(t, err)
		require.NotNil(t, item)
	}
	require.Eventually(t, func() bool {
		f.clk.Advance(100 * time.Millisecond)
		return len(last().Slots) == 0
	}, hangGuard, time.Millisecond)
	cleared := last()
	require.Zero(t, cleared.Count)
	require.Greater(t, cleared.Seq, published.Seq)

	f.e.Close(true)
	deleted := f.fs.callsOf(opDelete)
	require.Len(t, deleted, 1)
	require.Equal(t, leasestore.DefaultPartitionKeyValue, deleted[0].Partition)
	require.Equal(t, "hint:self", deleted[0].ID)
}

// hintScans returns the scans run for slot: worker queries of that slot
// alone, of items a fetch may take now.
func hintScans(f *fixture, slot int) []store.HeadQuery {
	var out []store.HeadQuery
	for _, q := range f.fs.headQueries() {
		if slices.Equal(q.Blocks, []slots.Block{{First: slot, Last: slot}}) && q.Worker && !q.Orchestrator {
			out = append(out, q)
		}
	}
	return out
}

// TestHintFollowed: another live replica's hint (it arrives as a lease
// partition document, onLeaseDocument) signals a Scan of each hinted slot
// this replica does not own, and a worker fetch here runs the scan (a
// query of that slot for the items it may take now) and locks what it
// finds. Not followed: the hint of a replica without a live heartbeat,
// this replica's own, a slot it owns, and an overflow hint (the owner
// could take the items itself) while this replica has due work of its
// own; a hint of parked items is followed even then.
func TestHintFollowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		replica   string
		ownedSlot bool // the hint names a slot this replica owns
		parked    int
		busy      bool // this replica has due work of its own
		followed  bool
	}{
		{name: "parked items of a live replica", replica: "peer-1", parked: 1, followed: true},
		{name: "an overflow of a live replica", replica: "peer-1", followed: true},
		{name: "parked items while busy", replica: "peer-1", parked: 1, busy: true, followed: true},
		{name: "an overflow while busy", replica: "peer-1", busy: true},
		{name: "a replica without a live heartbeat", replica: "ghost", parked: 1},
		{name: "this replica's own hint", replica: "self", parked: 1},
		{name: "a slot owned here", replica: "peer-1", parked: 1, ownedSlot: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			lease := 2
			if tc.ownedSlot {
				lease = 0
			}
			hinted := instIn(t, f.leaseSlots(lease), "hinted")
			f.fs.putWork(t, hinted, "hw") // the owner's feed shows it, not this replica's
			slot := slots.Of(hinted)
			if tc.busy {
				own := instIn(t, f.leaseSlots(0), "own")
				f.handle(f.fs.putWork(t, own, "w1"))
			}

			f.e.onLeaseDocument(hintJSON(t, hintDoc{Replica: tc.replica, Slots: []int{slot}, Count: 1, Seq: 1, Parked: tc.parked}))
			_, due := pendingKeys(f.e.work)
			require.Equal(t, tc.followed, slices.Contains(due, scanKey(slot)), "scan of slot %d signalled; due %v", slot, due)
			if !tc.followed {
				require.Empty(t, hintScans(f, slot))
				return
			}
			var taken []string
			for item := f.fetchWork(); item != nil; item = f.fetchWork() {
				taken = append(taken, item.LockToken)
			}
			require.Contains(t, taken, hinted+"/hw", "the scan's findings are taken here")
			require.Equal(t, []store.HeadQuery{{Blocks: []slots.Block{{First: slot, Last: slot}}, Worker: true, DueOnly: true,
				Tags: durable.DefaultOnlyTags(), NoSessions: true}}, hintScans(f, slot))
			require.EqualValues(t, 1, f.e.Stats().HintScans)
		})
	}
}

// TestOverflowHintWaitsForOwnWork: an overflow hint that arrived while
// this replica had due work of its own is followed once that work is
// taken (the next fetch scans the hinted slot).
func TestOverflowHintWaitsForOwnWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.joinOwning(0)
	hinted := instIn(t, f.leaseSlots(2), "hinted")
	f.fs.putWork(t, hinted, "hw")
	slot := slots.Of(hinted)
	own := instIn(t, f.leaseSlots(0), "own")
	f.handle(f.fs.putWork(t, own, "w1"))
	f.e.onLeaseDocument(hintJSON(t, hintDoc{Replica: "peer-1", Slots: []int{slot}, Count: 5, Seq: 1}))
	all, _ := pendingKeys(f.e.work)
	require.NotContains(t, all, scanKey(slot), "not followed while busy")

	item := f.fetchWork()
	require.NotNil(t, item)
	require.Equal(t, own+"/w1", item.LockToken, "its own work first")
	require.Empty(t, hintScans(f, slot))

	item = f.fetchWork()
	require.NotNil(t, item)
	require.Equal(t, hinted+"/hw", item.LockToken)
	require.Len(t, hintScans(f, slot), 1)
}

// TestHintRescans: while another replica's hint lasts, a fetch scans the
// hinted slot again once the last scan is at least 200 ms old; a hint
// rewritten with no slots, one whose sequence number has not moved for
// 10 s (even when read again), and one whose replica stopped
// heartbeating are no longer followed, and a new sequence number makes a
// hint followed again.
func TestHintRescans(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		then  func(f *fixture, hint func(seq int64, slots ...int), slot int)
		scans int // after the first
	}{
		{name: "the hint lasts", scans: 2, then: func(f *fixture, _ func(int64, ...int), _ int) {
			f.clk.Advance(time.Second)
		}},
		{name: "within 200 ms of the last scan", scans: 1, then: func(*fixture, func(int64, ...int), int) {}},
		{name: "cleared", scans: 1, then: func(f *fixture, hint func(int64, ...int), _ int) {
			hint(2)
			require.Empty(f.t, f.e.Hinting())
			f.clk.Advance(time.Second)
		}},
		{name: "stale", scans: 1, then: func(f *fixture, hint func(int64, ...int), slot int) {
			f.clk.Advance(hintStale + time.Second)
			hint(1, slot) // read again, unchanged
		}},
		{name: "refreshed after 10 s", scans: 2, then: func(f *fixture, hint func(int64, ...int), slot int) {
			f.clk.Advance(hintStale + time.Second)
			hint(2, slot)
		}},
		{name: "its replica died", scans: 1, then: func(f *fixture, _ func(int64, ...int), _ int) {
			f.session().leases.setMembers("self", "peer-2", "peer-3")
			f.clk.Advance(time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			slot := slots.Of(instIn(t, f.leaseSlots(2), "hinted"))
			hint := func(seq int64, sl ...int) {
				f.e.onLeaseDocument(hintJSON(t, hintDoc{Replica: "peer-1", Slots: sl, Count: 1, Seq: seq, Parked: 1}))
			}
			hint(1, slot)
			require.Nil(t, f.fetchWork())
			require.Len(t, hintScans(f, slot), 1)
			require.Equal(t, []string{"peer-1"}, f.e.Hinting())

			tc.then(f, hint, slot)
			require.Nil(t, f.fetchWork())
			require.Len(t, hintScans(f, slot), tc.scans)
		})
	}
}

// TestHintRefusedInstances: the instances a hint lists as refused (the
// owner's dispatchers cannot run their version) are signalled here, in
// slots this replica does not own, so that a local orchestration fetch
// tries them with its own filter.
func TestHintRefusedInstances(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lease int
		tried bool
	}{
		{name: "an instance of a slot not owned", lease: 2, tried: true},
		{name: "an instance of a slot owned here", lease: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(tc.lease), "pinned")
			f.fs.putMsg(t, inst, "m1")
			f.e.onLeaseDocument(hintJSON(t, hintDoc{Replica: "peer-1", Slots: []int{}, Seq: 1, Refused: []string{inst}}))

			item := f.fetchOrch()
			if !tc.tried {
				require.Nil(t, item)
				require.Empty(t, f.fs.lockedInstances())
				return
			}
			require.NotNil(t, item)
			require.Equal(t, []string{inst}, f.fs.lockedInstances())
		})
	}
}
