package engine

import (
	"time"

	"github.com/durafeed/durafeed/store"
)

// Sibling wait (Options.SiblingWait): a turn of an instance is put off
// while activities its turns scheduled through this replica are still
// outstanding here, for a bounded time. The state lives in siblings,
// guarded by Engine.mu.
type siblings struct {
	// work: instance -> worker document id -> when its turn committed
	// (ms): activities scheduled by turns this replica committed, not
	// yet seen complete (acked here) or cancelled.
	work map[string]map[string]int64
	// putOff: instance -> when the first wakeup put off since its last
	// turn was taken (ms).
	putOff map[string]int64
}

// maxSiblingInstances bounds the instances tracked; beyond it new
// fan-outs are not tracked (their turns are simply not put off).
const maxSiblingInstances = 100_000

// scheduled records the activities a committed turn scheduled (its
// worker documents in its own partition) and forgets those it cancelled.
func (e *Engine) scheduled(c store.Commit) {
	if e.opts.SiblingWait < 0 || len(c.Released) == 0 {
		return // not a turn (a work ack, a publication)
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	set := e.sib.work[c.Source]
	for _, q := range c.Visible {
		if q.IsOrchestrator() || q.InstanceID != c.Source {
			continue
		}
		if set == nil {
			if len(e.sib.work) >= maxSiblingInstances {
				return
			}
			set = map[string]int64{}
			e.sib.work[c.Source] = set
		}
		set[q.ID] = now
	}
	for _, id := range c.CancelledWork() {
		delete(set, id)
	}
	if len(set) == 0 {
		delete(e.sib.work, c.Source)
	}
}

// workDone forgets activities whose completion this replica committed.
// Called with e.mu held.
func (e *Engine) workDoneLocked(done []store.QueueHead) {
	for _, q := range done {
		if set, ok := e.sib.work[q.InstanceID]; ok {
			delete(set, q.ID)
			if len(set) == 0 {
				delete(e.sib.work, q.InstanceID)
			}
		}
	}
}

// siblingDone forgets an activity of instance whose completion the feed
// delivered (the worker document id it settles), whoever ran it.
func (e *Engine) siblingDone(instance, workID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.workDoneLocked([]store.QueueHead{{InstanceID: instance, ID: workID}})
}

// putOff reports whether a wakeup for instance's turn is put off, and
// until when: while it has outstanding siblings, within SiblingWait of
// the first wakeup put off. A wakeup that is not put off ends the
// instance's put-off period.
func (e *Engine) putOff(instance string) (time.Time, bool) {
	if e.opts.SiblingWait < 0 {
		return time.Time{}, false
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.sib.work[instance]) == 0 {
		delete(e.sib.putOff, instance)
		return time.Time{}, false
	}
	first, ok := e.sib.putOff[instance]
	if !ok {
		first = now
		e.sib.putOff[instance] = now
	}
	until := first + e.opts.SiblingWait.Milliseconds()
	if e.opts.SiblingWait < time.Millisecond {
		until = first + 1
	}
	if now >= until {
		delete(e.sib.putOff, instance)
		return time.Time{}, false
	}
	e.stats.turnsPutOff.Add(1)
	return msTime(until), true
}

// pruneSiblingsLocked forgets activities scheduled before cutoff (ms)
// and put-off marks older than that. Called with e.mu held.
func (e *Engine) pruneSiblingsLocked(cutoff int64) {
	for inst, set := range e.sib.work {
		pruneBefore(set, cutoff, func(at int64) int64 { return at })
		if len(set) == 0 {
			delete(e.sib.work, inst)
		}
	}
	pruneBefore(e.sib.putOff, cutoff, func(at int64) int64 { return at })
}
