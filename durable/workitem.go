package durable

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/tagged"
)

// ErrMalformed is wrapped by every error reported for bytes that are not a
// valid work item or event.
var ErrMalformed = history.ErrMalformed

// ErrUnknownKind is wrapped (with ErrMalformed) when a work item's "type"
// names no known variant.
var ErrUnknownKind = history.ErrUnknownKind

// Queue names the provider queue a work item travels on.
type Queue int

const (
	// OrchestratorQueue carries the messages that trigger orchestration turns.
	OrchestratorQueue Queue = iota + 1
	// WorkerQueue carries activity executions.
	WorkerQueue
)

// String returns "orchestrator" or "worker".
func (q Queue) String() string {
	switch q {
	case OrchestratorQueue:
		return "orchestrator"
	case WorkerQueue:
		return "worker"
	}
	return fmt.Sprintf("Queue(%d)", int(q))
}

// WorkItem is a message on one of the provider's two queues. The set of
// variants is closed: only this package's types implement it. Every variant
// encodes to JSON with a "type" member (json.Marshal works on any variant);
// decode with UnmarshalWorkItem.
type WorkItem interface {
	// Kind is the variant's wire name.
	Kind() string
	// TargetInstance is the instance whose partition and queue receive the
	// item (the parent instance for sub-orchestration completions).
	TargetInstance() string
	// Queue is the queue the item belongs on.
	Queue() Queue
	isWorkItem()
}

// Wire names of the variants: part of the stored format, never change one.
const (
	kindStartOrchestration = "StartOrchestration"
	kindActivityExecute    = "ActivityExecute"
	kindActivityCompleted  = "ActivityCompleted"
	kindActivityFailed     = "ActivityFailed"
	kindTimerFired         = "TimerFired"
	kindExternalRaised     = "ExternalRaised"
	kindSubOrchCompleted   = "SubOrchCompleted"
	kindSubOrchFailed      = "SubOrchFailed"
	kindCancelInstance     = "CancelInstance"
	kindContinueAsNew      = "ContinueAsNew"
	kindQueueMessage       = "QueueMessage"
)

// StartOrchestration starts an instance (or, with ExecutionID > 1, a later
// execution). Enqueuing it does not create the instance: the provider creates
// instance metadata when the first turn is acked.
type StartOrchestration struct {
	Instance      string `json:"instance"`
	Orchestration string `json:"orchestration"`
	Input         string `json:"input"`
	// Version requests an exact orchestration version; empty lets the
	// runtime resolve the latest registered one.
	Version string `json:"version,omitempty"`
	// ParentInstance, ParentExecutionID and ParentID link a
	// sub-orchestration to the SubOrchestrationScheduled event of its
	// parent's execution; empty and 0 for a root (ParentExecutionID may be 0
	// in items written before it existed).
	ParentInstance    string `json:"parent_instance,omitempty"`
	ParentExecutionID uint64 `json:"parent_execution_id,omitempty"`
	ParentID          uint64 `json:"parent_id,omitempty"`
	ExecutionID       uint64 `json:"execution_id"`
	// RequestID identifies the client call that enqueued the item (see
	// RequestIDOf); empty for items the runtime enqueues itself.
	RequestID string `json:"request_id,omitempty"`
	// TraceParent is the W3C traceparent of the span that started the
	// instance (a client's, or a parent orchestration's turn): the
	// instance's turns and activities join that trace. Empty: the first
	// turn starts a trace of its own.
	TraceParent string `json:"trace_parent,omitempty"`
}

// ActivityExecute asks a worker to run an activity (worker queue).
type ActivityExecute struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	// ID is the EventID of the ActivityScheduled event; the completion
	// refers to it.
	ID    uint64 `json:"id"`
	Name  string `json:"name"`
	Input string `json:"input"`
	// SessionID routes the item to the worker owning the session; empty for none.
	SessionID string `json:"session_id,omitempty"`
	// Tag routes the item to workers accepting the tag; empty for the default queue.
	Tag string `json:"tag,omitempty"`
	// TraceParent is the W3C traceparent of the orchestration turn that
	// scheduled the activity: its execution's span is that turn's child.
	TraceParent string `json:"trace_parent,omitempty"`
}

// ActivityCompleted reports an activity's result to its orchestration.
type ActivityCompleted struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`
	Result      string `json:"result"`
}

// ActivityFailed reports an activity's failure to its orchestration.
type ActivityFailed struct {
	Instance    string               `json:"instance"`
	ExecutionID uint64               `json:"execution_id"`
	ID          uint64               `json:"id"`
	Details     history.ErrorDetails `json:"details"`
}

// TimerFired fires the timer whose TimerCreated event is ID. It is enqueued
// with its visibility delayed until FireAtMS.
type TimerFired struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`
	FireAtMS    uint64 `json:"fire_at_ms"`
}

// ExternalRaised delivers an external event, matched by name to the
// orchestration's subscriptions.
type ExternalRaised struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
	// RequestID identifies the client call that enqueued the item (see
	// RequestIDOf); empty for items the runtime enqueues itself.
	RequestID string `json:"request_id,omitempty"`
}

// SubOrchCompleted reports a child's result to its parent.
type SubOrchCompleted struct {
	ParentInstance    string `json:"parent_instance"`
	ParentExecutionID uint64 `json:"parent_execution_id"`
	// ParentID is the EventID of the parent's SubOrchestrationScheduled event.
	ParentID uint64 `json:"parent_id"`
	Result   string `json:"result"`
}

// SubOrchFailed reports a child's failure to its parent.
type SubOrchFailed struct {
	ParentInstance    string               `json:"parent_instance"`
	ParentExecutionID uint64               `json:"parent_execution_id"`
	ParentID          uint64               `json:"parent_id"`
	Details           history.ErrorDetails `json:"details"`
}

// CancelInstance requests cancellation of an instance (and, through the
// runtime, of its children).
type CancelInstance struct {
	Instance string `json:"instance"`
	Reason   string `json:"reason"`
	// RequestID identifies the client call that enqueued the item (see
	// RequestIDOf); empty for items the runtime enqueues itself.
	RequestID string `json:"request_id,omitempty"`
}

// ContinueAsNew starts the next execution of an instance.
type ContinueAsNew struct {
	Instance      string `json:"instance"`
	Orchestration string `json:"orchestration"`
	Input         string `json:"input"`
	// Version requests the next execution's version; empty for the latest.
	Version string `json:"version,omitempty"`
	// CarryForwardEvents are unconsumed queued events handed to the next
	// execution, in arrival order.
	CarryForwardEvents []history.QueuedEvent `json:"carry_forward_events,omitempty"`
	// InitialCustomStatus is the custom status carried into the next
	// execution, if any.
	InitialCustomStatus *string `json:"initial_custom_status,omitempty"`
}

// QueueMessage delivers a persistent event to the instance's FIFO mailbox.
// A QueueMessage for an instance that has not started (no history and no
// StartOrchestration in the same fetch) is dropped by the provider.
type QueueMessage struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
	// RequestID identifies the client call that enqueued the item (see
	// RequestIDOf); empty for items the runtime enqueues itself.
	RequestID string `json:"request_id,omitempty"`
}

// Kind implements WorkItem.
func (StartOrchestration) Kind() string { return kindStartOrchestration }

// Kind implements WorkItem.
func (ActivityExecute) Kind() string { return kindActivityExecute }

// Kind implements WorkItem.
func (ActivityCompleted) Kind() string { return kindActivityCompleted }

// Kind implements WorkItem.
func (ActivityFailed) Kind() string { return kindActivityFailed }

// Kind implements WorkItem.
func (TimerFired) Kind() string { return kindTimerFired }

// Kind implements WorkItem.
func (ExternalRaised) Kind() string { return kindExternalRaised }

// Kind implements WorkItem.
func (SubOrchCompleted) Kind() string { return kindSubOrchCompleted }

// Kind implements WorkItem.
func (SubOrchFailed) Kind() string { return kindSubOrchFailed }

// Kind implements WorkItem.
func (CancelInstance) Kind() string { return kindCancelInstance }

// Kind implements WorkItem.
func (ContinueAsNew) Kind() string { return kindContinueAsNew }

// Kind implements WorkItem.
func (QueueMessage) Kind() string { return kindQueueMessage }

// TargetInstance implements WorkItem.
func (w StartOrchestration) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w ActivityExecute) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w ActivityCompleted) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w ActivityFailed) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w TimerFired) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w ExternalRaised) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w SubOrchCompleted) TargetInstance() string { return w.ParentInstance }

// TargetInstance implements WorkItem.
func (w SubOrchFailed) TargetInstance() string { return w.ParentInstance }

// TargetInstance implements WorkItem.
func (w CancelInstance) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w ContinueAsNew) TargetInstance() string { return w.Instance }

// TargetInstance implements WorkItem.
func (w QueueMessage) TargetInstance() string { return w.Instance }

// Queue implements WorkItem: ActivityExecute is the only worker-queue item.
func (StartOrchestration) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (ActivityExecute) Queue() Queue { return WorkerQueue }

// Queue implements WorkItem.
func (ActivityCompleted) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (ActivityFailed) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (TimerFired) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (ExternalRaised) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (SubOrchCompleted) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (SubOrchFailed) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (CancelInstance) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (ContinueAsNew) Queue() Queue { return OrchestratorQueue }

// Queue implements WorkItem.
func (QueueMessage) Queue() Queue { return OrchestratorQueue }

func (StartOrchestration) isWorkItem() {}
func (ActivityExecute) isWorkItem()    {}
func (ActivityCompleted) isWorkItem()  {}
func (ActivityFailed) isWorkItem()     {}
func (TimerFired) isWorkItem()         {}
func (ExternalRaised) isWorkItem()     {}
func (SubOrchCompleted) isWorkItem()   {}
func (SubOrchFailed) isWorkItem()      {}
func (CancelInstance) isWorkItem()     {}
func (ContinueAsNew) isWorkItem()      {}
func (QueueMessage) isWorkItem()       {}

// The variants' MarshalJSON add the "type" member. Each converts to a type
// without methods so that encoding does not recurse.

// MarshalJSON implements json.Marshaler.
func (w StartOrchestration) MarshalJSON() ([]byte, error) {
	type plain StartOrchestration
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w ActivityExecute) MarshalJSON() ([]byte, error) {
	type plain ActivityExecute
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w ActivityCompleted) MarshalJSON() ([]byte, error) {
	type plain ActivityCompleted
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w ActivityFailed) MarshalJSON() ([]byte, error) {
	type plain ActivityFailed
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w TimerFired) MarshalJSON() ([]byte, error) {
	type plain TimerFired
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w ExternalRaised) MarshalJSON() ([]byte, error) {
	type plain ExternalRaised
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w SubOrchCompleted) MarshalJSON() ([]byte, error) {
	type plain SubOrchCompleted
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w SubOrchFailed) MarshalJSON() ([]byte, error) {
	type plain SubOrchFailed
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w CancelInstance) MarshalJSON() ([]byte, error) {
	type plain CancelInstance
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w ContinueAsNew) MarshalJSON() ([]byte, error) {
	type plain ContinueAsNew
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalJSON implements json.Marshaler.
func (w QueueMessage) MarshalJSON() ([]byte, error) {
	type plain QueueMessage
	return tagged.Marshal(w.Kind(), plain(w))
}

// MarshalWorkItem encodes a work item in the wire format. It fails for a nil item.
func MarshalWorkItem(w WorkItem) ([]byte, error) {
	if w == nil {
		return nil, errors.New("encode work item: nil")
	}
	switch v := w.(type) {
	case StartOrchestration:
		return v.MarshalJSON()
	case ActivityExecute:
		return v.MarshalJSON()
	case ActivityCompleted:
		return v.MarshalJSON()
	case ActivityFailed:
		return v.MarshalJSON()
	case TimerFired:
		return v.MarshalJSON()
	case ExternalRaised:
		return v.MarshalJSON()
	case SubOrchCompleted:
		return v.MarshalJSON()
	case SubOrchFailed:
		return v.MarshalJSON()
	case CancelInstance:
		return v.MarshalJSON()
	case ContinueAsNew:
		return v.MarshalJSON()
	case QueueMessage:
		return v.MarshalJSON()
	}
	return nil, fmt.Errorf("encode work item: unsupported type %T", w)
}

// UnmarshalWorkItem decodes one work item strictly: an unknown variant, an
// unknown member, a missing required member or a wrongly typed value is an
// error wrapping ErrMalformed. It never panics.
func UnmarshalWorkItem(data []byte) (WorkItem, error) {
	tag, m, err := tagged.Split(data)
	if err != nil {
		return nil, fmt.Errorf("decode work item: %w", err)
	}
	switch tag {
	case kindStartOrchestration:
		return decodeItem[StartOrchestration](tag, m)
	case kindActivityExecute:
		return decodeItem[ActivityExecute](tag, m)
	case kindActivityCompleted:
		return decodeItem[ActivityCompleted](tag, m)
	case kindActivityFailed:
		return decodeItem[ActivityFailed](tag, m)
	case kindTimerFired:
		return decodeItem[TimerFired](tag, m)
	case kindExternalRaised:
		return decodeItem[ExternalRaised](tag, m)
	case kindSubOrchCompleted:
		return decodeItem[SubOrchCompleted](tag, m)
	case kindSubOrchFailed:
		return decodeItem[SubOrchFailed](tag, m)
	case kindCancelInstance:
		return decodeItem[CancelInstance](tag, m)
	case kindContinueAsNew:
		return decodeItem[ContinueAsNew](tag, m)
	case kindQueueMessage:
		return decodeItem[QueueMessage](tag, m)
	}
	return nil, fmt.Errorf("decode work item: %w: %w: work item kind %q", ErrMalformed, ErrUnknownKind, tag)
}

func decodeItem[W WorkItem](tag string, m tagged.Members) (WorkItem, error) {
	var w W
	if err := tagged.Decode(tag, m, &w); err != nil {
		return nil, fmt.Errorf("decode work item: %w", err)
	}
	return w, nil
}

// ValidateWorkItem reports why a work item cannot be enqueued: nil, or no
// target instance.
func ValidateWorkItem(w WorkItem) error {
	if w == nil {
		return errors.New("work item is nil")
	}
	if w.TargetInstance() == "" {
		return fmt.Errorf("%s work item has an empty target instance", w.Kind())
	}
	if id := RequestIDOf(w); len(id) > MaxRequestIDBytes {
		return fmt.Errorf("%s work item has a request id of %d bytes, the limit is %d", w.Kind(), len(id), MaxRequestIDBytes)
	} else if !utf8.ValidString(id) {
		return fmt.Errorf("%s work item has a request id that is not valid UTF-8", w.Kind())
	}
	return nil
}

// MaxRequestIDBytes is the longest request id a work item may carry, in
// UTF-8 bytes.
const MaxRequestIDBytes = 256

// RequestIDOf returns the request id of a client call's work item
// (StartOrchestration, ExternalRaised, QueueMessage, CancelInstance), or ""
// when the item has none. A provider records each request id it enqueues
// for a retention period and enqueues an item whose request id it has
// recorded, for the same call, at most once: a resend of the call (after a
// lost answer, by the provider or by the caller) succeeds without a second
// message, and a different call under a recorded request id fails with a
// permanent error.
func RequestIDOf(w WorkItem) string {
	switch v := w.(type) {
	case StartOrchestration:
		return v.RequestID
	case ExternalRaised:
		return v.RequestID
	case QueueMessage:
		return v.RequestID
	case CancelInstance:
		return v.RequestID
	}
	return ""
}

// WithoutTraceParent returns w without its trace context, which names
// the span a call was made in, not the call: a provider compares a resent
// call with the recorded one (RequestIDOf) on this form.
func WithoutTraceParent(w WorkItem) WorkItem {
	switch v := w.(type) {
	case StartOrchestration:
		v.TraceParent = ""
		return v
	case ActivityExecute:
		v.TraceParent = ""
		return v
	}
	return w
}
