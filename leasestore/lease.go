package leasestore

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"go.uber.org/zap"
)

// lease is a held lease: the document lease:<idx> names this replica with
// epoch. It implements changefeed.Lease.
type lease struct {
	s     *Store
	idx   int
	rng   epk.Range
	epoch int64
	done  chan struct{}
	// guarded by s.mu
	cont   string
	closed bool
}

var _ changefeed.Lease = (*lease)(nil)

// ID returns the lease document id, "lease:<index>".
func (l *lease) ID() string { return leaseID(l.idx) }

// Range returns the EPK range the lease covers.
func (l *lease) Range() epk.Range { return l.rng }

// Epoch returns the ownership epoch the lease is held under.
func (l *lease) Epoch() int64 { return l.epoch }

// Continuation returns the last checkpointed continuation.
func (l *lease) Continuation() string {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.cont
}

// Done is closed when the lease is lost or released.
func (l *lease) Done() <-chan struct{} { return l.done }

// maxCheckpointAttempts bounds the re-read-and-retry loop of Checkpoint
// when unrelated writes (steal requests) keep changing the document.
const maxCheckpointAttempts = 8

// Checkpoint records continuation in the lease document with a
// compare-and-swap that requires the document to still name this replica
// with the epoch the lease was acquired under. Once Done is closed, or when
// the document shows another owner or epoch, it fails with an error
// wrapping changefeed.ErrLeaseLost (and closes Done). Other errors are
// transient.
func (l *lease) Checkpoint(ctx context.Context, continuation string) error {
	s := l.s
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		if l.closed {
			s.mu.Unlock()
			return l.lostErr()
		}
		v := s.leases[l.idx]
		if !v.known || v.doc.Owner != s.id || v.doc.Epoch != l.epoch {
			s.loseLocked(l, ReasonTaken)
			s.mu.Unlock()
			return l.lostErr()
		}
		s.mu.Unlock()
		if attempt >= maxCheckpointAttempts {
			return fmt.Errorf("leasestore: checkpoint %s: document kept changing", l.ID())
		}
		doc := v.doc
		doc.Continuation = continuation
		doc.CheckpointAt = wallString(s.opts.WallClock())
		doc.Rev++
		etag, err := s.replaceLease(ctx, doc, v.etag)
		if err == nil {
			s.mu.Lock()
			s.applyLeaseLocked(doc, etag)
			if !l.closed {
				l.cont = continuation
			}
			s.mu.Unlock()
			return nil
		}
		switch statusOf(err) {
		case http.StatusPreconditionFailed:
			if err := s.refreshLease(ctx, l.idx); err != nil {
				return fmt.Errorf("leasestore: checkpoint %s: %w", l.ID(), err)
			}
		case http.StatusNotFound:
			s.mu.Lock()
			s.loseLocked(l, ReasonTaken)
			s.mu.Unlock()
			return l.lostErr()
		default:
			return fmt.Errorf("leasestore: checkpoint %s: %w", l.ID(), err)
		}
	}
}

func (l *lease) lostErr() error {
	return fmt.Errorf("leasestore: %s (epoch %d): %w", l.ID(), l.epoch, changefeed.ErrLeaseLost)
}

// replaceLease writes doc If-Match etag and returns the new ETag.
func (s *Store) replaceLease(ctx context.Context, doc leaseDoc, etag azcore.ETag) (azcore.ETag, error) {
	m := s.meta.Load()
	body, err := encodeDoc(doc, m.pkProp, s.opts.PartitionKeyValue)
	if err != nil {
		return "", err
	}
	resp, err := s.c.ReplaceItem(ctx, m.pk, doc.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
	if err != nil {
		return "", err
	}
	return resp.ETag, nil
}

// refreshLease re-reads lease i after a lost compare-and-swap (or a write
// that found the document missing). A lease document that is missing or
// does not decode as a lease (edited or deleted by hand; see decodeDoc) is
// repaired (repairLease), so that writes to it do not fail forever.
func (s *Store) refreshLease(ctx context.Context, i int) error {
	return s.readLease(ctx, i, true)
}

// readLease reads lease i and applies it; with repair, a corrupt or
// missing document is repaired, otherwise it is an error.
func (s *Store) readLease(ctx context.Context, i int, repair bool) error {
	resp, err := s.c.ReadItem(ctx, s.meta.Load().pk, leaseID(i), nil)
	switch {
	case statusOf(err) == http.StatusNotFound && repair:
		return s.repairLease(ctx, i, nil, "")
	case err != nil:
		return err
	}
	d, err := decodeDoc(resp.Value)
	if err == nil && d.lease == nil {
		err = fmt.Errorf("leasestore: %s is not a lease document", leaseID(i))
	}
	if err != nil {
		if repair {
			return s.repairLease(ctx, i, resp.Value, resp.ETag)
		}
		return err
	}
	s.mu.Lock()
	if s.applyLeaseLocked(*d.lease, d.etag) {
		s.signal(s.kickBalance)
	}
	s.mu.Unlock()
	return nil
}

// repairLease rewrites lease i, found corrupt (raw, replaced If-Match
// etag) or missing (raw nil: re-created), as a free lease over
// Options.Ranges[i]. A rewritten lease keeps the last known continuation
// (changes since may be read again: delivery is at least once). A
// re-created one starts afresh, as a lease never read (from
// Options.StartFrom of its reader): a missing lease document may mean the
// whole container was deleted and created again, whose change feed a
// continuation from before does not address (its positions would skip the
// new container's first changes). The epoch follows the
// highest known (this replica's view, or what of raw still decodes), and
// the revision jumps to at least the wall clock in milliseconds: revisions
// otherwise grow by one per write, so every replica, whatever version it
// saw last, takes the repaired one as newer. A holder of the lease loses
// it on seeing the free document, and the next balancing round acquires
// it. A repair that loses its compare-and-swap (another replica wrote or
// repaired first) re-reads instead.
func (s *Store) repairLease(ctx context.Context, i int, raw []byte, etag azcore.ETag) error {
	m := s.meta.Load()
	s.mu.Lock()
	v := s.leases[i]
	s.mu.Unlock()
	var old struct {
		Epoch        any `json:"epoch"`
		Rev          any `json:"rev"`
		Continuation any `json:"continuation"`
	}
	_ = json.Unmarshal(raw, &old)
	epoch, rev, cont := v.doc.Epoch, v.doc.Rev, v.doc.Continuation
	if raw == nil {
		cont = ""
	}
	if f, ok := old.Epoch.(float64); ok {
		epoch = max(epoch, int64(f))
	}
	if f, ok := old.Rev.(float64); ok {
		rev = max(rev, int64(f))
	}
	if c, ok := old.Continuation.(string); ok && !v.known && raw != nil {
		cont = c
	}
	now := s.opts.WallClock()
	r := s.opts.Ranges[i]
	doc := leaseDoc{ID: leaseID(i), Type: typeLease, Index: i, Range: rangeDoc{Min: r.Min, Max: r.Max},
		Epoch: epoch + 1, Rev: max(rev, now.UnixMilli()) + 1, Continuation: cont, AcquiredAt: wallString(now)}
	body, err := encodeDoc(doc, m.pkProp, s.opts.PartitionKeyValue)
	if err != nil {
		return err
	}
	var resp azcosmos.ItemResponse
	if raw == nil {
		resp, err = s.c.CreateItem(ctx, m.pk, body, nil)
	} else {
		resp, err = s.c.ReplaceItem(ctx, m.pk, doc.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
	}
	switch st := statusOf(err); {
	case st == http.StatusConflict || st == http.StatusPreconditionFailed || st == http.StatusNotFound:
		return s.readLease(ctx, i, false) // another replica was first
	case err != nil:
		return fmt.Errorf("leasestore: repair %s: %w", doc.ID, err)
	}
	s.log.Warn("repaired a lease document that was corrupt or missing; it is free again",
		zap.Int("lease", i), zap.Bool("recreated", raw == nil), zap.Int64("epoch", doc.Epoch))
	s.mu.Lock()
	if s.applyLeaseLocked(doc, resp.ETag) {
		s.signal(s.kickBalance)
	}
	s.mu.Unlock()
	return nil
}
