package engine

import (
	"maps"
	"time"

	"github.com/durafeed/durafeed/store"
)

// Sibling wait and await hold (Options.SiblingWait, Options.AwaitHold):
// a turn of an instance is put off while activities its turns scheduled
// through this replica are still outstanding here. With the turn's hint
// of the activities its orchestration awaits, every one
// (store.Commit.Awaiting), the turn is held until the last of those
// completes, within AwaitHold; without one, for at most SiblingWait (off
// by default). The state lives in siblings, guarded by Engine.mu.
type siblings struct {
	// work: instance -> worker document id -> when its turn committed
	// (ms): activities scheduled by turns this replica committed, not
	// yet seen complete (acked here, or completed as the feed shows) or
	// cancelled.
	work map[string]map[string]int64
	// await: instance -> the worker document ids of outstanding
	// activities its last turn here said it awaits, every one. An entry
	// with an empty set means the hint is spent (all of them done, or
	// something else arrived): the next wakeup goes at once. No entry:
	// no hint, SiblingWait's rule.
	await map[string]map[string]bool
	// putOff: instance -> when the first wakeup put off since its last
	// turn was taken (ms).
	putOff map[string]int64
	// taken: instance -> ids of the orchestrator messages turns locked
	// here -> when (ms). A version of one of them that the change feed
	// (or a peer's wake) brings later was read before the lock: it is
	// no arrival, whatever hold the turn's commit set meanwhile.
	taken  map[string]map[string]int64
	takenN int // entries in taken, at most maxTaken
	// done: instance -> worker document ids whose completion this
	// replica committed or its feed showed -> when (ms). A hold learned
	// from the feed (learnHold) leaves them out: a completion can be
	// seen before the version of the instance that awaits it.
	done  map[string]map[string]int64
	doneN int // entries in done, at most maxTaken
	// locked: instance -> when this replica last locked a turn of it
	// (ms); instance versions the feed shows from before are stale.
	locked map[string]int64
}

// maxSiblingInstances bounds the instances tracked; beyond it new
// fan-outs are not tracked (their turns are simply not put off).
const maxSiblingInstances = 100_000

// maxTaken bounds the taken messages remembered; beyond it a stale
// version of a message can end a hold early again (one extra turn, never
// a lost message).
const maxTaken = 200_000

// scheduledHere reports whether a turn this replica committed scheduled
// the worker document workID of instance, still outstanding.
func (e *Engine) scheduledHere(instance, workID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.sib.work[instance][workID]
	return ok
}

// tracking reports whether either rule is on.
func (e *Engine) tracking() bool { return e.opts.SiblingWait > 0 || e.opts.AwaitHold >= 0 }

// scheduled records the activities a committed turn scheduled (its
// worker documents in its own partition), forgets those it cancelled,
// and takes the turn's await hint.
func (e *Engine) scheduled(c store.Commit) {
	if !e.tracking() || len(c.Released) == 0 {
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
				break
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
	delete(e.sib.await, c.Source)
	if e.opts.AwaitHold < 0 || len(c.Awaiting) == 0 {
		return
	}
	// Only activities known outstanding here can be waited for: one
	// scheduled elsewhere (before a hand-off) or already done is not.
	need := map[string]bool{}
	for _, id := range c.Awaiting {
		if _, ok := set[id]; ok {
			need[id] = true
		}
	}
	if len(need) > 0 {
		e.sib.await[c.Source] = need
	}
}

// workDoneLocked forgets activities whose completion this replica
// committed or its feed showed. Called with e.mu held.
func (e *Engine) workDoneLocked(done []store.QueueHead) {
	for _, q := range done {
		e.markDoneLocked(q.InstanceID, q.ID)
		if set, ok := e.sib.work[q.InstanceID]; ok {
			delete(set, q.ID)
			if len(set) == 0 {
				delete(e.sib.work, q.InstanceID)
			}
		}
		if need, ok := e.sib.await[q.InstanceID]; ok {
			delete(need, q.ID) // an empty set: the hint is spent
		}
	}
}

// markDoneLocked remembers that the activity of worker document id of
// instance is done, for learnHold. Called with e.mu held.
func (e *Engine) markDoneLocked(instance, id string) {
	if e.opts.AwaitHold < 0 || e.sib.doneN >= maxTaken {
		return
	}
	set := e.sib.done[instance]
	if set == nil {
		set = map[string]int64{}
		e.sib.done[instance] = set
	}
	if _, ok := set[id]; !ok {
		e.sib.doneN++
	}
	set[id] = e.now()
}

// learnHold takes the await hold the last turn of instance persisted on
// its instance document (store.FeedDoc.Awaiting), as this replica's
// feed shows an unlocked version of it written at updated (ms): the
// next turn is held here until the awaited activities not already seen
// done are (the feed shows their completions after this version, being
// later writes of the same partition), as if a turn here had committed
// it; a version awaiting nothing left spends the hold. Without this, the
// slot's owner would run a turn per completion of a fan-out that another
// replica's turn (a writer running its own write, Options.DisableEager)
// scheduled. A version written before this replica last locked the
// instance is stale and ignored, and one matching the hold already kept
// (its own turn's commit) changes nothing.
func (e *Engine) learnHold(instance string, awaiting []string, updated int64) {
	if e.opts.AwaitHold < 0 {
		return
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if updated <= e.sib.locked[instance] {
		return
	}
	done := e.sib.done[instance]
	need := map[string]bool{}
	for _, id := range awaiting {
		if _, ok := done[id]; !ok {
			need[id] = true
		}
	}
	held, ok := e.sib.await[instance]
	switch {
	case len(need) == 0:
		if ok {
			clear(held)
		}
		return
	case maps.Equal(need, held):
		return
	}
	set := e.sib.work[instance]
	if set == nil {
		if len(e.sib.work) >= maxSiblingInstances {
			return
		}
		set = map[string]int64{}
		e.sib.work[instance] = set
	}
	for id := range need {
		set[id] = now
	}
	e.sib.await[instance] = need
	delete(e.sib.putOff, instance) // a new turn committed: a new period
	e.stats.holdsLearned.Add(1)
}

// siblingDone forgets an activity of instance whose completion the feed
// delivered (the worker document id it settles), whoever ran it.
func (e *Engine) siblingDone(instance, workID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.workDoneLocked([]store.QueueHead{{InstanceID: instance, ID: workID}})
}

// arrived notes that something other than a tracked completion reached
// instance (an event, a cancellation, a child's completion, an
// abandoned turn's messages): a hold for it ends, so the next wakeup
// goes at once.
func (e *Engine) arrived(instance string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.arrivedLocked(instance)
}

// arrivedMsg is arrived for the message msg as another process wrote it
// (the change feed's version, a peer's wake naming it): a message a turn
// of this replica has taken is no arrival, since what announced it was
// read before the lock. Without this, a feed page read between a
// message's enqueue and its lock, and handled after the turn committed
// an await hold, ended that hold at once.
func (e *Engine) arrivedMsg(instance, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, stale := e.sib.taken[instance][msg]; stale {
		return
	}
	e.arrivedLocked(instance)
}

// takenLocked records the messages a turn of instance locked here.
// Called with e.mu held.
func (e *Engine) takenLocked(instance string, msgs []string) {
	if !e.tracking() || len(msgs) == 0 || e.sib.takenN+len(msgs) > maxTaken {
		return
	}
	set := e.sib.taken[instance]
	if set == nil {
		set = map[string]int64{}
		e.sib.taken[instance] = set
	}
	now := e.now()
	for _, id := range msgs {
		if _, ok := set[id]; !ok {
			e.sib.takenN++
		}
		set[id] = now
	}
}

// arrivedLocked is arrived with e.mu held.
func (e *Engine) arrivedLocked(instance string) {
	if need, ok := e.sib.await[instance]; ok {
		clear(need)
	}
}

// completionOf maps each instance a work-item ack completed to the
// worker document the ack removed, when the write is one: the item
// removed and its completion message made visible, in one partition (its
// peer wake then names the activity, so the owner counts it done).
func completionOf(w store.Write) map[string]string {
	if len(w.WorkDone) != 1 {
		return nil
	}
	d := w.WorkDone[0]
	for _, q := range w.Visible {
		if q.IsOrchestrator() && q.InstanceID == d.InstanceID {
			return map[string]string{d.InstanceID: d.ID}
		}
	}
	return nil
}

// turnTakenLocked ends instance's put-off period and its hint: a turn of it was
// locked here.
func (e *Engine) turnTakenLocked(instance string) {
	if e.tracking() && (len(e.sib.locked) < maxSiblingInstances || e.sib.locked[instance] != 0) {
		e.sib.locked[instance] = e.now()
	}
	delete(e.sib.putOff, instance)
	delete(e.sib.await, instance)
}

// putOff reports whether a wakeup for instance's turn is put off, and
// until when: while activities its last turn awaits are outstanding,
// within AwaitHold of the first wakeup put off; without such a hint,
// while it has outstanding siblings, within SiblingWait. A wakeup that is
// not put off ends the instance's put-off period.
func (e *Engine) putOff(instance string) (time.Time, bool) {
	if !e.tracking() {
		return time.Time{}, false
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	bound := e.opts.SiblingWait
	switch need, hinted := e.sib.await[instance]; {
	case hinted && len(need) == 0:
		delete(e.sib.putOff, instance)
		return time.Time{}, false
	case hinted:
		bound = e.opts.AwaitHold
	case bound <= 0 || len(e.sib.work[instance]) == 0:
		delete(e.sib.putOff, instance)
		return time.Time{}, false
	}
	first, ok := e.sib.putOff[instance]
	if !ok {
		first = now
		e.sib.putOff[instance] = now
	}
	until := first + max(bound.Milliseconds(), 1)
	if now >= until {
		delete(e.sib.putOff, instance)
		return time.Time{}, false
	}
	e.stats.turnsPutOff.Add(1)
	return msTime(until), true
}

// pruneSiblingsLocked forgets activities scheduled before cutoff (ms),
// hints whose activities are all forgotten, and put-off marks older than
// that. Called with e.mu held.
func (e *Engine) pruneSiblingsLocked(cutoff int64) {
	for inst, set := range e.sib.work {
		pruneBefore(set, cutoff, func(at int64) int64 { return at })
		if len(set) == 0 {
			delete(e.sib.work, inst)
		}
	}
	for inst, need := range e.sib.await {
		for id := range need {
			if _, ok := e.sib.work[inst][id]; !ok {
				delete(need, id)
			}
		}
		if len(need) == 0 {
			delete(e.sib.await, inst)
		}
	}
	pruneBefore(e.sib.putOff, cutoff, func(at int64) int64 { return at })
	pruneBefore(e.sib.locked, cutoff, func(at int64) int64 { return at })
	for inst, set := range e.sib.done {
		n := len(set)
		pruneBefore(set, cutoff, func(at int64) int64 { return at })
		e.sib.doneN -= n - len(set)
		if len(set) == 0 {
			delete(e.sib.done, inst)
		}
	}
	for inst, set := range e.sib.taken {
		n := len(set)
		pruneBefore(set, cutoff, func(at int64) int64 { return at })
		e.sib.takenN -= n - len(set)
		if len(set) == 0 {
			delete(e.sib.taken, inst)
		}
	}
}
