package leasestore

import (
	"context"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
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

// refreshLease re-reads lease i after a lost compare-and-swap.
func (s *Store) refreshLease(ctx context.Context, i int) error {
	resp, err := s.c.ReadItem(ctx, s.meta.Load().pk, leaseID(i), nil)
	if err != nil {
		return err
	}
	d, err := decodeDoc(resp.Value)
	if err != nil {
		return err
	}
	if d.lease == nil {
		return fmt.Errorf("leasestore: %s is not a lease document", leaseID(i))
	}
	s.mu.Lock()
	if s.applyLeaseLocked(*d.lease, d.etag) {
		s.signal(s.kickBalance)
	}
	s.mu.Unlock()
	return nil
}
