package runtime

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// InstrumentationName names the runtime's tracer and meter.
const InstrumentationName = "github.com/durafeed/durafeed/runtime"

// Span and metric attribute keys.
const (
	AttrInstance      = attribute.Key("durafeed.instance.id")
	AttrExecution     = attribute.Key("durafeed.execution.id")
	AttrOrchestration = attribute.Key("durafeed.orchestration.name")
	AttrActivity      = attribute.Key("durafeed.activity.name")
	AttrActivityID    = attribute.Key("durafeed.activity.id")
	AttrAttempt       = attribute.Key("durafeed.attempt")
	AttrOutcome       = attribute.Key("durafeed.outcome")
)

// Metric names (units in the instruments' definitions below; DESIGN's
// table lists them).
const (
	MetricTurns            = "durafeed.orchestration.turns"
	MetricTurnDuration     = "durafeed.orchestration.turn.duration"
	MetricActivities       = "durafeed.activity.executions"
	MetricActivityDuration = "durafeed.activity.duration"
)

// traceContext is the W3C trace-context format of the traceparent fields
// carried by start messages, activity items and OrchestrationStarted.
var traceContext = propagation.TraceContext{}

// traceParent returns the W3C traceparent of ctx's span ("" without a
// valid one).
func traceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c.Get("traceparent")
}

// withTraceParent returns ctx with the remote span context tp names (ctx
// itself when tp is empty or invalid).
func withTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// instruments are the runtime's tracer and metric instruments: no-ops
// unless Options names providers. Without a provider its part costs
// nothing but a branch: no span or attribute is built (the trace context
// an instance carries is still passed on).
type instruments struct {
	traced, metered  bool
	tracer           trace.Tracer
	turns            metric.Int64Counter
	turnDuration     metric.Float64Histogram
	activities       metric.Int64Counter
	activityDuration metric.Float64Histogram
}

// secondBuckets returns the duration histograms' bounds, in seconds: 1 ms
// to a minute.
func secondBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
}

func newInstruments(tp trace.TracerProvider, mp metric.MeterProvider) *instruments {
	traced, metered := tp != nil, mp != nil
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(InstrumentationName)
	in := &instruments{traced: traced, metered: metered, tracer: tp.Tracer(InstrumentationName)}
	// An instrument the SDK refuses is a no-op one (the error says why;
	// the names here are valid).
	in.turns, _ = m.Int64Counter(MetricTurns, metric.WithUnit("{turn}"),
		metric.WithDescription("orchestration turns run, by orchestration and outcome"))
	in.turnDuration, _ = m.Float64Histogram(MetricTurnDuration, metric.WithUnit("s"),
		metric.WithDescription("time from a turn's fetch to its commit"), metric.WithExplicitBucketBoundaries(secondBuckets()...))
	in.activities, _ = m.Int64Counter(MetricActivities, metric.WithUnit("{execution}"),
		metric.WithDescription("activity executions, by activity and outcome"))
	in.activityDuration, _ = m.Float64Histogram(MetricActivityDuration, metric.WithUnit("s"),
		metric.WithDescription("time an activity's code ran"), metric.WithExplicitBucketBoundaries(secondBuckets()...))
	return in
}

// instanceTrace is the traceparent of the instance's trace as the fetched
// item knows it: its execution's OrchestrationStarted, or the start
// message of a first turn.
func instanceTrace(item *durable.OrchestrationItem) string {
	if len(item.History) > 0 {
		if st, ok := item.History[0].Kind.(history.OrchestrationStarted); ok {
			return st.TraceParent
		}
	}
	for _, m := range item.Messages {
		if s, ok := m.(durable.StartOrchestration); ok {
			return s.TraceParent
		}
	}
	return ""
}

// startTurn starts the span of an orchestration turn, in the instance's
// trace (a new trace for a first turn that carries none).
func (in *instruments) startTurn(ctx context.Context, item *durable.OrchestrationItem) (context.Context, trace.Span) {
	if !in.traced {
		ctx = withTraceParent(ctx, instanceTrace(item))
		return ctx, trace.SpanFromContext(ctx)
	}
	return in.tracer.Start(withTraceParent(ctx, instanceTrace(item)), "orchestration "+item.OrchestrationName,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrInstance.String(item.Instance), AttrExecution.Int64(int64(item.ExecutionID)),
			AttrOrchestration.String(item.OrchestrationName), AttrAttempt.Int64(int64(item.AttemptCount))))
}

// stampTurn gives the turn's activities and the instances it starts the
// turn span's trace context.
func stampTurn(ctx context.Context, turn *durable.OrchestrationTurn) {
	tp := traceParent(ctx)
	if tp == "" {
		return
	}
	for i, w := range turn.WorkerItems {
		if a, ok := w.(durable.ActivityExecute); ok && a.TraceParent == "" {
			a.TraceParent = tp
			turn.WorkerItems[i] = a
		}
	}
	for i, w := range turn.OrchestratorItems {
		if s, ok := w.(durable.StartOrchestration); ok && s.TraceParent == "" {
			s.TraceParent = tp
			turn.OrchestratorItems[i] = s
		}
	}
}

// endTurn ends a turn's span and records it.
func (in *instruments) endTurn(ctx context.Context, span trace.Span, name, outcome string, failed bool, began time.Time) {
	in.end(ctx, span, in.turns, in.turnDuration, AttrOrchestration.String(name), outcome, failed, began)
}

// startActivity starts the span of an activity execution, a child of the
// turn that scheduled it.
func (in *instruments) startActivity(ctx context.Context, act durable.ActivityExecute, attempt uint32) (context.Context, trace.Span) {
	if !in.traced {
		ctx = withTraceParent(ctx, act.TraceParent)
		return ctx, trace.SpanFromContext(ctx)
	}
	return in.tracer.Start(withTraceParent(ctx, act.TraceParent), "activity "+act.Name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrInstance.String(act.Instance), AttrExecution.Int64(int64(act.ExecutionID)),
			AttrActivity.String(act.Name), AttrActivityID.Int64(int64(act.ID)), AttrAttempt.Int64(int64(attempt))))
}

// endActivity ends an activity's span and records it.
func (in *instruments) endActivity(ctx context.Context, span trace.Span, name, outcome string, err error, began time.Time) {
	in.end(ctx, span, in.activities, in.activityDuration, AttrActivity.String(name), outcome, err != nil, began)
}

// end ends the span of a turn or an activity with its outcome, and counts
// and times it under what (its orchestration or activity) and the outcome.
func (in *instruments) end(ctx context.Context, span trace.Span, count metric.Int64Counter, took metric.Float64Histogram,
	what attribute.KeyValue, outcome string, failed bool, began time.Time) {
	if in.traced {
		span.SetAttributes(AttrOutcome.String(outcome))
		if failed {
			span.SetStatus(codes.Error, outcome)
		}
		span.End()
	}
	if !in.metered {
		return
	}
	attrs := metric.WithAttributes(what, AttrOutcome.String(outcome))
	count.Add(ctx, 1, attrs)
	took.Record(ctx, time.Since(began).Seconds(), attrs)
}
