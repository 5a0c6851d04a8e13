// Package chart holds the drawing helpers the bench's and the fleet's
// pictures share: latency lines on log axes, one colour per mode.
package chart

import (
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Positive is v, or 0.01 when v is smaller: a value a log axis can draw.
func Positive(v float64) float64 { return math.Max(v, 0.01) }

// Widen gives a log axis a range it can draw: a single value (one load,
// or equal figures) becomes the octave around it, and nothing reaches 0.
func Widen(a *plot.Axis) {
	a.Min = Positive(a.Min)
	a.Max = Positive(a.Max)
	if a.Min >= a.Max {
		a.Min, a.Max = a.Min/2, a.Max*2
	}
}

// AddLine adds one series with its points to p, and to p's legend as
// name: solid, or dashed with triangles.
func AddLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashed bool) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, pts.Color = c, c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		pts.Shape = draw.TriangleGlyph{}
	}
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}

// ModeColor is the colour of the k-th mode (blue, red, green, again).
func ModeColor(k int) color.Color {
	palette := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}}
	return palette[k%len(palette)]
}
