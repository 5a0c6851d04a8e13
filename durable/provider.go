package durable

import (
	"context"
	"time"

	"github.com/durafeed/durafeed/durable/history"
)

// Provider is the storage contract of the durable orchestration runtime:
// event histories, an orchestrator queue and a worker queue with peek-lock
// semantics, instance locks, sessions, custom status and a key-value store.
//
// The provider is storage, not an engine: it never generates event or
// execution ids, never creates events and never interprets them, except
// where a method says so (CustomStatusUpdated and the key-value events are
// materialised at ack).
//
// Lock lifecycle. A fetch that returns an item holds a lock on it until the
// item is acked or abandoned, or the lock expires; a fetch that returns nil
// or an error holds none. Locks are identified by opaque, unique tokens.
// Every method that takes a token fails with a permanent error when the
// token is unknown, or its lock has expired, unless it says otherwise.
//
// Errors. Every method returns a *ProviderError (possibly wrapped):
// retryable for transient failures (throttling, timeouts, lost optimistic
// races), permanent otherwise. A failed method leaves no partial effect
// visible to other callers. Methods honour ctx: cancellation aborts the call
// with an error wrapping ctx.Err().
//
// Cancelled calls. A runtime that shuts down cancels the contexts of the
// calls it has in flight and does not wait for them, so cancellation may
// come at any point of a call, including after its writes reached the
// store. The provider must stay correct whatever that point:
//
//   - A call releases everything it holds in the process (connections,
//     slot shares, long-poll waiters, goroutines) when it returns,
//     cancelled or not; a cancelled fetch never goes on waiting, and never
//     takes work after it returned.
//   - A cancelled fetch leaves either no lock or one whole lock: the
//     instance lock and its messages' locks together (with their attempt
//     counts raised once), never one without the other. A lock it took
//     but could not return is not released early or renewed: it expires
//     after lockTimeout like any unacknowledged lock, and the work is then
//     fetchable again.
//   - A cancelled AckOrchestrationItem or AckWorkItem commits wholly or not
//     at all, even when cancellation races the commit. The error does not
//     say which: a second ack with the same token commits if the first did
//     not and fails permanently if it did, so a turn commits at most once.
//
// Version stamps. Every event carries the version of the runtime that
// wrote it (history.Event.RuntimeVersion), and the runtime chooses the
// replay rules of an execution from the stamp on its OrchestrationStarted
// event: an execution started by an older runtime keeps that runtime's
// rules whichever runtime replays it. Providers therefore return events
// exactly as they were appended, stamps included, from every read and
// fetch, and never restamp them.
//
// Implementations are safe for concurrent use.
type Provider interface {
	// Name identifies the implementation in logs and diagnostics.
	Name() string
	// Version is the implementation's version.
	Version() string

	// FetchOrchestrationItem finds an instance with visible, unlocked
	// orchestrator-queue messages, locks the instance for lockTimeout, locks
	// every such message present now (incrementing each one's attempt
	// count), and returns them with the current execution's history and the
	// instance's key-value snapshot.
	//
	// filter, when non-nil, is applied before the instance is locked and
	// before any history is read: executions pinned to an incompatible
	// runtime version are skipped (an execution with no pinned version is
	// always compatible). A QueueMessage for an instance that has not
	// started (no history, no StartOrchestration among the messages) is
	// deleted, not returned. If the stored history cannot be decoded the
	// item is still returned, locked and counted, with HistoryError set and
	// History empty.
	//
	// pollTimeout bounds how long a long-polling provider may wait for work
	// to arrive; a short-polling provider returns at once. It returns nil,
	// nil when there is no work.
	FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *DispatcherCapabilityFilter) (*OrchestrationItem, error)

	// AckOrchestrationItem atomically commits a turn and releases the lock:
	// it appends turn.HistoryDelta to turn.ExecutionID (append-only: it never
	// reads or re-encodes stored events), creates or updates the instance
	// and execution metadata (the current execution becomes at least
	// turn.ExecutionID), applies the last CustomStatusUpdated of the delta
	// (incrementing the custom status version) and the key-value events in
	// order (see OrchestrationItem.KVSnapshot for when they reach the
	// snapshot), enqueues WorkerItems and OrchestratorItems, then removes
	// CancelledActivities from the worker queue, and deletes the locked
	// messages. Either all of it becomes visible or none of it does. It fails
	// permanently if the lock is invalid or expired, or if an event id
	// already exists in the execution.
	AckOrchestrationItem(ctx context.Context, lockToken string, turn OrchestrationTurn) error

	// AbandonOrchestrationItem releases the lock without committing. It
	// acts only on the messages the fetch that issued lockToken locked:
	// they become visible again after delay (at once for 0), and with
	// ignoreAttempt each one's attempt count takes back the increment that
	// fetch made, so the abandoned delivery does not count toward poison
	// detection (never below zero). Messages the fetch did not lock (those
	// that arrived during the lock, or were hidden by an earlier delay) keep
	// their visibility and their counts: a message that arrived during the
	// lock can be fetched at once, on its own, even while the abandoned
	// ones wait out their delay. It fails permanently for an unknown token.
	AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error

	// RenewOrchestrationItemLock extends a held orchestration lock to
	// now+extendFor. It fails permanently if the lock is unknown or expired.
	RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error

	// Read returns the current execution's history ordered by EventID, or an
	// empty slice for an unknown instance, each event as it was appended
	// (version stamps included). Events that cannot be decoded are an error,
	// never silently dropped.
	Read(ctx context.Context, instance string) ([]history.Event, error)

	// ReadWithExecution returns one execution's history ordered by EventID
	// (empty if it does not exist).
	ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]history.Event, error)

	// AppendWithExecution appends events to an execution's history as given
	// (testing and repair only; the runtime appends through ack). A duplicate
	// event id is a permanent error and nothing is written.
	AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []history.Event) error

	// EnqueueForWorker adds an ActivityExecute to the worker queue, visible
	// at once, persisting its session id and tag for routing.
	EnqueueForWorker(ctx context.Context, item WorkItem) error

	// FetchWorkItem locks one visible, unlocked worker-queue item for
	// lockTimeout, incrementing its attempt count. Only items whose tag
	// passes tags are eligible. With session == nil, only items without a
	// session are eligible; otherwise also items whose session is owned by
	// session.OwnerID or unowned (expired), and fetching such an item claims
	// the session for session.OwnerID for session.LockTimeout. pollTimeout
	// is as for FetchOrchestrationItem. It returns nil, nil when there is no
	// work.
	FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *SessionFetchConfig, tags TagFilter) (*LockedWorkItem, error)

	// AckWorkItem atomically deletes the locked item and, when completion is
	// non-nil, enqueues it on the orchestrator queue; for a session item it
	// also records session activity. It fails permanently if the item is
	// gone (cancelled by lock stealing), its lock was taken over, or the
	// lock expired.
	AckWorkItem(ctx context.Context, lockToken string, completion WorkItem) error

	// AbandonWorkItem releases the item's lock; it becomes visible after
	// delay (at once for 0), and with ignoreAttempt its attempt count is
	// decremented (never below zero). Abandoning an unknown token succeeds.
	AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error

	// RenewWorkItemLock extends a held work-item lock to now+extendFor and
	// records session activity. It fails permanently when the item is gone
	// (which is how a worker learns its activity was cancelled), the lock
	// was taken over, or it expired.
	RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error

	// RenewSessionLock extends, to now+extendFor, every session owned by one
	// of ownerIDs whose lock has not expired and which saw activity within
	// idleTimeout; idle sessions are left to expire. It returns how many
	// sessions were renewed.
	RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error)

	// CleanupOrphanedSessions deletes sessions whose lock has expired and
	// that no worker-queue item references; it returns how many. Any caller
	// may sweep any owner's sessions.
	CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error)

	// EnqueueForOrchestrator adds an item to the orchestrator queue, visible
	// after delay (at once for 0). It never creates the instance.
	EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay time.Duration) error

	// GetCustomStatus returns the instance's custom status if its version is
	// greater than lastSeenVersion, and nil if it is not or the instance does
	// not exist. It takes no lock.
	GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*CustomStatus, error)

	// GetKVValue returns one key of the instance's key-value store,
	// including the writes of the current execution acked so far (unlike
	// OrchestrationItem.KVSnapshot); ok is false when the key or the
	// instance does not exist.
	GetKVValue(ctx context.Context, instance, key string) (value string, ok bool, err error)

	// GetKVAllValues returns the instance's key-value store as GetKVValue
	// sees it (empty, not nil, when there is none).
	GetKVAllValues(ctx context.Context, instance string) (map[string]string, error)

	// GetInstanceStats returns size statistics for the instance, or nil if
	// it does not exist.
	GetInstanceStats(ctx context.Context, instance string) (*InstanceStats, error)

	// Admin returns the provider's management capability, if it has one.
	Admin() (ProviderAdmin, bool)
}
