package engine

import (
	"context"
	"encoding/json"

	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// signalQueue turns a queue document's current state into a wakeup on the
// local hubs, when its slot is owned here (or always, with force).
func (e *Engine) signalQueue(q store.QueueHead, force bool) {
	if q.DispatchSlot < 0 || q.DispatchSlot >= slots.Count || (!force && !e.isOwned(q.DispatchSlot)) {
		return
	}
	now := e.now()
	switch {
	case q.IsOrchestrator():
		if q.LockedUntil > now {
			e.sawLock(q.InstanceID, q.LockedUntil)
			e.orch.SignalAt(q.DispatchSlot, lockKey(q.InstanceID), msTime(q.LockedUntil))
			return
		}
		e.orch.Signal(q.DispatchSlot, orchKey(q.InstanceID), msTime(q.VisibleAt))
	default:
		at := q.VisibleAt
		if q.LockedUntil > at {
			at = q.LockedUntil
		}
		e.work.Signal(q.DispatchSlot, workKey(q.InstanceID, q.ID), msTime(at))
		if at <= now {
			e.kickHint()
		}
	}
}

// Wrote implements the dispatcher contract: it signals what a write of
// this process made visible (owned slots only) and voids the expiry
// wakeups of the locks it released. It does no I/O.
func (e *Engine) Wrote(w store.Write) { e.wrote(w, true) }

// wrote follows a write. With arrivals its orchestrator messages are
// arrivals that end an await hold (an enqueue, an abandon, released
// locks); a commit's own are not (its completion is tracked, and a turn's
// messages to its own instance are its timers).
func (e *Engine) wrote(w store.Write, arrivals bool) {
	settles := completionOf(w)
	var here []bool // which of w.Visible run here (unless Options.DisableEager)
	if !e.opts.DisableEager {
		here = make([]bool, len(w.Visible))
	}
	for i, q := range w.Visible {
		if here != nil {
			here[i] = e.eagerWrite(q, settles[q.InstanceID])
		}
		if here == nil || !here[i] {
			e.wakePeer(q, settles[q.InstanceID])
		}
	}
	if !e.isJoined() {
		return
	}
	for _, r := range w.Released {
		e.unlockedOrch(r.Instance, r.LockedUntil)
	}
	// Work this process removed, or made visible again, is no longer
	// locked by anyone: the feed's lock marks of it are void.
	e.mu.Lock()
	e.workDoneLocked(w.WorkDone)
	for _, q := range w.WorkDone {
		key := workKey(q.InstanceID, q.ID)
		e.wreleased[key] = q.LockedUntil
		delete(e.wlocked, key)
	}
	for _, q := range w.Visible {
		if !q.IsOrchestrator() {
			delete(e.wlocked, workKey(q.InstanceID, q.ID))
		} else if arrivals {
			e.arrivedLocked(q.InstanceID)
		}
	}
	e.mu.Unlock()
	// The messages the write created, whole: the fetch that runs them
	// here locks from them at once instead of querying first.
	for _, hd := range w.Heads {
		q := hd.QueueHead()
		for i, v := range w.Visible {
			if v.ID == q.ID && (e.isOwned(q.DispatchSlot) || here != nil && here[i]) {
				e.heads.noteWritten(hd, e.now())
				break
			}
		}
	}
	for i, q := range w.Visible {
		e.signalQueue(q, here != nil && here[i])
	}
}

// eagerWrite is eager for a queue document a write of this replica made
// visible; settles names the worker document whose ack created it (a
// completion), or is "". A completion runs here only when a turn here
// scheduled its activity: the await hold of its instance lives where its
// last turn ran, and a replica that merely helped with the activity (a
// backlog hint) would run a turn per completion.
func (e *Engine) eagerWrite(q store.QueueHead, settles string) bool {
	if e.opts.DisableEager {
		return false
	}
	if settles != "" && q.IsOrchestrator() && e.tracking() && !e.scheduledHere(q.InstanceID, settles) {
		return false
	}
	return e.eager(q)
}

// eager reports whether this replica runs q, made visible by a write of
// its own in a slot it does not own (unless Options.DisableEager): it
// takes part in dispatch, and a local fetch of q's queue is waiting for work now. A
// busy replica leaves q to the slot's owner, whose feed shows it.
func (e *Engine) eager(q store.QueueHead) bool {
	hub := e.work
	if q.IsOrchestrator() {
		hub = e.orch
	}
	return e.eagerIn(hub, q.DispatchSlot)
}

// eagerIn is eager for a wakeup of hub in slot.
func (e *Engine) eagerIn(hub *wakeup.Hub, slot int) bool {
	if e.opts.DisableEager || !e.isJoined() || slot < 0 || slot >= slots.Count || e.isOwned(slot) || !hub.Waiting(slot) {
		return false
	}
	e.stats.eager.Add(1)
	return true
}

// Committed implements the dispatcher contract: it signals the commit's
// Write, then has its intents delivered. The owner of the source slot
// delivers them from its change feed, so a local owner only wakes its
// reader; anyone else delivers directly (best-effort: the feed or the
// safety sweep delivers what is left).
func (e *Engine) Committed(ctx context.Context, c store.Commit) {
	if c.Turn {
		defer e.InstanceChanged(c.Source) // peers watching it
	}
	e.scheduled(c)
	e.wrote(c.Write, false)
	if len(c.Intents) == 0 {
		return
	}
	if e.isJoined() {
		if slot := slots.Of(c.Source); e.isOwned(slot) {
			e.wakeSlot(slot)
			return
		}
	}
	targets, _ := e.out.DeliverAll(ctx, c.Intents)
	e.delivered(targets...)
}

// delivered signals the target documents outbox deliveries left in
// place.
func (e *Engine) delivered(targets ...json.RawMessage) {
	if !e.isJoined() && e.wake == nil {
		return
	}
	for _, target := range targets {
		if f, err := e.s.DecodeFeedDoc(target, e.now()); err == nil && (f.Kind == store.FeedOrchestrator || f.Kind == store.FeedWorker) {
			here := e.eager(f.QueueHead)
			if !here {
				e.wakePeer(f.QueueHead, "")
			}
			if f.Kind == store.FeedOrchestrator && (here || e.isOwned(f.DispatchSlot)) {
				e.arrivedMsg(f.InstanceID, f.ID) // a child's completion, an event: a hold here ends
			}
			e.signalQueue(f.QueueHead, here)
		}
	}
}

// lockedOrch records an orchestration lock this process took, on the
// messages msgs: its expiry is signalled, and work that waited for it may
// go.
func (e *Engine) lockedOrch(instance string, until int64, more bool, msgs []string) {
	slot := slots.Of(instance)
	e.mu.Lock()
	if more {
		e.blocked[instance] = slot // the rest goes once this turn is done
	}
	// A blocked mark stays: work signalled while this lock was being
	// taken may not be in the turn; the release signals it.
	delete(e.released, instance)
	if rel, ok := e.seenFreed[instance]; ok && rel > until {
		delete(e.seenFreed, instance) // see sawLock
	}
	e.turnTakenLocked(instance)
	e.takenLocked(instance, msgs)
	e.mu.Unlock()
	if e.isOwned(slot) {
		e.orch.SignalAt(slot, lockKey(instance), msTime(until))
	}
}

// unlockedOrch records that a lock on instance (expiring at until) was
// released by this process: its expiry wakeup is void, and work that
// arrived while it was held may go now.
func (e *Engine) unlockedOrch(instance string, until int64) {
	slot := slots.Of(instance)
	e.mu.Lock()
	e.released[instance] = until
	_, wasBlocked := e.blocked[instance]
	delete(e.blocked, instance)
	e.mu.Unlock()
	if wasBlocked && (e.isOwned(slot) || e.eagerIn(e.orch, slot)) {
		e.orch.Signal(slot, orchKey(instance), e.clk.Now())
	}
}

// maxSettled bounds the settled marks kept (an optimisation: a wakeup
// without one costs a read).
const maxSettled = 100_000

// workSettled records a worker item of an owned slot that the feed showed
// acked (a completion naming it): the wakeups this replica holds for it
// are void, so a fetch drops them without reading the item. Helpers that
// take items of this replica's slots would otherwise cost the owner a read
// per item (of a locked or deleted document).
func (e *Engine) workSettled(slot int, key string) {
	if !e.isOwned(slot) {
		return
	}
	e.mu.Lock()
	if len(e.settled) < maxSettled {
		e.settled[key] = e.now()
		e.stats.workSettled.Add(1)
	}
	e.mu.Unlock()
}

// workSeen records the lock of a worker item of an owned slot as the feed
// shows it (the feed shows a partition's versions in order): while it
// holds, wakeups of the item from before its expiry are void (its
// expiry has a wakeup of its own), so a fetch drops them without reading
// a document someone else is working on. A version without a lock (an
// abandon, a retry delay) voids the mark.
func (e *Engine) workSeen(q store.QueueHead) {
	if !e.isOwned(q.DispatchSlot) {
		return
	}
	key := workKey(q.InstanceID, q.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if q.LockedUntil <= e.now() {
		delete(e.wlocked, key)
		return
	}
	if len(e.wlocked) < maxSettled || e.wlocked[key] != 0 {
		e.wlocked[key] = q.LockedUntil
	}
}

// foundLocked records an instance a fetch found locked: it is retried when
// the lock expires, or as soon as its holder releases it.
func (e *Engine) foundLocked(slot int, instance string, until int64) {
	e.mu.Lock()
	rel, ok := e.released[instance]
	gone := ok && rel >= until // released by this process meanwhile
	if !gone {
		e.blocked[instance] = slot
	}
	e.mu.Unlock()
	if gone {
		e.orch.Signal(slot, orchKey(instance), e.clk.Now())
		return
	}
	e.sawLock(instance, until)
	e.orch.SignalAt(slot, lockKey(instance), msTime(until))
}

// sawLock records a lock on instance, expiring at until, that a feed
// document or a lock attempt showed held: once the feed shows the
// instance unlocked, the expiry wakeups of the locks seen so far are void
// (sawReleasedLocked). A mark of a release seen earlier that would void
// this lock's expiry too (a later lock expiring earlier, under a shorter
// lock timeout) is dropped: an expiry wakeup is only ever voided by the
// release of its own lock or of a later one.
func (e *Engine) sawLock(instance string, until int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if until > e.seenLocks[instance] {
		e.seenLocks[instance] = until
	}
	if rel, ok := e.seenFreed[instance]; ok && rel > until {
		delete(e.seenFreed, instance)
	}
}

// sawReleasedLocked records that the feed showed instance unlocked: the
// locks seen held before are released (committed or abandoned), so the
// wakeups at their expiry are void (orchWakeup drops them without a lock
// attempt). Work that waited for them was marked blocked, which the same
// feed document signals.
func (e *Engine) sawReleasedLocked(instance string) {
	until, ok := e.seenLocks[instance]
	if !ok {
		return
	}
	delete(e.seenLocks, instance)
	if until > e.seenFreed[instance] {
		e.seenFreed[instance] = until
	}
}

// instanceChanged reacts to an instance document seen on the feed.
func (e *Engine) instanceChanged(d store.FeedDoc) {
	slot := slots.Of(d.InstanceID)
	if !e.isOwned(slot) {
		return
	}
	if !d.LockHeld {
		e.mu.Lock()
		_, wasBlocked := e.blocked[d.InstanceID]
		delete(e.blocked, d.InstanceID)
		_, ours := e.released[d.InstanceID]
		e.sawReleasedLocked(d.InstanceID)
		e.mu.Unlock()
		if wasBlocked {
			e.orch.Signal(slot, orchKey(d.InstanceID), e.clk.Now())
		}
		e.learnHold(d.InstanceID, d.Awaiting, d.UpdatedAt)
		if !ours {
			// Another replica's turn (this one's provider reported its own).
			e.InstanceChanged(d.InstanceID)
		}
	} else {
		// A dispatcher that accepts its version runs it: a message left
		// after that turn is refused (and advertised) afresh.
		e.mu.Lock()
		delete(e.refused, d.InstanceID)
		e.mu.Unlock()
		e.sawLock(d.InstanceID, d.LockedUntil)
	}
	if d.RepairAt > 0 {
		e.maint.Signal(slot, d.InstanceID, msTime(d.RepairAt))
	}
}
