package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/outbox"
)

// turnPlan is an ack turned into documents, before it is split into batches.
type turnPlan struct {
	instance string
	nonce    string
	// commit identifies this ack call's commit (the lock nonce and a
	// random suffix): stored as the instance's lastCommit, it tells a
	// commit whose answer was lost from another ack of the same lock.
	commit  string
	inst    instanceDoc  // the instance document to write (lock released)
	exec    executionDoc // the execution record to upsert (mark advanced)
	oldMark uint64
	history []historyDoc
	queue   []queueDoc      // same-partition queue documents
	intents []outbox.Intent // cross-partition effects
	kv      []batchOp
	deletes []string // the turn's locked messages
	cancel  []durable.ScheduledActivityIdentifier
	// lockedUntil is the expiry of the lock the turn releases.
	lockedUntil int64
	// awaiting are the worker document ids of the activities the turn
	// says its orchestration awaits (OrchestrationTurn.AwaitingActivities).
	awaiting []string
}

// AckOrchestrationItem is durable.Provider's AckOrchestrationItem; it
// returns what the commit left for dispatch. A turn that fits one
// transactional batch is committed by that batch; a larger turn is staged
// and committed by its last batch (see the package documentation).
//
// An earlier call with the same token that gave up (its context cancelled,
// or its deadline passed) may still have a write in flight that the store
// carries out after the caller moved on; it can only be a write of that
// call's staging or its commit. When one of this call's conditional writes
// loses to it while the lock still holds, this call starts over from a
// fresh read (errOwnWrite) instead of reporting the lock lost, so that a
// second ack commits the turn unless the first did.
func (p *Store) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) (Commit, error) {
	defer p.ic.release(lockToken)
	c, stale, err := p.ack(ctx, lockToken, turn, true)
	if stale {
		c, _, err = p.ack(ctx, lockToken, turn, false)
	}
	for i := 0; i < maxOwnWriteRetries && errors.Is(err, errOwnWrite); i++ {
		c, _, err = p.ack(ctx, lockToken, turn, false)
	}
	if errors.Is(err, errOwnWrite) {
		err = durable.Retryable("ack_orchestration_item", err, "the instance document kept changing under the held lock")
	}
	c.Turn = err == nil
	return c, err
}

// errOwnWrite marks a conditional write of an ack that lost to another
// write made under the same, still held, lock (see AckOrchestrationItem).
var errOwnWrite = errors.New("instance document changed under the held lock")

// maxOwnWriteRetries bounds AckOrchestrationItem's fresh starts after
// errOwnWrite: each earlier call has at most one write in flight.
const maxOwnWriteRetries = 3

// commitID is the commit record of a turn acked under the lock of nonce
// (instanceDoc.LastCommit): the nonce and a digest of the turn, so that
// an ack resent with the same turn recognises its own commit, and an ack
// of another turn under the same lock does not take it for its own.
func commitID(nonce string, turn durable.OrchestrationTurn) string {
	b, err := json.Marshal(turn)
	if err != nil {
		return nonce + "/" + uuid.NewString() // never recognised again: a resend is refused, as before
	}
	sum := sha256.Sum256(b)
	return nonce + "/" + hex.EncodeToString(sum[:16])
}

// committedBefore reports whether the instance's commit record is turn's
// under the lock t names: an ack whose lock is no longer held finds its
// own earlier commit (one whose answer and read-back were both lost).
func (p *Store) committedBefore(ctx context.Context, t parsedToken, turn durable.OrchestrationTurn) bool {
	if t.kind != tokenOrch || t.instance == "" {
		return false
	}
	d, err := p.readInstance(ctx, t.instance)
	return err == nil && d != nil && d.LastCommit == commitID(t.nonce, turn)
}

// heldBy re-reads the instance after a conditional write on its document
// failed and reports whether the lock of nonce still holds it (unexpired,
// not being deleted) and whether commit is its last commit; err is the
// read's failure (the outcome is then unknown).
func (p *Store) heldBy(ctx context.Context, instance, nonce, commit string) (held, committed bool, err error) {
	d, err := p.readInstance(ctx, instance)
	if err != nil || d == nil {
		return false, false, err
	}
	if commit != "" && d.LastCommit == commit {
		return false, true, nil
	}
	t, ok := parseToken(d.LockToken)
	return ok && t.nonce == nonce && d.Deleting == "" && d.LockedUntil > nowMS(), false, nil
}

// ack is one attempt of AckOrchestrationItem. With useHeld it may start
// from the instance document the lock batch wrote (instCache) instead of
// reading it; stale then reports that this document had changed (the
// commit, conditional on its ETag, failed) or that the turn needs more
// than one batch, and the caller tries again from a read.
func (p *Store) ack(ctx context.Context, lockToken string, turn durable.OrchestrationTurn, useHeld bool) (_ Commit, stale bool, _ error) {
	const op = "ack_orchestration_item"
	d, t, held, err := p.heldLock(ctx, op, lockToken, true, useHeld)
	if err != nil {
		if durable.IsRetryable(err) || !p.committedBefore(ctx, t, turn) {
			return Commit{}, false, err
		}
		// An earlier call committed this very turn under this lock (its
		// answer lost, and its read-back failed too): done. Its queue
		// documents and intents are found by the feed, the queries and
		// the repair pass.
		p.log.Info("a resent ack had committed already", zap.String("instance", t.instance))
		return Commit{Source: t.instance, Write: Write{Released: []Release{{Instance: t.instance}}}}, false, nil
	}
	cached := held != nil
	var kv *[]kvDoc
	if cached && held.kvKnown {
		kv = &held.kv
	}
	plan, err := p.planTurn(ctx, op, d, t, turn, kv)
	if err != nil {
		return Commit{}, false, err
	}
	single := p.singleBatch(plan, d.ETag)
	if !fitsOneBatch(single) {
		if cached {
			return Commit{}, true, nil
		}
		p.ic.drop(plan.instance)
		c, err := p.ackLarge(ctx, op, d, plan)
		return c, false, err
	}
	res, err := p.s.execBatch(ctx, plan.instance, single, false)
	if err != nil {
		var be *batchError
		if cached && asBatchError(err, &be) && be.index == 0 && be.status == http.StatusPreconditionFailed {
			return Commit{}, true, nil
		}
		if cerr := p.commitFailure(ctx, op, plan, err); cerr != nil {
			return Commit{}, false, cerr
		}
		p.ic.drop(plan.instance) // committed, but its ETag is unknown
	} else {
		p.ic.put(plan.instance, plan.inst, res.etags[0], res.session, len(single[0].body))
	}
	return plan.committed(plan.intents), false, nil
}

// planTurn validates the turn and computes every document it writes.
// kv, when not nil, is the instance's KV documents as the fetch read them
// under the lock the commit is conditional on; otherwise they are read
// when the turn needs them.
func (p *Store) planTurn(ctx context.Context, op string, d *instanceDoc, t parsedToken, turn durable.OrchestrationTurn, kv *[]kvDoc) (*turnPlan, error) {
	instance := t.instance
	if turn.ExecutionID == 0 {
		return nil, durable.Permanent(op, nil, "execution id 0 is invalid")
	}
	now := nowMS()
	plan := &turnPlan{instance: instance, nonce: t.nonce, commit: commitID(t.nonce, turn),
		deletes: d.LockedMsgs, lockedUntil: d.LockedUntil}
	for _, id := range turn.AwaitingActivities {
		plan.awaiting = append(plan.awaiting, workDocID(turn.ExecutionID, id))
	}

	// Execution record: the current one is copied in the instance document.
	var ex executionDoc
	switch {
	case d.Exec != nil && d.Exec.ExecutionID == turn.ExecutionID && !d.Exec.OutputElsewhere:
		ex = *d.Exec
	case turn.ExecutionID > d.CurrentExecutionID:
		ex = executionDoc{ID: execDocID(turn.ExecutionID), InstanceID: instance, Type: typeExecution,
			ExecutionID: turn.ExecutionID, Status: string(durable.StatusRunning), StartedAt: now}
	default:
		found, err := p.s.read(ctx, instance, execDocID(turn.ExecutionID), &ex)
		if err != nil {
			return nil, mapErr(op, err)
		}
		if !found {
			ex = executionDoc{ID: execDocID(turn.ExecutionID), InstanceID: instance, Type: typeExecution,
				ExecutionID: turn.ExecutionID, Status: string(durable.StatusRunning), StartedAt: now}
		}
	}
	plan.oldMark = ex.Mark
	hist, err := historyDocs(op, instance, turn.ExecutionID, turn.HistoryDelta, "")
	if err != nil {
		return nil, err
	}
	plan.history = hist
	advanceExecution(&ex, hist)
	md := turn.Metadata
	if md.Status != "" {
		ex.Status = string(md.Status)
		if md.Status.IsTerminal() {
			ex.CompletedAt = now
		}
	}
	if md.Output != nil {
		ex.Output = md.Output
	}

	// Instance document: metadata, custom status, lock released.
	nd := *d
	nd.ETag, nd.Pending = "", false
	nd.LockToken, nd.LockedUntil, nd.LockedMsgs = "", 0, nil
	nd.LastCommit, nd.UpdatedAt, nd.Awaiting = plan.commit, now, plan.awaiting
	if d.Pending || d.CreatedAt == 0 {
		nd.CreatedAt = now
	}
	if md.OrchestrationName != "" {
		nd.OrchestrationName = md.OrchestrationName
	}
	if md.OrchestrationVersion != "" {
		nd.OrchestrationVersion = md.OrchestrationVersion
	}
	if md.ParentInstanceID != "" {
		nd.ParentInstanceID = md.ParentInstanceID
	}
	if md.PinnedVersion != nil {
		nd.PinnedVersion = md.PinnedVersion.String()
	}
	if turn.ExecutionID >= d.CurrentExecutionID {
		nd.CurrentExecutionID = turn.ExecutionID
		nd.Status, nd.Output, nd.CompletedAt = ex.Status, ex.Output, ex.CompletedAt
		exCopy := ex
		if exCopy.Output != nil {
			exCopy.Output, exCopy.OutputElsewhere = nil, true
		}
		nd.Exec = &exCopy
	}
	for i := len(turn.HistoryDelta) - 1; i >= 0; i-- {
		if cs, ok := turn.HistoryDelta[i].Kind.(history.CustomStatusUpdated); ok {
			nd.CustomStatus = cs.Status
			nd.CustomStatusVersion++
			break
		}
	}
	plan.inst, plan.exec = nd, ex

	// Queue items: same partition in the batch, others through the outbox.
	cancelled := map[durable.ScheduledActivityIdentifier]bool{}
	for _, c := range turn.CancelledActivities {
		cancelled[c] = true
	}
	position := 0
	addItem := func(item durable.WorkItem, visibleAt int64, id string) error {
		if err := durable.ValidateWorkItem(item); err != nil {
			return durable.Permanent(op, err, "invalid work item")
		}
		if err := checkInstanceID(op, item.TargetInstance()); err != nil {
			return err
		}
		position++
		if item.TargetInstance() == instance {
			q, err := newQueueDoc(id, item, visibleAt)
			if err != nil {
				return durable.Permanent(op, err, "encode work item")
			}
			plan.queue = append(plan.queue, q)
			return nil
		}
		key := outboxKey(instance, turn.ExecutionID, t.nonce, position)
		q, err := newQueueDoc(outboxTargetID(key), item, visibleAt)
		if err != nil {
			return durable.Permanent(op, err, "encode work item")
		}
		payload, _ := json.Marshal(q)
		plan.intents = append(plan.intents, outbox.Intent{ID: outboxIntentID(key), InstanceID: instance, Type: outbox.Type,
			TargetInstance: item.TargetInstance(), Payload: string(payload), IdempotencyKey: key, CreatedAt: now})
		return nil
	}
	for _, w := range turn.WorkerItems {
		id := uuid.NewString()
		if a, ok := w.(durable.ActivityExecute); ok {
			if cancelled[durable.ScheduledActivityIdentifier{Instance: a.Instance, ExecutionID: a.ExecutionID, ActivityID: a.ID}] {
				continue // scheduled and cancelled in one turn: never created
			}
			id = workDocID(a.ExecutionID, a.ID)
		}
		if err := addItem(w, now, id); err != nil {
			return nil, err
		}
	}
	for i, o := range turn.OrchestratorItems {
		vis := now
		if tf, ok := o.(durable.TimerFired); ok && int64(tf.FireAtMS) > now {
			vis = int64(tf.FireAtMS)
		}
		if err := addItem(o, vis, "q:"+t.nonce+":"+itoa(i)); err != nil {
			return nil, err
		}
	}
	for _, c := range turn.CancelledActivities {
		created := false
		for _, w := range turn.WorkerItems {
			if a, ok := w.(durable.ActivityExecute); ok && a.Instance == c.Instance && a.ExecutionID == c.ExecutionID && a.ID == c.ActivityID {
				created = true
			}
		}
		if !created {
			plan.cancel = append(plan.cancel, c)
		}
	}

	// Key-value store: the delta's KV events applied in order to the
	// current documents, reduced to one write per key.
	// An execution that ends merges its writes into the snapshot.
	ends := md.Status.IsTerminal()
	if hasKV(turn.HistoryDelta) || ends {
		var cur []kvDoc
		if kv != nil {
			cur = *kv
		} else if cur, err = p.readKV(ctx, instance); err != nil {
			return nil, mapErr(op, err)
		}
		plan.kv = kvOps(instance, turn.ExecutionID, cur, turn.HistoryDelta, ends)
	}
	return plan, nil
}

func hasKV(evs []history.Event) bool {
	for _, e := range evs {
		switch e.Kind.(type) {
		case history.KeyValueSet, history.KeyValueCleared, history.KeyValuesCleared:
			return true
		}
	}
	return false
}

// singleBatch lays out a whole turn as one batch, the instance first,
// replaced If-Match ifMatch (the ETag the lock left): the lock's validity
// and the commit are one atomic step, nothing written to the instance
// document since (a deletion's claim, another holder's lock after an
// expiry) is overwritten, and a commit from a stale remembered document
// fails instead.
func (p *Store) singleBatch(plan *turnPlan, ifMatch string) []batchOp {
	ops := []batchOp{opReplace(idInstance, plan.inst, ifMatch)}
	ops = append(ops, opUpsert(plan.exec))
	for _, id := range plan.deletes {
		ops = append(ops, p.consumeOp(plan.instance, id))
	}
	for _, h := range plan.history {
		ops = append(ops, opCreate(h))
	}
	for _, q := range plan.queue {
		ops = append(ops, opCreate(q))
	}
	for _, in := range plan.intents {
		ops = append(ops, opCreate(in))
	}
	ops = append(ops, plan.kv...)
	return ops
}

// commitFailure interprets a failed commit batch. It returns nil when the
// turn turns out to be committed (the batch succeeded but its answer was
// lost and the retry found the lock released by this very turn).
func (p *Store) commitFailure(ctx context.Context, op string, plan *turnPlan, err error) error {
	if unknownOutcome(err) {
		// The answer was lost: the commit record says what happened.
		d, rerr := p.readInstance(ctx, plan.instance)
		committed := rerr == nil && d != nil && d.LastCommit == plan.commit
		p.log.Info("the answer to a turn's commit was lost; read back", zap.String("instance", plan.instance),
			zap.Bool("committed", committed), zap.Error(err))
		if committed {
			return nil
		}
		// Not (yet) committed: a retry of the ack is conditional on the
		// lock, so it commits at most once.
		return mapErr(op, err)
	}
	var be *batchError
	if asBatchError(err, &be) {
		switch {
		case be.index == 0 && (be.status == http.StatusPreconditionFailed || be.status == http.StatusNotFound):
			held, committed, rerr := p.heldBy(ctx, plan.instance, plan.nonce, plan.commit)
			switch {
			case rerr != nil:
				return mapErr(op, rerr)
			case committed:
				return nil
			case held:
				return fmt.Errorf("%w: %w", errOwnWrite, err)
			}
			return durable.Permanent(op, err, "lock on instance %q was lost before the commit", plan.instance)
		case be.status == http.StatusConflict:
			return durable.Permanent(op, err, "duplicate event id or document in the turn of %q", plan.instance)
		case be.status == http.StatusNotFound:
			return durable.Permanent(op, err, "a locked message of %q is gone", plan.instance)
		case be.status == http.StatusRequestEntityTooLarge:
			return durable.Permanent(op, err, "turn of %q is too large", plan.instance)
		}
	}
	return mapErr(op, err)
}

// committed is what the plan's commit leaves for dispatch, with the
// intents that are visible now (a large turn whose publication was
// deferred has none yet).
func (plan *turnPlan) committed(intents []outbox.Intent) Commit {
	c := Commit{Source: plan.instance, Intents: intents, cancel: plan.cancel, Awaiting: plan.awaiting}
	c.Released = []Release{{Instance: plan.instance, LockedUntil: plan.lockedUntil}}
	for _, q := range plan.queue {
		c.Visible = append(c.Visible, q.head())
	}
	return c
}

// deleteActivity removes a scheduled activity from the worker queue; a
// missing one is not an error (it may have completed already).
func (p *Store) deleteActivity(ctx context.Context, c durable.ScheduledActivityIdentifier) error {
	if c.Instance == "" || len(c.Instance) > MaxInstanceIDBytes {
		return nil
	}
	found, err := p.s.remove(ctx, c.Instance, workDocID(c.ExecutionID, c.ActivityID))
	if err != nil || found {
		return err
	}
	// Enqueued outside an ack (random id): find it by its fields.
	type row struct {
		ID string `json:"id"`
	}
	rows, err := queryAll[row](ctx, p.s, strp(c.Instance),
		"SELECT c.id FROM c WHERE c.type = 'worker_queue' AND c.executionId = @e AND c.activityId = @a",
		param("@e", c.ExecutionID), param("@a", c.ActivityID))
	if err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := p.s.remove(ctx, c.Instance, r.ID); err != nil {
			return err
		}
	}
	return nil
}

func asBatchError(err error, be **batchError) bool {
	for e := err; e != nil; {
		if b, ok := e.(*batchError); ok {
			*be = b
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// ackLarge commits a turn that does not fit one batch: stage, commit, publish.
func (p *Store) ackLarge(ctx context.Context, op string, d *instanceDoc, plan *turnPlan) (Commit, error) {
	instance, nonce := plan.instance, plan.nonce
	// A retry of this turn's ack restages from scratch.
	if d.Staging != "" {
		if err := p.deleteStaged(ctx, instance, d.Staging); err != nil {
			return Commit{}, mapErr(op, err)
		}
	}

	// The final batch: instance, execution, KV writes, history at or
	// below the old mark (created, so duplicates fail), and as many message
	// deletions as fit; the rest of the deletions go in the commit record.
	var low, high []historyDoc
	for _, h := range plan.history {
		if h.EventID <= plan.oldMark {
			low = append(low, h)
		} else {
			high = append(high, h)
		}
	}
	final := []batchOp{opReplace(idInstance, plan.inst, ""), opUpsert(plan.exec)}
	for _, h := range low {
		final = append(final, opCreate(h))
	}
	final = append(final, plan.kv...)
	if !fitsOneBatch(final) {
		return Commit{}, durable.Permanent(op, durable.ErrTooLarge, "%s", finalBatchTooLarge(instance, final, len(low), len(plan.kv)))
	}
	var deferred []string
	for _, id := range plan.deletes {
		o := p.consumeOp(instance, id)
		if fitsOneBatch(append(final[:len(final):len(final)], o)) {
			final = append(final, o)
		} else {
			deferred = append(deferred, id)
		}
	}

	// Everything else is staged: invisible until the commit.
	var staged []batchOp
	for _, h := range high {
		h.StagedBy = nonce
		staged = append(staged, opUpsert(h))
	}
	for _, q := range plan.queue {
		q.FinalType, q.Type, q.StagedBy = q.Type, typeStaged, nonce
		staged = append(staged, opUpsert(q))
	}
	for _, in := range plan.intents {
		in.FinalType, in.Type, in.StagedBy = in.Type, typeStaged, nonce
		staged = append(staged, opUpsert(in))
	}
	etag := d.ETag
	var guard azcosmos.PatchOperations
	guard.AppendSet("/staging", nonce)
	guardOp := opPatch(idInstance, guard, "")
	for _, chunk := range planBatches(staged, maxBatchOps-1, maxBatchBytes-guardOp.size()) {
		g := guardOp
		g.ifMatch = etag
		res, err := p.s.execBatch(ctx, instance, append([]batchOp{g}, chunk...), true)
		if err != nil {
			var be *batchError
			if asBatchError(err, &be) && be.index == 0 {
				held, _, rerr := p.heldBy(ctx, instance, nonce, "")
				switch {
				case rerr != nil:
					return Commit{}, mapErr(op, rerr)
				case held:
					return Commit{}, fmt.Errorf("%w: %w", errOwnWrite, err)
				}
				return Commit{}, durable.Permanent(op, err, "lock on instance %q was lost while staging", instance)
			}
			return Commit{}, mapErr(op, err)
		}
		etag = res.etags[0]
	}

	// Commit: the instance replace proves the lock, releases it, advances
	// the mark and records what is left to publish.
	plan.inst.Staging = ""
	if len(staged) > 0 || len(deferred) > 0 {
		plan.inst.Publish = &publishRecord{Token: nonce, DeleteMsgs: deferred, At: nowMS()}
	}
	final[0] = opReplace(idInstance, plan.inst, etag)
	res, err := p.s.execBatch(ctx, instance, final, false)
	if err != nil {
		if cerr := p.commitFailure(ctx, op, plan, err); cerr != nil {
			return Commit{}, cerr
		}
		res = batchResult{}
	}
	if plan.inst.Publish != nil {
		newTag := ""
		if len(res.etags) > 0 {
			newTag = res.etags[0]
		}
		if err := p.publish(ctx, instance, plan.inst.Publish, newTag); err != nil {
			// Committed all the same: the next fetch or the sweep publishes.
			p.log.Warn("large turn committed, publication deferred", zap.String("instance", instance), zap.Error(err))
			return plan.committed(nil), nil
		}
	}
	return plan.committed(plan.intents), nil
}

// finalBatchTooLarge says why a large turn's final batch (the instance
// and execution records, history at or below the old mark, the KV
// writes; one transactional batch, since it is the commit) cannot be
// written: its size against the batch limit, and what takes the room,
// without any payload.
func finalBatchTooLarge(instance string, final []batchOp, low, kv int) string {
	n := 0
	for _, o := range final {
		n += o.size()
	}
	return fmt.Sprintf("turn of %q cannot commit: its commit batch (the instance record %d bytes, the execution record %d bytes, "+
		"%d history events at or below the mark, %d key-value writes; %d operations) takes %d bytes, the limit is %d bytes (%d operations); "+
		"the records carry the orchestration's output, custom status and status, so an output near half the limit cannot be written",
		instance, final[0].size(), final[1].size(), low, kv, len(final), n, maxBatchBytes, maxBatchOps)
}

// publish makes a committed large turn's staged documents visible, deletes
// its deferred messages and clears the commit record (conditionally on
// etag when known). Every step is idempotent.
func (p *Store) publish(ctx context.Context, instance string, rec *publishRecord, etag string) error {
	if err := p.publishStaged(ctx, instance, rec.Token); err != nil {
		return err
	}
	for _, id := range rec.DeleteMsgs {
		if err := p.consume(ctx, instance, id); err != nil {
			return err
		}
	}
	var pt azcosmos.PatchOperations
	pt.AppendRemove("/publish")
	var cond azcosmos.PatchOperations
	cond.AppendSet("/publish", nil)
	var err error
	if etag == "" {
		// Unknown ETag (the commit's answer was lost): clear it only if the
		// record is still this one.
		cond.SetCondition("FROM c WHERE c.publish.token = '" + sqlQuote(rec.Token) + "'")
		_, err = p.s.patch(ctx, instance, idInstance, cond, "", nil)
	} else {
		_, err = p.s.patch(ctx, instance, idInstance, pt, etag, nil)
	}
	if err != nil && !lostRace(err) {
		return err
	}
	return nil
}

// maxPublishRounds bounds publishStaged's re-reads after losing races to
// another publisher (each lost race means that publisher made progress).
const maxPublishRounds = 64

// publishStaged gives every document staged under token its final type.
// Each patch is conditional on the staged document's ETag: two publishers
// of one turn (the committing ack and a fetch or sweep that found the
// publication pending) may run at once, and an unconditional patch of a
// document the other already published, and a worker has since locked,
// would change its ETag under the worker and fail that worker's ack. A
// batch that loses such a race is abandoned and what is still staged read
// again.
func (p *Store) publishStaged(ctx context.Context, instance, token string) error {
	type row struct {
		ID        string `json:"id"`
		FinalType string `json:"finalType"`
		ETag      string `json:"_etag"`
	}
	for range maxPublishRounds {
		rows, err := queryAll[row](ctx, p.s, strp(instance),
			"SELECT c.id, c.finalType, c._etag FROM c WHERE c.type = 'staged' AND c.stagedBy = @t", param("@t", token))
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		ops := make([]batchOp, 0, len(rows))
		for _, r := range rows {
			var pt azcosmos.PatchOperations
			pt.AppendSet("/type", r.FinalType)
			ops = append(ops, opPatch(r.ID, pt, r.ETag))
		}
		raced := false
		for _, chunk := range planBatches(ops, maxBatchOps, maxBatchBytes) {
			if _, err := p.s.execBatch(ctx, instance, chunk, true); err != nil {
				if !lostRace(err) {
					return err
				}
				raced = true
				break
			}
		}
		if !raced {
			return nil
		}
	}
	return durable.Retryable("publish", nil, "instance %q: staged documents kept changing during publication", instance)
}

func sqlQuote(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// deleteStaged deletes every document staged under token (an uncommitted
// large turn).
func (p *Store) deleteStaged(ctx context.Context, instance, token string) error {
	type row struct {
		ID string `json:"id"`
	}
	rows, err := queryAll[row](ctx, p.s, strp(instance), "SELECT c.id FROM c WHERE c.stagedBy = @t AND (c.type = 'staged' OR c.type = 'history')", param("@t", token))
	if err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := p.s.remove(ctx, instance, r.ID); err != nil {
			return err
		}
	}
	return nil
}

// recoverTurn finishes or discards what a large turn left on an unlocked
// instance: a commit record is published; staging without a commit is
// deleted. It returns the instance document as it is afterwards, and the
// intents a publication released.
func (p *Store) recoverTurn(ctx context.Context, d *instanceDoc) (_ *instanceDoc, released []outbox.Intent, _ error) {
	instance := d.InstanceID
	if d.Publish != nil {
		if err := p.publish(ctx, instance, d.Publish, d.ETag); err != nil {
			return nil, nil, err
		}
		// The publication may have released outbox intents: the caller
		// has them delivered.
		var err error
		released, err = queryAll[outbox.Intent](ctx, p.s, strp(instance), "SELECT * FROM c WHERE c.type = 'outbox_intent'")
		if err != nil {
			return nil, nil, err
		}
	}
	if d.Staging != "" && !d.lockHeld(nowMS()) {
		if err := p.deleteStaged(ctx, instance, d.Staging); err != nil {
			return nil, nil, err
		}
		var pt azcosmos.PatchOperations
		pt.AppendRemove("/staging")
		if _, err := p.s.patch(ctx, instance, idInstance, pt, d.ETag, nil); err != nil && !lostRace(err) {
			return nil, nil, err
		}
	}
	d, err := p.readInstance(ctx, instance)
	return d, released, err
}
