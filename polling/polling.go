// Package polling is the seeds' dispatcher, kept as the benchmark's
// baseline and for deployments that cannot read the change feed: every
// fetch runs a cross-partition candidate query over a share of the
// dispatch slots and returns at once (it never waits for work), and a
// reconciler runs the outbox's repair pass every ReconcileInterval. Any
// replica serves any slot; nothing is owned.
//
// # Dispatch slots and shares
//
// Every queue document stores dispatchSlot = epk.SlotOf(EPK V2 of the
// instance id, 256): stable across processes and releases, and a block of
// consecutive slots is one EPK range of Cosmos DB's own placement.
// Options.OrchestrationDispatchers / WorkerDispatchers split the slots
// into contiguous shares (slots.Split); each fetch checks out the free
// share polled least recently and returns it. With more concurrent
// fetchers than shares an extra fetcher polls the least recently polled
// share instead of waiting. The event-driven engine serves the slot blocks
// it leases instead.
package polling

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// Options configures a Dispatcher. Zero values take the defaults.
type Options struct {
	// OrchestrationDispatchers and WorkerDispatchers are the concurrent
	// fetches this replica runs per queue (a runtime's
	// OrchestrationConcurrency and WorkerConcurrency; default 1). The
	// dispatch slots are split into that many contiguous shares and each
	// fetch scans its own share first, so concurrent fetches rarely race
	// for the same candidates; a fetch whose share has nothing it can
	// lock scans every slot before it returns nil, so an empty share
	// never idles a fetch while other slots have work.
	OrchestrationDispatchers int
	WorkerDispatchers        int
	// PollInterval is how often one fetch loop should query while it
	// finds no work: the seeds' short polling at one query a second
	// (default 1 s, DefaultPollInterval). Fetches never wait (the
	// seeds' short-polling contract); the provider states the interval
	// (Dispatcher.PollInterval, durable.PollPacer) and a runtime's
	// dispatcher loop pauses for it after an empty fetch.
	PollInterval time.Duration
	// ReconcileInterval is the period of the repair pass over undelivered
	// outbox intents, unpublished large turns and interrupted deletions
	// (default 2 s). How old such a record must be before the pass takes
	// it over is the store's RepairAge.
	ReconcileInterval time.Duration
	// Logger receives operational logs (default none).
	Logger *zap.Logger
}

// DefaultPollInterval is the default Options.PollInterval: the seeds'
// short polling at one query a second per fetch loop.
const DefaultPollInterval = time.Second

// DefaultReconcileInterval is the default Options.ReconcileInterval.
const DefaultReconcileInterval = 2 * time.Second

// maxLockAttempts bounds how many candidate instances one fetch tries.
const maxLockAttempts = 8

// Dispatcher is the polling dispatcher over a store.
type Dispatcher struct {
	s    *store.Store
	out  *outbox.Outbox
	log  *zap.Logger
	orch *localShares
	work *localShares

	every  time.Duration
	poll   time.Duration
	ctx    context.Context // cancelled by Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once

	// mu guards reconciling and done: the reconciler starts at the first
	// fetch, never after Close.
	mu          sync.Mutex
	reconciling bool
	done        bool
}

// New returns a Dispatcher over s, delivering intents through an outbox
// of its own. Its reconciler starts at the first fetch, so a provider used
// only as a client (which never fetches) never scans the container; Close
// stops it.
func New(s *store.Store, o Options) *Dispatcher {
	if o.ReconcileInterval <= 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	d := &Dispatcher{s: s, out: outbox.New(s, o.Logger), log: o.Logger,
		orch: newLocalShares(o.OrchestrationDispatchers), work: newLocalShares(o.WorkerDispatchers)}
	d.every, d.poll = o.ReconcileInterval, o.PollInterval
	d.ctx, d.stop = context.WithCancel(context.Background())
	return d
}

// startReconciler starts the reconciler once, at the first fetch, unless
// the Dispatcher is closed.
func (d *Dispatcher) startReconciler() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reconciling || d.done {
		return
	}
	d.reconciling = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.reconcileLoop(d.ctx, d.every)
	}()
}

// Reconciling reports whether the reconciler runs: from the first fetch
// until Close.
func (d *Dispatcher) Reconciling() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reconciling && !d.done
}

// PollInterval is Options.PollInterval: how often one fetch loop should
// query while it finds no work.
func (d *Dispatcher) PollInterval() time.Duration { return d.poll }

// FetchOrchestrationItem implements durable.Provider's fetch: it scans
// the slots of one share for visible, unlocked messages and tries the
// instances of the oldest ones; when none can be locked it scans every
// slot the same way (with more than one share), and returns nil at once
// when that finds none either (pollTimeout is not waited; ctx is
// honoured).
func (d *Dispatcher) FetchOrchestrationItem(ctx context.Context, lockTimeout, _ time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	d.startReconciler()
	sh, release, err := d.orch.acquire(ctx)
	if err != nil {
		return nil, durable.Retryable(op, err, "cancelled")
	}
	defer release()
	item, err := d.lockOrchIn(ctx, sh, lockTimeout, filter)
	if item != nil || err != nil || sh.All() {
		return item, err
	}
	return d.lockOrchIn(ctx, slots.All(), lockTimeout, filter)
}

// lockOrchIn runs the orchestrator candidate query over the block and
// locks the first instance it can, trying at most maxLockAttempts.
func (d *Dispatcher) lockOrchIn(ctx context.Context, sh slots.Block, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	cands, err := d.s.OrchCandidates(ctx, sh)
	if err != nil {
		return nil, err
	}
	for i, inst := range cands {
		if i >= maxLockAttempts {
			break
		}
		r, err := d.s.LockInstance(ctx, store.LockRequest{Instance: inst, LockTimeout: lockTimeout, Filter: filter, Read: store.SeedsOrder{}})
		if r.Published != nil {
			d.out.DeliverAll(ctx, r.Published.Intents)
		}
		if err != nil {
			if durable.IsRetryable(err) && ctx.Err() == nil {
				continue // a lost race on this instance: try the next one
			}
			return nil, err
		}
		if r.Item != nil {
			return r.Item, nil
		}
	}
	return nil, nil
}

// FetchWorkItem implements durable.Provider's fetch (as
// FetchOrchestrationItem: its share, then every slot; no waiting).
func (d *Dispatcher) FetchWorkItem(ctx context.Context, lockTimeout, _ time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	d.startReconciler()
	if tags.Mode() == durable.TagsNone {
		return nil, nil
	}
	sh, release, err := d.work.acquire(ctx)
	if err != nil {
		return nil, durable.Retryable(op, err, "cancelled")
	}
	defer release()
	req := store.WorkLockRequest{LockTimeout: lockTimeout, Session: session, Tags: tags}
	r, err := d.s.LockWorkIn(ctx, sh, req)
	if r.Item != nil || err != nil || sh.All() {
		return r.Item, err
	}
	r, err = d.s.LockWorkIn(ctx, slots.All(), req)
	return r.Item, err
}

// Wrote implements the dispatcher contract: polling signals nothing (the
// next fetch's query finds what was written).
func (d *Dispatcher) Wrote(store.Write) {}

// Committed implements the dispatcher contract: the committing process
// delivers the intents at once (best-effort; the reconciler delivers
// what is left).
func (d *Dispatcher) Committed(ctx context.Context, c store.Commit) {
	d.out.DeliverAll(ctx, c.Intents)
}

// Close stops the reconciler and waits for it. Polling holds nothing
// another replica must take over, so graceful or not is the same.
func (d *Dispatcher) Close(bool) {
	d.closed.Do(func() {
		d.mu.Lock()
		d.done = true
		d.mu.Unlock()
		d.stop()
		d.wg.Wait()
	})
}

// reconcileLoop runs the repair pass every interval (jittered by up to a
// tenth, so replicas drift apart) until ctx ends.
func (d *Dispatcher) reconcileLoop(ctx context.Context, every time.Duration) {
	for {
		t := time.NewTimer(every - time.Duration(rand.Int64N(int64(every)/10+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		d.reconcileOnce(ctx)
	}
}

// reconcileOnce is one repair pass: one cross-partition query for stale
// intents, publications and deletions, then the outbox's repairs.
func (d *Dispatcher) reconcileOnce(ctx context.Context) {
	_, found, err := d.s.Stale(ctx, store.StaleQuery{})
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("repair query failed", zap.Int("status", store.Status(err)), zap.Error(err))
		}
		return
	}
	d.out.Repair(ctx, found, d.s)
}
