package leasestore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"
)

// Release stops this replica gracefully: it closes Done of every held lease
// first, marks its heartbeat "leaving", hands every lease still naming it
// to the least loaded live replicas (or frees it when none is live) with
// compare-and-swap writes, and deletes its heartbeat document. A peer whose
// change-feed read falls between the mark and the deletion stops counting
// it then; the feed shows no deletion, so the others stop at their next
// full re-read (every five heartbeat intervals) or at its expiry, whichever
// comes first. A running
// Run returns nil afterwards. Without a running Run, Release still hands
// off the leases naming this ReplicaID. Calling it again does nothing.
func (s *Store) Release(ctx context.Context) error {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return nil
	}
	running := s.running
	if !running {
		s.released = true
	}
	s.releaseAsked = true
	if s.cancelSetup != nil {
		s.cancelSetup() // Run returns; we release directly below
	}
	s.mu.Unlock()
	if running {
		req := &releaseReq{ctx: ctx, result: make(chan error, 1)}
		select {
		case s.releaseCh <- req:
			select {
			case err := <-req.result:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-s.runDone:
			// Run ended meanwhile: release directly.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.beginRelease()
	return s.releaseLeases(ctx)
}

// beginRelease stops all acquiring and closes every held lease.
func (s *Store) beginRelease() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releasing, s.released = true, true
	s.fenceLocked(ReasonReleased)
}

// markLeaving rewrites this incarnation's heartbeat document as leaving,
// If-Match etag, and returns the document's new ETag. A heartbeat the
// stopped loop sent but never heard back from (cancelled in flight) may
// have moved the document on: on 412 it reads the document and, while it
// is still this incarnation's, writes again from what it read.
func (s *Store) markLeaving(ctx context.Context, m *meta, inc string, seq int64, etag azcore.ETag) (azcore.ETag, error) {
	for attempt := 0; ; attempt++ {
		doc := ownerDoc{ID: ownerID(s.id), Type: typeOwner, Replica: s.id, Incarnation: inc, Seq: seq + 1, State: stateLeaving, WrittenAt: wallString(s.opts.WallClock())}
		body, err := encodeDoc(doc, m.pkProp, s.opts.PartitionKeyValue)
		if err != nil {
			return etag, err
		}
		resp, err := s.c.ReplaceItem(ctx, m.pk, doc.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		if err == nil {
			return resp.ETag, nil
		}
		if statusOf(err) != http.StatusPreconditionFailed || attempt > 0 {
			return etag, err
		}
		cur, rerr := s.c.ReadItem(ctx, m.pk, ownerID(s.id), nil)
		if rerr != nil {
			return etag, err
		}
		d, derr := decodeDoc(cur.Value)
		if derr != nil || d.owner == nil || d.owner.Incarnation != inc {
			return etag, err // another incarnation's now: not ours to touch
		}
		seq, etag = d.owner.Seq, cur.ETag
	}
}

// releaseLeases does the writes of Release once nothing else runs.
func (s *Store) releaseLeases(ctx context.Context) error {
	m, err := s.ensureMeta(ctx)
	if err != nil {
		return err
	}
	var errs []error
	s.mu.Lock()
	reg, inc, seq, etag := s.registered, s.incarnation, s.mySeq, s.myETag
	s.mu.Unlock()
	if reg {
		var err error
		if etag, err = s.markLeaving(ctx, m, inc, seq, etag); err != nil {
			s.log.Warn("release: could not mark heartbeat leaving", zap.Error(err))
		}
	}
	if _, err := s.resync(ctx); err != nil {
		errs = append(errs, fmt.Errorf("leasestore: release: read leases: %w", err))
	}

	now := time.Now()
	s.mu.Lock()
	count := map[string]int{}
	for r, mv := range s.members {
		if s.memberLiveLocked(mv, now) {
			count[r] = 0
		}
	}
	type mine struct {
		idx   int
		epoch int64
	}
	var ours []mine
	for i, v := range s.leases {
		if !v.known {
			continue
		}
		if v.doc.Owner == s.id {
			ours = append(ours, mine{i, v.doc.Epoch})
		} else if _, ok := count[v.doc.Owner]; ok {
			count[v.doc.Owner]++
		}
	}
	s.mu.Unlock()
	targets := make([]string, 0, len(count))
	for r := range count {
		targets = append(targets, r)
	}
	sort.Strings(targets)
	handed := 0
	for _, o := range ours {
		target := ""
		for _, r := range targets {
			if target == "" || count[r] < count[target] {
				target = r
			}
		}
		if err := s.transfer(ctx, o.idx, o.epoch, target); err != nil {
			errs = append(errs, fmt.Errorf("leasestore: release %s: %w", leaseID(o.idx), err))
			continue
		}
		if target != "" {
			count[target]++
		}
		handed++
	}
	if handed > 0 && s.opts.OnWrote != nil {
		s.opts.OnWrote()
	}
	if reg {
		_, err := s.c.DeleteItem(ctx, m.pk, ownerID(s.id), &azcosmos.ItemOptions{IfMatchEtag: &etag})
		if err != nil && statusOf(err) != http.StatusNotFound && statusOf(err) != http.StatusPreconditionFailed {
			errs = append(errs, fmt.Errorf("leasestore: release: delete heartbeat: %w", err))
		}
	}
	s.mu.Lock()
	s.registered = false
	s.mu.Unlock()
	s.log.Info("released", zap.Int("leases", handed), zap.Int("to", len(targets)))
	return errors.Join(errs...)
}
