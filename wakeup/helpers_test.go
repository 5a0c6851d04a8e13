package wakeup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/durafeed/durafeed/internal/clock/clocktest"
	"github.com/stretchr/testify/require"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// blockCounter counts Waits that have blocked (registered as waiters).
type blockCounter struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

func (b *blockCounter) hook() {
	b.mu.Lock()
	b.n++
	b.cond.Broadcast()
	b.mu.Unlock()
}

// await returns once n Waits in total have blocked.
func (b *blockCounter) await(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.n < n {
		b.cond.Wait()
	}
}

// testHub returns a hub on a fake clock, closed when the test ends.
func testHub(t testing.TB, opts Options) (*Hub, *clocktest.Manual, *blockCounter) {
	t.Helper()
	clk := clocktest.NewManual(epoch)
	if opts.Clock == nil {
		opts.Clock = clk
	}
	h, err := New(opts)
	require.NoError(t, err)
	b := &blockCounter{}
	b.cond = sync.NewCond(&b.mu)
	h.onBlock = b.hook
	t.Cleanup(h.Close)
	return h, clk, b
}

// public strips a wakeup's place in line, for comparisons.
func public(w Wakeup) Wakeup {
	return Wakeup{Kind: w.Kind, Slot: w.Slot, Instance: w.Instance, VisibleAt: w.VisibleAt}
}

type result struct {
	w  Wakeup
	ok bool
}

// waitAsync runs Wait in a goroutine and delivers its result.
func waitAsync(ctx context.Context, h *Hub, set Set, timeout time.Duration) <-chan result {
	ch := make(chan result, 1)
	go func() {
		w, ok := h.Wait(ctx, set, timeout)
		ch <- result{w, ok}
	}()
	return ch
}
