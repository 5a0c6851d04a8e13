package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/store"
)

// TestSettleKey: a completion's peer wake key carries the instance and
// the worker document, whatever the instance id holds; other keys do not
// parse as one.
func TestSettleKey(t *testing.T) {
	t.Parallel()
	for _, inst := range []string{"i", "with:colon", "12:34", "ü"} {
		k := settleKey(inst, "w:1:2")
		gi, gw, ok := splitSettleKey(k)
		require.True(t, ok, k)
		require.Equal(t, inst, gi)
		require.Equal(t, "w:1:2", gw)
		require.False(t, isOrchKey(k), "not an orchestration key")
	}
	for _, k := range []string{"", "c", "wi", orchKey("i"), lockKey("i"), "c1:i", "c9:i", arrivalKey("i", "m")} {
		_, _, ok := splitSettleKey(k)
		require.False(t, ok, k)
	}
	// An arrival's key names the message the same way, under its own kind.
	gi, gm, ok := splitArrivalKey(arrivalKey("with:colon", "m:1"))
	require.True(t, ok)
	require.Equal(t, []string{"with:colon", "m:1"}, []string{gi, gm})
	for _, k := range []string{"", "a", orchKey("i"), settleKey("i", "w"), "a1:i"} {
		_, _, ok := splitArrivalKey(k)
		require.False(t, ok, k)
	}
}

// TestCompletionOf: only a work-item ack (one item removed and its
// completion made visible in the same partition) names the item it
// settles.
func TestCompletionOf(t *testing.T) {
	t.Parallel()
	orch := func(inst string) store.QueueHead {
		return store.QueueHead{InstanceID: inst, ID: "c:1", Type: "orch_queue"}
	}
	work := func(inst, id string) store.QueueHead {
		return store.QueueHead{InstanceID: inst, ID: id, Type: "worker_queue"}
	}
	require.Equal(t, map[string]string{"i": "w:1:2"},
		completionOf(store.Write{WorkDone: []store.QueueHead{work("i", "w:1:2")}, Visible: []store.QueueHead{orch("i")}}))
	require.Nil(t, completionOf(store.Write{Visible: []store.QueueHead{orch("i")}}), "an enqueue")
	require.Nil(t, completionOf(store.Write{WorkDone: []store.QueueHead{work("i", "w:1:2")}, Visible: []store.QueueHead{orch("j")}}),
		"a completion delivered elsewhere")
	require.Nil(t, completionOf(store.Write{WorkDone: []store.QueueHead{work("i", "a"), work("i", "b")}, Visible: []store.QueueHead{orch("i")}}),
		"ambiguous")
}
