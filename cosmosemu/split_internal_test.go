package cosmosemu

import (
	"testing"

	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

func TestEPKMidpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rng  epk.Range
		want string
		ok   bool
	}{
		{"whole space", epk.Range{Min: "", Max: "FF"}, "20000000000000000000000000000000", true},
		{"first quarter", epk.Range{Min: "", Max: "10000000000000000000000000000000"}, "08000000000000000000000000000000", true},
		{"last quarter clamps to the hash space", epk.Range{Min: "30000000000000000000000000000000", Max: "FF"}, "38000000000000000000000000000000", true},
		{"inner", epk.Range{Min: "10000000000000000000000000000000", Max: "20000000000000000000000000000000"}, "18000000000000000000000000000000", true},
		{"above the hash space", epk.Range{Min: "3FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", Max: "FF"}, "9F7FFFFFFFFFFFFFFFFFFFFFFFFFFFFF", true},
		{"longer bound", epk.Range{Min: "1000000000000000000000000000000000", Max: "1000000000000000000000000000000002"}, "1000000000000000000000000000000001", true},
		{"too narrow", epk.Range{Min: "10000000000000000000000000000000", Max: "10000000000000000000000000000001"}, "", false},
		{"empty", epk.Range{Min: "20", Max: "10"}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := epkMidpoint(tc.rng)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
			if ok {
				require.Negative(t, epk.Compare(tc.rng.Min, got))
				require.Negative(t, epk.Compare(got, tc.rng.Max))
			}
		})
	}
}
