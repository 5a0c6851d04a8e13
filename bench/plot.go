package bench

import (
	"fmt"
	"io"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/durafeed/durafeed/internal/chart"
)

// WriteSweepPNG draws the sweep as a PNG: one column per injected
// latency; the top row is wake latency (p50 solid, p99 dashed) against the
// mean gap between arrivals, the bottom row RU per minute against the same
// axis, both modes, log axes. The burst load, which has no mean gap, is
// in the tables only. It fails when the report has no sweep result.
func (r *Report) WriteSweepPNG(w io.Writer) error {
	var lats []float64
	for _, s := range r.Sweep {
		if _, ok := sweepX(s); ok && s.N > 0 && !slices.Contains(lats, s.InjectedLatencyMS) {
			lats = append(lats, s.InjectedLatencyMS)
		}
	}
	if len(lats) == 0 {
		return fmt.Errorf("bench: no sweep result to draw")
	}
	slices.Sort(lats)
	rows := [][]*plot.Plot{make([]*plot.Plot, len(lats)), make([]*plot.Plot, len(lats))}
	for j, lat := range lats {
		lp, cp := plot.New(), plot.New()
		lp.Title.Text = fmt.Sprintf("wake latency, %g ms injected", lat)
		lp.Y.Label.Text = "ms (p50 solid, p99 dashed)"
		cp.Title.Text = fmt.Sprintf("cost, %g ms injected", lat)
		cp.Y.Label.Text = "RU per minute"
		for _, p := range []*plot.Plot{lp, cp} {
			p.X.Label.Text = "mean gap between arrivals (s)"
			p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
			p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
			p.Legend.Top = true
		}
		for k, m := range Modes {
			var p50, p99, cost plotter.XYs
			for _, s := range r.Sweep {
				x, ok := sweepX(s)
				if !ok || s.Mode != m || s.InjectedLatencyMS != lat || s.N == 0 {
					continue
				}
				p50 = append(p50, plotter.XY{X: x, Y: chart.Positive(s.P50MS)})
				p99 = append(p99, plotter.XY{X: x, Y: chart.Positive(s.P99MS)})
				cost = append(cost, plotter.XY{X: x, Y: chart.Positive(s.RUPerMin)})
			}
			if len(p50) == 0 {
				continue
			}
			byX := func(a, b plotter.XY) int {
				switch {
				case a.X < b.X:
					return -1
				case a.X > b.X:
					return 1
				}
				return 0
			}
			slices.SortFunc(p50, byX)
			slices.SortFunc(p99, byX)
			slices.SortFunc(cost, byX)
			c := chart.ModeColor(k)
			if err := chart.AddLine(lp, string(m)+" p50", p50, c, false); err != nil {
				return err
			}
			if err := chart.AddLine(lp, string(m)+" p99", p99, c, true); err != nil {
				return err
			}
			if err := chart.AddLine(cp, string(m), cost, c, false); err != nil {
				return err
			}
		}
		// Room above the highest line for the legend (a log axis: a
		// factor of ten is a band as high as a decade).
		lp.Y.Max *= 10
		for _, p := range []*plot.Plot{lp, cp} {
			chart.Widen(&p.X)
			chart.Widen(&p.Y)
		}
		rows[0][j], rows[1][j] = lp, cp
	}
	width, height := vg.Length(len(lats))*12*vg.Centimeter, 20*vg.Centimeter
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: len(lats), PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		for j := range rows[i] {
			rows[i][j].Draw(canvases[i][j])
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
