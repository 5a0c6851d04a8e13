// Package clocktest provides a manual clock.Clock for tests: time moves
// only when the test says so.
package clocktest

import (
	"sync"
	"time"

	"github.com/durafeed/durafeed/internal/clock"
)

// Manual is a clock.Clock whose time moves only by Advance. A timer fires
// (a non-blocking send on its buffered channel) when Advance passes its
// deadline, or at once when made for zero or less. With it nothing
// sleeping on the clock happens "later" unless the test advances it. It
// is safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*timer]struct{}
}

type timer struct {
	c  *Manual
	ch chan time.Time
	at time.Time
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, timers: map[*timer]struct{}{}}
}

// Now implements clock.Clock.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements clock.Clock.
func (c *Manual) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, ch: make(chan time.Time, 1), at: c.now.Add(d)}
	if d <= 0 {
		t.ch <- c.now
	} else {
		c.timers[t] = struct{}{}
	}
	return t
}

// Advance moves the clock by d and fires the timers it passes.
func (c *Manual) Advance(d time.Duration) {
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

// Timers reports how many timers wait to fire.
func (c *Manual) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t]
	delete(t.c.timers, t)
	return ok
}
