package durable

import (
	"time"

	"github.com/durafeed/durafeed/durable/history"
)

// Status is an execution's (and, for its current execution, an instance's)
// lifecycle status.
type Status string

// Execution statuses.
const (
	StatusRunning        Status = "Running"
	StatusCompleted      Status = "Completed"
	StatusFailed         Status = "Failed"
	StatusContinuedAsNew Status = "ContinuedAsNew"
)

// IsTerminal reports whether no further turn will run for the execution.
func (s Status) IsTerminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusContinuedAsNew
}

// KVEntry is one entry of an instance's key-value store.
type KVEntry struct {
	Value string
	// LastUpdatedAtMS is when the runtime wrote the key (ms since the epoch).
	LastUpdatedAtMS uint64
}

// OrchestrationItem is a locked batch of work for one instance, returned by
// FetchOrchestrationItem. While the caller holds it, no other fetch returns
// the instance; the caller must AckOrchestrationItem or
// AbandonOrchestrationItem with LockToken, or let the lock expire.
type OrchestrationItem struct {
	// Instance is the instance id.
	Instance string
	// OrchestrationName and Version identify the code to run: from the
	// instance metadata, or for a new instance from its StartOrchestration
	// message (Version may then be empty: the runtime resolves it).
	OrchestrationName string
	Version           string
	// ExecutionID is the instance's current execution (1 for a new instance).
	ExecutionID uint64
	// History is every event of the current execution, ordered by EventID;
	// empty for a new instance and when HistoryError is set.
	History []history.Event
	// HistoryError is set when the stored history could not be decoded. The
	// lock is held and the attempt counted all the same, so the runtime's
	// poison handling can end the instance.
	HistoryError string
	// Messages are the queue messages locked for this turn, in enqueue order.
	Messages []WorkItem
	// KVSnapshot is the instance's key-value store as it stood when the
	// current execution started: the writes of earlier executions, without
	// those of the current one (which are in History, and which the runtime
	// replays in order so that a read at any point of the replay sees what
	// the original run saw). A provider merges an execution's writes into
	// the snapshot when the execution ends (Completed, Failed or
	// ContinuedAsNew).
	KVSnapshot map[string]KVEntry
	// LockToken identifies the lock for ack, abandon and renew.
	LockToken string
	// AttemptCount is the highest fetch count among Messages, this fetch
	// included (1 on first delivery), for poison detection.
	AttemptCount uint32
}

// LockedWorkItem is a worker-queue item locked by FetchWorkItem. The caller
// must AckWorkItem or AbandonWorkItem with LockToken (renewing it with
// RenewWorkItemLock while working), or let the lock expire.
type LockedWorkItem struct {
	Item         WorkItem
	LockToken    string
	AttemptCount uint32
}

// ExecutionMetadata is what the runtime computed about a turn for the
// provider to store. Providers store it as told and never inspect events to
// derive it. Zero fields mean "no change". Custom status is not part of it:
// it changes only through CustomStatusUpdated events in the turn's history
// (a nil status clears it).
type ExecutionMetadata struct {
	// Status is the execution's new status; empty keeps the current one.
	Status Status
	// Output is the terminal value (result, error message, or the next
	// execution's input for ContinuedAsNew); nil for none.
	Output *string
	// OrchestrationName and OrchestrationVersion set or update the
	// instance's orchestration; empty keeps the stored value.
	OrchestrationName    string
	OrchestrationVersion string
	// ParentInstanceID links a sub-orchestration to its parent (for
	// cascading deletion); empty for none.
	ParentInstanceID string
	// PinnedVersion, when set, is stored unconditionally as the execution's
	// pinned runtime version for capability filtering; nil leaves it alone.
	PinnedVersion *SemVer
}

// ScheduledActivityIdentifier names an activity to cancel by lock stealing.
type ScheduledActivityIdentifier struct {
	Instance    string
	ExecutionID uint64
	// ActivityID is the EventID of the ActivityScheduled event.
	ActivityID uint64
}

// OrchestrationTurn is what AckOrchestrationItem commits for one turn.
type OrchestrationTurn struct {
	// ExecutionID is the execution the history belongs to, decided by the
	// runtime (the current one, or current+1 for continue-as-new).
	ExecutionID uint64
	// HistoryDelta is appended to ExecutionID's history as given: the runtime
	// has assigned every EventID.
	HistoryDelta []history.Event
	// WorkerItems are enqueued on the worker queue (ActivityExecute).
	WorkerItems []WorkItem
	// OrchestratorItems are enqueued on the orchestrator queue; TimerFired
	// becomes visible at its FireAtMS, everything else at once. Items may
	// target other instances (sub-orchestration starts and completions,
	// detached starts, cancellations).
	OrchestratorItems []WorkItem
	// Metadata is stored on the instance and execution.
	Metadata ExecutionMetadata
	// CancelledActivities are removed from the worker queue after
	// WorkerItems are enqueued, so a same-turn schedule and cancel leaves
	// nothing behind; a missing entry is not an error.
	CancelledActivities []ScheduledActivityIdentifier
	// AwaitingActivities is a hint for dispatch, not part of the durable
	// record: after this turn the orchestration can go on only once
	// every activity named here (by the id of its ActivityScheduled
	// event, ActivityExecute.ID) has completed or failed, unless
	// something else reaches it first (an event, a timer, a
	// cancellation, a child's completion). A provider may hold the
	// instance's next turn back until then, saving turns that would find
	// nothing to do; one that ignores the hint is correct. Empty promises
	// nothing.
	AwaitingActivities []uint64
}

// SessionFetchConfig enables session routing in FetchWorkItem.
type SessionFetchConfig struct {
	// OwnerID identifies the session owner (typically one per worker process).
	OwnerID string
	// LockTimeout is how long a newly claimed session stays owned without renewal.
	LockTimeout time.Duration
}

// CustomStatus is an instance's custom status at a version.
type CustomStatus struct {
	// Status is the custom status; nil when cleared or never set.
	Status *string
	// Version increases by one on every set or clear; 0 means never changed.
	Version uint64
}

// InstanceStats is a size summary of one instance, for introspection.
type InstanceStats struct {
	// ExecutionID is the instance's current execution.
	ExecutionID uint64
	// HistoryEventCount and HistorySizeBytes cover the current execution's
	// stored history.
	HistoryEventCount uint64
	HistorySizeBytes  uint64
	// KVKeyCount and KVSizeBytes cover the instance's key-value store.
	KVKeyCount  uint64
	KVSizeBytes uint64
	// PendingMessageCount is the number of orchestrator-queue messages
	// waiting for the instance.
	PendingMessageCount uint64
}
