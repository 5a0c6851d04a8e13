package knobs_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu/knobs"
)

// publishedCharges is Microsoft's table of point-read and write charges by
// document size (Microsoft Learn, "Understand request unit consumption in
// Azure Cosmos DB", session and eventual consistency). docs/BENCHMARKING.md
// shows it beside the model's figures.
var publishedCharges = []struct {
	kib         int
	read, write float64
}{
	{1, 1.00, 4.95}, {2, 1.04, 6.29}, {4, 1.14, 6.67}, {8, 1.33, 7.04}, {16, 1.67, 9.52}, {32, 2.19, 11.23},
	{64, 4.76, 22.67}, {128, 9.95, 48.19}, {256, 20.28, 98.29}, {512, 40.95, 184.57}, {1024, 145.90, 625.00},
	{2048, 291.80, 1250.00},
}

// TestChargeModelAgainstPublishedFigures: for the sizes durafeed's
// documents have (history events, messages and instance documents of at
// most 4 KiB in the benchmarks' workloads) the simulated charges are
// within 15% of Microsoft's; above them the model errs high up to
// 512 KiB (by at most 75%) and low for 1 and 2 MiB documents, which the
// benchmarks' workloads never write.
func TestChargeModelAgainstPublishedFigures(t *testing.T) {
	t.Parallel()
	m := knobs.DefaultChargeModel()
	for _, p := range publishedCharges {
		r, w := m.PointReadCharge(p.kib*1024), m.WriteCharge(p.kib*1024)
		dr, dw := r/p.read-1, w/p.write-1
		switch {
		case p.kib <= 4:
			require.LessOrEqual(t, math.Abs(dr), 0.15, "read of %d KiB: model %.2f, published %.2f", p.kib, r, p.read)
			require.LessOrEqual(t, math.Abs(dw), 0.15, "write of %d KiB: model %.2f, published %.2f", p.kib, w, p.write)
		case p.kib <= 512:
			require.True(t, dr >= 0 && dr <= 0.75, "read of %d KiB: model %.2f, published %.2f", p.kib, r, p.read)
			require.True(t, dw >= 0 && dw <= 0.75, "write of %d KiB: model %.2f, published %.2f", p.kib, w, p.write)
		default:
			require.Negative(t, dr, "read of %d KiB", p.kib)
			require.Negative(t, dw, "write of %d KiB", p.kib)
		}
	}
}
