package epk

import "strings"

const (
	// MinInclusive is the lowest EPK: the minInclusive of the first partition
	// key range of every container.
	MinInclusive = ""
	// MaxExclusive is the upper bound of the EPK space: the maxExclusive of
	// the last partition key range. No computed EPK reaches it, because V2
	// hashes have their top two bits cleared and V1 EPKs start with "05".
	MaxExclusive = "FF"
)

// Compare orders two EPK strings as the service and the SDKs do: -1 if a < b,
// 0 if a == b, +1 if a > b. Strings are compared byte by byte (ordinally) as if
// the shorter one were padded on the right with '0' digits, so "" equals
// "0000", a hierarchical prefix EPK equals its zero-padded 64- or 96-digit
// form, and a longer EPK with a non-zero tail sorts after its prefix. For
// uppercase hex input this is exactly azcosmos's length-aware comparison;
// unlike it, the padding rule stays a consistent total order on any input.
func Compare(a, b string) int {
	n := min(len(a), len(b))
	if c := strings.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	for i := n; i < len(a); i++ {
		if a[i] != '0' {
			if a[i] > '0' {
				return 1
			}
			return -1
		}
	}
	for i := n; i < len(b); i++ {
		if b[i] != '0' {
			if b[i] > '0' {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Range is the half-open EPK interval [Min, Max), compared with Compare. Max is
// taken literally: use MaxExclusive ("FF") for the top of the space; an empty
// Max is the empty string, not "unbounded", so the zero Range contains nothing.
type Range struct {
	Min, Max string
}

// Contains reports whether Min <= epk < Max under Compare.
func (r Range) Contains(epk string) bool {
	return Compare(r.Min, epk) <= 0 && Compare(epk, r.Max) < 0
}
