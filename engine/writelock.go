package engine

import (
	"slices"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// The write that enqueues a message locks its turn (store.EnqueueLocked)
// when a fetch of this replica waits for the message's slot: the writer
// runs what it wrote without a round trip for the lock. The engine
// decides (LockOnWrite), the provider writes, and the engine hands the
// locked turn to a fetch (HandOver), which returns it ahead of any
// wakeup.

// maxHanded bounds the turns locked by writes that no fetch has taken
// yet, those being written included: a burst of writes locks one turn
// and leaves the rest to the fetches' usual locks.
const maxHanded = 1

// handedTurn is a turn a write locked that no fetch has taken yet, with
// when its message became takeable (store.LockResult.Due, for the wake
// latency).
type handedTurn struct {
	item *durable.OrchestrationItem
	due  int64
}

// fetchParams are the lock timeout and capability filter of this
// replica's latest orchestration fetch: a write locks a turn as that
// fetch would have.
type fetchParams struct {
	lockTimeout time.Duration
	filter      *durable.DispatcherCapabilityFilter
}

// LockOnWrite reports whether an enqueue of an orchestrator message for
// instance, with no delay, should lock its turn (store.EnqueueLocked),
// and returns the lock request: it should when a fetch of this replica
// waits for the instance's slot (owned or not, unless
// Options.DisableEager) and no other write's turn waits for a fetch. A
// true answer reserves the hand-over: the caller calls HandOver once,
// whatever the write did.
func (e *Engine) LockOnWrite(instance string) (store.LockRequest, bool) {
	slot := slots.Of(instance)
	fp := e.fetchParams.Load()
	if e.opts.DisableEager || fp == nil || e.closed.Load() || !e.isJoined() || !e.orch.Waiting(slot) {
		return store.LockRequest{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.handReserved+len(e.handed) >= maxHanded {
		return store.LockRequest{}, false
	}
	e.handReserved++
	return store.LockRequest{Instance: instance, LockTimeout: fp.lockTimeout, Filter: fp.filter, Owner: e.holder()}, true
}

// HandOver follows an enqueue LockOnWrite allowed, with what
// store.EnqueueLocked returned (a zero result when it wrote nothing):
// the turn it locked goes to the next fetch of this replica; a lock it
// gave up is followed as any write. It reports false when the engine is
// closed and will hand r.Item to no fetch: the caller releases its lock.
func (e *Engine) HandOver(r store.LockResult) bool {
	e.mu.Lock()
	e.handReserved--
	open := !e.closed.Load()
	if r.Item != nil && open {
		e.handed = append(e.handed, handedTurn{item: r.Item, due: r.Due})
	}
	e.mu.Unlock()
	if r.Item == nil {
		e.Wrote(r.Wrote)
		return true
	}
	if !open {
		return false
	}
	e.stats.writeLocked.Add(1)
	instance := r.Item.Instance
	if !e.isOwned(slots.Of(instance)) {
		e.stats.eager.Add(1) // run here, in a slot owned elsewhere
	}
	e.lockedOrch(instance, r.HeldUntil, r.More, r.LockedMsgs)
	e.orch.Signal(slots.Of(instance), handKey(instance), e.clk.Now())
	return true
}

// takeHanded returns the oldest turn a write locked that no fetch has
// taken, and records its wake latency.
func (e *Engine) takeHanded() (*durable.OrchestrationItem, bool) {
	e.mu.Lock()
	if len(e.handed) == 0 {
		e.mu.Unlock()
		return nil, false
	}
	h := e.handed[0]
	e.handed = slices.Delete(e.handed, 0, 1)
	e.mu.Unlock()
	e.wakeLatency("orchestrator", h.due)
	return h.item, true
}

// DropHanded forgets the turns writes locked that no fetch took and
// returns their lock tokens, for the caller to release once the engine
// is closed (their locks would otherwise delay them until they expire).
func (e *Engine) DropHanded() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	tokens := make([]string, 0, len(e.handed))
	for _, h := range e.handed {
		tokens = append(tokens, h.item.LockToken)
	}
	e.handed = nil
	return tokens
}
