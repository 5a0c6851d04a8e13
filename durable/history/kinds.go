package history

// EventKind is the type-specific payload of an Event. The set of kinds is
// closed: only this package's types implement it.
type EventKind interface {
	// KindName is the kind's wire name, the value of the "type" member.
	KindName() string
	isEventKind()
}

// Wire names of the kinds. They are part of the stored format: never change one.
const (
	kindOrchestrationStarted            = "OrchestrationStarted"
	kindOrchestrationCompleted          = "OrchestrationCompleted"
	kindOrchestrationFailed             = "OrchestrationFailed"
	kindActivityScheduled               = "ActivityScheduled"
	kindActivityCompleted               = "ActivityCompleted"
	kindActivityFailed                  = "ActivityFailed"
	kindActivityCancelRequested         = "ActivityCancelRequested"
	kindTimerCreated                    = "TimerCreated"
	kindTimerFired                      = "TimerFired"
	kindExternalSubscribed              = "ExternalSubscribed"
	kindExternalEvent                   = "ExternalEvent"
	kindExternalSubscribedCancelled     = "ExternalSubscribedCancelled"
	kindOrchestrationChained            = "OrchestrationChained"
	kindSubOrchestrationScheduled       = "SubOrchestrationScheduled"
	kindSubOrchestrationCompleted       = "SubOrchestrationCompleted"
	kindSubOrchestrationFailed          = "SubOrchestrationFailed"
	kindSubOrchestrationCancelRequested = "SubOrchestrationCancelRequested"
	kindOrchestrationContinuedAsNew     = "OrchestrationContinuedAsNew"
	kindOrchestrationCancelRequested    = "OrchestrationCancelRequested"
	kindQueueSubscribed                 = "QueueSubscribed"
	kindQueueEventDelivered             = "QueueEventDelivered"
	kindQueueSubscriptionCancelled      = "QueueSubscriptionCancelled"
	kindCustomStatusUpdated             = "CustomStatusUpdated"
	kindKeyValueSet                     = "KeyValueSet"
	kindKeyValueCleared                 = "KeyValueCleared"
	kindKeyValuesCleared                = "KeyValuesCleared"
)

// QueuedEvent is a persistent (queued) event carried across continue-as-new.
type QueuedEvent struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// OrchestrationStarted is the first event of every execution.
type OrchestrationStarted struct {
	// Name and Version identify the orchestration code that runs the execution.
	Name    string `json:"name"`
	Version string `json:"version"`
	// Input is the execution's serialized input.
	Input string `json:"input"`
	// ParentInstance, ParentExecutionID and ParentID link a
	// sub-orchestration to the SubOrchestrationScheduled event of its
	// parent's execution; empty and 0 for a root (ParentExecutionID may be 0
	// in histories written before it existed).
	ParentInstance    string `json:"parent_instance,omitempty"`
	ParentExecutionID uint64 `json:"parent_execution_id,omitempty"`
	ParentID          uint64 `json:"parent_id,omitempty"`
	// TraceParent is the W3C traceparent of the instance's trace: every
	// turn's span (and through them every activity's) is its child. It
	// is kept across continue-as-new. Empty in histories written before
	// it existed.
	TraceParent string `json:"trace_parent,omitempty"`
	// CarryForwardEvents are the unconsumed queued events handed over by
	// continue-as-new, in arrival order.
	CarryForwardEvents []QueuedEvent `json:"carry_forward_events,omitempty"`
	// InitialCustomStatus is the custom status carried over by
	// continue-as-new, if any.
	InitialCustomStatus *string `json:"initial_custom_status,omitempty"`
}

// OrchestrationCompleted ends an execution successfully with Output.
type OrchestrationCompleted struct {
	Output string `json:"output"`
}

// OrchestrationFailed ends an execution with an error.
type OrchestrationFailed struct {
	Details ErrorDetails `json:"details"`
}

// ActivityScheduled records that the orchestration scheduled an activity; its
// EventID is the activity id that the completion refers to.
type ActivityScheduled struct {
	Name  string `json:"name"`
	Input string `json:"input"`
	// SessionID pins the activity to a session (worker affinity); empty for none.
	SessionID string `json:"session_id,omitempty"`
	// Tag routes the activity to workers that accept the tag; empty for the
	// default (untagged) queue.
	Tag string `json:"tag,omitempty"`
}

// ActivityCompleted records an activity's result; SourceEventID is the
// ActivityScheduled event.
type ActivityCompleted struct {
	Result string `json:"result"`
}

// ActivityFailed records an activity's failure; SourceEventID is the
// ActivityScheduled event.
type ActivityFailed struct {
	Details ErrorDetails `json:"details"`
}

// ActivityCancelRequested records a best-effort cancellation of an activity
// (for example the loser of a select); SourceEventID is the ActivityScheduled
// event. A completion may still arrive and is then ignored.
type ActivityCancelRequested struct {
	Reason string `json:"reason"`
}

// TimerCreated records a durable timer that fires at FireAtMS (milliseconds
// since the Unix epoch).
type TimerCreated struct {
	FireAtMS uint64 `json:"fire_at_ms"`
}

// TimerFired records that the timer created by SourceEventID fired.
type TimerFired struct {
	FireAtMS uint64 `json:"fire_at_ms"`
}

// ExternalSubscribed records that the orchestration waits for an external
// event by name (positional matching).
type ExternalSubscribed struct {
	Name string `json:"name"`
}

// ExternalEvent records a raised external event, matched to subscriptions
// by name.
type ExternalEvent struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// ExternalSubscribedCancelled records that the subscription SourceEventID was
// abandoned (it lost a select), so replay skips it when matching.
type ExternalSubscribedCancelled struct {
	Reason string `json:"reason"`
}

// OrchestrationChained records a detached (fire-and-forget) orchestration start.
type OrchestrationChained struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Input    string `json:"input"`
	// Version requests an exact version; empty for the latest registered.
	Version string `json:"version,omitempty"`
}

// SubOrchestrationScheduled records a child orchestration start with a
// deterministic child instance id.
type SubOrchestrationScheduled struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Input    string `json:"input"`
	// Version requests an exact version; empty for the latest registered.
	Version string `json:"version,omitempty"`
}

// SubOrchestrationCompleted records a child's result; SourceEventID is the
// SubOrchestrationScheduled event.
type SubOrchestrationCompleted struct {
	Result string `json:"result"`
}

// SubOrchestrationFailed records a child's failure; SourceEventID is the
// SubOrchestrationScheduled event.
type SubOrchestrationFailed struct {
	Details ErrorDetails `json:"details"`
}

// SubOrchestrationCancelRequested records a best-effort cancellation of the
// child scheduled by SourceEventID.
type SubOrchestrationCancelRequested struct {
	Reason string `json:"reason"`
}

// OrchestrationContinuedAsNew ends an execution; the next one starts with Input.
type OrchestrationContinuedAsNew struct {
	Input string `json:"input"`
	// Version is the version requested for the next execution; empty to keep
	// resolving the latest registered.
	Version string `json:"version,omitempty"`
}

// OrchestrationCancelRequested records that cancellation of the instance was
// requested; a terminal OrchestrationFailed follows deterministically.
type OrchestrationCancelRequested struct {
	Reason string `json:"reason"`
}

// QueueSubscribed records a dequeue from the instance's persistent event
// mailbox by name (FIFO matching, not positional).
type QueueSubscribed struct {
	Name string `json:"name"`
}

// QueueEventDelivered records a persistent event arriving in the mailbox.
type QueueEventDelivered struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// QueueSubscriptionCancelled records that the dequeue SourceEventID was
// abandoned, so it consumed no arrival.
type QueueSubscriptionCancelled struct {
	Reason string `json:"reason"`
}

// CustomStatusUpdated records a change of the instance's custom status: set
// to *Status, or cleared when Status is nil. Providers materialise the last
// such event of each turn.
type CustomStatusUpdated struct {
	Status *string `json:"status"`
}

// KeyValueSet records a write to the instance's key-value store.
type KeyValueSet struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// LastUpdatedAtMS is when the runtime wrote the key (ms since the epoch).
	LastUpdatedAtMS uint64 `json:"last_updated_at_ms,omitempty"`
}

// KeyValueCleared records removal of one key.
type KeyValueCleared struct {
	Key string `json:"key"`
}

// KeyValuesCleared records removal of every key of the instance.
type KeyValuesCleared struct{}

// KindName implements EventKind.
func (OrchestrationStarted) KindName() string { return kindOrchestrationStarted }

// KindName implements EventKind.
func (OrchestrationCompleted) KindName() string { return kindOrchestrationCompleted }

// KindName implements EventKind.
func (OrchestrationFailed) KindName() string { return kindOrchestrationFailed }

// KindName implements EventKind.
func (ActivityScheduled) KindName() string { return kindActivityScheduled }

// KindName implements EventKind.
func (ActivityCompleted) KindName() string { return kindActivityCompleted }

// KindName implements EventKind.
func (ActivityFailed) KindName() string { return kindActivityFailed }

// KindName implements EventKind.
func (ActivityCancelRequested) KindName() string { return kindActivityCancelRequested }

// KindName implements EventKind.
func (TimerCreated) KindName() string { return kindTimerCreated }

// KindName implements EventKind.
func (TimerFired) KindName() string { return kindTimerFired }

// KindName implements EventKind.
func (ExternalSubscribed) KindName() string { return kindExternalSubscribed }

// KindName implements EventKind.
func (ExternalEvent) KindName() string { return kindExternalEvent }

// KindName implements EventKind.
func (ExternalSubscribedCancelled) KindName() string { return kindExternalSubscribedCancelled }

// KindName implements EventKind.
func (OrchestrationChained) KindName() string { return kindOrchestrationChained }

// KindName implements EventKind.
func (SubOrchestrationScheduled) KindName() string { return kindSubOrchestrationScheduled }

// KindName implements EventKind.
func (SubOrchestrationCompleted) KindName() string { return kindSubOrchestrationCompleted }

// KindName implements EventKind.
func (SubOrchestrationFailed) KindName() string { return kindSubOrchestrationFailed }

// KindName implements EventKind.
func (SubOrchestrationCancelRequested) KindName() string { return kindSubOrchestrationCancelRequested }

// KindName implements EventKind.
func (OrchestrationContinuedAsNew) KindName() string { return kindOrchestrationContinuedAsNew }

// KindName implements EventKind.
func (OrchestrationCancelRequested) KindName() string { return kindOrchestrationCancelRequested }

// KindName implements EventKind.
func (QueueSubscribed) KindName() string { return kindQueueSubscribed }

// KindName implements EventKind.
func (QueueEventDelivered) KindName() string { return kindQueueEventDelivered }

// KindName implements EventKind.
func (QueueSubscriptionCancelled) KindName() string { return kindQueueSubscriptionCancelled }

// KindName implements EventKind.
func (CustomStatusUpdated) KindName() string { return kindCustomStatusUpdated }

// KindName implements EventKind.
func (KeyValueSet) KindName() string { return kindKeyValueSet }

// KindName implements EventKind.
func (KeyValueCleared) KindName() string { return kindKeyValueCleared }

// KindName implements EventKind.
func (KeyValuesCleared) KindName() string { return kindKeyValuesCleared }

func (OrchestrationStarted) isEventKind()            {}
func (OrchestrationCompleted) isEventKind()          {}
func (OrchestrationFailed) isEventKind()             {}
func (ActivityScheduled) isEventKind()               {}
func (ActivityCompleted) isEventKind()               {}
func (ActivityFailed) isEventKind()                  {}
func (ActivityCancelRequested) isEventKind()         {}
func (TimerCreated) isEventKind()                    {}
func (TimerFired) isEventKind()                      {}
func (ExternalSubscribed) isEventKind()              {}
func (ExternalEvent) isEventKind()                   {}
func (ExternalSubscribedCancelled) isEventKind()     {}
func (OrchestrationChained) isEventKind()            {}
func (SubOrchestrationScheduled) isEventKind()       {}
func (SubOrchestrationCompleted) isEventKind()       {}
func (SubOrchestrationFailed) isEventKind()          {}
func (SubOrchestrationCancelRequested) isEventKind() {}
func (OrchestrationContinuedAsNew) isEventKind()     {}
func (OrchestrationCancelRequested) isEventKind()    {}
func (QueueSubscribed) isEventKind()                 {}
func (QueueEventDelivered) isEventKind()             {}
func (QueueSubscriptionCancelled) isEventKind()      {}
func (CustomStatusUpdated) isEventKind()             {}
func (KeyValueSet) isEventKind()                     {}
func (KeyValueCleared) isEventKind()                 {}
func (KeyValuesCleared) isEventKind()                {}
