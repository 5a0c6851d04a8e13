package engine

import (
	"context"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// sweepOnce is the safety net, one cross-partition query (store.Stale):
// visible unlocked queue documents of owned slots are signalled again, and
// the outbox's repair pass delivers stale intents and finishes stale
// publications and deletions.
func (e *Engine) sweepOnce(ctx context.Context) {
	e.stats.sweeps.Add(1)
	heads, found, err := e.s.Stale(ctx, store.StaleQuery{QueueBlocks: setBlocks(e.ownedSet())})
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("safety sweep failed", zap.Int("status", store.Status(err)), zap.Error(err))
		}
		return
	}
	// A slot whose last scan left rows, and which still holds what that
	// scan signalled, is scanned again once those are taken: signalling
	// its rows here too would only collapse the hub's bounded slots (see
	// orchHubBound).
	skipOrch, skipWork := e.followedScans()
	for _, q := range heads {
		skip := skipWork
		if q.IsOrchestrator() {
			skip = skipOrch
		}
		if !skip.Contains(q.DispatchSlot) {
			e.signalQueue(q, false)
		}
	}
	r := e.out.Repair(ctx, found, e.s)
	e.delivered(r.Targets...)
	e.stats.sweepDelivered.Add(int64(r.Delivered))
	e.pruneReleased(e.now())
}

// followedScans returns the slots, per hub, whose last scan left rows and
// which still hold wakeups: continueScan scans them again.
func (e *Engine) followedScans() (orch, work wakeup.Set) {
	e.mu.Lock()
	moreOrch, moreWork := e.moreOrch, e.moreWork
	e.mu.Unlock()
	held := func(hub *wakeup.Hub, more wakeup.Set) wakeup.Set {
		var out wakeup.Set
		for sl := range more.All() {
			if hub.Pending(wakeup.SetOf(sl)) > 0 {
				out.Add(sl)
			}
		}
		return out
	}
	return held(e.orch, moreOrch), held(e.work, moreWork)
}

func (e *Engine) sweepLoop(s *session) {
	ctx := s.ctx
	for {
		d := e.opts.SafetySweepInterval
		d -= time.Duration(rand.Int64N(int64(d)/10 + 1)) // jitter: replicas drift apart
		if !e.sleep(ctx, d) {
			return
		}
		e.sweepOnce(ctx)
	}
}

// pruneReleased forgets released locks whose expiry has long passed,
// marks of settled and locked work items and parked wakeups older than a
// minute (the sweep re-finds them), refused instances and hints not seen
// for a minute.
func (e *Engine) pruneReleased(now int64) {
	cutoff := now - 60_000
	e.mu.Lock()
	defer e.mu.Unlock()
	pruneBefore(e.released, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.seenLocks, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.seenFreed, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.wreleased, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.settled, cutoff, func(at int64) int64 { return at })
	pruneBefore(e.wlocked, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.parked, cutoff, func(pw parkedWI) int64 { return pw.parkedAt })
	pruneBefore(e.refused, cutoff, func(r refusedOI) int64 { return r.at })
	// A re-read brings a hint back only while its replica lives.
	pruneBefore(e.hinted, cutoff, func(h hintSeen) int64 { return h.seenAt.UnixMilli() })
	e.pruneSiblingsLocked(cutoff)
}

// pruneBefore deletes the entries of m whose time (ms) is before cutoff.
func pruneBefore[V any](m map[string]V, cutoff int64, at func(V) int64) {
	for k, v := range m {
		if at(v) < cutoff {
			delete(m, k)
		}
	}
}

// maintLoop runs the deferred checks signalled by the feed handler.
func (e *Engine) maintLoop(ctx context.Context) {
	for {
		w, ok := e.maint.Wait(ctx, allSlots, time.Hour)
		if ctx.Err() != nil || e.closed.Load() {
			return
		}
		if !ok {
			continue
		}
		if w.Kind == wakeup.Scan {
			// The slot held more deferred checks than the hub's bound: the
			// hub forgot which. The safety sweep's repair pass finishes
			// publications and deletions older than the repair age.
			e.log.Info("deferred checks of a slot left to the safety sweep", zap.Int("slot", w.Slot))
			continue
		}
		if err := e.s.FinishInstance(ctx, w.Instance); err != nil && ctx.Err() == nil {
			e.log.Warn("deferred publication or deletion failed", zap.String("instance", w.Instance), zap.Error(err))
		}
	}
}
