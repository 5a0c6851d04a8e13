package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// relevantDoc is the change-feed filter: only queue documents, outbox
// intents and instance documents matter to the handler. History, KV,
// execution records and everything in the lease partition (leases,
// heartbeats, hints, whose writes would otherwise keep the reader of their
// range busy) are skipped without a handler call or a checkpoint.
func relevantDoc(raw json.RawMessage) bool { return store.FeedKindOf(raw) != store.FeedOther }

var errHeld = errors.New("engine: intent delivery held (HoldIntents)")

// handle is the change-feed handler: every changed document of an owned
// slot block becomes a wakeup, a delivery or a deferred check.
func (e *Engine) handle(ctx context.Context, b changefeed.Batch) error {
	for _, raw := range b.Documents {
		f, err := e.s.DecodeFeedDoc(raw, e.now())
		if err != nil {
			continue // not ours
		}
		switch f.Kind {
		case store.FeedOrchestrator:
			switch {
			case f.Settles != "":
				e.siblingDone(f.InstanceID, f.Settles) // before its signal: the turn may go now
			case f.LockedUntil == 0 && f.VisibleAt <= e.now():
				e.arrivedMsg(f.InstanceID, f.ID) // an event, a cancellation, a child's completion
			}
			if f.HasHead {
				e.heads.note(f.Head, e.now()) // kept only if the slot is owned
			} else {
				e.heads.missed(f.InstanceID)
			}
			e.signalQueue(f.QueueHead, false)
			if f.Settles != "" && f.LockedUntil == 0 { // as created: later versions repeat it
				e.workSettled(f.DispatchSlot, workKey(f.InstanceID, f.Settles))
			}
		case store.FeedWorker:
			e.workSeen(f.QueueHead)
			e.signalQueue(f.QueueHead, false)
		case store.FeedInstance:
			e.instanceChanged(f)
		case store.FeedIntent:
			if e.holdIntents.Load() {
				e.stats.intentsHeld.Add(1)
				return errHeld
			}
			in := f.Intent
			if !e.isOwned(slots.Of(in.InstanceID)) {
				continue
			}
			target, err := e.out.Deliver(ctx, in)
			if target != nil {
				e.delivered(target)
			}
			if err != nil {
				if ctx.Err() != nil || store.Retryable(err) {
					return err // the batch is offered again
				}
				e.log.Warn("outbox intent left for the safety sweep", zap.String("source", in.InstanceID),
					zap.String("target", in.TargetInstance), zap.Int("status", store.Status(err)))
				continue
			}
			e.stats.feedDelivered.Add(1)
		}
	}
	return nil
}

// setBlocks renders a set of slots as its runs of consecutive slots.
func setBlocks(s wakeup.Set) []slots.Block {
	bs := []slots.Block{}
	for sl := range s.All() {
		if sl >= slots.Count {
			break
		}
		if n := len(bs); n > 0 && bs[n-1].Last == sl-1 {
			bs[n-1].Last = sl
			continue
		}
		bs = append(bs, slots.Block{First: sl, Last: sl})
	}
	return bs
}

// catchUp signals every queue document of the slots: the backlog of slots
// newly owned (one query for all slots acquired together, instead of a
// scan per slot). It returns the instances it found orchestrator messages
// of.
func (e *Engine) catchUp(ctx context.Context, set wakeup.Set) ([]string, error) {
	rows, err := e.s.QueueHeads(ctx, store.HeadQuery{Blocks: setBlocks(set), Orchestrator: true, Worker: true})
	if err != nil {
		return nil, err
	}
	e.stats.catchups.Add(1)
	var orch []string
	for _, r := range rows {
		if r.IsOrchestrator() {
			orch = append(orch, r.InstanceID)
		}
		e.signalQueue(r, false)
	}
	return orch, nil
}

// kickHint wakes the backlog-hint check of the running session.
func (e *Engine) kickHint() {
	if s := e.sess.Load(); s != nil {
		signalCh(s.hintKick)
	}
}

// onPositioned is the processor's OnPositioned: the reader of a lease has
// fixed its starting point, so a catch-up of the lease's slots now covers
// everything written before it.
func (e *Engine) onPositioned(s *session, leaseID string) {
	s.mu.Lock()
	slots, ok := s.unpinned[leaseID]
	delete(s.unpinned, leaseID)
	if ok {
		s.catchup = s.catchup.Union(slots.Intersect(*s.owned.Load()))
	}
	s.mu.Unlock()
	if ok {
		signalCh(s.catchKick)
	}
}

func (e *Engine) catchupLoop(s *session) {
	ctx := s.ctx
	delay := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.catchKick:
		}
		s.mu.Lock()
		slots := s.catchup.Intersect(*s.owned.Load())
		s.catchup = wakeup.Set{}
		s.mu.Unlock()
		if slots.IsEmpty() {
			e.checkReady(s)
			continue
		}
		found, err := e.catchUp(ctx, slots)
		if err == nil {
			// Slots with no catch-up still to come (a lease whose reader
			// has not fixed its start yet gets one more) now have complete
			// heads, but for the instances the query found.
			s.mu.Lock()
			done := slots.Intersect(*s.owned.Load()).Difference(s.catchup)
			for _, u := range s.unpinned {
				done = done.Difference(u)
			}
			e.heads.caughtUp(done, found)
			s.mu.Unlock()
			e.checkReady(s)
			delay = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("catch-up query failed; retrying", zap.Error(err))
		s.mu.Lock()
		s.catchup = s.catchup.Union(slots)
		s.mu.Unlock()
		if !e.sleep(ctx, delay) {
			return
		}
		delay = min(2*delay, 10*time.Second)
		signalCh(s.catchKick)
	}
}

// readyWait bounds how long the first fetch waits for the replica's share.
const readyWait = 3 * time.Second

// checkReady closes ready once no catch-up is pending and this replica
// owns at least the smallest share balancing leaves a replica
// (floor(leases/members), within one lease of even, at least one).
func (e *Engine) checkReady(s *session) {
	s.mu.Lock()
	pending := !s.catchup.Intersect(*s.owned.Load()).IsEmpty()
	s.mu.Unlock()
	if pending {
		return
	}
	members := max(len(s.store.Members()), 1)
	fair := max(e.opts.Leases.Blocks/members, 1)
	if len(s.store.Owned()) >= fair {
		s.readyOnce.Do(func() { close(s.ready) })
		s.sharedOnce.Do(func() { close(s.shared) })
	}
}

// awaitReady waits (bounded by readyWait) for the session's first lease
// share and its catch-up.
func (s *session) awaitReady(ctx context.Context) {
	select {
	case <-s.ready:
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
}

// wakeSlot makes the feed reader of slot read at once.
func (e *Engine) wakeSlot(slot int) {
	if s := e.sess.Load(); s != nil {
		s.proc.Wake(slots.Block{First: slot, Last: slot}.Range())
	}
}
