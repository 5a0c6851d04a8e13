package wakeup

import (
	"fmt"
	"iter"
	"math/bits"
	"strings"

	"github.com/durafeed/durafeed/slots"
)

// MaxSlots is the largest slot count a Hub and a Set support; it equals the
// largest slot count internal/epk accepts.
const MaxSlots = 4096

const setWords = MaxSlots / 64

// Set is a set of slots in [0, MaxSlots): a fixed-size bitset with value
// semantics. The zero value is the empty set; assignment copies, and == tells
// whether two sets hold the same slots. Methods that take a slot outside
// [0, MaxSlots) panic, except Contains and Remove, which treat such a slot as
// absent.
type Set struct {
	w [setWords]uint64
}

// SetOf returns the set holding the given slots.
func SetOf(slots ...int) Set {
	var s Set
	for _, sl := range slots {
		s.Add(sl)
	}
	return s
}

// Range returns the contiguous block of slots first..last, both included
// (the convention of epk.SlotRange). first > last gives the empty set.
func Range(first, last int) Set {
	var s Set
	if first > last {
		return s
	}
	checkSlot(first)
	checkSlot(last)
	for i := first / 64; i <= last/64; i++ {
		lo, hi := max(first-i*64, 0), min(last-i*64, 63)
		s.w[i] = (^uint64(0) >> (63 - hi)) &^ (uint64(1)<<lo - 1)
	}
	return s
}

// BlockSet returns the set of the slots of a block of durafeed's slot
// layout.
func BlockSet(b slots.Block) Set { return Range(b.First, b.Last) }

// All returns the set of every slot of a hub with the given slot count:
// Range(0, slots-1).
func All(slots int) Set { return Range(0, slots-1) }

func checkSlot(slot int) {
	if slot < 0 || slot >= MaxSlots {
		panic(fmt.Sprintf("wakeup: slot %d outside [0, %d)", slot, MaxSlots))
	}
}

// Add puts slot into the set.
func (s *Set) Add(slot int) {
	checkSlot(slot)
	s.w[slot>>6] |= 1 << (slot & 63)
}

// Remove takes slot out of the set.
func (s *Set) Remove(slot int) {
	if slot >= 0 && slot < MaxSlots {
		s.w[slot>>6] &^= 1 << (slot & 63)
	}
}

// Contains reports whether slot is in the set.
func (s Set) Contains(slot int) bool {
	return slot >= 0 && slot < MaxSlots && s.w[slot>>6]&(1<<(slot&63)) != 0
}

// Len returns the number of slots in the set.
func (s Set) Len() int {
	n := 0
	for _, w := range s.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether the set holds no slot.
func (s Set) IsEmpty() bool { return s == Set{} }

// Union returns the slots in s or o.
func (s Set) Union(o Set) Set {
	for i := range s.w {
		s.w[i] |= o.w[i]
	}
	return s
}

// Intersect returns the slots in both s and o.
func (s Set) Intersect(o Set) Set {
	for i := range s.w {
		s.w[i] &= o.w[i]
	}
	return s
}

// Difference returns the slots in s but not in o.
func (s Set) Difference(o Set) Set {
	for i := range s.w {
		s.w[i] &^= o.w[i]
	}
	return s
}

// All yields the slots of the set in increasing order.
func (s Set) All() iter.Seq[int] {
	return func(yield func(int) bool) {
		for i, w := range s.w {
			for w != 0 {
				b := bits.TrailingZeros64(w)
				w &= w - 1
				if !yield(i*64 + b) {
					return
				}
			}
		}
	}
}

// Bounds returns the smallest and largest slot of the set; ok is false for
// the empty set.
func (s Set) Bounds() (first, last int, ok bool) {
	first, last = -1, -1
	for i, w := range s.w {
		if w == 0 {
			continue
		}
		if first < 0 {
			first = i*64 + bits.TrailingZeros64(w)
		}
		last = i*64 + 63 - bits.LeadingZeros64(w)
	}
	return first, last, first >= 0
}

// IsRange reports whether the set is one non-empty contiguous block of
// slots, such as a change-feed range's share.
func (s Set) IsRange() bool {
	first, last, ok := s.Bounds()
	return ok && s == Range(first, last)
}

// String renders the set as its blocks, e.g. "{0-63,70}".
func (s Set) String() string {
	var b strings.Builder
	b.WriteByte('{')
	start, prev := -2, -2
	flush := func() {
		if start < 0 {
			return
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		if start == prev {
			fmt.Fprintf(&b, "%d", start)
		} else {
			fmt.Fprintf(&b, "%d-%d", start, prev)
		}
	}
	for sl := range s.All() {
		if sl != prev+1 {
			flush()
			start = sl
		}
		prev = sl
	}
	flush()
	b.WriteByte('}')
	return b.String()
}
