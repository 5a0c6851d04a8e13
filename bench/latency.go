package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/internal/clock"
)

// Case is what a latency scenario measures.
type Case string

// The latency cases.
const (
	// CaseWakeRemote: StartOrchestration enqueued through a separate
	// provider instance (another replica's client, its own connections);
	// latency = fetch return - enqueue return.
	CaseWakeRemote Case = "wake-remote"
	// CaseWakeRemoteBusy: CaseWakeRemote while the same client also
	// enqueues background work for other instances every BusyInterval,
	// which the fetcher processes too: the owner's feed is active, as in
	// a loaded system, rather than backing off between samples.
	CaseWakeRemoteBusy Case = "wake-remote-busy"
	// CaseWakeLocal: the same, enqueued through the fetcher's own provider.
	CaseWakeLocal Case = "wake-local"
	// CaseTimer: TimerFired enqueued through a separate provider instance
	// with a visibility delay d; lateness = fetch return - (enqueue return
	// + d).
	CaseTimer Case = "timer"
)

// Cases lists every case.
var Cases = []Case{CaseWakeRemote, CaseWakeRemoteBusy, CaseWakeLocal, CaseTimer}

// ParseCase parses a case name.
func ParseCase(s string) (Case, error) {
	for _, c := range Cases {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("bench: unknown case %q (want one of %v)", s, Cases)
}

// FetchLoop says how a dispatcher calls fetch.
type FetchLoop struct {
	// PollInterval is the sleep after a fetch that found nothing in polling
	// mode (the seeds' runtime: 1 s).
	PollInterval time.Duration
	// PollTimeout is passed to fetch; an event-driven fetch waits up to
	// that long for work, and the loop fetches again at once when it
	// returns nothing (default 5 s, the runtime's).
	PollTimeout time.Duration
	// LockTimeout is the lock a fetch takes (default 30 s).
	LockTimeout time.Duration
}

func (f FetchLoop) withDefaults() FetchLoop {
	if f.PollInterval <= 0 {
		f.PollInterval = time.Second
	}
	if f.PollTimeout <= 0 {
		f.PollTimeout = 5 * time.Second
	}
	if f.LockTimeout <= 0 {
		f.LockTimeout = 30 * time.Second
	}
	return f
}

// idle is the pause after a fetch that found nothing: the seeds' poll
// interval in polling mode; none in event-driven mode, whose fetch already
// waited.
func (f FetchLoop) idle(m Mode) time.Duration {
	if m == ModePolling {
		return f.PollInterval
	}
	return 0
}

// errorBackoff is the pause after a failed fetch.
const errorBackoff = 100 * time.Millisecond

// LatencyScenario is one latency measurement: a closed loop that enqueues
// one item, waits until the fetcher returns it, pauses for a random
// interval and repeats. One item in flight at a time means a sample is pure
// wake (or timer) latency, never queueing behind earlier items.
type LatencyScenario struct {
	// Mode is the fetcher's mode.
	Mode Mode
	// Case is what is measured.
	Case Case
	// Samples are kept after Warmup samples are discarded; when
	// MaxDuration is positive, no sample starts after it has elapsed since
	// the scenario started (so a slow scenario yields fewer samples).
	Samples, Warmup int
	MaxDuration     time.Duration
	// Interval is the pause before each enqueue, drawn uniformly: it sets
	// how long the system has been quiet (a change-feed reader backs off
	// while nothing changes).
	Interval Range
	// TimerDelay is the visibility delay of CaseTimer items, drawn
	// uniformly.
	TimerDelay Range
	// BusyInterval is the pause between background enqueues of
	// CaseWakeRemoteBusy (default 50 ms: about a fifth of what one
	// dispatcher loop absorbs with 2 ms round trips, so samples measure
	// wake latency, not queueing).
	BusyInterval time.Duration
	// Fetch says how the fetcher calls fetch.
	Fetch FetchLoop
	// SampleTimeout bounds the wait for one item (default 30 s); an item
	// not fetched in time is counted as lost.
	SampleTimeout time.Duration
	// Seed seeds the intervals and delays.
	Seed uint64
}

// LatencyResult is the outcome of a LatencyScenario.
type LatencyResult struct {
	Mode              Mode    `json:"mode"`
	Case              Case    `json:"case"`
	InjectedLatencyMS float64 `json:"injected_latency_ms"`
	Summary
	// Lost counts items not fetched within the sample timeout.
	Lost int `json:"lost"`
	// FetchErrors and AckErrors count failed provider calls.
	FetchErrors int64 `json:"fetch_errors"`
	AckErrors   int64 `json:"ack_errors"`
	// SamplesMS are the kept samples in order, in milliseconds. Negative
	// values (at most a round trip) mean the fetch returned before the
	// enqueue call did.
	SamplesMS []float64 `json:"samples_ms"`
	// PausesMS are the pauses that preceded each kept sample's enqueue:
	// how long the system had been quiet.
	PausesMS []float64 `json:"pauses_ms"`
	// FeedReadsPerMin and RUPerMin are the change-feed reads (document
	// ranges, not the lease partition) and the simulated charge of every
	// request on the scenario's container while the kept samples ran,
	// per minute: what the latency cost.
	FeedReadsPerMin float64 `json:"feed_reads_per_min"`
	RUPerMin        float64 `json:"ru_per_min"`
	// RUPerWake is the same charge per kept sample: the cost to compare
	// between modes, since a loop with one item in flight runs as fast
	// as its wakes (a faster mode does more work a minute).
	RUPerWake float64 `json:"ru_per_wake"`
}

// RunLatency runs one latency scenario in a container of its own and
// closes its providers. Deferred steps complete the (named) result after
// the sampling loop returns: the error counts and what the samples cost.
func (e *Env) RunLatency(ctx context.Context, s LatencyScenario) (res LatencyResult, err error) {
	s.Fetch = s.Fetch.withDefaults()
	if s.SampleTimeout <= 0 {
		s.SampleTimeout = 30 * time.Second
	}
	res = LatencyResult{Mode: s.Mode, Case: s.Case, InjectedLatencyMS: ms(e.Latency())}
	container, drop, err := e.newContainer(ctx, fmt.Sprintf("%s-%s", s.Case, s.Mode))
	if err != nil {
		return res, err
	}
	defer drop()
	fetcher, err := e.openProvider(ctx, container, s.Mode)
	if err != nil {
		return res, err
	}
	defer func() { _ = fetcher.Close() }()
	var enq durable.Provider = fetcher
	if s.Case != CaseWakeLocal {
		client, err := e.openProvider(ctx, container, clientMode(s.Mode))
		if err != nil {
			return res, err
		}
		defer func() { _ = client.Close() }()
		enq = client
	}

	w := &waiters{m: map[string]chan time.Time{}}
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var fetchErrs, ackErrs atomic.Int64
	wg.Go(func() {
		runFetchLoop(loopCtx, fetcher, s.Mode, s.Fetch, &fetchErrs, func(item *durable.OrchestrationItem, at time.Time) {
			w.deliver(item.Instance, at)
			// Commit off the fetch loop, as a runtime's turn would run
			// while its dispatcher loop is free to fetch again.
			wg.Go(func() {
				if err := ackTurn(context.WithoutCancel(loopCtx), fetcher, item); err != nil {
					ackErrs.Add(1)
				}
			})
		})
	})
	defer func() {
		stop()
		wg.Wait()
		res.FetchErrors, res.AckErrors = fetchErrs.Load(), ackErrs.Load()
	}()
	if s.Case == CaseWakeRemoteBusy {
		every := s.BusyInterval
		if every <= 0 {
			every = 50 * time.Millisecond
		}
		wg.Go(func() {
			for i := 0; clock.Sleep(loopCtx, every); i++ {
				bg := durable.StartOrchestration{Instance: fmt.Sprintf("%s-bg-%06d", container, i), Orchestration: "bench", Input: "{}", ExecutionID: 1}
				if err := enq.EnqueueForOrchestrator(loopCtx, bg, 0); err != nil && loopCtx.Err() == nil {
					fetchErrs.Add(1)
				}
			}
		})
	}

	// Every scenario draws the same sequence for a seed: modes are compared
	// on identical intervals and delays.
	rng := rand.New(rand.NewPCG(s.Seed, 0x6475726166656564))
	var samples []time.Duration
	began := time.Now()
	var u0 Usage
	var t0 time.Time
	defer func() {
		if t0.IsZero() {
			return
		}
		if mins := time.Since(t0).Minutes(); mins > 0 {
			u := e.usage(container).sub(u0)
			res.FeedReadsPerMin = round2(float64(u.ByOperation["ChangeFeed"].Requests) / mins)
			res.RUPerMin = round2(u.RequestCharge / mins)
			if len(samples) > 0 {
				res.RUPerWake = round2(u.RequestCharge / float64(len(samples)))
			}
		}
	}()
	for i := range s.Warmup + s.Samples {
		if i == s.Warmup {
			u0, t0 = e.usage(container), time.Now()
		}
		if s.MaxDuration > 0 && i > s.Warmup && time.Since(began) >= s.MaxDuration {
			break
		}
		pause := s.Interval.draw(rng.Float64())
		if !clock.Sleep(ctx, pause) {
			return res, ctx.Err()
		}
		inst := fmt.Sprintf("%s-%04d", container, i)
		ch := w.expect(inst)
		var item durable.WorkItem = durable.StartOrchestration{Instance: inst, Orchestration: "bench", Input: "{}", ExecutionID: 1}
		var delay time.Duration
		if s.Case == CaseTimer {
			delay = s.TimerDelay.draw(rng.Float64())
			item = durable.TimerFired{Instance: inst, ExecutionID: 1, ID: 1, FireAtMS: uint64(time.Now().Add(delay).UnixMilli())}
		}
		if err := enq.EnqueueForOrchestrator(ctx, item, delay); err != nil {
			return res, fmt.Errorf("bench: enqueue: %w", err)
		}
		done := time.Now()
		timeout := time.NewTimer(delay + s.SampleTimeout)
		select {
		case at := <-ch:
			if i >= s.Warmup {
				samples = append(samples, at.Sub(done)-delay)
				res.PausesMS = append(res.PausesMS, ms(pause))
			}
		case <-timeout.C:
			w.forget(inst)
			if i >= s.Warmup {
				res.Lost++
			}
		case <-ctx.Done():
			timeout.Stop()
			return res, ctx.Err()
		}
		timeout.Stop()
	}
	res.Summary = Summarize(samples)
	res.SamplesMS = make([]float64, len(samples))
	for i, d := range samples {
		res.SamplesMS[i] = ms(d)
	}
	return res, nil
}

// runFetchLoop fetches until ctx ends, calling got with every item and the
// time its fetch returned. In polling mode a fetch that finds nothing is
// followed by the seeds' pause; an item is followed by the next fetch at
// once. With got nil an item is abandoned.
func runFetchLoop(ctx context.Context, p durable.Provider, m Mode, f FetchLoop, errs *atomic.Int64, got func(*durable.OrchestrationItem, time.Time)) {
	for ctx.Err() == nil {
		item, err := p.FetchOrchestrationItem(ctx, f.LockTimeout, f.PollTimeout, nil)
		at := time.Now()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				errs.Add(1)
				clock.Sleep(ctx, errorBackoff)
			}
		case item == nil:
			clock.Sleep(ctx, f.idle(m))
		case got == nil:
			if err := p.AbandonOrchestrationItem(context.WithoutCancel(ctx), item.LockToken, 0, true); err != nil {
				errs.Add(1)
			}
		default:
			got(item, at)
		}
	}
}

// runWorkerLoop is runFetchLoop for the worker queue (idle scenarios: no
// work ever arrives, but an idle replica's worker dispatcher polls too).
func runWorkerLoop(ctx context.Context, p durable.Provider, m Mode, f FetchLoop, errs *atomic.Int64) {
	for ctx.Err() == nil {
		item, err := p.FetchWorkItem(ctx, f.LockTimeout, f.PollTimeout, nil, durable.DefaultOnlyTags())
		switch {
		case err != nil:
			if ctx.Err() == nil {
				errs.Add(1)
				clock.Sleep(ctx, errorBackoff)
			}
		case item == nil:
			clock.Sleep(ctx, f.idle(m))
		default:
			if err := p.AbandonWorkItem(context.WithoutCancel(ctx), item.LockToken, 0, true); err != nil {
				errs.Add(1)
			}
		}
	}
}

// countingProvider counts fetch calls.
type countingProvider struct {
	durable.Provider
	n *atomic.Int64
}

func (c countingProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	c.n.Add(1)
	return c.Provider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
}

func (c countingProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	c.n.Add(1)
	return c.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
}

// ackTurn completes the fetched instance in one turn, so it leaves no
// queued message behind.
func ackTurn(ctx context.Context, p durable.Provider, item *durable.OrchestrationItem) error {
	next := uint64(len(item.History)) + 1
	ev := func(id uint64, k history.EventKind) history.Event {
		return history.Event{EventID: id, InstanceID: item.Instance, ExecutionID: item.ExecutionID,
			TimestampMS: uint64(time.Now().UnixMilli()), RuntimeVersion: "0.1.0", Kind: k}
	}
	var delta []history.Event
	if len(item.History) == 0 {
		delta = append(delta, ev(next, history.OrchestrationStarted{Name: "bench", Version: "1.0.0", Input: "{}"}))
		next++
	}
	out := "{}"
	delta = append(delta, ev(next, history.OrchestrationCompleted{Output: out}))
	return p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  item.ExecutionID,
		HistoryDelta: delta,
		Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &out,
			OrchestrationName: "bench", OrchestrationVersion: "1.0.0"},
	})
}

// waiters hands fetch times to the enqueuer waiting for them.
type waiters struct {
	mu sync.Mutex
	m  map[string]chan time.Time
}

func (w *waiters) expect(inst string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.m[inst] = ch
	w.mu.Unlock()
	return ch
}

func (w *waiters) forget(inst string) {
	w.mu.Lock()
	delete(w.m, inst)
	w.mu.Unlock()
}

func (w *waiters) deliver(inst string, at time.Time) {
	w.mu.Lock()
	ch, ok := w.m[inst]
	delete(w.m, inst)
	w.mu.Unlock()
	if ok {
		ch <- at
	}
}
