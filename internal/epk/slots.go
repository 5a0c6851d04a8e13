package epk

import (
	"fmt"
	"math/big"
	"math/bits"
)

const (
	// MaxSlots is the largest slot count SlotOf and SlotRange accept.
	MaxSlots = 4096
	// MaxSplit is the largest range count SplitEven accepts.
	MaxSplit = 1 << 16

	// spaceBits is the width of the V2 hash space: 128 bits less the two
	// cleared top bits.
	spaceBits = 126
	// wordBits is the number of significant bits in the first four hex
	// digits (16 bits) of a V2 EPK, whose top two bits are always clear.
	wordBits = 14
)

// CheckSlots returns an error unless slots is a power of two between 1 and
// MaxSlots, the slot counts SlotOf and SlotRange accept.
func CheckSlots(slots int) error {
	if _, ok := slotBits(slots); !ok {
		return fmt.Errorf("epk: slot count %d is not a power of two between 1 and %d", slots, MaxSlots)
	}
	return nil
}

// slotBits returns log2(slots) for a valid slot count.
func slotBits(slots int) (int, bool) {
	if slots < 1 || slots > MaxSlots || slots&(slots-1) != 0 {
		return 0, false
	}
	return bits.TrailingZeros(uint(slots)), true
}

// SlotOf returns the slot, in [0, slots), of an EPK: its proportional position
// in the V2 hash space, i.e. floor(h * slots / 2^126) where h is the 126-bit
// value of the first 32 hex digits. For a single-hash V2 key this is the top
// log2(slots) bits of the hash, so random keys spread evenly over all slots;
// for a MultiHash EPK only the first level decides.
//
// The result is consistent with SlotRange: for every string e with
// MinInclusive <= e < MaxExclusive (under Compare), SlotOf(e, slots) is the
// one slot s for which SlotRange(s, s, slots).Contains(e). Strings outside that
// interval are clamped to slot 0 or slots-1. V1 EPKs get a slot too, but it is
// not uniformly distributed.
//
// slots must be a power of two between 1 and MaxSlots (see CheckSlots);
// otherwise SlotOf returns -1.
func SlotOf(epk string, slots int) int {
	b, ok := slotBits(slots)
	if !ok {
		return -1
	}
	if w, ok := leadingWord(epk); ok {
		if w >= 1<<wordBits {
			return slots - 1 // at or above "4": past the V2 space, below or at "FF"
		}
		return int(w >> (wordBits - b))
	}
	// Not plain uppercase hex: find the last slot whose lower bound is <= epk.
	lo, hi := 0, slots-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if Compare(slotBoundary(mid, b), epk) <= 0 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// leadingWord returns the value of the first four hex digits of epk (missing
// digits count as '0') if epk consists only of uppercase hex digits.
func leadingWord(epk string) (uint32, bool) {
	var w uint32
	for i := 0; i < len(epk); i++ {
		c := epk[i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		if i < 4 {
			w |= uint32(d) << (4 * (3 - i))
		}
	}
	return w, true
}

// SlotRange returns the EPK range holding exactly the slots first..last
// (inclusive) out of slots: SlotOf(e, slots) is in [first, last] if and only if
// SlotRange(first, last, slots).Contains(e), for every e below MaxExclusive.
// SlotRange(0, slots-1, slots) is the whole space [MinInclusive, MaxExclusive).
//
// Inner boundaries are the exact binary fractions k*2^126/slots rendered as the
// service renders V2 range boundaries (32 uppercase hex digits), e.g. slot 64
// of 256 starts at "10000000000000000000000000000000". The lowest boundary is
// MinInclusive and the highest MaxExclusive.
//
// If slots is invalid (see CheckSlots) or not 0 <= first <= last < slots, the
// result is the empty Range{}, which contains nothing.
func SlotRange(first, last, slots int) Range {
	b, ok := slotBits(slots)
	if !ok || first < 0 || last < first || last >= slots {
		return Range{}
	}
	r := Range{Min: MinInclusive, Max: MaxExclusive}
	if first > 0 {
		r.Min = slotBoundary(first, b)
	}
	if last < slots-1 {
		r.Max = slotBoundary(last+1, b)
	}
	return r
}

// slotBoundary renders k*2^126/2^b (0 < k < 2^b <= MaxSlots) as 32 hex
// digits; only the high 64 bits can be non-zero.
func slotBoundary(k, b int) string {
	hi := uint64(k) << (spaceBits - 64 - b)
	var buf [32]byte
	for i := 15; i >= 0; i-- {
		buf[i] = hexDigits[hi&0x0F]
		hi >>= 4
	}
	for i := 16; i < 32; i++ {
		buf[i] = '0'
	}
	return string(buf[:])
}

// SplitEven splits the V2 hash space into n contiguous ranges of equal width
// (widths differ by at most one hash value when n is not a power of two), in
// ascending order: the first starts at MinInclusive, the last ends at
// MaxExclusive, and each range's Max is the next one's Min. Boundary i is
// floor(i*2^126/n), rendered as 32 uppercase hex digits like the service's V2
// range boundaries. For n = 4 the inner boundaries are
// "10000000000000000000000000000000", "20000000000000000000000000000000" and
// "30000000000000000000000000000000".
//
// Because the boundaries are exact binary fractions, for a power of two n that
// divides slots every range is exactly SlotRange(i*slots/n, (i+1)*slots/n-1,
// slots). (The service's own initial layout uses floor((2^126-1)/n)*i, which
// differs in the last digits and would not line up with slot blocks.)
//
// n must be between 1 and MaxSplit; otherwise SplitEven returns nil.
func SplitEven(n int) []Range {
	if n < 1 || n > MaxSplit {
		return nil
	}
	out := make([]Range, n)
	prev := MinInclusive
	space := new(big.Int).Lsh(big.NewInt(1), spaceBits)
	div := big.NewInt(int64(n))
	q := new(big.Int)
	var raw [16]byte
	var hexBuf [32]byte
	for i := 1; i < n; i++ {
		q.Mul(space, big.NewInt(int64(i)))
		q.Quo(q, div)
		q.FillBytes(raw[:])
		next := string(appendHexUpper(hexBuf[:0], raw[:]))
		out[i-1] = Range{Min: prev, Max: next}
		prev = next
	}
	out[n-1] = Range{Min: prev, Max: MaxExclusive}
	return out
}
