package slots

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/internal/epk"
)

func TestRanges(t *testing.T) {
	t.Parallel()
	rs := Ranges(16)
	require.Len(t, rs, 16)
	require.Equal(t, epk.MinInclusive, rs[0].Min)
	require.Equal(t, epk.MaxExclusive, rs[15].Max)
	for i, r := range rs {
		require.Equal(t, epk.SlotRange(i*16, i*16+15, Count), r)
		if i > 0 {
			require.Equal(t, rs[i-1].Max, r.Min, "contiguous")
		}
	}
	require.Equal(t, epk.SplitEven(16), rs, "power-of-two blocks are SplitEven's ranges")
	for _, bad := range []int{0, 3, 12, 512, -1} {
		require.Nil(t, Ranges(bad), "block count %d", bad)
		require.Error(t, CheckBlocks(bad))
	}
	require.Equal(t, []epk.Range{{Min: epk.MinInclusive, Max: epk.MaxExclusive}}, Ranges(1))
	require.Len(t, Ranges(DefaultBlocks), DefaultBlocks)
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-5, 0, 1, 3, 7, 8, 100, 256, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			bs := Split(n)
			want := min(max(n, 1), Count)
			require.Len(t, bs, want)
			require.Equal(t, 0, bs[0].First)
			require.Equal(t, Count-1, bs[len(bs)-1].Last)
			for i, b := range bs {
				require.LessOrEqual(t, b.First, b.Last)
				size := b.Last - b.First + 1
				require.True(t, size == Count/want || size == Count/want+1, "near-equal: %d", size)
				if i > 0 {
					require.Equal(t, bs[i-1].Last+1, b.First, "contiguous")
				}
			}
			require.Equal(t, want == 1, bs[0].All())
		})
	}
}

// TestOfMatchesRange: an instance's slot is the block whose EPK range
// holds its partition key, which is what makes a lease on a block exactly
// the change feed of its instances.
func TestOfMatchesRange(t *testing.T) {
	t.Parallel()
	blocks := Split(DefaultBlocks)
	for i := range 2000 {
		inst := fmt.Sprintf("instance-%d", i)
		s := Of(inst)
		require.True(t, s >= 0 && s < Count)
		e, err := epk.Compute(epk.Hash, 2, []any{inst})
		require.NoError(t, err)
		hits := 0
		for _, b := range blocks {
			if b.Range().Contains(e) {
				hits++
				require.True(t, b.Contains(s), "slot %d of %q outside its block %v", s, inst, b)
			}
		}
		require.Equal(t, 1, hits)
	}
}

func TestSlotVectorsAndDistribution(t *testing.T) {
	// Stable across processes and releases: these values are part of the
	// stored format (dispatchSlot) and must never change.
	vectors := map[string]int{}
	for _, id := range []string{"order-123", "user-456", "a", ""} {
		vectors[id] = Of(id)
	}
	for id, s := range vectors {
		require.Equal(t, s, Of(id))
		require.GreaterOrEqual(t, s, 0)
		require.Less(t, s, Count)
	}
	t.Logf("slot vectors: %v", vectors)
	counts := make([]int, Count)
	const n = 256 * 200
	for i := 0; i < n; i++ {
		counts[Of("instance-"+strconv.Itoa(i))]++
	}
	for s, c := range counts {
		require.Greater(t, c, 100, "slot %d is underused", s)
		require.Less(t, c, 300, "slot %d is overused", s)
	}
}

// fixedSlotVectors are the slots of "order-123", "user-456" and "a".
var fixedSlotVectors = []int{4, 225, 233}

func TestSlotVectorsFixed(t *testing.T) {
	got := []int{Of("order-123"), Of("user-456"), Of("a")}
	require.Equal(t, fixedSlotVectors, got)
}
