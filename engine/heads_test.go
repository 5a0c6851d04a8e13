package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

func TestHeadIndex(t *testing.T) {
	t.Parallel()
	msg := func(inst, id string, enq, visible, lockedUntil int64, item string) testMsg {
		return testMsg{ID: id, InstanceID: inst, Type: "orch_queue", ETag: `"` + id + `"`, WorkItem: item, EnqueuedAt: enq, VisibleAt: visible, LockedUntil: lockedUntil}
	}
	ids := func(hs []store.Head) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.QueueHead().ID)
		}
		return out
	}
	const now = 1000

	t.Run("take returns due heads oldest first and keeps later ones", func(t *testing.T) {
		h := newHeadIndex(nil)
		h.note(headOf(t, msg("i", "b", 2, 0, 0, "x")), now)
		h.note(headOf(t, msg("i", "a", 1, 0, 0, "x")), now)
		h.note(headOf(t, msg("i", "timer", 3, now+500, 0, "x")), now)
		require.Equal(t, []string{"a", "b"}, ids(h.take("i", now)))
		require.Empty(t, h.take("i", now))
		require.Equal(t, []string{"timer"}, ids(h.take("i", now+500)))
		require.Zero(t, h.count(""))
		require.Zero(t, h.bytes)
	})
	t.Run("a newer version replaces the head; a locked one removes it", func(t *testing.T) {
		h := newHeadIndex(nil)
		h.note(headOf(t, msg("i", "a", 1, 0, 0, "x")), now)
		v2 := msg("i", "a", 1, 0, 0, "x")
		v2.ETag = `"v2"`
		h.note(headOf(t, v2), now)
		got := h.take("i", now)
		require.Len(t, got, 1)
		require.Equal(t, `"v2"`, got[0].ETag())
		h.note(headOf(t, msg("i", "a", 1, 0, 0, "x")), now)
		h.note(headOf(t, msg("i", "a", 1, 0, now+1, "x")), now)
		require.Zero(t, h.count(""))
		require.Zero(t, h.bytes)
	})
	t.Run("a message a turn locked does not come back", func(t *testing.T) {
		h := newHeadIndex(nil)
		h.note(headOf(t, msg("i", "a", 1, 0, 0, "x")), now)
		h.forget("i", []string{"a"})
		h.note(headOf(t, msg("i", "a", 1, 0, 0, "x")), now) // a page read before the lock
		require.Zero(t, h.count(""))
		h.restore("i", []store.Head{headOf(t, msg("i", "b", 1, 0, 0, "x"))}, now)
		require.Equal(t, []string{"b"}, ids(h.take("i", now)))
	})
	t.Run("bounds", func(t *testing.T) {
		h := newHeadIndex(nil)
		h.note(headOf(t, msg("i", "big", 1, 0, 0, strings.Repeat("x", MaxHeadItemBytes+1))), now)
		require.Zero(t, h.count(""), "a large work item is left to the query")
		for k := range maxHeadsPerInst + 3 {
			h.note(headOf(t, msg("i", fmt.Sprint(k), int64(k), 0, 0, "x")), now)
		}
		require.Equal(t, maxHeadsPerInst, h.count(""))
		for k := range maxHeadInstances + 10 {
			h.note(headOf(t, msg(fmt.Sprint("inst", k), "m", 1, 0, 0, "x")), now)
		}
		require.LessOrEqual(t, len(h.m), maxHeadInstances)
		item := strings.Repeat("y", MaxHeadItemBytes)
		for k := range 2 * maxHeadBytes / MaxHeadItemBytes {
			h.note(headOf(t, msg(fmt.Sprint("big", k), "m", 1, 0, 0, item)), now)
		}
		require.LessOrEqual(t, h.bytes, maxHeadBytes)
		n := 0
		for _, hs := range h.m {
			for _, x := range hs {
				n += x.ItemBytes()
			}
		}
		require.Equal(t, n, h.bytes)
		for k := range maxGoneIDs + 5 {
			h.forget("i", []string{fmt.Sprint("gone", k)})
		}
		require.Len(t, h.gone, maxGoneIDs)
		require.Len(t, h.goneOrder, maxGoneIDs)
	})
	t.Run("a lost lease drops its slots' heads", func(t *testing.T) {
		h := newHeadIndex(nil)
		for _, m := range []struct {
			inst string
			slot int
		}{{"lost", 3}, {"kept", 200}} {
			q := msg(m.inst, m.inst+"-msg", 1, 0, 0, "x")
			q.DispatchSlot = m.slot
			h.note(headOf(t, q), now)
		}
		h.dropSlots(wakeup.Range(0, 127))
		require.Empty(t, h.take("lost", now))
		require.Equal(t, []string{"kept-msg"}, ids(h.take("kept", now)))
		require.Zero(t, h.bytes)
	})
	t.Run("completeness", func(t *testing.T) {
		h := newHeadIndex(nil)
		all := wakeup.Range(0, slots.Count-1)
		require.False(t, h.isComplete("new"), "nothing is complete before a catch-up")
		h.caughtUp(all, []string{"backlog"})
		require.True(t, h.isComplete("new"))
		require.False(t, h.isComplete("backlog"), "the catch-up found messages of it")

		big := msg("big", "big-1", 1, 0, 0, strings.Repeat("x", MaxHeadItemBytes+1))
		h.note(headOf(t, big), now)
		require.False(t, h.isComplete("big"), "a message too large to keep")
		for k := range maxHeadsPerInst + 1 {
			h.note(headOf(t, msg("many", fmt.Sprint("m", k), int64(k), 0, 0, "x")), now)
		}
		require.False(t, h.isComplete("many"), "more messages than heads kept")
		h.missed("unreadable")
		require.False(t, h.isComplete("unreadable"), "a message the feed handler could not decode")
		h.note(headOf(t, msg("locked", "l-1", 1, 0, now+1, "x")), now)
		require.True(t, h.isComplete("locked"), "a locked message means the instance exists: no bare lock can follow")
		for k := range maxHeadInstances {
			h.note(headOf(t, msg(fmt.Sprint("e", k), fmt.Sprint("e", k, "-1"), 1, 0, 0, "x")), now)
		}
		evicted := 0
		for k := range maxHeadInstances {
			if !h.isComplete(fmt.Sprint("e", k)) {
				evicted++
			}
		}
		require.Positive(t, evicted, "an evicted instance's heads are no longer complete")

		sl := slots.Of("new")
		h.dropSlots(wakeup.Range(sl, sl))
		require.False(t, h.isComplete("new"), "a slot given up")
		h.acquired(all)
		require.False(t, h.isComplete("new"), "acquired again, before its catch-up")
		h.caughtUp(all, nil)
		require.True(t, h.isComplete("new"))
		require.True(t, h.isComplete("big"), "what was known of a slot goes with its ownership")
	})
	t.Run("nil index", func(t *testing.T) {
		var h *headIndex
		h.dropSlots(wakeup.Range(0, 1))
		h.note(headOf(t, msg("i", "a", 1, 0, 0, "x")), now)
		h.restore("i", nil, now)
		h.forget("i", []string{"a"})
		require.Nil(t, h.take("i", now))
	})
}

// testMsg is a queue document as the change feed delivers it.
type testMsg struct {
	ID           string `json:"id"`
	InstanceID   string `json:"instanceId"`
	Type         string `json:"type"`
	ETag         string `json:"_etag"`
	WorkItem     string `json:"workItem"`
	DispatchSlot int    `json:"dispatchSlot"`
	VisibleAt    int64  `json:"visibleAt"`
	EnqueuedAt   int64  `json:"enqueuedAt"`
	LockedUntil  int64  `json:"lockedUntil"`
}

// headOf decodes m as the feed handler does.
func headOf(t *testing.T, m testMsg) store.Head {
	t.Helper()
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	h, err := store.DecodeHead(raw)
	require.NoError(t, err)
	return h
}
