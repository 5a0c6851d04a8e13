package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/durafeed/durafeed/durable/history"
)

// History limits.
const (
	// DefaultHistoryLimit and MaxHistoryLimit bound the events of a
	// history answer (its limit parameter); the spans are bounded alike.
	DefaultHistoryLimit = 1000
	MaxHistoryLimit     = 10000
	// MaxHistoryBytes bounds the encoded events of a history answer,
	// whatever their number: payloads are up to MaxInputBytes each.
	MaxHistoryBytes = 16 << 20
)

// HistoryResponse is the answer to GET /v1/instances/{id}/history.
type HistoryResponse struct {
	InstanceID string `json:"instanceId"`
	// Executions are ascending by id.
	Executions []ExecutionHistory `json:"executions"`
	// Truncated says that events, spans or whole (older) executions were
	// left out to keep within the limit.
	Truncated bool `json:"truncated"`
}

// ExecutionHistory is one execution's events and timeline.
type ExecutionHistory struct {
	ExecutionID uint64         `json:"executionId"`
	Events      []HistoryEvent `json:"events"`
	// Spans is the execution's timeline (Spans), made from all its
	// events even when Events was cut.
	Spans []Span `json:"spans"`
}

// HistoryEvent is a history event as the API shows it: the common fields
// and the kind's own, camelCase, each present only where the kind has it.
// Payloads (input, output, result, data, a key's value) are the JSON
// values they are (a payload that is not JSON comes as a string), shown
// to readers as an instance's status shows its output.
type HistoryEvent struct {
	EventID uint64 `json:"eventId"`
	// Kind is the event kind's name (history.EventKind.KindName).
	Kind      string    `json:"kind"`
	Timestamp Timestamp `json:"timestamp"`
	// ScheduledID is the event a completion, cancellation or timer firing
	// refers to (SourceEventID).
	ScheduledID uint64 `json:"scheduledId,omitempty"`
	Name        string `json:"name,omitempty"`
	Version     string `json:"version,omitempty"`
	// InstanceID is a started child's or chained orchestration's id.
	InstanceID string          `json:"instanceId,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	// Error describes a failure, as an instance's status describes its
	// failure.
	Error  *history.ErrorDetails `json:"error,omitempty"`
	Reason string                `json:"reason,omitempty"`
	FireAt *Timestamp            `json:"fireAt,omitempty"`
	// SessionID and Tag route an activity.
	SessionID string `json:"sessionId,omitempty"`
	Tag       string `json:"tag,omitempty"`
	// The parent of a sub-orchestration (OrchestrationStarted).
	ParentInstanceID  string `json:"parentInstanceId,omitempty"`
	ParentExecutionID uint64 `json:"parentExecutionId,omitempty"`
	ParentScheduledID uint64 `json:"parentScheduledId,omitempty"`
	// CarryForward are the queued events continue-as-new handed over.
	CarryForward []CarriedEvent `json:"carryForward,omitempty"`
	// CustomStatus is the custom status set (a string), or null when
	// cleared (CustomStatusUpdated); InitialCustomStatus the one carried
	// over by continue-as-new.
	CustomStatus        json.RawMessage `json:"customStatus,omitempty"`
	InitialCustomStatus *string         `json:"initialCustomStatus,omitempty"`
	// Key, Value and LastUpdatedAt are a key-value write's.
	Key           string          `json:"key,omitempty"`
	Value         json.RawMessage `json:"value,omitempty"`
	LastUpdatedAt *Timestamp      `json:"lastUpdatedAt,omitempty"`
}

// CarriedEvent is a queued event continue-as-new carried forward.
type CarriedEvent struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// payload is a stored payload as JSON: itself when it is a JSON value,
// else a JSON string of it; nil for none ("").
func payload(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

// stamp is a history clock reading as a *Timestamp (nil for 0).
func stamp(ms uint64) *Timestamp {
	if ms == 0 {
		return nil
	}
	t := msStamp(ms)
	return &t
}

// viewEvent turns a history event into its API form.
func viewEvent(ev history.Event) HistoryEvent {
	out := HistoryEvent{EventID: ev.EventID, Timestamp: msStamp(ev.TimestampMS), ScheduledID: ev.SourceEventID}
	if ev.Kind == nil {
		return out
	}
	out.Kind = ev.Kind.KindName()
	switch k := ev.Kind.(type) {
	case history.OrchestrationStarted:
		out.Name, out.Version, out.Input = k.Name, k.Version, payload(k.Input)
		out.ParentInstanceID, out.ParentExecutionID, out.ParentScheduledID = k.ParentInstance, k.ParentExecutionID, k.ParentID
		for _, q := range k.CarryForwardEvents {
			out.CarryForward = append(out.CarryForward, CarriedEvent{Name: q.Name, Data: payload(q.Data)})
		}
		out.InitialCustomStatus = k.InitialCustomStatus
	case history.OrchestrationCompleted:
		out.Output = payload(k.Output)
	case history.OrchestrationFailed:
		out.Error = &k.Details
	case history.ActivityScheduled:
		out.Name, out.Input, out.SessionID, out.Tag = k.Name, payload(k.Input), k.SessionID, k.Tag
	case history.ActivityCompleted:
		out.Result = payload(k.Result)
	case history.ActivityFailed:
		out.Error = &k.Details
	case history.ActivityCancelRequested:
		out.Reason = k.Reason
	case history.TimerCreated:
		out.FireAt = stamp(k.FireAtMS)
	case history.TimerFired:
		out.FireAt = stamp(k.FireAtMS)
	case history.ExternalSubscribed:
		out.Name = k.Name
	case history.ExternalEvent:
		out.Name, out.Data = k.Name, payload(k.Data)
	case history.ExternalSubscribedCancelled:
		out.Reason = k.Reason
	case history.OrchestrationChained:
		out.Name, out.InstanceID, out.Input, out.Version = k.Name, k.Instance, payload(k.Input), k.Version
	case history.SubOrchestrationScheduled:
		out.Name, out.InstanceID, out.Input, out.Version = k.Name, k.Instance, payload(k.Input), k.Version
	case history.SubOrchestrationCompleted:
		out.Result = payload(k.Result)
	case history.SubOrchestrationFailed:
		out.Error = &k.Details
	case history.SubOrchestrationCancelRequested:
		out.Reason = k.Reason
	case history.OrchestrationContinuedAsNew:
		out.Input, out.Version = payload(k.Input), k.Version
	case history.OrchestrationCancelRequested:
		out.Reason = k.Reason
	case history.QueueSubscribed:
		out.Name = k.Name
	case history.QueueEventDelivered:
		out.Name, out.Data = k.Name, payload(k.Data)
	case history.QueueSubscriptionCancelled:
		out.Reason = k.Reason
	case history.CustomStatusUpdated:
		out.CustomStatus, _ = json.Marshal(k.Status) // a string, or null
	case history.KeyValueSet:
		out.Key, out.Value, out.LastUpdatedAt = k.Key, payload(k.Value), stamp(k.LastUpdatedAtMS)
	case history.KeyValueCleared:
		out.Key = k.Key
	case history.KeyValuesCleared:
	}
	return out
}

// history answers GET /v1/instances/{id}/history: every execution's
// events and spans, newest executions first until the limit is reached
// (older ones are then left out, and the oldest one taken may be cut
// after its first events), presented ascending.
func (a *api) history(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if e := checkID(id); e != nil {
		writeError(w, *e)
		return
	}
	q := r.URL.Query()
	limit := DefaultHistoryLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxHistoryLimit {
			writeError(w, badRequest("invalid_limit", "limit must be 1 to %d", MaxHistoryLimit))
			return
		}
		limit = n
	}
	var only uint64
	if s := q.Get("executionId"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			writeError(w, badRequest("invalid_execution_id", "executionId must be a positive integer"))
			return
		}
		only = n
	}
	ctx := r.Context()
	// read returns the executions to show, newest first, and a reader of
	// each one's history.
	var (
		execs []uint64
		read  func(uint64) ([]history.Event, error)
	)
	if admin, ok := a.c.Provider().Admin(); ok {
		var err error
		if execs, err = admin.ListExecutions(ctx, id); err != nil {
			writeError(w, providerError(err))
			return
		}
		read = func(e uint64) ([]history.Event, error) { return admin.ReadHistoryWithExecutionID(ctx, id, e) }
	} else {
		// No admin capability: the current execution only.
		evs, err := a.c.ReadHistory(ctx, id)
		if err != nil {
			writeError(w, providerError(err))
			return
		}
		if len(evs) > 0 {
			execs = []uint64{evs[0].ExecutionID}
		}
		read = func(uint64) ([]history.Event, error) { return evs, nil }
	}
	if len(execs) == 0 {
		writeError(w, notFound(id))
		return
	}
	if only != 0 {
		if !slices.Contains(execs, only) {
			writeError(w, apiError{status: http.StatusNotFound, Code: "execution_not_found",
				Message: fmt.Sprintf("instance %q has no execution %d", id, only)})
			return
		}
		execs = []uint64{only}
	}
	resp := HistoryResponse{InstanceID: id, Executions: []ExecutionHistory{}}
	events, spans, size := 0, 0, 0
	for i := len(execs) - 1; i >= 0; i-- {
		if events >= limit || spans >= limit || size >= MaxHistoryBytes {
			resp.Truncated = true
			break
		}
		evs, err := read(execs[i])
		if err != nil {
			writeError(w, providerError(err))
			return
		}
		eh := ExecutionHistory{ExecutionID: execs[i], Events: []HistoryEvent{}}
		for _, ev := range evs {
			v := viewEvent(ev)
			b, _ := json.Marshal(v)
			if events >= limit || size+len(b) > MaxHistoryBytes {
				resp.Truncated = true
				break
			}
			eh.Events = append(eh.Events, v)
			events, size = events+1, size+len(b)
		}
		eh.Spans = Spans(evs)
		if n := limit - spans; len(eh.Spans) > n {
			eh.Spans, resp.Truncated = eh.Spans[:n], true
		}
		spans += len(eh.Spans)
		resp.Executions = append(resp.Executions, eh)
	}
	slices.Reverse(resp.Executions)
	writeJSON(w, http.StatusOK, resp)
}
