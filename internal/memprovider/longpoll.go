package memprovider

import (
	"context"
	"time"

	"github.com/durafeed/durafeed/durable"
)

// Long polling.
//
// A long-polling handle (Store.OpenLongPolling) runs a fetch as a loop of
// attempts. Each attempt runs under the store mutex, exactly as a
// short-polling fetch does; when it finds no work it also, still under the
// mutex, subscribes to the store's change channel and computes the next
// moment at which time alone could make work eligible (a delayed message
// becoming visible, a lock or session lock expiring). The fetch then
// releases the mutex and waits for the first of: a change (the channel is
// closed), that moment (a clock timer), the poll deadline (a clock timer
// armed once, at the first failed attempt), or ctx. It then tries again,
// returning the work, or nil once an attempt fails after the deadline, or
// the context's error.
//
// No wake-up is lost: the channel is taken under the mutex that the failed
// attempt held, and every mutation that can make work eligible, or bring
// its moment forward, closes it (Store.notify) under that same mutex, so a
// change made after the attempt has either been seen by it or closes the
// channel the waiter holds. Mutations that only take work away (fetching,
// deleting, cancelling) need not notify: a waiter's next attempt sees them.

// Clock is a time source with timers, for tests that control time. The
// store reads the time and arms its long-poll timers (delayed visibility,
// lock expiry, poll deadlines) through it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFuncAt arranges for f to be called once, when the clock reaches
	// at, or soon after if it already has. f may be called on any goroutine,
	// including the one calling AfterFuncAt; it never blocks. stop cancels
	// the call if it has not happened, reporting whether it did so.
	AfterFuncAt(at time.Time, f func()) (stop func() bool)
}

// realAfterFuncAt returns an AfterFuncAt for a time source now: a wall-clock
// timer for the time remaining until at, as now measures it.
func realAfterFuncAt(now func() time.Time) func(time.Time, func()) func() bool {
	return func(at time.Time, f func()) func() bool {
		return time.AfterFunc(at.Sub(now()), f).Stop
	}
}

// UseClock makes c the store's time source and timer source, for tests that
// control time (see SetClock for a time source without timers). It must be
// called before the store is used concurrently.
func (s *Store) UseClock(c Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now, s.afterFuncAt = c.Now, c.AfterFuncAt
	s.notify()
}

// OpenLongPolling returns a new long-polling provider handle on the store:
// as Open, except that a fetch that finds no work waits, without holding the
// store, up to its poll timeout for work to become eligible (an enqueue, an
// ack or abandon by any handle of the store, a delayed message becoming
// visible, a lock expiring), returning it as soon as it is; ctx ends the
// wait with an error wrapping ctx.Err().
func (s *Store) OpenLongPolling() durable.Provider { return &handle{s: s, longPolling: true} }

// notify wakes every waiting fetch: work may have become eligible, or the
// moment it will has changed. Callers hold s.mu.
func (s *Store) notify() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// subscribe returns a channel closed by the next notify. Callers hold s.mu.
func (s *Store) subscribe() <-chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// timer arms a store-clock timer for at; fired is closed when it fires.
// Callers hold s.mu (for the clock) and must call stop.
func (s *Store) timer(at time.Time) (fired <-chan struct{}, stop func() bool) {
	ch := make(chan struct{})
	return ch, s.afterFuncAt(at, func() { close(ch) })
}

// earliest returns the earlier of two due times, the zero time meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// attemptFunc is one fetch attempt, run under s.mu at time now. It returns
// the work, or nil and the next time after now at which time alone could
// make work eligible for this fetch (zero if never), or an error.
type attemptFunc[T any] func(now time.Time) (work *T, due time.Time, err error)

// fetchLoop runs attempt until it returns work or an error; on a
// long-polling handle with a positive poll timeout it waits between
// attempts as described at the top of this file.
func fetchLoop[T any](ctx context.Context, p *handle, op string, pollTimeout time.Duration, attempt attemptFunc[T]) (*T, error) {
	s := p.s
	var deadline <-chan struct{}
	var stopDeadline func() bool
	defer func() {
		if stopDeadline != nil {
			stopDeadline()
		}
	}()
	for {
		unlock, err := p.begin(ctx, op)
		if err != nil {
			return nil, err
		}
		now := s.now()
		work, due, err := attempt(now)
		if work != nil || err != nil || !p.longPolling || pollTimeout <= 0 {
			unlock()
			return work, err
		}
		if deadline == nil {
			deadline, stopDeadline = s.timer(now.Add(pollTimeout))
		}
		select {
		case <-deadline:
			unlock()
			return nil, nil
		default:
		}
		changed := s.subscribe()
		var dueFired <-chan struct{}
		stopDue := func() bool { return false }
		if !due.IsZero() {
			dueFired, stopDue = s.timer(due)
		}
		unlock()

		select {
		case <-changed:
		case <-dueFired:
		case <-deadline:
		case <-ctx.Done(): // the next begin reports it
		}
		stopDue()
	}
}

// nextOrchDue returns when time alone could next make an orchestrator
// message fetchable: the earliest future visibility, or expiry of a live
// instance lock over visible messages. Callers hold s.mu.
func (s *Store) nextOrchDue(now time.Time) time.Time {
	var due time.Time
	for _, m := range s.orchQ {
		if m.visibleAt.After(now) {
			due = earliest(due, m.visibleAt)
		} else if l := s.lockAlive(m.instance, now); l != nil {
			due = earliest(due, l.until)
		}
	}
	return due
}

// nextWorkDue returns when time alone could next make a worker message
// fetchable by a fetch with session and tags: the earliest future
// visibility, lock expiry, or expiry of another owner's session. Callers
// hold s.mu.
func (s *Store) nextWorkDue(now time.Time, session *durable.SessionFetchConfig, tags durable.TagFilter) time.Time {
	var due time.Time
	for _, w := range s.workQ {
		if !tags.Matches(w.tag) || (w.sessionID != "" && session == nil) {
			continue
		}
		switch {
		case w.visibleAt.After(now):
			due = earliest(due, w.visibleAt)
		case workLocked(w, now):
			due = earliest(due, w.lockedUntil)
		case w.sessionID != "":
			if sr := s.sessions[w.sessionID]; sr != nil && sr.lockedUntil.After(now) && sr.owner != session.OwnerID {
				due = earliest(due, sr.lockedUntil)
			}
		}
	}
	return due
}
