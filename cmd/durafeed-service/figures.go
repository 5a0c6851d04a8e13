package main

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/store"
)

// Sampling of the service's own metrics for GET /v1/engine.
const (
	// sampleEvery is how often the sampler reads the metrics.
	sampleEvery = 5 * time.Second
	// sampleWindow is the span of the rates and quantiles: the last
	// minute.
	sampleWindow = time.Minute
)

// reading is one sample of the metrics GET /v1/engine reports on:
// cumulative sums (of every attribute set) since the process started,
// and the feed gauges as last observed.
type reading struct {
	at                         time.Time
	requests, units, throttled float64
	wakeBounds                 []float64 // the wake latency histogram's bounds (s); nil: none recorded
	wakeCounts                 []uint64  // its bucket counts, summed over the queues
	feedPending                *int64
	feedLag                    *float64
	hasRequests                bool // the request counter exists (the provider made a request)
}

// sampler keeps a small ring of samples of the service's metrics, one
// every sampleEvery over the last sampleWindow, read from a manual
// reader of the service's MeterProvider; figures turns them into
// per-minute rates and quantiles. Each reading runs the observable
// gauges' callbacks, as a Prometheus scrape does (the engine's feed-lag
// estimate is passive unless a reader's last answer is stale).
type sampler struct {
	reader  *sdkmetric.ManualReader
	every   time.Duration
	replica string // GET /v1/engine's replica when the provider names none

	mu   sync.Mutex
	ring []reading // oldest first, at most sampleWindow/every + 1
}

func newSampler(r *sdkmetric.ManualReader, every time.Duration, replica string) *sampler {
	if every <= 0 {
		every = sampleEvery
	}
	return &sampler{reader: r, every: every, replica: replica}
}

// run samples at once, then every s.every, until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.collect(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// collect reads the metrics once and keeps the reading; a failed reading
// (the provider shut down) is skipped.
func (s *sampler) collect(ctx context.Context, now time.Time) {
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(ctx, &rm); err != nil {
		return
	}
	smp := readSample(&rm)
	smp.at = now
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = append(s.ring, smp)
	if keep := int(sampleWindow/s.every) + 1; len(s.ring) > keep {
		s.ring = slices.Delete(s.ring, 0, len(s.ring)-keep)
	}
}

// readSample picks the figures of a reading out of the collected metrics.
func readSample(rm *metricdata.ResourceMetrics) reading {
	var smp reading
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case store.MetricRequests:
				smp.requests += sumOf(m.Data)
				smp.hasRequests = true
			case store.MetricRequestUnits:
				smp.units += sumOf(m.Data)
			case store.MetricThrottles:
				smp.throttled += sumOf(m.Data)
			case engine.MetricWakeLatency:
				if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
					for _, dp := range h.DataPoints {
						if smp.wakeBounds == nil {
							smp.wakeBounds, smp.wakeCounts = slices.Clone(dp.Bounds), make([]uint64, len(dp.BucketCounts))
						}
						if slices.Equal(smp.wakeBounds, dp.Bounds) && len(dp.BucketCounts) == len(smp.wakeCounts) {
							for i, c := range dp.BucketCounts {
								smp.wakeCounts[i] += c
							}
						}
					}
				}
			case engine.MetricFeedPending:
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && len(g.DataPoints) > 0 {
					v := g.DataPoints[0].Value
					smp.feedPending = &v
				}
			case engine.MetricFeedLagAge:
				if g, ok := m.Data.(metricdata.Gauge[float64]); ok && len(g.DataPoints) > 0 {
					v := g.DataPoints[0].Value
					smp.feedLag = &v
				}
			}
		}
	}
	return smp
}

// sumOf is the total of a counter's data points.
func sumOf(d metricdata.Aggregation) float64 {
	var n float64
	switch s := d.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range s.DataPoints {
			n += float64(dp.Value)
		}
	case metricdata.Sum[float64]:
		for _, dp := range s.DataPoints {
			n += dp.Value
		}
	}
	return n
}

// figures is httpapi.Options.EngineFigures: the request rates and wake
// latency quantiles between the oldest and the newest reading of the ring
// (the last minute, or since the service started), and the feed gauges
// of the newest. It reads nothing.
func (s *sampler) figures() httpapi.EngineFigures {
	f := httpapi.EngineFigures{Replica: s.replica}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ring) == 0 {
		return f
	}
	last := s.ring[len(s.ring)-1]
	f.FeedPendingChanges, f.FeedLagSeconds = last.feedPending, last.feedLag
	if len(s.ring) < 2 {
		return f
	}
	first := s.ring[0]
	span := last.at.Sub(first.at)
	if span <= 0 {
		return f
	}
	if last.hasRequests {
		per := func(a, b float64) float64 { return round2(max(0, b-a) / span.Minutes()) }
		f.Requests = &httpapi.RequestRates{RUPerMin: per(first.units, last.units), ThrottledPerMin: per(first.throttled, last.throttled),
			RequestsPerMin: per(first.requests, last.requests), WindowSeconds: round2(span.Seconds())}
	}
	f.WakeLatencyMs = wakeQuantiles(first, last)
	return f
}

// wakeQuantiles estimates the wake latency's median and 99th percentile
// in ms from the histogram's bucket counts gained between two samples
// (linear within a bucket; the open last bucket counts as its lower
// bound); nil when no wake was recorded in between.
func wakeQuantiles(first, last reading) *httpapi.LatencyQuantiles {
	if len(last.wakeBounds) == 0 {
		return nil
	}
	delta := slices.Clone(last.wakeCounts)
	if slices.Equal(first.wakeBounds, last.wakeBounds) && len(first.wakeCounts) == len(delta) {
		for i := range delta {
			delta[i] -= min(delta[i], first.wakeCounts[i])
		}
	}
	var total uint64
	for _, c := range delta {
		total += c
	}
	if total == 0 {
		return nil
	}
	q := func(p float64) float64 {
		rank := p * float64(total)
		var cum float64
		for i, c := range delta {
			if c == 0 {
				continue
			}
			if cum+float64(c) >= rank {
				b := last.wakeBounds
				if i >= len(b) {
					return b[len(b)-1] * 1000
				}
				lo := 0.0
				if i > 0 {
					lo = b[i-1]
				}
				return (lo + (b[i]-lo)*(rank-cum)/float64(c)) * 1000
			}
			cum += float64(c)
		}
		return last.wakeBounds[len(last.wakeBounds)-1] * 1000
	}
	return &httpapi.LatencyQuantiles{P50: round2(q(0.5)), P99: round2(q(0.99))}
}

// round2 rounds to two decimals, which is all a figure of the dashboard
// means.
func round2(x float64) float64 { return math.Round(x*100) / 100 }
