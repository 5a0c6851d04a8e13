package engine

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/store"
)

// Hold rules (siblings.go) through the fetch path: a turn's commit that
// says which activities its orchestration awaits holds the instance's
// next turn until they have all completed, within AwaitHold; anything
// else that reaches the instance ends the hold. TestStaleVersionDoesNotEndAHold
// (hold_test.go) checks the arrival rules on the engine's state directly;
// these drive them through the fakes: a fetch locking the turn, the
// commit, completions arriving by the feed or by a local ack.

// runAwaitingTurn runs inst's first turn through the fakes: its start
// message on the feed, a fetch locking it, and its commit, which
// schedules the activities and says the orchestration awaits every one.
// It returns the start message's version the feed showed before the lock.
func runAwaitingTurn(f *fixture, inst string, activities ...string) json.RawMessage {
	f.t.Helper()
	start := f.fs.putMsg(f.t, inst, "start")
	f.handle(start)
	item := f.fetchOrch()
	require.NotNil(f.t, item)
	require.Equal(f.t, inst, item.Instance)
	rel := f.fs.ackTurn(inst)
	var scheduled []store.QueueHead
	for _, a := range activities {
		f.fs.putWork(f.t, inst, a)
		scheduled = append(scheduled, f.fs.head(f.t, inst, a))
	}
	f.e.Committed(f.ctx(), store.Commit{Source: inst, Turn: true, Awaiting: activities,
		Write: store.Write{Released: []store.Release{rel}, Visible: scheduled}})
	return start
}

// completion delivers the completion msg of activity to inst.
type completion func(f *fixture, inst, activity, msg string)

// completions are the ways an activity's completion reaches the owner.
var completions = map[string]completion{
	// Another replica's worker acked it: the feed shows the completion,
	// naming the item it settles.
	"by the feed": func(f *fixture, inst, activity, msg string) {
		f.fs.remove(inst, activity)
		f.handle(f.fs.putMsg(f.t, inst, msg, settles(activity)))
	},
	// A worker of this process acked it: the ack's commit removes the
	// item and makes the completion visible.
	"by a local ack": func(f *fixture, inst, activity, msg string) {
		done := f.fs.head(f.t, inst, activity)
		f.fs.remove(inst, activity)
		f.fs.putMsg(f.t, inst, msg, settles(activity))
		f.e.Committed(f.ctx(), store.Commit{Source: inst,
			Write: store.Write{WorkDone: []store.QueueHead{done}, Visible: []store.QueueHead{f.fs.head(f.t, inst, msg)}}})
	},
}

// TestAwaitHoldUntilEveryCompletion: a commit awaiting activities a1..a3
// holds the instance's next turn while any of them is outstanding (a
// completion's wakeup is put off, with no store call), and the last
// completion releases it: the next fetch locks the turn.
func TestAwaitHoldUntilEveryCompletion(t *testing.T) {
	t.Parallel()
	for name, complete := range completions {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{AwaitHold: time.Hour})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "join")
			runAwaitingTurn(f, inst, "a1", "a2", "a3")

			for i, a := range []string{"a1", "a2"} {
				complete(f, inst, a, fmt.Sprintf("c%d", i+1))
				require.Nil(t, f.fetchOrch(), "%d of 3 awaited activities outstanding", 2-i)
				require.Len(t, f.fs.lockedInstances(), 1, "a held turn costs no store call")
			}
			require.EqualValues(t, 2, f.e.Stats().TurnsPutOff)

			complete(f, inst, "a3", "c3")
			item := f.fetchOrch()
			require.NotNil(t, item, "every awaited activity completed")
			require.Equal(t, inst, item.Instance)
			require.Len(t, f.fs.lockedInstances(), 2)
		})
	}
}

// TestAwaitHoldEnds: once held (one of two awaited activities
// outstanding), the turn goes at the next fetch when a new message
// reaches the instance (on the feed, or enqueued by this process) or the
// AwaitHold bound passes; the feed's stale version of the message the
// previous turn took, handled after the commit, does not end the hold.
func TestAwaitHoldEnds(t *testing.T) {
	t.Parallel()
	const bound = time.Minute // more than testLock: the old lock's expiry comes first
	for _, tc := range []struct {
		name string
		then func(f *fixture, inst string, start json.RawMessage)
		ends bool
	}{
		{name: "a new message on the feed", ends: true, then: func(f *fixture, inst string, _ json.RawMessage) {
			f.handle(f.fs.putMsg(f.t, inst, "event"))
		}},
		{name: "a message this process enqueued", ends: true, then: func(f *fixture, inst string, _ json.RawMessage) {
			f.fs.putMsg(f.t, inst, "event")
			f.e.Wrote(store.Write{Visible: []store.QueueHead{f.fs.head(f.t, inst, "event")}})
		}},
		{name: "the bound passes", ends: true, then: func(f *fixture, _ string, _ json.RawMessage) {
			f.clk.Advance(bound)
		}},
		{name: "a stale version of the message the turn took", then: func(f *fixture, _ string, start json.RawMessage) {
			f.handle(start)
		}},
		{name: "a little before the bound", then: func(f *fixture, _ string, _ json.RawMessage) {
			f.clk.Advance(bound - time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{AwaitHold: bound})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "join")
			start := runAwaitingTurn(f, inst, "a1", "a2")
			completions["by the feed"](f, inst, "a1", "c1")
			require.Nil(t, f.fetchOrch(), "held")

			tc.then(f, inst, start)
			item := f.fetchOrch()
			if !tc.ends {
				require.Nil(t, item)
				require.Len(t, f.fs.lockedInstances(), 1)
				return
			}
			require.NotNil(t, item)
			require.Equal(t, inst, item.Instance)
		})
	}
}

// TestHoldNeedsActivitiesScheduledHere: a turn is held only for awaited
// activities a turn committed on this replica scheduled and it has not
// seen complete, and only while hints count (AwaitHold not negative);
// otherwise the first completion's wakeup locks the turn at once.
func TestHoldNeedsActivitiesScheduledHere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		hold      time.Duration
		awaiting  []string
		scheduled []string
		held      bool
	}{
		{name: "awaited activities scheduled here", hold: time.Hour, awaiting: []string{"a1", "a2"}, scheduled: []string{"a1", "a2"}, held: true},
		{name: "awaited activities scheduled elsewhere", hold: time.Hour, awaiting: []string{"x1", "x2"}, scheduled: []string{"a1", "a2"}},
		{name: "hints ignored", hold: -1, awaiting: []string{"a1", "a2"}, scheduled: []string{"a1", "a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{AwaitHold: tc.hold})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "join")
			f.handle(f.fs.putMsg(t, inst, "start"))
			require.NotNil(t, f.fetchOrch())
			rel := f.fs.ackTurn(inst)
			var scheduled []store.QueueHead
			for _, a := range tc.scheduled {
				f.fs.putWork(t, inst, a)
				scheduled = append(scheduled, f.fs.head(t, inst, a))
			}
			f.e.Committed(f.ctx(), store.Commit{Source: inst, Turn: true, Awaiting: tc.awaiting,
				Write: store.Write{Released: []store.Release{rel}, Visible: scheduled}})

			completions["by the feed"](f, inst, "a1", "c1")
			item := f.fetchOrch()
			if tc.held {
				require.Nil(t, item)
				return
			}
			require.NotNil(t, item)
		})
	}
}

// TestSiblingWait: without an await hint, SiblingWait puts a turn off
// while activities its turns scheduled here are outstanding, until the
// last completes or the bound passes; off (the default), nothing waits.
func TestSiblingWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		wait time.Duration
		then func(f *fixture, inst string)
		held bool // after the first completion
	}{
		{name: "off"},
		{name: "the last sibling completes", wait: time.Hour, held: true, then: func(f *fixture, inst string) {
			completions["by the feed"](f, inst, "a2", "c2")
		}},
		{name: "the bound passes", wait: time.Minute, held: true, then: func(f *fixture, _ string) {
			f.clk.Advance(time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, Options{SiblingWait: tc.wait, AwaitHold: -1})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "fan")
			runAwaitingTurn(f, inst, "a1", "a2") // its hint is ignored (AwaitHold < 0)

			completions["by the feed"](f, inst, "a1", "c1")
			item := f.fetchOrch()
			if !tc.held {
				require.NotNil(t, item)
				return
			}
			require.Nil(t, item, "a sibling is outstanding")
			tc.then(f, inst)
			require.NotNil(t, f.fetchOrch())
		})
	}
}

// instanceVersion is an unlocked instance document as the change feed
// shows it after a turn's commit written at updated (ms) that awaits the
// activities of the worker documents awaiting.
func instanceVersion(t *testing.T, instance string, updated int64, awaiting ...string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": "instance", "instanceId": instance, "type": "instance",
		"lockedUntil": 0, "updatedAt": updated, "awaiting": awaiting})
	require.NoError(t, err)
	return b
}

// TestAwaitHoldLearnedFromTheFeed: the owner of an instance's slot holds
// its next turn for the activities a turn committed elsewhere (a writer
// running its own write) awaits, as the instance's version on the feed
// names them: each completion but the last is put off with no store
// call; a completion seen before the version is not waited for; a
// version from before this replica's own last lock is stale, and a
// later version awaiting nothing spends the hold.
func TestAwaitHoldLearnedFromTheFeed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// then runs after the start message was taken elsewhere; it
		// returns the completions after which the turn is held, then
		// the one that frees it ("" when the first goes at once).
		then func(f *fixture, inst string, now int64) (held []string, frees string)
	}{
		{name: "learned", then: func(f *fixture, inst string, now int64) ([]string, string) {
			f.handle(f.fs.putWork(f.t, inst, "a1"), f.fs.putWork(f.t, inst, "a2"), f.fs.putWork(f.t, inst, "a3"),
				instanceVersion(f.t, inst, now, "a1", "a2", "a3"))
			return []string{"a1", "a2"}, "a3"
		}},
		{name: "a completion seen before the version", then: func(f *fixture, inst string, now int64) ([]string, string) {
			f.handle(f.fs.putWork(f.t, inst, "a1"), f.fs.putWork(f.t, inst, "a2"))
			completions["by the feed"](f, inst, "a1", "c-a1")
			f.handle(instanceVersion(f.t, inst, now, "a1", "a2"))
			return nil, "a2"
		}},
		{name: "a version awaiting nothing spends it", then: func(f *fixture, inst string, now int64) ([]string, string) {
			f.handle(f.fs.putWork(f.t, inst, "a1"), f.fs.putWork(f.t, inst, "a2"), instanceVersion(f.t, inst, now, "a1", "a2"))
			f.handle(instanceVersion(f.t, inst, now+1))
			return nil, "a1"
		}},
		{name: "hints ignored", then: func(f *fixture, inst string, now int64) ([]string, string) {
			f.handle(f.fs.putWork(f.t, inst, "a1"), f.fs.putWork(f.t, inst, "a2"), instanceVersion(f.t, inst, now, "a1", "a2"))
			return nil, "a1"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hold := time.Hour
			if tc.name == "hints ignored" {
				hold = -1
			}
			f := newFixture(t, Options{AwaitHold: hold})
			f.joinOwning(0)
			inst := instIn(t, f.leaseSlots(0), "learn")
			held, frees := tc.then(f, inst, f.clk.Now().UnixMilli())
			for _, a := range held {
				completions["by the feed"](f, inst, a, "c-"+a)
				require.Nil(t, f.fetchOrch(), "held after %s", a)
				require.Empty(t, f.fs.lockedInstances(), "a held turn costs no store call")
			}
			completions["by the feed"](f, inst, frees, "c-"+frees)
			item := f.fetchOrch()
			require.NotNil(t, item, "the awaited activities are done, or no hold holds")
			require.Equal(t, inst, item.Instance)
			if hold > 0 && tc.name == "learned" {
				require.EqualValues(t, 1, f.e.Stats().HoldsLearned)
			}
		})
	}
}

// TestStaleInstanceVersionLeavesTheHold: a version of the instance the
// feed shows from before this replica's own lock of it (read before the
// lock, handled after the commit) neither replaces nor spends the hold
// that turn's commit set.
func TestStaleInstanceVersionLeavesTheHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{AwaitHold: time.Hour})
	f.joinOwning(0)
	inst := instIn(t, f.leaseSlots(0), "stale")
	before := f.clk.Now().UnixMilli()
	f.clk.Advance(time.Millisecond)
	runAwaitingTurn(f, inst, "a1", "a2")
	f.handle(instanceVersion(t, inst, before)) // awaits nothing: would spend the hold
	completions["by the feed"](f, inst, "a1", "c1")
	require.Nil(t, f.fetchOrch(), "a2 is still awaited")
	completions["by the feed"](f, inst, "a2", "c2")
	require.NotNil(t, f.fetchOrch())
	require.Zero(t, f.e.Stats().HoldsLearned)
}
