package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInstCacheBounds: the cache keeps at most its size of entries per
// map, refuses documents it must not lock from, and restores only into
// free room.
func TestInstCacheBounds(t *testing.T) {
	t.Parallel()
	clean := instanceDoc{ID: idInstance, Type: typeInstance, CurrentExecutionID: 1}
	for _, tc := range []struct {
		name string
		doc  func() instanceDoc
		etag string
		size int
		kept bool
	}{
		{"clean", func() instanceDoc { return clean }, "e", 100, true},
		{"no etag", func() instanceDoc { return clean }, "", 100, false},
		{"too large", func() instanceDoc { return clean }, "e", maxCachedDocBytes + 1, false},
		{"locked", func() instanceDoc { d := clean; d.LockToken = "t"; return d }, "e", 100, false},
		{"pending", func() instanceDoc { d := clean; d.Pending = true; return d }, "e", 100, false},
		{"deleting", func() instanceDoc { d := clean; d.Deleting = "x"; return d }, "e", 100, false},
		{"staging", func() instanceDoc { d := clean; d.Staging = "n"; return d }, "e", 100, false},
		{"publishing", func() instanceDoc { d := clean; d.Publish = &publishRecord{}; return d }, "e", 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newInstCache(4)
			c.put("a", clean, "old", "", 10)
			c.put("a", tc.doc(), tc.etag, "s", tc.size)
			e, ok := c.take("a")
			require.Equal(t, tc.kept, ok)
			if ok {
				require.Equal(t, tc.etag, e.doc.ETag)
				require.Equal(t, "s", e.session)
				_, again := c.take("a")
				require.False(t, again, "an entry is taken once")
			}
		})
	}

	c := newInstCache(3)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		c.put(k, clean, "e", "", 10)
		c.hold("t"+k, clean, "e", "", 10, nil, true)
	}
	unlocked, locked := sizes(c)
	require.Equal(t, 3, unlocked)
	require.Equal(t, 3, locked)
	e, ok := c.heldDoc("te")
	require.True(t, ok, "the newest entry is kept")
	require.Equal(t, "e", e.doc.ETag)
	c.release("te")
	_, ok = c.heldDoc("te")
	require.False(t, ok)

	big := []kvDoc{{Key: "k", Value: string(make([]byte, maxCachedDocBytes))}}
	for _, tc := range []struct {
		kv    []kvDoc
		known bool
		want  bool
	}{{nil, true, true}, {[]kvDoc{{Key: "k", Value: "v"}}, true, true}, {big, true, false}, {nil, false, false}} {
		c.hold("kv", clean, "e", "", 10, tc.kv, tc.known)
		e, ok := c.heldDoc("kv")
		require.True(t, ok)
		require.Equal(t, tc.want, e.kvKnown)
		if tc.want {
			require.Equal(t, tc.kv, e.kv)
		} else {
			require.Nil(t, e.kv)
		}
	}

	taken, ok := c.take("e")
	require.True(t, ok)
	c.put("f", clean, "e", "", 10)
	c.restore("e", taken)
	_, ok = c.take("e")
	require.False(t, ok, "no room: the restored entry is not kept")

	var none *instCache = newInstCache(-1)
	none.put("a", clean, "e", "", 10)
	_, ok = none.take("a")
	require.False(t, ok, "a disabled cache remembers nothing")
}

// sizes returns the number of unlocked and locked entries of c.
func sizes(c *instCache) (unlocked, locked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), len(c.held)
}
