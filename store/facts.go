package store

import (
	"context"
	"slices"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/outbox"
)

// QueueHead is what dispatch needs of a queue document to signal it: its
// identity, slot and times (ms since the Unix epoch). It is also the row
// of the store's slot queries.
type QueueHead struct {
	ID           string `json:"id"`
	InstanceID   string `json:"instanceId"`
	Type         string `json:"type"`
	DispatchSlot int    `json:"dispatchSlot"`
	VisibleAt    int64  `json:"visibleAt"`
	LockedUntil  int64  `json:"lockedUntil"`
	EnqueuedAt   int64  `json:"enqueuedAt"`
}

// IsOrchestrator reports a message of the orchestrator queue; otherwise
// the head is a worker item.
func (q QueueHead) IsOrchestrator() bool { return q.Type == typeOrchQueue }

// IsQueue reports whether a document type is a queue message's.
func IsQueue(docType string) bool { return docType == typeOrchQueue || docType == typeWorkQueue }

// Due returns when the message became takeable (unix ms): its enqueue
// (EnqueuedAt is in microseconds, by its writer's clock), or its
// visibility time when later (a timer, a delayed retry).
func (h QueueHead) Due() int64 {
	enq := h.EnqueuedAt
	if enq > 1e14 { // microseconds (milliseconds in documents written before that)
		enq /= 1000
	}
	return max(enq, h.VisibleAt)
}

func (d queueDoc) head() QueueHead {
	return QueueHead{ID: d.ID, InstanceID: d.InstanceID, Type: d.Type, DispatchSlot: d.DispatchSlot,
		VisibleAt: d.VisibleAt, LockedUntil: d.LockedUntil, EnqueuedAt: d.EnqueuedAt}
}

// Release is an orchestration lock this process released (by an ack or
// an abandon): LockedUntil was its expiry, so a wakeup for that expiry is
// void.
type Release struct {
	Instance    string
	LockedUntil int64
}

// Write is what a store write left for dispatch to signal. It is data:
// the store never waits on dispatch, and a dispatcher acts on a Write
// without I/O.
type Write struct {
	// Visible are queue documents the write created or made visible again
	// (at their VisibleAt).
	Visible []QueueHead
	// Released are orchestration locks the write released.
	Released []Release
	// WorkDone are worker items the write removed while this process held
	// their lock (LockedUntil is that lock's expiry).
	WorkDone []QueueHead
	// Heads are orchestrator messages the write created, whole, as a
	// fetch may lock them (LockRequest.Read FromHeads) without waiting
	// for the change feed to deliver them.
	Heads []Head
}

// merge returns w followed by o.
func (w Write) merge(o Write) Write {
	return Write{Visible: slices.Concat(w.Visible, o.Visible), Released: slices.Concat(w.Released, o.Released),
		WorkDone: slices.Concat(w.WorkDone, o.WorkDone), Heads: slices.Concat(w.Heads, o.Heads)}
}

// Commit is what a committed turn or work-item ack leaves for dispatch:
// its Write, and the outbox intents the commit wrote into Source's
// partition, which someone must deliver (the dispatcher decides who).
// After the dispatcher has seen it, the caller passes it to Store.Tidy
// for the store's own follow-up writes.
type Commit struct {
	Write
	// Source is the instance whose partition the commit wrote.
	Source string
	// Intents are the commit's outbox intents, undelivered.
	Intents []outbox.Intent
	// Awaiting (a turn's commit) are the ids of the worker documents, in
	// Source's partition, of the activities the turn says its
	// orchestration awaits, every one, before it can go on
	// (durable.OrchestrationTurn.AwaitingActivities); empty for none.
	Awaiting []string
	// Turn is set on a turn's commit (AckOrchestrationItem): Source's
	// status, output or custom status may have changed, so whoever
	// watches it should read it again.
	Turn bool

	cancel  []durable.ScheduledActivityIdentifier // activities the turn cancelled
	session string                                // session whose idle timer the ack restarts
}

// CancelledWork returns the ids of the worker documents, in the commit's
// own partition, of the activities the turn cancelled (Tidy removes them).
func (c Commit) CancelledWork() []string {
	var ids []string
	for _, a := range c.cancel {
		if a.Instance == c.Source {
			ids = append(ids, workDocID(a.ExecutionID, a.ActivityID))
		}
	}
	return ids
}

// Tidy runs the best-effort writes that follow a commit once dispatch has
// been told of it: the removal of activities the turn cancelled, and the
// refresh of the acked item's session. Failures are logged: a cancelled
// activity left behind completes harmlessly, and a session lapses on its
// own.
func (p *Store) Tidy(ctx context.Context, c Commit) {
	for _, a := range c.cancel {
		if err := p.deleteActivity(ctx, a); err != nil {
			p.log.Warn("cancelled activity not removed", zap.String("instance", a.Instance), zap.Error(err))
		}
	}
	if c.session != "" {
		p.touchSession(ctx, c.session)
	}
}

// Stats are counters of the store's lock paths, for tests and
// diagnostics.
type Stats struct {
	// StaleCache counts locks from a remembered instance document that
	// failed because another process had written it.
	StaleCache int64
	// HeadLocks counts locks taken from feed heads; StaleHeads those that
	// failed; BareLocks those of a new instance that needed no query.
	HeadLocks, StaleHeads, BareLocks int64
	// WriteLocks counts turns locked by the enqueue that wrote their
	// message (EnqueueLocked).
	WriteLocks int64
	// BlindRereads counts blind locks (EnqueueLocked without a remembered
	// document) whose query had read another commit: the turn's inputs
	// were read again under the lock.
	BlindRereads int64
}

type stats struct {
	staleCache, headLocks, staleHeads, bareLocks, writeLocks, blindRereads atomic.Int64
}

// Stats returns the counters so far.
func (p *Store) Stats() Stats {
	return Stats{StaleCache: p.st.staleCache.Load(), HeadLocks: p.st.headLocks.Load(),
		StaleHeads: p.st.staleHeads.Load(), BareLocks: p.st.bareLocks.Load(), WriteLocks: p.st.writeLocks.Load(),
		BlindRereads: p.st.blindRereads.Load()}
}
