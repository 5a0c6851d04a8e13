// Package clock is the time source that durafeed's timing packages
// (changefeed, wakeup) accept, so that tests and simulations can drive
// time by hand. Each of those packages re-exports the types under its own
// name. Sleep is the context-aware pause the other packages share.
package clock

import (
	"context"
	"time"
)

// Clock is a source of time: "now", and one-shot timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d (at once for
	// d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// System is the Clock backed by package time.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (System) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// Sleep waits d on the system clock, or until ctx ends. It reports whether
// the wait ran its course: true when d passed (at once for d <= 0 while ctx
// is alive), false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool { return SleepOn(ctx, System{}, d) }

// SleepOn is Sleep on clock c.
func SleepOn(ctx context.Context, c Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
