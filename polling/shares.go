package polling

import (
	"context"
	"sync"

	"github.com/durafeed/durafeed/slots"
)

// localShares splits the slots into fixed shares and lends each in-flight
// fetch the free share polled least recently. With more concurrent fetches
// than shares, an extra fetch shares the least recently polled share
// instead of waiting: fetches never block on each other, and two fetchers
// on one share merely race on the same candidates (losing costs one 412).
type localShares struct {
	mu     sync.Mutex
	shares []slots.Block
	busy   []int
	last   []uint64
	clock  uint64
}

func newLocalShares(n int) *localShares {
	s := slots.Split(n)
	return &localShares{shares: s, busy: make([]int, len(s)), last: make([]uint64, len(s))}
}

func (l *localShares) acquire(ctx context.Context) (slots.Block, func(), error) {
	if err := ctx.Err(); err != nil {
		return slots.Block{}, nil, err
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
