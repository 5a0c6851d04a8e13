package engine

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// TestWriterRunsWhatItWrote: work a write of this replica made visible
// in a slot another replica owns is signalled on this replica's own hub
// when a local fetch of that queue is waiting, and that fetch takes it;
// with no fetch waiting (a busy replica), or with Options.DisableEager,
// nothing is signalled here and the slot's owner, whose feed shows the
// write, runs it.
func TestWriterRunsWhatItWrote(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		worker          bool
		waiting         bool
		disabled        bool
		wantRunHere     bool
		wantEagerCounts int64
	}{
		{name: "orchestrator message, a fetch waiting", waiting: true, wantRunHere: true, wantEagerCounts: 1},
		{name: "worker item, a fetch waiting", worker: true, waiting: true, wantRunHere: true, wantEagerCounts: 1},
		{name: "orchestrator message, no fetch waiting"},
		{name: "worker item, no fetch waiting", worker: true},
		{name: "orchestrator message, eager off (the default)", waiting: true, disabled: true},
		{name: "worker item, eager off (the default)", worker: true, waiting: true, disabled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{DisableEager: tc.disabled})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(2), "elsewhere") // a slot this replica does not own
			hub := f.e.orch
			if tc.worker {
				hub = f.e.work
				f.fs.putWork(t, inst, "w1")
			} else {
				f.fs.putMsg(t, inst, "m1")
			}
			id := "m1"
			if tc.worker {
				id = "w1"
			}
			head := f.fs.head(t, inst, id)

			type result struct {
				instance string
				err      error
			}
			got := make(chan result, 1)
			ctx, cancel := context.WithCancel(f.ctx())
			defer cancel()
			if tc.waiting {
				go func() {
					if tc.worker {
						item, err := f.e.FetchWorkItem(ctx, testLock, time.Hour, nil, durable.DefaultOnlyTags())
						r := result{err: err}
						if item != nil {
							r.instance = item.LockToken // the fake's token: instance/id
						}
						got <- r
						return
					}
					item, err := f.e.FetchOrchestrationItem(ctx, testLock, time.Hour, nil)
					r := result{err: err}
					if item != nil {
						r.instance = item.Instance
					}
					got <- r
				}()
				require.Eventually(t, func() bool { return hub.Waiting(slots.Of(inst)) }, hangGuard, time.Millisecond, "the fetch waits")
			}

			f.e.Wrote(store.Write{Visible: []store.QueueHead{head}})

			require.Equal(t, tc.wantEagerCounts, f.e.Stats().Eager)
			if tc.wantRunHere {
				select {
				case r := <-got:
					require.NoError(t, r.err)
					want := inst
					if tc.worker {
						want = inst + "/" + id
					}
					require.Equal(t, want, r.instance, "the waiting fetch took the write")
				case <-time.After(hangGuard):
					t.Fatal("the waiting fetch did not take the write")
				}
				return
			}
			all, _ := pendingKeys(hub)
			require.Empty(t, all, "nothing signalled here: the owner runs it")
			cancel()
			if tc.waiting {
				r := <-got
				require.Empty(t, r.instance)
			}
			require.Empty(t, f.fs.lockedInstances())
			require.Empty(t, f.fs.triedWork())
		})
	}
}

// TestCompletionRunsWhereItsTurnRan: a completion this replica's worker
// produced, in a slot another replica owns, runs here only when a turn
// here scheduled its activity: the instance's await hold lives where its
// last turn ran, and a replica that only helped with the activity would
// run a turn per completion.
func TestCompletionRunsWhereItsTurnRan(t *testing.T) {
	t.Parallel()
	for _, scheduledHere := range []bool{true, false} {
		name := "scheduled by a turn here"
		if !scheduledHere {
			name = "a helper's completion"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(2), "fan")
			f.fs.putWork(t, inst, "w1")
			w1 := f.fs.head(t, inst, "w1")
			if scheduledHere {
				f.e.Committed(f.ctx(), store.Commit{Source: inst, Write: store.Write{
					Released: []store.Release{{Instance: inst}}, Visible: []store.QueueHead{w1}}})
			}
			f.fs.putMsg(t, inst, "c1", settles(w1.ID))
			done := f.fs.head(t, inst, "c1")

			got := make(chan string, 1)
			ctx, cancel := context.WithCancel(f.ctx())
			defer cancel()
			go func() {
				item, _ := f.e.FetchOrchestrationItem(ctx, testLock, time.Hour, nil)
				if item != nil {
					got <- item.Instance
				}
				close(got)
			}()
			require.Eventually(t, func() bool { return f.e.orch.Waiting(slots.Of(inst)) }, hangGuard, time.Millisecond)
			before := f.e.Stats().Eager

			// The worker's ack: the item gone, its completion visible.
			f.e.Committed(f.ctx(), store.Commit{Source: inst, Write: store.Write{
				WorkDone: []store.QueueHead{w1}, Visible: []store.QueueHead{done}}})

			if scheduledHere {
				require.Equal(t, before+1, f.e.Stats().Eager)
				select {
				case took := <-got:
					require.Equal(t, inst, took, "the turn's replica runs the completion")
				case <-time.After(hangGuard):
					t.Fatal("the completion was not run here")
				}
				return
			}
			require.Equal(t, before, f.e.Stats().Eager)
			all, _ := pendingKeys(f.e.orch)
			require.Empty(t, all, "left to the owner")
			cancel()
			_, ok := <-got
			require.False(t, ok, "the fetch took nothing")
			require.Empty(t, f.fs.lockedInstances())
		})
	}
}

// TestOwnWriteLocksFromItsHead: a message this process's write created
// (store.Write.Heads) is locked from its head by the fetch that runs it,
// in an owned slot and in one it runs its own writes in, instead of a
// query first; the heads are not complete (another process's message may
// be missing), so the store queries at the same time. A write without
// heads locks as before.
func TestOwnWriteLocksFromItsHead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		owned     bool
		withHeads bool
		wantHeads bool
	}{
		{name: "owned slot", owned: true, withHeads: true, wantHeads: true},
		{name: "another replica's slot, run here", withHeads: true, wantHeads: true},
		{name: "owned slot, a write without heads", owned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			set := f.leaseSlots(2)
			if tc.owned {
				set = f.leaseSlots(0)
			}
			inst := instIn(t, set, "own-write")
			fd, err := f.fs.dec.DecodeFeedDoc(f.fs.putMsg(t, inst, "m1"), f.clk.Now().UnixMilli())
			require.NoError(t, err)
			require.True(t, fd.HasHead)
			w := store.Write{Visible: []store.QueueHead{fd.QueueHead}}
			if tc.withHeads {
				w.Heads = []store.Head{fd.Head}
			}

			got := make(chan *durable.OrchestrationItem, 1)
			go func() {
				item, _ := f.e.FetchOrchestrationItem(f.ctx(), testLock, time.Hour, nil)
				got <- item
			}()
			require.Eventually(t, func() bool { return f.e.orch.Waiting(slots.Of(inst)) }, hangGuard, time.Millisecond, "the fetch waits")
			f.e.Wrote(w)
			select {
			case item := <-got:
				require.NotNil(t, item)
				require.Equal(t, inst, item.Instance)
			case <-time.After(hangGuard):
				t.Fatal("the write was not run here")
			}
			locks := f.fs.callsOf(opLockInstance)
			require.NotEmpty(t, locks)
			from, ok := locks[0].Lock.Read.(store.FromHeads)
			require.Equal(t, tc.wantHeads, ok, "locked from the write's head")
			if ok {
				require.Len(t, from.Heads, 1)
				require.False(t, from.Complete, "another process's message may be missing")
			}
		})
	}
}

// TestHandOver: a write may lock its turn (LockOnWrite) only once a
// fetch has run, while a fetch waits for its slot, one turn at a time;
// the turn it hands over wakes the waiting fetch, which returns it with
// no lock of its own, and its wake latency is recorded. A write that
// locked nothing frees its reservation; a turn no fetch took is dropped
// for release; a closed engine takes no turn.
func TestHandOver(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	f := newFixture(t, Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	f.joinOwning(0)
	inst := instIn(t, f.leaseSlots(2), "hand")
	_, ok := f.e.LockOnWrite(inst)
	require.False(t, ok, "no fetch has run: no lock parameters")

	fetch := func(ctx context.Context) <-chan *durable.OrchestrationItem {
		got := make(chan *durable.OrchestrationItem, 1)
		go func() {
			item, _ := f.e.FetchOrchestrationItem(ctx, testLock, hangGuard, nil)
			got <- item
		}()
		require.Eventually(t, func() bool { return f.e.orch.Waiting(slots.Of(inst)) }, hangGuard, time.Millisecond, "the fetch waits")
		return got
	}
	got := fetch(f.ctx())
	req, ok := f.e.LockOnWrite(inst)
	require.True(t, ok)
	require.Equal(t, inst, req.Instance)
	require.Equal(t, testLock, req.LockTimeout)
	_, ok = f.e.LockOnWrite(inst)
	require.False(t, ok, "one handed turn at a time")
	first := &durable.OrchestrationItem{Instance: inst, LockToken: "t1"}
	require.True(t, f.e.HandOver(store.LockResult{Item: first, HeldUntil: f.clk.Now().Add(testLock).UnixMilli(),
		Due: f.clk.Now().UnixMilli()}))
	select {
	case item := <-got:
		require.Same(t, first, item)
	case <-time.After(hangGuard):
		t.Fatal("the handed turn did not wake the fetch")
	}
	require.Empty(t, f.fs.callsOf(opLockInstance), "the fetch locked nothing itself")
	require.Equal(t, int64(1), f.e.Stats().WriteLocked)
	require.Equal(t, int64(1), f.e.Stats().Eager, "run here in another replica's slot")
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var wakes uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == MetricWakeLatency {
				for _, dp := range h.DataPoints {
					if v, _ := dp.Attributes.Value(AttrQueue); v.AsString() == "orchestrator" {
						wakes += dp.Count
					}
				}
			}
		}
	}
	require.EqualValues(t, 1, wakes, "the handed turn's wake latency")

	// A write that locked nothing frees its reservation.
	ctx, cancel := context.WithCancel(f.ctx())
	got = fetch(ctx)
	_, ok = f.e.LockOnWrite(inst)
	require.True(t, ok)
	require.True(t, f.e.HandOver(store.LockResult{}))
	_, ok = f.e.LockOnWrite(inst)
	require.True(t, ok, "the reservation was freed")

	// The fetch goes away before the turn is handed: the turn waits for
	// the next fetch, or is dropped for release.
	cancel()
	require.Nil(t, <-got)
	require.True(t, f.e.HandOver(store.LockResult{Item: &durable.OrchestrationItem{Instance: inst, LockToken: "t2"}}))
	require.Equal(t, []string{"t2"}, f.e.DropHanded())
	require.Empty(t, f.e.DropHanded())

	// Closed meanwhile: the turn goes to no fetch.
	got = fetch(f.ctx())
	_, ok = f.e.LockOnWrite(inst)
	require.True(t, ok)
	f.e.Close(true)
	<-got
	require.False(t, f.e.HandOver(store.LockResult{Item: &durable.OrchestrationItem{Instance: inst, LockToken: "t3"}}))
	require.Empty(t, f.e.DropHanded())
	_, ok = f.e.LockOnWrite(inst)
	require.False(t, ok)
}
