package store

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
)

// maxLockAttempts bounds how many candidate instances one fetch tries.
const maxLockAttempts = 8

// maxTurnMessages caps the messages locked into one turn: the lock and the
// tagging of the messages are one transactional batch. Messages beyond the
// cap stay queued for the next turn, oldest first.
const maxTurnMessages = maxBatchOps - 1

// slotClause restricts a query to a share's slots (nothing for all slots).
func slotClause(sh slots.Block) (string, []azcosmos.QueryParameter) {
	if sh.All() {
		return "", nil
	}
	return " AND c.dispatchSlot >= @lo AND c.dispatchSlot <= @hi", []azcosmos.QueryParameter{param("@lo", sh.First), param("@hi", sh.Last)}
}

// OrchCandidates returns the instances with visible, unlocked
// orchestrator messages in the share, oldest message first. The query is
// cross-partition, so it has no ORDER BY: sorting is client-side.
func (p *Store) OrchCandidates(ctx context.Context, sh slots.Block) ([]string, error) {
	now := nowMS()
	clause, params := slotClause(sh)
	params = append(params, param("@now", now))
	type cand struct {
		InstanceID string `json:"instanceId"`
		EnqueuedAt int64  `json:"enqueuedAt"`
	}
	rows, err := queryAll[cand](ctx, p.s, nil,
		"SELECT c.instanceId, c.enqueuedAt FROM c WHERE c.type = 'orch_queue' AND c.visibleAt <= @now AND c.lockedUntil <= @now"+clause,
		params...)
	if err != nil {
		return nil, mapErr("fetch_orchestration_item", err)
	}
	oldest := map[string]int64{}
	for _, r := range rows {
		if t, ok := oldest[r.InstanceID]; !ok || r.EnqueuedAt < t {
			oldest[r.InstanceID] = r.EnqueuedAt
		}
	}
	out := make([]string, 0, len(oldest))
	for id := range oldest {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		if oldest[out[i]] != oldest[out[j]] {
			return oldest[out[i]] < oldest[out[j]]
		}
		return out[i] < out[j]
	})
	return out, nil
}

// lockedMessage is a queue message selected for a turn.
type lockedMessage struct {
	doc  queueDoc
	item durable.WorkItem
	// fresh: the message does not exist yet; the lock batch creates it
	// locked (EnqueueLocked).
	fresh bool
}

// lockState says why lockInstanceEx returned no item.
type lockState struct {
	// lockedUntil is set when the instance was found locked by someone
	// else: the time its lock expires (ms).
	lockedUntil int64
	// refused is the instance's pinned version when the capability filter
	// refused it.
	refused string
	// heldUntil is set when an item is returned: our lock's expiry (ms).
	heldUntil int64
	// due is when the oldest message the turn took became takeable (ms).
	due int64
	// more is set when messages were left queued behind the turn (more
	// than a turn takes): they need a wakeup once the lock is released.
	more bool
	// lockedMsgs are the messages locked, unusedHeads the heads no batch
	// used, published the intents a recovered publication released, wrote
	// what an abandoned attempt wrote.
	wrote       Write
	lockedMsgs  []string
	unusedHeads []Head
	published   []outbox.Intent
	// landed says that a lock batch of lockFromHeads committed (then
	// gave the lock up when no item is returned): an enqueue it carried
	// (EnqueueLocked) took effect.
	landed bool
}

// LockRequest asks LockInstance for one instance's turn.
type LockRequest struct {
	Instance    string
	LockTimeout time.Duration
	// Filter, when not nil, refuses an instance pinned to a version it
	// does not accept (before any history is read).
	Filter *durable.DispatcherCapabilityFilter
	// Read is how the lock reads what the turn needs; nil is QueryFirst.
	Read ReadStrategy
	// Owner names the lock's holder, stamped on the documents the lock
	// writes, so that ReleaseLocksOf can free it once the holder is known
	// dead (event-driven mode: the replica's leasestore Holder). Empty
	// stamps nothing: the lock is freed by its expiry only.
	Owner string
}

// ReadStrategy is how LockInstance reads the turn it locks: QueryFirst,
// SeedsOrder or FromHeads. Each ends in the same lock batch, conditional
// on the instance document's ETag (or its absence) and on every
// message's; they differ in requests and latency, never in outcome.
type ReadStrategy interface{ readStrategy() }

// QueryFirst reads with one query for the messages, the KV store and the
// instance document (the remembered document, when the store has one,
// saves the document); the full history query follows when the instance
// has committed history. It is the default (a nil ReadStrategy).
type QueryFirst struct{}

// SeedsOrder reads the instance document first, then queries the
// messages, the KV store and the current execution's history: the seeds'
// order, and the polling mode's.
type SeedsOrder struct{}

// FromHeads sends the lock batch at once, with the query instead of
// after it, for the instance's waiting messages as the change feed
// delivered them (Heads, oldest first). Complete says that every message
// of the instance written before the feed read that delivered the newest
// head is among them, so a new instance needs no query. Heads the batch
// cannot use (stale ones) fall back to QueryFirst, reusing its query.
type FromHeads struct {
	Heads    []Head
	Complete bool
}

func (QueryFirst) readStrategy() {}
func (SeedsOrder) readStrategy() {}
func (FromHeads) readStrategy()  {}

// dueOf returns when the oldest of msgs became takeable (unix ms): its
// enqueue, or a timer's fire time; 0 for none.
func dueOf(msgs []lockedMessage) int64 {
	var due int64
	for _, m := range msgs {
		t := m.doc.head().Due()
		if due == 0 || t < due {
			due = t
		}
	}
	return due
}

// LockResult is what LockInstance did.
type LockResult struct {
	// Item is the locked turn, or nil when nothing was locked.
	Item *durable.OrchestrationItem
	// HeldUntil is Item's lock expiry (ms), and More says that messages
	// were left queued behind the turn (they need a wakeup once the lock
	// is released).
	HeldUntil int64
	More      bool
	// Due is when the oldest message the turn took became takeable: its
	// enqueue (by its writer's clock), or a timer's fire time (unix ms;
	// 0 when unknown). Now minus Due is the wake latency.
	Due int64
	// LockedMsgs are the messages the lock took: feed heads of theirs are
	// stale from now on.
	LockedMsgs []string
	// LockedUntil is set when nothing was locked because another lock
	// holds the instance until then (ms).
	LockedUntil int64
	// Refused is the instance's pinned version when Filter refused it.
	Refused string
	// UnusedHeads are heads of the request that no batch used: still
	// valid hints for a later lock.
	UnusedHeads []Head
	// Wrote is what an attempt that took the lock and gave it up again
	// wrote (the release, the messages visible again).
	Wrote Write
	// Published is set when the lock first finished a large turn an
	// earlier ack had committed: its intents are now visible and need
	// delivering.
	Published *Commit
}

// LockInstance locks one instance's turn. It returns no item when the
// instance has nothing to do, is locked, being deleted, or pinned to a
// version the filter refuses (the result says which), and a retryable
// error when another writer won a race for it.
func (p *Store) LockInstance(ctx context.Context, req LockRequest) (LockResult, error) {
	item, st, err := p.lockInstanceBody(ctx, req)
	return st.result(req.Instance, item), err
}

// result is the LockResult of a lock attempt on instance that returned
// item (nil for none) in state st.
func (st lockState) result(instance string, item *durable.OrchestrationItem) LockResult {
	r := LockResult{Item: item, HeldUntil: st.heldUntil, More: st.more, LockedMsgs: st.lockedMsgs, Due: st.due,
		LockedUntil: st.lockedUntil, Refused: st.refused, UnusedHeads: st.unusedHeads, Wrote: st.wrote}
	if len(st.published) > 0 {
		r.Published = &Commit{Source: instance, Intents: st.published}
	}
	return r
}

// lockInstanceBody reads what a turn needs, by req.Read, and locks it:
//
//   - SeedsOrder: a point read of the instance document, then one query
//     for the messages, the KV store and the current execution's history;
//   - QueryFirst with the instance document remembered from this
//     process's last write of it (instCache): that query alone, carrying
//     the write's session token;
//   - QueryFirst otherwise: one query for the messages, the KV store and
//     the instance document; when the instance has committed history, the
//     full query follows, so that the history is read after the document
//     the lock is conditional on;
//   - FromHeads: lockFromHeads sends the query and the lock batch at
//     once; whatever it cannot use (a stale head or document) falls back
//     to QueryFirst, reusing its query.
//
// A remembered document that turns out stale fails the lock batch; the
// uncached QueryFirst then runs at once.
func (p *Store) lockInstanceBody(ctx context.Context, req LockRequest) (*durable.OrchestrationItem, lockState, error) {
	instance, lockTimeout, filter := req.Instance, req.LockTimeout, req.Filter
	var c *cachedInst
	if e, ok := p.ic.take(instance); ok {
		c = &e
	}
	var pre *turnRead
	var unused []Head
	// gaveUp is what an attempt from the heads that took the lock and
	// abandoned it wrote: the caller must follow it whatever comes next.
	var gaveUp Write
	var seedsOrder bool
	var heads FromHeads
	switch r := req.Read.(type) {
	case SeedsOrder:
		seedsOrder = true
	case FromHeads:
		heads = r
	}
	if len(heads.Heads) > 0 {
		item, st, q, staleDoc, err := p.lockFromHeads(ctx, instance, c, heads.Heads, heads.Complete, lockTimeout, filter, req.Owner, nil)
		if item != nil || err != nil {
			return item, st, err
		}
		if staleDoc {
			p.st.staleCache.Add(1)
			c = nil
		}
		pre, unused, gaveUp = q, st.unusedHeads, st.wrote
	}
	finish := func(item *durable.OrchestrationItem, st lockState, err error) (*durable.OrchestrationItem, lockState, error) {
		st.unusedHeads = unused
		st.wrote = gaveUp.merge(st.wrote)
		return item, st, err
	}
	if c != nil {
		item, st, err := p.lockTurn(ctx, instance, c, pre, seedsOrder, lockTimeout, filter, req.Owner)
		if item == nil && err == nil {
			// Nothing locked, so the document is unchanged (a batch that
			// only dropped undecodable messages leaves it as it was).
			p.ic.restore(instance, *c)
		}
		if err == nil || !lostRace(err) {
			return finish(item, st, err)
		}
		p.st.staleCache.Add(1)
		pre = nil
	}
	return finish(p.lockTurn(ctx, instance, nil, pre, seedsOrder, lockTimeout, filter, req.Owner))
}

// lockTurn is one attempt of lockInstanceBody, from the remembered
// document c when not nil, using the query answer pre when it fits (made
// for the same document: the head query without c, the turn-input query
// of c's execution with it).
func (p *Store) lockTurn(ctx context.Context, instance string, c *cachedInst, pre *turnRead, seedsOrder bool, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter, owner string) (_ *durable.OrchestrationItem, st lockState, _ error) {
	const op = "fetch_orchestration_item"
	var published []outbox.Intent
	defer func() { st.published = published }()
	var none lockState
	var (
		d       *instanceDoc
		session string
		msgs    []lockedMessage
		view    partitionView
		head    bool // msgs and view hold the first query's answer
		err     error
	)
	now := nowMS()
	switch {
	case c != nil:
		d, session = &c.doc, c.session
		if pre != nil && (pre.head || pre.exec != d.CurrentExecutionID) {
			pre = nil
		}
	case pre != nil && pre.head:
		msgs, view, d, session = pre.msgs, pre.view, pre.d, pre.session
		head, pre = true, nil
	case !seedsOrder:
		msgs, view, d, session, err = p.readTurnHead(ctx, instance, now)
		head = true
	default:
		d, err = p.readInstance(ctx, instance)
	}
	if err != nil {
		return nil, none, mapErr(op, err)
	}
	if d != nil {
		if d.Deleting != "" {
			return nil, none, nil
		}
		if d.lockHeld(now) {
			return nil, lockState{lockedUntil: d.LockedUntil}, nil
		}
		// Finish what an earlier large turn left behind before anything else.
		if d.Publish != nil || d.Staging != "" {
			if d, published, err = p.recoverTurn(ctx, d); err != nil {
				return nil, none, mapErr(op, err)
			}
			if d == nil || d.Deleting != "" {
				return nil, none, nil
			}
			if d.lockHeld(now) {
				return nil, lockState{lockedUntil: d.LockedUntil}, nil
			}
			head, session, pre = false, "", nil
		}
		if filter != nil && d.PinnedVersion != "" {
			v, perr := durable.ParseSemVer(d.PinnedVersion)
			if perr == nil && !filter.IsCompatible(v) {
				return nil, lockState{refused: d.PinnedVersion}, nil
			}
		}
	}
	committed := d.visible()
	exec := uint64(0)
	if committed {
		exec = d.CurrentExecutionID
	}

	// One single-partition query: the candidate messages, and (read after
	// the instance document the lock is conditional on, so consistent with
	// it) the current execution's record and history and the KV store.
	// The first query of event-driven mode did it already when there is no
	// history to read.
	switch {
	case pre != nil:
		msgs, view = pre.msgs, pre.view
	case !head || exec > 0:
		if msgs, view, err = p.readTurnInputs(ctx, instance, exec, now, session); err != nil {
			return nil, none, mapErr(op, err)
		}
	}
	if len(msgs) == 0 {
		return nil, none, nil
	}
	sort.Slice(msgs, func(i, j int) bool { return msgs[i].doc.EnqueuedAt < msgs[j].doc.EnqueuedAt })

	// Decode; a QueueMessage for an instance that has not started is dropped.
	keep, drop, hasStart := p.decodeMessages(instance, msgs, nil)
	started := committed && len(view.history) > 0
	if !started && !hasStart {
		var queued []string
		keep, queued = withoutQueueMessages(keep)
		if len(queued) > 0 {
			waiting, werr := p.hasWithheldMessages(ctx, instance, now)
			if werr != nil {
				return nil, none, mapErr(op, werr)
			}
			if waiting {
				// A message this fetch does not see (a start abandoned
				// with a delay, or newer than its clock reading) may
				// start the instance: its persistent events wait.
				queued = nil
			}
		}
		drop = append(drop, queued...)
	}
	if awaitsContinuation(d, committed, keep) {
		// The execution continued as new and its ContinueAsNew message is
		// not visible yet (abandoned with a delay, or written after this
		// fetch's clock reading): the messages here belong to the next
		// execution, which only that message can start. Locking them now
		// would hand the runtime a turn with nothing to run, and its ack
		// would drop them; they wait, untouched, for the message.
		return nil, none, nil
	}
	keep = continuationFirst(keep)
	more := false
	if len(keep) > maxTurnMessages {
		keep = keep[:maxTurnMessages]
		more = true
	}
	if len(drop) > maxBatchOps-1-len(keep) {
		drop = drop[:maxBatchOps-1-len(keep)]
	}
	if len(keep) == 0 {
		// Nothing to run: delete the dropped messages (and a pending
		// document) without taking the lock.
		if len(drop) == 0 {
			return nil, none, nil
		}
		ops := make([]batchOp, 0, len(drop)+1)
		if d != nil && d.Pending {
			ops = append(ops, batchOp{kind: "delete", id: idInstance, ifMatch: d.ETag})
		}
		for _, id := range drop {
			ops = append(ops, p.consumeOp(instance, id))
		}
		if _, err := p.s.execBatch(ctx, instance, ops, true); err != nil && !lostRace(err) {
			return nil, none, mapErr(op, err)
		}
		return nil, none, nil
	}

	nonce := uuid.NewString()
	token := makeToken(tokenOrch, nonce, instance, "")
	until := nowMS() + durMS(lockTimeout)
	nd, ops := lockOps(instance, d, keep, lockSpec{token, until, owner}, now)
	for _, id := range drop {
		ops = append(ops, p.consumeOp(instance, id))
	}
	res, err := p.s.execBatch(ctx, instance, ops, false)
	switch {
	case err == nil:
		p.ic.hold(token, nd, res.etags[0], res.session, len(ops[0].body), view.kv, true)
	case lostRace(err):
		return nil, none, durable.Retryable(op, err, "instance %q was locked concurrently", instance)
	default:
		if _, landed := p.lockLanded(ctx, instance, token, err); !landed {
			return nil, none, mapErr(op, err)
		}
	}
	item := turnItem(instance, token, keep, d, committed, view)
	return item, lockState{heldUntil: until, more: more || len(drop) > 0, lockedMsgs: nd.LockedMsgs, due: dueOf(keep)}, nil
}

// lockLanded reads back the instance document after a lock batch failed
// with err: when err leaves the outcome unknown (a lost answer) and the
// document carries the batch's token, the batch committed (it is atomic)
// and the lock is ours; etag is then the document's version. The caller
// goes on as if the batch had answered, instead of leaving the lock to
// expire.
func (p *Store) lockLanded(ctx context.Context, instance, token string, err error) (etag string, landed bool) {
	etag, landed, _ = p.lockLandedKnown(ctx, instance, token, err)
	return etag, landed
}

// lockLandedKnown is lockLanded, also reporting whether the outcome is
// known: false when err is not a lost answer or the read back failed.
func (p *Store) lockLandedKnown(ctx context.Context, instance, token string, err error) (etag string, landed, known bool) {
	if !unknownOutcome(err) {
		return "", false, false
	}
	d, rerr := p.readInstance(ctx, instance)
	landed = rerr == nil && d != nil && d.LockToken == token
	if landed {
		etag = d.ETag
	}
	if rerr != nil {
		p.log.Info("the answer to an orchestration lock was lost and reading it back failed; the lock, if it landed, expires",
			zap.String("instance", instance), zap.NamedError("read_error", rerr), zap.Error(err))
		return "", false, false
	}
	p.log.Info("the answer to an orchestration lock was lost; read back", zap.String("instance", instance),
		zap.Bool("landed", landed), zap.Error(err))
	return etag, landed, true
}

// decodeMessages decodes msgs (work items) into keep, skipping the ids in
// skip; an undecodable message is logged and its id goes to drop.
// hasStart reports a StartOrchestration among keep.
func (p *Store) decodeMessages(instance string, msgs []lockedMessage, skip []string) (keep []lockedMessage, drop []string, hasStart bool) {
	for _, m := range msgs {
		if slices.Contains(skip, m.doc.ID) {
			continue
		}
		w, derr := durable.UnmarshalWorkItem([]byte(m.doc.WorkItem))
		if derr != nil {
			p.log.Error("dropping undecodable orchestrator message", zap.String("instance", instance), zap.String("message", m.doc.ID), zap.Error(derr))
			drop = append(drop, m.doc.ID)
			continue
		}
		m.item = w
		if _, ok := w.(durable.StartOrchestration); ok {
			hasStart = true
		}
		keep = append(keep, m)
	}
	return keep, drop, hasStart
}

// withoutQueueMessages splits the QueueMessages (dropped when the instance
// has not started) off msgs, returning the rest and their ids.
func withoutQueueMessages(msgs []lockedMessage) (kept []lockedMessage, queued []string) {
	for _, m := range msgs {
		if _, ok := m.item.(durable.QueueMessage); ok {
			queued = append(queued, m.doc.ID)
			continue
		}
		kept = append(kept, m)
	}
	return kept, queued
}

// hasWithheldMessages reports whether the instance has orchestrator
// messages that a fetch at now does not take (not visible yet, or locked).
// It is asked only before persistent events of an instance that has not
// started are dropped, so it costs nothing on the common path.
func (p *Store) hasWithheldMessages(ctx context.Context, instance string, now int64) (bool, error) {
	n := 0
	err := p.s.query(ctx, strp(instance),
		"SELECT VALUE COUNT(1) FROM c WHERE c.type = 'orch_queue' AND (c.visibleAt > @now OR c.lockedUntil > @now)",
		[]azcosmos.QueryParameter{param("@now", now)},
		func(raw json.RawMessage) error {
			var c int
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			n += c
			return nil
		})
	return n > 0, err
}

// awaitsContinuation reports a committed execution that continued as new
// (d's status) while keep holds no ContinueAsNew message to start the
// next one.
func awaitsContinuation(d *instanceDoc, committed bool, keep []lockedMessage) bool {
	if !committed || d.Status != string(durable.StatusContinuedAsNew) {
		return false
	}
	return !slices.ContainsFunc(keep, isContinuation)
}

// continuationFirst moves ContinueAsNew messages to the front of keep
// (stably), so that a turn capped at maxTurnMessages always holds the
// message that starts the next execution.
func continuationFirst(keep []lockedMessage) []lockedMessage {
	i := slices.IndexFunc(keep, isContinuation)
	if i <= 0 {
		return keep
	}
	out := make([]lockedMessage, 0, len(keep))
	for _, m := range keep {
		if isContinuation(m) {
			out = append(out, m)
		}
	}
	for _, m := range keep {
		if !isContinuation(m) {
			out = append(out, m)
		}
	}
	return out
}

func isContinuation(m lockedMessage) bool {
	_, ok := m.item.(durable.ContinueAsNew)
	return ok
}

// lostRace reports a conditional write that lost to a concurrent writer.
func lostRace(err error) bool {
	s := statusOf(err)
	return s == http.StatusPreconditionFailed || s == http.StatusConflict || s == http.StatusNotFound
}

// readTurnInputs reads the instance's candidate messages together with the
// execution's committed history and the KV store.
// The query carries session (when not empty): the token of the write or
// read the caller's instance document came from.
func (p *Store) readTurnInputs(ctx context.Context, instance string, exec uint64, now int64, session string) ([]lockedMessage, partitionView, error) {
	msgs, v, _, _, err := p.queryTurn(ctx, instance, exec, false, now, session)
	return msgs, v, err
}

// readTurnHead reads, in one query, the instance's candidate messages, its
// KV store and its instance document (nil when absent), and returns the
// query's session token. The KV store is consistent with the document
// only when the instance has no committed turn (then nothing writes KV
// entries; see lockTurn).
func (p *Store) readTurnHead(ctx context.Context, instance string, now int64) ([]lockedMessage, partitionView, *instanceDoc, string, error) {
	return p.queryTurn(ctx, instance, 0, true, now, "")
}

// queryTurn is the single-partition query behind readTurnInputs and
// readTurnHead.
func (p *Store) queryTurn(ctx context.Context, instance string, exec uint64, withInstance bool, now int64, session string) ([]lockedMessage, partitionView, *instanceDoc, string, error) {
	var msgs []lockedMessage
	var v partitionView
	var d *instanceDoc
	sql := "SELECT * FROM c WHERE (c.type = 'orch_queue' AND c.visibleAt <= @now AND c.lockedUntil <= @now) OR c.type = 'kv'"
	params := []azcosmos.QueryParameter{param("@now", now)}
	if exec > 0 {
		sql += " OR (c.executionId = @e AND (c.type = 'history' OR c.type = 'execution'))"
		params = append(params, param("@e", exec))
	}
	if withInstance {
		sql += " OR c.type = 'instance'"
	}
	session, err := p.s.querySession(ctx, strp(instance), session, sql, params, func(raw json.RawMessage) error {
		typ, err := v.add(raw)
		if err != nil {
			return err
		}
		switch typ {
		case typeOrchQueue:
			var q queueDoc
			if err := json.Unmarshal(raw, &q); err != nil {
				return err
			}
			msgs = append(msgs, lockedMessage{doc: q})
		case typeInstance:
			d = new(instanceDoc)
			return json.Unmarshal(raw, d)
		}
		return nil
	})
	if err != nil {
		return nil, v, nil, "", err
	}
	v.keepCommitted()
	return msgs, v, d, session, nil
}

// heldLock reads the instance of an orchestration lock token and checks the
// lock: it must be the instance's current lock and, when live, unexpired.
// With useHeld it takes the document the lock batch wrote, when this
// process remembers it (instCache), instead of reading it; held is then
// that entry, and a write from it must be conditional on its ETag.
func (p *Store) heldLock(ctx context.Context, op, token string, live, useHeld bool) (d *instanceDoc, t parsedToken, held *cachedInst, err error) {
	t, ok := parseToken(token)
	if !ok || t.kind != tokenOrch {
		return nil, t, nil, durable.Permanent(op, nil, "unknown lock token")
	}
	if e, ok := p.ic.heldDoc(token); ok && useHeld {
		d, held = &e.doc, &e
	} else if d, err = p.readInstance(ctx, t.instance); err != nil {
		return nil, t, nil, mapErr(op, err)
	}
	if d == nil || d.LockToken != token || d.Deleting != "" {
		return nil, t, held, durable.Permanent(op, nil, "lock token is not held on instance %q", t.instance)
	}
	if live && d.LockedUntil <= nowMS() {
		return nil, t, held, durable.Permanent(op, nil, "lock on instance %q has expired", t.instance)
	}
	return d, t, held, nil
}

// AbandonOrchestrationItem is durable.Provider's AbandonOrchestrationItem;
// it returns the lock released and the messages made visible again. It
// touches only the messages the lock took (LockedMsgs): the delay and the
// attempt-count undo apply to them alone, and messages enqueued during the
// lock stay visible with their own counts.
func (p *Store) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) (Write, error) {
	const op = "abandon_orchestration_item"
	defer p.ic.release(lockToken)
	d, t, _, err := p.heldLock(ctx, op, lockToken, false, false)
	if err != nil {
		return Write{}, err
	}
	now := nowMS()
	if delay < 0 {
		delay = 0
	}
	nd := *d
	nd.ETag, nd.LockToken, nd.LockedUntil, nd.LockedMsgs, nd.UpdatedAt = "", "", 0, nil, now
	ops := []batchOp{opReplace(idInstance, nd, d.ETag)}
	if d.Pending {
		ops[0] = batchOp{kind: "delete", id: idInstance, ifMatch: d.ETag}
	}
	for _, id := range d.LockedMsgs {
		var pt azcosmos.PatchOperations
		pt.AppendSet("/lockToken", "")
		pt.AppendSet("/lockedUntil", 0)
		pt.AppendSet("/visibleAt", now+durMS(delay))
		if ignoreAttempt {
			pt.AppendIncrement("/attemptCount", -1)
		}
		ops = append(ops, opPatch(id, pt, ""))
	}
	res, err := p.s.execBatch(ctx, t.instance, ops, false)
	for try := 0; err != nil && unknownOutcome(err) && try < 3 && ctx.Err() == nil; try++ {
		// The answer was lost. The batch is conditional on the instance
		// document: a document still at the version read means it did not
		// land and may be sent again; any other version means it landed
		// (or the lock was lost since), and a resend would fail anyway.
		back, rerr := p.readInstance(ctx, t.instance)
		if rerr != nil {
			p.log.Info("the answer to an abandon was lost and reading it back failed", zap.String("instance", t.instance),
				zap.NamedError("read_error", rerr), zap.Error(err))
			break
		}
		if back == nil || back.ETag != d.ETag {
			landed := back == nil || back.LockToken == ""
			p.log.Info("the answer to an abandon was lost; read back", zap.String("instance", t.instance),
				zap.Bool("landed", landed), zap.Error(err))
			if !landed {
				return Write{}, durable.Permanent(op, err, "lock on instance %q was lost", t.instance)
			}
			err, res = nil, batchResult{}
			break
		}
		p.log.Info("the answer to an abandon was lost; it did not land, sending it again", zap.String("instance", t.instance), zap.Error(err))
		res, err = p.s.execBatch(ctx, t.instance, ops, false)
	}
	if err != nil {
		if lostRace(err) {
			return Write{}, durable.Permanent(op, err, "lock on instance %q was lost", t.instance)
		}
		return Write{}, mapErr(op, err)
	}
	if !d.Pending && len(res.etags) > 0 {
		p.ic.put(t.instance, nd, res.etags[0], res.session, len(ops[0].body))
	}
	w := Write{Released: []Release{{Instance: t.instance, LockedUntil: d.LockedUntil}}}
	if len(d.LockedMsgs) > 0 {
		w.Visible = []QueueHead{{InstanceID: t.instance, Type: typeOrchQueue, DispatchSlot: slots.Of(t.instance), VisibleAt: now + durMS(delay)}}
	}
	return w, nil
}

// RenewOrchestrationItemLock implements durable.Provider: the instance
// lock and the turn's message locks are extended in one batch.
func (p *Store) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	d, t, _, err := p.heldLock(ctx, op, lockToken, true, false)
	if err != nil {
		p.ic.release(lockToken)
		return err
	}
	until := nowMS() + durMS(extendFor)
	nd := *d
	nd.ETag, nd.LockedUntil = "", until
	ops := []batchOp{opReplace(idInstance, nd, d.ETag)}
	for _, id := range d.LockedMsgs {
		var pt azcosmos.PatchOperations
		pt.AppendSet("/lockedUntil", until)
		ops = append(ops, opPatch(id, pt, ""))
	}
	if len(ops) > maxBatchOps {
		ops = ops[:maxBatchOps]
	}
	res, err := p.s.execBatch(ctx, t.instance, ops, false)
	if err != nil {
		p.ic.release(lockToken)
		if lostRace(err) {
			return durable.Permanent(op, err, "lock on instance %q was lost", t.instance)
		}
		return mapErr(op, err)
	}
	e, _ := p.ic.heldDoc(lockToken) // a renewal leaves KV as the fetch read it
	p.ic.hold(lockToken, nd, res.etags[0], res.session, len(ops[0].body), e.kv, e.kvKnown)
	return nil
}
