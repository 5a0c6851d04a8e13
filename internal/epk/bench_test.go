package epk

import (
	"strings"
	"testing"
)

func BenchmarkCompute(b *testing.B) {
	benches := []struct {
		name    string
		kind    Kind
		version int
		in      []any
	}{
		{"V2/string", Hash, 2, []any{"order-8f14e45fceea167a"}},
		{"V2/number", Hash, 2, []any{42.0}},
		{"V2/string-1KiB", Hash, 2, []any{strings.Repeat("a", 1024)}},
		{"V1/string", Hash, 1, []any{"order-8f14e45fceea167a"}},
		{"V1/string-1KiB", Hash, 1, []any{strings.Repeat("a", 1024)}},
		{"MultiHash/3-levels", MultiHash, 2, []any{"tenant-42", "user-7", 3.0}},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Compute(bb.kind, bb.version, bb.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSlotOf(b *testing.B) {
	epk, err := Compute(Hash, 2, []any{"order-8f14e45fceea167a"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = SlotOf(epk, 256)
	}
}
