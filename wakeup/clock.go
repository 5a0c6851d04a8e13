package wakeup

import "github.com/durafeed/durafeed/internal/clock"

// Clock is the hub's time source: "now" for deciding what is due, timers
// for waking waiters when something becomes due and for Wait's timeout.
// Tests inject a manual clock; the default is the system clock.
type Clock = clock.Clock

// Timer is a one-shot timer created by a Clock.
type Timer = clock.Timer

// SystemClock is the Clock backed by package time; it is the default.
type SystemClock = clock.System
