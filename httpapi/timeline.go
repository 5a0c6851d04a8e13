package httpapi

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/durable/history"
)

// Timestamp is a time written in JSON as RFC 3339 in UTC with
// milliseconds ("2026-01-02T15:04:05.678Z"), the precision of the
// history's clock.
type Timestamp time.Time

// timestampLayout is Timestamp's JSON form.
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Time returns t as a time.Time.
func (t Timestamp) Time() time.Time { return time.Time(t) }

// MarshalJSON implements json.Marshaler.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(timestampLayout) + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler: any RFC 3339 time.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = Timestamp(v)
	return nil
}

// msStamp is a history clock reading (ms since the epoch) as a Timestamp.
func msStamp(ms uint64) Timestamp { return Timestamp(time.UnixMilli(int64(ms)).UTC()) }

// The kinds of a Span.
const (
	SpanTurn             = "turn"
	SpanActivity         = "activity"
	SpanTimer            = "timer"
	SpanSubOrchestration = "suborchestration"
	SpanEvent            = "event"
	SpanContinueAsNew    = "continueAsNew"
)

// The statuses of a Span.
const (
	SpanCompleted = "completed"
	SpanFailed    = "failed"
	SpanPending   = "pending"
	SpanCancelled = "cancelled"
)

// Span is one bar or mark of an execution's timeline (Spans).
type Span struct {
	// Kind is SpanTurn, SpanActivity, SpanTimer, SpanSubOrchestration,
	// SpanEvent or SpanContinueAsNew.
	Kind string `json:"kind"`
	// Name is the activity's, sub-orchestration's or event's name, a
	// timer's duration ("30s"), "turn <n>" for a turn; "" for
	// continue-as-new.
	Name string `json:"name,omitempty"`
	// ScheduledID is the id of the event that opened the span: the
	// scheduling event that completions refer to (for an activity with
	// retries, its first attempt's), an event's own id, a turn's first
	// event.
	ScheduledID uint64 `json:"scheduledId"`
	// Start is when the span opened, End when it closed: both the clock
	// of the turn that recorded them. End is absent while the span is
	// pending. Turns, events and continue-as-new are instants (the
	// runtime stamps a turn's events with one clock reading).
	Start Timestamp  `json:"start"`
	End   *Timestamp `json:"end,omitempty"`
	// Status is SpanCompleted, SpanFailed, SpanPending or SpanCancelled
	// (a cancellation was recorded, or the execution ended first).
	Status string `json:"status"`
	// Attempts is an activity's number of attempts (1 without retries);
	// absent for the other kinds.
	Attempts int `json:"attempts,omitempty"`
	// AttemptIDs are the scheduling event ids of every attempt, when
	// there was more than one.
	AttemptIDs []uint64 `json:"attemptIds,omitempty"`
	// ChildInstanceID is a sub-orchestration's instance id.
	ChildInstanceID string `json:"childInstanceId,omitempty"`
}

// Spans computes the timeline of one execution from its history (events
// ordered by id), in the order the spans opened:
//
//   - an activity runs from its ActivityScheduled to the ActivityCompleted
//     or ActivityFailed naming it (SourceEventID), cancelled by an
//     ActivityCancelRequested. A schedule of the same activity with the
//     same input after its failure is its next attempt (how WithRetry
//     retries; the history marks retries no other way): the span keeps
//     its first start and takes the last attempt's end and status;
//   - a timer runs from TimerCreated to TimerFired;
//   - a sub-orchestration from SubOrchestrationScheduled to its
//     SubOrchestrationCompleted or SubOrchestrationFailed, cancelled by a
//     SubOrchestrationCancelRequested;
//   - external events (ExternalEvent, QueueEventDelivered) and
//     continue-as-new are instants;
//   - a turn is the run of events one turn committed. The history has no
//     turn marker: a turn's events share its clock reading, and within a
//     turn the messages it consumed (completions, events, the start, a
//     cancellation) come before what it decided, so a turn starts where
//     the clock changes or a consumed message follows a decision.
//
// A span still open when the execution ended (a terminal event) is
// cancelled, ending there; one still open in a running execution is
// pending, without an end. Spans reads nothing but events, and keeps no
// payload.
func Spans(events []history.Event) []Span {
	var (
		out    []Span
		open   = map[uint64]int{} // scheduling id → index in out, while the span is open
		failed = map[string]int{} // activity name+input → index of its span whose last attempt failed
		key    = map[int]string{} // activity span index → its name+input
		turn   = -1               // index of the current turn in out
		turns  int
		prev   *history.Event
	)
	closeSpan := func(i int, ev history.Event, status string) {
		end := msStamp(ev.TimestampMS)
		out[i].End, out[i].Status = &end, status
	}
	for n := range events {
		ev := events[n]
		if ev.Kind == nil {
			continue
		}
		if prev == nil || ev.TimestampMS != prev.TimestampMS || (consumed(ev.Kind) && !consumed(prev.Kind)) {
			turns++
			out = append(out, Span{Kind: SpanTurn, Name: fmt.Sprintf("turn %d", turns), ScheduledID: ev.EventID,
				Start: msStamp(ev.TimestampMS), Status: SpanCompleted})
			turn = len(out) - 1
		}
		end := msStamp(ev.TimestampMS)
		out[turn].End = &end
		prev = &events[n]
		at := msStamp(ev.TimestampMS)
		switch k := ev.Kind.(type) {
		case history.ActivityScheduled:
			ak := k.Name + "\x00" + k.Input
			if i, ok := failed[ak]; ok {
				delete(failed, ak)
				out[i].Attempts++
				if len(out[i].AttemptIDs) == 0 {
					out[i].AttemptIDs = []uint64{out[i].ScheduledID}
				}
				out[i].AttemptIDs = append(out[i].AttemptIDs, ev.EventID)
				out[i].End, out[i].Status = nil, SpanPending
				open[ev.EventID] = i
				continue
			}
			out = append(out, Span{Kind: SpanActivity, Name: k.Name, ScheduledID: ev.EventID, Start: at, Status: SpanPending, Attempts: 1})
			i := len(out) - 1
			open[ev.EventID], key[i] = i, ak
		case history.ActivityCompleted:
			if i, ok := open[ev.SourceEventID]; ok {
				delete(open, ev.SourceEventID)
				closeSpan(i, ev, SpanCompleted)
			}
		case history.ActivityFailed:
			if i, ok := open[ev.SourceEventID]; ok {
				delete(open, ev.SourceEventID)
				closeSpan(i, ev, SpanFailed)
				failed[key[i]] = i
			}
		case history.TimerCreated:
			name := ""
			if k.FireAtMS >= ev.TimestampMS {
				name = (time.Duration(k.FireAtMS-ev.TimestampMS) * time.Millisecond).String()
			}
			out = append(out, Span{Kind: SpanTimer, Name: name, ScheduledID: ev.EventID, Start: at, Status: SpanPending})
			open[ev.EventID] = len(out) - 1
		case history.TimerFired:
			if i, ok := open[ev.SourceEventID]; ok {
				delete(open, ev.SourceEventID)
				closeSpan(i, ev, SpanCompleted)
			}
		case history.SubOrchestrationScheduled:
			out = append(out, Span{Kind: SpanSubOrchestration, Name: k.Name, ScheduledID: ev.EventID, Start: at, Status: SpanPending,
				ChildInstanceID: k.Instance})
			open[ev.EventID] = len(out) - 1
		case history.SubOrchestrationCompleted:
			if i, ok := open[ev.SourceEventID]; ok {
				delete(open, ev.SourceEventID)
				closeSpan(i, ev, SpanCompleted)
			}
		case history.SubOrchestrationFailed:
			if i, ok := open[ev.SourceEventID]; ok {
				delete(open, ev.SourceEventID)
				closeSpan(i, ev, SpanFailed)
			}
		case history.ActivityCancelRequested, history.SubOrchestrationCancelRequested:
			if i, ok := open[ev.SourceEventID]; ok {
				delete(open, ev.SourceEventID)
				closeSpan(i, ev, SpanCancelled)
			}
		case history.ExternalEvent:
			out = append(out, Span{Kind: SpanEvent, Name: k.Name, ScheduledID: ev.EventID, Start: at, End: &at, Status: SpanCompleted})
		case history.QueueEventDelivered:
			out = append(out, Span{Kind: SpanEvent, Name: k.Name, ScheduledID: ev.EventID, Start: at, End: &at, Status: SpanCompleted})
		case history.OrchestrationContinuedAsNew:
			out = append(out, Span{Kind: SpanContinueAsNew, ScheduledID: ev.EventID, Start: at, End: &at, Status: SpanCompleted})
		case history.OrchestrationFailed:
			out[turn].Status = SpanFailed
		}
		if ev.IsTerminal() {
			for id, i := range open {
				delete(open, id)
				closeSpan(i, ev, SpanCancelled)
			}
		}
	}
	if out == nil {
		out = []Span{}
	}
	return out
}

// consumed reports whether an event records a message a turn consumed
// (what comes first in a turn), rather than something the turn decided.
func consumed(k history.EventKind) bool {
	switch k.(type) {
	case history.OrchestrationStarted, history.ActivityCompleted, history.ActivityFailed, history.TimerFired,
		history.SubOrchestrationCompleted, history.SubOrchestrationFailed, history.ExternalEvent,
		history.QueueEventDelivered, history.OrchestrationCancelRequested:
		return true
	}
	return false
}
