package epk

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMurmur3KnownAnswers(t *testing.T) {
	// Published MurmurHash3 reference values (seed 0).
	tests := []struct {
		in     string
		h32    uint32
		h1, h2 uint64
	}{
		{"", 0, 0, 0},
		{"hello", 0x248bfa47, 0xcbd8a7b341bd9b02, 0x5b1e906a48ae1d19},
		{"The quick brown fox jumps over the lazy dog", 0x2e4ff723, 0xe34bbc7bbc071b6c, 0x7a433ca9c49a9347},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			require.Equal(t, tc.h32, murmur3x86_32([]byte(tc.in), 0))
			h1, h2 := murmur3x64_128([]byte(tc.in), 0)
			require.Equal(t, tc.h1, h1)
			require.Equal(t, tc.h2, h2)
		})
	}
}

// TestMurmur3AllTailLengths folds the hashes of inputs of every length from 0
// to 64 bytes (all block/tail combinations) into one digest. The expected
// digests were produced by the azcosmos v1.5.0 implementations on the same
// inputs.
func TestMurmur3AllTailLengths(t *testing.T) {
	var acc32 uint32
	var acc1, acc2 uint64
	for n := 0; n <= 64; n++ {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i*7 + 3)
		}
		acc32 = acc32*31 + murmur3x86_32(buf, 0)
		h1, h2 := murmur3x64_128(buf, 0)
		acc1 = acc1*31 + h1
		acc2 = acc2*31 + h2
	}
	require.Equal(t, uint32(0xebd3773b), acc32)
	require.Equal(t, uint64(0x87e415bcade8f294), acc1)
	require.Equal(t, uint64(0xecd75345a4f0e1ff), acc2)
}
