package changefeed_test

import (
	"sync"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
)

// fakeClock is a changefeed.Clock whose time moves only when a test fires a
// timer. Every timer created is announced on created, so a test learns
// that a reader is pausing, and for how long, without sleeping.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	created chan *fakeTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), created: make(chan *fakeTimer, 1024)}
}

type fakeTimer struct {
	c       *fakeClock
	d       time.Duration
	ch      chan time.Time
	stopped bool
	fired   bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) changefeed.Timer {
	t := &fakeTimer{c: c, d: d, ch: make(chan time.Time, 1)}
	c.created <- t
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.fired && !t.stopped
	t.stopped = true
	return was
}

// fire advances the clock by the timer's duration and fires it; it reports
// false if the timer had been stopped.
func (t *fakeTimer) fire() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.stopped || t.fired {
		return false
	}
	t.fired = true
	t.c.now = t.c.now.Add(t.d)
	t.ch <- t.c.now
	return true
}

// next returns the next timer created.
func (c *fakeClock) next(tb testing.TB) *fakeTimer {
	tb.Helper()
	select {
	case t := <-c.created:
		return t
	case <-time.After(liveness):
		tb.Fatal("gave up waiting for a timer")
		return nil
	}
}

// advance moves the clock without firing anything.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
