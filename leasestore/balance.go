package leasestore

import (
	"context"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"
)

type actionKind int

// maxBatch is the most operations a transactional batch may hold.
const maxBatch = 100

const (
	actClaim    actionKind = iota + 1 // a lease naming us that we do not hold: CAS epoch+1
	actHandOff                        // honour a steal request: close Done, CAS owner=thief, epoch+1
	actReject                         // refuse a steal request: CAS stealBy=""
	actAcquire                        // a free lease: CAS owner=us, epoch+1
	actTakeOver                       // leases of one dead owner: batch (heartbeat "expired", owner=us, epoch+1)
	actSteal                          // ask a live owner for a lease: CAS stealBy=us
	actForget                         // delete a dead, unreferenced heartbeat document
)

// action is one write the balancer decided on, against the document
// version (doc, etag) it decided from.
type action struct {
	kind   actionKind
	idx    int
	doc    leaseDoc
	etag   azcore.ETag
	target string // actHandOff: the thief; actForget: the replica
	// actTakeOver: that owner's heartbeat document as we know it (etag ""
	// = absent) and the leases (more besides idx/doc/etag) to take. The
	// take-over commits in one transactional batch with a write to the
	// heartbeat document conditioned on that version, so a replica whose
	// heartbeat moved on in the meantime keeps its leases.
	owner     *ownerDoc
	ownerETag azcore.ETag
	more      []action
}

// balanceLoop runs a balancing round whenever the view changes (kicked by
// the watch, the heartbeat and Checkpoint) and at the instant the next
// owner could expire.
func (s *Store) balanceLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kickBalance:
		}
		t.Reset(s.round(ctx))
	}
}

// round plans and executes one balancing round and returns when the next
// one is due at the latest.
func (s *Store) round(ctx context.Context) time.Duration {
	now := time.Now()
	s.mu.Lock()
	if !s.healthyLocked(now) {
		s.mu.Unlock()
		return s.opts.HeartbeatInterval / 2
	}
	acts, next := s.planLocked(now)
	s.mu.Unlock()
	// The round's competitive writes (acquisitions, take-overs, steal
	// requests) were all planned from one view: once one of them loses a
	// compare-and-swap that view is stale, so the rest wait for the next
	// round (after the backoff, with the watch's news) instead of each
	// paying a lost write and a re-read.
	boost, lost, told := false, false, false
	for _, a := range acts {
		if ctx.Err() != nil {
			break
		}
		s.mu.Lock()
		ok := s.healthyLocked(time.Now())
		s.mu.Unlock()
		if !ok {
			break
		}
		switch a.kind {
		case actClaim:
			s.acquire(ctx, a)
		case actAcquire:
			if !lost {
				lost = !s.acquireFree(ctx, a)
			}
		case actTakeOver:
			if !lost {
				lost = !s.takeOver(ctx, a)
			}
		case actHandOff:
			s.handOff(ctx, a)
			boost, told = true, true
		case actReject:
			if s.rewriteSteal(ctx, a, "") {
				told = true
			}
		case actSteal:
			if lost {
				continue
			}
			if s.rewriteSteal(ctx, a, s.id) {
				boost, told = true, true
			} else {
				lost = true
			}
		case actForget:
			s.forget(ctx, a)
		}
	}
	if lost {
		next = min(next, s.backoffLeft())
	}
	if boost {
		s.signal(s.kickWatch)
	}
	if told && s.opts.OnWrote != nil {
		s.opts.OnWrote()
	}
	return next
}

// planLocked decides this round's writes from the current view:
//
//  1. claim every lease naming us that we do not hold (handed to us, or
//     left by an earlier incarnation of this replica);
//  2. answer steal requests on held leases: hand the lease over when the
//     thief is live and we hold at least two more than it, refuse
//     otherwise;
//  3. acquire free leases, then leases of dead owners, in random order,
//     while we hold fewer than ceil(N/live): the free ones in one
//     transactional batch, each dead owner's in one batch with its
//     heartbeat document;
//  4. when no lease is free or dead, ask the most loaded live owner for a
//     random lease of its while it holds at least two more than we do
//     (pending requests, ours and other live replicas', counted as done);
//  5. forget heartbeat documents of replicas dead for LeaseExpiry that no
//     lease mentions.
//
// Rule 4 strictly lowers the sum of squared counts, so balancing ends
// within one lease of even and never moves a lease back and forth; after a
// lost compare-and-swap or a refused request, rules 3 and 4 pause for a
// random backoff.
func (s *Store) planLocked(now time.Time) ([]action, time.Duration) {
	hb := s.opts.HeartbeatInterval
	next := hb
	live := map[string]bool{s.id: true}
	for r, m := range s.members {
		if s.memberLiveLocked(m, now) {
			live[r] = true
		}
		// Wake when this member could expire.
		if m.doc.State != stateExpired {
			if d := m.changedAt.Add(s.opts.LeaseExpiry).Sub(now); d > 0 && d < next {
				next = d + time.Millisecond
			}
		}
	}
	count := map[string]int{}
	for _, v := range s.leases {
		if v.known && live[v.doc.Owner] {
			count[v.doc.Owner]++
		}
	}
	n := len(s.leases)
	ceil := (n + len(live) - 1) / len(live)
	var acts []action
	mk := func(kind actionKind, i int) action {
		return action{kind: kind, idx: i, doc: s.leases[i].doc, etag: s.leases[i].etag}
	}

	// 1. Claims.
	for i, v := range s.leases {
		if v.known && v.doc.Owner == s.id && s.held[i] == nil {
			acts = append(acts, mk(actClaim, i))
		}
	}
	// 2. Steal requests on our leases.
	for i, l := range s.held {
		v := s.leases[i]
		t := v.doc.StealBy
		if t == "" || v.doc.Owner != s.id || v.doc.Epoch != l.epoch {
			continue
		}
		if t != s.id && live[t] && count[s.id] >= count[t]+2 {
			a := mk(actHandOff, i)
			a.target = t
			acts = append(acts, a)
			count[s.id]--
			count[t]++
		} else {
			acts = append(acts, mk(actReject, i))
		}
	}
	backoff := now.Before(s.backoffUntil)
	if backoff {
		next = min(next, s.backoffUntil.Sub(now)+time.Millisecond)
	}
	// 3. Free leases, then leases of dead owners.
	var free, dead []int
	for i, v := range s.leases {
		switch o := v.doc.Owner; {
		case !v.known || o == s.id || live[o]:
		case o == "":
			free = append(free, i)
		case s.memberDeadLocked(s.members[o], now):
			dead = append(dead, i)
		}
	}
	rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
	rand.Shuffle(len(dead), func(a, b int) { dead[a], dead[b] = dead[b], dead[a] })
	if !backoff {
		// Free leases: one transactional batch (the lease partition is
		// one logical partition), so a replica gets its share in one
		// round trip.
		k := -1
		for _, i := range free {
			if count[s.id] >= ceil {
				break
			}
			switch {
			case k < 0 || len(acts[k].more) >= maxBatch-1:
				k = len(acts)
				acts = append(acts, mk(actAcquire, i))
			default:
				acts[k].more = append(acts[k].more, mk(actAcquire, i))
			}
			count[s.id]++
		}
		// Dead owners' leases: one batch per owner.
		byOwner := map[string]int{}
		for _, i := range dead {
			if count[s.id] >= ceil {
				break
			}
			o := s.leases[i].doc.Owner
			k, ok := byOwner[o]
			if !ok {
				a := mk(actTakeOver, i)
				a.owner = &ownerDoc{ID: ownerID(o), Type: typeOwner, Replica: o}
				if m := s.members[o]; m != nil {
					d := m.doc
					a.owner, a.ownerETag = &d, m.etag
				}
				byOwner[o] = len(acts)
				acts = append(acts, a)
			} else if len(acts[k].more) < maxBatch-2 {
				acts[k].more = append(acts[k].more, mk(actTakeOver, i))
			} else {
				continue // the rest next round
			}
			count[s.id]++
		}
	}
	// 4. Steal requests.
	if !backoff && len(free) == 0 && len(dead) == 0 {
		model := map[string]int{}
		for o, c := range count {
			model[o] = c
		}
		byOwner := map[string][]int{}
		for i, v := range s.leases {
			o := v.doc.Owner
			if !v.known || o == s.id || !live[o] {
				continue
			}
			switch t := v.doc.StealBy; {
			case t == "":
				byOwner[o] = append(byOwner[o], i)
			case t == s.id || live[t]:
				// A pending request, ours or another live replica's,
				// counts as done: a replica that has just handed
				// leases to a newcomer must not steal from one that
				// is about to (that would move a lease the newcomer's
				// requests already rebalance).
				model[o]--
				model[t]++
			}
		}
		for {
			victim, most := "", -1
			for o, c := range model {
				if o == s.id || len(byOwner[o]) == 0 {
					continue
				}
				if c > most || (c == most && rand.IntN(2) == 0) {
					victim, most = o, c
				}
			}
			if victim == "" || most < model[s.id]+2 {
				break
			}
			cands := byOwner[victim]
			k := rand.IntN(len(cands))
			acts = append(acts, mk(actSteal, cands[k]))
			cands[k] = cands[len(cands)-1]
			byOwner[victim] = cands[:len(cands)-1]
			model[victim]--
			model[s.id]++
		}
	}
	// 5. Forget dead replicas no lease mentions.
	mentioned := map[string]bool{}
	for _, v := range s.leases {
		mentioned[v.doc.Owner] = true
		mentioned[v.doc.StealBy] = true
	}
	forgets := 0
	for r, m := range s.members {
		if forgets < 2 && !mentioned[r] && s.memberDeadLocked(m, now) && now.Sub(m.changedAt) >= s.opts.LeaseExpiry {
			acts = append(acts, action{kind: actForget, target: r, etag: m.etag})
			forgets++
		}
	}
	return acts, next
}

// backoffLocked pauses acquisitions and steal requests for a random time
// after a lost compare-and-swap or a refused request.
func (s *Store) backoffLocked() {
	d := s.opts.WatchActiveDelay + rand.N(s.opts.HeartbeatInterval/4+1)
	s.backoffUntil = time.Now().Add(d)
}

// acquire performs actClaim: the lease document naming us gets epoch+1.
func (s *Store) acquire(ctx context.Context, a action) {
	doc := s.acquiredDoc(a.doc)
	etag, err := s.replaceLease(ctx, doc, a.etag)
	if err != nil {
		s.lostRace(ctx, a, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyLeaseLocked(doc, etag)
	if !s.installLocked(doc, time.Now()) {
		s.log.Warn("acquired lease after the heartbeat deadline; not using it", zap.Int("lease", a.idx))
	}
}

// acquireFree performs actAcquire: one transactional batch gives the free
// leases a (and a.more) owner us, epoch+1, each conditioned on the version
// the decision saw. It reports false after a lost compare-and-swap.
func (s *Store) acquireFree(ctx context.Context, a action) bool {
	b := s.c.NewTransactionalBatch(s.meta.Load().pk)
	_, _, lost := s.acquireInBatch(ctx, &b, a, 0)
	return !lost
}

// acquireInBatch appends to b, after its off operations, for a and each of
// a.more the replace that makes the lease ours (owner us, epoch+1)
// conditioned on the version the decision saw; executes b; and installs
// the leases when it commits. lost reports a lost compare-and-swap (after
// the backoff and re-reads); neither committed nor lost means nothing was
// sent (a document that cannot be encoded, logged).
func (s *Store) acquireInBatch(ctx context.Context, b *azcosmos.TransactionalBatch, a action, off int) (resp azcosmos.TransactionalBatchResponse, committed, lost bool) {
	m := s.meta.Load()
	all := append([]action{a}, a.more...)
	docs := make([]leaseDoc, len(all))
	for k, la := range all {
		docs[k] = s.acquiredDoc(la.doc)
		body, err := encodeDoc(docs[k], m.pkProp, s.opts.PartitionKeyValue)
		if err != nil {
			s.log.Error("encode lease", zap.Error(err))
			return resp, false, false
		}
		le := la.etag
		b.ReplaceItem(docs[k].ID, body, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &le})
	}
	resp, err := s.c.ExecuteTransactionalBatch(ctx, *b, nil)
	if err != nil {
		s.lostRace(ctx, a, err)
		return resp, false, true
	}
	if !resp.Success {
		s.mu.Lock()
		s.backoffLocked()
		s.mu.Unlock()
		for k, la := range all {
			if i := off + k; i < len(resp.OperationResults) && (resp.OperationResults[i].StatusCode == http.StatusPreconditionFailed ||
				resp.OperationResults[i].StatusCode == http.StatusNotFound) {
				_ = s.refreshLease(ctx, la.idx)
			}
		}
		return resp, false, true
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, d := range docs {
		s.applyLeaseLocked(d, resp.OperationResults[off+k].ETag)
		if !s.installLocked(d, now) {
			s.log.Warn("acquired lease after the heartbeat deadline; not using it", zap.Int("lease", d.Index))
		}
	}
	return resp, true, false
}

// backoffLeft is how long the backoff still runs (at least a millisecond).
func (s *Store) backoffLeft() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(time.Until(s.backoffUntil), 0) + time.Millisecond
}

// acquiredDoc is d as written when we acquire it.
func (s *Store) acquiredDoc(d leaseDoc) leaseDoc {
	d.Owner, d.Epoch, d.Rev, d.StealBy = s.id, d.Epoch+1, d.Rev+1, ""
	d.AcquiredAt = wallString(s.opts.WallClock())
	return d
}

// takeOver performs actTakeOver: one transactional batch rewrites (or
// creates) the dead owner's heartbeat document as "expired", conditioned
// on the version judged dead, and gives each of its leases owner us,
// epoch+1, each conditioned on the version the decision saw. It reports
// false when the batch lost.
func (s *Store) takeOver(ctx context.Context, a action) bool {
	m := s.meta.Load()
	od := *a.owner
	od.Seq++
	od.State, od.ExpiredBy, od.WrittenAt = stateExpired, s.id, wallString(s.opts.WallClock())
	obody, err := encodeDoc(od, m.pkProp, s.opts.PartitionKeyValue)
	if err != nil {
		s.log.Error("encode heartbeat", zap.Error(err))
		return true
	}
	b := s.c.NewTransactionalBatch(m.pk)
	if a.ownerETag == "" {
		b.CreateItem(obody, nil)
	} else {
		oe := a.ownerETag
		b.ReplaceItem(od.ID, obody, &azcosmos.TransactionalBatchItemOptions{IfMatchETag: &oe})
	}
	resp, committed, lost := s.acquireInBatch(ctx, &b, a, 1)
	if lost {
		s.log.Debug("take-over lost", zap.String("owner", od.Replica))
		return false
	}
	if !committed {
		return true
	}
	s.mu.Lock()
	if mv := s.members[od.Replica]; mv == nil || mv.etag == a.ownerETag {
		s.members[od.Replica] = &memberView{doc: od, etag: resp.OperationResults[0].ETag, changedAt: time.Now()}
	}
	s.mu.Unlock()
	s.log.Info("took over leases of a dead replica", zap.String("owner", od.Replica), zap.Int("leases", 1+len(a.more)))
	if s.opts.OnExpired != nil && a.owner.Incarnation != "" {
		s.opts.OnExpired(holderName(od.Replica, a.owner.Incarnation))
	}
	return true
}

// lostRace handles a failed write of the balancer.
func (s *Store) lostRace(ctx context.Context, a action, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	s.backoffLocked()
	s.mu.Unlock()
	switch statusOf(err) {
	case http.StatusPreconditionFailed, http.StatusNotFound:
		_ = s.refreshLease(ctx, a.idx)
	default:
		s.log.Warn("lease write failed", zap.Int("lease", a.idx), zap.Error(err))
	}
}

// handOff closes Done of a lease a thief asked for, then hands it over
// (owner = thief, epoch+1). A lost compare-and-swap is retried while the
// document still grants us the same epoch.
func (s *Store) handOff(ctx context.Context, a action) {
	s.mu.Lock()
	if l := s.held[a.idx]; l != nil && l.epoch == a.doc.Epoch {
		s.loseLocked(l, ReasonHandedOff)
	}
	s.mu.Unlock()
	if err := s.transfer(ctx, a.idx, a.doc.Epoch, a.target); err != nil && ctx.Err() == nil {
		s.log.Warn("hand-off failed", zap.Int("lease", a.idx), zap.String("to", a.target), zap.Error(err))
	}
}

// transfer writes lease idx from (us, epoch) to target ("" = free) with
// epoch+1, re-reading and retrying after a lost compare-and-swap as long as
// the document still names us with that epoch.
func (s *Store) transfer(ctx context.Context, idx int, epoch int64, target string) error {
	for attempt := 0; attempt < 5; attempt++ {
		s.mu.Lock()
		v := s.leases[idx]
		s.mu.Unlock()
		if v.doc.Owner != s.id || v.doc.Epoch != epoch {
			return nil // no longer ours to give
		}
		doc := v.doc
		doc.Owner, doc.Epoch, doc.Rev, doc.StealBy = target, doc.Epoch+1, doc.Rev+1, ""
		doc.AcquiredAt = wallString(s.opts.WallClock())
		etag, err := s.replaceLease(ctx, doc, v.etag)
		if err == nil {
			s.mu.Lock()
			s.applyLeaseLocked(doc, etag)
			s.mu.Unlock()
			return nil
		}
		if statusOf(err) != http.StatusPreconditionFailed {
			return err
		}
		if err := s.refreshLease(ctx, idx); err != nil {
			return err
		}
	}
	return nil
}

// rewriteSteal sets (us) or clears ("") the steal request of a lease.
func (s *Store) rewriteSteal(ctx context.Context, a action, by string) bool {
	doc := a.doc
	doc.StealBy, doc.Rev = by, doc.Rev+1
	etag, err := s.replaceLease(ctx, doc, a.etag)
	if err != nil {
		s.lostRace(ctx, a, err)
		return false
	}
	s.mu.Lock()
	s.applyLeaseLocked(doc, etag)
	s.mu.Unlock()
	return true
}

// forget deletes the heartbeat document of a replica that is dead and no
// longer mentioned by any lease.
func (s *Store) forget(ctx context.Context, a action) {
	etag := a.etag
	_, err := s.c.DeleteItem(ctx, s.meta.Load().pk, ownerID(a.target), &azcosmos.ItemOptions{IfMatchEtag: &etag})
	if err != nil && statusOf(err) != http.StatusNotFound {
		return
	}
	s.mu.Lock()
	if m := s.members[a.target]; m != nil && m.etag == etag {
		delete(s.members, a.target)
	}
	s.mu.Unlock()
}
