package peerwake

// gate decides, for authenticated frames inside the window, whether to
// deliver them: it refuses replays (a nonce cache) and bounds the delivery
// rate (a token bucket). It is not safe for concurrent use; the Receiver
// guards it with a mutex so that "not seen yet" and "now seen" are one step.
type gate struct {
	// token bucket, in thousandths of a token so that a refill of rate
	// tokens per second over whole milliseconds is exact
	rate    int64 // tokens per second = thousandths per millisecond
	burst   int64 // thousandths
	tokens  int64 // thousandths
	last    int64 // Unix ms of the last refill, once started
	started bool

	// nonce cache: seen maps a nonce to the Unix ms after which a frame
	// carrying it can no longer pass the window check (its sentAt +
	// Window); ring holds the same entries in insertion order, for expiry
	// and for eviction when full.
	seen  map[[nonceBytes]byte]int64
	ring  []seenEntry
	head  int // index of the oldest entry in ring
	n     int // entries in ring
	limit int // capacity bound of ring (and so of seen)
}

type seenEntry struct {
	nonce [nonceBytes]byte
	exp   int64
}

type verdict int

const (
	deliver verdict = iota
	replayed
	rateLimited
)

func newGate(ratePerSec, burst, cacheSize int) *gate {
	return &gate{
		rate:   int64(ratePerSec),
		burst:  int64(burst) * 1000,
		tokens: int64(burst) * 1000,
		seen:   make(map[[nonceBytes]byte]int64),
		limit:  cacheSize,
	}
}

// admit decides the fate of a frame with nonce, valid until exp (Unix ms),
// at now (Unix ms). Only delivered frames enter the cache: the cache then
// grows no faster than the token bucket allows, and a frame refused for
// rate may be delivered if it comes again (it was never delivered).
func (g *gate) admit(nonce [nonceBytes]byte, exp, now int64) verdict {
	if e, ok := g.seen[nonce]; ok && e >= now {
		return replayed
	}
	if !g.take(now) {
		return rateLimited
	}
	g.remember(nonce, exp, now)
	return deliver
}

// admitUnmetered is admit without the rate limit, for a hello frame: at
// most one per connection is acted on, and connections are bounded
// (MaxConns), so hellos need no tokens, and a burst of wakes cannot make
// a connection lose its name. It returns deliver or replayed.
func (g *gate) admitUnmetered(nonce [nonceBytes]byte, exp, now int64) verdict {
	if e, ok := g.seen[nonce]; ok && e >= now {
		return replayed
	}
	g.remember(nonce, exp, now)
	return deliver
}

// take takes one token if there is one, after refilling for the time since
// the last refill. A clock that steps back refills nothing.
func (g *gate) take(now int64) bool {
	switch {
	case !g.started:
		g.started, g.last = true, now
	case now > g.last:
		// Compare with the time to fill up first, so that the product
		// cannot overflow.
		if full := (g.burst - g.tokens + g.rate - 1) / g.rate; now-g.last >= full {
			g.tokens = g.burst
		} else {
			g.tokens += (now - g.last) * g.rate
		}
		g.last = now
	}
	if g.tokens < 1000 {
		return false
	}
	g.tokens -= 1000
	return true
}

// remember records nonce until exp, dropping expired entries from the old
// end and, when the cache is full, the oldest entry whether expired or not.
func (g *gate) remember(nonce [nonceBytes]byte, exp, now int64) {
	for g.n > 0 && g.ring[g.head].exp < now {
		g.pop()
	}
	if g.n == g.limit {
		g.pop()
	}
	if g.n == len(g.ring) {
		g.grow()
	}
	g.ring[(g.head+g.n)%len(g.ring)] = seenEntry{nonce, exp}
	g.n++
	g.seen[nonce] = exp
}

// pop drops the oldest ring entry, and its map entry unless a later insert
// of the same nonce replaced it.
func (g *gate) pop() {
	e := g.ring[g.head]
	if g.seen[e.nonce] == e.exp {
		delete(g.seen, e.nonce)
	}
	g.ring[g.head] = seenEntry{}
	g.head = (g.head + 1) % len(g.ring)
	g.n--
}

// grow doubles the ring, up to limit, keeping the entries in order.
func (g *gate) grow() {
	size := min(g.limit, max(64, 2*len(g.ring)))
	ring := make([]seenEntry, size)
	for i := range g.n {
		ring[i] = g.ring[(g.head+i)%len(g.ring)]
	}
	g.ring, g.head = ring, 0
}
