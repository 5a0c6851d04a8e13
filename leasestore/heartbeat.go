package leasestore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"
)

// register writes this replica's heartbeat document under a new
// incarnation: created if missing, otherwise replaced If-Match what it
// holds (a death declaration, a "leaving" mark, or an earlier incarnation).
// A live heartbeat written by another process is taken over at once when
// that process ran on this Host (a restart in place: Options.Host), else
// only once it has been unchanged for LeaseExpiry, as any observer would
// judge it; if it keeps changing, another process uses this ReplicaID and
// register fails with ErrDuplicateReplica.
func (s *Store) register(ctx context.Context) error {
	m := s.meta.Load()
	id := ownerID(s.id)
	cur, etag, err := s.readOwn(ctx)
	if err != nil {
		return err
	}
	var predecessor string // the incarnation a restart in place replaces
	if cur != nil && cur.State == stateLive && !s.ownIncarnation(cur.Incarnation) {
		if s.inPlace(*cur) {
			predecessor = cur.Incarnation
		} else if cur, etag, err = s.awaitIdentity(ctx, *cur, etag); err != nil {
			return err
		}
	}
	var seq int64
	if cur != nil {
		seq = cur.Seq
	}
	inc := randomHex(8)
	s.mu.Lock()
	s.tried[inc] = true
	s.mu.Unlock()
	doc := ownerDoc{ID: id, Type: typeOwner, Replica: s.id, Incarnation: inc, Seq: seq + 1, State: stateLive,
		WrittenAt: wallString(s.opts.WallClock()), Host: s.host()}
	s.wakeFields(&doc)
	body, err := encodeDoc(doc, m.pkProp, s.opts.PartitionKeyValue)
	if err != nil {
		return err
	}
	sent := time.Now()
	var wr azcosmos.ItemResponse
	if etag != "" {
		wr, err = s.c.ReplaceItem(ctx, m.pk, id, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		if statusOf(err) == http.StatusNotFound {
			// Deleted since the read (a death declaration deletes it):
			// nobody holds the id, so create it anew.
			etag = ""
		}
	}
	if etag == "" {
		wr, err = s.c.CreateItem(ctx, m.pk, body, nil)
	}
	if err != nil {
		return err // 409/412: raced with ourselves or a death declaration; retried
	}
	s.mu.Lock()
	s.incarnation, s.mySeq, s.myETag = inc, doc.Seq, wr.ETag
	s.lastBeat = sent
	if s.firstBeat.IsZero() {
		s.firstBeat = sent
	}
	s.registered = true
	s.mu.Unlock()
	s.log.Info("registered", zap.String("incarnation", inc))
	if predecessor != "" {
		// The predecessor is fenced (its heartbeat is ours now); its
		// leases are claimed at the next round, and its locks go.
		s.log.Info("restarted in place: took over the previous incarnation at once",
			zap.String("previous", predecessor), zap.String("host", s.host()))
		if s.opts.OnExpired != nil {
			s.opts.OnExpired(holderName(s.id, predecessor))
		}
	}
	s.signal(s.beatCh)
	s.signal(s.kickBalance)
	return nil
}

// host is Options.Host as the heartbeat publishes it ("" for "-").
func (s *Store) host() string {
	if s.opts.Host == "-" {
		return ""
	}
	return s.opts.Host
}

// inPlace reports whether the live heartbeat cur of this ReplicaID was
// written on this Host: its process was replaced by this one.
func (s *Store) inPlace(cur ownerDoc) bool {
	return s.host() != "" && cur.Host == s.host()
}

// readOwn reads this replica's heartbeat document (nil if absent).
func (s *Store) readOwn(ctx context.Context) (*ownerDoc, azcore.ETag, error) {
	resp, err := s.c.ReadItem(ctx, s.meta.Load().pk, ownerID(s.id), nil)
	if statusOf(err) == http.StatusNotFound {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	d, err := decodeDoc(resp.Value)
	if err != nil || d.owner == nil {
		return nil, "", fmt.Errorf("leasestore: %s is not a heartbeat document", ownerID(s.id))
	}
	return d.owner, resp.ETag, nil
}

// ownIncarnation reports whether this process wrote incarnation inc.
func (s *Store) ownIncarnation(inc string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tried[inc]
}

// awaitIdentity watches a live heartbeat document of this ReplicaID that
// another process wrote (a crashed predecessor, or a duplicate) until it
// has been unchanged for LeaseExpiry, and returns the version to replace
// (nil once deleted). One change restarts the wait from the new version:
// a crashed predecessor's last write may land late, after the process is
// gone. A second change while it stays live is another process
// heartbeating (it writes every HeartbeatInterval, well within
// LeaseExpiry): ErrDuplicateReplica.
func (s *Store) awaitIdentity(ctx context.Context, cur ownerDoc, etag azcore.ETag) (*ownerDoc, azcore.ETag, error) {
	s.log.Warn("the heartbeat of this ReplicaID is live; waiting for it to expire before joining",
		zap.String("incarnation", cur.Incarnation), zap.Duration("expiry", s.opts.LeaseExpiry))
	since := time.Now()
	changed := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		left := s.opts.LeaseExpiry - time.Since(since)
		if left <= 0 {
			return &cur, etag, nil
		}
		t.Reset(min(s.opts.HeartbeatInterval/2, left))
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-t.C:
		}
		d, e, err := s.readOwn(ctx)
		switch {
		case err != nil:
			return nil, "", err
		case d == nil:
			return nil, "", nil
		case e == etag:
		case d.State != stateLive || s.ownIncarnation(d.Incarnation):
			return d, e, nil
		case !changed:
			changed = true
			cur, etag, since = *d, e, time.Now()
		default:
			return nil, "", fmt.Errorf("%w: heartbeat document %s is being written by incarnation %s", ErrDuplicateReplica, ownerID(s.id), d.Incarnation)
		}
	}
}

// beat rewrites the heartbeat document If-Match its last ETag. Success
// moves lastBeat to the time the request was sent.
func (s *Store) beat(ctx context.Context) error {
	m := s.meta.Load()
	s.mu.Lock()
	inc, seq, etag := s.incarnation, s.mySeq, s.myETag
	s.mu.Unlock()
	doc := ownerDoc{ID: ownerID(s.id), Type: typeOwner, Replica: s.id, Incarnation: inc, Seq: seq + 1, State: stateLive,
		WrittenAt: wallString(s.opts.WallClock()), Host: s.host()}
	s.wakeFields(&doc)
	body, err := encodeDoc(doc, m.pkProp, s.opts.PartitionKeyValue)
	if err != nil {
		return err
	}
	// A late answer still counts from the time the request was sent, so the
	// timeout only bounds a hung request; the watchdog fences regardless.
	cctx, cancel := context.WithTimeout(ctx, s.fenceAfter/2)
	defer cancel()
	sent := time.Now()
	resp, err := s.c.ReplaceItem(cctx, m.pk, doc.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
	if err == nil {
		s.mu.Lock()
		if s.registered && s.incarnation == inc {
			s.mySeq, s.myETag = doc.Seq, resp.ETag
			if sent.After(s.lastBeat) {
				s.lastBeat = sent
			}
		}
		s.mu.Unlock()
		s.signal(s.beatCh)
		return nil
	}
	switch statusOf(err) {
	case http.StatusPreconditionFailed, http.StatusNotFound:
		return s.checkSelf(ctx, inc)
	}
	return err
}

// checkSelf finds out why the heartbeat document changed under us.
func (s *Store) checkSelf(ctx context.Context, inc string) error {
	resp, err := s.c.ReadItem(ctx, s.meta.Load().pk, ownerID(s.id), nil)
	if statusOf(err) == http.StatusNotFound {
		s.declaredDead(inc, "deleted")
		return nil
	}
	if err != nil {
		return err
	}
	d, err := decodeDoc(resp.Value)
	if err != nil || d.owner == nil {
		return fmt.Errorf("leasestore: %s is not a heartbeat document", ownerID(s.id))
	}
	o := *d.owner
	switch {
	case o.Incarnation == inc && o.State == stateLive:
		// Our own write whose answer was lost: continue from it.
		s.mu.Lock()
		if s.incarnation == inc && o.Seq >= s.mySeq {
			s.mySeq, s.myETag = o.Seq, resp.ETag
		}
		s.mu.Unlock()
	case o.Incarnation == inc || o.Incarnation == "" || s.ownIncarnation(o.Incarnation):
		s.declaredDead(inc, o.ExpiredBy)
	default:
		s.mu.Lock()
		s.fenceLocked(ReasonStopped)
		s.registered = false
		s.mu.Unlock()
		s.setFatal(fmt.Errorf("%w: heartbeat document %s carries incarnation %s, ours is %s", ErrDuplicateReplica, ownerID(s.id), o.Incarnation, inc))
	}
	return nil
}

// holderName is the Holder of a registration: the replica id and its
// incarnation ('/' cannot occur in a replica id).
func holderName(replica, incarnation string) string { return replica + "/" + incarnation }

// Holder names this replica's current registration ("replica/incarnation";
// "" while not registered), for stamping on locks that should be freed
// once the registration is declared dead (Options.OnExpired reports the
// same name). A registration declared dead is never live again: the
// replica registers anew under another incarnation, so another Holder.
func (s *Store) Holder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.registered {
		return ""
	}
	return holderName(s.id, s.incarnation)
}

// declaredDead handles another replica's declaration that this one is
// dead: leases are given up at once and the replica registers anew.
func (s *Store) declaredDead(inc, by string) {
	s.mu.Lock()
	if s.incarnation == inc && s.registered {
		s.log.Warn("declared dead by another replica; giving up leases", zap.String("by", by))
		s.fenceLocked(ReasonExpired)
		s.registered = false
	}
	s.mu.Unlock()
	s.signal(s.kickBeat)
}

// heartbeatLoop writes the heartbeat every HeartbeatInterval (sooner after
// a failure) and re-registers after a death declaration.
func (s *Store) heartbeatLoop(ctx context.Context) {
	hb := s.opts.HeartbeatInterval
	t := time.NewTimer(hb)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kickBeat:
		}
		s.mu.Lock()
		reg := s.registered
		s.mu.Unlock()
		began := time.Now()
		var err error
		if reg {
			err = s.beat(ctx)
		} else {
			err = s.register(ctx)
		}
		next := hb
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, ErrDuplicateReplica) {
				s.setFatal(err)
				return
			}
			s.log.Warn("heartbeat failed", zap.Error(err))
			next = hb / 4
		}
		// A steady cadence: the period counts from the start of this write.
		t.Reset(max(next-time.Since(began), 0))
	}
}

// watchdog closes every held lease once no heartbeat has succeeded for
// fenceAfter = LeaseExpiry - HeartbeatInterval, measured from the sending
// of the last successful one. An observer starts its LeaseExpiry from the
// moment it sees that write, which is later, so this replica has let go
// before anyone may take over. It never waits on I/O.
func (s *Store) watchdog(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		left := s.fenceAfter - time.Since(s.lastBeat)
		if left <= 0 && len(s.held) > 0 {
			s.log.Warn("heartbeat not written for too long; giving up leases", zap.Duration("since", time.Since(s.lastBeat)))
			s.fenceLocked(ReasonFenced)
		}
		s.mu.Unlock()
		if left <= 0 {
			left = time.Hour // until the next successful heartbeat
		}
		t.Reset(left)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.beatCh:
		}
	}
}
