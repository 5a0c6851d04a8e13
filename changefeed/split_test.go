package changefeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// tokenRanges decodes the ranges listed in a continuation.
func tokenRanges(tb testing.TB, cont string) []epk.Range {
	tb.Helper()
	var t struct {
		Continuation []struct {
			Min string `json:"minInclusive"`
			Max string `json:"maxExclusive"`
		} `json:"continuation"`
	}
	require.NoError(tb, json.Unmarshal([]byte(cont), &t))
	out := make([]epk.Range, len(t.Continuation))
	for i, c := range t.Continuation {
		out[i] = epk.Range{Min: c.Min, Max: c.Max}
	}
	return out
}

// TestSplitDuringReadingLosesNothing splits physical partitions (and then
// one of the children) while writers write and readers read: leases over a
// whole partition, over half of one, and across two. Every change arrives,
// in order per key; the split was seen as 410/1002 and the checkpoints
// then track the children.
func TestSplitDuringReadingLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	phys := e.physical(t)
	r8 := epk.SplitEven(8)
	store := newMemStore()
	leases := []*memLease{
		store.lease("p0", pkRange(phys[0])),
		store.lease("half-p1", r8[2]),
		store.lease("rest", epk.Range{Min: r8[3].Min, Max: epk.MaxExclusive}),
	}
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(asLeases(leases)...), rec.handle, changefeed.Options{MaxItemCount: 10})
	require.NoError(t, err)
	stop := run(t, p)

	keys := keysIn(t, "s", changefeed.FullRange, 48)
	const total = 30
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		e.writeAll(t, keys, 0, total)
	}()
	ctx := context.Background()
	rec.waitUntil(t, "reading under way", func() bool { return len(rec.all) >= 200 })
	kids0, err := e.srv.SplitPartition(ctx, "db", "c", phys[0].ID)
	require.NoError(t, err)
	_, err = e.srv.SplitPartition(ctx, "db", "c", phys[1].ID)
	require.NoError(t, err)
	rec.waitUntil(t, "reading after the split", func() bool { return len(rec.all) >= 600 })
	_, err = e.srv.SplitPartition(ctx, "db", "c", kids0[0])
	require.NoError(t, err)
	<-writes
	e.writeAll(t, keys, total, total+2) // changes on every child after the splits
	rec.waitAll(t, keys, total+2)

	requireExactlyInOrder(t, rec.snapshot(), keys, total+2)
	require.Positive(t, e.gone.Load(), "the SDK met 410/1002 and refreshed its routing map")
	// The whole-partition lease now reads three children, and its
	// checkpoint says so; every lease's positions tile its range.
	require.Len(t, tokenRanges(t, store.get("p0")), 3)
	for _, l := range leases {
		rs := tokenRanges(t, store.get(l.id))
		require.Equal(t, l.rng.Min, rs[0].Min, l.id)
		require.Equal(t, l.rng.Max, rs[len(rs)-1].Max, l.id)
		for i := 1; i < len(rs); i++ {
			require.Equal(t, rs[i-1].Max, rs[i].Min, l.id)
		}
	}

	// Hand-off after the split: a new owner of "p0" continues from the
	// children's positions with a fresh client (no cached routing map).
	checkpointed := len(rec.all)
	stop()
	leases[0].lose()
	c2 := e.freshContainer(t)
	rec2 := newRecorder()
	p2, err := changefeed.New(c2, newMemSource(store.lease("p0", leases[0].rng)), rec2.handle, changefeed.Options{})
	require.NoError(t, err)
	run(t, p2)
	p0keys := keysIn(t, "t", leases[0].rng, 8)
	e.writeAll(t, p0keys, 0, 5)
	rec2.waitAll(t, p0keys, 5)
	requireExactlyInOrder(t, rec2.snapshot(), p0keys, 5)
	require.Equal(t, checkpointed, len(rec.snapshot()))
}

// TestResumeParentContinuationAfterSplit: a lease checkpointed on a
// partition that has split since is resumed by a new owner from the
// parent's position on both children: nothing before the checkpoint is
// repeated, nothing after it is lost.
func TestResumeParentContinuationAfterSplit(t *testing.T) {
	t.Parallel()
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("freshClient=%v", fresh), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			phys := e.physical(t)
			store := newMemStore()
			rng := pkRange(phys[0])
			keys := keysIn(t, "r", rng, 16)
			e.writeAll(t, keys, 0, 10)

			// First owner: handle everything written so far, checkpoint, lose.
			first := store.lease("p0", rng)
			rec1 := newRecorder()
			p1, err := changefeed.New(e.c, newMemSource(first), rec1.handle, changefeed.Options{})
			require.NoError(t, err)
			stop := run(t, p1)
			rec1.waitAll(t, keys, 10)
			stop()
			first.lose()
			require.Len(t, tokenRanges(t, store.get("p0")), 1)

			ctx := context.Background()
			_, err = e.srv.SplitPartition(ctx, "db", "c", phys[0].ID)
			require.NoError(t, err)
			e.writeAll(t, keys, 10, 20)

			// e.c's routing map still lists the parent: the SDK meets
			// 410/1002 and refreshes. A fresh client sees the children at
			// once and expands the parent's position onto them.
			c := e.c
			if fresh {
				c = e.freshContainer(t)
			}
			gone := e.gone.Load()
			rec2 := newRecorder()
			p2, err := changefeed.New(c, newMemSource(store.lease("p0", rng)), rec2.handle, changefeed.Options{Logger: testLogger(t)})
			require.NoError(t, err)
			run(t, p2)
			rec2.waitUntil(t, "the rest", func() bool { return len(rec2.all) >= len(keys)*10 })
			ds := rec2.snapshot()
			require.Len(t, ds, len(keys)*10)
			for _, d := range ds {
				require.GreaterOrEqual(t, d.Seq, 10, d.ID)
			}
			groups := byKey(ds)
			for _, k := range keys {
				for i, d := range groups[k] {
					require.Equal(t, 10+i, d.Seq)
				}
			}
			require.Len(t, tokenRanges(t, store.get("p0")), 2)
			if fresh {
				require.Equal(t, gone, e.gone.Load())
			} else {
				require.Greater(t, e.gone.Load(), gone)
			}
		})
	}
}
