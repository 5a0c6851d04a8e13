package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample such that at least p percent of
// the samples are less than or equal to it. It does not modify samples. It
// returns 0 for no samples; p <= 0 gives the minimum and p >= 100 the
// maximum. With fewer than 100 samples the 99th percentile is the maximum.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return percentileSorted(sorted, p)
}

// percentileSorted is Percentile on samples already sorted ascending.
func percentileSorted(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// p*n is exact for the integer and half percentiles used here, and so
	// is its division by 100 whenever the true rank is an integer: no
	// floating-point rounding pushes an exact rank up by one.
	rank := int(math.Ceil(p * float64(n) / 100))
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// Summary describes a set of latency samples, in milliseconds.
type Summary struct {
	// N is the number of samples.
	N int `json:"n"`
	// MinMS, P50MS, P90MS, P99MS and MaxMS are nearest-rank percentiles.
	MinMS float64 `json:"min_ms"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// MeanMS is the arithmetic mean.
	MeanMS float64 `json:"mean_ms"`
}

// Summarize computes the Summary of samples (the zero Summary for none).
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return Summary{
		N:      len(sorted),
		MinMS:  ms(sorted[0]),
		P50MS:  ms(percentileSorted(sorted, 50)),
		P90MS:  ms(percentileSorted(sorted, 90)),
		P99MS:  ms(percentileSorted(sorted, 99)),
		MaxMS:  ms(sorted[len(sorted)-1]),
		MeanMS: ms(sum / time.Duration(len(sorted))),
	}
}

// ms converts a duration to milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// Range is a closed interval of durations drawn from uniformly.
type Range struct {
	Min, Max time.Duration
}

// draw returns a uniform value in [r.Min, r.Max] from u in [0, 1).
func (r Range) draw(u float64) time.Duration {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + time.Duration(u*float64(r.Max-r.Min+1))
}

// Mean is the midpoint of the range.
func (r Range) Mean() time.Duration {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + (r.Max-r.Min)/2
}

// String renders the range as "min–max" (or one value when degenerate).
func (r Range) String() string {
	if r.Max <= r.Min {
		return r.Min.String()
	}
	return r.Min.String() + "–" + r.Max.String()
}
