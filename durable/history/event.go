// Package history defines the events of an orchestration's durable history
// and their stable JSON wire format.
//
// A history is an append-only sequence of events per execution of an
// instance, ordered by EventID. The runtime creates every event and assigns
// every id; providers store events as opaque data and return them unchanged.
// The wire format is a JSON object with the common fields, a "type" member
// naming the kind, and the kind's own fields. Decoding is strict: an unknown
// kind, an unknown member, a missing required member or a wrongly typed value
// is an error (wrapping ErrMalformed), never a panic and never a silently
// dropped field. New optional fields may be added to a kind without breaking
// older stored data.
package history

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/durafeed/durafeed/internal/tagged"
)

// ErrMalformed is wrapped by every error that decoding reports for bytes
// that are not a valid event or work item.
var ErrMalformed = tagged.ErrMalformed

// ErrUnknownKind is wrapped (together with ErrMalformed) when the "type"
// member names no known kind: typically data written by a newer runtime.
var ErrUnknownKind = errors.New("unknown kind")

// Event is one entry of an orchestration execution's history.
type Event struct {
	// EventID is the event's position in its execution's history, assigned
	// by the runtime: 1, 2, 3, … with one exception, the PoisonEventID of
	// the event that ends an instance whose stored history cannot be
	// decoded (the runtime cannot know the last id). Ids are unique and
	// strictly increasing within an execution.
	EventID uint64
	// SourceEventID links a completion to the event that scheduled it
	// (ActivityCompleted to its ActivityScheduled, and so on); 0 for
	// lifecycle and scheduling events.
	SourceEventID uint64
	// InstanceID and ExecutionID repeat the storage key so that an event is
	// self-describing.
	InstanceID  string
	ExecutionID uint64
	// TimestampMS is when the runtime created the event, in milliseconds
	// since the Unix epoch.
	TimestampMS uint64
	// RuntimeVersion is the semantic version of the runtime that wrote the
	// event; providers use the version of an execution's first event for
	// capability filtering.
	RuntimeVersion string
	// Kind is the event's type-specific payload; never nil in a valid event.
	Kind EventKind
}

// IsTerminal reports whether the event ends its execution.
func (e Event) IsTerminal() bool {
	switch e.Kind.(type) {
	case OrchestrationCompleted, OrchestrationFailed, OrchestrationContinuedAsNew:
		return true
	}
	return false
}

// PoisonEventID is the id of the OrchestrationFailed event the runtime
// appends to end an instance whose history cannot be decoded: above any
// id a real history reaches, so it never collides.
const PoisonEventID = 99999

// eventHeader is the wire form of Event's common fields.
type eventHeader struct {
	EventID        uint64 `json:"event_id"`
	SourceEventID  uint64 `json:"source_event_id,omitempty"`
	InstanceID     string `json:"instance_id"`
	ExecutionID    uint64 `json:"execution_id"`
	TimestampMS    uint64 `json:"timestamp_ms"`
	RuntimeVersion string `json:"runtime_version"`
}

var headerMembers = []string{"event_id", "source_event_id", "instance_id", "execution_id", "timestamp_ms", "runtime_version"}

// MarshalJSON encodes the event in the wire format. It fails for a nil Kind.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Kind == nil {
		return nil, fmt.Errorf("encode event %d: nil kind", e.EventID)
	}
	head, err := json.Marshal(eventHeader{
		EventID: e.EventID, SourceEventID: e.SourceEventID, InstanceID: e.InstanceID,
		ExecutionID: e.ExecutionID, TimestampMS: e.TimestampMS, RuntimeVersion: e.RuntimeVersion,
	})
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", e.EventID, err)
	}
	body, err := tagged.Marshal(e.Kind.KindName(), e.Kind)
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", e.EventID, err)
	}
	out := make([]byte, 0, len(head)+len(body))
	out = append(out, head[:len(head)-1]...)
	out = append(out, ',')
	return append(out, body[1:]...), nil
}

// UnmarshalJSON decodes the wire format strictly (see the package doc).
func (e *Event) UnmarshalJSON(data []byte) error {
	tag, members, err := tagged.Split(data)
	if err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	var h eventHeader
	if err := tagged.Decode("event", members.Take(headerMembers...), &h); err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	kind, err := decodeKind(tag, members)
	if err != nil {
		return fmt.Errorf("decode event %d: %w", h.EventID, err)
	}
	*e = Event{
		EventID: h.EventID, SourceEventID: h.SourceEventID, InstanceID: h.InstanceID,
		ExecutionID: h.ExecutionID, TimestampMS: h.TimestampMS, RuntimeVersion: h.RuntimeVersion,
		Kind: kind,
	}
	return nil
}

// Marshal encodes an event in the wire format.
func Marshal(e Event) ([]byte, error) { return e.MarshalJSON() }

// Unmarshal decodes one event from the wire format.
func Unmarshal(data []byte) (Event, error) {
	var e Event
	err := e.UnmarshalJSON(data)
	return e, err
}

func decodeKind(tag string, m tagged.Members) (EventKind, error) {
	switch tag {
	case kindOrchestrationStarted:
		return decodeAs[OrchestrationStarted](tag, m)
	case kindOrchestrationCompleted:
		return decodeAs[OrchestrationCompleted](tag, m)
	case kindOrchestrationFailed:
		return decodeAs[OrchestrationFailed](tag, m)
	case kindActivityScheduled:
		return decodeAs[ActivityScheduled](tag, m)
	case kindActivityCompleted:
		return decodeAs[ActivityCompleted](tag, m)
	case kindActivityFailed:
		return decodeAs[ActivityFailed](tag, m)
	case kindActivityCancelRequested:
		return decodeAs[ActivityCancelRequested](tag, m)
	case kindTimerCreated:
		return decodeAs[TimerCreated](tag, m)
	case kindTimerFired:
		return decodeAs[TimerFired](tag, m)
	case kindExternalSubscribed:
		return decodeAs[ExternalSubscribed](tag, m)
	case kindExternalEvent:
		return decodeAs[ExternalEvent](tag, m)
	case kindExternalSubscribedCancelled:
		return decodeAs[ExternalSubscribedCancelled](tag, m)
	case kindOrchestrationChained:
		return decodeAs[OrchestrationChained](tag, m)
	case kindSubOrchestrationScheduled:
		return decodeAs[SubOrchestrationScheduled](tag, m)
	case kindSubOrchestrationCompleted:
		return decodeAs[SubOrchestrationCompleted](tag, m)
	case kindSubOrchestrationFailed:
		return decodeAs[SubOrchestrationFailed](tag, m)
	case kindSubOrchestrationCancelRequested:
		return decodeAs[SubOrchestrationCancelRequested](tag, m)
	case kindOrchestrationContinuedAsNew:
		return decodeAs[OrchestrationContinuedAsNew](tag, m)
	case kindOrchestrationCancelRequested:
		return decodeAs[OrchestrationCancelRequested](tag, m)
	case kindQueueSubscribed:
		return decodeAs[QueueSubscribed](tag, m)
	case kindQueueEventDelivered:
		return decodeAs[QueueEventDelivered](tag, m)
	case kindQueueSubscriptionCancelled:
		return decodeAs[QueueSubscriptionCancelled](tag, m)
	case kindCustomStatusUpdated:
		return decodeAs[CustomStatusUpdated](tag, m)
	case kindKeyValueSet:
		return decodeAs[KeyValueSet](tag, m)
	case kindKeyValueCleared:
		return decodeAs[KeyValueCleared](tag, m)
	case kindKeyValuesCleared:
		return decodeAs[KeyValuesCleared](tag, m)
	}
	return nil, fmt.Errorf("%w: %w: event kind %q", ErrMalformed, ErrUnknownKind, tag)
}

func decodeAs[K EventKind](tag string, m tagged.Members) (EventKind, error) {
	var k K
	if err := tagged.Decode(tag, m, &k); err != nil {
		return nil, err
	}
	return k, nil
}

func decodeMembers(what string, m map[string]json.RawMessage, v any) error {
	return tagged.Decode(what, tagged.Members(m), v)
}
