package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/clock/clocktest"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// Hand-off rules (engine.go, feed.go): a session's lease events make
// slots owned or not, a newly owned slot's backlog is caught up with one
// query, and leaving hands the leases off.

// catchUps returns the catch-up queries run (both queues, every
// document), by their blocks.
func catchUps(f *fixture) [][]slots.Block {
	var out [][]slots.Block
	for _, q := range f.fs.headQueries() {
		if q.Orchestrator && q.Worker && !q.DueOnly {
			out = append(out, q.Blocks)
		}
	}
	return out
}

// blocksOf returns a set's blocks as a catch-up names them.
func blocksOf(set wakeup.Set) []slots.Block { return setBlocks(set) }

// TestJoinAcquireCatchesUp: Join starts a session owning nothing; a lease
// acquired makes its slots owned and runs one catch-up query over them
// (both queues, every document), whose rows become wakeups that the
// fetches take; Join returns once the replica's share is held and caught
// up. Work of slots not acquired is not signalled.
func TestJoinAcquireCatchesUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	a := instIn(t, f.leaseSlots(1), "a")
	b := instIn(t, f.leaseSlots(1), "b")
	c := instIn(t, f.leaseSlots(2), "c")
	f.fs.putMsg(t, a, "m1")
	f.fs.putWork(t, b, "w1")
	f.fs.putMsg(t, c, "m1")

	joined := make(chan error, 1)
	ctx := f.ctx()
	go func() { joined <- f.e.Join(ctx) }()
	s := f.awaitSession()
	require.True(t, f.e.Owned().IsEmpty())
	require.Empty(t, catchUps(f))

	s.leases.acquire(1, "checkpoint")
	require.Equal(t, f.leaseSlots(1), f.e.Owned(), "owned as soon as the lease is")
	select {
	case err := <-joined:
		require.NoError(t, err)
	case <-time.After(hangGuard):
		t.Fatal("Join did not return")
	}
	f.awaitCaughtUp(f.leaseSlots(1))
	require.Equal(t, [][]slots.Block{blocksOf(f.leaseSlots(1))}, catchUps(f))
	require.EqualValues(t, 1, f.e.Stats().Catchups)

	orch, _ := pendingKeys(f.e.orch)
	work, _ := pendingKeys(f.e.work)
	require.Equal(t, []string{orchKey(a)}, orch)
	require.Equal(t, []string{workKey(b, "w1")}, work)
	item := f.fetchOrch()
	require.NotNil(t, item)
	require.Equal(t, a, item.Instance)
	require.NotNil(t, f.fetchWork())
	require.Nil(t, f.fetchOrch())
	require.Equal(t, []string{a}, f.fs.lockedInstances(), "nothing of a slot not owned")
}

// TestUnpinnedLeaseCaughtUpAgain: a lease acquired without a checkpoint
// (its reader starts at "now", fixed by its first read) is caught up
// again once its reader reports its position (OnPositioned), so what was
// written between the first catch-up and that read is found; a lease
// with a checkpoint gets no second catch-up.
func TestUnpinnedLeaseCaughtUpAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		continuation string
	}{
		{name: "never read before", continuation: ""},
		{name: "checkpointed", continuation: "checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			_, err := f.e.join()
			require.NoError(t, err)
			s := f.awaitSession()
			s.leases.acquire(1, tc.continuation)
			require.NoError(t, f.e.Join(f.ctx()))
			require.Eventually(t, func() bool { return f.e.Stats().Catchups == 1 }, hangGuard, time.Millisecond)
			require.Equal(t, tc.continuation != "", f.e.Positioned())

			// Written after the catch-up, before the reader's first read:
			// the feed starts after it.
			a := instIn(t, f.leaseSlots(1), "a")
			f.fs.putMsg(t, a, "m1")
			s.feed.opts.OnPositioned("lease:1")
			require.True(t, f.e.Positioned())
			if tc.continuation == "" {
				f.awaitCaughtUp(f.leaseSlots(1))
				require.Equal(t, [][]slots.Block{blocksOf(f.leaseSlots(1)), blocksOf(f.leaseSlots(1))}, catchUps(f))
				item := f.fetchOrch()
				require.NotNil(t, item)
				require.Equal(t, a, item.Instance)
				return
			}
			// A later lease's catch-up shows that none of lease 1's
			// slots were pending.
			s.leases.acquire(2, "checkpoint")
			f.awaitCaughtUp(f.leaseSlots(2))
			require.Equal(t, [][]slots.Block{blocksOf(f.leaseSlots(1)), blocksOf(f.leaseSlots(2))}, catchUps(f))
		})
	}
}

// TestLostLeaseDropsItsSlots: a lease lost makes its slots unowned at
// once: their pending wakeups and feed heads are dropped, so no fetch
// takes them, and a late feed page of those slots signals nothing; the
// slots still owned keep theirs.
func TestLostLeaseDropsItsSlots(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	s := f.joinOwning(0, 1)
	a := instIn(t, f.leaseSlots(0), "a")
	b := instIn(t, f.leaseSlots(1), "b")
	f.handle(f.fs.putMsg(t, a, "m1"), f.fs.putMsg(t, b, "m1"), f.fs.putWork(t, b, "w1"))
	require.Equal(t, 1, f.e.HeadCount(b))
	orch, _ := pendingKeys(f.e.orch)
	require.ElementsMatch(t, []string{orchKey(a), orchKey(b)}, orch)

	s.leases.lose(1)
	require.Equal(t, f.leaseSlots(0), f.e.Owned())
	orch, _ = pendingKeys(f.e.orch)
	work, _ := pendingKeys(f.e.work)
	require.Equal(t, []string{orchKey(a)}, orch)
	require.Empty(t, work)
	require.Zero(t, f.e.HeadCount(b))

	f.handle(f.fs.raw(t, b, "m1"), f.fs.raw(t, b, "w1")) // a page read before the loss
	orch, _ = pendingKeys(f.e.orch)
	require.Equal(t, []string{orchKey(a)}, orch)
	require.Zero(t, f.e.HeadCount(b))

	item := f.fetchOrch()
	require.NotNil(t, item)
	require.Equal(t, a, item.Instance)
	require.Nil(t, f.fetchOrch())
	require.Nil(t, f.fetchWork())
	require.Equal(t, []string{a}, f.fs.lockedInstances())
	require.Empty(t, f.fs.triedWork())
}

// sessionEnd returns the calls that end a session, in order: the feed
// stopped, the leases released, the hint deleted, the lease store's Run
// returned.
func sessionEnd(f *fixture) []storeOp {
	var out []storeOp
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	for _, c := range f.fs.calls {
		switch c.Op {
		case opFeedStop, opLeasesRelease, opDelete, opLeasesRunReturn:
			out = append(out, c.Op)
		}
	}
	return out
}

// TestCloseHandsOff: a graceful Close stops the feed readers first (their
// pending checkpoints), then releases the leases and deletes the
// replica's backlog hint, then stops the session; Close(false) releases
// nothing, as a crash would. Either way the replica owns nothing after.
func TestCloseHandsOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		graceful bool
		want     []storeOp
	}{
		{graceful: true, want: []storeOp{opFeedStop, opLeasesRelease, opDelete, opLeasesRunReturn}},
		{graceful: false, want: []storeOp{opLeasesRunReturn}},
	} {
		name := "graceful"
		if !tc.graceful {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			f.handle(f.fs.putWork(t, inst, "w1"), f.fs.putWork(t, inst, "w2"))
			f.e.checkHint(f.ctx())
			f.e.checkHint(f.ctx())
			require.Len(t, f.fs.hints(t), 1, "a hint is published")

			f.e.Close(tc.graceful)
			require.Equal(t, tc.want, sessionEnd(f))
			require.False(t, f.e.Joined())
			require.True(t, f.e.Owned().IsEmpty())
			require.ErrorIs(t, f.e.Join(f.ctx()), ErrClosed)
		})
	}
}

// TestLeaveThenRejoin: Leave hands the leases off and forgets the
// wakeups; the next orchestration fetch joins again (a new session) and
// waits for its share and catch-up, which finds the work left behind.
func TestLeaveThenRejoin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	f.joinOwning(0)
	inst := instIn(t, f.leaseSlots(0), "inst")
	f.handle(f.fs.putMsg(t, inst, "m1"))

	f.e.Leave()
	require.Equal(t, []storeOp{opFeedStop, opLeasesRelease, opLeasesRunReturn}, sessionEnd(f))
	require.False(t, f.e.Joined())
	orch, _ := pendingKeys(f.e.orch)
	require.Empty(t, orch)

	got := make(chan fetched, 1)
	ctx := f.ctx()
	go func() {
		item, err := f.e.FetchOrchestrationItem(ctx, testLock, 0, nil)
		got <- fetched{item, err}
	}()
	s := f.awaitSession()
	require.Equal(t, 2, f.sessionCount())
	s.leases.acquire(0, "checkpoint")
	r := receive(t, got)
	require.NoError(t, r.err)
	require.NotNil(t, r.item)
	require.Equal(t, inst, r.item.Instance)
}

// fetched is a fetch's result, from another goroutine.
type fetched struct {
	item *durable.OrchestrationItem
	err  error
}

func receive(t *testing.T, ch <-chan fetched) fetched {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hangGuard):
		t.Fatal("the fetch did not return")
		return fetched{}
	}
}

// TestFirstFetchWaitsForShare: the first orchestration fetch of a session
// waits until the replica holds its share and has caught up on it, so
// that even a zero poll timeout sees the work already queued; when no
// share comes, it waits readyWait at most.
func TestFirstFetchWaitsForShare(t *testing.T) {
	t.Parallel()
	for _, acquire := range []bool{true, false} {
		name := "share acquired"
		if !acquire {
			name = "no share within readyWait"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			inst := instIn(t, f.leaseSlots(0), "inst")
			f.fs.putMsg(t, inst, "m1")
			got := make(chan fetched, 1)
			ctx := f.ctx()
			go func() {
				item, err := f.e.FetchOrchestrationItem(ctx, testLock, 0, nil)
				got <- fetched{item, err}
			}()
			s := f.awaitSession()
			if acquire {
				s.leases.acquire(0, "checkpoint")
				r := receive(t, got)
				require.NoError(t, r.err)
				require.NotNil(t, r.item)
				require.Equal(t, inst, r.item.Instance)
				return
			}
			var r fetched
			require.Eventually(t, func() bool {
				f.clk.Advance(readyWait)
				select {
				case r = <-got:
					return true
				default:
					return false
				}
			}, hangGuard, time.Millisecond)
			require.NoError(t, r.err)
			require.Nil(t, r.item)
			require.Empty(t, f.fs.lockedInstances())
		})
	}
}

// TestDeadHolderLocksFreed: a holder this replica's take-over declared
// dead (leasestore OnExpired) has its locks freed through the store, and
// what that made visible is signalled at once.
func TestDeadHolderLocksFreed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	s := f.joinOwning(0)
	inst := instIn(t, f.leaseSlots(0), "inst")
	f.fs.putMsg(t, inst, "m1")
	f.fs.setReleased(store.Write{Visible: []store.QueueHead{f.fs.head(t, inst, "m1")}})

	s.leases.opts.OnExpired("holder:dead")
	require.Eventually(t, func() bool {
		orch, _ := pendingKeys(f.e.orch)
		return slices.Contains(orch, orchKey(inst))
	}, hangGuard, time.Millisecond)
	calls := f.fs.callsOf(opReleaseLocksOf)
	require.Len(t, calls, 1)
	require.Equal(t, "holder:dead", calls[0].Holder)
	require.EqualValues(t, 1, f.e.Stats().LocksReleased)
	item := f.fetchOrch()
	require.NotNil(t, item)
	require.Equal(t, inst, item.Instance)
}

// TestSafetySweep: every SafetySweepInterval the sweep runs the store's
// stale query over the owned slots, signals the queue documents it
// returns of owned slots (only), and finishes the interrupted
// publications and deletions it found.
func TestSafetySweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{SafetySweepInterval: time.Minute})
	f.joinOwning(0)
	a := instIn(t, f.leaseSlots(0), "a")
	b := instIn(t, f.leaseSlots(2), "b")
	f.fs.putMsg(t, a, "m1")
	f.fs.putMsg(t, b, "m1")
	f.fs.setStale([]store.QueueHead{f.fs.head(t, a, "m1"), f.fs.head(t, b, "m1")}, outbox.Findings{Instances: []string{"unpublished"}})

	require.Eventually(t, func() bool {
		f.clk.Advance(time.Minute)
		return f.fs.count(opFinishInstance) > 0
	}, hangGuard, time.Millisecond)
	stale := f.fs.callsOf(opStale)
	require.NotEmpty(t, stale)
	require.Equal(t, blocksOf(f.leaseSlots(0)), stale[0].Stale.QueueBlocks)
	require.Equal(t, "unpublished", f.fs.callsOf(opFinishInstance)[0].Instance)
	orch, _ := pendingKeys(f.e.orch)
	require.Equal(t, []string{orchKey(a)}, orch)
}

// TestJoinWithoutSessionBuilder: a Backend without Session cannot join:
// Join and a fetch fail saying why, and the replica stays out of
// dispatch.
func TestJoinWithoutSessionBuilder(t *testing.T) {
	t.Parallel()
	clk := clocktest.NewManual(fakeEpoch)
	e, err := New(context.Background(), Backend{Store: newFakeStore(clk)}, Options{Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close(false) })
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	require.ErrorIs(t, e.Join(ctx), errNoSession)
	_, err = e.FetchOrchestrationItem(ctx, time.Second, 0, nil)
	require.ErrorIs(t, err, errNoSession)
	require.True(t, durable.IsRetryable(err))
	require.False(t, e.Joined())
}

// TestJoinOutlastsIdleLeave: a Join still waiting for its share counts
// as an orchestration fetch in flight, so however long the share takes,
// the idle leave does not end the session it waits on; once it returns,
// the idle clock starts from its return.
func TestJoinOutlastsIdleLeave(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{IdleLeave: time.Second})
	joined := make(chan error, 1)
	go func() { joined <- f.e.Join(f.ctx()) }()
	s := f.awaitSession()
	require.Eventually(t, func() bool { return f.e.orchInFlight.Load() == 1 }, hangGuard, time.Millisecond, "Join is in flight")
	f.clk.Advance(10 * time.Second)
	require.False(t, f.e.idle(), "a waiting Join keeps the session")
	s.leases.acquire(0, "checkpoint")
	for i := 1; i < f.e.opts.Leases.Blocks; i++ {
		s.leases.acquire(i, "checkpoint")
	}
	select {
	case err := <-joined:
		require.NoError(t, err)
	case <-time.After(hangGuard):
		t.Fatal("Join did not return once the share was held")
	}
	require.False(t, f.e.idle(), "the idle clock starts at Join's return")
	f.clk.Advance(time.Second)
	require.True(t, f.e.idle(), "then an idle replica leaves")
}
