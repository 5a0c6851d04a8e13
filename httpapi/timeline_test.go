package httpapi_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/httpapi"
)

// t0 is the clock of the hand-made histories, in ms since the epoch.
const t0 = 1_767_225_600_000 // 2026-01-01T00:00:00Z

func hev(id, src, ms uint64, k history.EventKind) history.Event {
	return history.Event{EventID: id, SourceEventID: src, InstanceID: "i", ExecutionID: 1, TimestampMS: ms, RuntimeVersion: "0.1.0", Kind: k}
}

func at(ms uint64) httpapi.Timestamp { return httpapi.Timestamp(time.UnixMilli(int64(ms)).UTC()) }

// span is an expected span: end 0 for none.
func span(kind, name string, sched, start, end uint64, status string) httpapi.Span {
	s := httpapi.Span{Kind: kind, Name: name, ScheduledID: sched, Start: at(start), Status: status}
	if end != 0 {
		e := at(end)
		s.End = &e
	}
	if kind == httpapi.SpanActivity {
		s.Attempts = 1
	}
	return s
}

func turn(n int, sched, ms uint64, status string) httpapi.Span {
	return span(httpapi.SpanTurn, "turn "+string(rune('0'+n)), sched, ms, ms, status)
}

func TestSpans(t *testing.T) {
	t.Parallel()
	const (
		t1 = t0 + 40
		t2 = t0 + 95
		t3 = t0 + 30_007
	)
	started := history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}
	completed := history.OrchestrationCompleted{Output: "1"}
	appFailure := history.ApplicationError(history.AppActivityFailed, "declined", false)
	retried := span(httpapi.SpanActivity, "Flaky", 2, t0, t3, httpapi.SpanCompleted)
	retried.Attempts, retried.AttemptIDs = 2, []uint64{2, 6}
	child := span(httpapi.SpanSubOrchestration, "Child", 2, t0, t1, httpapi.SpanCompleted)
	child.ChildInstanceID = "i::sub::2"
	for _, tc := range []struct {
		name   string
		events []history.Event
		want   []httpapi.Span
	}{
		{name: "empty", events: nil, want: []httpapi.Span{}},
		{
			name: "completed fan-out",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ActivityScheduled{Name: "Square", Input: "1"}),
				hev(3, 0, t0, history.ActivityScheduled{Name: "Square", Input: "2"}),
				hev(4, 0, t0, history.ActivityScheduled{Name: "Square", Input: "3"}),
				hev(5, 3, t1, history.ActivityCompleted{Result: "4"}),
				hev(6, 2, t1, history.ActivityCompleted{Result: "1"}),
				hev(7, 4, t2, history.ActivityCompleted{Result: "9"}),
				hev(8, 0, t2, completed),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Square", 2, t0, t1, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Square", 3, t0, t1, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Square", 4, t0, t2, httpapi.SpanCompleted),
				turn(2, 5, t1, httpapi.SpanCompleted),
				turn(3, 7, t2, httpapi.SpanCompleted),
			},
		},
		{
			name: "timer",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.TimerCreated{FireAtMS: t0 + 30_000}),
				hev(3, 2, t3, history.TimerFired{FireAtMS: t0 + 30_000}),
				hev(4, 0, t3, completed),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				span(httpapi.SpanTimer, "30s", 2, t0, t3, httpapi.SpanCompleted),
				turn(2, 3, t3, httpapi.SpanCompleted),
			},
		},
		{
			name: "event",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ExternalSubscribed{Name: "decision"}),
				hev(3, 0, t1, history.ExternalEvent{Name: "decision", Data: `{"approved":true}`}),
				hev(4, 0, t1, completed),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				turn(2, 3, t1, httpapi.SpanCompleted),
				span(httpapi.SpanEvent, "decision", 3, t1, t1, httpapi.SpanCompleted),
			},
		},
		{
			name: "failed activity fails the orchestration",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ActivityScheduled{Name: "Charge", Input: "42"}),
				hev(3, 2, t1, history.ActivityFailed{Details: appFailure}),
				hev(4, 0, t1, history.OrchestrationFailed{Details: history.ApplicationError(history.AppOrchestrationFailed, "declined", false)}),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Charge", 2, t0, t1, httpapi.SpanFailed),
				turn(2, 3, t1, httpapi.SpanFailed),
			},
		},
		{
			name: "a retried activity is one span of two attempts",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ActivityScheduled{Name: "Flaky", Input: "in"}),
				hev(3, 2, t1, history.ActivityFailed{Details: appFailure}),
				hev(4, 0, t1, history.TimerCreated{FireAtMS: t1 + 50}),
				hev(5, 4, t2, history.TimerFired{FireAtMS: t1 + 50}),
				hev(6, 0, t2, history.ActivityScheduled{Name: "Flaky", Input: "in"}),
				hev(7, 6, t3, history.ActivityCompleted{Result: "ok"}),
				hev(8, 0, t3, completed),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				retried,
				turn(2, 3, t1, httpapi.SpanCompleted),
				span(httpapi.SpanTimer, "50ms", 4, t1, t2, httpapi.SpanCompleted),
				turn(3, 5, t2, httpapi.SpanCompleted),
				turn(4, 7, t3, httpapi.SpanCompleted),
			},
		},
		{
			name: "pending while the execution runs",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ActivityScheduled{Name: "Slow", Input: "1"}),
				hev(3, 0, t0, history.TimerCreated{FireAtMS: t0 + 60_000}),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Slow", 2, t0, 0, httpapi.SpanPending),
				span(httpapi.SpanTimer, "1m0s", 3, t0, 0, httpapi.SpanPending),
			},
		},
		{
			name: "a select's loser is cancelled, what is open at the end too",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ActivityScheduled{Name: "Slow", Input: "1"}),
				hev(3, 0, t0, history.TimerCreated{FireAtMS: t0 + 30}),
				hev(4, 0, t0, history.ActivityScheduled{Name: "Other", Input: "1"}),
				hev(5, 3, t1, history.TimerFired{FireAtMS: t0 + 30}),
				hev(6, 2, t1, history.ActivityCancelRequested{Reason: "select loser"}),
				hev(7, 0, t1, completed),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Slow", 2, t0, t1, httpapi.SpanCancelled),
				span(httpapi.SpanTimer, "30ms", 3, t0, t1, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Other", 4, t0, t1, httpapi.SpanCancelled),
				turn(2, 5, t1, httpapi.SpanCompleted),
			},
		},
		{
			name: "sub-orchestration and continue-as-new",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.SubOrchestrationScheduled{Name: "Child", Instance: "i::sub::2", Input: "{}"}),
				hev(3, 2, t1, history.SubOrchestrationCompleted{Result: "7"}),
				hev(4, 0, t1, history.OrchestrationContinuedAsNew{Input: "8"}),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				child,
				turn(2, 3, t1, httpapi.SpanCompleted),
				span(httpapi.SpanContinueAsNew, "", 4, t1, t1, httpapi.SpanCompleted),
			},
		},
		{
			name: "two turns in one millisecond",
			events: []history.Event{
				hev(1, 0, t0, started),
				hev(2, 0, t0, history.ActivityScheduled{Name: "Fast", Input: "1"}),
				hev(3, 2, t0, history.ActivityCompleted{Result: "1"}),
				hev(4, 0, t0, completed),
			},
			want: []httpapi.Span{
				turn(1, 1, t0, httpapi.SpanCompleted),
				span(httpapi.SpanActivity, "Fast", 2, t0, t0, httpapi.SpanCompleted),
				turn(2, 3, t0, httpapi.SpanCompleted),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := httpapi.Spans(tc.events)
			require.Equal(t, tc.want, got)
			b, err := json.Marshal(got)
			require.NoError(t, err)
			require.NotContains(t, string(b), "declined", "no payload or error in a span")
		})
	}
}

func TestSpanJSON(t *testing.T) {
	t.Parallel()
	s := httpapi.Spans([]history.Event{
		hev(1, 0, t0+7, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
		hev(2, 0, t0+7, history.SubOrchestrationScheduled{Name: "Child", Instance: "c-1", Input: "{}"}),
		hev(3, 0, t0+7, history.ActivityScheduled{Name: "A", Input: "1"}),
	})
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"kind":"turn","name":"turn 1","scheduledId":1,"start":"2026-01-01T00:00:00.007Z","end":"2026-01-01T00:00:00.007Z","status":"completed"},
		{"kind":"suborchestration","name":"Child","scheduledId":2,"start":"2026-01-01T00:00:00.007Z","status":"pending","childInstanceId":"c-1"},
		{"kind":"activity","name":"A","scheduledId":3,"start":"2026-01-01T00:00:00.007Z","status":"pending","attempts":1}
	]`, string(b))
}
