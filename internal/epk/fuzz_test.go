package epk

import (
	"math"
	"strings"
	"testing"
)

// FuzzCompute feeds arbitrary kinds, versions and component mixes to Compute.
// It must never panic; successful results must have the documented shape and
// be consistent with the slot functions.
func FuzzCompute(f *testing.F) {
	f.Add(uint8(0), 2, "partitionKey", 1.5, true, uint16(0x0123))
	f.Add(uint8(1), 0, "", math.Inf(-1), false, uint16(0x0321))
	f.Add(uint8(0), 1, strings.Repeat("é", 60)+"😀", math.NaN(), true, uint16(0x0004))
	f.Add(uint8(2), 5, "\xff\xfe", math.Copysign(0, -1), false, uint16(0xFFFF))
	f.Add(uint8(3), -1, "x", 0.0, true, uint16(0x4444))
	f.Fuzz(func(t *testing.T, kindSel uint8, version int, s string, num float64, b bool, shape uint16) {
		kinds := []Kind{Hash, MultiHash, "", "Range"}
		kind := kinds[int(kindSel)%len(kinds)]
		// shape: low 3 bits = component count (0-7), then 3 bits per
		// component choosing its type (including unsupported ones).
		count := int(shape & 7)
		comps := make([]any, 0, count)
		for i := 0; i < count; i++ {
			switch (shape >> (3 + 3*i)) & 7 {
			case 0:
				comps = append(comps, s)
			case 1:
				comps = append(comps, num)
			case 2:
				comps = append(comps, b)
			case 3:
				comps = append(comps, nil)
			case 4:
				comps = append(comps, Undefined)
			case 5:
				comps = append(comps, int64(num))
			case 6:
				comps = append(comps, []byte(s))
			default:
				comps = append(comps, struct{ S string }{s})
			}
		}

		got, err := Compute(kind, version, comps)
		if err != nil {
			if got != "" {
				t.Fatalf("error %v with non-empty result %q", err, got)
			}
			return
		}
		if got == "" || strings.Trim(got, "0123456789ABCDEF") != "" {
			t.Fatalf("result %q is not uppercase hex", got)
		}
		levels := max(len(comps), 1)
		switch {
		case kind == MultiHash:
			if len(got) != 32*levels {
				t.Fatalf("MultiHash result %q has length %d, want %d", got, len(got), 32*levels)
			}
			for i := 0; i < levels; i++ {
				if got[32*i] > '3' {
					t.Fatalf("level %d of %q has top bits set", i, got)
				}
			}
		case version == 2:
			if len(got) != 32 || got[0] > '3' {
				t.Fatalf("V2 result %q is malformed", got)
			}
		default:
			if !strings.HasPrefix(got, "05") {
				t.Fatalf("V1 result %q does not start with a number marker", got)
			}
		}
		if Compare(got, MaxExclusive) >= 0 {
			t.Fatalf("result %q is not below MaxExclusive", got)
		}
		for _, slots := range []int{1, 256, 4096} {
			slot := SlotOf(got, slots)
			if slot < 0 || slot >= slots || !SlotRange(slot, slot, slots).Contains(got) {
				t.Fatalf("slot %d/%d inconsistent for %q", slot, slots, got)
			}
		}
	})
}

// FuzzCompareAndSlots checks Compare's order laws and the SlotOf/SlotRange
// agreement on arbitrary strings, and that neither panics.
func FuzzCompareAndSlots(f *testing.F) {
	f.Add("", "FF", 256)
	f.Add("06AB34CFE4E48223", "06AB34CFE4E4822300000", 4096)
	f.Add("0040/", "zz", 3)
	f.Fuzz(func(t *testing.T, a, b string, slots int) {
		if Compare(a, a) != 0 {
			t.Fatalf("Compare(%q, %q) != 0", a, a)
		}
		if ab, ba := Compare(a, b), Compare(b, a); ab != -ba || ab < -1 || ab > 1 {
			t.Fatalf("Compare(%q, %q) = %d, reverse %d", a, b, ab, ba)
		}
		slot := SlotOf(a, slots)
		if CheckSlots(slots) != nil {
			if slot != -1 {
				t.Fatalf("SlotOf with invalid slot count %d returned %d", slots, slot)
			}
			return
		}
		if slot < 0 || slot >= slots {
			t.Fatalf("SlotOf(%q, %d) = %d", a, slots, slot)
		}
		inSpace := Compare(a, MinInclusive) >= 0 && Compare(a, MaxExclusive) < 0
		if inSpace != SlotRange(slot, slot, slots).Contains(a) {
			t.Fatalf("SlotOf(%q, %d) = %d disagrees with SlotRange", a, slots, slot)
		}
	})
}
