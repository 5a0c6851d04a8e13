package engine

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// bareEngine is an engine over a store it never calls: the in-memory
// rules (holds, arrivals, signals) driven directly by a test. The store
// is the fake of fake_test.go; at cleanup it checks that no I/O was asked
// of it (decoding feed documents is none).
func bareEngine(t *testing.T, o Options) *Engine {
	t.Helper()
	fs := newFakeStore(o.Clock)
	e, err := New(context.Background(), Backend{Store: fs}, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		e.Close(false)
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for _, c := range fs.calls {
			if c.Op != opDecodeFeedDoc {
				t.Errorf("the store was called: %s", c.Op)
			}
		}
	})
	return e
}

// orchDoc is an orchestrator queue document as the change feed shows it.
func orchDoc(t *testing.T, inst, id string, lockedUntil int64, settles string) json.RawMessage {
	t.Helper()
	doc := map[string]any{"id": id, "instanceId": inst, "type": "orch_queue", "dispatchSlot": slots.Of(inst),
		"visibleAt": 0, "lockedUntil": lockedUntil, "enqueuedAt": 1, "workItem": `{}`}
	if settles != "" {
		doc["settles"] = settles
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

func workHead(inst, id string) store.QueueHead {
	return store.QueueHead{InstanceID: inst, ID: id, Type: "worker_queue", DispatchSlot: slots.Of(inst)}
}

func orchHead(inst, id string) store.QueueHead {
	return store.QueueHead{InstanceID: inst, ID: id, Type: "orch_queue", DispatchSlot: slots.Of(inst)}
}

// TestStaleVersionDoesNotEndAHold: the window of issue "a completion
// nobody saw". A change-feed page read before a turn locked its message
// (the message's unlocked version) and handled after the turn committed
// used to count as a new arrival and end the turn's await hold, so the
// next completion's turn ran at once with one of its awaited results
// instead of being held for all of them. A version of a message a turn
// of this replica has taken is no arrival; a message it has not taken
// is one, and so is a peer's wake naming it.
func TestStaleVersionDoesNotEndAHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := bareEngine(t, Options{AwaitHold: time.Hour})
	const inst = "join"
	held := func() bool {
		_, ok := e.putOff(inst)
		return ok
	}

	// The feed reads the start message (unlocked); the page waits.
	stale := changefeed.Batch{Documents: []json.RawMessage{orchDoc(t, inst, "start", 0, "")}}
	// Meanwhile a fetch locks it and the turn commits three awaited
	// activities; the first completes.
	e.lockedOrch(inst, time.Now().Add(time.Minute).UnixMilli(), false, []string{"start"})
	e.scheduled(store.Commit{Source: inst, Awaiting: []string{"a1", "a2", "a3"}, Write: store.Write{
		Released: []store.Release{{Instance: inst}},
		Visible:  []store.QueueHead{workHead(inst, "a1"), workHead(inst, "a2"), workHead(inst, "a3")}}})
	e.wrote(store.Write{WorkDone: []store.QueueHead{workHead(inst, "a1")}, Visible: []store.QueueHead{orchHead(inst, "c1")}}, false)
	require.True(t, held(), "two awaited activities outstanding")

	// Now the stale page is handled: the hold stands.
	require.NoError(t, e.handle(ctx, stale))
	require.True(t, held(), "a version of a message the turn took is no arrival")
	// So does the completion's own version on the feed.
	require.NoError(t, e.handle(ctx, changefeed.Batch{Documents: []json.RawMessage{orchDoc(t, inst, "c1", 0, "a1")}}))
	require.True(t, held(), "a completion of an awaited activity is no arrival")

	// A peer's wake naming the taken message is stale too; one naming a
	// new message ends the hold.
	got, ok := e.orchPeerWake(key{kind: kindArrival, instance: inst, id: "start"}.String())
	require.True(t, ok)
	require.Equal(t, inst, got)
	require.True(t, held(), "a late wake for the taken message")
	_, ok = e.orchPeerWake(key{kind: kindArrival, instance: inst, id: "event"}.String())
	require.True(t, ok)
	require.False(t, held(), "a new message ends the hold")

	// Likewise on the feed, for the next turn's hold.
	e.lockedOrch(inst, time.Now().Add(time.Minute).UnixMilli(), false, []string{"c1"})
	e.scheduled(store.Commit{Source: inst, Awaiting: []string{"a2", "a3"}, Write: store.Write{Released: []store.Release{{Instance: inst}}}})
	require.True(t, held())
	require.NoError(t, e.handle(ctx, changefeed.Batch{Documents: []json.RawMessage{orchDoc(t, inst, "event2", 0, "")}}))
	require.False(t, held(), "an event the feed shows ends the hold")
}
