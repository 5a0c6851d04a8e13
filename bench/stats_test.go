package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func durs(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, v := range ms {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func seq(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(n-i) * time.Millisecond // descending: Percentile must sort
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", durs(7), 50, 7 * ms},
		{"single p99", durs(7), 99, 7 * ms},
		{"100 p50", seq(100), 50, 50 * ms},
		{"100 p90", seq(100), 90, 90 * ms},
		{"100 p99 is not rounded up to the max", seq(100), 99, 99 * ms},
		{"100 p100", seq(100), 100, 100 * ms},
		{"1000 p99", seq(1000), 99, 990 * ms},
		{"1000 p99.9", seq(1000), 99.9, 999 * ms},
		{"10 p50 lower middle", seq(10), 50, 5 * ms},
		{"10 p51 next rank", seq(10), 51, 6 * ms},
		{"10 p99 is the max", seq(10), 99, 10 * ms},
		{"50 p99 is the max", seq(50), 99, 50 * ms},
		{"7 p50", seq(7), 50, 4 * ms},
		{"p0 is the min", seq(10), 0, 1 * ms},
		{"above 100 is the max", seq(10), 150, 10 * ms},
		{"negative samples", durs(-3, 5, -1, 2), 50, -1 * ms},
		{"ties", durs(4, 4, 4, 9), 75, 4 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Percentile(tc.samples, tc.p))
		})
	}
}

func TestPercentileLeavesInputAlone(t *testing.T) {
	in := durs(3, 1, 2)
	Percentile(in, 50)
	require.Equal(t, durs(3, 1, 2), in)
}

func TestSummarize(t *testing.T) {
	require.Equal(t, Summary{}, Summarize(nil))
	s := Summarize(seq(100))
	require.Equal(t, Summary{N: 100, MinMS: 1, P50MS: 50, P90MS: 90, P99MS: 99, MaxMS: 100, MeanMS: 50.5}, s)
	s = Summarize([]time.Duration{1500 * time.Microsecond, 2500*time.Microsecond + 400})
	require.Equal(t, 1.5, s.P50MS)
	require.Equal(t, 2.5, s.MaxMS, "rounded to the microsecond")
	require.Equal(t, 2.0, s.MeanMS)
}

func TestRange(t *testing.T) {
	r := Range{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	require.Equal(t, r.Min, r.draw(0))
	require.LessOrEqual(t, r.draw(0.999999999), r.Max)
	require.Greater(t, r.draw(0.999999999), 19*time.Millisecond)
	require.Equal(t, 15*time.Millisecond, r.Mean())
	require.Equal(t, "10ms–20ms", r.String())
	d := Range{Min: time.Second, Max: time.Second}
	require.Equal(t, time.Second, d.draw(0.7))
	require.Equal(t, "1s", d.String())
}

func TestUsageSub(t *testing.T) {
	a := Usage{Requests: 10, RequestCharge: 30.5, ByOperation: map[string]OpUsage{"Query": {8, 27.5}, "Read": {2, 3}}}
	b := Usage{Requests: 4, RequestCharge: 10, ByOperation: map[string]OpUsage{"Query": {2, 7}, "Read": {2, 3}}}
	require.Equal(t, Usage{Requests: 6, RequestCharge: 20.5, ByOperation: map[string]OpUsage{"Query": {6, 20.5}}}, a.sub(b))
}

func TestTopOps(t *testing.T) {
	m := map[string]OpRate{"Read": {RUPerMin: 1}, "Query": {RUPerMin: 9.2}, "ChangeFeed": {RUPerMin: 4}, "Batch": {RUPerMin: 4}}
	require.Equal(t, "Query 9.2, Batch 4.0, ChangeFeed 4.0", topOps(m, 3))
}

// TestBackstopString: the backstop's column.
func TestBackstopString(t *testing.T) {
	require.Equal(t, "every 60s, none seen", (&Backstop{PeriodS: 60}).String())
	require.Equal(t, "every 60s: 1.00/min, 12.5 RU each", (&Backstop{PeriodS: 60, Sweeps: 3, SweepsPerMin: 1, RUPerSweep: 12.5}).String())
	require.Equal(t, "—", (*Backstop)(nil).String())
}
