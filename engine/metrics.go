package engine

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// Metric names of the event-driven engine (DESIGN's telemetry table).
const (
	MetricWakeLatency = "durafeed.engine.wake.latency"
	MetricSlotsOwned  = "durafeed.engine.slots.owned"
	MetricFeedPending = "durafeed.engine.feed.pending"
	MetricFeedLagAge  = "durafeed.engine.feed.lag"
	// MetricPeerWakeSilent counts the peers found sending into a silent
	// peer wake channel: a peer's heartbeat reports wake frames written
	// to this replica, none arrived (once per peer each time it goes
	// silent; no attributes, the log line names the peer).
	MetricPeerWakeSilent = "durafeed.engine.peerwake.silent"
	// MetricPeerWakePeersSilent is the number of peers whose channel to
	// this replica is silent now.
	MetricPeerWakePeersSilent = "durafeed.engine.peerwake.peers_silent"
)

// AttrQueue names the queue of a wake latency: orchestrator or worker.
const AttrQueue = attribute.Key("durafeed.queue")

// meters are the engine's instruments and the registration of its
// observed gauges (unregistered at Close).
type meters struct {
	wake   metric.Float64Histogram
	silent metric.Int64Counter
	reg    metric.Registration
	// peersSilent is the number of peers the session's check finds
	// silent now (MetricPeerWakePeersSilent, PeerWakeStats.PeersSilent).
	peersSilent atomic.Int64
}

// startMeters creates the instruments on mp (nil: no-op).
func (e *Engine) startMeters(mp metric.MeterProvider) {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/durafeed/durafeed/engine")
	e.met.wake, _ = m.Float64Histogram(MetricWakeLatency, metric.WithUnit("s"),
		metric.WithDescription("from a message becoming takeable (its enqueue by the writer's clock, or a timer's time) to the fetch that took it"),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	owned, _ := m.Int64ObservableGauge(MetricSlotsOwned, metric.WithUnit("{slot}"),
		metric.WithDescription("dispatch slots whose lease this replica holds (of 256)"))
	pending, _ := m.Int64ObservableGauge(MetricFeedPending, metric.WithUnit("{change}"),
		metric.WithDescription("estimated changes not yet handled on the held leases' feeds (an upper bound; changefeed.RangeLag)"))
	age, _ := m.Float64ObservableGauge(MetricFeedLagAge, metric.WithUnit("s"),
		metric.WithDescription("age of the oldest change read or found but not yet handled (0: none)"))
	e.met.silent, _ = m.Int64Counter(MetricPeerWakeSilent, metric.WithUnit("{peer}"),
		metric.WithDescription("peers found silent: their heartbeat reports peer wake frames written to this replica, none arrived"))
	silent, _ := m.Int64ObservableGauge(MetricPeerWakePeersSilent, metric.WithUnit("{peer}"),
		metric.WithDescription("peers whose peer wake channel to this replica is silent now"))
	e.met.reg, _ = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveInt64(owned, int64(e.ownedSet().Len()))
		if e.opts.PeerWake != nil {
			o.ObserveInt64(silent, e.met.peersSilent.Load())
		}
		s := e.sess.Load()
		if s == nil || s.proc == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		lags, _ := s.proc.Lag(ctx) // figures that could be made; a probe's error leaves its range out
		var n int64
		var oldest time.Time
		for _, l := range lags {
			if l.PendingLSNs > 0 {
				n += l.PendingLSNs
			}
			if !l.OldestPending.IsZero() && (oldest.IsZero() || l.OldestPending.Before(oldest)) {
				oldest = l.OldestPending
			}
		}
		o.ObserveInt64(pending, n)
		a := 0.0
		if !oldest.IsZero() {
			a = max(0, e.clk.Now().Sub(oldest).Seconds())
		}
		o.ObserveFloat64(age, a)
		return nil
	}, owned, pending, age, silent)
}

// stopMeters unregisters the observed gauges.
func (e *Engine) stopMeters() {
	if e.met.reg != nil {
		_ = e.met.reg.Unregister()
	}
}

// wakeLatency records the wake latency of a message that became
// takeable at due (unix ms; 0: unknown).
func (e *Engine) wakeLatency(queue string, due int64) {
	if due <= 0 {
		return
	}
	d := e.clk.Now().Sub(msTime(due)).Seconds()
	e.met.wake.Record(context.Background(), max(0, d), metric.WithAttributes(AttrQueue.String(queue)))
}
