package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/store"
)

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
