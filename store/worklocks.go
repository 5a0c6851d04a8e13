package store

import (
	"context"
	"strings"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
)

// workLocks remembers, per lock token, the version of each worker item
// this store has locked (the document as the lock, or the latest renewal,
// left it, without its work item). An ack or a renewal of a remembered
// lock is then a single conditional write, If-Match that version, instead
// of a read and a write: the version matching means the document is as
// this store's own write left it, lock token included. A write refused on
// the version (another writer, or an earlier write of ours whose answer
// was lost) falls back to reading the item. The memory is bounded: a
// lock that does not fit is not remembered, and costs its ack the read.
type workLocks struct {
	mu sync.Mutex
	m  map[string]queueDoc
}

// maxWorkLocks bounds the locks a store remembers at once (far more than
// a replica's worker dispatchers hold).
const maxWorkLocks = 4096

// remember records the version q of the item locked by token.
func (w *workLocks) remember(token string, q queueDoc) {
	q.WorkItem = ""
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]queueDoc{}
	}
	if _, ok := w.m[token]; !ok && len(w.m) >= maxWorkLocks {
		now := nowMS()
		for k, d := range w.m {
			if d.LockedUntil <= now {
				delete(w.m, k)
			}
		}
		if len(w.m) >= maxWorkLocks {
			return
		}
	}
	w.m[token] = q
}

// lookup returns the remembered version of token's item while its lock
// has not expired.
func (w *workLocks) lookup(token string) (queueDoc, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q, ok := w.m[token]
	if ok && q.LockedUntil <= nowMS() {
		delete(w.m, token)
		return queueDoc{}, false
	}
	return q, ok
}

// forget drops token's entry.
func (w *workLocks) forget(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, token)
}

// TryLockWork locks the worker item id of instance in one request,
// without reading it first: a patch whose condition holds only for a
// visible, unlocked worker item without a session whose tag tags
// req.Tags accepts. The result is Undecided when it could not decide:
// the condition failed (the item is locked, not yet visible, in a
// session, or of another tag), or the tags cannot be written into a
// condition; the caller then reads the item (ReadWork) to learn what it
// is. Decided without an Item, the item is gone or another fetch holds
// it now.
func (p *Store) TryLockWork(ctx context.Context, instance, id string, req WorkLockRequest) (WorkLockResult, error) {
	const op = "fetch_work_item"
	undecided := WorkLockResult{Undecided: true}
	tc, ok := inlineTagClause(req.Tags)
	if !ok {
		return undecided, nil
	}
	now := nowMS()
	token := makeToken(tokenWork, uuid.NewString(), instance, id)
	until := now + durMS(req.LockTimeout)
	pt := lockPatch(lockSpec{token, until, req.Owner})
	cond := "FROM c WHERE c.type = '" + typeWorkQueue + "' AND c.visibleAt <= " + itoa64(now) +
		" AND c.lockedUntil <= " + itoa64(now) + " AND c.sessionId = ''" + tc
	pt.SetCondition(cond)
	var locked queueDoc
	if _, err := p.s.patch(ctx, instance, id, pt, "", &locked); err != nil {
		switch {
		case statusOf(err) == 412:
			return undecided, nil
		case itemMissing(err):
			return WorkLockResult{}, nil
		case !unknownOutcome(err):
			return WorkLockResult{}, mapErr(op, err)
		}
		// The answer was lost: the item says whether the lock landed.
		found, rerr := p.s.read(ctx, instance, id, &locked)
		switch {
		case rerr != nil:
			return WorkLockResult{}, mapErr(op, err)
		case !found:
			return WorkLockResult{}, nil
		case locked.LockToken != token:
			p.log.Info("a work item lock whose answer was lost did not land", zap.String("instance", instance), zap.Error(err))
			if locked.LockedUntil > nowMS() {
				return WorkLockResult{}, nil // another fetch holds it
			}
			return WorkLockResult{}, mapErr(op, err)
		}
		p.log.Info("a work item lock whose answer was lost landed: it is ours", zap.String("instance", instance), zap.Error(err))
	}
	return p.lockedItem(ctx, locked, token, until), nil
}

// lockedItem is the item of a worker document this fetch has just locked
// (token, expiring at until), remembered for its ack; an undecodable work
// item is poisoned (no Item).
func (p *Store) lockedItem(ctx context.Context, locked queueDoc, token string, until int64) WorkLockResult {
	item, err := durable.UnmarshalWorkItem([]byte(locked.WorkItem))
	if err != nil {
		p.poisonWork(ctx, locked, token, err)
		return WorkLockResult{}
	}
	p.wl.remember(token, locked)
	return WorkLockResult{Item: &durable.LockedWorkItem{Item: item, LockToken: token, AttemptCount: locked.AttemptCount},
		Head: locked.head(), LockedUntil: until}
}

// inlineTagClause renders a tag filter as a condition with its tags as
// literals (a patch condition takes no parameters); ok is false when a
// tag holds characters other than letters, digits and "-_.:/@" (such a
// filter is checked by reading the item instead).
func inlineTagClause(f durable.TagFilter) (string, bool) {
	var tags []string
	switch f.Mode() {
	case durable.TagsAny:
		return "", true
	case durable.TagsDefaultOnly:
		return " AND c.tag = ''", true
	case durable.TagsOnly:
		tags = f.Tags()
	case durable.TagsDefaultAnd:
		tags = append([]string{""}, f.Tags()...)
	default:
		return "", false
	}
	if len(tags) == 0 {
		return "", false
	}
	lits := make([]string, len(tags))
	for i, t := range tags {
		if strings.IndexFunc(t, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r))
		}) >= 0 {
			return "", false
		}
		lits[i] = "'" + t + "'"
	}
	return " AND c.tag IN (" + strings.Join(lits, ", ") + ")", true
}
