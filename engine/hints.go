package engine

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/wakeup"
)

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
	per, due = e.work.DueCounts(owned)
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
	if err := e.s.WriteHint(ctx, doc.InstanceID, b); err != nil {
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
