package engine

import (
	"slices"
	"sort"
	"sync"

	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
	"github.com/durafeed/durafeed/wakeup"
)

// Bounds of the head index: instances with heads, heads per instance, the
// largest work item a head keeps (MaxHeadItemBytes: a larger message is
// read by the fetch's query, as without heads), the work-item bytes of all
// heads, and the messages remembered as locked.
const (
	maxHeadInstances = 4096
	maxHeadsPerInst  = 16
	MaxHeadItemBytes = 4 << 10
	maxHeadBytes     = 4 << 20
	maxGoneIDs       = 16384
	maxPartial       = 1 << 16
)

// headIndex holds, per instance, the unlocked orchestrator messages the
// feed delivered that no fetch has taken yet. It is a hint, never the
// truth: a lock built from a head is conditional on the head's ETag, and
// the fetch's query, run at the same time, finds whatever the heads miss.
// Its one owner is the engine; every method is safe for concurrent use and
// a no-op on a nil index.
type headIndex struct {
	mu    sync.Mutex
	m     map[string][]store.Head
	bytes int // work-item bytes held
	// gone are messages a turn of this process locked: a feed page read
	// before the lock but handled after it would bring back a version
	// that is stale already.
	gone map[string]struct{}
	// goneOrder is gone's insertion order, for eviction.
	goneOrder []string
	// owned says whether this replica owns a slot (nil: every slot). note
	// asks it under mu, and ownership changes before dropSlots takes mu,
	// so no head of a slot given up outlives its dropSlots.
	owned func(slot int) bool

	// complete are the owned slots whose heads hold every unlocked message
	// of their instances that the feed has delivered, and whose feed
	// starts where a finished catch-up query took over: a message of one
	// of their instances either is a head or was written after the feed
	// read that delivered the newest head, except for the instances in
	// partial (the catch-up found messages of theirs, or a message of
	// theirs was not kept as a head). See isComplete.
	complete wakeup.Set
	partial  map[string]struct{}
	// written are the instances holding a head this process's own write
	// created (noteWritten): not complete until those heads are taken,
	// since other processes' messages written before it may be missing.
	written map[string]struct{}
}

func newHeadIndex(owned func(slot int) bool) *headIndex {
	return &headIndex{m: map[string][]store.Head{}, gone: map[string]struct{}{}, owned: owned, partial: map[string]struct{}{}, written: map[string]struct{}{}}
}

// markPartial records that the heads of instance may miss one of its
// messages; when partial is full, the instance's whole slot stops
// counting as complete instead. mu held.
func (h *headIndex) markPartial(instance string) {
	if _, ok := h.partial[instance]; ok {
		return
	}
	if len(h.partial) >= maxPartial {
		h.complete.Remove(slots.Of(instance))
		return
	}
	h.partial[instance] = struct{}{}
}

// missed records that the feed delivered a message of instance that
// could not be kept as a head.
func (h *headIndex) missed(instance string) {
	if h == nil || instance == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.markPartial(instance)
}

// acquired forgets what was known of slots this replica now owns again:
// they count as complete only after their catch-up (caughtUp).
func (h *headIndex) acquired(set wakeup.Set) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.complete = h.complete.Difference(set)
	for inst := range h.partial {
		if set.Contains(slots.Of(inst)) {
			delete(h.partial, inst)
		}
	}
}

// caughtUp makes slots complete after the catch-up query that found
// messages of instances (their slots' backlog when the query ran, which
// covers everything written before their feed's starting point); the
// caller passes only slots awaiting no further catch-up. Ownership is
// checked again here, under the lock dropSlots takes, so a slot lost
// since the caller looked is not marked.
func (h *headIndex) caughtUp(set wakeup.Set, instances []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for sl := range set.All() {
		if h.owned == nil || h.owned(sl) {
			h.complete.Add(sl)
		}
	}
	for _, inst := range instances {
		if set.Contains(slots.Of(inst)) {
			h.markPartial(inst) // when partial is full, drops the slot again
		}
	}
}

// isComplete reports whether the heads of instance hold every unlocked
// message of it written before the feed read that delivered its newest
// head (see headIndex.complete).
func (h *headIndex) isComplete(instance string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.completeLocked(instance)
}

// completeLocked is isComplete with mu held.
func (h *headIndex) completeLocked(instance string) bool {
	_, part := h.partial[instance]
	_, own := h.written[instance]
	return !part && !own && h.complete.Contains(slots.Of(instance))
}

// note records (or, when the message is locked or its work item is too
// large to keep, forgets) the version q of a message the feed delivered,
// if this replica owns its slot.
func (h *headIndex) note(hd store.Head, now int64) {
	q := hd.QueueHead()
	if h == nil || q.ID == "" || q.InstanceID == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owned != nil && !h.owned(q.DispatchSlot) {
		return
	}
	h.set(q.InstanceID, slices.DeleteFunc(slices.Clone(h.m[q.InstanceID]), func(x store.Head) bool { return x.QueueHead().ID == q.ID }))
	if _, gone := h.gone[q.ID]; gone || q.LockedUntil > now {
		// Locked: its instance exists (a lock batch writes the instance
		// document), so no turn is ever built from heads alone for it.
		return
	}
	if hd.ETag() == "" || hd.ItemBytes() > MaxHeadItemBytes || len(h.m[q.InstanceID]) >= maxHeadsPerInst {
		h.markPartial(q.InstanceID)
		return
	}
	for len(h.m) > 0 && (h.bytes+hd.ItemBytes() > maxHeadBytes || len(h.m) >= maxHeadInstances && h.m[q.InstanceID] == nil) {
		for k := range h.m { // evict one instance: its fetch's query reads its messages
			h.set(k, nil)
			h.markPartial(k)
			break
		}
	}
	h.set(q.InstanceID, append(h.m[q.InstanceID], hd))
}

// noteWritten records a message this process's own write created, in
// any slot (an owned one, or one it runs its own writes in): a head, but
// not a complete view of the instance (other processes' messages may be
// missing), so the lock from it still queries, at the same time.
func (h *headIndex) noteWritten(hd store.Head, now int64) {
	q := hd.QueueHead()
	if h == nil || q.ID == "" || q.InstanceID == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, gone := h.gone[q.ID]; gone || q.LockedUntil > now || hd.ETag() == "" || hd.ItemBytes() > MaxHeadItemBytes ||
		len(h.m[q.InstanceID]) >= maxHeadsPerInst || len(h.m) >= maxHeadInstances && h.m[q.InstanceID] == nil ||
		h.bytes+hd.ItemBytes() > maxHeadBytes {
		return
	}
	h.set(q.InstanceID, append(slices.DeleteFunc(slices.Clone(h.m[q.InstanceID]), func(x store.Head) bool { return x.QueueHead().ID == q.ID }), hd))
	h.written[q.InstanceID] = struct{}{}
}

// set replaces the heads of an instance, keeping the byte count; hs must
// not share the old slice's elements (they are counted out first). mu held.
func (h *headIndex) set(instance string, hs []store.Head) {
	for _, x := range h.m[instance] {
		h.bytes -= x.ItemBytes()
	}
	if len(hs) == 0 {
		delete(h.m, instance)
		delete(h.written, instance)
		return
	}
	for _, x := range hs {
		h.bytes += x.ItemBytes()
	}
	h.m[instance] = hs
}

// take removes and returns the instance's heads visible at now, oldest
// first; later ones (a timer not yet due) stay.
func (h *headIndex) take(instance string, now int64) []store.Head {
	hs, _ := h.takeForLock(instance, now)
	return hs
}

// takeForLock is take, and reports at the same time whether the heads
// are complete (isComplete, judged before they are taken).
func (h *headIndex) takeForLock(instance string, now int64) ([]store.Head, bool) {
	if h == nil {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	complete := h.completeLocked(instance)
	var due, later []store.Head
	for _, x := range h.m[instance] {
		if x.QueueHead().VisibleAt <= now {
			due = append(due, x)
		} else {
			later = append(later, x)
		}
	}
	h.set(instance, later)
	sort.Slice(due, func(i, j int) bool { return due[i].QueueHead().EnqueuedAt < due[j].QueueHead().EnqueuedAt })
	return due, complete
}

// restore puts back heads take returned that no batch used. They are no
// longer known complete: some may be this process's own writes
// (noteWritten).
func (h *headIndex) restore(instance string, hs []store.Head, now int64) {
	for _, x := range hs {
		h.note(x, now)
	}
	if h != nil && len(hs) > 0 {
		h.mu.Lock()
		if _, ok := h.m[instance]; ok {
			h.written[instance] = struct{}{}
		}
		h.mu.Unlock()
	}
}

// forget drops the instance's heads for messages a turn has locked, and
// keeps their versions from coming back.
func (h *headIndex) forget(instance string, ids []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set(instance, slices.DeleteFunc(slices.Clone(h.m[instance]), func(x store.Head) bool { return slices.Contains(ids, x.QueueHead().ID) }))
	for _, id := range ids {
		if _, ok := h.gone[id]; ok {
			continue
		}
		if len(h.goneOrder) >= maxGoneIDs {
			delete(h.gone, h.goneOrder[0])
			h.goneOrder = h.goneOrder[1:]
		}
		h.gone[id] = struct{}{}
		h.goneOrder = append(h.goneOrder, id)
	}
}

// dropSlots forgets the heads of the instances in slots: their lease went
// to another replica (or the replica left dispatch), whose turns make them
// stale. Call it after the slots stopped counting as owned.
func (h *headIndex) dropSlots(slots wakeup.Set) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.complete = h.complete.Difference(slots)
	for inst, hs := range h.m {
		if slots.Contains(hs[0].QueueHead().DispatchSlot) { // one instance, one slot
			h.set(inst, nil)
		}
	}
}

// count returns the heads held for instance, or for all with "".
func (h *headIndex) count(instance string) int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if instance != "" {
		return len(h.m[instance])
	}
	n := 0
	for _, hs := range h.m {
		n += len(hs)
	}
	return n
}
