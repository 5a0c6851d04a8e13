package cosmosemu

import (
	"container/heap"
	"encoding/json"
	"math"
	"strconv"
)

// Time to live
//
// As on the service (learn.microsoft.com/azure/cosmos-db/time-to-live):
//
//   - The container property "defaultTtl" turns expiry on. Absent or null:
//     off, items never expire and their "ttl" is an ordinary property. -1:
//     on, items expire only when their own "ttl" says so. n > 0: items
//     expire n seconds after their last write (_ts) unless their own "ttl"
//     overrides it. Any other value (0, < -1, > 2147483647, a fraction, a
//     non-number) answers 400 on container create and replace.
//   - The item property "ttl", when the container has TTL on, must be -1
//     (never expires) or a whole number of seconds in 1..2147483647
//     (expires that long after _ts); anything else, null included, answers
//     400 "The input ttl '...' is invalid. ...". With TTL off it is not
//     checked. An item without "ttl" takes the container's default.
//   - An item is expired from the second _ts + its effective ttl is
//     reached, by the emulator's clock (Options.Clock). From then on it is
//     invisible to everything: point reads, replace, patch and delete (404),
//     queries, read feeds, ReadMany, the change feed and batch operations;
//     create and upsert of its id create a new item (201).
//
// Invisibility is decided at access time, so a container replace that
// changes defaultTtl applies at once to every item. Storage is reclaimed by
// purging, done opportunistically inside the write critical sections of
// each physical partition (no goroutine): every write first removes the
// partition's items whose expiry has passed, in expiry order from a
// min-heap. A purge is invisible: it takes no LSN, and the change feed
// (latest-version mode) never shows deletes. The heap is built for one
// ttlConfig (pointer identity): a container replace installs a new one, and
// the next purge of each partition rebuilds its heap from the current
// versions. Superseded versions in the heap are skipped when popped and
// dropped by a rebuild once they outnumber the current versions.
//
// The container's setting is read through an atomic pointer, so code that
// holds a partition lock may consult it without taking the container lock
// (lock order is container before partition).

// maxTTL is the largest time to live the service accepts, in seconds.
const maxTTL = math.MaxInt32

// ttlConfig is a container's time-to-live setting. It is immutable; a
// change installs a new value.
type ttlConfig struct {
	// def is defaultTtl: 0 when TTL is off, -1 when on without a default,
	// n > 0 for a default of n seconds.
	def int64
}

// on reports whether the container has time to live on.
func (cfg *ttlConfig) on() bool { return cfg.def != 0 }

// expiresAt returns the Unix second from which d is expired under cfg;
// ok is false when d never expires.
func (cfg *ttlConfig) expiresAt(d *document) (at int64, ok bool) {
	switch {
	case cfg.def == 0 || d.ttl == -1:
		return 0, false
	case d.ttl > 0:
		return d.ts + d.ttl, true
	case cfg.def > 0:
		return d.ts + cfg.def, true
	}
	return 0, false
}

// wholeTTL returns v as a time to live when it is a JSON number holding
// -1 or a whole number in 1..maxTTL.
func wholeTTL(v any) (int64, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || (f != -1 && (f < 1 || f > maxTTL)) {
		return 0, false
	}
	return int64(f), true
}

// ttlLiteral renders a rejected value the way the service quotes it.
func ttlLiteral(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

// parseDefaultTTL reads and normalizes props["defaultTtl"] (a container
// body's properties): null is dropped, as the service does not return it.
func parseDefaultTTL(props map[string]any) (*ttlConfig, *apiError) {
	v, ok := props["defaultTtl"]
	if !ok || v == nil {
		delete(props, "defaultTtl")
		return &ttlConfig{}, nil
	}
	n, ok := wholeTTL(v)
	if !ok {
		return nil, errBadRequest("The input defaultTtl '%s' is invalid. Ensure to provide a nonzero positive integer less than or equal to '%d', or '-1' which means items do not expire by default.", ttlLiteral(v), maxTTL)
	}
	props["defaultTtl"] = float64(n)
	return &ttlConfig{def: n}, nil
}

// itemTTL returns a document's own time to live: -1, 1..maxTTL, or 0 when
// "ttl" is absent or not a valid time to live (only possible when written
// while the container had TTL off; it then counts as absent).
func itemTTL(doc map[string]any) int64 {
	n, _ := wholeTTL(doc["ttl"])
	return n
}

// checkItemTTL validates a document's "ttl" as the service does when the
// container has TTL on; with TTL off the property is not checked.
func checkItemTTL(cfg *ttlConfig, doc map[string]any) *apiError {
	if !cfg.on() {
		return nil
	}
	v, ok := doc["ttl"]
	if !ok {
		return nil
	}
	if _, valid := wholeTTL(v); !valid {
		return errBadRequest("The input ttl '%s' is invalid. Ensure to provide a nonzero positive integer less than or equal to '%d', or '-1' which means never expire.", ttlLiteral(v), maxTTL)
	}
	return nil
}

// ttlView is a container's time-to-live setting and the time of one
// request, deciding which versions that request may see.
type ttlView struct {
	cfg *ttlConfig
	now int64 // Unix second; read from the clock only when TTL is on
}

// ttlView returns the view of a request starting now.
func (c *container) ttlView() ttlView {
	v := ttlView{cfg: c.ttl.Load()}
	if v.cfg.on() {
		v.now = c.now()
	}
	return v
}

// hidden reports whether d (non-nil) is expired at the view's time.
func (v ttlView) hidden(d *document) bool {
	if !v.cfg.on() {
		return false
	}
	at, ok := v.cfg.expiresAt(d)
	return ok && v.now >= at
}

// find returns the current, unexpired version of a document, or nil
// (caller holds p.mu).
func (p *partition) find(pkKey, id string, v ttlView) *document {
	d := p.lookup(pkKey, id)
	if d == nil || v.hidden(d) {
		return nil
	}
	return d
}

// expiryEntry schedules the purge of one version.
type expiryEntry struct {
	at  int64 // Unix second from which doc is expired
	doc *document
}

// expiryHeap is a min-heap of expiry entries by time (container/heap).
type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push appends x (an expiryEntry); for container/heap only.
func (h *expiryHeap) Push(x any) { *h = append(*h, x.(expiryEntry)) }

// Pop removes the last entry; for container/heap only.
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = expiryEntry{}
	*h = old[:len(old)-1]
	return e
}

// scheduleExpiry adds a newly installed version to the expiry heap when it
// can expire under the setting the heap was built for (caller holds p.mu
// for writing). A heap built for an older setting is rebuilt by the next
// purge, which then schedules doc too.
func (p *partition) scheduleExpiry(doc *document) {
	if p.expCfg == nil || !p.expCfg.on() {
		return
	}
	if at, ok := p.expCfg.expiresAt(doc); ok {
		heap.Push(&p.expiries, expiryEntry{at: at, doc: doc})
	}
}

// rebuildExpiries schedules every current version under cfg (caller holds
// p.mu for writing).
func (p *partition) rebuildExpiries(cfg *ttlConfig) {
	clear(p.expiries)
	p.expiries = p.expiries[:0]
	p.expCfg = cfg
	if !cfg.on() {
		p.expiries = nil
		return
	}
	for _, lp := range p.logical {
		for _, d := range lp.docs {
			if at, ok := cfg.expiresAt(d); ok {
				p.expiries = append(p.expiries, expiryEntry{at: at, doc: d})
			}
		}
	}
	heap.Init(&p.expiries)
}

// purgeExpired removes from storage the current versions expired at the
// view's time under the container's current setting (caller holds p.mu for
// writing). The heap follows the current setting, not the view's, so a
// request that started before a container replace never schedules by the
// old one again. It takes no LSN: expired versions are already invisible,
// and deletes never reach the change feed.
func (p *partition) purgeExpired(v ttlView) {
	cfg := p.coll.ttl.Load()
	if p.expCfg != cfg {
		p.rebuildExpiries(cfg)
	}
	if len(p.expiries) == 0 || !v.cfg.on() {
		return
	}
	for len(p.expiries) > 0 && p.expiries[0].at <= v.now {
		e := heap.Pop(&p.expiries).(expiryEntry)
		if lp := p.logical[e.doc.lp.key]; lp != nil && lp.docs[e.doc.id] == e.doc {
			p.remove(e.doc)
		}
	}
	if len(p.expiries) > 2*p.docs+64 {
		p.rebuildExpiries(cfg)
	}
}
