package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// Stats are the engine's counters since New.
type Stats struct {
	OrchFetched    int64 // orchestration items returned
	WorkFetched    int64 // work items returned
	FeedDelivered  int64 // outbox intents delivered by the feed handler
	SweepDelivered int64 // outbox intents delivered by the safety sweep
	Sweeps         int64 // safety sweeps run
	Catchups       int64 // catch-up queries run
	HintsWritten   int64 // backlog hint documents written
	HintScans      int64 // scans run for another replica's hint
	// WorkSettled counts worker items of owned slots the feed showed acked
	// (by any replica), and WorkSkipped the wakeups a fetch dropped
	// without reading the item, because the feed had shown it acked or
	// locked since.
	WorkSettled, WorkSkipped int64
	// IntentsHeld counts feed batches the handler refused because they
	// held an outbox intent while HoldIntents was on.
	IntentsHeld int64
	// LocksReleased counts locks (worker items, messages and instance
	// locks) of replicas this one declared dead that it freed before
	// their expiry.
	LocksReleased int64
	// TurnsPutOff counts orchestration wakeups put off to wait for
	// sibling activities (Options.SiblingWait).
	TurnsPutOff int64
	// HoldsLearned counts await holds this replica took from instance
	// documents its feed showed, committed by another replica's turn.
	HoldsLearned int64
	// Eager counts work this process wrote in slots other replicas own
	// that it signalled to its own idle fetches, or whose turn its enqueue
	// locked for them (unless Options.DisableEager).
	Eager int64
	// WriteLocked counts turns locked by the enqueue that wrote their
	// message (LockOnWrite, store.EnqueueLocked) and handed to a fetch
	// here.
	WriteLocked int64
	// Scans counts the queue reads of one slot run for a Scan wakeup (a
	// collapsed slot, a newly owned one, another replica's hint, or the
	// continuation of a scan that left rows).
	Scans int64
	// PendingOrch and PendingWork are gauges, not counters: the
	// orchestration and worker wakeups the hubs hold when Stats is called,
	// at most 16,384 and 65,536 (the hubs' bounds).
	PendingOrch, PendingWork int
	// OrchFetching is a gauge too: the orchestration fetches in flight
	// (waiting for work or locking it) when Stats is called.
	OrchFetching int
}

// Stats returns the counters so far.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{OrchFetched: s.orchFetched.Load(), WorkFetched: s.workFetched.Load(), FeedDelivered: s.feedDelivered.Load(),
		SweepDelivered: s.sweepDelivered.Load(), Sweeps: s.sweeps.Load(), Catchups: s.catchups.Load(),
		HintsWritten: s.hintsWritten.Load(), HintScans: s.hintScans.Load(),
		WorkSettled: s.workSettled.Load(), WorkSkipped: s.workSkipped.Load(), IntentsHeld: s.intentsHeld.Load(),
		LocksReleased: s.locksReleased.Load(), TurnsPutOff: s.turnsPutOff.Load(), HoldsLearned: s.holdsLearned.Load(), Eager: s.eager.Load(),
		WriteLocked: s.writeLocked.Load(),
		Scans:       s.scans.Load(), PendingOrch: e.orch.Pending(allSlots), PendingWork: e.work.Pending(allSlots),
		OrchFetching: int(e.orchInFlight.Load())}
}

// ReplicaID is the replica's name in lease documents.
func (e *Engine) ReplicaID() string { return e.opts.ReplicaID }

// Joined reports whether the replica takes part in dispatch now.
func (e *Engine) Joined() bool { return e.isJoined() }

// Owned returns the dispatch slots whose lease this replica holds now
// (empty while it has not joined).
func (e *Engine) Owned() wakeup.Set { return e.ownedSet() }

// BlockOwner is one lease block of dispatch slots and who holds it, as
// this replica last saw the lease document.
type BlockOwner struct {
	Block slots.Block
	// Owner is the holder's replica id; "" for a free block.
	Owner string
	// Epoch counts the block's ownership changes.
	Epoch int64
	// Since is when the block passed to Owner, by the clock of the
	// replica that wrote the change (zero when unknown).
	Since time.Time
}

// Ownership returns every lease block, who holds it and since when, as
// this replica sees the lease documents (at most a lease-watch period
// behind the store); nil while the replica has not joined.
func (e *Engine) Ownership() []BlockOwner {
	s := e.sess.Load()
	if s == nil {
		return nil
	}
	blocks := slots.Split(e.opts.Leases.Blocks)
	var out []BlockOwner
	for _, l := range s.store.Leases() {
		if l.Index < 0 || l.Index >= len(blocks) {
			continue
		}
		out = append(out, BlockOwner{Block: blocks[l.Index], Owner: l.Owner, Epoch: l.Epoch, Since: l.AcquiredAt})
	}
	return out
}

// Members returns, sorted, the replicas this replica counts live now (its
// lease store's view of their heartbeats, itself included while its own
// is healthy); nil while the replica has not joined. It reads nothing.
func (e *Engine) Members() []string {
	s := e.sess.Load()
	if s == nil {
		return nil
	}
	return s.store.Members()
}

// LeasePartition is the partition key value of the lease, heartbeat and
// hint documents (Options.Leases.PartitionKeyValue).
func (e *Engine) LeasePartition() string { return e.leasePartition() }

// ErrClosed is returned by Join after Close.
var ErrClosed = errors.New("engine: closed")

// Join makes the replica take part in dispatch now rather than at its
// first orchestration fetch, and waits until it owns its share of the
// leases (the smallest share balancing leaves it) and has caught up on
// their backlog, or ctx ends. A service calls it before it reports ready.
func (e *Engine) Join(ctx context.Context) error {
	// While it waits, Join counts as an orchestration fetch in flight, so
	// the idle leave (Options.IdleLeave) does not end the session it waits
	// on when reaching the share takes long.
	e.orchInFlight.Add(1)
	defer func() {
		e.lastOrchFetch.Store(e.clk.Now().UnixMilli())
		e.orchInFlight.Add(-1)
	}()
	s, err := e.join()
	if err != nil {
		return err
	}
	select {
	case <-s.shared:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return ErrClosed
	}
}

// HoldIntents, while on, makes the feed handler refuse every batch that
// holds an outbox intent, as if delivery kept failing: with Close(false)
// after a commit it leaves the intent to the next owner of the slot
// (drills of a crash between a commit and its delivery).
func (e *Engine) HoldIntents(on bool) { e.holdIntents.Store(on) }

// HeadsComplete reports whether the engine holds every waiting message of
// the instance that the change feed has delivered (see the package
// documentation: a new instance is then locked without a query).
func (e *Engine) HeadsComplete(instance string) bool { return e.heads.isComplete(instance) }

// HeadCount returns how many feed heads the engine holds for instance,
// or for every instance when instance is "".
func (e *Engine) HeadCount(instance string) int { return e.heads.count(instance) }

// Positioned reports whether every change-feed reader of the leases this
// replica holds has fixed where its feed starts: whatever is written from
// then on reaches the replica through its feed (anything earlier through
// the catch-up query).
func (e *Engine) Positioned() bool {
	s := e.sess.Load()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unpinned) == 0
}

// Hinting returns, sorted, the replicas whose backlog hint with slots in
// it this replica has seen (diagnostics; a hint it no longer follows,
// stale or of a dead replica, is listed until it is pruned).
func (e *Engine) Hinting() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.hinted))
	for r := range e.hinted {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// PendingCounts counts the wakeups waiting in the orchestrator and worker
// hubs that a fetch may take now (orchDue, workDue) and those due later
// (timers, lock expiries) in both (diagnostics; a copy of Pending's
// figures).
func (e *Engine) PendingCounts() (orchDue, workDue, later int) {
	orch, work := e.Pending()
	for _, w := range orch.Pending {
		if w.Due {
			orchDue++
		} else {
			later++
		}
	}
	for _, w := range work.Pending {
		if w.Due {
			workDue++
		} else {
			later++
		}
	}
	return orchDue, workDue, later
}

// Pending returns the wakeups waiting in the orchestrator and worker hubs
// (diagnostics).
func (e *Engine) Pending() (orch, work wakeup.State) { return e.orch.Snapshot(), e.work.Snapshot() }

// Leave hands this replica's leases to the others now, as it does after
// IdleLeave without an orchestration fetch; the next fetch (or Join)
// joins again. It returns once the hand-off is done.
func (e *Engine) Leave() {
	if s := e.sess.Load(); s != nil {
		e.leave(s, true)
	}
}
