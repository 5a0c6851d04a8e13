package epk

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckSlots(t *testing.T) {
	for _, ok := range []int{1, 2, 4, 64, 256, 1024, 4096} {
		require.NoError(t, CheckSlots(ok), ok)
	}
	for _, bad := range []int{math.MinInt, -256, 0, 3, 6, 255, 257, 1000, 8192, math.MaxInt} {
		require.Error(t, CheckSlots(bad), bad)
		require.Equal(t, -1, SlotOf("1", bad), bad)
		require.Equal(t, Range{}, SlotRange(0, 0, bad), bad)
	}
}

func TestSplitEven(t *testing.T) {
	t.Run("n=1 is the whole space", func(t *testing.T) {
		require.Equal(t, []Range{{MinInclusive, MaxExclusive}}, SplitEven(1))
	})

	t.Run("n=4", func(t *testing.T) {
		require.Equal(t, []Range{
			{"", "10000000000000000000000000000000"},
			{"10000000000000000000000000000000", "20000000000000000000000000000000"},
			{"20000000000000000000000000000000", "30000000000000000000000000000000"},
			{"30000000000000000000000000000000", "FF"},
		}, SplitEven(4))
	})

	t.Run("n=3 rounds down", func(t *testing.T) {
		require.Equal(t, []Range{
			{"", "15555555555555555555555555555555"},
			{"15555555555555555555555555555555", "2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
			{"2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "FF"},
		}, SplitEven(3))
	})

	t.Run("out of bounds", func(t *testing.T) {
		for _, n := range []int{math.MinInt, -1, 0, MaxSplit + 1, math.MaxInt} {
			require.Nil(t, SplitEven(n), n)
		}
	})

	for _, n := range []int{1, 2, 3, 5, 7, 10, 64, 100, 255, 256, 1000, 4096} {
		t.Run(fmt.Sprintf("n=%d is sorted, contiguous, covering, even", n), func(t *testing.T) {
			rs := SplitEven(n)
			require.Len(t, rs, n)
			require.Equal(t, MinInclusive, rs[0].Min)
			require.Equal(t, MaxExclusive, rs[n-1].Max)
			var widths []uint64
			for i, r := range rs {
				require.Equal(t, -1, Compare(r.Min, r.Max), "range %d is empty", i)
				if i > 0 {
					require.Equal(t, rs[i-1].Max, r.Min)
				}
				if i < n-1 {
					require.Len(t, r.Max, 32)
					require.Contains(t, "0123", r.Max[:1])
				}
				// Width in units of 2^64 (high 64 bits of the 128-bit bounds).
				lo, hi := uint64(0), uint64(1)<<62
				if r.Min != "" {
					lo = mustHex64(t, r.Min[:16])
				}
				if r.Max != MaxExclusive {
					hi = mustHex64(t, r.Max[:16])
				}
				widths = append(widths, hi-lo)
			}
			minW, maxW := widths[0], widths[0]
			for _, w := range widths {
				minW, maxW = min(minW, w), max(maxW, w)
			}
			require.LessOrEqual(t, maxW-minW, uint64(1), "widths differ by more than rounding")
		})
	}
}

func mustHex64(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	require.NoError(t, err)
	return v
}

// TestSplitEvenAlignsWithSlotBlocks: for n a power of two dividing the slot
// count, physical range i is exactly the block of slots [i*k, (i+1)*k-1].
func TestSplitEvenAlignsWithSlotBlocks(t *testing.T) {
	for _, slots := range []int{256, 4096} {
		for n := 1; n <= 256; n *= 2 {
			k := slots / n
			for i, r := range SplitEven(n) {
				require.Equal(t, SlotRange(i*k, (i+1)*k-1, slots), r, "slots=%d n=%d i=%d", slots, n, i)
			}
		}
	}
}

func TestSlotRange(t *testing.T) {
	require.Equal(t, Range{MinInclusive, MaxExclusive}, SlotRange(0, 255, 256))
	require.Equal(t, Range{MinInclusive, MaxExclusive}, SlotRange(0, 0, 1))
	require.Equal(t, Range{"", "00400000000000000000000000000000"}, SlotRange(0, 0, 256))
	require.Equal(t, Range{"00400000000000000000000000000000", "00800000000000000000000000000000"}, SlotRange(1, 1, 256))
	require.Equal(t, Range{"10000000000000000000000000000000", "20000000000000000000000000000000"}, SlotRange(64, 127, 256))
	require.Equal(t, Range{"3FC00000000000000000000000000000", "FF"}, SlotRange(255, 255, 256))
	require.Equal(t, Range{"3FFC0000000000000000000000000000", "FF"}, SlotRange(4095, 4095, 4096))
	require.Equal(t, Range{"00040000000000000000000000000000", "00080000000000000000000000000000"}, SlotRange(1, 1, 4096))

	for _, bad := range [][3]int{{-1, 0, 256}, {0, 256, 256}, {5, 4, 256}, {256, 256, 256}, {0, 0, 0}} {
		r := SlotRange(bad[0], bad[1], bad[2])
		require.Equal(t, Range{}, r, "%v", bad)
		require.False(t, r.Contains("1"))
	}
}

func TestSlotOf(t *testing.T) {
	tests := []struct {
		epk   string
		slots int
		want  int
	}{
		{"", 256, 0},
		{"00000000000000000000000000000000", 256, 0},
		{"003FFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 256, 0},
		{"00400000000000000000000000000000", 256, 1},
		{"004", 256, 1},
		{"0FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 256, 63},
		{"10000000000000000000000000000000", 256, 64},
		{"3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 256, 255},
		{"3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 4096, 4095},
		{"3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 1, 0},
		{"2FE1BE91E90A3439635E0E9E37361EF2", 2, 1},
		{"2FE1BE91E90A3439635E0E9E37361EF2", 4, 2},
		{"2FE1BE91E90A3439635E0E9E37361EF2", 256, 0xBF},
		{"2FE1BE91E90A3439635E0E9E37361EF2", 4096, 0xBF8},
		// MultiHash: the first level decides.
		{"2FE1BE91E90A3439635E0E9E37361EF2378867E4430E67857ACE5C908374FE16", 256, 0xBF},
		// V1 and out-of-space inputs are clamped, never out of range.
		{"05C1CF33970FF80800", 256, 0x17},
		{"4", 256, 255},
		{"FE", 256, 255},
		{MaxExclusive, 256, 255},
		{"FFFF", 256, 255},
		// Not hex: placed by Compare against the slot boundaries.
		{"0040/", 256, 0},
		{"0040g", 256, 1},
		{"zz", 256, 255},
		{"/", 256, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.epk, tc.slots), func(t *testing.T) {
			got := SlotOf(tc.epk, tc.slots)
			require.Equal(t, tc.want, got)
			if Compare(tc.epk, MinInclusive) >= 0 && Compare(tc.epk, MaxExclusive) < 0 {
				require.True(t, SlotRange(got, got, tc.slots).Contains(tc.epk))
			}
		})
	}
}

// TestSlotsOverRandomKeys computes the V2 EPKs of 100k random partition keys
// and checks, for 256 slots, that every key lies in its own slot's range,
// that slot membership agrees with random slot blocks, and that the keys are
// spread evenly.
func TestSlotsOverRandomKeys(t *testing.T) {
	const (
		n     = 100_000
		slots = 256
	)
	rng := rand.New(rand.NewPCG(42, 7))
	counts := make([]int, slots)
	for i := 0; i < n; i++ {
		var key any
		switch i % 4 {
		case 0, 1:
			key = "order-" + strconv.FormatUint(rng.Uint64(), 36)
		case 2:
			key = float64(rng.Int64N(1 << 53))
		case 3:
			key = rng.NormFloat64() * 1e6
		}
		epk, err := Compute(Hash, 2, []any{key})
		require.NoError(t, err)

		s := SlotOf(epk, slots)
		require.True(t, s >= 0 && s < slots, "slot %d out of range", s)
		counts[s]++
		if !SlotRange(s, s, slots).Contains(epk) {
			require.Failf(t, "key not in its slot's range", "key %v epk %s slot %d", key, epk, s)
		}
		if s > 0 && SlotRange(0, s-1, slots).Contains(epk) {
			require.Failf(t, "key in a lower block", "epk %s slot %d", epk, s)
		}
		if s < slots-1 && SlotRange(s+1, slots-1, slots).Contains(epk) {
			require.Failf(t, "key in a higher block", "epk %s slot %d", epk, s)
		}
		first := rng.IntN(slots)
		last := first + rng.IntN(slots-first)
		in := s >= first && s <= last
		if in != SlotRange(first, last, slots).Contains(epk) {
			require.Failf(t, "block membership disagrees", "epk %s slot %d block [%d,%d]", epk, s, first, last)
		}
		// Coarser slot counts are the high bits of the finer one.
		require.Equal(t, s>>4, SlotOf(epk, 16))
		require.Equal(t, SlotOf(epk, 4096)>>4, s)
	}

	// Each count is Binomial(n, 1/256): mean 390.6, sigma 19.7. Require every
	// slot to lie within 6 sigma (about [272, 509]); for an arbitrary seed the
	// chance that any of the 256 slots falls outside is below 1e-6, and with
	// the fixed seed above the test is deterministic.
	mean := float64(n) / slots
	sigma := math.Sqrt(float64(n) * (1.0 / slots) * (1 - 1.0/slots))
	lo, hi := mean-6*sigma, mean+6*sigma
	require.Greater(t, lo, mean/2)
	for s, c := range counts {
		require.True(t, float64(c) >= lo && float64(c) <= hi, "slot %d has %d keys, want within [%.0f, %.0f]", s, c, lo, hi)
	}
}

// TestSlotsOfMultiHashKeys: hierarchical EPKs (and their prefixes) land in
// the slot of their first level and are contained in that slot's range.
func TestSlotsOfMultiHashKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 5000; i++ {
		tenant := "tenant-" + strconv.Itoa(rng.IntN(1000))
		full, err := Compute(MultiHash, 2, []any{tenant, "user-" + strconv.Itoa(i), float64(i)})
		require.NoError(t, err)
		prefix, err := Compute(MultiHash, 2, []any{tenant})
		require.NoError(t, err)
		s := SlotOf(prefix, 256)
		require.Equal(t, s, SlotOf(full, 256))
		r := SlotRange(s, s, 256)
		require.True(t, r.Contains(full) && r.Contains(prefix))
		// The prefix query range [prefix, prefix+"FF") stays inside the slot.
		require.LessOrEqual(t, Compare(prefix+MaxExclusive, r.Max), 0)
	}
}
