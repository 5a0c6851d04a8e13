package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/provider"
)

// FailoverScenario measures what a replica cut off without a graceful
// leave costs the work: Replicas providers run an orchestration
// dispatcher loop each on one container while a separate client enqueues
// a steady trickle of starts; after Before, the first replica is crashed
// (provider.Crash: nothing released) at the moment it holds a turn it has
// not acked, and the trickle goes on for After. Every item's latency is
// its completion (the ack of a surviving replica) less its enqueue.
type FailoverScenario struct {
	// Mode is the replicas' mode.
	Mode Mode
	// Replicas is the number of dispatching providers (default 3).
	Replicas int
	// Warmup is waited, with the trickle running, before Before starts
	// (leases balance; default 15 s).
	Warmup time.Duration
	// Before and After are the trickle's windows around the cut (default
	// 5 s and 30 s).
	Before, After time.Duration
	// Interval is the pause between enqueues (default 50–150 ms).
	Interval Range
	// TurnTime is how long a turn holds its lock before its ack (default
	// 20 ms), so that a replica has turns in flight, as a runtime replaying
	// an orchestration has.
	TurnTime time.Duration
	// Fetch says how the dispatcher loops call fetch.
	Fetch FetchLoop
	// SampleTimeout bounds the wait for the last items (default 60 s);
	// an item not completed by then is lost.
	SampleTimeout time.Duration
	// Seed seeds the intervals.
	Seed uint64
}

// FailoverResult is the outcome of a FailoverScenario.
type FailoverResult struct {
	Mode              Mode    `json:"mode"`
	Replicas          int     `json:"replicas"`
	InjectedLatencyMS float64 `json:"injected_latency_ms"`
	// Before summarises the items enqueued after the warm-up that
	// completed before the cut; After every other item: those in flight
	// at the cut (Held among them), those waiting in the dead replica's
	// slots, and those enqueued after it.
	Before Summary `json:"before"`
	After  Summary `json:"after"`
	// Held summarises the items the dead replica held locked at the cut.
	Held Summary `json:"held"`
	// Lost counts items not completed within the sample timeout.
	Lost int `json:"lost"`
	// RUPerMin is the simulated charge of every request on the container
	// during the After window, per minute.
	RUPerMin float64 `json:"ru_per_min"`
	// FetchErrors and AckErrors count failed calls of surviving replicas.
	FetchErrors int64 `json:"fetch_errors"`
	AckErrors   int64 `json:"ack_errors"`
}

func (s FailoverScenario) withDefaults() FailoverScenario {
	if s.Replicas <= 0 {
		s.Replicas = 3
	}
	if s.Warmup <= 0 {
		s.Warmup = 15 * time.Second
	}
	if s.Before <= 0 {
		s.Before = 5 * time.Second
	}
	if s.After <= 0 {
		s.After = 30 * time.Second
	}
	if s.Interval == (Range{}) {
		s.Interval = Range{50 * time.Millisecond, 150 * time.Millisecond}
	}
	if s.TurnTime <= 0 {
		s.TurnTime = 20 * time.Millisecond
	}
	if s.SampleTimeout <= 0 {
		s.SampleTimeout = 60 * time.Second
	}
	s.Fetch = s.Fetch.withDefaults()
	return s
}

// failoverLog records enqueue and completion times by instance.
type failoverLog struct {
	mu       sync.Mutex
	enqueued map[string]time.Time
	done     map[string]time.Time
	held     map[string]bool
	warm     map[string]bool // enqueued during the warm-up: not reported unless held
	changed  chan struct{}   // closed and replaced on every completion
}

func (l *failoverLog) complete(inst string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.done[inst]; !ok {
		l.done[inst] = at
		close(l.changed)
		l.changed = make(chan struct{})
	}
}

// RunFailover runs one failover scenario in a container of its own and
// closes its providers.
func (e *Env) RunFailover(ctx context.Context, s FailoverScenario) (res FailoverResult, err error) {
	s = s.withDefaults()
	res = FailoverResult{Mode: s.Mode, Replicas: s.Replicas, InjectedLatencyMS: ms(e.Latency())}
	container, drop, err := e.newContainer(ctx, fmt.Sprintf("failover-%s", s.Mode))
	if err != nil {
		return res, err
	}
	defer drop()
	client, err := e.openProvider(ctx, container, clientMode(s.Mode))
	if err != nil {
		return res, err
	}
	defer func() { _ = client.Close() }()

	log := &failoverLog{enqueued: map[string]time.Time{}, done: map[string]time.Time{}, held: map[string]bool{},
		warm: map[string]bool{}, changed: make(chan struct{})}
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var fetchErrs, ackErrs atomic.Int64
	var replicas []*provider.Provider
	defer func() {
		stop()
		wg.Wait()
		for _, p := range replicas {
			_ = p.Close()
		}
		res.FetchErrors, res.AckErrors = fetchErrs.Load(), ackErrs.Load()
	}()

	// The victim is replica 0: once cut is closed, the first turn it
	// fetches is not acked, and the replica crashes holding it.
	cut := make(chan struct{})
	crashed := make(chan struct{})
	var crashOnce sync.Once
	var crashAt time.Time // written before crashed is closed
	victimCtx, stopVictim := context.WithCancel(loopCtx)
	defer stopVictim()
	for i := range s.Replicas {
		p, err := e.openProvider(ctx, container, s.Mode)
		if err != nil {
			return res, err
		}
		replicas = append(replicas, p)
		lctx, errs := loopCtx, &fetchErrs
		if i == 0 {
			lctx, errs = victimCtx, new(atomic.Int64) // a dead replica's failures are not the survivors'
		}
		wg.Go(func() {
			runFetchLoop(lctx, p, s.Mode, s.Fetch, errs, func(item *durable.OrchestrationItem, _ time.Time) {
				if i == 0 {
					select {
					case <-cut:
						crashOnce.Do(func() {
							log.mu.Lock()
							log.held[item.Instance] = true
							log.mu.Unlock()
							p.Crash()
							stopVictim()
							crashAt = time.Now()
							close(crashed)
						})
						return
					default:
					}
				}
				wg.Go(func() {
					if !clock.Sleep(lctx, s.TurnTime) {
						return
					}
					if err := ackTurn(context.WithoutCancel(lctx), p, item); err != nil {
						if i != 0 {
							ackErrs.Add(1)
						}
						return
					}
					log.complete(item.Instance, time.Now())
				})
			})
		})
	}

	rng := rand.New(rand.NewPCG(s.Seed, 0x6661696c6f766572))
	began := time.Now()
	var cutAt time.Time
	var u0 Usage
	var t0 time.Time
	cutOpen := false
	for i := 0; ; i++ {
		el := time.Since(began)
		if !cutOpen && el >= s.Warmup+s.Before {
			close(cut) // the victim crashes at its next turn; the trickle goes on
			cutOpen = true
		}
		if cutOpen && cutAt.IsZero() {
			select {
			case <-crashed:
				cutAt, u0, t0 = crashAt, e.usage(container), time.Now()
			default:
				if el >= s.Warmup+s.Before+s.SampleTimeout {
					return res, fmt.Errorf("bench: the replica to cut fetched nothing for %v", s.SampleTimeout)
				}
			}
		}
		if !cutAt.IsZero() && time.Since(cutAt) >= s.After {
			break
		}
		if !clock.Sleep(ctx, s.Interval.draw(rng.Float64())) {
			return res, ctx.Err()
		}
		inst := fmt.Sprintf("%s-%05d", container, i)
		item := durable.StartOrchestration{Instance: inst, Orchestration: "bench", Input: "{}", ExecutionID: 1}
		if err := client.EnqueueForOrchestrator(ctx, item, 0); err != nil {
			return res, fmt.Errorf("bench: enqueue: %w", err)
		}
		log.mu.Lock()
		log.enqueued[inst] = time.Now()
		if time.Since(began) < s.Warmup {
			log.warm[inst] = true
		}
		log.mu.Unlock()
	}
	if mins := time.Since(t0).Minutes(); mins > 0 {
		res.RUPerMin = round2(e.usage(container).sub(u0).RequestCharge / mins)
	}

	// Wait for the stragglers (a held lock may take its whole timeout).
	deadline := time.NewTimer(s.SampleTimeout)
	defer deadline.Stop()
	for waiting := true; waiting; {
		log.mu.Lock()
		left := 0
		for inst := range log.enqueued {
			if _, ok := log.done[inst]; !ok {
				left++
			}
		}
		ch := log.changed
		log.mu.Unlock()
		if left == 0 {
			break
		}
		select {
		case <-ch:
		case <-deadline.C:
			waiting = false
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	var before, after, held []time.Duration
	for inst, at := range log.enqueued {
		if log.warm[inst] && !log.held[inst] {
			continue
		}
		done, ok := log.done[inst]
		switch {
		case !ok:
			res.Lost++
		case done.Before(cutAt):
			before = append(before, done.Sub(at))
		default:
			after = append(after, done.Sub(at))
			if log.held[inst] {
				held = append(held, done.Sub(at))
			}
		}
	}
	res.Before, res.After, res.Held = Summarize(before), Summarize(after), Summarize(held)
	return res, nil
}
