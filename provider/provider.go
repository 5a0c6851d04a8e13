package provider

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/store"
)

// Name and Version identify the implementation.
const (
	Name    = "cosmosdb"
	Version = "0.1.0"
)

// dispatcher is what the Provider composes over the store: how fetches
// find work, and what follows a write. Both modes implement it.
//
// Ordering rules the implementations keep (the churn tests found them):
//   - Wrote and Committed run after the store's write returned and before
//     the Provider's call returns, so a signal never precedes the write it
//     announces and a caller's next call sees its own write signalled.
//   - A fetch forgets the feed heads of the messages it locked only after
//     the lock batch, and signals its own lock (its expiry) before the
//     item returns.
//   - Committed signals the commit's Write before it delivers (or has the
//     feed deliver) the commit's intents.
type dispatcher interface {
	FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error)
	FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error)
	// Wrote follows a write that committed nothing (an enqueue, an
	// abandon): signals only, no I/O.
	Wrote(store.Write)
	// Committed follows a commit: signals, then intent delivery.
	Committed(ctx context.Context, c store.Commit)
	// Close stops the dispatcher; graceful hands off what it owns.
	Close(graceful bool)
}

// Optional surfaces a dispatcher adds where its mode has them. The
// Provider finds them by interface, never by the dispatcher's type.
type (
	// pacer is a mode whose fetches do not wait for work (polling): it
	// says how often a fetch loop should query.
	pacer interface{ PollInterval() time.Duration }
	// joiner is a mode with a dispatch membership (event-driven): Join
	// takes part ahead of the first fetch.
	joiner interface {
		Join(ctx context.Context) error
	}
	// peerWatcher is a mode that hears of changes other replicas commit
	// (event-driven with the peer wake channel) for the provider's
	// watches.
	peerWatcher interface {
		OnInstanceChanged(func(instance string))
		WatchRemote(instance string)
		UnwatchRemote(instance string)
	}
	// writeLocker is a mode whose fetches run the turns this process's
	// own enqueues locked (event-driven: the writer runs what it wrote,
	// store.EnqueueLocked).
	writeLocker interface {
		LockOnWrite(instance string) (store.LockRequest, bool)
		HandOver(r store.LockResult) bool
		DropHanded() []string
	}
	// inspector reports who owns which slots, the members, and the
	// dispatcher's counters (event-driven).
	inspector interface {
		Ownership() []engine.BlockOwner
		Stats() engine.Stats
		ReplicaID() string
		Members() []string
		LeasePartition() string
		HeadCount(instance string) int
		PendingCounts() (orchDue, workDue, later int)
	}
)

// Provider is the Cosmos DB implementation of durable.Provider and
// durable.ProviderAdmin: a mode-free store (package store) and the
// dispatcher of its Mode (package polling or engine), each delivering
// outbox intents through package outbox. Create it with New and release it with
// Close.
type Provider struct {
	// ProviderAdmin is the management surface (durable.ProviderAdmin),
	// served by the store; its methods are the Provider's.
	durable.ProviderAdmin

	cfg Config
	s   *store.Store
	d   dispatcher

	watches watches // instance watches (WatchInstance)
	cluster clusterCache
}

var (
	_ durable.Provider        = (*Provider)(nil)
	_ durable.ProviderAdmin   = (*Provider)(nil)
	_ durable.PollPacer       = (*Provider)(nil)
	_ durable.InstanceWatcher = (*Provider)(nil)
	_ durable.RequestChecker  = (*Provider)(nil)
	_ durable.RunningEnqueuer = (*Provider)(nil)
)

// New connects to the account, checks (or creates) the container and
// starts the dispatcher of cfg.Mode.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	so := cfg.Store
	if so.Logger == nil {
		so.Logger = cfg.Logger
	}
	if so.MeterProvider == nil {
		so.MeterProvider = cfg.MeterProvider
	}
	if cfg.Mode == ModePolling && so.InstanceCacheSize == 0 {
		so.InstanceCacheSize = -1 // the seeds' order: every lock and ack reads the instance
	}
	s, err := store.New(ctx, so)
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	p := &Provider{ProviderAdmin: s, cfg: cfg, s: s}
	switch cfg.Mode {
	case ModePolling:
		o := polling.Options{}
		if cfg.Polling != nil {
			o = *cfg.Polling
		}
		if o.Logger == nil {
			o.Logger = cfg.Logger
		}
		p.d = polling.New(s, o)
	case ModeEventDriven:
		o := engine.Options{}
		if cfg.EventDriven != nil {
			o = *cfg.EventDriven
		}
		if o.Logger == nil {
			o.Logger = cfg.Logger
		}
		if o.MeterProvider == nil {
			o.MeterProvider = cfg.MeterProvider
		}
		ev, err := engine.New(ctx, engine.OnCosmos(s), o)
		if err != nil {
			return nil, fmt.Errorf("provider: %w", err)
		}
		p.d = ev
	default:
		return nil, fmt.Errorf("provider: unknown Config.Mode %d", int(cfg.Mode))
	}
	if w, ok := p.d.(peerWatcher); ok {
		w.OnInstanceChanged(p.watches.notify)
		p.watches.remote, p.watches.unremote = w.WatchRemote, w.UnwatchRemote
	}
	return p, nil
}

// Close stops the dispatcher and waits for its goroutines. In event-driven
// mode it first hands this replica's leases to the others (graceful
// hand-off). Undelivered intents stay in the container for the next
// provider. It is idempotent.
func (p *Provider) Close() error {
	p.d.Close(true)
	if wl, ok := p.d.(writeLocker); ok {
		for _, token := range wl.DropHanded() {
			p.releaseHanded(token)
		}
	}
	return nil
}

// releaseHanded gives up a turn an enqueue locked that no fetch will
// take (the engine closed), so that it need not wait for its lock to
// expire.
func (p *Provider) releaseHanded(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), handedReleaseTimeout)
	defer cancel()
	if _, err := p.s.AbandonOrchestrationItem(ctx, token, 0, true); err != nil {
		p.cfg.Logger.Info("a turn locked by an enqueue was not released; its lock expires", zap.Error(err))
	}
}

// handedReleaseTimeout bounds releaseHanded.
const handedReleaseTimeout = 10 * time.Second

// Crash stops the provider as a killed process would: the event-driven
// engine releases no lease and removes no hint, so the other replicas take
// its slots only once its heartbeat expires. For failover drills and
// tests; Close is the normal stop.
func (p *Provider) Crash() { p.d.Close(false) }

// Mode returns the provider's dispatch mode.
func (p *Provider) Mode() Mode { return p.cfg.Mode }

// Join makes this replica take part in dispatch now, ahead of its first
// fetch, and returns once it holds its share of the slots and has caught
// up on their backlog, or with ctx's error. A service calls it before it
// reports ready. Polling mode has no membership: nil at once.
func (p *Provider) Join(ctx context.Context) error {
	if j, ok := p.d.(joiner); ok {
		return j.Join(ctx)
	}
	return nil
}

// Ownership returns every lease block of dispatch slots, who holds it and
// since when, as this replica last saw the leases; nil in polling mode or
// while the replica has not joined.
func (p *Provider) Ownership() []engine.BlockOwner {
	if i, ok := p.d.(inspector); ok {
		return i.Ownership()
	}
	return nil
}

// EngineStats returns the event-driven engine's counters since New; ok
// is false in polling mode.
func (p *Provider) EngineStats() (stats engine.Stats, ok bool) {
	if i, ok := p.d.(inspector); ok {
		return i.Stats(), true
	}
	return engine.Stats{}, false
}

// Name implements durable.Provider.
func (p *Provider) Name() string { return Name }

// Version implements durable.Provider.
func (p *Provider) Version() string { return Version }

// PollInterval implements durable.PollPacer: polling mode's
// polling.Options.PollInterval (the seeds' 1 s by default); 0 in
// event-driven mode, whose fetches wait for work themselves.
func (p *Provider) PollInterval() time.Duration {
	if pc, ok := p.d.(pacer); ok {
		return pc.PollInterval()
	}
	return 0
}

// Admin implements durable.Provider: the store is the management surface.
func (p *Provider) Admin() (durable.ProviderAdmin, bool) { return p.s, true }

// FetchOrchestrationItem implements durable.Provider (the dispatcher's).
func (p *Provider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	return p.d.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
}

// FetchWorkItem implements durable.Provider (the dispatcher's).
func (p *Provider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	return p.d.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
}

// AckOrchestrationItem implements durable.Provider.
func (p *Provider) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) error {
	c, err := p.s.AckOrchestrationItem(ctx, lockToken, turn)
	if err != nil {
		return err
	}
	p.committed(ctx, c)
	p.watches.notify(c.Source)
	return nil
}

// AckWorkItem implements durable.Provider.
func (p *Provider) AckWorkItem(ctx context.Context, lockToken string, completion durable.WorkItem) error {
	c, err := p.s.AckWorkItem(ctx, lockToken, completion)
	if err != nil {
		return err
	}
	p.committed(ctx, c)
	return nil
}

// committed has the dispatcher follow a commit, then the store tidy up.
// The commit has happened, so the caller's cancellation does not cut the
// follow-up short (commitFollowUpTimeout bounds it): an outbox delivery
// whose target document landed but whose intent was not deleted would be
// delivered again by the repair pass once the target had consumed it.
func (p *Provider) committed(ctx context.Context, c store.Commit) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitFollowUpTimeout)
	defer cancel()
	p.d.Committed(ctx, c)
	p.s.Tidy(ctx, c)
}

// commitFollowUpTimeout bounds the work that follows a commit (committed).
const commitFollowUpTimeout = 10 * time.Second

// wrote has the dispatcher follow a write that committed nothing.
func (p *Provider) wrote(w store.Write, err error) error {
	if err == nil {
		p.d.Wrote(w)
	}
	return err
}

// AbandonOrchestrationItem implements durable.Provider.
func (p *Provider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	return p.wrote(p.s.AbandonOrchestrationItem(ctx, lockToken, delay, ignoreAttempt))
}

// AbandonWorkItem implements durable.Provider.
func (p *Provider) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	return p.wrote(p.s.AbandonWorkItem(ctx, lockToken, delay, ignoreAttempt))
}

// EnqueueForWorker implements durable.Provider.
func (p *Provider) EnqueueForWorker(ctx context.Context, item durable.WorkItem) error {
	return p.wrote(p.s.EnqueueForWorker(ctx, item))
}

// EnqueueForOrchestrator implements durable.Provider.
//
// In event-driven mode, while a fetch of this process waits for the
// item's slot, the enqueue also locks the item's turn for that fetch
// (store.EnqueueLocked): one round trip writes the message and takes the
// lock. When it cannot, it writes nothing and the item is enqueued as
// usual.
func (p *Provider) EnqueueForOrchestrator(ctx context.Context, item durable.WorkItem, delay time.Duration) error {
	if delay <= 0 {
		if enqueued, err := p.enqueueLocked(ctx, item, false); err != nil || enqueued {
			return err
		}
	}
	return p.wrote(p.s.EnqueueForOrchestrator(ctx, item, delay))
}

// EnqueueIfRunning implements durable.RunningEnqueuer: in event-driven
// mode, while a fetch of this process waits for the item's slot, the
// write that enqueues it locks its turn on the condition that the
// instance runs (store.EnqueueLocked). Otherwise it writes nothing.
func (p *Provider) EnqueueIfRunning(ctx context.Context, item durable.WorkItem) (bool, error) {
	return p.enqueueLocked(ctx, item, true)
}

// enqueueLocked enqueues item with its turn locked for a fetch of this
// process, when the dispatcher asks for it (engine.LockOnWrite); enqueued
// false means nothing was written.
func (p *Provider) enqueueLocked(ctx context.Context, item durable.WorkItem, running bool) (bool, error) {
	wl, ok := p.d.(writeLocker)
	if !ok || item == nil {
		return false, nil
	}
	req, ok := wl.LockOnWrite(item.TargetInstance())
	if !ok {
		return false, nil
	}
	r, enqueued, err := p.s.EnqueueLocked(ctx, item, req, running)
	if !wl.HandOver(r) {
		p.releaseHanded(r.Item.LockToken)
	}
	return enqueued, err
}

// CheckRequest implements durable.RequestChecker (the store's request
// records: one point read).
func (p *Provider) CheckRequest(ctx context.Context, item durable.WorkItem) (durable.RequestState, error) {
	return p.s.CheckRequest(ctx, item)
}

// RenewOrchestrationItemLock implements durable.Provider.
func (p *Provider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	return p.s.RenewOrchestrationItemLock(ctx, lockToken, extendFor)
}

// RenewWorkItemLock implements durable.Provider.
func (p *Provider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	return p.s.RenewWorkItemLock(ctx, lockToken, extendFor)
}

// RenewSessionLock implements durable.Provider.
func (p *Provider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	return p.s.RenewSessionLock(ctx, ownerIDs, extendFor, idleTimeout)
}

// CleanupOrphanedSessions implements durable.Provider.
func (p *Provider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	return p.s.CleanupOrphanedSessions(ctx, idleTimeout)
}

// Read implements durable.Provider.
func (p *Provider) Read(ctx context.Context, instance string) ([]history.Event, error) {
	return p.s.Read(ctx, instance)
}

// ReadWithExecution implements durable.Provider.
func (p *Provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
	return p.s.ReadWithExecution(ctx, instance, executionID)
}

// AppendWithExecution implements durable.Provider.
func (p *Provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []history.Event) error {
	return p.s.AppendWithExecution(ctx, instance, executionID, events)
}

// GetCustomStatus implements durable.Provider.
func (p *Provider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*durable.CustomStatus, error) {
	return p.s.GetCustomStatus(ctx, instance, lastSeenVersion)
}

// GetKVValue implements durable.Provider.
func (p *Provider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	return p.s.GetKVValue(ctx, instance, key)
}

// GetKVAllValues implements durable.Provider.
func (p *Provider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	return p.s.GetKVAllValues(ctx, instance)
}

// GetInstanceStats implements durable.Provider.
func (p *Provider) GetInstanceStats(ctx context.Context, instance string) (*durable.InstanceStats, error) {
	return p.s.GetInstanceStats(ctx, instance)
}
