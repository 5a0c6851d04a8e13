package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/peerwake"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// allSlots is every dispatch slot: fetches wait on all of them, since only
// owned (or hinted) slots are ever signalled.
var allSlots = wakeup.All(slots.Count)

// Engine is the event-driven dispatcher: the wakeup hubs, and while the
// replica takes part in dispatch a session (lease store, change-feed
// processor, background loops). The hubs exist from New; a session starts
// with the replica's first FetchOrchestrationItem (or Join) and ends when
// no orchestration fetch has run for Options.IdleLeave (the runtime
// stopped dispatching) or at Close, handing the leases off either way. A
// replica used only as a client therefore never takes slots it would not
// serve.
type Engine struct {
	s    Store
	be   Backend
	out  *outbox.Outbox
	opts Options
	clk  Clock
	log  *zap.Logger
	per  int // slots per lease

	orch  *wakeup.Hub // orchestrator queue: keys "w"+instance, "l"+instance (lock expiry)
	work  *wakeup.Hub // worker queue: keys workKey(instance, doc id)
	maint *wakeup.Hub // deferred publication/deletion checks: key instance

	sessMu sync.Mutex
	sess   atomic.Pointer[session]
	// joinCh is closed (and replaced, under sessMu) when a session starts:
	// a worker fetch polling before the replica joined stops waiting then.
	joinCh chan struct{}
	closed atomic.Bool
	wg     sync.WaitGroup // sessions being left

	orchInFlight  atomic.Int32 // FetchOrchestrationItem calls in flight
	lastOrchFetch atomic.Int64 // unix ms at which the last one returned
	// fetchParams are the latest orchestration fetch's lock parameters
	// (nil before the first): LockOnWrite locks with them.
	fetchParams atomic.Pointer[fetchParams]

	mu        sync.Mutex
	blocked   map[string]int       // instances found locked with work waiting: slot
	locking   map[string]bool      // instances a local fetch is locking now: true once another wakeup came meanwhile (lockOnce)
	released  map[string]int64     // orchestration locks we released: instance -> lockedUntil
	seenLocks map[string]int64     // orchestration locks seen held (feed, a lock attempt), not yet seen released: instance -> latest lockedUntil
	seenFreed map[string]int64     // orchestration locks the feed showed released: instance -> latest lockedUntil
	wreleased map[string]int64     // work-item locks we released: key -> lockedUntil
	settled   map[string]int64     // work items the feed showed acked: key -> when seen (ms)
	wlocked   map[string]int64     // work items the feed showed locked: key -> lockedUntil
	parked    map[string]parkedWI  // worker wakeups no fetch so far could take (tag, session)
	refused   map[string]refusedOI // orchestration wakeups refused by a capability filter
	// handed are turns writes of this process locked for its fetches
	// (HandOver), oldest first; handReserved the writes LockOnWrite
	// allowed that have not handed theirs over yet.
	handed       []handedTurn
	handReserved int
	moreOrch     wakeup.Set // owned slots whose last orchestrator scan left rows unsignalled
	moreWork     wakeup.Set // the same for worker scans
	sib          siblings   // activities turns scheduled here, not yet seen done (SiblingWait)
	watch        watchState // instance watches over the peer wake channel (own mutex)

	// Worker dispatch capacity, for backlog hints.
	workWaiting atomic.Int32 // FetchWorkItem calls in flight
	workPeak    atomic.Int32 // their high-water mark
	hint        hintState
	met         meters
	hinted      map[string]hintSeen // other replicas' hints: replica -> latest

	stats engineStats
	// heads are the orchestrator messages the feed delivered that no
	// fetch has taken yet (store.LockRequest.Heads); nil with
	// Options.DisableHeads.
	heads *headIndex
	// holdIntents makes the feed handler refuse batches holding an outbox
	// intent (HoldIntents: drills of a crash between a commit and its
	// delivery).
	holdIntents atomic.Bool
	// wake is the peer wake channel (nil when Options.PeerWake is nil).
	wake *wakeState
}

// session is one period of this replica's participation in dispatch.
type session struct {
	store  Leases
	proc   Feed
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	owned     atomic.Pointer[wakeup.Set]
	catchKick chan struct{}
	hintKick  chan struct{}
	mu        sync.Mutex
	catchup   wakeup.Set // owned slots awaiting their catch-up query
	// unpinned are the slots of leases acquired without a continuation,
	// by lease ID, until their reader has fixed its starting point
	// (changefeed Options.OnPositioned): they are caught up again then.
	unpinned map[string]wakeup.Set

	// ready is closed once the replica owns its share of the leases and
	// has caught up on their backlog (or after readyWait): the first fetch
	// of a session waits for it, so that even a fetch with a zero poll
	// timeout sees the work already queued.
	ready     chan struct{}
	readyOnce sync.Once
	// shared is closed when the share and catch-up condition of ready
	// holds (never by the readyWait timer).
	shared     chan struct{}
	sharedOnce sync.Once

	// recv is the session's peer wake receiver (nil when the channel is
	// off), its endpoint published in the heartbeat.
	recv *peerwake.Receiver

	// dead are lock holders (leasestore Holder names) this replica's
	// take-overs declared dead, whose locks releaseLoop frees.
	deadMu   sync.Mutex
	dead     []string
	deadKick chan struct{}
}

// Bounds of the hubs, per slot (wakeup.Options.MaxPendingPerSlot) and per
// hub (MaxPending): a slot whose pending wakeups pass its bound, or the
// heaviest slot when the hub passes its own, collapses into a Scan. A scan
// signals at most scanLimit of what it finds, so that it never collapses a
// slot again at once, and marks the slot for another scan once what it
// signalled is taken (continueScan). So a replica holds at most 16,384
// orchestration and 65,536 worker wakeups (about 14 MB, BenchmarkPendingMemory) however deep the
// backlog. Worker wakeups are per document (one orchestration may fan out
// thousands of activities), orchestration wakeups per instance.
const (
	orchSlotBound = 1 << 14
	workSlotBound = 1 << 16
	orchHubBound  = 1 << 14
	workHubBound  = 1 << 16
)

// engineStats are counters for tests and diagnostics.
type engineStats struct {
	orchFetched    atomic.Int64 // orchestration items returned
	workFetched    atomic.Int64 // work items returned
	feedDelivered  atomic.Int64 // outbox intents delivered by the feed handler
	sweepDelivered atomic.Int64 // outbox intents delivered by the safety sweep
	sweeps         atomic.Int64 // safety sweeps run
	catchups       atomic.Int64 // catch-up queries run
	hintsWritten   atomic.Int64 // backlog hint documents written
	hintScans      atomic.Int64 // scans run for another replica's hint
	workSettled    atomic.Int64 // worker items the feed showed acked
	workSkipped    atomic.Int64 // worker wakeups dropped as settled
	intentsHeld    atomic.Int64 // feed batches refused under HoldIntents
	locksReleased  atomic.Int64 // locks of dead holders released
	turnsPutOff    atomic.Int64 // orchestration wakeups put off for siblings
	holdsLearned   atomic.Int64 // await holds taken from the feed's instance versions
	eager          atomic.Int64 // wakeups of own writes run here in slots owned elsewhere
	writeLocked    atomic.Int64 // turns locked by the write of their message (HandOver)
	scans          atomic.Int64 // slot scans run (scanOrch, scanWork)
}

// parkedWI is a worker wakeup the fetch that took it could not use.
type parkedWI struct {
	slot     int
	key      string
	tag      string
	session  bool
	parkedAt int64
	// sessionBusy: the item's session is owned by another worker node; no
	// local fetch takes it until it is read again after parkRecheck.
	sessionBusy bool
}

// refusedOI is an orchestration wakeup a capability filter refused.
type refusedOI struct {
	slot    int
	version string // the instance's pinned version
	at      int64
}

// New returns an Engine dispatching from b's store; it delivers outbox
// intents through an outbox of its own over the store, whose deliveries
// it signals. It joins no dispatch: the replica joins at its first
// FetchOrchestrationItem (or Join). With the peer wake channel on, New
// returns once the channel's first read of the lease documents has
// answered or failed (a provider's first write then reaches the owners'
// channels), or with ctx's error.
func New(ctx context.Context, b Backend, o Options) (*Engine, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	if b.Store == nil {
		return nil, errors.New("engine: Backend.Store is nil")
	}
	if o.PeerWake != nil && b.View == nil {
		return nil, errors.New("engine: the peer wake channel needs Backend.View")
	}
	s := b.Store
	e := &Engine{s: s, be: b, opts: o, clk: o.Clock, log: o.Logger.With(zap.String("replica", o.ReplicaID)),
		per:     slots.Count / o.Leases.Blocks,
		blocked: map[string]int{}, locking: map[string]bool{}, released: map[string]int64{}, seenLocks: map[string]int64{}, seenFreed: map[string]int64{}, wreleased: map[string]int64{}, settled: map[string]int64{}, wlocked: map[string]int64{}, parked: map[string]parkedWI{},
		refused: map[string]refusedOI{}, hinted: map[string]hintSeen{}, joinCh: make(chan struct{}),
		sib: siblings{work: map[string]map[string]int64{}, await: map[string]map[string]bool{}, putOff: map[string]int64{}, done: map[string]map[string]int64{}, locked: map[string]int64{},
			taken: map[string]map[string]int64{}},
		watch: watchState{watching: map[string]int{}, watchers: map[string]map[*peerwake.Reply]struct{}{}}}
	e.out = outbox.New(s, o.Logger)
	if !o.DisableHeads {
		e.heads = newHeadIndex(e.isOwned)
	}
	if e.orch, err = wakeup.New(wakeup.Options{MaxPendingPerSlot: orchSlotBound, MaxPending: orchHubBound, Clock: o.Clock}); err != nil {
		return nil, err
	}
	e.work, _ = wakeup.New(wakeup.Options{MaxPendingPerSlot: workSlotBound, MaxPending: workHubBound, Clock: o.Clock})
	e.maint, _ = wakeup.New(wakeup.Options{Clock: o.Clock})
	e.startMeters(o.MeterProvider)
	if o.PeerWake != nil {
		if err := e.startPeerWake(); err != nil {
			return nil, err
		}
		if err := e.waitPeerView(ctx); err != nil {
			e.Close(false)
			return nil, err
		}
	}
	return e, nil
}

func (e *Engine) leasePartition() string { return e.opts.Leases.PartitionKeyValue }

// now is the engine clock's time in ms since the Unix epoch.
func (e *Engine) now() int64 { return e.clk.Now().UnixMilli() }

// sleep waits d on the engine's clock; false when ctx ended first.
func (e *Engine) sleep(ctx context.Context, d time.Duration) bool {
	return clock.SleepOn(ctx, e.clk, d)
}

// msTime converts ms since the Unix epoch to a time.
func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

// isJoined reports whether the replica takes part in dispatch now.
func (e *Engine) isJoined() bool { return e.sess.Load() != nil }

// isOwned reports whether this replica holds the lease of slot.
func (e *Engine) isOwned(slot int) bool {
	s := e.sess.Load()
	return s != nil && s.owned.Load().Contains(slot)
}

// ownedSet returns the slots owned now.
func (e *Engine) ownedSet() wakeup.Set {
	if s := e.sess.Load(); s != nil {
		return *s.owned.Load()
	}
	return wakeup.Set{}
}

// join starts a session unless one runs; it never blocks on I/O. It
// returns ErrClosed after Close, or why the session could not start.
func (e *Engine) join() (*session, error) {
	if s := e.sess.Load(); s != nil {
		return s, nil
	}
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	if s := e.sess.Load(); s != nil {
		return s, nil
	}
	if e.closed.Load() {
		return nil, ErrClosed
	}
	s, err := e.startSession()
	if err != nil {
		e.log.Error("event-driven engine did not start", zap.Error(err))
		return nil, err
	}
	e.sess.Store(s)
	e.runSession(s)
	close(e.joinCh)
	e.joinCh = make(chan struct{})
	return s, nil
}

// joined returns a channel closed when the next session starts.
func (e *Engine) joined() <-chan struct{} {
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	return e.joinCh
}

func (e *Engine) startSession() (*session, error) {
	s := &session{catchKick: make(chan struct{}, 1), hintKick: make(chan struct{}, 1), ready: make(chan struct{}), shared: make(chan struct{}),
		unpinned: map[string]wakeup.Set{}, deadKick: make(chan struct{}, 1)}
	s.owned.Store(&wakeup.Set{})
	so := leasestore.Options{
		ReplicaID:         e.opts.ReplicaID,
		PartitionKey:      "/instanceId",
		PartitionKeyValue: e.leasePartition(),
		Ranges:            slots.Ranges(e.opts.Leases.Blocks),
		LeaseExpiry:       e.opts.Leases.Expiry,
		HeartbeatInterval: e.opts.Leases.HeartbeatInterval,
		WatchActiveDelay:  e.opts.Leases.WatchActiveDelay,
		WatchIdleCeiling:  e.opts.Leases.WatchIdleCeiling,
		// The lease store names the replica in its lines itself.
		Logger:     e.opts.Logger,
		OnChange:   func(ev leasestore.Event) { e.onLeaseChange(s, ev) },
		OnDocument: e.onLeaseDocument,
		OnExpired:  s.declaredDead,
		OnWrote:    func() { e.kickPeers(s) },
	}
	recv, err := e.receiverFor(&so)
	if err != nil {
		return nil, err
	}
	if e.be.Session == nil {
		if recv != nil {
			_ = recv.Close()
		}
		return nil, errNoSession
	}
	st, proc, err := e.be.Session(so, e.handle, changefeed.Options{
		ActiveDelay:        e.opts.Feed.ActiveDelay,
		IdleCeiling:        e.opts.Feed.IdleCeiling,
		WarmHold:           e.opts.Feed.WarmHold,
		EmptyReadBudget:    max(0, e.opts.Feed.EmptyReadBudget),
		MaxIdlePeriod:      e.opts.Feed.MaxIdlePeriod,
		ReadsPerChange:     e.opts.Feed.ReadsPerChange,
		StartFrom:          changefeed.StartFromNow(),
		OnPositioned:       func(id string) { e.onPositioned(s, id) },
		Filter:             relevantDoc,
		CheckpointInterval: e.opts.Feed.CheckpointInterval,
		Clock:              e.clk,
		Logger:             e.log,
	})
	if err != nil {
		if recv != nil {
			_ = recv.Close()
		}
		return nil, err
	}
	s.recv = recv
	s.store, s.proc = st, proc
	e.lastOrchFetch.Store(e.clk.Now().UnixMilli())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// runSession starts the session's loops. join calls it once the session
// is published (e.sess), so that nothing a loop signals (a catch-up's
// rows, a lease acquired) is checked against a session not yet visible.
func (e *Engine) runSession(s *session) {
	ctx, st, proc := s.ctx, s.store, s.proc
	s.goLoop(func() {
		// The first fetch waits for the share at most readyWait.
		if e.sleep(ctx, readyWait) {
			s.readyOnce.Do(func() { close(s.ready) })
		}
	})
	s.goLoop(func() {
		if err := st.Run(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("lease store stopped", zap.Error(err))
		}
	})
	s.goLoop(func() { _ = proc.Run(ctx) })
	s.goLoop(func() { e.catchupLoop(s) })
	s.goLoop(func() { e.sweepLoop(s) })
	s.goLoop(func() { e.maintLoop(ctx) })
	s.goLoop(func() { e.hintLoop(s) })
	s.goLoop(func() { e.idleLoop(s) })
	s.goLoop(func() { e.releaseLoop(s) })
	if s.recv != nil {
		s.goLoop(func() { e.silentLoop(s) })
	}
}

// declaredDead is leasestore's OnExpired: holder's locks are to be freed.
func (s *session) declaredDead(holder string) {
	s.deadMu.Lock()
	s.dead = append(s.dead, holder)
	s.deadMu.Unlock()
	select {
	case s.deadKick <- struct{}{}:
	default:
	}
}

// releaseLoop frees the locks of the holders this replica declared dead
// (store.ReleaseLocksOf), retrying a failed pass with backoff until the
// session ends, and signals what became free at once. Once a take-over
// has committed, the dead registration cannot heartbeat again and every
// write of its locks is conditional on the version the lock wrote, so its
// work is fetchable now instead of after the lock timeout.
func (e *Engine) releaseLoop(s *session) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.deadKick:
		}
		s.deadMu.Lock()
		holders := s.dead
		s.dead = nil
		s.deadMu.Unlock()
		for _, h := range holders {
			for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
				w, err := e.s.ReleaseLocksOf(s.ctx, h)
				e.Wrote(w)
				e.stats.locksReleased.Add(int64(len(w.Visible) + len(w.Released)))
				if err == nil {
					break
				}
				e.log.Warn("releasing the locks of a dead replica failed; retrying", zap.String("holder", h), zap.Error(err))
				if !e.sleep(s.ctx, wait) {
					return
				}
			}
		}
	}
}

// holder names the locks this replica takes: its current lease
// registration ("" while it has not joined, or has not registered yet:
// such locks are freed by their expiry only).
func (e *Engine) holder() string {
	if s := e.sess.Load(); s != nil && s.store != nil {
		return s.store.Holder()
	}
	return ""
}

func (s *session) goLoop(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// leave ends session s: with graceful, its leases are handed off and its
// backlog hint removed first; without, it stops as if it had crashed.
func (e *Engine) leave(s *session, graceful bool) {
	e.sessMu.Lock()
	if e.sess.Load() != s {
		e.sessMu.Unlock()
		return
	}
	e.sess.Store(nil)
	e.sessMu.Unlock()
	if graceful {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// Readers first, while the leases are held: they record the
		// checkpoints CheckpointInterval left pending, so the next owners
		// do not read those changes again.
		if err := s.proc.Stop(ctx); err != nil {
			e.log.Warn("change-feed processor did not stop in time", zap.Error(err))
		}
		if err := s.store.Release(ctx); err != nil {
			e.log.Warn("lease release failed", zap.Error(err))
		}
		e.clearHint(ctx)
		if e.wake != nil {
			// The hand-off's kicks leave before the sender closes.
			_ = e.wake.sender.Drain(ctx)
		}
		cancel()
	}
	s.cancel()
	s.wg.Wait()
	if s.recv != nil {
		_ = s.recv.Close()
	}
	all := wakeup.All(slots.Count)
	e.orch.Drop(all)
	e.work.Drop(all)
	e.maint.Drop(all)
	e.heads.dropSlots(all)
	e.mu.Lock()
	clear(e.blocked)
	clear(e.parked)
	clear(e.refused)
	e.moreOrch, e.moreWork = wakeup.Set{}, wakeup.Set{}
	clear(e.hinted)
	e.mu.Unlock()
	e.hint.mu.Lock()
	e.hint.published, e.hint.slots, e.hint.count, e.hint.parked, e.hint.hot, e.hint.cold = false, nil, 0, false, 0, 0
	e.hint.mu.Unlock()
}

// idleLoop leaves the session once no orchestration fetch has run for
// idleLeave (or the test override).
func (e *Engine) idleLoop(s *session) {
	for e.sleep(s.ctx, time.Second) {
		if !e.idle() {
			continue
		}
		e.log.Info("no orchestration fetch for a while: handing the leases off")
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.leave(s, true)
		}()
		return
	}
}

// idle reports that no orchestration fetch (or Join) is in flight and
// none has returned for Options.IdleLeave: the runtime has stopped
// dispatching, and the session is to be left.
func (e *Engine) idle() bool {
	return e.orchInFlight.Load() == 0 && e.now()-e.lastOrchFetch.Load() >= e.opts.IdleLeave.Milliseconds()
}

// Close implements the dispatcher contract. Graceful, it hands this
// replica's leases to the others (readers stopped first, so their pending
// checkpoints are written) and removes its backlog hint; otherwise it
// stops as if the process had crashed, releasing nothing, so the others
// take its leases once its heartbeat expires (drills and tests). Either
// way every goroutine of the engine has stopped when it returns. Later
// calls do nothing.
func (e *Engine) Close(graceful bool) {
	if !e.closed.CompareAndSwap(false, true) {
		return
	}
	if s := e.sess.Load(); s != nil {
		e.leave(s, graceful)
	}
	e.wg.Wait()
	e.stopPeerWake()
	e.stopMeters()
	e.closeHubs()
}

func (e *Engine) closeHubs() {
	e.orch.Close()
	e.work.Close()
	e.maint.Close()
}

// blockSlots returns the slots of lease i.
func (e *Engine) blockSlots(i int) wakeup.Set {
	return wakeup.Range(i*e.per, (i+1)*e.per-1)
}

// onLeaseChange is leasestore's OnChange: called with the store's lock
// held, so it only updates memory and kicks goroutines.
func (e *Engine) onLeaseChange(s *session, ev leasestore.Event) {
	slots := e.blockSlots(ev.Lease.Index)
	cur := *s.owned.Load()
	switch ev.Kind {
	case leasestore.EventAcquired:
		e.heads.acquired(slots)
		next := cur.Union(slots)
		s.owned.Store(&next)
		s.mu.Lock()
		s.catchup = s.catchup.Union(slots)
		if ev.Lease.Continuation == "" {
			// A lease never read before starts at "now", which its reader
			// fixes with its first read, however late that comes: the
			// changes between this catch-up and that read are caught up
			// once it is done (onPositioned).
			s.unpinned[ev.Lease.ID] = slots
		}
		s.mu.Unlock()
		signalCh(s.catchKick)
	case leasestore.EventLost:
		next := cur
		for sl := range slots.All() {
			next.Remove(sl)
		}
		s.owned.Store(&next)
		s.mu.Lock()
		delete(s.unpinned, ev.Lease.ID)
		s.mu.Unlock()
		if e.sess.Load() != s {
			return // a session being left: leave drops everything
		}
		e.orch.Drop(slots)
		e.work.Drop(slots)
		e.maint.Drop(slots)
		e.heads.dropSlots(slots)
		s.mu.Lock()
		for sl := range slots.All() {
			s.catchup.Remove(sl)
		}
		s.mu.Unlock()
		e.mu.Lock()
		e.moreOrch, e.moreWork = e.moreOrch.Difference(slots), e.moreWork.Difference(slots)
		for inst, sl := range e.blocked {
			if slots.Contains(sl) {
				delete(e.blocked, inst)
			}
		}
		for k, r := range e.refused {
			if slots.Contains(r.slot) {
				delete(e.refused, k)
			}
		}
		e.mu.Unlock()
	}
}

func signalCh(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
