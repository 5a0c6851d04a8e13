package runtime_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime"
)

// telemetryRegistry: Parent runs Child as a sub-orchestration; Child fans
// out three Inc activities and sums them.
func telemetryRegistry() *runtime.Registry {
	reg := runtime.NewRegistry()
	runtime.RegisterActivity(reg, "Inc", func(_ context.Context, n int) (int, error) { return n + 1, nil })
	runtime.RegisterOrchestration(reg, "Child", func(ctx *runtime.OrchestrationContext, n int) (int, error) {
		tasks := []*runtime.Task{ctx.CallActivity("Inc", n), ctx.CallActivity("Inc", n+1), ctx.CallActivity("Inc", n+2)}
		results, err := runtime.JoinAs[int](ctx, tasks...)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, v := range results {
			sum += v
		}
		return sum, nil
	})
	runtime.RegisterOrchestration(reg, "Parent", func(ctx *runtime.OrchestrationContext, n int) (int, error) {
		return runtime.AwaitAs[int](ctx.CallSubOrchestration("Child", n))
	})
	return reg
}

// spansOf returns the ended spans of a trace, by name prefix.
func spansOf(rec *tracetest.SpanRecorder, id trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

// TestOneTracePerOrchestration: the turns of an instance, its
// activities and its sub-orchestration's turns and activities are one
// trace: the client's when it starts the instance inside a span (each
// turn a child of that span, each activity a child of the turn that
// scheduled it), else one the instance's first turn begins.
func TestOneTracePerOrchestration(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := memprovider.NewStore().Open()
	start(t, p, telemetryRegistry(), func(o *runtime.Options) { o.TracerProvider, o.MeterProvider = tp, mp })
	c := runtime.NewClient(p)

	// Started inside a client span.
	cctx, client := tp.Tracer("test").Start(ctx, "client call")
	require.NoError(t, c.StartOrchestration(cctx, "traced", "Parent", 1))
	client.End()
	st, err := c.WaitForOrchestration(ctx, "traced")
	require.NoError(t, err)
	require.Equal(t, runtime.StateCompleted, st.State)
	tid := client.SpanContext().TraceID()
	spans := spansOf(rec, tid)
	require.NotEmpty(t, spans["orchestration Parent"])
	require.NotEmpty(t, spans["orchestration Child"], "the child is in its parent's trace")
	require.Len(t, spans["activity Inc"], 3)
	for _, s := range spans["orchestration Parent"] {
		require.Equal(t, client.SpanContext().SpanID(), s.Parent().SpanID(), "every turn is a child of the span that started the instance")
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
	}
	turnIDs := map[trace.SpanID]bool{}
	for _, s := range spans["orchestration Child"] {
		turnIDs[s.SpanContext().SpanID()] = true
	}
	for _, s := range spans["activity Inc"] {
		require.True(t, turnIDs[s.Parent().SpanID()], "an activity is a child of a turn of its orchestration")
	}
	// A turn's span ends, and its metrics are recorded, once its commit
	// has returned: a waiting client may see the commit first.
	require.Eventually(t, func() bool {
		for _, s := range spansOf(rec, tid)["orchestration Parent"] {
			for _, a := range s.Attributes() {
				if a.Key == runtime.AttrOutcome && a.Value.AsString() == "completed" {
					return true
				}
			}
		}
		return false
	}, 20*time.Second, time.Millisecond, "the completing turn's span")

	// Started without a span: the first turn begins the trace.
	require.NoError(t, c.StartOrchestration(ctx, "untraced", "Child", 10))
	_, err = c.WaitForOrchestration(ctx, "untraced")
	require.NoError(t, err)
	var first sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "orchestration Child" && !s.Parent().IsValid() {
			require.Nil(t, first, "one root turn")
			first = s
		}
	}
	require.NotNil(t, first)
	spans = spansOf(rec, first.SpanContext().TraceID())
	require.Len(t, spans["activity Inc"], 3)
	for _, s := range spans["orchestration Child"] {
		if s != first {
			require.Equal(t, first.SpanContext().SpanID(), s.Parent().SpanID(), "later turns are children of the first")
		}
	}

	// Metrics: counted by name and outcome, with units.
	collect := func() map[string]metricdata.Metrics {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		got := map[string]metricdata.Metrics{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				got[m.Name] = m
			}
		}
		return got
	}
	completedTurns := func(got map[string]metricdata.Metrics) map[string]int64 {
		completed := map[string]int64{}
		sum, _ := got[runtime.MetricTurns].Data.(metricdata.Sum[int64])
		for _, dp := range sum.DataPoints {
			name, _ := dp.Attributes.Value(runtime.AttrOrchestration)
			outcome, _ := dp.Attributes.Value(runtime.AttrOutcome)
			if outcome.AsString() == "completed" {
				completed[name.AsString()] += dp.Value
			}
		}
		return completed
	}
	want := map[string]int64{"Parent": 1, "Child": 2}
	require.Eventually(t, func() bool { return maps.Equal(want, completedTurns(collect())) }, 20*time.Second, time.Millisecond,
		"the completing turns counted: %v", want)
	got := collect()
	require.Equal(t, "{turn}", got[runtime.MetricTurns].Unit)
	require.Equal(t, "s", got[runtime.MetricTurnDuration].Unit)
	require.Equal(t, "{execution}", got[runtime.MetricActivities].Unit)
	require.Equal(t, "s", got[runtime.MetricActivityDuration].Unit)
	var acts int64
	for _, dp := range got[runtime.MetricActivities].Data.(metricdata.Sum[int64]).DataPoints {
		outcome, _ := dp.Attributes.Value(runtime.AttrOutcome)
		require.Equal(t, "completed", outcome.AsString())
		acts += dp.Value
	}
	require.EqualValues(t, 6, acts, "an activity is counted before its completion is acked")
	var timed uint64
	for _, dp := range got[runtime.MetricActivityDuration].Data.(metricdata.Histogram[float64]).DataPoints {
		timed += dp.Count
	}
	require.EqualValues(t, 6, timed)
}

// TestResendFromAnotherSpanIsTheSameCall: the trace context is not part
// of a call, so a start resent with its request id from another span is
// the same start, not a conflicting one.
func TestResendFromAnotherSpanIsTheSameCall(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	tp := sdktrace.NewTracerProvider()
	p := memprovider.NewStore().Open()
	c := runtime.NewClient(p)
	a, spanA := tp.Tracer("test").Start(ctx, "first try")
	require.NoError(t, c.StartOrchestration(a, "resent", "Child", 1, runtime.WithRequestID("req-1")))
	spanA.End()
	b, spanB := tp.Tracer("test").Start(ctx, "second try")
	require.NoError(t, c.StartOrchestration(b, "resent", "Child", 1, runtime.WithRequestID("req-1")))
	spanB.End()
	require.Error(t, c.StartOrchestration(b, "resent", "Child", 2, runtime.WithRequestID("req-1")), "another call under the same id")
}
