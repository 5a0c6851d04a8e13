package engine

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// maxIdleTakes bounds how many wakeups one fetch consumes after its poll
// timeout has passed (each may be stale), so a fetch always returns.
const maxIdleTakes = 64

// cancelled is the error a fetch returns when its context ends.
func cancelled(op string, ctx context.Context) error {
	return durable.Retryable(op, ctx.Err(), "cancelled")
}

// FetchOrchestrationItem implements durable.Provider's fetch for the
// event-driven mode: it joins the replica (first call), then waits on the
// orchestration hub until a wakeup leads to a locked instance or
// pollTimeout passes.
func (e *Engine) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	if err := e.s.ContainerGone(ctx, op); err != nil {
		// The feed that would wake this fetch cannot read a deleted
		// container: say so rather than "no work".
		return nil, err
	}
	if fp := e.fetchParams.Load(); fp == nil || fp.lockTimeout != lockTimeout || fp.filter != filter {
		e.fetchParams.Store(&fetchParams{lockTimeout: lockTimeout, filter: filter})
	}
	e.orchInFlight.Add(1)
	defer func() {
		e.lastOrchFetch.Store(e.clk.Now().UnixMilli())
		e.orchInFlight.Add(-1)
	}()
	deadline := e.clk.Now().Add(pollTimeout)
	switch s, err := e.join(); {
	case err == nil:
		s.awaitReady(ctx)
	case !errors.Is(err, ErrClosed):
		return nil, durable.Retryable(op, err, "joining dispatch")
	}
	late := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, cancelled(op, ctx)
		}
		if item, ok := e.takeHanded(); ok {
			e.stats.orchFetched.Add(1)
			return item, nil
		}
		if w, ok := e.takeRefused(filter); ok {
			item, err := e.orchWakeup(ctx, w, lockTimeout, filter)
			if err != nil || item != nil {
				if item != nil {
					e.stats.orchFetched.Add(1)
				}
				return item, err
			}
			continue
		}
		left := deadline.Sub(e.clk.Now())
		if left <= 0 {
			if late++; late > maxIdleTakes {
				return nil, nil
			}
		}
		w, ok := e.orch.Wait(ctx, allSlots, left)
		if !ok {
			if ctx.Err() != nil {
				return nil, cancelled(op, ctx)
			}
			return nil, nil
		}
		e.continueScan(e.orch, &e.moreOrch, w)
		item, err := e.orchWakeup(ctx, w, lockTimeout, filter)
		if err != nil {
			if ctx.Err() != nil {
				e.orch.Requeue(w)
				return nil, cancelled(op, ctx)
			}
			if durable.IsRetryable(err) && store.LostRace(err) {
				// Another fetch changed the instance or its messages
				// between our read and our lock: most likely it locked
				// them, but its turn need not hold the message this
				// wakeup was for (it may have been enqueued after that
				// fetch's query). Look again at once: the instance is
				// then found locked (and retried at its release or
				// expiry) or free.
				if k, ok := parseKey(w.Instance, kindMessages, kindLockExpiry); ok {
					e.orch.Signal(w.Slot, orchKey(k.instance), e.clk.Now())
				}
				continue
			}
			// A failure: look again shortly.
			e.orch.SignalAt(w.Slot, w.Instance, e.clk.Now().Add(time.Second))
			return nil, err
		}
		if item != nil {
			e.stats.orchFetched.Add(1)
			return item, nil
		}
	}
}

// orchWakeup acts on one orchestration wakeup.
func (e *Engine) orchWakeup(ctx context.Context, w wakeup.Wakeup, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	if w.Kind == wakeup.Scan {
		return nil, e.scanOrch(ctx, w.Slot)
	}
	k, ok := parseKey(w.Instance, kindMessages, kindLockExpiry)
	if !ok {
		return nil, nil
	}
	instance := k.instance
	if k.kind == kindMessages {
		if until, ok := e.putOff(instance); ok {
			// Siblings of the activity that woke it are still running:
			// their completions (or the bound) wake it again.
			e.orch.SignalAt(w.Slot, w.Instance, until)
			return nil, nil
		}
	}
	if k.kind == kindLockExpiry {
		// A lock expiry: void if this process released that lock, or
		// the feed showed it released (sawReleasedLocked).
		at := w.VisibleAt.UnixMilli()
		e.mu.Lock()
		rel, ok := e.released[instance]
		if ok && at >= rel {
			delete(e.released, instance)
		}
		freed, seen := e.seenFreed[instance]
		if seen && at >= freed {
			delete(e.seenFreed, instance)
		}
		e.mu.Unlock()
		if ok && at <= rel || seen && at <= freed {
			return nil, nil
		}
	}
	r, ran, err := e.lockOnce(ctx, w.Slot, instance, lockTimeout, filter)
	if r.Item != nil {
		e.wakeLatency("orchestrator", r.Due)
	}
	if !ran || err != nil || r.Item != nil {
		return r.Item, err
	}
	switch {
	case r.LockedUntil > 0:
		e.foundLocked(w.Slot, instance, r.LockedUntil)
	case r.Refused != "":
		// Pinned to a version this dispatcher cannot run: kept aside for a
		// fetch whose filter accepts it.
		e.mu.Lock()
		if len(e.refused) < 100_000 {
			e.refused[instance] = refusedOI{slot: w.Slot, version: r.Refused, at: e.now()}
		}
		e.mu.Unlock()
		if e.isOwned(w.Slot) {
			e.kickHint() // the other replicas may run it
		}
	}
	return nil, nil
}

// lockOnce runs lockInstance unless another fetch of this replica is
// locking the same instance: then it only records that a wakeup came
// meanwhile (ran false), and the fetch running the attempt follows it up
// when the attempt ends: it signals the instance again when it did not
// take the lock (unless another process holds it, whose lock the caller
// follows), and marks it blocked, so that the lock's release signals it,
// when it did. Without this, every completion reaching a busy
// instance sent one more fetch into a lock attempt that had to lose (each
// reading the instance's messages and history), until all of a replica's
// fetches raced for one instance.
func (e *Engine) lockOnce(ctx context.Context, slot int, instance string, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (store.LockResult, bool, error) {
	e.mu.Lock()
	if _, busy := e.locking[instance]; busy {
		e.locking[instance] = true
		e.mu.Unlock()
		return store.LockResult{}, false, nil
	}
	e.locking[instance] = false
	e.mu.Unlock()
	r, err := e.lockInstance(ctx, instance, lockTimeout, filter)
	e.mu.Lock()
	again := e.locking[instance]
	delete(e.locking, instance)
	if again && r.Item != nil {
		e.blocked[instance] = slot
	}
	e.mu.Unlock()
	if again && r.Item == nil && r.LockedUntil == 0 {
		// (Found locked elsewhere, the caller follows the lock instead.)
		e.orch.Signal(slot, orchKey(instance), e.clk.Now())
	}
	return r, true, err
}

// lockInstance locks one instance's turn through the store, with the
// heads the feed delivered for it, and follows what the store did: heads
// of the messages it locked are forgotten (only after the lock batch, so
// an older feed page cannot bring them back), heads it did not use are
// kept, what an abandoned attempt or a recovered publication wrote is
// signalled, and a lock taken is signalled (its expiry) before the item
// returns.
func (e *Engine) lockInstance(ctx context.Context, instance string, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (store.LockResult, error) {
	req := store.LockRequest{Instance: instance, LockTimeout: lockTimeout, Filter: filter, Owner: e.holder()}
	if heads, complete := e.heads.takeForLock(instance, e.now()); len(heads) > 0 {
		req.Read = store.FromHeads{Heads: heads, Complete: complete}
	}
	r, err := e.s.LockInstance(ctx, req)
	e.heads.forget(instance, r.LockedMsgs)
	e.heads.restore(instance, r.UnusedHeads, e.now())
	e.Wrote(r.Wrote)
	if r.Published != nil {
		e.Committed(ctx, *r.Published)
	}
	if r.Item != nil {
		e.lockedOrch(instance, r.HeldUntil, r.More, r.LockedMsgs)
	}
	return r, err
}

// takeRefused returns a refused orchestration wakeup this fetch's filter
// accepts.
func (e *Engine) takeRefused(filter *durable.DispatcherCapabilityFilter) (wakeup.Wakeup, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.refused) == 0 {
		return wakeup.Wakeup{}, false
	}
	for inst, r := range e.refused {
		v, err := durable.ParseSemVer(r.version)
		if filter != nil && err == nil && !filter.IsCompatible(v) {
			continue
		}
		delete(e.refused, inst)
		return wakeup.Wakeup{Kind: wakeup.Instance, Slot: r.slot, Instance: orchKey(inst), VisibleAt: e.clk.Now()}, true
	}
	return wakeup.Wakeup{}, false
}

// scanOrch runs the candidate query for one slot and signals what it finds
// (future work and lock expiries included).
func (e *Engine) scanOrch(ctx context.Context, slot int) error {
	e.stats.scans.Add(1)
	rows, err := e.s.QueueHeads(ctx, store.HeadQuery{Blocks: []slots.Block{{First: slot, Last: slot}}, Orchestrator: true})
	if err != nil {
		return err
	}
	limit := e.scanLimit(orchHubBound, orchSlotBound)
	e.scanLeft(&e.moreOrch, slot, len(rows) > limit)
	dueFirst(rows, e.now())
	for _, r := range rows[:min(len(rows), limit)] {
		e.signalQueue(r, true)
	}
	return nil
}

// dueFirst orders a scan's rows (oldest enqueued first) so that those
// takeable at now come first, in that order, then the others by the time
// they become takeable: what a limited scan leaves is never due before
// what it signalled.
func dueFirst(rows []store.QueueHead, now int64) {
	at := func(r store.QueueHead) int64 {
		if t := max(r.VisibleAt, r.LockedUntil); t > now {
			return t
		}
		return 0
	}
	slices.SortStableFunc(rows, func(a, b store.QueueHead) int { return cmp.Compare(at(a), at(b)) })
}

// scanLimit is how many of the rows it found a scan signals: half of the
// slot's bound, and at most half of an even share of the hub's bound among
// the slots this replica owns, so that what one scan signals never makes
// its own slot the heaviest of a full hub (see orchHubBound).
func (e *Engine) scanLimit(hubBound, slotBound int) int {
	n := max(e.ownedSet().Len(), 1)
	return max(min(slotBound/2, hubBound/(2*n)), 16)
}

// scanLeft records whether a scan of an owned slot left rows unsignalled:
// continueScan then scans the slot again once the hub holds nothing due
// there.
func (e *Engine) scanLeft(more *wakeup.Set, slot int, left bool) {
	if !e.isOwned(slot) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if left {
		more.Add(slot)
	} else {
		more.Remove(slot)
	}
}

// continueScan follows up a scan that left rows: when w, an instance
// wakeup just taken from hub, was the last one due in a slot marked in
// more, the slot is scanned again for what the scan left. Lock expiries
// and retries still in the future fold into that scan, which signals them
// again at their times.
func (e *Engine) continueScan(hub *wakeup.Hub, more *wakeup.Set, w wakeup.Wakeup) {
	if w.Kind != wakeup.Instance {
		return
	}
	e.mu.Lock()
	marked := more.Contains(w.Slot)
	e.mu.Unlock()
	if !marked || hub.HasDue(wakeup.SetOf(w.Slot)) {
		return
	}
	e.mu.Lock()
	marked = more.Contains(w.Slot)
	more.Remove(w.Slot)
	e.mu.Unlock()
	if marked && e.isOwned(w.Slot) {
		hub.SignalScan(w.Slot, e.clk.Now())
	}
}

// FetchWorkItem implements durable.Provider's fetch for the event-driven
// mode. A replica that has joined waits on its worker hub (owned slots, plus slots other replicas
// hint at); one that has not (it never fetched an orchestration: a client,
// or a worker-only node) polls the worker queue across all slots, once at
// the start and then at most once a second, until pollTimeout.
func (e *Engine) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	if tags.Mode() == durable.TagsNone {
		return nil, nil
	}
	if err := e.s.ContainerGone(ctx, op); err != nil {
		return nil, err
	}
	deadline := e.clk.Now().Add(pollTimeout)
	if joined := e.joined(); !e.isJoined() {
		for {
			r, err := e.s.LockWorkIn(ctx, slots.All(), store.WorkLockRequest{LockTimeout: lockTimeout, Session: session, Tags: tags, Owner: e.holder()})
			if err != nil || r.Item != nil {
				return r.Item, err
			}
			left := deadline.Sub(e.clk.Now())
			if left <= 0 {
				return nil, nil
			}
			// Poll again in a second, or wait on the hub as soon as the
			// replica joins (its first orchestration fetch): work its
			// turns schedule is signalled there at once.
			t := e.clk.NewTimer(min(left, time.Second))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, cancelled(op, ctx)
			case <-joined:
			case <-t.C():
			}
			t.Stop()
			if e.isJoined() {
				break
			}
			joined = e.joined()
		}
	}
	if s := e.sess.Load(); s != nil {
		s.awaitReady(ctx)
	}
	n := e.workWaiting.Add(1)
	for {
		peak := e.workPeak.Load()
		if n <= peak || e.workPeak.CompareAndSwap(peak, n) {
			break
		}
	}
	defer e.workWaiting.Add(-1)
	late := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, cancelled(op, ctx)
		}
		if w, ok := e.takeParked(tags, session); ok {
			item, err := e.workWakeup(ctx, w, lockTimeout, session, tags)
			if err != nil || item != nil {
				return e.countWork(item, err)
			}
			continue
		}
		left := deadline.Sub(e.clk.Now())
		if left <= 0 {
			if late++; late > maxIdleTakes {
				return nil, nil
			}
		}
		e.rescanHinted()
		w, ok := e.work.Wait(ctx, allSlots, min(left, 250*time.Millisecond))
		if !ok && ctx.Err() == nil && deadline.Sub(e.clk.Now()) > 0 {
			continue // re-check the hinted slots now and then
		}
		if !ok {
			if ctx.Err() != nil {
				return nil, cancelled(op, ctx)
			}
			return nil, nil
		}
		e.continueScan(e.work, &e.moreWork, w)
		item, err := e.workWakeup(ctx, w, lockTimeout, session, tags)
		if err != nil {
			if ctx.Err() != nil {
				e.work.Requeue(w)
				return nil, cancelled(op, ctx)
			}
			e.work.SignalAt(w.Slot, w.Instance, e.clk.Now().Add(time.Second))
			return nil, err
		}
		if item != nil {
			return e.countWork(item, nil)
		}
	}
}

func (e *Engine) countWork(item *durable.LockedWorkItem, err error) (*durable.LockedWorkItem, error) {
	if item != nil {
		e.stats.workFetched.Add(1)
	}
	return item, err
}

// takeParked returns a parked wakeup this fetch can use.
func (e *Engine) takeParked(tags durable.TagFilter, session *durable.SessionFetchConfig) (wakeup.Wakeup, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.parked) == 0 {
		return wakeup.Wakeup{}, false
	}
	for k, pw := range e.parked {
		if pw.sessionBusy || (pw.session && session == nil) || !tags.Matches(pw.tag) {
			continue
		}
		delete(e.parked, k)
		return wakeup.Wakeup{Kind: wakeup.Instance, Slot: pw.slot, Instance: pw.key, VisibleAt: e.clk.Now()}, true
	}
	return wakeup.Wakeup{}, false
}

// workWakeup acts on one worker wakeup: a Scan runs the worker candidate
// query for the slot and signals each candidate; an item wakeup reads the
// document and locks it if this fetch may take it.
func (e *Engine) workWakeup(ctx context.Context, w wakeup.Wakeup, lockTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	if w.Kind == wakeup.Scan {
		if !e.isOwned(w.Slot) {
			e.stats.hintScans.Add(1)
		}
		return nil, e.scanWork(ctx, w.Slot, session, tags)
	}
	k, ok := parseKey(w.Instance, kindWork)
	if !ok {
		return nil, nil
	}
	instance, id := k.instance, k.id
	e.mu.Lock()
	if _, ok := e.settled[w.Instance]; ok {
		delete(e.settled, w.Instance)
		e.mu.Unlock()
		e.stats.workSkipped.Add(1)
		return nil, nil // acked meanwhile: the item is gone
	}
	if until, ok := e.wlocked[w.Instance]; ok {
		if w.VisibleAt.UnixMilli() < until && until > e.now() {
			e.mu.Unlock()
			e.stats.workSkipped.Add(1)
			return nil, nil // locked meanwhile: its expiry has a wakeup
		}
		delete(e.wlocked, w.Instance)
	}
	rel, released := e.wreleased[w.Instance]
	if released && w.VisibleAt.UnixMilli() >= rel {
		delete(e.wreleased, w.Instance)
	}
	e.mu.Unlock()
	if released && w.VisibleAt.UnixMilli() <= rel {
		return nil, nil // the expiry of a lock we released: the item is gone
	}
	// Most wakeups find their item takeable: lock it in one request, and
	// read it only when that cannot decide.
	req := store.WorkLockRequest{LockTimeout: lockTimeout, Session: session, Tags: tags, Owner: e.holder()}
	r, err := e.s.TryLockWork(ctx, instance, id, req)
	if !r.Undecided {
		if r.Item != nil {
			e.wakeLatency("worker", r.Head.Due())
			if e.isJoined() && e.isOwned(r.Head.DispatchSlot) {
				e.work.SignalAt(r.Head.DispatchSlot, w.Instance, msTime(r.LockedUntil))
			}
		}
		return r.Item, err
	}
	q, err := e.s.ReadWork(ctx, instance, id)
	if err != nil || q == nil {
		return nil, err
	}
	now := e.now()
	if q.LockedUntil > now || q.VisibleAt > now {
		// Not takeable yet: the slot's owner follows it (its feed shows
		// every change); a helper lets it go.
		e.signalQueue(q.QueueHead, false)
		return nil, nil
	}
	if (q.SessionID != "" && session == nil) || !tags.Matches(q.Tag) {
		e.mu.Lock()
		if len(e.parked) < 100_000 {
			e.parked[w.Instance] = parkedWI{slot: w.Slot, key: w.Instance, tag: q.Tag, session: q.SessionID != "", parkedAt: now}
		}
		e.mu.Unlock()
		e.kickHint()
		return nil, nil
	}
	if q.SessionID != "" {
		owned, err := e.s.ClaimSession(ctx, q.SessionID, session)
		if err != nil {
			return nil, err
		}
		if !owned {
			// Another worker node owns the session, most likely on
			// another replica that never sees this slot's wakeups: park
			// the item, so that this replica's backlog hint makes the
			// others scan the slot, and read it again after parkRecheck
			// (the session may have expired meanwhile).
			e.mu.Lock()
			if len(e.parked) < 100_000 {
				e.parked[w.Instance] = parkedWI{slot: w.Slot, key: w.Instance, tag: q.Tag, session: true, sessionBusy: true, parkedAt: now}
			}
			e.mu.Unlock()
			e.kickHint()
			return nil, nil
		}
	}
	r, err = e.s.LockWork(ctx, q, req)
	if r.Item != nil {
		e.wakeLatency("worker", q.Due())
	}
	if r.Item != nil && e.isJoined() && e.isOwned(q.DispatchSlot) {
		e.work.SignalAt(q.DispatchSlot, workKey(q.InstanceID, q.ID), msTime(r.LockedUntil))
	}
	return r.Item, err
}

// scanWork runs the worker query for one slot and signals what it finds.
// On an owned slot the scan stands in for every wakeup the hub folded
// into it (future lock expiries and delayed retries included, and items
// this fetch's tags or session settings exclude), so it reads every worker
// document of the slot and signals each at its time. On a slot followed
// for another replica's backlog hint only items this fetch may take now
// matter: the owner tracks the rest.
func (e *Engine) scanWork(ctx context.Context, slot int, session *durable.SessionFetchConfig, tags durable.TagFilter) error {
	e.stats.scans.Add(1)
	q := store.HeadQuery{Blocks: []slots.Block{{First: slot, Last: slot}}, Worker: true}
	if !e.isOwned(slot) {
		q.DueOnly, q.Tags, q.NoSessions = true, tags, session == nil
	}
	rows, err := e.s.QueueHeads(ctx, q)
	if err != nil {
		return err
	}
	// The hub serves due wakeups in the order they were signalled. The
	// owner follows the slot oldest first; a helper starts at a random
	// place in the list of due items and wraps round, so that the owner
	// and every helper of the hint do not race for the same item at every
	// step (each race lost is a wasted read and patch).
	dueFirst(rows, e.now())
	off := 0
	if !e.isOwned(slot) && len(rows) > 1 {
		off = rand.IntN(len(rows))
	}
	limit := e.scanLimit(workHubBound, workSlotBound)
	e.scanLeft(&e.moreWork, slot, len(rows) > limit)
	for i := range min(len(rows), limit) {
		e.signalQueue(rows[(off+i)%len(rows)], true)
	}
	return nil
}
