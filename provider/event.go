package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

// allSlots is every dispatch slot: fetches wait on all of them, since only
// owned (or hinted) slots are ever signalled.
var allSlots = wakeup.All(slots.Count)

// engine is the event-driven mode: the wakeup hubs, and while the replica
// takes part in dispatch a session (lease store, change-feed processor,
// background loops). The hubs exist from New; a session starts with the
// replica's first FetchOrchestrationItem and ends when no orchestration
// fetch has run for idleLeave (the runtime stopped dispatching) or at
// Close, handing the leases off either way. A Provider used only as a
// client therefore never takes slots it would not serve.
type engine struct {
	p   *Provider
	cfg Config
	log *zap.Logger
	per int // slots per lease

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
	released  map[string]int64     // orchestration locks we released: instance -> lockedUntil
	wreleased map[string]int64     // work-item locks we released: key -> lockedUntil
	parked    map[string]parkedWI  // worker wakeups no fetch so far could take (tag, session)
	refused   map[string]refusedOI // orchestration wakeups refused by a capability filter

	// Worker dispatch capacity, for backlog hints.
	workWaiting atomic.Int32 // FetchWorkItem calls in flight
	workPeak    atomic.Int32 // their high-water mark
	hint        hintState
	hinted      map[string]hintSeen // other replicas' hints: replica -> latest

	stats engineStats
	// heads are the orchestrator messages the feed delivered that no
	// fetch has taken yet (lockFromHeads).
	heads *headIndex
	// holdIntents makes the feed handler refuse batches holding an outbox
	// intent (tests: a crash between a commit and its delivery).
	holdIntents atomic.Bool
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

// idleLeave is how long a replica keeps its leases with no orchestration
// fetch running: then it hands them off (its dispatchers were stopped) and
// rejoins at the next fetch.
const idleLeave = 5 * time.Second

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
	staleCache     atomic.Int64 // locks from a remembered instance document that failed
	headLocks      atomic.Int64 // locks taken from feed heads (lockFromHeads)
	staleHeads     atomic.Int64 // locks from feed heads that failed
	bareLocks      atomic.Int64 // locks from complete heads of a new instance, without the turn query
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
	seq       int64
	hot       int // consecutive checks over capacity
	cold      int // consecutive checks with nothing due
	lastWrite time.Time
}

func defaultReplicaID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == '?' || r == '#' || unicode.IsControl(r) || unicode.IsSpace(r) {
			return '-'
		}
		return r
	}, host)
	if len(host) > 100 {
		host = host[:100]
	}
	if host == "" {
		host = "replica"
	}
	return fmt.Sprintf("%s-%08x", host, rand.Uint32())
}

func newEngine(p *Provider, cfg Config) (*engine, error) {
	b := cfg.LeaseBlocks
	if b < 1 || b > slots.Count || b&(b-1) != 0 {
		return nil, fmt.Errorf("provider: LeaseBlocks %d is not a power of two from 1 to %d", b, slots.Count)
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = defaultReplicaID()
	}
	e := &engine{p: p, cfg: cfg, log: p.log.With(zap.String("replica", cfg.ReplicaID)), per: slots.Count / b,
		blocked: map[string]int{}, released: map[string]int64{}, wreleased: map[string]int64{}, parked: map[string]parkedWI{},
		refused: map[string]refusedOI{}, hinted: map[string]hintSeen{}, joinCh: make(chan struct{})}
	if !cfg.noHeads {
		e.heads = newHeadIndex(e.isOwned)
	}
	var err error
	if e.orch, err = wakeup.New(wakeup.Options{MaxPendingPerSlot: orchSlotBound}); err != nil {
		return nil, err
	}
	e.work, _ = wakeup.New(wakeup.Options{MaxPendingPerSlot: workSlotBound})
	e.maint, _ = wakeup.New(wakeup.Options{})
	return e, nil
}

func (e *engine) leasePartition() string {
	if e.cfg.leasePartition != "" {
		return e.cfg.leasePartition
	}
	return leasestore.DefaultPartitionKeyValue
}

// isJoined reports whether the replica takes part in dispatch now.
func (e *engine) isJoined() bool { return e.sess.Load() != nil }

// isOwned reports whether this replica holds the lease of slot.
func (e *engine) isOwned(slot int) bool {
	s := e.sess.Load()
	return s != nil && s.owned.Load().Contains(slot)
}

// ownedSet returns the slots owned now.
func (e *engine) ownedSet() wakeup.Set {
	if s := e.sess.Load(); s != nil {
		return *s.owned.Load()
	}
	return wakeup.Set{}
}

// join starts a session unless one runs; it never blocks on I/O. It
// returns nil after Close.
func (e *engine) join() *session {
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
func (e *engine) joined() <-chan struct{} {
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	return e.joinCh
}

func (e *engine) startSession() (*session, error) {
	s := &session{catchKick: make(chan struct{}, 1), hintKick: make(chan struct{}, 1), ready: make(chan struct{}), shared: make(chan struct{}),
		unpinned: map[string]wakeup.Set{}}
	s.owned.Store(&wakeup.Set{})
	so := leasestore.Options{
		ReplicaID:         e.cfg.ReplicaID,
		PartitionKey:      "/instanceId",
		PartitionKeyValue: e.leasePartition(),
		Ranges:            slots.Ranges(e.cfg.LeaseBlocks),
		LeaseExpiry:       e.cfg.LeaseExpiry,
		HeartbeatInterval: e.cfg.HeartbeatInterval,
		WatchActiveDelay:  e.cfg.WatchActiveDelay,
		WatchIdleCeiling:  e.cfg.WatchIdleCeiling,
		Logger:            e.log,
		OnChange:          func(ev leasestore.Event) { e.onLeaseChange(s, ev) },
		OnDocument:        e.onLeaseDocument,
	}
	st, err := leasestore.New(e.p.s.c, so)
	if err != nil {
		return nil, err
	}
	proc, err := changefeed.New(e.p.s.c, st, e.handle, changefeed.Options{
		ActiveDelay:        e.cfg.FeedActiveDelay,
		IdleCeiling:        max(e.cfg.FeedIdleCeiling, e.cfg.FeedActiveDelay),
		WarmHold:           e.cfg.FeedWarmHold,
		StartFrom:          changefeed.StartFromNow(),
		OnPositioned:       func(id string) { e.onPositioned(s, id) },
		Filter:             relevantDoc,
		CheckpointInterval: checkpointInterval,
		Logger:             e.log,
	})
	if err != nil {
		return nil, err
	}
	s.store, s.proc = st, proc
	e.lastOrchFetch.Store(time.Now().UnixMilli())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ctx := s.ctx
	timer := time.AfterFunc(readyWait, func() { s.readyOnce.Do(func() { close(s.ready) }) })
	s.goLoop(func() {
		<-ctx.Done()
		timer.Stop()
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
	return s, nil
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
func (e *engine) leave(s *session, graceful bool) {
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
		cancel()
	}
	s.cancel()
	s.wg.Wait()
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
	e.hint.published, e.hint.slots, e.hint.count, e.hint.hot, e.hint.cold = false, nil, 0, 0, 0
	e.hint.mu.Unlock()
}

// idleLoop leaves the session once no orchestration fetch has run for
// idleLeave (or the test override).
func (e *engine) idleLoop(s *session) {
	for clock.Sleep(s.ctx, time.Second) {
		if e.orchInFlight.Load() > 0 {
			continue
		}
		if time.Since(time.UnixMilli(e.lastOrchFetch.Load())) < e.cfg.idleLeave {
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

// close hands the leases off (graceful stop) and stops everything.
func (e *engine) close() {
	if !e.closed.CompareAndSwap(false, true) {
		return
	}
	if s := e.sess.Load(); s != nil {
		e.leave(s, true)
	}
	e.wg.Wait()
	e.closeHubs()
}

// crash stops everything without releasing leases or removing the hint:
// to the other replicas this replica has died (tests).
func (e *engine) crash() {
	if !e.closed.CompareAndSwap(false, true) {
		return
	}
	if s := e.sess.Load(); s != nil {
		e.leave(s, false)
	}
	e.wg.Wait()
	e.closeHubs()
}

func (e *engine) closeHubs() {
	e.orch.Close()
	e.work.Close()
	e.maint.Close()
}

// blockSlots returns the slots of lease i.
func (e *engine) blockSlots(i int) wakeup.Set {
	return wakeup.Range(i*e.per, (i+1)*e.per-1)
}

// onLeaseChange is leasestore's OnChange: called with the store's lock
// held, so it only updates memory and kicks goroutines.
func (e *engine) onLeaseChange(s *session, ev leasestore.Event) {
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
func lockKey(instance string) string { return "l" + instance }
func workKey(instance, id string) string {
	return strconv.Itoa(len(instance)) + ":" + instance + id
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

// queueHead is what signalling needs of a queue document.
type queueHead struct {
	ID           string `json:"id"`
	InstanceID   string `json:"instanceId"`
	Type         string `json:"type"`
	DispatchSlot int    `json:"dispatchSlot"`
	VisibleAt    int64  `json:"visibleAt"`
	LockedUntil  int64  `json:"lockedUntil"`
	EnqueuedAt   int64  `json:"enqueuedAt"`
}

// byEnqueued sorts query results oldest first, so that wakeups signalled
// from one query keep FIFO order.
func byEnqueued[T any](rows []T, at func(*T) int64) {
	sort.SliceStable(rows, func(i, j int) bool { return at(&rows[i]) < at(&rows[j]) })
}

// signalQueue turns a queue document's current state into a wakeup on the
// local hubs, when its slot is owned here (or always, with force).
func (e *engine) signalQueue(q queueHead, force bool) {
	if q.DispatchSlot < 0 || q.DispatchSlot >= slots.Count || (!force && !e.isOwned(q.DispatchSlot)) {
		return
	}
	now := nowMS()
	switch q.Type {
	case typeOrchQueue:
		if q.LockedUntil > now {
			e.orch.SignalAt(q.DispatchSlot, lockKey(q.InstanceID), msTime(q.LockedUntil))
			return
		}
		e.orch.Signal(q.DispatchSlot, orchKey(q.InstanceID), msTime(q.VisibleAt))
	case typeWorkQueue:
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

// noteQueueDocs signals documents this process just made visible.
func (p *Provider) noteQueueDocs(docs ...queueDoc) {
	if p.ev == nil || !p.ev.isJoined() {
		return
	}
	for _, d := range docs {
		p.ev.signalQueue(queueHead{ID: d.ID, InstanceID: d.InstanceID, Type: d.Type, DispatchSlot: d.DispatchSlot,
			VisibleAt: d.VisibleAt, LockedUntil: d.LockedUntil}, false)
	}
}

// lockedOrch records an orchestration lock this process took: its expiry
// is signalled, and work that waited for it may go.
func (e *engine) lockedOrch(instance string, until int64, more bool) {
	slot := slots.Of(instance)
	e.mu.Lock()
	if more {
		e.blocked[instance] = slot // the rest goes once this turn is done
	}
	// A blocked mark stays: work signalled while this lock was being
	// taken may not be in the turn; the release signals it.
	delete(e.released, instance)
	e.mu.Unlock()
	if e.isOwned(slot) {
		e.orch.SignalAt(slot, lockKey(instance), msTime(until))
	}
}

// unlockedOrch records that a lock on instance (expiring at until) was
// released by this process: its expiry wakeup is void, and work that
// arrived while it was held may go now.
func (e *engine) unlockedOrch(instance string, until int64) {
	slot := slots.Of(instance)
	e.mu.Lock()
	e.released[instance] = until
	_, wasBlocked := e.blocked[instance]
	delete(e.blocked, instance)
	e.mu.Unlock()
	if wasBlocked && e.isOwned(slot) {
		e.orch.Signal(slot, orchKey(instance), time.Now())
	}
}

// foundLocked records an instance a fetch found locked: it is retried when
// the lock expires, or as soon as its holder releases it.
func (e *engine) foundLocked(slot int, instance string, until int64) {
	e.mu.Lock()
	rel, ok := e.released[instance]
	gone := ok && rel >= until // released by this process meanwhile
	if !gone {
		e.blocked[instance] = slot
	}
	e.mu.Unlock()
	if gone {
		e.orch.Signal(slot, orchKey(instance), time.Now())
		return
	}
	e.orch.SignalAt(slot, lockKey(instance), msTime(until))
}

// instanceChanged reacts to an instance document seen on the feed.
func (e *engine) instanceChanged(d *instanceDoc) {
	slot := slots.Of(d.InstanceID)
	if !e.isOwned(slot) {
		return
	}
	now := nowMS()
	if !d.lockHeld(now) {
		e.mu.Lock()
		_, wasBlocked := e.blocked[d.InstanceID]
		delete(e.blocked, d.InstanceID)
		e.mu.Unlock()
		if wasBlocked {
			e.orch.Signal(slot, orchKey(d.InstanceID), time.Now())
		}
	}
	if d.lockHeld(now) {
		// A dispatcher that accepts its version runs it: a message left
		// after that turn is refused (and advertised) afresh.
		e.mu.Lock()
		delete(e.refused, d.InstanceID)
		e.mu.Unlock()
	}
	if d.Publish != nil {
		e.maint.Signal(slot, d.InstanceID, msTime(d.Publish.At+durMS(e.p.cfg.ReconcileAge)))
	}
	if d.Deleting != "" {
		e.maint.Signal(slot, d.InstanceID, msTime(d.DeletingAt+e.p.deletionTimeout()))
	}
}

// checkpointInterval is the least time between two checkpoints of a
// lease: a checkpoint is a write (about 5 RU), and handling a document
// twice after a hand-over is harmless (wakeups coalesce, deliveries are
// idempotent).
const checkpointInterval = 5 * time.Second

// relevantDoc is the change-feed filter: only queue documents, outbox
// intents and instance documents matter to the handler. History, KV,
// execution records and everything in the lease partition (leases,
// heartbeats, hints, whose writes would otherwise keep the reader of their
// range busy) are skipped without a handler call or a checkpoint.
func relevantDoc(raw json.RawMessage) bool {
	var h struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return false
	}
	switch h.Type {
	case typeOrchQueue, typeWorkQueue, typeIntent, typeInstance:
		return true
	}
	return false
}

var errHeld = errors.New("provider: intent delivery held (test)")

// feedDoc is the union of what the handler reads of any document.
type feedDoc struct {
	queueHead
	LockToken string         `json:"lockToken"`
	Publish   *publishRecord `json:"publish"`
	Deleting  string         `json:"deleting"`
}

// handle is the change-feed handler: every changed document of an owned
// slot block becomes a wakeup, a delivery or a deferred check.
func (e *engine) handle(ctx context.Context, b changefeed.Batch) error {
	for _, raw := range b.Documents {
		var h feedDoc
		if err := json.Unmarshal(raw, &h); err != nil {
			continue // not ours
		}
		switch h.Type {
		case typeOrchQueue:
			var q queueDoc
			if err := json.Unmarshal(raw, &q); err == nil {
				e.heads.note(q, nowMS()) // kept only if the slot is owned
			} else {
				e.heads.missed(h.InstanceID)
			}
			e.signalQueue(h.queueHead, false)
		case typeWorkQueue:
			e.signalQueue(h.queueHead, false)
		case typeInstance:
			var d instanceDoc
			if err := json.Unmarshal(raw, &d); err == nil {
				e.instanceChanged(&d)
			}
		case typeIntent:
			if e.holdIntents.Load() {
				return errHeld
			}
			var in intentDoc
			if err := json.Unmarshal(raw, &in); err != nil {
				continue
			}
			if !e.isOwned(slots.Of(in.InstanceID)) {
				continue
			}
			if err := e.p.outbox.deliver(ctx, in); err != nil {
				if ctx.Err() != nil || retryableStatus(statusOf(err)) || statusOf(err) == 0 {
					return err // the batch is offered again
				}
				e.log.Warn("outbox intent left for the safety sweep", zap.String("source", in.InstanceID),
					zap.String("target", in.TargetInstance), zap.Int("status", statusOf(err)))
				continue
			}
			e.stats.feedDelivered.Add(1)
		}
	}
	return nil
}

// slotSetClause renders a set of slots as a query condition over
// c.dispatchSlot: one range per contiguous run.
func slotSetClause(s wakeup.Set) (string, []azcosmos.QueryParameter) {
	var parts []string
	var params []azcosmos.QueryParameter
	run := -1
	flush := func(lo, hi int) {
		n := itoa(len(params) / 2)
		parts = append(parts, "(c.dispatchSlot >= @lo"+n+" AND c.dispatchSlot <= @hi"+n+")")
		params = append(params, param("@lo"+n, lo), param("@hi"+n, hi))
	}
	prev := -2
	for sl := range s.All() {
		if sl >= slots.Count {
			break
		}
		if sl != prev+1 {
			if run >= 0 {
				flush(run, prev)
			}
			run = sl
		}
		prev = sl
	}
	if run >= 0 {
		flush(run, prev)
	}
	if len(parts) == 0 {
		return "false", nil
	}
	if len(parts) == 1 && parts[0] == "(c.dispatchSlot >= @lo0 AND c.dispatchSlot <= @hi0)" && s.Len() == slots.Count {
		return "true", nil
	}
	return "(" + strings.Join(parts, " OR ") + ")", params
}

// catchUp signals every queue document of the slots: the backlog of slots
// newly owned (one query for all slots acquired together, instead of a
// scan per slot). It returns the instances it found orchestrator messages
// of.
func (e *engine) catchUp(ctx context.Context, slots wakeup.Set) ([]string, error) {
	clause, params := slotSetClause(slots)
	rows, err := queryAll[queueHead](ctx, e.p.s, nil,
		"SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt FROM c WHERE (c.type = 'orch_queue' OR c.type = 'worker_queue') AND "+clause,
		params...)
	if err != nil {
		return nil, err
	}
	byEnqueued(rows, func(r *queueHead) int64 { return r.EnqueuedAt })
	e.stats.catchups.Add(1)
	var orch []string
	for _, r := range rows {
		if r.Type == typeOrchQueue {
			orch = append(orch, r.InstanceID)
		}
		e.signalQueue(r, false)
	}
	return orch, nil
}

// kickHint wakes the backlog-hint check of the running session.
func (e *engine) kickHint() {
	if s := e.sess.Load(); s != nil {
		signalCh(s.hintKick)
	}
}

// onPositioned is the processor's OnPositioned: the reader of a lease has
// fixed its starting point, so a catch-up of the lease's slots now covers
// everything written before it.
func (e *engine) onPositioned(s *session, leaseID string) {
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

func (e *engine) catchupLoop(s *session) {
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
		if !clock.Sleep(ctx, delay) {
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
func (e *engine) checkReady(s *session) {
	s.mu.Lock()
	pending := !s.catchup.Intersect(*s.owned.Load()).IsEmpty()
	s.mu.Unlock()
	if pending {
		return
	}
	members := max(len(s.store.Members()), 1)
	fair := max(e.cfg.LeaseBlocks/members, 1)
	if len(s.store.Owned()) >= fair {
		s.readyOnce.Do(func() { close(s.ready) })
		s.sharedOnce.Do(func() { close(s.shared) })
	}
}

// awaitShare waits for the session's first lease share and its catch-up
// like awaitReady, but bounded by shareWait instead of readyWait (tests
// on a loaded machine).
func (s *session) awaitShare(ctx context.Context) {
	t := time.NewTimer(shareWait)
	defer t.Stop()
	select {
	case <-s.shared:
	case <-t.C:
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
}

// shareWait bounds awaitShare: checkReady runs after each catch-up, so a
// share reached only by the others' leaving or dying is not noticed.
const shareWait = 30 * time.Second

// awaitReady waits (bounded by readyWait) for the session's first lease
// share and its catch-up.
func (s *session) awaitReady(ctx context.Context) {
	select {
	case <-s.ready:
	case <-ctx.Done():
	case <-s.ctx.Done():
	}
}

// sweepRow is one result of the safety sweep.
type sweepRow struct {
	queueHead
	TargetInstance string `json:"targetInstanceId"`
	Payload        string `json:"payload"`
	IdempotencyKey string `json:"idempotencyKey"`
	CreatedAt      int64  `json:"createdAt"`
}

// sweepOnce is the safety net, one cross-partition query: visible unlocked
// queue documents of owned slots, outbox intents older than ReconcileAge,
// and instances with a stale publication or deletion.
func (e *engine) sweepOnce(ctx context.Context) {
	e.stats.sweeps.Add(1)
	now := nowMS()
	cut := now - durMS(e.p.cfg.ReconcileAge)
	dcut := now - e.p.deletionTimeout()
	clause, params := slotSetClause(e.ownedSet())
	params = append(params, param("@now", now), param("@cut", cut), param("@dcut", dcut))
	rows, err := queryAll[sweepRow](ctx, e.p.s, nil,
		"SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt, c.targetInstanceId, c.payload, c.idempotencyKey, c.createdAt FROM c WHERE "+
			"((c.type = 'orch_queue' OR c.type = 'worker_queue') AND c.visibleAt <= @now AND c.lockedUntil <= @now AND "+clause+") OR "+
			"(c.type = 'outbox_intent' AND c.createdAt <= @cut) OR "+
			"(c.type = 'instance' AND ((IS_DEFINED(c.publish) AND c.publish.at <= @cut) OR (IS_DEFINED(c.deleting) AND c.deletingAt <= @dcut)))",
		params...)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("safety sweep failed", zap.Int("status", statusOf(err)), zap.Error(err))
		}
		return
	}
	byEnqueued(rows, func(r *sweepRow) int64 { return r.EnqueuedAt })
	for _, r := range rows {
		switch r.Type {
		case typeOrchQueue, typeWorkQueue:
			e.signalQueue(r.queueHead, false)
		case typeIntent:
			in := intentDoc{ID: r.ID, InstanceID: r.InstanceID, Type: typeIntent, TargetInstance: r.TargetInstance,
				Payload: r.Payload, IdempotencyKey: r.IdempotencyKey, CreatedAt: r.CreatedAt}
			if err := e.p.outbox.deliver(ctx, in); err != nil {
				e.log.Info("outbox intent still undelivered", zap.String("source", in.InstanceID), zap.Int("status", statusOf(err)))
				continue
			}
			e.stats.sweepDelivered.Add(1)
		case typeInstance:
			e.finishInstance(ctx, r.InstanceID)
		}
	}
	e.pruneReleased(now)
}

func (e *engine) sweepLoop(s *session) {
	ctx := s.ctx
	for {
		d := e.cfg.SafetySweepInterval
		d -= time.Duration(rand.Int64N(int64(d)/10 + 1)) // jitter: replicas drift apart
		if !clock.Sleep(ctx, d) {
			return
		}
		e.sweepOnce(ctx)
	}
}

// pruneReleased forgets released locks whose expiry has long passed, and
// parked wakeups older than a minute (the sweep re-finds them).
func (e *engine) pruneReleased(now int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, until := range e.released {
		if until < now-60_000 {
			delete(e.released, k)
		}
	}
	for k, until := range e.wreleased {
		if until < now-60_000 {
			delete(e.wreleased, k)
		}
	}
	for k, pw := range e.parked {
		if pw.parkedAt < now-60_000 {
			delete(e.parked, k)
		}
	}
	for k, r := range e.refused {
		if r.at < now-60_000 {
			delete(e.refused, k)
		}
	}
	for r, h := range e.hinted {
		if h.seenAt.UnixMilli() < now-60_000 {
			delete(e.hinted, r) // a re-read brings it back only while its replica lives
		}
	}
}

// finishInstance publishes a committed large turn or purges a marked
// instance whose writer died (deferred checks and the safety sweep).
func (e *engine) finishInstance(ctx context.Context, instance string) {
	d, err := e.p.readInstance(ctx, instance)
	if err != nil || d == nil {
		return
	}
	now := nowMS()
	if d.Deleting != "" {
		if d.DeletingAt <= now-e.p.deletionTimeout() {
			if _, err := e.p.purge(ctx, instance, nil); err != nil && ctx.Err() == nil {
				e.log.Warn("deletion sweep failed", zap.String("instance", instance), zap.Error(err))
			}
		}
		return
	}
	if d.Publish != nil && d.Publish.At <= now-durMS(e.p.cfg.ReconcileAge) {
		if err := e.p.publish(ctx, instance, d.Publish, d.ETag); err != nil && ctx.Err() == nil {
			e.log.Warn("publication sweep failed", zap.String("instance", instance), zap.Error(err))
		}
	}
}

// maintLoop runs the deferred checks signalled by the feed handler.
func (e *engine) maintLoop(ctx context.Context) {
	for {
		w, ok := e.maint.Wait(ctx, allSlots, time.Hour)
		if ctx.Err() != nil || e.closed.Load() {
			return
		}
		if !ok {
			continue
		}
		e.finishInstance(ctx, w.Instance)
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
}

// maxHintRefused bounds the instances one hint lists as refused.
const maxHintRefused = 100

const typeHint = "backlog_hint"

func hintID(replica string) string { return "hint:" + replica }

// onLeaseDocument is leasestore's OnDocument: another replica's backlog
// hint makes this replica scan the hinted slots for worker items.
func (e *engine) onLeaseDocument(raw []byte) {
	var h hintDoc
	if err := json.Unmarshal(raw, &h); err != nil || h.Type != typeHint || h.Replica == e.cfg.ReplicaID {
		return
	}
	e.mu.Lock()
	prev, ok := e.hinted[h.Replica]
	if (!ok || h.Seq != prev.seq) && len(h.Refused) > 0 {
		// Instances the owner cannot run: a local fetch tries each with its
		// own filter (and keeps it aside as refused if that fails too).
		now := time.Now()
		for _, inst := range h.Refused {
			if sl := slots.Of(inst); !e.isOwned(sl) {
				e.orch.Signal(sl, orchKey(inst), now)
			}
		}
	}
	if !ok || h.Seq != prev.seq {
		prev = hintSeen{slots: h.Slots, seq: h.Seq, seenAt: time.Now(), scanned: prev.scanned}
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
// not bring it back as new.
func (e *engine) rescanHinted() {
	s := e.sess.Load()
	if s == nil {
		return
	}
	now := time.Now()
	e.mu.Lock()
	if len(e.hinted) == 0 {
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	live := map[string]bool{}
	for _, m := range s.store.Members() { // not under e.mu: the store calls into the engine under its lock
		live[m] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for r, h := range e.hinted {
		if now.Sub(h.seenAt) > hintStale || !live[r] {
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
func (e *engine) workerBacklog() (per map[int]int, due, parked int) {
	owned := e.ownedSet()
	per = map[int]int{}
	for _, pw := range e.work.Snapshot().Pending {
		if pw.Due && owned.Contains(pw.Slot) {
			per[pw.Slot]++
			due++
		}
	}
	now := nowMS()
	var back []parkedWI
	e.mu.Lock()
	for k, pw := range e.parked {
		if !owned.Contains(pw.slot) {
			continue
		}
		if pw.parkedAt < now-durMS(parkRecheck) {
			back = append(back, pw)
			delete(e.parked, k)
			continue
		}
		per[pw.slot]++
		parked++
	}
	e.mu.Unlock()
	for _, pw := range back {
		e.work.Signal(pw.slot, pw.key, time.Now())
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
func (e *engine) checkHint(ctx context.Context) {
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
			time.Since(h.lastWrite) >= hintRefresh
		write = changed && time.Since(h.lastWrite) >= 250*time.Millisecond
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
	doc := hintDoc{ID: hintID(e.cfg.ReplicaID), InstanceID: e.leasePartition(), Type: typeHint, Replica: e.cfg.ReplicaID,
		Slots: slots, Count: n, Seq: h.seq, Refused: refused}
	if doc.Slots == nil {
		doc.Slots = []int{}
	}
	b, _ := json.Marshal(doc)
	if _, err := e.p.s.c.UpsertItem(ctx, pk(doc.InstanceID), b, nil); err != nil {
		if ctx.Err() == nil {
			e.log.Warn("backlog hint not written", zap.Error(err))
		}
		return
	}
	e.stats.hintsWritten.Add(1)
	h.lastWrite = time.Now()
	h.published = len(slots) > 0 || len(refused) > 0
	h.slots, h.count, h.refused = slots, n, refused
}

// refusedOwned lists (sorted, at most maxHintRefused) the instances of
// owned slots that a capability filter refused.
func (e *engine) refusedOwned() []string {
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
func (e *engine) hintLoop(s *session) {
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
		if !clock.Sleep(ctx, every) {
			return
		}
		e.checkHint(ctx)
	}
}

// clearHint deletes this replica's hint document (graceful stop).
func (e *engine) clearHint(ctx context.Context) {
	e.hint.mu.Lock()
	had := e.hint.seq > 0
	e.hint.mu.Unlock()
	if !had {
		return
	}
	_, err := e.p.s.c.DeleteItem(ctx, pk(e.leasePartition()), hintID(e.cfg.ReplicaID), nil)
	if err != nil && !isStatus(err, http.StatusNotFound) {
		e.log.Info("backlog hint not removed", zap.Error(err))
	}
}

// wakeSlot makes the feed reader of slot read at once.
func (e *engine) wakeSlot(slot int) {
	if s := e.sess.Load(); s != nil {
		s.proc.Wake(epk.SlotRange(slot, slot, slots.Count))
	}
}
