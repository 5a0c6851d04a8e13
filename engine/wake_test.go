package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// Wake rules: what a change-feed document, a write or a fetch's finding
// signals, on which hub and for when, and what a fetch then does with it.

// TestFeedDocumentWakes: a queue document the change feed shows for a
// slot this replica owns becomes a wakeup, an orchestrator message on the
// orchestrator hub and a worker item on the worker hub, and the matching
// fetch turns it into a lock call on the store (the other fetch does not
// take it); a document of a slot not owned signals nothing, so no fetch
// calls the store for it although it is takeable there.
func TestFeedDocumentWakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		owned  bool
		worker bool
	}{
		{name: "orchestrator message of an owned slot", owned: true},
		{name: "worker item of an owned slot", owned: true, worker: true},
		{name: "orchestrator message of a slot not owned"},
		{name: "worker item of a slot not owned", worker: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			lease := 2
			if tc.owned {
				lease = 0
			}
			inst := instIn(t, f.leaseSlots(lease), "inst")
			var raw json.RawMessage
			if tc.worker {
				raw = f.fs.putWork(t, inst, "w1")
			} else {
				raw = f.fs.putMsg(t, inst, "m1")
			}
			f.handle(raw)

			orch, _ := pendingKeys(f.e.orch)
			work, _ := pendingKeys(f.e.work)
			switch {
			case !tc.owned:
				require.Empty(t, orch)
				require.Empty(t, work)
				require.Nil(t, f.fetchOrch())
				require.Nil(t, f.fetchWork())
				require.Empty(t, f.fs.lockedInstances())
				require.Empty(t, f.fs.triedWork())
			case tc.worker:
				require.Empty(t, orch, "a worker item goes to the worker hub only")
				require.Equal(t, []string{workKey(inst, "w1")}, work)
				require.Nil(t, f.fetchOrch())
				require.Empty(t, f.fs.lockedInstances())
				item := f.fetchWork()
				require.NotNil(t, item)
				require.Equal(t, inst+"/w1", item.LockToken)
				require.Equal(t, []string{inst + "/w1"}, f.fs.triedWork())
			default:
				require.Equal(t, []string{orchKey(inst)}, orch)
				require.Empty(t, work, "an orchestrator message goes to the orchestrator hub only")
				require.Nil(t, f.fetchWork())
				require.Empty(t, f.fs.triedWork())
				item := f.fetchOrch()
				require.NotNil(t, item)
				require.Equal(t, inst, item.Instance)
				require.Equal(t, []string{inst}, f.fs.lockedInstances())
			}
		})
	}
}

// TestLockedDocumentWakesAtExpiry: a queue document the feed shows locked
// until T (another process holds it) is signalled for T, not now: no
// fetch calls the store before T, and the first fetch at T locks it.
func TestLockedDocumentWakesAtExpiry(t *testing.T) {
	t.Parallel()
	for _, worker := range []bool{false, true} {
		name := "orchestrator message"
		if worker {
			name = "worker item"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			until := f.clk.Now().UnixMilli() + time.Minute.Milliseconds()
			hub, key, fetch := f.e.orch, lockKey(inst), func() bool { return f.fetchOrch() != nil }
			calls := func() int { return f.fs.count(opLockInstance) }
			if worker {
				f.handle(f.fs.putWork(t, inst, "w1", lockedUntil(until)))
				hub, key, fetch = f.e.work, workKey(inst, "w1"), func() bool { return f.fetchWork() != nil }
				calls = func() int { return f.fs.count(opTryLockWork) + f.fs.count(opReadWork) }
			} else {
				f.fs.lockInstance(inst, until)
				f.handle(f.fs.putMsg(t, inst, "m1", lockedUntil(until)))
			}

			p := pendingAt(t, hub, key)
			require.False(t, p.Due, "signalled for the lock's expiry, not now")
			require.True(t, p.VisibleAt.Equal(msTime(until)), "signalled for %v, want %v", p.VisibleAt, msTime(until))
			require.False(t, fetch())
			require.Zero(t, calls(), "no store call before the lock expires")

			f.clk.Advance(time.Minute)
			require.True(t, fetch(), "taken once the lock has expired")
			require.Equal(t, 1, calls())
		})
	}
}

// TestFoundLockedInstanceRetried: a fetch that finds an instance locked
// by another process retries it at the lock's expiry, or at once when the
// feed shows the instance document unlocked; a version that still shows
// the lock does not wake it.
func TestFoundLockedInstanceRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		then  func(f *fixture, inst string, until int64)
		taken bool
	}{
		{name: "the feed shows the lock released", taken: true, then: func(f *fixture, inst string, _ int64) {
			f.fs.lockInstance(inst, 0)
			f.handle(instanceJSON(f.t, inst, 0))
		}},
		{name: "the lock expires", taken: true, then: func(f *fixture, _ string, _ int64) {
			f.clk.Advance(time.Minute)
		}},
		{name: "the feed shows the lock still held", then: func(f *fixture, inst string, until int64) {
			f.handle(instanceJSON(f.t, inst, until))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			until := f.clk.Now().UnixMilli() + time.Minute.Milliseconds()
			f.fs.lockInstance(inst, until)
			f.handle(f.fs.putMsg(t, inst, "m1"))
			require.Nil(t, f.fetchOrch())
			require.Equal(t, []string{inst}, f.fs.lockedInstances(), "found locked")
			p := pendingAt(t, f.e.orch, lockKey(inst))
			require.False(t, p.Due)
			require.True(t, p.VisibleAt.Equal(msTime(until)))

			tc.then(f, inst, until)
			item := f.fetchOrch()
			if !tc.taken {
				require.Nil(t, item)
				require.Len(t, f.fs.lockedInstances(), 1)
				return
			}
			require.NotNil(t, item)
			require.Equal(t, []string{inst, inst}, f.fs.lockedInstances())
		})
	}
}

// TestOwnLockExpiryDropped: the expiry wakeup of a lock this process
// released (its turn committed) is dropped without a store call; the
// expiry of a lock it did not release (a turn that never committed) locks
// the instance again.
func TestOwnLockExpiryDropped(t *testing.T) {
	t.Parallel()
	for _, released := range []bool{true, false} {
		name := "released by this process"
		if !released {
			name = "never released"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			f.handle(f.fs.putMsg(t, inst, "m1"))
			require.NotNil(t, f.fetchOrch())
			p := pendingAt(t, f.e.orch, lockKey(inst))
			require.False(t, p.Due, "the lock's expiry is signalled")
			if released {
				rel := f.fs.ackTurn(inst)
				require.True(t, p.VisibleAt.Equal(msTime(rel.LockedUntil)))
				f.e.Committed(f.ctx(), store.Commit{Source: inst, Turn: true, Write: store.Write{Released: []store.Release{rel}}})
			}

			f.clk.Advance(testLock)
			item := f.fetchOrch()
			if released {
				require.Nil(t, item)
				require.Len(t, f.fs.lockedInstances(), 1, "the expiry of a released lock costs no store call")
				return
			}
			require.NotNil(t, item, "the lapsed lock's messages are taken again")
			require.Len(t, f.fs.lockedInstances(), 2)
		})
	}
}

// TestTakenWorkSkipped: a worker wakeup of an item the feed has since
// shown acked (a completion that settles it) or locked by someone else is
// dropped without a store call; a locked one is taken at its lock's
// expiry. Without either, the fetch tries the item.
func TestTakenWorkSkipped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// then changes the item after its wakeup was signalled, and
		// returns when it is takeable again (0: never, or now).
		then    func(f *fixture, inst string) time.Duration
		skipped bool
	}{
		{name: "not shown taken", then: func(*fixture, string) time.Duration { return 0 }},
		{name: "acked: a completion settles it", skipped: true, then: func(f *fixture, inst string) time.Duration {
			f.fs.remove(inst, "w1")
			f.handle(f.fs.putMsg(f.t, inst, "c1", settles("w1")))
			return 0
		}},
		{name: "locked by another replica", skipped: true, then: func(f *fixture, inst string) time.Duration {
			f.handle(f.fs.putWork(f.t, inst, "w1", lockedUntil(f.clk.Now().UnixMilli()+time.Minute.Milliseconds())))
			return time.Minute
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			f.handle(f.fs.putWork(t, inst, "w1"))
			later := tc.then(f, inst)

			item := f.fetchWork()
			if !tc.skipped {
				require.NotNil(t, item)
				require.Equal(t, []string{inst + "/w1"}, f.fs.triedWork())
				return
			}
			require.Nil(t, item)
			require.Empty(t, f.fs.triedWork(), "no store call for an item the feed showed taken")
			require.Zero(t, f.fs.count(opReadWork))
			require.EqualValues(t, 1, f.e.Stats().WorkSkipped)
			if later == 0 {
				return
			}
			f.clk.Advance(later)
			require.NotNil(t, f.fetchWork(), "taken at its lock's expiry")
			require.Equal(t, []string{inst + "/w1"}, f.fs.triedWork())
		})
	}
}

// TestParkedWorkWaitsForAFetchThatCanTakeIt: a worker item the fetch may
// not take (another tag, a session without session settings) is parked
// without a lock: the next fetch that may take it locks it, the others
// leave it.
func TestParkedWorkWaitsForAFetchThatCanTakeIt(t *testing.T) {
	t.Parallel()
	gpu, err := durable.OnlyTags("gpu")
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		opt     docOpt
		session *durable.SessionFetchConfig
		tags    durable.TagFilter
	}{
		{name: "another tag", opt: tagged("gpu"), tags: gpu},
		{name: "a session", opt: inSession("s1"), session: &durable.SessionFetchConfig{OwnerID: "worker", LockTimeout: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			f.handle(f.fs.putWork(t, inst, "w1", tc.opt))

			require.Nil(t, f.fetchWork(), "a plain fetch may not take it")
			require.Equal(t, 1, f.fs.count(opReadWork), "read once, to learn why the lock failed")
			require.Zero(t, f.fs.count(opLockWork))
			require.Nil(t, f.fetchWork(), "parked: not offered to the same kind of fetch again")
			require.Equal(t, 1, f.fs.count(opReadWork))

			item := f.fetchWorkWith(tc.session, tc.tags)
			require.NotNil(t, item)
			require.Equal(t, inst+"/w1", item.LockToken)
		})
	}
}

// TestFeedIntentDelivery: an outbox intent the feed shows is delivered by
// the owner of its source slot (the target created, the intent deleted,
// the target signalled when its slot is owned here); a replica not owning
// the source leaves it; under HoldIntents the page is refused.
func TestFeedIntentDelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		owned     bool
		hold      bool
		delivered bool
	}{
		{name: "source owned", owned: true, delivered: true},
		{name: "source not owned"},
		{name: "held", owned: true, hold: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			lease := 2
			if tc.owned {
				lease = 0
			}
			src := instIn(t, f.leaseSlots(lease), "src")
			tgt := instIn(t, f.leaseSlots(0), "tgt")
			target := f.fs.putMsg(t, tgt, "event")
			raw := intentJSON(t, src, tgt, target)
			f.e.HoldIntents(tc.hold)

			err := f.e.handle(f.ctx(), changefeed.Batch{Documents: []json.RawMessage{raw}})
			if tc.hold {
				require.ErrorIs(t, err, errHeld)
				require.EqualValues(t, 1, f.e.Stats().IntentsHeld)
			} else {
				require.NoError(t, err)
			}
			orch, _ := pendingKeys(f.e.orch)
			if !tc.delivered {
				require.Zero(t, f.fs.count(opCreate))
				require.Zero(t, f.fs.count(opDelete))
				require.Empty(t, orch)
				return
			}
			created := f.fs.callsOf(opCreate)
			require.Len(t, created, 1)
			require.Equal(t, tgt, created[0].Partition)
			require.JSONEq(t, string(target), string(created[0].Doc))
			deleted := f.fs.callsOf(opDelete)
			require.Len(t, deleted, 1)
			require.Equal(t, src, deleted[0].Partition)
			require.Equal(t, "intent-1", deleted[0].ID)
			require.Equal(t, []string{orchKey(tgt)}, orch, "the delivered target is signalled")
			require.EqualValues(t, 1, f.e.Stats().FeedDelivered)
		})
	}
}

// TestCommittedIntents: a commit's intents are delivered from the feed by
// the owner of the source slot, so a commit of an owned source only wakes
// that slot's feed reader; any other replica delivers them at once.
func TestCommittedIntents(t *testing.T) {
	t.Parallel()
	for _, owned := range []bool{true, false} {
		name := "source owned"
		if !owned {
			name = "source not owned"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			s := f.joinOwning(0)
			lease := 2
			if owned {
				lease = 0
			}
			src := instIn(t, f.leaseSlots(lease), "src")
			tgt := instIn(t, f.leaseSlots(1), "tgt")
			var in outbox.Intent
			require.NoError(t, json.Unmarshal(intentJSON(t, src, tgt, f.fs.putMsg(t, tgt, "event")), &in))

			f.e.Committed(f.ctx(), store.Commit{Source: src, Turn: true, Intents: []outbox.Intent{in}})
			if owned {
				slot := slots.Of(src)
				require.Equal(t, []changefeed.Range{slots.Block{First: slot, Last: slot}.Range()}, s.feed.woken())
				require.Zero(t, f.fs.count(opCreate), "left to the feed")
				return
			}
			require.Empty(t, s.feed.woken())
			require.Equal(t, 1, f.fs.count(opCreate))
			require.Equal(t, 1, f.fs.count(opDelete))
		})
	}
}

// TestWorkFetchBeforeJoining: a replica that has not joined (a client, a
// worker-only node) serves a worker fetch by locking across all slots,
// without joining; a fetch that takes no tags does nothing at all.
func TestWorkFetchBeforeJoining(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tags  durable.TagFilter
		calls int
	}{
		{name: "untagged items", tags: durable.DefaultOnlyTags(), calls: 1},
		{name: "no tags", tags: durable.NoTags()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			inst := instIn(t, f.leaseSlots(3), "inst")
			f.fs.putWork(t, inst, "w1")

			item := f.fetchWorkWith(nil, tc.tags)
			require.False(t, f.e.Joined(), "a worker fetch does not join")
			require.Zero(t, f.sessionCount())
			calls := f.fs.callsOf(opLockWorkIn)
			require.Len(t, calls, tc.calls)
			if tc.calls == 0 {
				require.Nil(t, item)
				require.Empty(t, f.fs.callsOf(opContainerGone))
				return
			}
			require.Equal(t, slots.All(), calls[0].Block)
			require.NotNil(t, item)
			require.Equal(t, inst+"/w1", item.LockToken)
		})
	}
}

// intentJSON is an outbox intent of src as the change feed shows it,
// creating target in tgt's partition.
func intentJSON(t *testing.T, src, tgt string, target json.RawMessage) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(outbox.Intent{ID: "intent-1", InstanceID: src, Type: outbox.Type, TargetInstance: tgt,
		Payload: string(target), IdempotencyKey: "effect-1", CreatedAt: 1})
	require.NoError(t, err)
	return b
}

// TestForeignLockExpiryVoided: a lock another process took (its enqueue
// locked the turn, or a turn of its own) that the feed shows held, then
// released, needs no lock attempt at its expiry: the wakeup is dropped.
// A later lock expiring earlier than the released one keeps its own
// expiry wakeup; and one never seen released is tried at its expiry.
func TestForeignLockExpiryVoided(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// then runs after the feed showed m1 locked until until.
		then      func(f *fixture, inst string, until int64)
		attempted bool
	}{
		{name: "released: the feed shows the instance unlocked", then: func(f *fixture, inst string, _ int64) {
			f.fs.remove(inst, "m1") // the turn consumed it
			f.handle(instanceJSON(f.t, inst, 0))
		}},
		{name: "never seen released", attempted: true, then: func(f *fixture, inst string, until int64) {
			f.fs.put(f.t, "orch_queue", inst, "m1", nil) // its lock lapsed: takeable again
		}},
		{name: "released, then a later lock that expires earlier", attempted: true, then: func(f *fixture, inst string, until int64) {
			f.fs.remove(inst, "m1")
			f.handle(instanceJSON(f.t, inst, 0))
			f.handle(f.fs.putMsg(f.t, inst, "m2", lockedUntil(until-time.Second.Milliseconds())))
			f.fs.put(f.t, "orch_queue", inst, "m2", nil) // that lock lapses with its holder
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "inst")
			until := f.clk.Now().UnixMilli() + time.Minute.Milliseconds()
			f.handle(f.fs.putMsg(t, inst, "m1", lockedUntil(until)))
			p := pendingAt(t, f.e.orch, lockKey(inst))
			require.True(t, p.VisibleAt.Equal(msTime(until)), "the expiry is followed")

			tc.then(f, inst, until)
			f.clk.Advance(time.Minute)
			item := f.fetchOrch()
			if !tc.attempted {
				require.Nil(t, item)
				require.Empty(t, f.fs.lockedInstances(), "the released lock's expiry costs no store call")
				return
			}
			require.NotNil(t, item, "the lapsed lock's message is taken")
			require.Equal(t, []string{inst}, f.fs.lockedInstances())
		})
	}
}
