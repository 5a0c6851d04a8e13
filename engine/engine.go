package engine

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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
	"github.com/durafeed/durafeed/store"
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
	s    *store.Store
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

	mu        sync.Mutex
	blocked   map[string]int       // instances found locked with work waiting: slot
	locking   map[string]bool      // instances a local fetch is locking now: true once another wakeup came meanwhile (lockOnce)
	released  map[string]int64     // orchestration locks we released: instance -> lockedUntil
	wreleased map[string]int64     // work-item locks we released: key -> lockedUntil
	settled   map[string]int64     // work items the feed showed acked: key -> when seen (ms)
	wlocked   map[string]int64     // work items the feed showed locked: key -> lockedUntil
	parked    map[string]parkedWI  // worker wakeups no fetch so far could take (tag, session)
	refused   map[string]refusedOI // orchestration wakeups refused by a capability filter
	sib       siblings             // activities turns scheduled here, not yet seen done (SiblingWait)
	watch     watchState           // instance watches over the peer wake channel (own mutex)

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
	store  *leasestore.Store
	proc   *changefeed.Processor
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

// Per-slot bounds of the hubs (wakeup.Options.MaxPendingPerSlot): a slot
// whose pending wakeups pass the bound collapses into a Scan, and a scan
// signals at most half the bound, so that it never collapses the slot
// again at once; what it leaves is found by a later scan, the feed or the
// safety sweep. Worker wakeups are per document (one orchestration may fan
// out thousands of activities), orchestration wakeups per instance.
const (
	orchSlotBound = 1 << 14
	workSlotBound = 1 << 16
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

// hintSeen is another replica's latest hint as this one saw it.
type hintSeen struct {
	slots   []int
	seq     int64
	seenAt  time.Time // when seq last changed
	scanned map[int]time.Time
	// needed: the owner holds items only other replicas may take
	// (hintDoc.Parked); otherwise the hint is an overflow, followed only
	// while this replica has no due work of its own.
	needed bool
}

// hintStale is how long a hint whose sequence number does not change is
// followed: an owner refreshes an active hint every hintRefresh.
const (
	hintRefresh = 2 * time.Second
	hintStale   = 5 * hintRefresh
)

// hintState is the owner side of backlog hints.
type hintState struct {
	mu        sync.Mutex
	published bool
	slots     []int
	refused   []string
	count     int
	parked    bool // the published hint holds items only others may take
	seq       int64
	hot       int // consecutive checks over capacity
	cold      int // consecutive checks with nothing due
	lastWrite time.Time
}

// New returns an Engine dispatching from s; it delivers outbox intents
// through an outbox of its own over s, whose deliveries it signals. It
// starts nothing: the replica joins dispatch at its first
// FetchOrchestrationItem (or Join).
func New(s *store.Store, o Options) (*Engine, error) {
	o, err := o.WithDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{s: s, opts: o, clk: o.Clock, log: o.Logger.With(zap.String("replica", o.ReplicaID)),
		per:     slots.Count / o.Leases.Blocks,
		blocked: map[string]int{}, locking: map[string]bool{}, released: map[string]int64{}, wreleased: map[string]int64{}, settled: map[string]int64{}, wlocked: map[string]int64{}, parked: map[string]parkedWI{},
		refused: map[string]refusedOI{}, hinted: map[string]hintSeen{}, joinCh: make(chan struct{}),
		sib: siblings{work: map[string]map[string]int64{}, await: map[string]map[string]bool{}, putOff: map[string]int64{},
			taken: map[string]map[string]int64{}},
		watch: watchState{watching: map[string]int{}, watchers: map[string]map[*peerwake.Reply]struct{}{}}}
	e.out = outbox.New(s, o.Logger, e.delivered)
	if !o.DisableHeads {
		e.heads = newHeadIndex(e.isOwned)
	}
	if e.orch, err = wakeup.New(wakeup.Options{MaxPendingPerSlot: orchSlotBound, Clock: o.Clock}); err != nil {
		return nil, err
	}
	e.work, _ = wakeup.New(wakeup.Options{MaxPendingPerSlot: workSlotBound, Clock: o.Clock})
	e.maint, _ = wakeup.New(wakeup.Options{Clock: o.Clock})
	e.startMeters(o.MeterProvider)
	if o.PeerWake != nil {
		if err := e.startPeerWake(); err != nil {
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
// returns nil after Close.
func (e *Engine) join() *session {
	if s := e.sess.Load(); s != nil {
		return s
	}
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	if s := e.sess.Load(); s != nil {
		return s
	}
	if e.closed.Load() {
		return nil
	}
	s, err := e.startSession()
	if err != nil {
		e.log.Error("event-driven engine did not start", zap.Error(err))
		return nil
	}
	e.sess.Store(s)
	close(e.joinCh)
	e.joinCh = make(chan struct{})
	return s
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
	recv, addr, key, err := e.receiverFor()
	if err != nil {
		return nil, err
	}
	so.WakeAddr, so.WakeKey = addr, key
	st, err := leasestore.New(e.s.Container(), so)
	if err != nil {
		if recv != nil {
			_ = recv.Close()
		}
		return nil, err
	}
	s.recv = recv
	proc, err := changefeed.New(e.s.Container(), st, e.handle, changefeed.Options{
		ActiveDelay:        e.opts.Feed.ActiveDelay,
		IdleCeiling:        e.opts.Feed.IdleCeiling,
		WarmHold:           e.opts.Feed.WarmHold,
		EmptyReadBudget:    max(0, e.opts.Feed.EmptyReadBudget),
		ReadsPerChange:     e.opts.Feed.ReadsPerChange,
		StartFrom:          changefeed.StartFromNow(),
		OnPositioned:       func(id string) { e.onPositioned(s, id) },
		Filter:             relevantDoc,
		CheckpointInterval: e.opts.Feed.CheckpointInterval,
		Clock:              e.clk,
		Logger:             e.log,
	})
	if err != nil {
		return nil, err
	}
	s.store, s.proc = st, proc
	e.lastOrchFetch.Store(e.clk.Now().UnixMilli())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ctx := s.ctx
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
	return s, nil
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
		if e.orchInFlight.Load() > 0 {
			continue
		}
		if e.now()-e.lastOrchFetch.Load() < e.opts.IdleLeave.Milliseconds() {
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

// Hub keys.
func orchKey(instance string) string { return "w" + instance }

// isOrchKey reports a key orchKey made (a peer's wake must name one).
func isOrchKey(k string) bool { return len(k) > 1 && k[0] == 'w' }

func lockKey(instance string) string { return "l" + instance }
func workKey(instance, id string) string {
	return strconv.Itoa(len(instance)) + ":" + instance + id
}

// settleKey is the peer wake key of a completion message: the instance
// to wake and the worker document its ack removed (the owner counts that
// activity done). Receivers that predate it ignore it; the feed then
// brings the completion.
func settleKey(instance, workID string) string { return "c" + workKey(instance, workID) }

// splitSettleKey parses a settleKey.
func splitSettleKey(k string) (instance, workID string, ok bool) { return splitNamedKey('c', k) }

// arrivalKey is the peer wake key of any other orchestrator message: the
// instance to wake and the message's document id, so that the owner can
// tell a wake that reaches it after a turn took the message (stale) from
// a new arrival. Receivers that predate it ignore it; the feed then
// brings the message.
func arrivalKey(instance, msgID string) string { return "a" + workKey(instance, msgID) }

// splitArrivalKey parses an arrivalKey.
func splitArrivalKey(k string) (instance, msgID string, ok bool) { return splitNamedKey('a', k) }

// splitNamedKey parses a key of kind followed by a workKey naming a
// document of an instance.
func splitNamedKey(kind byte, k string) (instance, id string, ok bool) {
	if len(k) < 2 || k[0] != kind {
		return "", "", false
	}
	instance, id, ok = splitWorkKey(k[1:])
	return instance, id, ok && instance != "" && id != ""
}

func splitWorkKey(k string) (instance, id string, ok bool) {
	i := strings.IndexByte(k, ':')
	if i < 0 {
		return "", "", false
	}
	n, err := strconv.Atoi(k[:i])
	if err != nil || n < 0 || i+1+n > len(k) {
		return "", "", false
	}
	return k[i+1 : i+1+n], k[i+1+n:], true
}

// signalQueue turns a queue document's current state into a wakeup on the
// local hubs, when its slot is owned here (or always, with force).
func (e *Engine) signalQueue(q store.QueueHead, force bool) {
	if q.DispatchSlot < 0 || q.DispatchSlot >= slots.Count || (!force && !e.isOwned(q.DispatchSlot)) {
		return
	}
	now := e.now()
	switch {
	case q.IsOrchestrator():
		if q.LockedUntil > now {
			e.orch.SignalAt(q.DispatchSlot, lockKey(q.InstanceID), msTime(q.LockedUntil))
			return
		}
		e.orch.Signal(q.DispatchSlot, orchKey(q.InstanceID), msTime(q.VisibleAt))
	default:
		at := q.VisibleAt
		if q.LockedUntil > at {
			at = q.LockedUntil
		}
		e.work.Signal(q.DispatchSlot, workKey(q.InstanceID, q.ID), msTime(at))
		if at <= now {
			e.kickHint()
		}
	}
}

// Wrote implements the dispatcher contract: it signals what a write of
// this process made visible (owned slots only) and voids the expiry
// wakeups of the locks it released. It does no I/O.
func (e *Engine) Wrote(w store.Write) { e.wrote(w, true) }

// wrote follows a write. With arrivals its orchestrator messages are
// arrivals that end an await hold (an enqueue, an abandon, released
// locks); a commit's own are not (its completion is tracked, and a turn's
// messages to its own instance are its timers).
func (e *Engine) wrote(w store.Write, arrivals bool) {
	settles := completionOf(w)
	for _, q := range w.Visible {
		e.wakePeer(q, settles[q.InstanceID])
	}
	if !e.isJoined() {
		return
	}
	for _, r := range w.Released {
		e.unlockedOrch(r.Instance, r.LockedUntil)
	}
	// Work this process removed, or made visible again, is no longer
	// locked by anyone: the feed's lock marks of it are void.
	e.mu.Lock()
	e.workDoneLocked(w.WorkDone)
	for _, q := range w.WorkDone {
		key := workKey(q.InstanceID, q.ID)
		e.wreleased[key] = q.LockedUntil
		delete(e.wlocked, key)
	}
	for _, q := range w.Visible {
		if !q.IsOrchestrator() {
			delete(e.wlocked, workKey(q.InstanceID, q.ID))
		} else if arrivals {
			e.arrivedLocked(q.InstanceID)
		}
	}
	e.mu.Unlock()
	for _, q := range w.Visible {
		e.signalQueue(q, false)
	}
}

// Committed implements the dispatcher contract: it signals the commit's
// Write, then has its intents delivered. The owner of the source slot
// delivers them from its change feed, so a local owner only wakes its
// reader; anyone else delivers directly (best-effort: the feed or the
// safety sweep delivers what is left).
func (e *Engine) Committed(ctx context.Context, c store.Commit) {
	e.scheduled(c)
	e.wrote(c.Write, false)
	if len(c.Intents) == 0 {
		return
	}
	if e.isJoined() {
		if slot := slots.Of(c.Source); e.isOwned(slot) {
			e.wakeSlot(slot)
			return
		}
	}
	e.out.DeliverAll(ctx, c.Intents)
}

// delivered signals a target document an outbox delivery left in place
// (the outbox's delivered hook).
func (e *Engine) delivered(target json.RawMessage) {
	if !e.isJoined() && e.wake == nil {
		return
	}
	if f, err := e.s.DecodeFeedDoc(target, e.now()); err == nil && (f.Kind == store.FeedOrchestrator || f.Kind == store.FeedWorker) {
		e.wakePeer(f.QueueHead, "")
		if f.Kind == store.FeedOrchestrator && e.isOwned(f.DispatchSlot) {
			e.arrivedMsg(f.InstanceID, f.ID) // a child's completion, an event: a hold here ends
		}
		e.signalQueue(f.QueueHead, false)
	}
}

// lockedOrch records an orchestration lock this process took, on the
// messages msgs: its expiry is signalled, and work that waited for it may
// go.
func (e *Engine) lockedOrch(instance string, until int64, more bool, msgs []string) {
	slot := slots.Of(instance)
	e.mu.Lock()
	if more {
		e.blocked[instance] = slot // the rest goes once this turn is done
	}
	// A blocked mark stays: work signalled while this lock was being
	// taken may not be in the turn; the release signals it.
	delete(e.released, instance)
	e.turnTakenLocked(instance)
	e.takenLocked(instance, msgs)
	e.mu.Unlock()
	if e.isOwned(slot) {
		e.orch.SignalAt(slot, lockKey(instance), msTime(until))
	}
}

// unlockedOrch records that a lock on instance (expiring at until) was
// released by this process: its expiry wakeup is void, and work that
// arrived while it was held may go now.
func (e *Engine) unlockedOrch(instance string, until int64) {
	slot := slots.Of(instance)
	e.mu.Lock()
	e.released[instance] = until
	_, wasBlocked := e.blocked[instance]
	delete(e.blocked, instance)
	e.mu.Unlock()
	if wasBlocked && e.isOwned(slot) {
		e.orch.Signal(slot, orchKey(instance), e.clk.Now())
	}
}

// maxSettled bounds the settled marks kept (an optimisation: a wakeup
// without one costs a read).
const maxSettled = 100_000

// workSettled records a worker item of an owned slot that the feed showed
// acked (a completion naming it): the wakeups this replica holds for it
// are void, so a fetch drops them without reading the item. Helpers that
// take items of this replica's slots would otherwise cost the owner a read
// per item (of a locked or deleted document).
func (e *Engine) workSettled(slot int, key string) {
	if !e.isOwned(slot) {
		return
	}
	e.mu.Lock()
	if len(e.settled) < maxSettled {
		e.settled[key] = e.now()
		e.stats.workSettled.Add(1)
	}
	e.mu.Unlock()
}

// workSeen records the lock of a worker item of an owned slot as the feed
// shows it (the feed shows a partition's versions in order): while it
// holds, wakeups of the item from before its expiry are void (its
// expiry has a wakeup of its own), so a fetch drops them without reading
// a document someone else is working on. A version without a lock (an
// abandon, a retry delay) voids the mark.
func (e *Engine) workSeen(q store.QueueHead) {
	if !e.isOwned(q.DispatchSlot) {
		return
	}
	key := workKey(q.InstanceID, q.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if q.LockedUntil <= e.now() {
		delete(e.wlocked, key)
		return
	}
	if len(e.wlocked) < maxSettled || e.wlocked[key] != 0 {
		e.wlocked[key] = q.LockedUntil
	}
}

// foundLocked records an instance a fetch found locked: it is retried when
// the lock expires, or as soon as its holder releases it.
func (e *Engine) foundLocked(slot int, instance string, until int64) {
	e.mu.Lock()
	rel, ok := e.released[instance]
	gone := ok && rel >= until // released by this process meanwhile
	if !gone {
		e.blocked[instance] = slot
	}
	e.mu.Unlock()
	if gone {
		e.orch.Signal(slot, orchKey(instance), e.clk.Now())
		return
	}
	e.orch.SignalAt(slot, lockKey(instance), msTime(until))
}

// instanceChanged reacts to an instance document seen on the feed.
func (e *Engine) instanceChanged(d store.FeedDoc) {
	slot := slots.Of(d.InstanceID)
	if !e.isOwned(slot) {
		return
	}
	if !d.LockHeld {
		e.mu.Lock()
		_, wasBlocked := e.blocked[d.InstanceID]
		delete(e.blocked, d.InstanceID)
		_, ours := e.released[d.InstanceID]
		e.mu.Unlock()
		if wasBlocked {
			e.orch.Signal(slot, orchKey(d.InstanceID), e.clk.Now())
		}
		if !ours {
			// Another replica's turn (this one's provider reported its own).
			e.InstanceChanged(d.InstanceID)
		}
	} else {
		// A dispatcher that accepts its version runs it: a message left
		// after that turn is refused (and advertised) afresh.
		e.mu.Lock()
		delete(e.refused, d.InstanceID)
		e.mu.Unlock()
	}
	if d.RepairAt > 0 {
		e.maint.Signal(slot, d.InstanceID, msTime(d.RepairAt))
	}
}

// relevantDoc is the change-feed filter: only queue documents, outbox
// intents and instance documents matter to the handler. History, KV,
// execution records and everything in the lease partition (leases,
// heartbeats, hints, whose writes would otherwise keep the reader of their
// range busy) are skipped without a handler call or a checkpoint.
func relevantDoc(raw json.RawMessage) bool { return store.FeedKindOf(raw) != store.FeedOther }

var errHeld = errors.New("engine: intent delivery held (HoldIntents)")

// handle is the change-feed handler: every changed document of an owned
// slot block becomes a wakeup, a delivery or a deferred check.
func (e *Engine) handle(ctx context.Context, b changefeed.Batch) error {
	for _, raw := range b.Documents {
		f, err := e.s.DecodeFeedDoc(raw, e.now())
		if err != nil {
			continue // not ours
		}
		switch f.Kind {
		case store.FeedOrchestrator:
			switch {
			case f.Settles != "":
				e.siblingDone(f.InstanceID, f.Settles) // before its signal: the turn may go now
			case f.LockedUntil == 0 && f.VisibleAt <= e.now():
				e.arrivedMsg(f.InstanceID, f.ID) // an event, a cancellation, a child's completion
			}
			if h, err := store.DecodeHead(raw); err == nil {
				e.heads.note(h, e.now()) // kept only if the slot is owned
			} else {
				e.heads.missed(f.InstanceID)
			}
			e.signalQueue(f.QueueHead, false)
			if f.Settles != "" && f.LockedUntil == 0 { // as created: later versions repeat it
				e.workSettled(f.DispatchSlot, workKey(f.InstanceID, f.Settles))
			}
		case store.FeedWorker:
			e.workSeen(f.QueueHead)
			e.signalQueue(f.QueueHead, false)
		case store.FeedInstance:
			e.instanceChanged(f)
		case store.FeedIntent:
			if e.holdIntents.Load() {
				e.stats.intentsHeld.Add(1)
				return errHeld
			}
			var in outbox.Intent
			if err := json.Unmarshal(raw, &in); err != nil {
				continue
			}
			if !e.isOwned(slots.Of(in.InstanceID)) {
				continue
			}
			if err := e.out.Deliver(ctx, in); err != nil {
				if ctx.Err() != nil || store.Retryable(err) {
					return err // the batch is offered again
				}
				e.log.Warn("outbox intent left for the safety sweep", zap.String("source", in.InstanceID),
					zap.String("target", in.TargetInstance), zap.Int("status", store.Status(err)))
				continue
			}
			e.stats.feedDelivered.Add(1)
		}
	}
	return nil
}

// setBlocks renders a set of slots as its runs of consecutive slots.
func setBlocks(s wakeup.Set) []slots.Block {
	bs := []slots.Block{}
	for sl := range s.All() {
		if sl >= slots.Count {
			break
		}
		if n := len(bs); n > 0 && bs[n-1].Last == sl-1 {
			bs[n-1].Last = sl
			continue
		}
		bs = append(bs, slots.Block{First: sl, Last: sl})
	}
	return bs
}

// catchUp signals every queue document of the slots: the backlog of slots
// newly owned (one query for all slots acquired together, instead of a
// scan per slot). It returns the instances it found orchestrator messages
// of.
func (e *Engine) catchUp(ctx context.Context, set wakeup.Set) ([]string, error) {
	rows, err := e.s.QueueHeads(ctx, store.HeadQuery{Blocks: setBlocks(set), Orchestrator: true, Worker: true})
	if err != nil {
		return nil, err
	}
	e.stats.catchups.Add(1)
	var orch []string
	for _, r := range rows {
		if r.IsOrchestrator() {
			orch = append(orch, r.InstanceID)
		}
		e.signalQueue(r, false)
	}
	return orch, nil
}

// kickHint wakes the backlog-hint check of the running session.
func (e *Engine) kickHint() {
	if s := e.sess.Load(); s != nil {
		signalCh(s.hintKick)
	}
}

// onPositioned is the processor's OnPositioned: the reader of a lease has
// fixed its starting point, so a catch-up of the lease's slots now covers
// everything written before it.
func (e *Engine) onPositioned(s *session, leaseID string) {
	s.mu.Lock()
	slots, ok := s.unpinned[leaseID]
	delete(s.unpinned, leaseID)
	if ok {
		s.catchup = s.catchup.Union(slots.Intersect(*s.owned.Load()))
	}
	s.mu.Unlock()
	if ok {
		signalCh(s.catchKick)
	}
}

func (e *Engine) catchupLoop(s *session) {
	ctx := s.ctx
	delay := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.catchKick:
		}
		s.mu.Lock()
		slots := s.catchup.Intersect(*s.owned.Load())
		s.catchup = wakeup.Set{}
		s.mu.Unlock()
		if slots.IsEmpty() {
			e.checkReady(s)
			continue
		}
		found, err := e.catchUp(ctx, slots)
		if err == nil {
			// Slots with no catch-up still to come (a lease whose reader
			// has not fixed its start yet gets one more) now have complete
			// heads, but for the instances the query found.
			s.mu.Lock()
			done := slots.Intersect(*s.owned.Load()).Difference(s.catchup)
			for _, u := range s.unpinned {
				done = done.Difference(u)
			}
			e.heads.caughtUp(done, found)
			s.mu.Unlock()
			e.checkReady(s)
			delay = 100 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("catch-up query failed; retrying", zap.Error(err))
		s.mu.Lock()
		s.catchup = s.catchup.Union(slots)
		s.mu.Unlock()
		if !e.sleep(ctx, delay) {
			return
		}
		delay = min(2*delay, 10*time.Second)
		signalCh(s.catchKick)
	}
}

// readyWait bounds how long the first fetch waits for the replica's share.
const readyWait = 3 * time.Second

// checkReady closes ready once no catch-up is pending and this replica
// owns at least the smallest share balancing leaves a replica
// (floor(leases/members), within one lease of even, at least one).
func (e *Engine) checkReady(s *session) {
	s.mu.Lock()
	pending := !s.catchup.Intersect(*s.owned.Load()).IsEmpty()
	s.mu.Unlock()
	if pending {
		return
	}
	members := max(len(s.store.Members()), 1)
	fair := max(e.opts.Leases.Blocks/members, 1)
	if len(s.store.Owned()) >= fair {
		s.readyOnce.Do(func() { close(s.ready) })
		s.sharedOnce.Do(func() { close(s.shared) })
	}
}

// awaitReady waits (bounded by readyWait) for the session's first lease
// share and its catch-up.
func (s *session) awaitReady(ctx context.Context) {
	select {
	case <-s.ready:
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
}

// sweepOnce is the safety net, one cross-partition query (store.Stale):
// visible unlocked queue documents of owned slots are signalled again, and
// the outbox's repair pass delivers stale intents and finishes stale
// publications and deletions.
func (e *Engine) sweepOnce(ctx context.Context) {
	e.stats.sweeps.Add(1)
	heads, found, err := e.s.Stale(ctx, store.StaleQuery{QueueBlocks: setBlocks(e.ownedSet())})
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("safety sweep failed", zap.Int("status", store.Status(err)), zap.Error(err))
		}
		return
	}
	for _, q := range heads {
		e.signalQueue(q, false)
	}
	r := e.out.Repair(ctx, found, e.s)
	e.stats.sweepDelivered.Add(int64(r.Delivered))
	e.pruneReleased(e.now())
}

func (e *Engine) sweepLoop(s *session) {
	ctx := s.ctx
	for {
		d := e.opts.SafetySweepInterval
		d -= time.Duration(rand.Int64N(int64(d)/10 + 1)) // jitter: replicas drift apart
		if !e.sleep(ctx, d) {
			return
		}
		e.sweepOnce(ctx)
	}
}

// pruneReleased forgets released locks whose expiry has long passed,
// marks of settled and locked work items and parked wakeups older than a
// minute (the sweep re-finds them), refused instances and hints not seen
// for a minute.
func (e *Engine) pruneReleased(now int64) {
	cutoff := now - 60_000
	e.mu.Lock()
	defer e.mu.Unlock()
	pruneBefore(e.released, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.wreleased, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.settled, cutoff, func(at int64) int64 { return at })
	pruneBefore(e.wlocked, cutoff, func(until int64) int64 { return until })
	pruneBefore(e.parked, cutoff, func(pw parkedWI) int64 { return pw.parkedAt })
	pruneBefore(e.refused, cutoff, func(r refusedOI) int64 { return r.at })
	// A re-read brings a hint back only while its replica lives.
	pruneBefore(e.hinted, cutoff, func(h hintSeen) int64 { return h.seenAt.UnixMilli() })
	e.pruneSiblingsLocked(cutoff)
}

// pruneBefore deletes the entries of m whose time (ms) is before cutoff.
func pruneBefore[V any](m map[string]V, cutoff int64, at func(V) int64) {
	for k, v := range m {
		if at(v) < cutoff {
			delete(m, k)
		}
	}
}

// maintLoop runs the deferred checks signalled by the feed handler.
func (e *Engine) maintLoop(ctx context.Context) {
	for {
		w, ok := e.maint.Wait(ctx, allSlots, time.Hour)
		if ctx.Err() != nil || e.closed.Load() {
			return
		}
		if !ok {
			continue
		}
		if err := e.s.FinishInstance(ctx, w.Instance); err != nil && ctx.Err() == nil {
			e.log.Warn("deferred publication or deletion failed", zap.String("instance", w.Instance), zap.Error(err))
		}
	}
}

// ---- backlog hints ----

// hintDoc advertises a worker backlog its owner cannot start alone. It
// lives in the lease partition, so every replica's lease watch sees it.
type hintDoc struct {
	ID         string `json:"id"`
	InstanceID string `json:"instanceId"`
	Type       string `json:"type"`
	Replica    string `json:"replica"`
	Slots      []int  `json:"slots"`
	Count      int    `json:"count"`
	Seq        int64  `json:"seq"`
	// Refused lists instances of the owner's slots whose pinned version
	// no dispatcher of the owner accepts (a rolling upgrade): the other
	// replicas try them with their own capability filters.
	Refused []string `json:"refused,omitempty"`
	// Parked counts the owner's items that no fetch of its own may take
	// (other tags, sessions owned elsewhere): only other replicas can run
	// them, so helpers scan for them even while busy with their own work.
	Parked int `json:"parked,omitempty"`
}

// maxHintRefused bounds the instances one hint lists as refused.
const maxHintRefused = 100

const typeHint = "backlog_hint"

func hintID(replica string) string { return "hint:" + replica }

// onLeaseDocument is leasestore's OnDocument: another replica's backlog
// hint makes this replica scan the hinted slots for worker items.
func (e *Engine) onLeaseDocument(raw []byte) {
	var h hintDoc
	if err := json.Unmarshal(raw, &h); err != nil || h.Type != typeHint || h.Replica == e.opts.ReplicaID {
		return
	}
	e.mu.Lock()
	prev, ok := e.hinted[h.Replica]
	if (!ok || h.Seq != prev.seq) && len(h.Refused) > 0 {
		// Instances the owner cannot run: a local fetch tries each with its
		// own filter (and keeps it aside as refused if that fails too).
		now := e.clk.Now()
		for _, inst := range h.Refused {
			if sl := slots.Of(inst); !e.isOwned(sl) {
				e.orch.Signal(sl, orchKey(inst), now)
			}
		}
	}
	if !ok || h.Seq != prev.seq {
		prev = hintSeen{slots: h.Slots, seq: h.Seq, seenAt: e.clk.Now(), scanned: prev.scanned, needed: h.Parked > 0}
		if prev.scanned == nil {
			prev.scanned = map[int]time.Time{}
		}
	}
	if len(h.Slots) == 0 {
		delete(e.hinted, h.Replica)
	} else {
		e.hinted[h.Replica] = prev
	}
	e.mu.Unlock()
	e.rescanHinted()
}

// rescanHinted signals a Scan of every slot another live replica hints
// at, when the last scan's findings there are all taken (a scan folds the
// slot's pending wakeups into itself) and it is at least 200 ms old. A
// hint whose sequence number has not changed for hintStale, or whose
// replica has no live heartbeat (it died without removing its hint), is
// not followed; it is kept, so that a re-read of the lease partition does
// not bring it back as new. An overflow hint (the owner has more due
// items than fetches, but could take them all) is followed only while
// this replica has no due work of its own: a busy helper's scans would
// take its fetches from its own backlog and gain nothing.
func (e *Engine) rescanHinted() {
	s := e.sess.Load()
	if s == nil {
		return
	}
	now := e.clk.Now()
	e.mu.Lock()
	if len(e.hinted) == 0 {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	busy := e.work.HasDue(e.ownedSet())
	live := map[string]bool{}
	for _, m := range s.store.Members() { // not under e.mu: the store calls into the engine under its lock
		live[m] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for r, h := range e.hinted {
		if now.Sub(h.seenAt) > hintStale || !live[r] || (busy && !h.needed) {
			continue
		}
		for _, s := range h.slots {
			if s < 0 || s >= slots.Count || e.isOwned(s) || now.Sub(h.scanned[s]) < 200*time.Millisecond {
				continue
			}
			if e.work.Pending(wakeup.SetOf(s)) == 0 {
				h.scanned[s] = now
				e.work.SignalScan(s, now)
			}
		}
	}
}

// workerBacklog counts due worker wakeups of owned slots and parked ones
// (which no local fetch could take), per slot. Parked wakeups older than
// parkRecheck go back to the hub, so a local fetch re-reads them: one that
// another replica took meanwhile is then forgotten.
func (e *Engine) workerBacklog() (per map[int]int, due, parked int) {
	owned := e.ownedSet()
	per = map[int]int{}
	for _, pw := range e.work.Snapshot().Pending {
		if pw.Due && owned.Contains(pw.Slot) {
			per[pw.Slot]++
			due++
		}
	}
	now := e.now()
	var back []parkedWI
	e.mu.Lock()
	for k, pw := range e.parked {
		if !owned.Contains(pw.slot) {
			continue
		}
		if pw.parkedAt < now-parkRecheck.Milliseconds() {
			back = append(back, pw)
			delete(e.parked, k)
			continue
		}
		per[pw.slot]++
		parked++
	}
	e.mu.Unlock()
	for _, pw := range back {
		e.work.Signal(pw.slot, pw.key, e.clk.Now())
	}
	return per, due, parked
}

// parkRecheck is how long a parked worker wakeup waits before a local
// fetch reads its document again.
const parkRecheck = 2 * time.Second

// checkHint publishes this replica's backlog hint while its due worker
// backlog exceeds what its worker dispatchers can start (or holds items
// none of them may take: other tags, sessions), and clears it once
// drained.
func (e *Engine) checkHint(ctx context.Context) {
	per, due, parked := e.workerBacklog()
	refused := e.refusedOwned()
	n := due + parked
	capacity := max(int(e.workPeak.Load()), 1)
	h := &e.hint
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case due > capacity || parked > 0 || len(refused) > 0:
		h.hot++
		h.cold = 0
	case n == 0:
		h.cold++
		h.hot = 0
	default:
		h.hot, h.cold = 0, 0
	}
	write := false
	var slots []int
	if h.hot >= 2 {
		for s := range per {
			slots = append(slots, s)
		}
		slices.Sort(slots)
		changed := !h.published || !slices.Equal(slots, h.slots) || !slices.Equal(refused, h.refused) || n > 2*h.count || 2*n < h.count ||
			(parked > 0) != h.parked ||
			e.clk.Now().Sub(h.lastWrite) >= hintRefresh
		write = changed && e.clk.Now().Sub(h.lastWrite) >= 250*time.Millisecond
	} else if h.cold >= 2 && h.published {
		write = true
		n = 0
	}
	if !write {
		return
	}
	h.seq++
	if h.hot < 2 {
		refused = nil // clearing the hint
	}
	doc := hintDoc{ID: hintID(e.opts.ReplicaID), InstanceID: e.leasePartition(), Type: typeHint, Replica: e.opts.ReplicaID,
		Slots: slots, Count: n, Seq: h.seq, Refused: refused}
	if h.hot >= 2 {
		doc.Parked = parked
	}
	if doc.Slots == nil {
		doc.Slots = []int{}
	}
	b, _ := json.Marshal(doc)
	if err := e.s.Upsert(ctx, doc.InstanceID, b); err != nil {
		if ctx.Err() == nil {
			e.log.Warn("backlog hint not written", zap.Error(err))
		}
		return
	}
	e.stats.hintsWritten.Add(1)
	h.lastWrite = e.clk.Now()
	h.published = len(slots) > 0 || len(refused) > 0
	h.slots, h.count, h.refused, h.parked = slots, n, refused, doc.Parked > 0
}

// refusedOwned lists (sorted, at most maxHintRefused) the instances of
// owned slots that a capability filter refused.
func (e *Engine) refusedOwned() []string {
	owned := e.ownedSet()
	var out []string
	e.mu.Lock()
	for inst, r := range e.refused {
		if owned.Contains(r.slot) {
			out = append(out, inst)
		}
	}
	e.mu.Unlock()
	slices.Sort(out)
	if len(out) > maxHintRefused {
		out = out[:maxHintRefused]
	}
	return out
}

// hintLoop runs the backlog-hint check every 100 ms while a hint is
// published or being considered, and otherwise sleeps until kicked.
func (e *Engine) hintLoop(s *session) {
	const every = 100 * time.Millisecond
	ctx := s.ctx
	for {
		e.hint.mu.Lock()
		active := e.hint.published || e.hint.hot > 0
		e.hint.mu.Unlock()
		if !active {
			select {
			case <-ctx.Done():
				return
			case <-s.hintKick:
			}
		}
		if !e.sleep(ctx, every) {
			return
		}
		e.checkHint(ctx)
	}
}

// clearHint deletes this replica's hint document (graceful stop).
func (e *Engine) clearHint(ctx context.Context) {
	e.hint.mu.Lock()
	had := e.hint.seq > 0
	e.hint.mu.Unlock()
	if !had {
		return
	}
	if err := e.s.Delete(ctx, e.leasePartition(), hintID(e.opts.ReplicaID)); err != nil {
		e.log.Info("backlog hint not removed", zap.Error(err))
	}
}

// wakeSlot makes the feed reader of slot read at once.
func (e *Engine) wakeSlot(slot int) {
	if s := e.sess.Load(); s != nil {
		s.proc.Wake(slots.Block{First: slot, Last: slot}.Range())
	}
}
