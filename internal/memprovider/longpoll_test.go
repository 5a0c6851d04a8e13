package memprovider

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// timerClock is a Clock whose time moves only by Advance, firing the timers
// it reaches.
type timerClock struct {
	mu     sync.Mutex
	t      time.Time
	timers map[*clockTimer]bool
	armed  int // AfterFuncAt calls so far
}

type clockTimer struct {
	at time.Time
	f  func()
}

func newTimerClock() *timerClock {
	return &timerClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[*clockTimer]bool{}}
}

func (c *timerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *timerClock) AfterFuncAt(at time.Time, f func()) func() bool {
	c.mu.Lock()
	c.armed++
	if !at.After(c.t) {
		c.mu.Unlock()
		f()
		return func() bool { return false }
	}
	tm := &clockTimer{at: at, f: f}
	c.timers[tm] = true
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		pending := c.timers[tm]
		delete(c.timers, tm)
		return pending
	}
}

// Advance moves the clock on by d and fires the timers it reaches.
func (c *timerClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	var due []func()
	for tm := range c.timers {
		if !tm.at.After(c.t) {
			due = append(due, tm.f)
			delete(c.timers, tm)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// state returns how many timers are pending and how many were ever armed.
func (c *timerClock) state() (pending, armed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers), c.armed
}

// awaitPending waits until the clock has n pending timers: a long-polling
// fetch arms its deadline and, when something is due, a second timer, just
// before it starts waiting.
func (c *timerClock) awaitPending(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { p, _ := c.state(); return p == n }, hang, time.Millisecond,
		"waiting for %d pending timers", n)
}

// awaitArmed waits until the clock has armed n timers in all.
func (c *timerClock) awaitArmed(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { _, a := c.state(); return a == n }, hang, time.Millisecond,
		"waiting for %d timers armed", n)
}

// awaitSubscribed waits until a fetch waits on the store's change channel.
// hang bounds a wait for an event that must come: it only catches hangs
// (a loaded machine may take seconds to schedule a goroutine).
const hang = time.Minute

func awaitSubscribed(t *testing.T, s *Store) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.changed != nil
	}, hang, time.Millisecond, "waiting for a fetch to wait")
}

type fetchResult struct {
	found bool
	err   error
}

// goFetch runs one fetch (orchestrator or worker queue) in a goroutine.
func goFetch(ctx context.Context, p durable.Provider, worker bool, lockTimeout, poll time.Duration) <-chan fetchResult {
	out := make(chan fetchResult, 1)
	go func() {
		var r fetchResult
		if worker {
			var item *durable.LockedWorkItem
			item, r.err = p.FetchWorkItem(ctx, lockTimeout, poll, nil, durable.AnyTag())
			r.found = item != nil
		} else {
			var item *durable.OrchestrationItem
			item, r.err = p.FetchOrchestrationItem(ctx, lockTimeout, poll, nil)
			r.found = item != nil
		}
		out <- r
	}()
	return out
}

func receive(t *testing.T, ch <-chan fetchResult) fetchResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hang):
		t.Fatal("the fetch did not return")
		return fetchResult{}
	}
}

func requireBlocked(t *testing.T, ch <-chan fetchResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the fetch returned early: found=%v err=%v", r.found, r.err)
	case <-time.After(30 * time.Millisecond):
	}
}

func activity(inst string, id uint64) durable.ActivityExecute {
	return durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: id, Name: "Act", Input: "{}"}
}

var queues = []struct {
	name   string
	worker bool
}{{"orchestrator", false}, {"worker", true}}

// enqueueOn puts one item on the queue through p, visible at once.
func enqueueOn(ctx context.Context, p durable.Provider, worker bool, inst string) error {
	if worker {
		return p.EnqueueForWorker(ctx, activity(inst, 1))
	}
	return p.EnqueueForOrchestrator(ctx, start(inst), 0)
}

func TestLongPollReturnsEarlyOnEnqueueFromAnotherHandle(t *testing.T) {
	for _, q := range queues {
		t.Run(q.name, func(t *testing.T) {
			s, c := NewStore(), newTimerClock()
			s.UseClock(c)
			waiter, producer := s.OpenLongPolling(), s.Open()
			res := goFetch(t.Context(), waiter, q.worker, lock, time.Hour)
			c.awaitPending(t, 1) // the deadline: nothing else is due
			requireBlocked(t, res)
			require.NoError(t, enqueueOn(t.Context(), producer, q.worker, "i"))
			r := receive(t, res)
			require.NoError(t, r.err)
			require.True(t, r.found)
			pending, armed := c.state()
			assert.Zero(t, pending, "the deadline timer must be stopped")
			assert.Equal(t, 1, armed)
		})
	}
}

func TestLongPollWakesOnDelayedVisibility(t *testing.T) {
	t.Run("orchestrator", func(t *testing.T) {
		s, c := NewStore(), newTimerClock()
		s.UseClock(c)
		p := s.OpenLongPolling()
		require.NoError(t, p.EnqueueForOrchestrator(t.Context(), start("i"), 5*time.Second))
		res := goFetch(t.Context(), p, false, lock, time.Minute)
		c.awaitPending(t, 2) // deadline and visibility
		c.Advance(4 * time.Second)
		requireBlocked(t, res)
		_, armed := c.state()
		assert.Equal(t, 2, armed, "no attempt before the message is due")
		c.Advance(time.Second)
		r := receive(t, res)
		require.NoError(t, r.err)
		require.True(t, r.found)
		pending, _ := c.state()
		assert.Zero(t, pending)
	})
	t.Run("worker_abandoned_with_delay", func(t *testing.T) {
		s, c := NewStore(), newTimerClock()
		s.UseClock(c)
		p := s.OpenLongPolling()
		require.NoError(t, p.EnqueueForWorker(t.Context(), activity("i", 1)))
		item, err := p.FetchWorkItem(t.Context(), lock, 0, nil, durable.AnyTag())
		require.NoError(t, err)
		require.NotNil(t, item)
		res := goFetch(t.Context(), p, true, lock, time.Hour)
		c.awaitPending(t, 2) // deadline and lock expiry
		require.NoError(t, s.Open().AbandonWorkItem(t.Context(), item.LockToken, 3*time.Second, false))
		c.awaitArmed(t, 3) // woken, re-armed for the visibility
		c.awaitPending(t, 2)
		c.Advance(2 * time.Second)
		requireBlocked(t, res)
		c.Advance(time.Second)
		r := receive(t, res)
		require.NoError(t, r.err)
		require.True(t, r.found)
	})
}

func TestLongPollWakesOnLockExpiry(t *testing.T) {
	for _, q := range queues {
		t.Run(q.name, func(t *testing.T) {
			s, c := NewStore(), newTimerClock()
			s.UseClock(c)
			holder, waiter := s.Open(), s.OpenLongPolling()
			require.NoError(t, enqueueOn(t.Context(), holder, q.worker, "i"))
			first := receive(t, goFetch(t.Context(), holder, q.worker, 10*time.Second, 0))
			require.NoError(t, first.err)
			require.True(t, first.found)

			res := goFetch(t.Context(), waiter, q.worker, lock, time.Minute)
			c.awaitPending(t, 2) // deadline and lock expiry
			c.Advance(9 * time.Second)
			requireBlocked(t, res)
			c.Advance(time.Second)
			r := receive(t, res)
			require.NoError(t, r.err)
			require.True(t, r.found, "the expired lock's work must be fetched")
		})
	}
}

func TestLongPollRenewBringsExpiryForward(t *testing.T) {
	s, c := NewStore(), newTimerClock()
	s.UseClock(c)
	holder, waiter := s.Open(), s.OpenLongPolling()
	require.NoError(t, holder.EnqueueForOrchestrator(t.Context(), start("i"), 0))
	item, err := holder.FetchOrchestrationItem(t.Context(), time.Hour, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	// A message arriving while the instance is locked waits for the lock.
	require.NoError(t, holder.EnqueueForOrchestrator(t.Context(), durable.QueueMessage{Instance: "i", Name: "n", Data: "d"}, 0))

	res := goFetch(t.Context(), waiter, false, lock, 2*time.Hour)
	c.awaitPending(t, 2) // deadline and the lock's expiry in an hour
	require.NoError(t, holder.RenewOrchestrationItemLock(t.Context(), item.LockToken, time.Second))
	c.awaitArmed(t, 3) // woken, re-armed for the new expiry
	c.awaitPending(t, 2)
	c.Advance(time.Second)
	r := receive(t, res)
	require.NoError(t, r.err)
	require.True(t, r.found)
}

func TestLongPollWakesOnSessionExpiry(t *testing.T) {
	s, c := NewStore(), newTimerClock()
	s.UseClock(c)
	p := s.OpenLongPolling()
	a := activity("i", 1)
	a.SessionID = "sess"
	require.NoError(t, p.EnqueueForWorker(t.Context(), a))
	b := activity("i", 2)
	b.SessionID = "sess"
	require.NoError(t, p.EnqueueForWorker(t.Context(), b))
	owner := &durable.SessionFetchConfig{OwnerID: "A", LockTimeout: 5 * time.Second}
	item, err := p.FetchWorkItem(t.Context(), lock, 0, owner, durable.AnyTag())
	require.NoError(t, err)
	require.NotNil(t, item)

	other := &durable.SessionFetchConfig{OwnerID: "B", LockTimeout: 5 * time.Second}
	out := make(chan fetchResult, 1)
	go func() {
		item, err := p.FetchWorkItem(t.Context(), lock, time.Minute, other, durable.AnyTag())
		out <- fetchResult{item != nil, err}
	}()
	c.awaitPending(t, 2) // deadline and A's session expiry
	c.Advance(4 * time.Second)
	requireBlocked(t, out)
	c.Advance(time.Second)
	r := receive(t, out)
	require.NoError(t, r.err)
	require.True(t, r.found, "B takes the session over once A's lock expires")
}

func TestLongPollHonoursContext(t *testing.T) {
	for _, q := range queues {
		t.Run(q.name, func(t *testing.T) {
			s := NewStore()
			ctx, cancel := context.WithCancel(t.Context())
			res := goFetch(ctx, s.OpenLongPolling(), q.worker, lock, time.Hour)
			awaitSubscribed(t, s)
			cancel()
			r := receive(t, res)
			require.ErrorIs(t, r.err, context.Canceled)
			var pe *durable.ProviderError
			require.True(t, errors.As(r.err, &pe), "a *ProviderError")
			require.False(t, r.found)
		})
	}
}

func TestLongPollTimeout(t *testing.T) {
	for _, q := range queues {
		t.Run(q.name+"/store_clock", func(t *testing.T) {
			s, c := NewStore(), newTimerClock()
			s.UseClock(c)
			res := goFetch(t.Context(), s.OpenLongPolling(), q.worker, lock, 30*time.Second)
			c.awaitPending(t, 1)
			c.Advance(29 * time.Second)
			requireBlocked(t, res)
			c.Advance(time.Second)
			r := receive(t, res)
			require.NoError(t, r.err)
			require.False(t, r.found)
			_, armed := c.state()
			assert.Equal(t, 1, armed, "a fetch with nothing due arms only its deadline")
		})
		t.Run(q.name+"/wall_clock", func(t *testing.T) {
			// On the real clock the fetch waits its poll timeout, and ends
			// by itself (receive fails if it has not returned after hang);
			// when exactly is pinned down on the store clock above.
			s := NewStore()
			poll := 100 * time.Millisecond
			begin := time.Now()
			r := receive(t, goFetch(t.Context(), s.OpenLongPolling(), q.worker, lock, poll))
			elapsed := time.Since(begin)
			require.NoError(t, r.err)
			require.False(t, r.found)
			assert.GreaterOrEqual(t, elapsed, poll)
			t.Logf("a long poll of %v with no work returned after %v", poll, elapsed)
		})
	}
}

func TestShortPollAndZeroPollReturnAtOnce(t *testing.T) {
	s, c := NewStore(), newTimerClock()
	s.UseClock(c)
	for _, q := range queues {
		for _, tc := range []struct {
			name string
			p    durable.Provider
			poll time.Duration
		}{{"short_polling", s.Open(), time.Hour}, {"long_polling_zero", s.OpenLongPolling(), 0}} {
			r := receive(t, goFetch(t.Context(), tc.p, q.worker, lock, tc.poll))
			require.NoError(t, r.err, "%s %s", q.name, tc.name)
			require.False(t, r.found)
		}
	}
	_, armed := c.state()
	assert.Zero(t, armed, "fetches that do not wait arm no timer")
}

// TestLongPollNoLostWakeups races enqueues against fetches starting to wait:
// a lost wake-up would leave a fetch waiting for its (hour-long) poll
// timeout, until the hang deadline cancels it.
func TestLongPollNoLostWakeups(t *testing.T) {
	s := NewStore()
	for _, q := range queues {
		for i := range 200 {
			ctx, cancel := context.WithTimeout(t.Context(), hang)
			res := goFetch(ctx, s.OpenLongPolling(), q.worker, lock, time.Hour)
			if i%2 == 0 {
				runtime.Gosched()
			}
			require.NoError(t, enqueueOn(ctx, s.Open(), q.worker, fmt.Sprintf("%s-%d", q.name, i)))
			r := <-res
			cancel()
			require.NoError(t, r.err, "%s iteration %d: the wake-up was lost", q.name, i)
			require.True(t, r.found)
		}
	}
}

// TestLongPollReleasesGoroutinesAndTimers runs many concurrent long polls
// ending in every way (woken, timed out, cancelled, due time reached) and
// checks that no goroutine or timer outlives them.
func TestLongPollReleasesGoroutinesAndTimers(t *testing.T) {
	before := runtime.NumGoroutine()

	s := NewStore()
	producer := s.Open()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		for _, q := range queues {
			wg.Go(func() { // woken by an enqueue
				r := <-goFetch(t.Context(), s.OpenLongPolling(), q.worker, lock, time.Minute)
				assert.NoError(t, r.err)
			})
			wg.Go(func() { // timed out
				r := <-goFetch(t.Context(), s.OpenLongPolling(), q.worker, lock, 20*time.Millisecond)
				assert.NoError(t, r.err)
			})
			wg.Go(func() { // cancelled
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
				defer cancel()
				<-goFetch(ctx, s.OpenLongPolling(), q.worker, lock, time.Minute)
			})
		}
		// Delayed visibility: wakes waiters on its due time.
		require.NoError(t, producer.EnqueueForOrchestrator(t.Context(), start(fmt.Sprint("d", i)), time.Duration(i)*time.Millisecond))
	}
	// Work for every fetch, so that none waiting on an enqueue is left
	// without (each takes at most one instance or activity).
	for i := range 3 * n {
		require.NoError(t, producer.EnqueueForOrchestrator(t.Context(), start(fmt.Sprint("o", i)), 0))
		require.NoError(t, producer.EnqueueForWorker(t.Context(), activity("w", uint64(i+1))))
	}
	wg.Wait()

	deadline := time.Now().Add(hang)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines leaked: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Nil(t, s.changed, "no fetch is left waiting")
}
