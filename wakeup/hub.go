package wakeup

import (
	"cmp"
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/durafeed/durafeed/slots"
)

// DefaultMaxPendingPerSlot is the default bound on what one slot remembers
// before it collapses into a Scan wakeup.
const DefaultMaxPendingPerSlot = 1024

// Options configures a Hub. The zero value is valid: every field has a
// documented default.
type Options struct {
	// Slots is the number of slots, in [1, MaxSlots]; default slots.Count
	// (durafeed's 256 dispatch slots). Slots passed to the hub must lie in [0, Slots).
	Slots int
	// Clock is the time source; default SystemClock.
	Clock Clock
	// MaxPendingPerSlot bounds the times a slot remembers: one per pending
	// instance wakeup plus one per follow-up time it carries. The signal
	// that would exceed the bound collapses the slot into a single Scan
	// wakeup (see the package documentation); default
	// DefaultMaxPendingPerSlot (1024), and it must not be negative.
	MaxPendingPerSlot int
	// MaxPending bounds the times all slots together remember, counted
	// as for MaxPendingPerSlot: the signal that would exceed it collapses
	// the slot remembering the most into a single Scan wakeup, so a hub's
	// memory does not grow with a backlog. A taker that scans a slot
	// should signal no more than MaxPending divided by twice the number of
	// slots it follows, or its own signals may collapse other slots at
	// once. Default 0: no bound beyond MaxPendingPerSlot; it must not be
	// negative.
	MaxPending int
}

// Kind says what a Wakeup asks its taker to do.
type Kind uint8

const (
	// Instance asks the taker to lock one instance directly (the provider's
	// lockInstance): Wakeup.Instance may have work visible from
	// Wakeup.VisibleAt on.
	Instance Kind = iota + 1
	// Scan asks the taker to run the candidate query for the whole slot:
	// the hub no longer knows which instances have work there.
	Scan
)

// String returns "instance" or "scan".
func (k Kind) String() string {
	switch k {
	case Instance:
		return "instance"
	case Scan:
		return "scan"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Wakeup is one unit of work taken from a hub: an instance to lock, or a
// slot to scan.
type Wakeup struct {
	// Kind is Instance or Scan.
	Kind Kind
	// Slot is the slot the wakeup belongs to.
	Slot int
	// Instance is the instance id; empty for Scan.
	Instance string
	// VisibleAt is the earliest visibility time signalled for the instance
	// (or the slot), at most the time the wakeup was taken.
	VisibleAt time.Time

	// key and seq are the wakeup's place in line (the time it became due,
	// then arrival order); Requeue uses them to restore that place.
	key time.Time
	seq uint64
}

// PendingWakeup is one pending wakeup in a State.
type PendingWakeup struct {
	Wakeup
	// Due reports whether the wakeup can be taken now.
	Due bool
	// Later lists the follow-up times (after VisibleAt) the wakeup carries:
	// once taken, it is re-armed at the first of them still in the future.
	Later []time.Time
}

// State is a copy of a hub's contents, for debugging and metrics.
type State struct {
	// Now is the hub clock's time when the copy was taken.
	Now time.Time
	// Waiters is the number of blocked Wait calls.
	Waiters int
	// Collapses counts slots collapsed into a Scan by overflow.
	Collapses uint64
	// Handoffs counts wakeups handed directly to a blocked waiter.
	Handoffs uint64
	// Pending lists every pending wakeup, by slot and then in the order
	// they would be taken.
	Pending []PendingWakeup
}

// Hub holds pending wakeups per slot and hands them out to waiters. Create
// one with New; it is safe for concurrent use, and Close releases its timer
// goroutine.
type Hub struct {
	clock      Clock
	nslots     int
	nwords     int
	maxPending int
	maxTotal   int
	onBlock    func() // test hook: called after a Wait has blocked

	mu        sync.Mutex
	slots     []slotState
	due       Set       // slots whose due heap is not empty
	timers    entryHeap // future entries, by visibility time
	waiters   []*waiter // blocked Wait calls, oldest first
	free      []*entry  // recycled entries
	seq       uint64
	total     int // the slots' weights summed
	collapses uint64
	handoffs  uint64
	closed    bool
	started   bool      // the timer goroutine runs
	armed     time.Time // deadline the timer goroutine sleeps until; zero: none
	kick      chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup
}

// slotState holds either instance entries or a single scan entry.
type slotState struct {
	entries map[string]*entry
	scan    *entry
	dueq    entryHeap
	weight  int // entries plus their follow-up times (a scan counts 1)
}

// entry is one pending wakeup.
type entry struct {
	kind      Kind
	slot      int
	instance  string
	visibleAt time.Time   // earliest signalled time
	later     []time.Time // sorted distinct follow-up times > visibleAt; a scan keeps none
	key       time.Time   // due: when it became due; future: visibleAt
	seq       uint64
	due       bool
	idx       int
}

func (e *entry) before(o *entry) bool { return before(e.key, e.seq, o.key, o.seq) }

func before(k1 time.Time, s1 uint64, k2 time.Time, s2 uint64) bool {
	if c := k1.Compare(k2); c != 0 {
		return c < 0
	}
	return s1 < s2
}

type waiter struct {
	set       Set
	ch        chan struct{} // receives once the wakeup is handed over
	w         Wakeup
	delivered bool
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan struct{}, 1)} }}

// New returns a hub configured by opts, or an error for invalid options.
func New(opts Options) (*Hub, error) {
	if opts.Slots == 0 {
		opts.Slots = slots.Count
	}
	if opts.Slots < 1 || opts.Slots > MaxSlots {
		return nil, fmt.Errorf("wakeup: Options.Slots %d outside [1, %d]", opts.Slots, MaxSlots)
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	if opts.MaxPendingPerSlot == 0 {
		opts.MaxPendingPerSlot = DefaultMaxPendingPerSlot
	}
	if opts.MaxPendingPerSlot < 0 {
		return nil, fmt.Errorf("wakeup: Options.MaxPendingPerSlot %d is negative", opts.MaxPendingPerSlot)
	}
	if opts.MaxPending < 0 {
		return nil, fmt.Errorf("wakeup: Options.MaxPending %d is negative", opts.MaxPending)
	}
	return &Hub{
		clock:      opts.Clock,
		nslots:     opts.Slots,
		nwords:     (opts.Slots + 63) / 64,
		maxPending: opts.MaxPendingPerSlot,
		maxTotal:   opts.MaxPending,
		slots:      make([]slotState, opts.Slots),
		kick:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}, nil
}

func (h *Hub) checkSlot(slot int) {
	if slot < 0 || slot >= h.nslots {
		panic(fmt.Sprintf("wakeup: slot %d outside [0, %d)", slot, h.nslots))
	}
}

// Signal records that instance, in slot, may have work visible from
// visibleAt on. Signals for the same (slot, instance) coalesce into one
// pending wakeup carrying the earliest visibleAt; a later visibleAt that is
// still in the future is kept as a follow-up time, because taking the
// wakeup only covers what is visible when it is taken. A visibleAt in the
// future makes the wakeup takeable exactly then. Signal never blocks on
// waiters; if a blocked Wait covers the slot, the oldest such waiter gets
// the wakeup. Signal after Close does nothing; a slot outside [0, Slots)
// panics.
func (h *Hub) Signal(slot int, instance string, visibleAt time.Time) {
	h.signal(slot, Instance, instance, visibleAt)
}

// SignalAt schedules a recheck of instance at time at: a lock expiry (a
// crashed holder's instance must be retried once its lock lapses), a
// delayed retry or an abandon delay. It is Signal under the name that says
// why; the two coalesce with each other.
func (h *Hub) SignalAt(slot int, instance string, at time.Time) {
	h.signal(slot, Instance, instance, at)
}

// SignalScan asks for a scan of the whole slot at time at, for instance
// when the slot is newly owned and its backlog was never signalled. A scan
// subsumes the slot's instance wakeups: they are folded into it.
func (h *Hub) SignalScan(slot int, at time.Time) {
	h.signal(slot, Scan, "", at)
}

func (h *Hub) signal(slot int, kind Kind, instance string, t time.Time) {
	h.checkSlot(slot)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	now := h.clock.Now()
	h.promote(now)
	h.seq++
	h.claim(slot, kind, instance, t, now, h.seq, now)
	h.dispatchSlot(slot, now)
}

// Requeue puts back a wakeup its taker could not use, in its former place
// in line (ahead of wakeups that became due after it), merged with
// whatever was signalled for it meanwhile. A taker that could not use a
// wakeup because the instance is busy should rather SignalAt the time to
// retry, or it will take the same wakeup again at once. Requeue of a
// zero Wakeup, or after Close, does nothing.
func (h *Hub) Requeue(w Wakeup) {
	if w.Kind != Instance && w.Kind != Scan {
		return
	}
	h.checkSlot(w.Slot)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	now := h.clock.Now()
	h.promote(now)
	h.requeueLocked(w, now)
}

func (h *Hub) requeueLocked(w Wakeup, now time.Time) {
	key, seq := w.key, w.seq
	if seq == 0 { // not taken from a hub: an ordinary signal
		h.seq++
		key, seq = now, h.seq
	}
	instance := w.Instance
	if w.Kind == Scan {
		instance = ""
	}
	h.claim(w.Slot, w.Kind, instance, w.VisibleAt, key, seq, now)
	h.dispatchSlot(w.Slot, now)
}

// claim merges one claim "work from t on" into the slot. If t is not in
// the future, (ckey, cseq) is the claim's place in line.
func (h *Hub) claim(sl int, kind Kind, instance string, t, ckey time.Time, cseq uint64, now time.Time) {
	s := &h.slots[sl]
	var e *entry
	switch {
	case kind == Scan:
		if len(s.entries) > 0 {
			h.collapse(sl, now)
		}
		e = s.scan
	case s.scan != nil:
		e = s.scan // a pending scan covers every instance of the slot
	default:
		e = s.entries[instance]
	}
	if e == nil {
		e = h.newEntry()
		e.kind, e.slot, e.visibleAt = kind, sl, t
		if kind == Scan {
			s.scan = e
		} else {
			e.instance = instance
			if s.entries == nil {
				s.entries = make(map[string]*entry)
			}
			s.entries[instance] = e
		}
		h.weigh(s, 1)
		if t.After(now) {
			e.key, e.seq = t, cseq
			h.pushTimer(e)
		} else {
			e.key, e.seq = ckey, cseq
			h.makeDue(e)
		}
	} else {
		h.merge(e, t, ckey, cseq, now)
	}
	if s.weight > h.maxPending {
		h.collapse(sl, now)
	}
	if h.maxTotal > 0 && h.total > h.maxTotal {
		h.collapseHeaviest(now)
	}
}

// weigh changes slot s's weight by d, and the hub's total with it.
func (h *Hub) weigh(s *slotState, d int) {
	s.weight += d
	h.total += d
}

// collapseHeaviest collapses the slot remembering the most times (the
// lowest such slot on a tie); one remembering a single time (a scan or
// one wakeup) cannot shrink and is left alone.
func (h *Hub) collapseHeaviest(now time.Time) {
	best := -1
	for sl := range h.slots {
		if w := h.slots[sl].weight; w > 1 && (best < 0 || w > h.slots[best].weight) {
			best = sl
		}
	}
	if best >= 0 {
		h.collapse(best, now)
	}
}

// merge folds a claim into an existing entry.
func (h *Hub) merge(e *entry, t, ckey time.Time, cseq uint64, now time.Time) {
	switch c := t.Compare(e.visibleAt); {
	case c < 0:
		if e.visibleAt.After(now) {
			h.addLater(e, e.visibleAt)
		} // else: the old time is due and covered by the next take
		e.visibleAt = t
		switch {
		case e.due:
			h.raise(e, ckey, cseq)
		case !t.After(now):
			h.timers.remove(e.idx)
			e.key, e.seq = ckey, cseq
			h.makeDue(e)
		default:
			e.key, e.seq = t, cseq
			h.timers.fix(e.idx)
			h.armTimer(t)
		}
	case c == 0 || !t.After(now):
		if e.due {
			h.raise(e, ckey, cseq)
		} // else: same future time, nothing new
	default: // a follow-up time, still in the future
		h.addLater(e, t)
	}
}

// raise moves a due entry forward in line if the claim's place is earlier.
func (h *Hub) raise(e *entry, key time.Time, seq uint64) {
	if before(key, seq, e.key, e.seq) {
		e.key, e.seq = key, seq
		h.slots[e.slot].dueq.fix(e.idx)
	}
}

func (h *Hub) addLater(e *entry, t time.Time) {
	if e.kind == Scan {
		return // the scan's taker signals what it finds at its own time
	}
	i, found := slices.BinarySearchFunc(e.later, t, time.Time.Compare)
	if found {
		return
	}
	e.later = slices.Insert(e.later, i, t)
	h.weigh(&h.slots[e.slot], 1)
}

// collapse replaces the slot's instance entries by one scan entry, visible
// at the earliest of their times and in line at the earliest of their
// places. Their other times are forgotten: the scan's taker reads the
// whole slot and signals again what is not yet visible there.
func (h *Hub) collapse(sl int, now time.Time) {
	s := &h.slots[sl]
	var first *entry
	for _, e := range s.entries {
		if first == nil || e.before(first) {
			first = e
		}
	}
	if first == nil {
		return
	}
	vis := first.visibleAt
	for _, e := range s.entries {
		if e.visibleAt.Before(vis) {
			vis = e.visibleAt
		}
	}
	for _, e := range s.entries {
		if !e.due {
			h.timers.remove(e.idx)
		}
	}
	clear(s.dueq)
	s.dueq = s.dueq[:0]
	h.due.Remove(sl)
	scan := h.newEntry()
	scan.kind, scan.slot, scan.visibleAt, scan.key, scan.seq = Scan, sl, vis, first.key, first.seq
	for _, e := range s.entries {
		h.release(e)
	}
	s.entries = nil
	s.scan = scan
	h.weigh(s, 1-s.weight)
	h.collapses++
	if vis.After(now) {
		h.pushTimer(scan)
	} else {
		h.makeDue(scan)
	}
}

func (h *Hub) makeDue(e *entry) {
	e.due = true
	h.slots[e.slot].dueq.push(e)
	h.due.Add(e.slot)
}

func (h *Hub) pushTimer(e *entry) {
	e.due = false
	h.timers.push(e)
	h.armTimer(e.key)
}

// armTimer makes sure the timer goroutine wakes by t: it is started on
// first use and kicked when t is earlier than what it sleeps until.
func (h *Hub) armTimer(t time.Time) {
	if h.closed {
		return
	}
	if !h.started {
		h.started = true
		h.wg.Add(1)
		go h.timerLoop()
		return
	}
	if h.armed.IsZero() || t.Before(h.armed) {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// timerLoop is the hub's one goroutine: it sleeps until the earliest future
// entry is due, makes it due and hands it to a waiter. Waits compute what
// is due on demand, so the loop only matters for blocked waiters.
func (h *Hub) timerLoop() {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		now := h.clock.Now()
		h.promote(now)
		var t Timer
		var c <-chan time.Time
		if len(h.timers) > 0 {
			h.armed = h.timers[0].key
			t = h.clock.NewTimer(h.armed.Sub(now))
			c = t.C()
		} else {
			h.armed = time.Time{}
		}
		h.mu.Unlock()
		select {
		case <-c:
		case <-h.kick:
		case <-h.done:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// promote makes every future entry whose time has come due, and hands them
// to blocked waiters.
func (h *Hub) promote(now time.Time) {
	var changed Set
	promoted := false
	for len(h.timers) > 0 && !h.timers[0].key.After(now) {
		e := h.timers.remove(0)
		h.makeDue(e)
		changed.Add(e.slot)
		promoted = true
	}
	if !promoted || len(h.waiters) == 0 {
		return
	}
	for i := 0; i < len(h.waiters); {
		wt := h.waiters[i]
		if !h.intersects(&wt.set, &changed) {
			i++
			continue
		}
		h.handoff(i, now)
	}
}

func (h *Hub) intersects(a, b *Set) bool {
	for i := 0; i < h.nwords; i++ {
		if a.w[i]&b.w[i]&h.due.w[i] != 0 {
			return true
		}
	}
	return false
}

// dispatchSlot hands the slot's due entries to the oldest waiters covering
// it. A blocked waiter never has due entries in its set (they would have
// been handed to it), so the slot's head is the oldest in its set.
func (h *Hub) dispatchSlot(sl int, now time.Time) {
	for i := 0; i < len(h.waiters) && h.due.Contains(sl); {
		if !h.waiters[i].set.Contains(sl) {
			i++
			continue
		}
		h.handoff(i, now)
	}
}

// handoff gives waiter i the oldest due wakeup in its set and unblocks it.
func (h *Hub) handoff(i int, now time.Time) {
	wt := h.waiters[i]
	w, _ := h.take(&wt.set, now)
	wt.w, wt.delivered = w, true
	h.waiters = slices.Delete(h.waiters, i, i+1)
	h.handoffs++
	wt.ch <- struct{}{}
}

// take removes and returns the oldest due wakeup in set.
func (h *Hub) take(set *Set, now time.Time) (Wakeup, bool) {
	var best *entry
	for i := 0; i < h.nwords; i++ {
		m := set.w[i] & h.due.w[i]
		for m != 0 {
			b := bits.TrailingZeros64(m)
			m &= m - 1
			if e := h.slots[i*64+b].dueq[0]; best == nil || e.before(best) {
				best = e
			}
		}
	}
	if best == nil {
		return Wakeup{}, false
	}
	e := best
	s := &h.slots[e.slot]
	s.dueq.remove(0)
	if len(s.dueq) == 0 {
		h.due.Remove(e.slot)
	}
	w := Wakeup{Kind: e.kind, Slot: e.slot, Instance: e.instance, VisibleAt: e.visibleAt, key: e.key, seq: e.seq}
	// Follow-up times already reached are covered by this take.
	if len(e.later) > 0 && now.IsZero() {
		now = h.clock.Now()
	}
	n, _ := slices.BinarySearchFunc(e.later, now, func(t, now time.Time) int {
		if t.After(now) {
			return 1
		}
		return -1
	})
	rest := e.later[n:]
	if e.kind == Instance {
		h.weigh(s, -n)
	}
	if len(rest) > 0 {
		e.visibleAt, e.later = rest[0], rest[1:]
		if e.kind == Instance {
			h.weigh(s, -1)
		}
		h.seq++
		e.key, e.seq = e.visibleAt, h.seq
		h.pushTimer(e)
		return w, true
	}
	h.weigh(s, -1)
	if e.kind == Scan {
		s.scan = nil
	} else {
		delete(s.entries, e.instance)
	}
	h.release(e)
	return w, true
}

// maxFree bounds the hub's free list of entries.
const maxFree = 1024

func (h *Hub) newEntry() *entry {
	if n := len(h.free); n > 0 {
		e := h.free[n-1]
		h.free[n-1] = nil
		h.free = h.free[:n-1]
		return e
	}
	return &entry{}
}

// release recycles an entry that no heap, map or slot refers to any more.
func (h *Hub) release(e *entry) {
	if len(h.free) < maxFree {
		*e = entry{later: e.later[:0]}
		h.free = append(h.free, e)
	}
}

// Wait takes a due wakeup from any slot in slots: at once if one is due
// (the one that became due first, whichever its slot), otherwise it blocks
// until one becomes due in those slots (false after timeout, or when ctx is
// done, or the hub is closed). timeout <= 0 never blocks. Each wakeup goes
// to exactly one caller; blocked callers with overlapping sets are served
// oldest first, and a signal wakes only a caller whose set holds its slot.
// A ctx already done returns false without taking anything; a wakeup handed
// over while ctx ends is requeued, never lost.
func (h *Hub) Wait(ctx context.Context, slots Set, timeout time.Duration) (Wakeup, bool) {
	if ctx.Err() != nil {
		return Wakeup{}, false
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return Wakeup{}, false
	}
	var now time.Time // read lazily: only timers and follow-ups need it
	if len(h.timers) > 0 {
		now = h.clock.Now()
		h.promote(now)
	}
	if w, ok := h.take(&slots, now); ok || timeout <= 0 {
		h.mu.Unlock()
		return w, ok
	}
	wt := waiterPool.Get().(*waiter)
	wt.set = slots
	h.waiters = append(h.waiters, wt)
	timer := h.clock.NewTimer(timeout)
	h.mu.Unlock()
	if h.onBlock != nil {
		h.onBlock()
	}

	var w Wakeup
	ok := false
	select {
	case <-wt.ch:
		w, ok = wt.w, true
	case <-ctx.Done():
	case <-timer.C():
	case <-h.done:
	}
	timer.Stop()
	if !ok {
		h.mu.Lock()
		if wt.delivered { // handed over while we stopped waiting
			<-wt.ch
			w = wt.w
			if ctx.Err() != nil {
				if !h.closed {
					now := h.clock.Now()
					h.promote(now)
					h.requeueLocked(w, now)
				}
			} else {
				ok = true
			}
		} else if i := slices.Index(h.waiters, wt); i >= 0 {
			h.waiters = slices.Delete(h.waiters, i, i+1)
		}
		h.mu.Unlock()
	}
	*wt = waiter{ch: wt.ch}
	waiterPool.Put(wt)
	if !ok {
		return Wakeup{}, false
	}
	return w, true
}

// Waiting reports whether a Wait call covering slot is blocked now: a
// wakeup of slot signalled now would be handed to it at once, ahead of
// nothing.
func (h *Hub) Waiting(slot int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.waiters {
		if !w.delivered && w.set.Contains(slot) {
			return true
		}
	}
	return false
}

// Drop discards the pending wakeups, due or future, of slots this process
// no longer owns. Blocked waiters are left alone.
func (h *Hub) Drop(slots Set) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := 0; i < h.nwords; i++ {
		for m := slots.w[i]; m != 0; m &= m - 1 {
			sl := i*64 + bits.TrailingZeros64(m)
			if sl < h.nslots {
				h.dropSlot(sl)
			}
		}
	}
}

func (h *Hub) dropSlot(sl int) {
	s := &h.slots[sl]
	for _, e := range s.entries {
		if !e.due {
			h.timers.remove(e.idx)
		}
		h.release(e)
	}
	if s.scan != nil {
		if !s.scan.due {
			h.timers.remove(s.scan.idx)
		}
		h.release(s.scan)
	}
	h.total -= s.weight
	h.slots[sl] = slotState{}
	h.due.Remove(sl)
}

// Pending returns the number of pending wakeups, due or future, in slots.
func (h *Hub) Pending(slots Set) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for sl := range slots.All() {
		if sl >= h.nslots {
			break
		}
		n += len(h.slots[sl].entries)
		if h.slots[sl].scan != nil {
			n++
		}
	}
	return n
}

// HasDue reports whether a wakeup of slots can be taken now.
func (h *Hub) HasDue(slots Set) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.promote(h.clock.Now())
	}
	return h.intersects(&slots, &h.due)
}

// DueCounts returns, for each slot in slots with wakeups that can be taken
// now, how many it holds (a Scan counts one), and their sum. Its cost
// grows with the number of slots, not with the wakeups pending: it is the
// cheap question a backlog check asks many times a second, where Snapshot
// would copy and sort everything.
func (h *Hub) DueCounts(slots Set) (per map[int]int, total int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.promote(h.clock.Now())
	}
	per = map[int]int{}
	for i := 0; i < h.nwords; i++ {
		for m := slots.w[i] & h.due.w[i]; m != 0; m &= m - 1 {
			sl := i*64 + bits.TrailingZeros64(m)
			n := len(h.slots[sl].dueq)
			per[sl] = n
			total += n
		}
	}
	return per, total
}

// Snapshot returns a copy of the hub's contents.
func (h *Hub) Snapshot() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	if !h.closed {
		h.promote(now)
	}
	st := State{Now: now, Waiters: len(h.waiters), Collapses: h.collapses, Handoffs: h.handoffs}
	for sl := range h.slots {
		start := len(st.Pending)
		add := func(e *entry) {
			st.Pending = append(st.Pending, PendingWakeup{
				Wakeup: Wakeup{Kind: e.kind, Slot: e.slot, Instance: e.instance, VisibleAt: e.visibleAt, key: e.key, seq: e.seq},
				Due:    e.due,
			})
			if len(e.later) > 0 {
				st.Pending[len(st.Pending)-1].Later = slices.Clone(e.later)
			}
		}
		for _, e := range h.slots[sl].entries {
			add(e)
		}
		if e := h.slots[sl].scan; e != nil {
			add(e)
		}
		slices.SortFunc(st.Pending[start:], func(a, b PendingWakeup) int {
			if c := a.key.Compare(b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
	}
	return st
}

// Close stops the timer goroutine and waits for it, wakes every blocked
// Wait (which returns false) and discards everything pending. Afterwards
// signals are ignored and Wait returns false at once. Close is idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	h.waiters = nil
	h.timers = nil
	clear(h.slots)
	h.total = 0
	h.due = Set{}
	h.mu.Unlock()
	h.wg.Wait()
}
