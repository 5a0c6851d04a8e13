package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
)

// tagClause renders a tag filter as a query condition ("" for any tag).
func tagClause(f durable.TagFilter) (string, []azcosmos.QueryParameter) {
	var tags []string
	switch f.Mode() {
	case durable.TagsAny:
		return "", nil
	case durable.TagsDefaultOnly:
		return " AND c.tag = ''", nil
	case durable.TagsOnly:
		tags = f.Tags()
	case durable.TagsDefaultAnd:
		tags = append([]string{""}, f.Tags()...)
	}
	names := make([]string, len(tags))
	params := make([]azcosmos.QueryParameter, len(tags))
	for i, t := range tags {
		names[i] = "@tag" + itoa(i)
		params[i] = param(names[i], t)
	}
	return " AND c.tag IN (" + strings.Join(names, ", ") + ")", params
}

// WorkLockRequest is what a worker-item lock asks for (LockWorkIn,
// TryLockWork, LockWork).
type WorkLockRequest struct {
	// LockTimeout is how long the lock holds.
	LockTimeout time.Duration
	// Session is the caller's session settings; nil takes no session item
	// (LockWorkIn; TryLockWork takes none in any case).
	Session *durable.SessionFetchConfig
	// Tags are the item tags the caller accepts (LockWorkIn, TryLockWork).
	Tags durable.TagFilter
	// Owner names the lock's holder, as LockRequest.Owner.
	Owner string
}

// WorkLockResult is what a worker-item lock did.
type WorkLockResult struct {
	// Item is the locked item; nil when nothing was locked (none
	// takeable, another fetch won the race, or the item was gone or
	// poisoned).
	Item *durable.LockedWorkItem
	// Head is Item's queue head after the lock, and LockedUntil the
	// lock's expiry (unix ms); zero without an Item.
	Head        QueueHead
	LockedUntil int64
	// Undecided (TryLockWork only) says the one-request lock could not
	// decide: the caller reads the item (ReadWork) to learn what it is.
	Undecided bool
}

// LockWorkIn runs the worker candidate query over the block's slots (the
// seeds' polling fetch) and locks the oldest item the caller may take: a
// session item only with session settings, and only when its session is
// free or the caller's. The result has no Item when there is none.
func (p *Store) LockWorkIn(ctx context.Context, sh slots.Block, req WorkLockRequest) (WorkLockResult, error) {
	if req.Tags.Mode() == durable.TagsNone {
		return WorkLockResult{}, nil
	}
	session, tags := req.Session, req.Tags
	const op = "fetch_work_item"
	now := nowMS()
	sql := "SELECT c.id, c.instanceId, c.enqueuedAt, c.sessionId, c._etag FROM c WHERE c.type = 'worker_queue' AND c.visibleAt <= @now AND c.lockedUntil <= @now"
	params := []azcosmos.QueryParameter{param("@now", now)}
	clause, sp := slotClause(sh)
	sql += clause
	params = append(params, sp...)
	tc, tp := tagClause(tags)
	sql += tc
	params = append(params, tp...)
	if session == nil {
		sql += " AND c.sessionId = ''"
	}
	cands, err := queryAll[queueDoc](ctx, p.s, nil, sql, params...)
	if err != nil {
		return WorkLockResult{}, mapErr(op, err)
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].EnqueuedAt < cands[j].EnqueuedAt })
	refused := map[string]bool{} // sessions owned by someone else
	tries := 0
	for _, c := range cands {
		if tries >= maxLockAttempts {
			break
		}
		if c.SessionID != "" {
			if refused[c.SessionID] {
				continue
			}
			ok, err := p.claimSession(ctx, c.SessionID, session)
			if err != nil {
				return WorkLockResult{}, mapErr(op, err)
			}
			if !ok {
				refused[c.SessionID] = true
				continue
			}
		}
		tries++
		r, err := p.lockWorkDoc(ctx, c, req.LockTimeout, req.Owner)
		if err != nil || r.Item != nil {
			return r, err
		}
	}
	return WorkLockResult{}, nil
}

// lockWorkDoc locks the worker item q (If-Match the version read). The
// result has no Item when another fetch won the race. A
// lock whose answer was lost is read back: when the item carries this
// lock's token, the lock is ours (instead of waiting for it to expire).
func (p *Store) lockWorkDoc(ctx context.Context, q queueDoc, lockTimeout time.Duration, owner string) (WorkLockResult, error) {
	const op = "fetch_work_item"
	nonce := uuid.NewString()
	token := makeToken(tokenWork, nonce, q.InstanceID, q.ID)
	until := nowMS() + durMS(lockTimeout)
	pt := lockPatch(lockSpec{token, until, owner})
	var locked queueDoc
	if _, err := p.s.patch(ctx, q.InstanceID, q.ID, pt, q.ETag, &locked); err != nil {
		switch {
		case lostRace(err):
			return WorkLockResult{}, nil
		case !unknownOutcome(err):
			return WorkLockResult{}, mapErr(op, err)
		}
		found, rerr := p.s.read(ctx, q.InstanceID, q.ID, &locked)
		if rerr != nil {
			return WorkLockResult{}, mapErr(op, err)
		}
		if !found || locked.LockToken != token {
			p.log.Info("a work item lock whose answer was lost did not land", zap.String("instance", q.InstanceID), zap.Error(err))
			if !found || locked.ETag != q.ETag {
				return WorkLockResult{}, nil // taken or gone meanwhile
			}
			return WorkLockResult{}, mapErr(op, err)
		}
		p.log.Info("a work item lock whose answer was lost landed: it is ours", zap.String("instance", q.InstanceID), zap.Error(err))
	}
	return p.lockedItem(ctx, locked, token, until), nil
}

// poisonWork settles a worker item that this fetch has just locked (token)
// and whose work item cannot be decoded (written by hand or by another
// program): no worker can run it, and returning an error for it would
// fail a fetch at every expiry of its lock, forever. When its document
// names an activity (executionId and activityId), the item is acked with
// an ActivityFailed completion (category infrastructure, not retryable,
// the decoding error in its message), so the orchestration waiting on the
// activity learns that it failed; otherwise it is deleted. Either way it is
// logged at Error; a failed ack leaves the item to be poisoned again after
// its lock expires.
func (p *Store) poisonWork(ctx context.Context, q queueDoc, token string, derr error) {
	const op = "fetch_work_item"
	log := p.log.With(zap.String("instance", q.InstanceID), zap.String("item", q.ID), zap.Error(derr))
	var completion durable.WorkItem
	if q.ExecutionID > 0 && q.ActivityID > 0 {
		completion = durable.ActivityFailed{Instance: q.InstanceID, ExecutionID: q.ExecutionID, ID: q.ActivityID,
			Details: history.InfrastructureError(op, strings.ToValidUTF8(fmt.Sprintf("stored work item %q cannot be decoded: %v", q.ID, derr), "?"), false)}
	}
	if _, err := p.AckWorkItem(ctx, token, completion); err != nil {
		log.Error("an undecodable work item could not be poisoned; retried after its lock expires", zap.NamedError("ack", err))
		return
	}
	log.Error("poisoned an undecodable work item", zap.Bool("activity_failed", completion != nil))
}

// ClaimSession makes cfg's owner the owner of the session sid unless
// another owner holds it unexpired, reporting whether the caller owns it
// now (a fetch's session claim).
func (p *Store) ClaimSession(ctx context.Context, sid string, cfg *durable.SessionFetchConfig) (bool, error) {
	ok, err := p.claimSession(ctx, sid, cfg)
	if err != nil {
		return false, mapErr("fetch_work_item", err)
	}
	return ok, nil
}

// claimSession makes cfg's owner the owner of the session, unless another
// owner holds it unexpired. It reports whether the caller owns it now. A
// claim whose answer was lost is read back, so it neither waits for its
// own lock to expire nor reports an error for a claim that landed.
func (p *Store) claimSession(ctx context.Context, sid string, cfg *durable.SessionFetchConfig) (bool, error) {
	part := sessionPartition(sid)
	var s sessionDoc
	found, err := p.s.read(ctx, part, sessionDocID(sid), &s)
	if err != nil {
		return false, err
	}
	now := nowMS()
	if found && s.OwnerID != cfg.OwnerID && s.LockedUntil > now {
		return false, nil
	}
	nd := sessionDoc{ID: sessionDocID(sid), InstanceID: part, Type: typeSession, SessionID: sid, OwnerID: cfg.OwnerID,
		LockedUntil: now + durMS(cfg.LockTimeout), LastActivity: now, CreatedAt: now}
	if found {
		nd.CreatedAt = s.CreatedAt
		if s.OwnerID == cfg.OwnerID && s.LockedUntil > nd.LockedUntil {
			nd.LockedUntil = s.LockedUntil
		}
		_, err = p.s.replace(ctx, part, nd.ID, nd, s.ETag)
	} else {
		err = p.s.create(ctx, part, nd, false)
	}
	switch {
	case err == nil:
		return true, nil
	case lostRace(err):
		return false, nil
	case !unknownOutcome(err):
		return false, err
	}
	// The answer was lost: the session is ours when the document says so
	// (this claim or an earlier one of the same owner landed).
	var back sessionDoc
	found, rerr := p.s.read(ctx, part, nd.ID, &back)
	owned := rerr == nil && found && back.OwnerID == cfg.OwnerID && back.LockedUntil > nowMS()
	p.log.Info("the answer to a session claim was lost; read back", zap.String("session", sid), zap.Bool("owned", owned), zap.Error(err))
	if owned {
		return true, nil
	}
	if rerr == nil && found && back.ETag != s.ETag {
		return false, nil // another owner claimed it meanwhile
	}
	return false, err
}

// touchSession records session activity, only while the session is owned.
func (p *Store) touchSession(ctx context.Context, sid string) {
	now := nowMS()
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lastActivity", now)
	pt.SetCondition("FROM c WHERE c.lockedUntil > " + itoa64(now))
	_, _ = p.s.patch(ctx, sessionPartition(sid), sessionDocID(sid), pt, "", nil)
}

func itoa64(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// workToWrite returns the version of token's work item an ack or a
// renewal writes If-Match: the one this store remembers from its own
// lock or renewal (remembered true; no request), or else the item as read
// now, its lock checked (lockedWork).
func (p *Store) workToWrite(ctx context.Context, op, token string) (*queueDoc, parsedToken, bool, error) {
	if q, ok := p.wl.lookup(token); ok {
		if t, ok := parseToken(token); ok && t.kind == tokenWork {
			return &q, t, true, nil
		}
	}
	q, t, err := p.lockedWork(ctx, op, token)
	return q, t, false, err
}

// lockedWork reads a work item by its token and checks the lock.
func (p *Store) lockedWork(ctx context.Context, op, token string) (*queueDoc, parsedToken, error) {
	t, ok := parseToken(token)
	if !ok || t.kind != tokenWork {
		return nil, t, durable.Permanent(op, nil, "unknown lock token")
	}
	var q queueDoc
	found, err := p.s.read(ctx, t.instance, t.docID, &q)
	if err != nil {
		return nil, t, mapErr(op, err)
	}
	if !found {
		return nil, t, durable.Permanent(op, nil, "work item of %q is gone (cancelled or completed)", t.instance)
	}
	if q.LockToken != token {
		return nil, t, durable.Permanent(op, nil, "work item lock of %q was taken over", t.instance)
	}
	if q.LockedUntil <= nowMS() {
		return nil, t, durable.Permanent(op, nil, "work item lock of %q has expired", t.instance)
	}
	return &q, t, nil
}

// AckWorkItem is durable.Provider's AckWorkItem: the item's deletion
// (If-Match its ETag) and the completion's creation are one batch. It
// returns what the commit left for dispatch.
func (p *Store) AckWorkItem(ctx context.Context, lockToken string, completion durable.WorkItem) (Commit, error) {
	const op = "ack_work_item"
	defer p.wl.forget(lockToken)
	q, t, remembered, err := p.workToWrite(ctx, op, lockToken)
	if err != nil {
		return Commit{}, err
	}
	ops := []batchOp{{kind: "delete", id: q.ID, ifMatch: q.ETag}}
	var intent *outbox.Intent
	var local *queueDoc
	if completion != nil {
		if err := validateItem(op, completion, durable.OrchestratorQueue); err != nil {
			return Commit{}, err
		}
		if completion.TargetInstance() == t.instance {
			d, err := newQueueDoc("c:"+t.nonce, completion, nowMS())
			if err != nil {
				return Commit{}, durable.Permanent(op, err, "encode completion")
			}
			d.Settles = q.ID
			ops = append(ops, opCreate(d))
			local = &d
		} else {
			key := "work|" + t.instance + "|" + t.nonce
			d, err := newQueueDoc(outboxTargetID(key), completion, nowMS())
			if err != nil {
				return Commit{}, durable.Permanent(op, err, "encode completion")
			}
			payload, _ := json.Marshal(d)
			intent = &outbox.Intent{ID: outboxIntentID(key), InstanceID: t.instance, Type: outbox.Type,
				TargetInstance: completion.TargetInstance(), Payload: string(payload), IdempotencyKey: key, CreatedAt: nowMS()}
			ops = append(ops, opCreate(*intent))
		}
	}
	_, err = p.s.execBatch(ctx, t.instance, ops, false)
	if remembered && (statusOf(err) == http.StatusPreconditionFailed || statusOf(err) == http.StatusNotFound) {
		// The remembered version is not the item's (a write of ours
		// whose answer was lost, or another writer): read the item and
		// decide on what it holds.
		if q, t, err = p.lockedWork(ctx, op, lockToken); err != nil {
			return Commit{}, err
		}
		ops[0].ifMatch = q.ETag
		_, err = p.s.execBatch(ctx, t.instance, ops, false)
	}
	if err != nil {
		if statusOf(err) == http.StatusPreconditionFailed || statusOf(err) == http.StatusNotFound {
			return Commit{}, durable.Permanent(op, err, "work item lock of %q was lost", t.instance)
		}
		if !unknownOutcome(err) {
			return Commit{}, mapErr(op, err)
		}
		// The answer was lost. The batch deletes the item, so the item
		// says what happened: gone, the ack committed; unchanged, it did
		// not (a retry is conditional on the same version, so it commits
		// at most once); changed, the lock was lost.
		var now queueDoc
		found, rerr := p.s.read(ctx, t.instance, q.ID, &now)
		p.log.Info("the answer to a work item's ack was lost; read back", zap.String("instance", t.instance),
			zap.Bool("committed", rerr == nil && !found), zap.Error(err))
		switch {
		case rerr != nil:
			return Commit{}, mapErr(op, err)
		case found && now.ETag == q.ETag:
			return Commit{}, mapErr(op, err)
		case found:
			return Commit{}, durable.Permanent(op, err, "work item lock of %q was lost", t.instance)
		}
	}
	c := Commit{Source: t.instance, session: q.SessionID}
	c.WorkDone = []QueueHead{q.head()}
	if local != nil {
		c.Visible = []QueueHead{local.head()}
	}
	if intent != nil {
		c.Intents = []outbox.Intent{*intent}
	}
	return c, nil
}

// AbandonWorkItem is durable.Provider's AbandonWorkItem (an unknown token
// succeeds); it returns the item made visible again.
func (p *Store) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) (Write, error) {
	const op = "abandon_work_item"
	p.wl.forget(lockToken)
	t, ok := parseToken(lockToken)
	if !ok || t.kind != tokenWork {
		return Write{}, nil
	}
	var q queueDoc
	found, err := p.s.read(ctx, t.instance, t.docID, &q)
	if err != nil {
		return Write{}, mapErr(op, err)
	}
	if !found || q.LockToken != lockToken {
		return Write{}, nil
	}
	if delay < 0 {
		delay = 0
	}
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lockToken", "")
	pt.AppendSet("/lockedUntil", 0)
	pt.AppendSet("/visibleAt", nowMS()+durMS(delay))
	if ignoreAttempt && q.AttemptCount > 0 {
		pt.AppendIncrement("/attemptCount", -1)
	}
	if _, err := p.s.patch(ctx, t.instance, q.ID, pt, q.ETag, nil); err != nil {
		switch {
		case lostRace(err):
			return Write{}, nil
		case !unknownOutcome(err):
			return Write{}, mapErr(op, err)
		}
		// The answer was lost: the item no longer carrying the lock means
		// the abandon landed (or the lock was lost anyway).
		var now queueDoc
		found, rerr := p.s.read(ctx, t.instance, q.ID, &now)
		if rerr != nil || (found && now.LockToken == lockToken) {
			return Write{}, mapErr(op, err)
		}
		if !found {
			return Write{}, nil
		}
	}
	q.LockToken, q.LockedUntil, q.VisibleAt = "", 0, nowMS()+durMS(delay)
	return Write{Visible: []QueueHead{q.head()}}, nil
}

// RenewWorkItemLock implements durable.Provider.
func (p *Store) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	q, t, remembered, err := p.workToWrite(ctx, op, lockToken)
	if err != nil {
		return err
	}
	until := nowMS() + durMS(extendFor)
	var pt azcosmos.PatchOperations
	pt.AppendSet("/lockedUntil", until)
	etag, err := p.s.patch(ctx, t.instance, q.ID, pt, q.ETag, nil)
	if remembered && lostRace(err) {
		// Not the remembered version: decide on what the item holds.
		if q, t, err = p.lockedWork(ctx, op, lockToken); err != nil {
			p.wl.forget(lockToken)
			return err
		}
		etag, err = p.s.patch(ctx, t.instance, q.ID, pt, q.ETag, nil)
	}
	if err != nil {
		p.wl.forget(lockToken)
		if lostRace(err) {
			return durable.Permanent(op, err, "work item lock of %q was lost", t.instance)
		}
		return mapErr(op, err)
	}
	if etag != "" {
		q.ETag, q.LockedUntil = etag, until
		p.wl.remember(lockToken, *q)
	}
	if q.SessionID != "" {
		p.touchSession(ctx, q.SessionID)
	}
	return nil
}

// RenewSessionLock implements durable.Provider: one cross-partition query
// for all owners, then one conditional replace per live, active session.
func (p *Store) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "renew_session_lock"
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	now := nowMS()
	names := make([]string, len(ownerIDs))
	params := []azcosmos.QueryParameter{param("@now", now), param("@idle", now-durMS(idleTimeout))}
	for i, o := range ownerIDs {
		names[i] = "@o" + itoa(i)
		params = append(params, param(names[i], o))
	}
	sessions, err := queryAll[sessionDoc](ctx, p.s, nil,
		"SELECT * FROM c WHERE c.type = 'session' AND c.lockedUntil > @now AND c.lastActivity > @idle AND c.ownerId IN ("+strings.Join(names, ", ")+")",
		params...)
	if err != nil {
		return 0, mapErr(op, err)
	}
	n := 0
	for _, s := range sessions {
		etag := s.ETag
		s.ETag = ""
		s.LockedUntil = nowMS() + durMS(extendFor)
		if _, err := p.s.replace(ctx, s.InstanceID, s.ID, s, etag); err != nil {
			if lostRace(err) {
				continue
			}
			return n, mapErr(op, err)
		}
		n++
	}
	return n, nil
}

// CleanupOrphanedSessions implements durable.Provider.
func (p *Store) CleanupOrphanedSessions(ctx context.Context, _ time.Duration) (int, error) {
	const op = "cleanup_orphaned_sessions"
	now := nowMS()
	expired, err := queryAll[sessionDoc](ctx, p.s, nil,
		"SELECT c.id, c.instanceId, c.sessionId, c._etag FROM c WHERE c.type = 'session' AND c.lockedUntil <= @now", param("@now", now))
	if err != nil || len(expired) == 0 {
		return 0, mapErr(op, err)
	}
	type row struct {
		SessionID string `json:"sessionId"`
	}
	used, err := queryAll[row](ctx, p.s, nil, "SELECT c.sessionId FROM c WHERE c.type = 'worker_queue' AND c.sessionId != ''")
	if err != nil {
		return 0, mapErr(op, err)
	}
	inUse := map[string]bool{}
	for _, u := range used {
		inUse[u.SessionID] = true
	}
	n := 0
	for _, s := range expired {
		if inUse[s.SessionID] {
			continue
		}
		err := p.s.retry.do(ctx, true, func() error {
			_, err := p.s.c.DeleteItem(ctx, pk(s.InstanceID), s.ID, &azcosmos.ItemOptions{IfMatchEtag: etagPtr(s.ETag)})
			return err
		})
		if err != nil {
			if lostRace(err) {
				continue
			}
			return n, mapErr(op, err)
		}
		n++
	}
	return n, nil
}

// WorkDoc is a worker queue document as ReadWork read it: a lock taken
// with LockWork is conditional on that version.
type WorkDoc struct {
	QueueHead
	// SessionID and Tag are the item's session ("" for none) and tag.
	SessionID, Tag string

	doc queueDoc
}

// ReadWork point-reads a worker item; nil when it is gone or not a
// worker item.
func (p *Store) ReadWork(ctx context.Context, instance, id string) (*WorkDoc, error) {
	var q queueDoc
	found, err := p.s.read(ctx, instance, id, &q)
	if err != nil {
		return nil, mapErr("fetch_work_item", err)
	}
	if !found || q.Type != typeWorkQueue {
		return nil, nil
	}
	return &WorkDoc{QueueHead: q.head(), SessionID: q.SessionID, Tag: q.Tag, doc: q}, nil
}

// LockWork locks the worker item w as read (If-Match its version), with
// req's LockTimeout and Owner; the caller has checked its session and
// tag. The result has no Item when another fetch won the race.
func (p *Store) LockWork(ctx context.Context, w *WorkDoc, req WorkLockRequest) (WorkLockResult, error) {
	return p.lockWorkDoc(ctx, w.doc, req.LockTimeout, req.Owner)
}
