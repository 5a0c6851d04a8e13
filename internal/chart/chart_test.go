package chart

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

// TestWiden: a log axis always gets a drawable, non-empty range.
func TestWiden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ min, max, wantMin, wantMax float64 }{
		{min: 0, max: 0, wantMin: 0.005, wantMax: 0.02},
		{min: 5, max: 5, wantMin: 2.5, wantMax: 10},
		{min: -3, max: 40, wantMin: 0.01, wantMax: 40},
		{min: 1, max: 100, wantMin: 1, wantMax: 100},
	} {
		a := plot.Axis{Min: tc.min, Max: tc.max}
		Widen(&a)
		require.InDelta(t, tc.wantMin, a.Min, 1e-12)
		require.InDelta(t, tc.wantMax, a.Max, 1e-12)
	}
}

// TestAddLine: a series lands in the plot (its axes take its range); a
// series with a bad point is refused.
func TestAddLine(t *testing.T) {
	t.Parallel()
	p := plot.New()
	require.NoError(t, AddLine(p, "a", plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: 3}}, ModeColor(0), true))
	require.Equal(t, []float64{1, 2, 2, 3}, []float64{p.X.Min, p.X.Max, p.Y.Min, p.Y.Max})
	require.Error(t, AddLine(p, "b", plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: nan()}}, ModeColor(1), false))
	require.NotEqual(t, ModeColor(0), ModeColor(1))
	require.Equal(t, ModeColor(0), ModeColor(3))
}

func nan() float64 { return math.NaN() }
