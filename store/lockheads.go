package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
)

// Head is an orchestrator message as the change feed delivered it:
// enough to lock it (its ETag) and to run it (its work item) without
// reading it again. The event-driven dispatcher keeps them (its head
// index) and passes them to LockInstance.
type Head struct {
	doc queueDoc
}

// DecodeHead decodes a feed document of the orchestrator queue.
func DecodeHead(raw []byte) (Head, error) {
	var h Head
	err := json.Unmarshal(raw, &h.doc)
	return h, err
}

// QueueHead is the head's queue identity, slot and times.
func (h Head) QueueHead() QueueHead { return h.doc.head() }

// ETag is the version of the message the feed delivered.
func (h Head) ETag() string { return h.doc.ETag }

// ItemBytes is the size of the head's encoded work item.
func (h Head) ItemBytes() int { return len(h.doc.WorkItem) }

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
//
// With fresh (EnqueueLocked), the batch also creates fresh's message,
// locked, and its request record: st.landed says whether it committed.
// Without a remembered document (and not a new instance's start) the
// batch locks blind (blindLock): it patches the document on a condition
// and reads it back, and the query reads the document of the execution
// blindExecution; its answer holds for the lock when its document shows
// the same last commit as the one locked (or the lock itself), and is
// read again under the lock otherwise.
func (p *Store) lockFromHeads(ctx context.Context, instance string, c *cachedInst, heads []Head, complete bool, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter, owner string, fresh *freshWrite) (item *durable.OrchestrationItem, st lockState, pre *turnRead, staleDoc bool, err error) {
	const op = "fetch_orchestration_item"
	decline := func() (*durable.OrchestrationItem, lockState, *turnRead, bool, error) {
		return nil, lockState{unusedHeads: heads}, nil, false, nil
	}
	if len(heads) > maxTurnMessages {
		return decline()
	}
	keep := make([]lockedMessage, 0, len(heads)+1)
	newStart := false // a first execution's start: the instance may be new
	if fresh != nil {
		keep = append(keep, lockedMessage{doc: fresh.msg, item: fresh.item, fresh: true})
		if s, ok := fresh.item.(durable.StartOrchestration); ok && s.ExecutionID <= 1 {
			newStart = true
		}
	}
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
	blind := false
	if c != nil {
		d, session = &c.doc, c.session
		if filter != nil && d.PinnedVersion != "" {
			if v, perr := durable.ParseSemVer(d.PinnedVersion); perr == nil && !filter.IsCompatible(v) {
				return decline() // the normal path says it is refused
			}
		}
	} else if fresh != nil && !newStart {
		blind = true
	} else if !newStart {
		return decline() // not a new instance: its document is read first
	}

	now := nowMS()
	nonce := uuid.NewString()
	token := makeToken(tokenOrch, nonce, instance, "")
	until := now + durMS(lockTimeout)
	nd, ops := lockOps(instance, d, keep, lockSpec{token, until, owner}, now)
	if blind {
		ops[0] = opPatch(idInstance, blindLock(lockSpec{token, until, owner}, nd.LockedMsgs, blindExecution), "")
	}
	if fresh != nil && fresh.rec != nil {
		ops = append(ops, opCreate(*fresh.rec))
	}
	if blind {
		ops = append(ops, opRead(idInstance)) // the document as locked
	}

	q := &turnRead{head: c == nil}
	if d != nil {
		q.exec = d.CurrentExecutionID
	} else if blind {
		q.exec = blindExecution
	}
	// A new instance whose heads are complete needs no query: if the batch
	// creates its document, nothing of it existed (a deletion removes the
	// instance document last; a lock writes it), so it has no history, KV
	// or locked message, and the heads hold every message of it the query
	// would have found but those written after the feed read, which the
	// next turn takes (as if written after this fetch).
	bare := c == nil && complete
	var qerr error
	var wg sync.WaitGroup
	if !bare {
		wg.Go(func() {
			q.msgs, q.view, q.d, q.session, qerr = p.queryTurn(ctx, instance, q.exec, q.head, now, session)
		})
	}
	res, berr := p.s.execBatch(ctx, instance, ops, false)
	wg.Wait()
	recovered := false
	if berr != nil && !lostRace(berr) {
		etag, landed, known := p.lockLandedKnown(ctx, instance, token, berr)
		switch {
		case landed:
			res, berr, recovered = batchResult{etags: []string{etag}}, nil, true
		case known && fresh != nil:
			return nil, st, nil, false, nil // nothing written
		}
	}
	if berr != nil {
		if !lostRace(berr) {
			return nil, st, nil, false, mapErr(op, berr)
		}
		if fresh == nil {
			p.st.staleHeads.Add(1)
		}
		var be *batchError
		staleDoc = c != nil && errors.As(berr, &be) && be.index == 0
		if qerr == nil && !staleDoc && !bare {
			pre = q
		}
		return nil, st, pre, staleDoc, nil
	}
	if fresh == nil {
		p.st.headLocks.Add(1)
	}
	if bare {
		p.st.bareLocks.Add(1)
	}
	// From here the lock is ours: a turn, or an abandon.
	giveUp := func(cause error) (*durable.OrchestrationItem, lockState, *turnRead, bool, error) {
		w, aerr := p.AbandonOrchestrationItem(context.WithoutCancel(ctx), token, 0, true)
		if aerr != nil {
			p.log.Info("abandoning a lock taken from feed heads failed; it expires", zap.String("instance", instance), zap.Error(aerr))
		}
		if cause != nil {
			return nil, lockState{wrote: w, landed: true}, nil, false, mapErr(op, cause)
		}
		return nil, lockState{wrote: w, landed: true}, nil, false, nil
	}
	instSize := len(ops[0].body)
	if blind {
		if recovered {
			return giveUp(nil) // the locked document was not read back: the usual path
		}
		body := res.bodies[len(res.bodies)-1]
		var ld instanceDoc
		if jerr := json.Unmarshal(body, &ld); jerr != nil || ld.LockToken != token {
			return giveUp(jerr)
		}
		ld.ETag, instSize = "", len(body)
		d, nd = &ld, ld
		if filter != nil && ld.PinnedVersion != "" {
			if v, perr := durable.ParseSemVer(ld.PinnedVersion); perr == nil && !filter.IsCompatible(v) {
				return giveUp(nil) // the usual path says it is refused
			}
		}
		if qerr == nil && !sameCommit(q.d, &ld, token) {
			p.st.blindRereads.Add(1)
			q.msgs, q.view, _, q.session, qerr = p.queryTurn(ctx, instance, ld.CurrentExecutionID, false, now, res.session)
		}
	}
	if qerr != nil {
		return giveUp(qerr)
	}
	committed := d != nil
	if c == nil && !blind && q.d != nil && q.d.LockToken != token {
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
		// Nor are the others dropped here: the normal path first checks
		// for a withheld start (hasWithheldMessages).
		_, queued := withoutQueueMessages(keep)
		_, queuedExtra := withoutQueueMessages(extra)
		if len(queued) > 0 || len(queuedExtra) > 0 {
			return giveUp(nil)
		}
	}
	if len(keep)+len(extra) > maxTurnMessages || 1+len(extra)+len(drop) > maxBatchOps {
		return giveUp(nil)
	}
	if awaitsContinuation(d, committed, append(slices.Clip(keep), extra...)) {
		// The messages wait for the ContinueAsNew message (see lockTurn).
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
			ops2 = append(ops2, opPatch(m.doc.ID, lockPatch(lockSpec{token, until, owner}), m.doc.ETag))
		}
		for _, id := range drop {
			ops2 = append(ops2, p.consumeOp(instance, id))
		}
		res2, err := p.s.execBatch(ctx, instance, ops2, false)
		if err != nil {
			if lostRace(err) {
				return giveUp(nil)
			}
			return giveUp(err)
		}
		instETag, res.session = res2.etags[0], res2.session
		instSize = len(ops2[0].body)
	}
	if !recovered || res.session != "" {
		p.ic.hold(token, nd, instETag, res.session, instSize, q.view.kv, true)
	}
	item = turnItem(instance, token, keep, d, committed, q.view)
	return item, lockState{heldUntil: until, more: len(drop) > 0, lockedMsgs: nd.LockedMsgs, due: dueOf(keep), landed: true}, nil, false, nil
}

// blindExecution is the execution a blind lock expects (blindLock): an
// instance that continued as new fails the condition, and its enqueue
// goes the usual way.
const blindExecution = 1

// blindLock locks the instance document of a running instance that this
// process does not remember (EnqueueLocked), on the condition that its
// document says what a remembered one's ETag would vouch for: committed
// and not being deleted, unlocked, no large turn to finish, and running
// execution exec (Running, or continued as new).
func blindLock(l lockSpec, msgs []string, exec uint64) azcosmos.PatchOperations {
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lockToken", l.token)
	pt.AppendSet("/lockedUntil", l.until)
	pt.AppendSet("/lockOwner", l.owner)
	pt.AppendSet("/lockedMsgs", msgs)
	pt.AppendSet("/awaiting", []string{}) // the hold ends with the turn it held
	pt.SetCondition(fmt.Sprintf("FROM c WHERE c.type = '%s' AND c.currentExecutionId = %d AND c.status IN ('%s', '%s')"+
		" AND (NOT IS_DEFINED(c.pending) OR c.pending = false) AND (NOT IS_DEFINED(c.deleting) OR c.deleting = '')"+
		" AND (NOT IS_DEFINED(c.lockToken) OR c.lockToken = '') AND (NOT IS_DEFINED(c.staging) OR c.staging = '')"+
		" AND (NOT IS_DEFINED(c.publish) OR IS_NULL(c.publish))",
		typeInstance, exec, durable.StatusRunning, durable.StatusContinuedAsNew))
	return pt
}

// sameCommit reports whether q, the instance document a turn's query
// read, is consistent with locked, the document a blind lock with token
// patched: the lock itself, or unlocked at the same last commit of the
// same execution (so the history and KV the query read are the lock's).
func sameCommit(q, locked *instanceDoc, token string) bool {
	switch {
	case q == nil:
		return false
	case q.LockToken == token:
		return true
	}
	return q.LockToken == "" && q.LastCommit != "" && q.LastCommit == locked.LastCommit &&
		q.CurrentExecutionID == locked.CurrentExecutionID
}

// lockOps are the lock batch of a turn of keep: the instance document
// locked (created pending when d is nil, else replaced conditionally on
// d's ETag), then every message locked conditionally on its ETag (a
// fresh one created locked).
func lockOps(instance string, d *instanceDoc, keep []lockedMessage, l lockSpec, now int64) (instanceDoc, []batchOp) {
	ids := make([]string, len(keep))
	for i, m := range keep {
		ids[i] = m.doc.ID
	}
	var nd instanceDoc
	var instOp batchOp
	if d == nil {
		nd = instanceDoc{ID: idInstance, InstanceID: instance, Type: typeInstance, Pending: true,
			LockToken: l.token, LockedUntil: l.until, LockOwner: l.owner, LockedMsgs: ids, CreatedAt: now, UpdatedAt: now}
		instOp = opCreate(nd)
	} else {
		nd = *d
		nd.ETag = ""
		nd.LockToken, nd.LockedUntil, nd.LockOwner, nd.LockedMsgs = l.token, l.until, l.owner, ids
		nd.Awaiting = nil // the hold ends with the turn it held
		instOp = opReplace(idInstance, nd, d.ETag)
	}
	ops := make([]batchOp, 0, 1+len(keep))
	ops = append(ops, instOp)
	for _, m := range keep {
		if m.fresh {
			doc := m.doc
			doc.LockToken, doc.LockedUntil, doc.LockOwner, doc.AttemptCount = l.token, l.until, l.owner, m.doc.AttemptCount+1
			ops = append(ops, opCreate(doc))
			continue
		}
		ops = append(ops, opPatch(m.doc.ID, lockPatch(l), m.doc.ETag))
	}
	return nd, ops
}

// lockSpec is a lock as written: its token, its expiry (ms) and its
// holder (LockRequest.Owner; "" for none).
type lockSpec struct {
	token string
	until int64
	owner string
}

// lockPatch locks one message (or worker item) and counts the attempt.
func lockPatch(l lockSpec) azcosmos.PatchOperations {
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lockToken", l.token)
	pt.AppendSet("/lockedUntil", l.until)
	if l.owner != "" {
		pt.AppendSet("/lockOwner", l.owner)
	}
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
