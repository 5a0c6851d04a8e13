package epk

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompare(t *testing.T) {
	const (
		prefix = "06AB34CFE4E482236BCACBBF50E234AB"
		zeros  = "00000000000000000000000000000000"
	)
	tests := []struct {
		name string
		a, b string
		want int
	}{
		{"equal", "06AB34CFE4E48223", "06AB34CFE4E48223", 0},
		{"less", "06AB34CFE4E48223", "06AB34CFE4E48224", -1},
		{"greater", "06AB34CFE4E48224", "06AB34CFE4E48223", 1},
		{"both empty", "", "", 0},
		{"empty equals zeros", "", "00000", 0},
		{"empty below non-zero", "", "00001", -1},
		{"min below any key", MinInclusive, "00000000000000000000000000000001", -1},
		{"max above top of v2 space", "3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", MaxExclusive, -1},
		{"max above v1 keys", "05C1CF33970FF80800", MaxExclusive, -1},
		{"max equals zero-padded max", MaxExclusive, "FF000000", 0},
		{"prefix equals zero-padded full key", prefix, prefix + zeros, 0},
		{"prefix below full key", prefix, prefix + "00000000000000000000000000000001", -1},
		{"prefix below child", prefix, prefix + "3499FD5198AE0F1EB6B77F6E428D2FF0", -1},
		{"child below prefix+FF", prefix + "3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF" + "3499FD5198AE0F1EB6B77F6E428D2FF0", prefix + MaxExclusive, -1},
		{"prefix range end above any child", prefix + "FF", prefix + "2FE1BE91E90A3439635E0E9E37361EF2", 1},
		{"length does not dominate", "1", "0FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 1},
		{"zero-padded slot boundary", "1", "10000000000000000000000000000000", 0},
		{"ordinal, not numeric, across case", "a", "F", 1},
		{"non-hex tail below zero padding", "0", "0/", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Compare(tc.a, tc.b))
			require.Equal(t, -tc.want, Compare(tc.b, tc.a))
		})
	}
}

// TestCompareIsTotalOrder checks antisymmetry, reflexivity and transitivity
// on random strings drawn from a small alphabet (hex digits plus a few
// non-hex bytes) with lots of zero tails, so that ties and prefixes are common.
func TestCompareIsTotalOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "000000123F/aG"
	gen := func() string {
		var sb strings.Builder
		for n := rng.IntN(6); n > 0; n-- {
			sb.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	for i := 0; i < 20000; i++ {
		a, b, c := gen(), gen(), gen()
		require.Zero(t, Compare(a, a))
		ab, bc, ac := Compare(a, b), Compare(b, c), Compare(a, c)
		require.Equal(t, -ab, Compare(b, a), "%q %q", a, b)
		if ab <= 0 && bc <= 0 {
			require.LessOrEqual(t, ac, 0, "%q <= %q <= %q", a, b, c)
		}
		if ab == 0 && bc == 0 {
			require.Zero(t, ac, "%q == %q == %q", a, b, c)
		}
	}
}

func TestRangeContains(t *testing.T) {
	full := Range{Min: MinInclusive, Max: MaxExclusive}
	mid := Range{Min: "10000000000000000000000000000000", Max: "20000000000000000000000000000000"}
	tests := []struct {
		name string
		r    Range
		epk  string
		want bool
	}{
		{"full contains min", full, "", true},
		{"full contains v2 key", full, "3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", true},
		{"full contains v1 key", full, "05C1CF33970FF80800", true},
		{"full contains 3-level key", full, "3499FD5198AE0F1EB6B77F6E428D2FF027A1848BD1102A3B65AFF266874D0FF52CA5ABC953544CF9BD94776DA5E6EA52", true},
		{"full excludes max", full, MaxExclusive, false},
		{"min is inclusive", mid, "10000000000000000000000000000000", true},
		{"min is inclusive, short form", mid, "1", true},
		{"max is exclusive", mid, "20000000000000000000000000000000", false},
		{"just below max", mid, "1FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", true},
		{"just below min", mid, "0FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", false},
		{"multihash key with level in range", mid, "1ABC0000000000000000000000000000" + "3F00000000000000000000000000000", true},
		{"zero range contains nothing", Range{}, "", false},
		{"empty max is not unbounded", Range{Min: "", Max: ""}, "00", false},
		{"inverted range contains nothing", Range{Min: "2", Max: "1"}, "15", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.r.Contains(tc.epk))
		})
	}
}
