package provider

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// maxIdleTakes bounds how many wakeups one fetch consumes after its poll
// timeout has passed (each may be stale), so a fetch always returns.
const maxIdleTakes = 64

// cancelled is the error a fetch returns when its context ends.
func cancelled(op string, ctx context.Context) error {
	return durable.Retryable(op, ctx.Err(), "cancelled")
}

// fetchOrchEvent is FetchOrchestrationItem in event-driven mode: it joins
// the replica (first call), then waits on the orchestration hub until a
// wakeup leads to a locked instance or pollTimeout passes.
func (p *Provider) fetchOrchEvent(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	e := p.ev
	e.orchInFlight.Add(1)
	defer func() {
		e.lastOrchFetch.Store(time.Now().UnixMilli())
		e.orchInFlight.Add(-1)
	}()
	deadline := time.Now().Add(pollTimeout)
	if s := e.join(); s != nil {
		s.awaitReady(ctx)
	}
	late := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, cancelled(op, ctx)
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
		left := time.Until(deadline)
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
		item, err := e.orchWakeup(ctx, w, lockTimeout, filter)
		if err != nil {
			if ctx.Err() != nil {
				e.orch.Requeue(w)
				return nil, cancelled(op, ctx)
			}
			if durable.IsRetryable(err) && isLostRace(err) {
				// Another fetch changed the instance or its messages
				// between our read and our lock: most likely it locked
				// them, but its turn need not hold the message this
				// wakeup was for (it may have been enqueued after that
				// fetch's query). Look again at once: the instance is
				// then found locked (and retried at its release or
				// expiry) or free.
				e.orch.Signal(w.Slot, orchKey(w.Instance[1:]), time.Now())
				continue
			}
			// A failure: look again shortly.
			e.orch.SignalAt(w.Slot, w.Instance, time.Now().Add(time.Second))
			return nil, err
		}
		if item != nil {
			e.stats.orchFetched.Add(1)
			return item, nil
		}
	}
}

// isLostRace reports an error from a conditional write another writer won.
func isLostRace(err error) bool { return lostRace(err) }

// orchWakeup acts on one orchestration wakeup.
func (e *engine) orchWakeup(ctx context.Context, w wakeup.Wakeup, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	if w.Kind == wakeup.Scan {
		return nil, e.scanOrch(ctx, w.Slot)
	}
	if len(w.Instance) == 0 {
		return nil, nil
	}
	kind, instance := w.Instance[0], w.Instance[1:]
	if kind == 'l' {
		// A lock expiry: void if this process released that lock.
		e.mu.Lock()
		rel, ok := e.released[instance]
		if ok && w.VisibleAt.UnixMilli() >= rel {
			delete(e.released, instance)
		}
		e.mu.Unlock()
		if ok && w.VisibleAt.UnixMilli() <= rel {
			return nil, nil
		}
	}
	item, st, err := e.p.lockInstanceEx(ctx, instance, lockTimeout, filter)
	if err != nil || item != nil {
		return item, err
	}
	switch {
	case st.lockedUntil > 0:
		e.foundLocked(w.Slot, instance, st.lockedUntil)
	case st.refused != "":
		// Pinned to a version this dispatcher cannot run: kept aside for a
		// fetch whose filter accepts it.
		e.mu.Lock()
		if len(e.refused) < 100_000 {
			e.refused[instance] = refusedOI{slot: w.Slot, version: st.refused, at: nowMS()}
		}
		e.mu.Unlock()
		if e.isOwned(w.Slot) {
			e.kickHint() // the other replicas may run it
		}
	}
	return nil, nil
}

// takeRefused returns a refused orchestration wakeup this fetch's filter
// accepts.
func (e *engine) takeRefused(filter *durable.DispatcherCapabilityFilter) (wakeup.Wakeup, bool) {
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
		return wakeup.Wakeup{Kind: wakeup.Instance, Slot: r.slot, Instance: orchKey(inst), VisibleAt: time.Now()}, true
	}
	return wakeup.Wakeup{}, false
}

// scanOrch runs the candidate query for one slot and signals what it finds
// (future work and lock expiries included).
func (e *engine) scanOrch(ctx context.Context, slot int) error {
	rows, err := queryAll[queueHead](ctx, e.p.s, nil,
		"SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt FROM c WHERE c.type = 'orch_queue' AND c.dispatchSlot = @s",
		param("@s", slot))
	if err != nil {
		return mapErr("fetch_orchestration_item", err)
	}
	byEnqueued(rows, func(r *queueHead) int64 { return r.EnqueuedAt })
	for i, r := range rows {
		if i >= orchSlotBound/2 {
			break
		}
		e.signalQueue(r, true)
	}
	return nil
}

// fetchWorkEvent is FetchWorkItem in event-driven mode. A replica that has
// joined waits on its worker hub (owned slots, plus slots other replicas
// hint at); one that has not (it never fetched an orchestration: a client,
// or a worker-only node) polls the worker queue across all slots, once at
// the start and then at most once a second, until pollTimeout.
func (p *Provider) fetchWorkEvent(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	e := p.ev
	deadline := time.Now().Add(pollTimeout)
	if joined := e.joined(); !e.isJoined() {
		for {
			item, err := p.fetchWorkPolling(ctx, lockTimeout, session, tags, slots.Block{First: 0, Last: slots.Count - 1})
			if err != nil || item != nil {
				return item, err
			}
			left := time.Until(deadline)
			if left <= 0 {
				return nil, nil
			}
			// Poll again in a second, or wait on the hub as soon as the
			// replica joins (its first orchestration fetch): work its
			// turns schedule is signalled there at once.
			t := time.NewTimer(min(left, time.Second))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, cancelled(op, ctx)
			case <-joined:
			case <-t.C:
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
		left := time.Until(deadline)
		if left <= 0 {
			if late++; late > maxIdleTakes {
				return nil, nil
			}
		}
		e.rescanHinted()
		w, ok := e.work.Wait(ctx, allSlots, min(left, 250*time.Millisecond))
		if !ok && ctx.Err() == nil && time.Until(deadline) > 0 {
			continue // re-check the hinted slots now and then
		}
		if !ok {
			if ctx.Err() != nil {
				return nil, cancelled(op, ctx)
			}
			return nil, nil
		}
		item, err := e.workWakeup(ctx, w, lockTimeout, session, tags)
		if err != nil {
			if ctx.Err() != nil {
				e.work.Requeue(w)
				return nil, cancelled(op, ctx)
			}
			e.work.SignalAt(w.Slot, w.Instance, time.Now().Add(time.Second))
			return nil, err
		}
		if item != nil {
			return e.countWork(item, nil)
		}
	}
}

func (e *engine) countWork(item *durable.LockedWorkItem, err error) (*durable.LockedWorkItem, error) {
	if item != nil {
		e.stats.workFetched.Add(1)
	}
	return item, err
}

// takeParked returns a parked wakeup this fetch can use.
func (e *engine) takeParked(tags durable.TagFilter, session *durable.SessionFetchConfig) (wakeup.Wakeup, bool) {
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
		return wakeup.Wakeup{Kind: wakeup.Instance, Slot: pw.slot, Instance: pw.key, VisibleAt: time.Now()}, true
	}
	return wakeup.Wakeup{}, false
}

// workWakeup acts on one worker wakeup: a Scan runs the worker candidate
// query for the slot and signals each candidate; an item wakeup reads the
// document and locks it if this fetch may take it.
func (e *engine) workWakeup(ctx context.Context, w wakeup.Wakeup, lockTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	if w.Kind == wakeup.Scan {
		if !e.isOwned(w.Slot) {
			e.stats.hintScans.Add(1)
		}
		return nil, e.scanWork(ctx, w.Slot, session, tags)
	}
	instance, id, ok := splitWorkKey(w.Instance)
	if !ok {
		return nil, nil
	}
	e.mu.Lock()
	rel, released := e.wreleased[w.Instance]
	if released && w.VisibleAt.UnixMilli() >= rel {
		delete(e.wreleased, w.Instance)
	}
	e.mu.Unlock()
	if released && w.VisibleAt.UnixMilli() <= rel {
		return nil, nil // the expiry of a lock we released: the item is gone
	}
	var q queueDoc
	found, err := e.p.s.read(ctx, instance, id, &q)
	if err != nil {
		return nil, mapErr(op, err)
	}
	if !found || q.Type != typeWorkQueue {
		return nil, nil
	}
	now := nowMS()
	if q.LockedUntil > now || q.VisibleAt > now {
		// Not takeable yet: the slot's owner follows it (its feed shows
		// every change); a helper lets it go.
		e.signalQueue(queueHead{ID: q.ID, InstanceID: q.InstanceID, Type: q.Type, DispatchSlot: q.DispatchSlot,
			VisibleAt: q.VisibleAt, LockedUntil: q.LockedUntil}, false)
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
		owned, err := e.p.claimSession(ctx, q.SessionID, session)
		if err != nil {
			return nil, mapErr(op, err)
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
	return e.p.lockWorkDoc(ctx, q, lockTimeout)
}

// lockWorkDoc locks a worker document read as q (If-Match its ETag).
// It returns nil, nil when another fetch won the race.
func (p *Provider) lockWorkDoc(ctx context.Context, q queueDoc, lockTimeout time.Duration) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	nonce := uuid.NewString()
	token := makeToken(tokenWork, nonce, q.InstanceID, q.ID)
	until := nowMS() + durMS(lockTimeout)
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lockToken", token)
	pt.AppendSet("/lockedUntil", until)
	pt.AppendIncrement("/attemptCount", 1)
	var locked queueDoc
	if _, err := p.s.patch(ctx, q.InstanceID, q.ID, pt, q.ETag, &locked); err != nil {
		if lostRace(err) {
			return nil, nil
		}
		return nil, mapErr(op, err)
	}
	item, err := durable.UnmarshalWorkItem([]byte(locked.WorkItem))
	if err != nil {
		return nil, durable.Permanent(op, err, "stored work item of %q cannot be decoded", q.InstanceID)
	}
	if p.ev != nil && p.ev.isJoined() && p.ev.isOwned(q.DispatchSlot) {
		p.ev.work.SignalAt(q.DispatchSlot, workKey(q.InstanceID, q.ID), msTime(until))
	}
	return &durable.LockedWorkItem{Item: item, LockToken: token, AttemptCount: locked.AttemptCount}, nil
}

// scanWork runs the worker query for one slot and signals what it finds.
// On an owned slot the scan stands in for every wakeup the hub folded
// into it (future lock expiries and delayed retries included, and items
// this fetch's tags or session settings exclude), so it reads every worker
// document of the slot and signals each at its time. On a slot followed
// for another replica's backlog hint only items this fetch may take now
// matter: the owner tracks the rest.
func (e *engine) scanWork(ctx context.Context, slot int, session *durable.SessionFetchConfig, tags durable.TagFilter) error {
	owned := e.isOwned(slot)
	sql := "SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt FROM c WHERE c.type = 'worker_queue' AND c.dispatchSlot = @s"
	params := []azcosmos.QueryParameter{param("@s", slot)}
	if !owned {
		sql += " AND c.visibleAt <= @now AND c.lockedUntil <= @now"
		params = append(params, param("@now", nowMS()))
		tc, tp := tagClause(tags)
		sql += tc
		params = append(params, tp...)
		if session == nil {
			sql += " AND c.sessionId = ''"
		}
	}
	rows, err := queryAll[queueHead](ctx, e.p.s, nil, sql, params...)
	if err != nil {
		return mapErr("fetch_work_item", err)
	}
	byEnqueued(rows, func(r *queueHead) int64 { return r.EnqueuedAt })
	for i, r := range rows {
		if i >= workSlotBound/2 {
			break
		}
		e.signalQueue(r, true)
	}
	return nil
}
