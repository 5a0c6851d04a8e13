package store

import (
	"encoding/json"
	"sync/atomic"
	"time"
)

// Document types (the "type" field).
const (
	typeInstance  = "instance"
	typeExecution = "execution"
	typeHistory   = "history"
	typeOrchQueue = "orch_queue"
	typeWorkQueue = "worker_queue"
	typeSession   = "session"
	typeKV        = "kv"
	typeStaged    = "staged"
	typeTombstone = "outbox_tombstone"
)

// tombstoneDoc stands, for the request retention, where a turn consumed
// an outbox delivery's target message: it keeps the message's id, so a
// later delivery of the same intent (a resend after a lost answer, the
// repair pass, the committer and the slot's owner both delivering) finds
// it there (409, delivered) instead of creating the message again. It is
// no queue document: nothing dispatches or counts it, and it expires
// through the container's time to live.
type tombstoneDoc struct {
	ID         string `json:"id"`
	InstanceID string `json:"instanceId"`
	Type       string `json:"type"`
	TTL        int64  `json:"ttl"`
}

// instanceDoc is the one document per instance: metadata, the lock, custom
// status and the commit records of the large-turn and deletion protocols.
type instanceDoc struct {
	ID         string `json:"id"`
	InstanceID string `json:"instanceId"`
	Type       string `json:"type"`
	ETag       string `json:"_etag,omitempty"`

	// Pending marks a document created by fetch for an instance that has
	// queued work but no committed turn: it holds the lock only, and every
	// read treats the instance as absent.
	Pending bool `json:"pending,omitempty"`

	OrchestrationName    string  `json:"orchestrationName,omitempty"`
	OrchestrationVersion string  `json:"orchestrationVersion,omitempty"`
	CurrentExecutionID   uint64  `json:"currentExecutionId"`
	Status               string  `json:"status,omitempty"`
	Output               *string `json:"output,omitempty"`
	ParentInstanceID     string  `json:"parentInstanceId,omitempty"`
	PinnedVersion        string  `json:"pinnedVersion,omitempty"`

	CustomStatus        *string `json:"customStatus,omitempty"`
	CustomStatusVersion uint64  `json:"customStatusVersion"`

	LockToken   string   `json:"lockToken,omitempty"`
	LockedUntil int64    `json:"lockedUntil"`
	LockedMsgs  []string `json:"lockedMsgs,omitempty"`
	// LockOwner is the lock's holder (LockRequest.Owner), for
	// ReleaseLocksOf; meaningful only while LockedUntil is ahead.
	LockOwner string `json:"lockOwner,omitempty"`
	// LastCommit identifies the last committed turn's ack (its lock
	// nonce and a per-call suffix), so an ack whose batch outcome was lost
	// in transit can tell it committed, and another ack of the same lock
	// cannot mistake that commit for its own.
	LastCommit string `json:"lastCommit,omitempty"`
	// Awaiting, written by a turn's commit and cleared by the next lock,
	// names the worker documents whose activities that turn's
	// orchestration awaits, every one (Commit.Awaiting): the await hold,
	// persisted so that whichever replica reads the instance next from
	// the change feed holds the next turn as the committing one does.
	Awaiting []string `json:"awaiting,omitempty"`

	// Staging is the lock nonce of a large turn whose overflow is being
	// staged (not yet committed).
	Staging string `json:"staging,omitempty"`
	// Publish is the commit record of a large turn whose staged documents
	// are not all published yet.
	Publish *publishRecord `json:"publish,omitempty"`
	// Deleting marks an instance that a cascading deletion has claimed: it
	// is invisible to everything but the deletion.
	Deleting   string `json:"deleting,omitempty"`
	DeletingAt int64  `json:"deletingAt,omitempty"`

	// Exec is a copy of the current execution's record, so that ack needs
	// no second read to advance it.
	Exec *executionDoc `json:"exec,omitempty"`

	CreatedAt   int64 `json:"createdAt"`
	UpdatedAt   int64 `json:"updatedAt"`
	CompletedAt int64 `json:"completedAt,omitempty"`
}

// publishRecord lists what a committed large turn still has to publish.
type publishRecord struct {
	Token      string   `json:"token"`
	DeleteMsgs []string `json:"deleteMsgs,omitempty"`
	At         int64    `json:"at"`
}

func (d *instanceDoc) lockHeld(now int64) bool { return d.LockToken != "" && d.LockedUntil > now }

// visible reports whether the instance exists for readers.
func (d *instanceDoc) visible() bool { return d != nil && !d.Pending && d.Deleting == "" }

// executionDoc describes one execution and holds its history high-water
// mark: history documents with eventId <= Mark are committed, anything
// beyond is staged and invisible.
type executionDoc struct {
	ID           string  `json:"id"`
	InstanceID   string  `json:"instanceId"`
	Type         string  `json:"type"`
	ExecutionID  uint64  `json:"executionId"`
	Status       string  `json:"status"`
	Output       *string `json:"output,omitempty"`
	StartedAt    int64   `json:"startedAt"`
	CompletedAt  int64   `json:"completedAt,omitempty"`
	Mark         uint64  `json:"mark"`
	EventCount   uint64  `json:"eventCount"`
	HistoryBytes uint64  `json:"historyBytes"`
	// OutputElsewhere marks the copy in the instance document
	// (instanceDoc.Exec) of a record whose output was left out: the
	// output is in the instance document's Output and in the record
	// itself, and a third copy in the same commit batch would cut the
	// largest output a turn can write from a half of the batch to a
	// third. An ack that needs the record reads it then.
	OutputElsewhere bool `json:"outputElsewhere,omitempty"`
}

// historyDoc is one event.
type historyDoc struct {
	ID          string `json:"id"`
	InstanceID  string `json:"instanceId"`
	Type        string `json:"type"`
	ExecutionID uint64 `json:"executionId"`
	EventID     uint64 `json:"eventId"`
	EventData   string `json:"eventData"`
	StagedBy    string `json:"stagedBy,omitempty"`

	// decodeErr is set on a document read back whose fields did not
	// decode (see partitionView.add).
	decodeErr error
}

// queueDoc is an orchestrator- or worker-queue message.
type queueDoc struct {
	ID           string `json:"id"`
	InstanceID   string `json:"instanceId"`
	Type         string `json:"type"`
	ETag         string `json:"_etag,omitempty"`
	WorkItem     string `json:"workItem"`
	DispatchSlot int    `json:"dispatchSlot"`
	VisibleAt    int64  `json:"visibleAt"`
	EnqueuedAt   int64  `json:"enqueuedAt"`
	LockToken    string `json:"lockToken,omitempty"`
	LockedUntil  int64  `json:"lockedUntil"`
	LockOwner    string `json:"lockOwner,omitempty"`
	AttemptCount uint32 `json:"attemptCount"`
	// Worker items only.
	ExecutionID uint64 `json:"executionId,omitempty"`
	ActivityID  uint64 `json:"activityId,omitempty"`
	SessionID   string `json:"sessionId"`
	Tag         string `json:"tag"`
	// Settles, on a completion a worker's ack created, is the id of the
	// worker item that ack deleted in the same batch (same partition): a
	// feed reader that sees the completion knows the item is gone.
	Settles string `json:"settles,omitempty"`
	// Staged documents (type "staged") become FinalType when published.
	StagedBy  string `json:"stagedBy,omitempty"`
	FinalType string `json:"finalType,omitempty"`
}

// UnmarshalJSON decodes a queue document. A workItem that is not a JSON
// string (a document written by hand or by another program) is kept as
// its JSON text instead of failing the decoding, and with it the query
// that read the document: the work item then fails to decode on its own,
// and the fetch drops (orchestrator queue) or poisons (worker queue) that
// message alone instead of failing on the instance forever.
func (d *queueDoc) UnmarshalJSON(b []byte) error {
	type plain queueDoc
	var aux struct {
		plain
		WorkItem json.RawMessage `json:"workItem"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*d = queueDoc(aux.plain)
	if len(aux.WorkItem) > 0 && json.Unmarshal(aux.WorkItem, &d.WorkItem) != nil {
		d.WorkItem = string(aux.WorkItem)
	}
	return nil
}

// kvDoc is one key of an instance's key-value store.
type kvDoc struct {
	ID         string `json:"id"`
	InstanceID string `json:"instanceId"`
	Type       string `json:"type"`
	ETag       string `json:"_etag,omitempty"`
	Key        string `json:"key"`
	// Has, Value and LastUpdatedAtMS are the snapshot layer; Delta is the
	// current execution's write (see kv.go).
	Has             bool     `json:"has,omitempty"`
	Value           string   `json:"value"`
	LastUpdatedAtMS uint64   `json:"lastUpdatedAtMs"`
	ExecutionID     uint64   `json:"executionId"`
	Delta           *kvDelta `json:"delta,omitempty"`
}

// sessionDoc records a session's owner.
type sessionDoc struct {
	ID           string `json:"id"`
	InstanceID   string `json:"instanceId"`
	Type         string `json:"type"`
	ETag         string `json:"_etag,omitempty"`
	SessionID    string `json:"sessionId"`
	OwnerID      string `json:"ownerId"`
	LockedUntil  int64  `json:"lockedUntil"`
	LastActivity int64  `json:"lastActivity"`
	CreatedAt    int64  `json:"createdAt"`
}

// nowMS is the provider's clock, in ms since the epoch.
func nowMS() int64 { return time.Now().UnixMilli() }

var lastEnqueue atomic.Int64

// enqueueStamp returns a strictly increasing microsecond timestamp within
// the process, so that messages enqueued in one millisecond keep their order.
func enqueueStamp() int64 {
	for {
		now := time.Now().UnixMicro()
		last := lastEnqueue.Load()
		if now <= last {
			now = last + 1
		}
		if lastEnqueue.CompareAndSwap(last, now) {
			return now
		}
	}
}

func durMS(d time.Duration) int64 { return d.Milliseconds() }
