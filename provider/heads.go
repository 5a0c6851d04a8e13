package provider

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// Bounds of the head index: instances with heads, heads per instance, the
// largest work item a head keeps (a larger message is read by the fetch's
// query, as without heads), the work-item bytes of all heads, and the
// messages remembered as locked.
const (
	maxHeadInstances = 4096
	maxHeadsPerInst  = 16
	maxHeadItemBytes = 4 << 10
	maxHeadBytes     = 4 << 20
	maxGoneIDs       = 16384
	maxPartial       = 1 << 16
)

// msgHead is an orchestrator message as the change feed delivered it:
// enough to lock it (its ETag) and to run it (its work item) without
// reading it again.
type msgHead struct {
	doc queueDoc
}

// headIndex holds, per instance, the unlocked orchestrator messages the
// feed delivered that no fetch has taken yet. It is a hint, never the
// truth: a lock built from a head is conditional on the head's ETag, and
// the fetch's query, run at the same time, finds whatever the heads miss.
// Its one owner is the engine; every method is safe for concurrent use and
// a no-op on a nil index.
type headIndex struct {
	mu    sync.Mutex
	m     map[string][]msgHead
	bytes int // work-item bytes held
	// gone are messages a turn of this process locked: a feed page read
	// before the lock but handled after it would bring back a version
	// that is stale already.
	gone map[string]struct{}
	// goneOrder is gone's insertion order, for eviction.
	goneOrder []string
	// owned says whether this replica owns a slot (nil: every slot). note
	// asks it under mu, and ownership changes before dropSlots takes mu,
	// so no head of a slot given up outlives its dropSlots.
	owned func(slot int) bool

	// complete are the owned slots whose heads hold every unlocked message
	// of their instances that the feed has delivered, and whose feed
	// starts where a finished catch-up query took over: a message of one
	// of their instances either is a head or was written after the feed
	// read that delivered the newest head, except for the instances in
	// partial (the catch-up found messages of theirs, or a message of
	// theirs was not kept as a head). See isComplete.
	complete wakeup.Set
	partial  map[string]struct{}
}

func newHeadIndex(owned func(slot int) bool) *headIndex {
	return &headIndex{m: map[string][]msgHead{}, gone: map[string]struct{}{}, owned: owned, partial: map[string]struct{}{}}
}

// markPartial records that the heads of instance may miss one of its
// messages; when partial is full, the instance's whole slot stops
// counting as complete instead. mu held.
func (h *headIndex) markPartial(instance string) {
	if _, ok := h.partial[instance]; ok {
		return
	}
	if len(h.partial) >= maxPartial {
		h.complete.Remove(slots.Of(instance))
		return
	}
	h.partial[instance] = struct{}{}
}

// missed records that the feed delivered a message of instance that
// could not be kept as a head.
func (h *headIndex) missed(instance string) {
	if h == nil || instance == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.markPartial(instance)
}

// acquired forgets what was known of slots this replica now owns again:
// they count as complete only after their catch-up (caughtUp).
func (h *headIndex) acquired(set wakeup.Set) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.complete = h.complete.Difference(set)
	for inst := range h.partial {
		if set.Contains(slots.Of(inst)) {
			delete(h.partial, inst)
		}
	}
}

// caughtUp makes slots complete after the catch-up query that found
// messages of instances (their slots' backlog when the query ran, which
// covers everything written before their feed's starting point); the
// caller passes only slots awaiting no further catch-up. Ownership is
// checked again here, under the lock dropSlots takes, so a slot lost
// since the caller looked is not marked.
func (h *headIndex) caughtUp(set wakeup.Set, instances []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sl := range set.All() {
		if h.owned == nil || h.owned(sl) {
			h.complete.Add(sl)
		}
	}
	for _, inst := range instances {
		if set.Contains(slots.Of(inst)) {
			h.markPartial(inst) // when partial is full, drops the slot again
		}
	}
}

// isComplete reports whether the heads of instance hold every unlocked
// message of it written before the feed read that delivered its newest
// head (see headIndex.complete).
func (h *headIndex) isComplete(instance string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, part := h.partial[instance]
	return !part && h.complete.Contains(slots.Of(instance))
}

// note records (or, when the message is locked or its work item is too
// large to keep, forgets) the version q of a message the feed delivered,
// if this replica owns its slot.
func (h *headIndex) note(q queueDoc, now int64) {
	if h == nil || q.ID == "" || q.InstanceID == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owned != nil && !h.owned(q.DispatchSlot) {
		return
	}
	h.set(q.InstanceID, slices.DeleteFunc(slices.Clone(h.m[q.InstanceID]), func(x msgHead) bool { return x.doc.ID == q.ID }))
	if _, gone := h.gone[q.ID]; gone || q.LockedUntil > now {
		// Locked: its instance exists (a lock batch writes the instance
		// document), so no turn is ever built from heads alone for it.
		return
	}
	if q.ETag == "" || len(q.WorkItem) > maxHeadItemBytes || len(h.m[q.InstanceID]) >= maxHeadsPerInst {
		h.markPartial(q.InstanceID)
		return
	}
	for len(h.m) > 0 && (h.bytes+len(q.WorkItem) > maxHeadBytes || len(h.m) >= maxHeadInstances && h.m[q.InstanceID] == nil) {
		for k := range h.m { // evict one instance: its fetch's query reads its messages
			h.set(k, nil)
			h.markPartial(k)
			break
		}
	}
	h.set(q.InstanceID, append(h.m[q.InstanceID], msgHead{doc: q}))
}

// set replaces the heads of an instance, keeping the byte count; hs must
// not share the old slice's elements (they are counted out first). mu held.
func (h *headIndex) set(instance string, hs []msgHead) {
	for _, x := range h.m[instance] {
		h.bytes -= len(x.doc.WorkItem)
	}
	if len(hs) == 0 {
		delete(h.m, instance)
		return
	}
	for _, x := range hs {
		h.bytes += len(x.doc.WorkItem)
	}
	h.m[instance] = hs
}

// take removes and returns the instance's heads visible at now, oldest
// first; later ones (a timer not yet due) stay.
func (h *headIndex) take(instance string, now int64) []msgHead {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var due, later []msgHead
	for _, x := range h.m[instance] {
		if x.doc.VisibleAt <= now {
			due = append(due, x)
		} else {
			later = append(later, x)
		}
	}
	h.set(instance, later)
	sort.Slice(due, func(i, j int) bool { return due[i].doc.EnqueuedAt < due[j].doc.EnqueuedAt })
	return due
}

// restore puts back heads take returned that no batch used.
func (h *headIndex) restore(instance string, hs []msgHead, now int64) {
	for _, x := range hs {
		h.note(x.doc, now)
	}
}

// forget drops the instance's heads for messages a turn has locked, and
// keeps their versions from coming back.
func (h *headIndex) forget(instance string, ids []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set(instance, slices.DeleteFunc(slices.Clone(h.m[instance]), func(x msgHead) bool { return slices.Contains(ids, x.doc.ID) }))
	for _, id := range ids {
		if _, ok := h.gone[id]; ok {
			continue
		}
		if len(h.goneOrder) >= maxGoneIDs {
			delete(h.gone, h.goneOrder[0])
			h.goneOrder = h.goneOrder[1:]
		}
		h.gone[id] = struct{}{}
		h.goneOrder = append(h.goneOrder, id)
	}
}

// dropSlots forgets the heads of the instances in slots: their lease went
// to another replica (or the replica left dispatch), whose turns make them
// stale. Call it after the slots stopped counting as owned.
func (h *headIndex) dropSlots(slots wakeup.Set) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.complete = h.complete.Difference(slots)
	for inst, hs := range h.m {
		if slots.Contains(hs[0].doc.DispatchSlot) { // one instance, one slot
			h.set(inst, nil)
		}
	}
}

// turnRead is the answer of a turn-input query made for one lock attempt
// that another attempt may use: the query's messages, view and (head
// query) instance document, for execution exec.
type turnRead struct {
	msgs    []lockedMessage
	view    partitionView
	d       *instanceDoc
	session string
	exec    uint64
	head    bool // the query also read the instance document (no remembered one)
}

// lockFromHeads locks an instance from the messages the feed delivered
// (heads) and from the remembered instance document c or, with none, from
// the guess that a start message makes the instance new (the lock batch
// creates its document). The lock batch runs at the same time as the
// turn-input query instead of after it, so a feed-woken fetch costs one
// round trip after the feed read instead of two. The batch is conditional
// on the document (its ETag, or its absence) and on every head's ETag:
// when it succeeds the heads were still waiting, unlocked, and the
// document, and with it the history and KV store the query reads, had not
// changed since c was written. The query then says what the heads missed
// (messages the feed had not delivered yet, or delivered before this
// process owned the slot); those join the turn in a second batch, under
// the lock already held.
//
// With nothing locked it returns what the normal path may reuse: pre, the
// query's answer when it is valid for that path, and staleDoc when c was
// the batch's stale precondition. A lock it cannot turn into a coherent
// turn (rare: a message that must be dropped, more than a turn takes) is
// abandoned without counting an attempt, which signals the instance again.
func (p *Provider) lockFromHeads(ctx context.Context, instance string, c *cachedInst, heads []msgHead, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (item *durable.OrchestrationItem, st lockState, pre *turnRead, staleDoc bool, err error) {
	const op = "fetch_orchestration_item"
	decline := func() (*durable.OrchestrationItem, lockState, *turnRead, bool, error) {
		p.ev.heads.restore(instance, heads, nowMS())
		return nil, lockState{}, nil, false, nil
	}
	if len(heads) > maxTurnMessages {
		return decline()
	}
	keep := make([]lockedMessage, 0, len(heads))
	newStart := false // a first execution's start: the instance may be new
	for _, h := range heads {
		w, derr := durable.UnmarshalWorkItem([]byte(h.doc.WorkItem))
		if derr != nil {
			return nil, st, nil, false, nil // the normal path drops it
		}
		if s, ok := w.(durable.StartOrchestration); ok && s.ExecutionID <= 1 {
			newStart = true
		}
		keep = append(keep, lockedMessage{doc: h.doc, item: w})
	}
	var d *instanceDoc
	session := ""
	if c != nil {
		d, session = &c.doc, c.session
		if filter != nil && d.PinnedVersion != "" {
			if v, perr := durable.ParseSemVer(d.PinnedVersion); perr == nil && !filter.IsCompatible(v) {
				return decline() // the normal path says it is refused
			}
		}
	} else if !newStart {
		return decline() // not a new instance: its document is read first
	}

	now := nowMS()
	nonce := uuid.NewString()
	token := makeToken(tokenOrch, nonce, instance, "")
	until := now + durMS(lockTimeout)
	nd, ops := lockOps(instance, d, keep, token, until, now)

	q := &turnRead{head: c == nil}
	if d != nil {
		q.exec = d.CurrentExecutionID
	}
	// A new instance whose heads are complete needs no query: if the batch
	// creates its document, nothing of it existed (a deletion removes the
	// instance document last; a lock writes it), so it has no history, KV
	// or locked message, and the heads hold every message of it the query
	// would have found but those written after the feed read, which the
	// next turn takes (as if written after this fetch).
	bare := c == nil && p.ev.heads.isComplete(instance)
	var qerr error
	var wg sync.WaitGroup
	if !bare {
		wg.Go(func() {
			q.msgs, q.view, q.d, q.session, qerr = p.queryTurn(ctx, instance, q.exec, q.head, now, session)
		})
	}
	res, berr := p.s.execBatch(ctx, instance, ops, false)
	wg.Wait()
	if berr != nil {
		if !lostRace(berr) {
			return nil, st, nil, false, mapErr(op, berr)
		}
		p.ev.stats.staleHeads.Add(1)
		var be *batchError
		staleDoc = c != nil && errors.As(berr, &be) && be.index == 0
		if qerr == nil && !staleDoc && !bare {
			pre = q
		}
		return nil, st, pre, staleDoc, nil
	}
	p.ev.stats.headLocks.Add(1)
	if bare {
		p.ev.stats.bareLocks.Add(1)
	}
	// From here the lock is ours: a turn, or an abandon.
	giveUp := func(cause error) (*durable.OrchestrationItem, lockState, *turnRead, bool, error) {
		if aerr := p.AbandonOrchestrationItem(context.WithoutCancel(ctx), token, 0, true); aerr != nil {
			p.log.Debug("abandoning a lock taken from feed heads failed; it expires", zap.String("instance", instance), zap.Error(aerr))
		}
		if cause != nil {
			return nil, lockState{}, nil, false, mapErr(op, cause)
		}
		return nil, lockState{}, nil, false, nil
	}
	if qerr != nil {
		return giveUp(qerr)
	}
	committed := d != nil
	if c == nil && q.d != nil && q.d.LockToken != token {
		// The document existed when the query ran yet the batch created
		// it: deleted in between. Let the normal path look again.
		return giveUp(nil)
	}
	started := committed && len(q.view.history) > 0
	hasStart := slices.ContainsFunc(keep, func(m lockedMessage) bool {
		_, ok := m.item.(durable.StartOrchestration)
		return ok
	})

	// What the heads missed.
	locked := make([]string, 0, len(keep))
	for _, m := range keep {
		locked = append(locked, m.doc.ID)
	}
	extra, drop, extraStart := p.decodeMessages(instance, q.msgs, locked)
	hasStart = hasStart || extraStart
	if !started && !hasStart {
		// QueueMessages for an instance that has not started are dropped;
		// one among the locked heads cannot be, under this lock.
		if _, queued := withoutQueueMessages(keep); len(queued) > 0 {
			return giveUp(nil)
		}
		var queued []string
		extra, queued = withoutQueueMessages(extra)
		drop = append(drop, queued...)
	}
	if len(keep)+len(extra) > maxTurnMessages || 1+len(extra)+len(drop) > maxBatchOps {
		return giveUp(nil)
	}
	instETag := res.etags[0]
	if len(extra) > 0 || len(drop) > 0 {
		keep = append(keep, extra...)
		sort.Slice(keep, func(i, j int) bool { return keep[i].doc.EnqueuedAt < keep[j].doc.EnqueuedAt })
		nd.LockedMsgs = nd.LockedMsgs[:0]
		for _, m := range keep {
			nd.LockedMsgs = append(nd.LockedMsgs, m.doc.ID)
		}
		ops2 := []batchOp{opReplace(idInstance, nd, instETag)}
		for _, m := range extra {
			ops2 = append(ops2, opPatch(m.doc.ID, lockPatch(token, until), m.doc.ETag))
		}
		for _, id := range drop {
			ops2 = append(ops2, opDelete(id))
		}
		res2, err := p.s.execBatch(ctx, instance, ops2, false)
		if err != nil {
			if lostRace(err) {
				return giveUp(nil)
			}
			return giveUp(err)
		}
		instETag, res.session = res2.etags[0], res2.session
		p.ev.heads.forget(instance, nd.LockedMsgs)
		ops = ops2
	}
	p.ic.hold(token, nd, instETag, res.session, len(ops[0].body), q.view.kv, true)
	item = turnItem(instance, token, keep, d, committed, q.view)
	return item, lockState{heldUntil: until, more: len(drop) > 0}, nil, false, nil
}

// lockOps are the lock batch of a turn of keep: the instance document
// locked (created pending when d is nil, else replaced conditionally on
// d's ETag), then every message locked conditionally on its ETag.
func lockOps(instance string, d *instanceDoc, keep []lockedMessage, token string, until, now int64) (instanceDoc, []batchOp) {
	ids := make([]string, len(keep))
	for i, m := range keep {
		ids[i] = m.doc.ID
	}
	var nd instanceDoc
	var instOp batchOp
	if d == nil {
		nd = instanceDoc{ID: idInstance, InstanceID: instance, Type: typeInstance, Pending: true,
			LockToken: token, LockedUntil: until, LockedMsgs: ids, CreatedAt: now, UpdatedAt: now}
		instOp = opCreate(nd)
	} else {
		nd = *d
		nd.ETag = ""
		nd.LockToken, nd.LockedUntil, nd.LockedMsgs = token, until, ids
		instOp = opReplace(idInstance, nd, d.ETag)
	}
	ops := make([]batchOp, 0, 1+len(keep))
	ops = append(ops, instOp)
	for _, m := range keep {
		ops = append(ops, opPatch(m.doc.ID, lockPatch(token, until), m.doc.ETag))
	}
	return nd, ops
}

// lockPatch locks one message for a turn and counts the attempt.
func lockPatch(token string, until int64) azcosmos.PatchOperations {
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lockToken", token)
	pt.AppendSet("/lockedUntil", until)
	pt.AppendIncrement("/attemptCount", 1)
	return pt
}

// turnItem builds the orchestration item of a locked turn.
func turnItem(instance, token string, keep []lockedMessage, d *instanceDoc, committed bool, view partitionView) *durable.OrchestrationItem {
	item := &durable.OrchestrationItem{Instance: instance, LockToken: token, KVSnapshot: map[string]durable.KVEntry{}}
	for _, m := range keep {
		item.Messages = append(item.Messages, m.item)
		if a := m.doc.AttemptCount + 1; a > item.AttemptCount {
			item.AttemptCount = a
		}
	}
	if committed {
		item.OrchestrationName, item.Version, item.ExecutionID = d.OrchestrationName, d.OrchestrationVersion, d.CurrentExecutionID
		evs, herr := decodeHistory(view.history)
		if herr != nil {
			item.HistoryError = herr.Error()
		} else {
			item.History = evs
		}
	} else {
		item.ExecutionID = 1
		for _, m := range keep {
			if s, ok := m.item.(durable.StartOrchestration); ok {
				item.OrchestrationName, item.Version = s.Orchestration, s.Version
				if s.ExecutionID > 1 {
					item.ExecutionID = s.ExecutionID
				}
				break
			}
		}
	}
	item.KVSnapshot = loadKVState(view.kv).snapshot()
	return item
}
