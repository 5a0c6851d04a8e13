package wakeup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a manual Clock: time moves only by Advance, and timers fire
// (non-blocking sends on buffered channels) when it passes their deadline.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

type fakeTimer struct {
	c  *fakeClock
	ch chan time.Time
	at time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: epoch, timers: make(map[*fakeTimer]struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
	} else {
		c.timers[t] = struct{}{}
	}
	return t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
			delete(c.timers, t)
		}
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}

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
func testHub(t testing.TB, opts Options) (*Hub, *fakeClock, *blockCounter) {
	t.Helper()
	clk := newFakeClock()
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
