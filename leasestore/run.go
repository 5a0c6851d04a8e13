package leasestore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/cenkalti/backoff/v4"
	"github.com/durafeed/durafeed/internal/epk"
	"go.uber.org/zap"
)

// feedPageSize is the page size asked of the lease partition's change feed.
const feedPageSize = 100

// releaseReq asks a running Run to release.
type releaseReq struct {
	ctx    context.Context
	result chan error
}

// Run creates missing lease documents (verifying existing ones against
// Options.Ranges), registers this replica's heartbeat, and then heartbeats,
// watches the lease partition, acquires, balances and hands over leases
// until ctx is cancelled, Release is called, or a fatal error occurs. It
// owns every goroutine of the Store and waits for them before returning.
//
// When Run returns, Done of every lease it held is closed and Acquired is
// closed; the lease documents keep naming this replica, so others take the
// leases once its heartbeat has been unchanged for LeaseExpiry (use Release
// for an immediate hand-off). Run returns nil after Release, ctx.Err()
// after cancellation, and otherwise the error that stopped it (transient
// Cosmos DB errors are retried, not returned). Run may be called once.
func (s *Store) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return errors.New("leasestore: Run called more than once")
	}
	s.ran = true
	if s.released {
		s.mu.Unlock()
		close(s.acquired)
		close(s.runDone)
		return ErrReleased
	}
	s.running = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
		close(s.acquired)
		close(s.runDone)
	}()
	// Release during setup cancels it and releases directly.
	setupCtx, cancelSetup := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancelSetup = cancelSetup
	s.mu.Unlock()
	err := s.setup(setupCtx)
	s.mu.Lock()
	s.cancelSetup = nil
	releasing := s.releaseAsked
	s.mu.Unlock()
	cancelSetup()
	if err == nil && releasing {
		err = errors.New("leasestore: released during setup")
	}
	if err != nil {
		if releasing {
			return nil // Release, which cancelled setup, takes over
		}
		s.mu.Lock()
		s.registered = false
		s.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}

	loopCtx, cancelLoops := context.WithCancel(ctx)
	defer cancelLoops()
	var loops sync.WaitGroup
	for _, f := range []func(context.Context){s.heartbeatLoop, s.watchdog, s.watchLoop, s.balanceLoop} {
		loops.Add(1)
		go func() {
			defer loops.Done()
			f(loopCtx)
		}()
	}
	deliverCtx, cancelDeliver := context.WithCancel(context.Background())
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		s.deliverLoop(deliverCtx)
	}()

	var result error
	select {
	case <-ctx.Done():
		result = ctx.Err()
	case <-s.fatalCh:
		s.mu.Lock()
		result = s.fatal
		s.mu.Unlock()
	case req := <-s.releaseCh:
		s.beginRelease()
		cancelLoops()
		loops.Wait()
		req.result <- s.releaseLeases(req.ctx)
	}
	cancelLoops()
	loops.Wait()
	s.mu.Lock()
	s.fenceLocked(ReasonStopped)
	s.registered = false
	s.mu.Unlock()
	cancelDeliver()
	<-delivered
	return result
}

// retry runs op until it succeeds, fails permanently or ctx ends.
func (s *Store) retry(ctx context.Context, what string, op func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = max(s.opts.HeartbeatInterval, time.Second)
	b.MaxElapsedTime = 0
	return backoff.RetryNotify(func() error {
		err := op()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || permanentStatus(statusOf(err)) || errors.Is(err, ErrRangesMismatch) || errors.Is(err, ErrDuplicateReplica) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx), func(err error, d time.Duration) {
		s.log.Warn("retrying", zap.String("what", what), zap.Duration("after", d), zap.Error(err))
	})
}

// ensureMeta loads the container metadata once.
func (s *Store) ensureMeta(ctx context.Context) (*meta, error) {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if m := s.meta.Load(); m != nil {
		return m, nil
	}
	var m meta
	err := s.retry(ctx, "read container", func() (err error) {
		m, err = s.loadMeta(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.meta.Store(&m)
	return &m, nil
}

// setup: container metadata, initial read of the lease partition (its
// change feed from the beginning, which also positions the watch), lease
// documents, heartbeat registration, and a read of the feed's news.
func (s *Store) setup(ctx context.Context) error {
	if _, err := s.ensureMeta(ctx); err != nil {
		return err
	}
	if err := s.retry(ctx, "initial read", func() error {
		_, err := s.pollFeed(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("leasestore: initial read of the lease partition: %w", err)
	}
	if err := s.retry(ctx, "create leases", func() error { return s.ensureLeases(ctx) }); err != nil {
		return err
	}
	if err := s.retry(ctx, "register", func() error { return s.register(ctx) }); err != nil {
		return err
	}
	// Lease documents that another replica created first were re-read one
	// by one, later than the heartbeats of the initial read: read the feed
	// on, so that the first balancing round does not plan from leases
	// naming owners it has not seen yet.
	return s.retry(ctx, "catch-up read", func() error {
		_, err := s.pollFeed(ctx)
		return err
	})
}

// ensureLeases creates missing lease documents (409: another replica did)
// and checks every stored range against Options.Ranges.
func (s *Store) ensureLeases(ctx context.Context) error {
	m := s.meta.Load()
	for i, r := range s.opts.Ranges {
		s.mu.Lock()
		known := s.leases[i].known
		s.mu.Unlock()
		if known {
			continue
		}
		doc := leaseDoc{ID: leaseID(i), Type: typeLease, Index: i, Range: rangeDoc{Min: r.Min, Max: r.Max}, Rev: 1}
		body, err := encodeDoc(doc, m.pkProp, s.opts.PartitionKeyValue)
		if err != nil {
			return err
		}
		resp, err := s.c.CreateItem(ctx, m.pk, body, nil)
		switch {
		case err == nil:
			s.mu.Lock()
			s.applyLeaseLocked(doc, resp.ETag)
			s.mu.Unlock()
		case statusOf(err) == http.StatusConflict:
			if err := s.refreshLease(ctx, i); err != nil {
				return err
			}
		default:
			return fmt.Errorf("leasestore: create %s: %w", doc.ID, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for i, v := range s.leases {
		want := s.opts.Ranges[i]
		if epk.Compare(v.doc.Range.Min, want.Min) != 0 || epk.Compare(v.doc.Range.Max, want.Max) != 0 {
			bad = append(bad, fmt.Sprintf("%s covers [%q, %q), Options.Ranges[%d] is [%q, %q)", leaseID(i), v.doc.Range.Min, v.doc.Range.Max, i, want.Min, want.Max))
		}
	}
	for _, id := range s.extra {
		bad = append(bad, fmt.Sprintf("%s exists beyond the %d configured ranges", id, len(s.opts.Ranges)))
	}
	if len(bad) > 0 {
		if len(bad) > 4 {
			bad = append(bad[:4], fmt.Sprintf("and %d more", len(bad)-4))
		}
		return fmt.Errorf("%w in partition %q: %v", ErrRangesMismatch, s.opts.PartitionKeyValue, bad)
	}
	return nil
}

// pollFeed reads the lease partition's change feed from the saved
// continuation until nothing is new (a 304), applying every document. The
// first read starts from the beginning, so it sees every document. It
// reports whether lease ownership or membership changed.
func (s *Store) pollFeed(ctx context.Context) (significant bool, err error) {
	m := s.meta.Load()
	for {
		opts := &azcosmos.ChangeFeedOptions{PartitionKey: &m.pk, MaxItemCount: feedPageSize}
		if s.feedCont != "" {
			cont := s.feedCont
			opts.Continuation = &cont
		} else {
			fr := m.feedRange
			opts.FeedRange = &fr
		}
		resp, err := s.c.ReadChangeFeed(ctx, opts)
		if err != nil {
			return significant, err
		}
		if resp.ContinuationToken != "" {
			s.feedCont = resp.ContinuationToken
		}
		if len(resp.Items) == 0 {
			return significant, nil
		}
		if s.applyRaw(resp.Items, false) {
			significant = true
		}
		if len(resp.Items) < feedPageSize {
			return significant, nil
		}
	}
}

// applyRaw applies documents read from the lease partition. With full set
// (a complete re-read) replicas whose heartbeat document is absent are
// forgotten.
func (s *Store) applyRaw(items [][]byte, full bool) (significant bool) {
	docs := make([]decoded, 0, len(items))
	for _, raw := range items {
		d, err := decodeDoc(raw)
		if err != nil {
			s.log.Warn("undecodable document in the lease partition", zap.Error(err))
			continue
		}
		if d.lease == nil && d.owner == nil {
			if s.opts.OnDocument != nil {
				s.opts.OnDocument(raw)
			}
			continue
		}
		docs = append(docs, d)
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, d := range docs {
		switch {
		case d.lease != nil:
			if s.applyLeaseLocked(*d.lease, d.etag) {
				significant = true
			}
		case d.owner != nil:
			seen[d.owner.Replica] = true
			if s.applyOwnerLocked(*d.owner, d.etag, now) {
				significant = true
			}
		}
	}
	if full {
		for r := range s.members {
			if !seen[r] {
				delete(s.members, r)
				significant = true
			}
		}
	}
	return significant
}

// resync re-reads every document of the lease partition (one
// single-partition query): the safety net under the change feed, and the
// only way to notice deleted heartbeat documents.
func (s *Store) resync(ctx context.Context) (bool, error) {
	m := s.meta.Load()
	pager := s.c.NewQueryItemsPager("SELECT * FROM c", m.pk, nil)
	var items [][]byte
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return false, err
		}
		items = append(items, page.Items...)
	}
	return s.applyRaw(items, true), nil
}

// watchLoop polls the lease partition's change feed: every
// WatchActiveDelay while ownership or membership changes flow, doubling up
// to WatchIdleCeiling otherwise (routine heartbeats and checkpoints do not
// count as changes), plus a full re-read every resyncPeriods heartbeats.
func (s *Store) watchLoop(ctx context.Context) {
	base := max(s.opts.WatchActiveDelay, time.Millisecond)
	delay := s.opts.WatchActiveDelay
	lastResync := time.Now()
	var lastRead time.Time
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kickWatch:
			delay = s.opts.WatchActiveDelay
			if wait := s.opts.WatchActiveDelay - time.Since(lastRead); wait > 0 {
				// Kicks (peers' included) read at most once per
				// WatchActiveDelay.
				t.Reset(wait)
				continue
			}
		}
		lastRead = time.Now()
		sig, err := s.pollFeed(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("lease watch: change feed read failed", zap.Error(err))
			delay = s.opts.WatchIdleCeiling
		case sig:
			delay = s.opts.WatchActiveDelay
			s.signal(s.kickBalance)
		default:
			delay = min(max(2*delay, base), s.opts.WatchIdleCeiling)
		}
		if time.Since(lastResync) >= s.resyncEvery {
			if _, err := s.resync(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("lease watch: full re-read failed", zap.Error(err))
			} else {
				lastResync = time.Now()
				s.signal(s.kickBalance)
			}
		}
		t.Reset(delay)
	}
}
