package provider

import (
	"context"
	"sync"

	"github.com/durafeed/durafeed/internal/epk"
)

// SlotCount is the number of dispatch slots. An instance's slot is the top
// eight bits of its partition key's hash (V2 EPK), so it is the same in
// every process and release, and a block of consecutive slots is one
// contiguous range of Cosmos DB's own placement.
const SlotCount = 256

// slotOf returns the dispatch slot of an instance.
func slotOf(instance string) int {
	e, err := epk.Compute(epk.Hash, 2, []any{instance})
	if err != nil {
		return 0 // unreachable for strings
	}
	return epk.SlotOf(e, SlotCount)
}

// share is a contiguous block of slots [lo, hi].
type share struct{ lo, hi int }

func (s share) all() bool { return s.lo == 0 && s.hi == SlotCount-1 }

// splitShares splits the slots into n contiguous blocks of near-equal size.
func splitShares(n int) []share {
	if n < 1 {
		n = 1
	}
	if n > SlotCount {
		n = SlotCount
	}
	out := make([]share, n)
	for i := 0; i < n; i++ {
		out[i] = share{lo: i * SlotCount / n, hi: (i+1)*SlotCount/n - 1}
	}
	return out
}

// slotSource decides which slots a fetch scans. The polling mode hands out
// local shares; the event-driven mode will hand out slot blocks leased
// across replicas and report wakeups through the same seam.
type slotSource interface {
	// acquire checks out a block of slots for one fetch; release returns it.
	acquire(ctx context.Context) (share, func(), error)
}

// localShares splits the slots into fixed shares and lends each in-flight
// fetch the free share polled least recently. With more concurrent fetches
// than shares, an extra fetch shares the least recently polled share
// instead of waiting: fetches never block on each other, and two fetchers
// on one share merely race on the same candidates (losing costs one 412).
type localShares struct {
	mu     sync.Mutex
	shares []share
	busy   []int
	last   []uint64
	clock  uint64
}

func newLocalShares(n int) *localShares {
	s := splitShares(n)
	return &localShares{shares: s, busy: make([]int, len(s)), last: make([]uint64, len(s))}
}

func (l *localShares) acquire(ctx context.Context) (share, func(), error) {
	if err := ctx.Err(); err != nil {
		return share{}, nil, err
	}
	l.mu.Lock()
	best := -1
	for i := range l.shares {
		if best < 0 || l.busy[i] < l.busy[best] || (l.busy[i] == l.busy[best] && l.last[i] < l.last[best]) {
			best = i
		}
	}
	l.clock++
	l.last[best] = l.clock
	l.busy[best]++
	l.mu.Unlock()
	var once sync.Once
	return l.shares[best], func() {
		once.Do(func() {
			l.mu.Lock()
			l.busy[best]--
			l.mu.Unlock()
		})
	}, nil
}
