package runtime

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// TestUntracedTurnsCarryTheTraceContext: without a tracer provider no
// span is made, but a turn and an activity still run in the trace
// context their instance carries, so it reaches what they schedule.
func TestUntracedTurnsCarryTheTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	in := newInstruments(nil, nil)
	for name, item := range map[string]*durable.OrchestrationItem{
		"with":    {Instance: "i", Messages: []durable.WorkItem{durable.StartOrchestration{Instance: "i", TraceParent: tp}}},
		"without": {Instance: "i", Messages: []durable.WorkItem{durable.StartOrchestration{Instance: "i"}}},
	} {
		want := ""
		if name == "with" {
			want = tp
		}
		ctx, span := in.startTurn(context.Background(), item)
		require.False(t, span.IsRecording(), name)
		turn := durable.OrchestrationTurn{WorkerItems: []durable.WorkItem{durable.ActivityExecute{Instance: "i", Name: "A"}}}
		stampTurn(ctx, &turn)
		require.Equal(t, want, turn.WorkerItems[0].(durable.ActivityExecute).TraceParent, name)
		in.endTurn(ctx, span, "O", "completed", false, time.Now())

		actx, aspan := in.startActivity(context.Background(), durable.ActivityExecute{Instance: "i", TraceParent: want}, 1)
		require.False(t, aspan.IsRecording(), name)
		require.Equal(t, want, traceParent(actx), name)
		in.endActivity(actx, aspan, "A", "completed", nil, time.Now())
	}
}

// BenchmarkTurnTelemetry measures what a turn's telemetry costs the
// dispatcher (its span started and ended, its trace context stamped on
// an activity, its two metrics recorded): with no providers (the no-op
// instruments a library user without OpenTelemetry gets) and with the
// SDK's (an in-memory span recorder and a manual metric reader).
//
//	go test -run '^$' -bench TurnTelemetry -benchmem ./runtime/
func BenchmarkTurnTelemetry(b *testing.B) {
	item := func(tp string) *durable.OrchestrationItem {
		return &durable.OrchestrationItem{Instance: "bench-1", OrchestrationName: "Bench", ExecutionID: 1,
			Messages: []durable.WorkItem{durable.StartOrchestration{Instance: "bench-1", Orchestration: "Bench", TraceParent: tp}}}
	}
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	noop := newInstruments(nil, nil)
	sdk := newInstruments(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder())),
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	for _, bc := range []struct {
		name string
		in   *instruments
		item *durable.OrchestrationItem
	}{
		// An instance started without a trace context, and one whose
		// caller sent one (carried on to its activities).
		{"noop", noop, item("")},
		{"noop-carried", noop, item(tp)},
		{"sdk", sdk, item("")},
		{"sdk-carried", sdk, item(tp)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				tctx, span := bc.in.startTurn(ctx, bc.item)
				turn := durable.OrchestrationTurn{WorkerItems: []durable.WorkItem{durable.ActivityExecute{Instance: "bench-1", Name: "A"}}}
				stampTurn(tctx, &turn)
				bc.in.endTurn(tctx, span, bc.item.OrchestrationName, "completed", false, time.Now())
			}
		})
	}
}
