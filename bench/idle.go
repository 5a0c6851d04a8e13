package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/provider"
)

// IdleScenario measures what replicas cost while there is no work: each
// replica is a provider with one orchestration and one worker dispatcher
// loop (FetchLoop), on one shared container.
type IdleScenario struct {
	// Mode is the replicas' mode.
	Mode Mode
	// Replicas is the number of providers.
	Replicas int
	// Warmup is waited before the window starts (lease acquisition and
	// balancing, readers backing off to their idle ceiling).
	Warmup time.Duration
	// Window is the measurement window, read in Slices of equal length to
	// show whether the rate is steady (default one slice).
	Window time.Duration
	Slices int
	// Fetch says how the dispatcher loops call fetch.
	Fetch FetchLoop
}

// IdleResult is the outcome of an IdleScenario. Rates are per minute and
// per replica: the container's total divided by the replica count, shared
// costs (lease partition, heartbeats) included.
type IdleResult struct {
	Mode              Mode    `json:"mode"`
	Replicas          int     `json:"replicas"`
	InjectedLatencyMS float64 `json:"injected_latency_ms"`
	WarmupS           float64 `json:"warmup_s"`
	WindowS           float64 `json:"window_s"`
	// RequestsPerMin and RUPerMin are per replica; RUPerSec is RUPerMin/60.
	RequestsPerMin float64 `json:"requests_per_min_per_replica"`
	RUPerMin       float64 `json:"ru_per_min_per_replica"`
	RUPerSec       float64 `json:"ru_per_sec_per_replica"`
	// SliceRUPerMin is RUPerMin in each slice of the window.
	SliceRUPerMin []float64 `json:"slice_ru_per_min_per_replica"`
	// ByOperation is per replica and minute.
	ByOperation map[string]OpRate `json:"by_operation"`
	// FetchesPerMin counts the dispatcher loops' fetch calls per replica
	// and minute (both queues).
	FetchesPerMin float64 `json:"fetches_per_min_per_replica"`
	// FetchErrors counts failed fetches in the window.
	FetchErrors int64 `json:"fetch_errors"`
	// CounterDriftRU is a self-check of the harness: the difference
	// between the container's total charge as the knobs count it and as
	// the per-operation counters do, over the container's whole life,
	// read once its replicas have stopped (0 when every request was seen
	// by both). The window's figures are read while requests are in
	// flight, so they may differ by those requests.
	CounterDriftRU float64 `json:"counter_drift_ru"`
	// Backstop is the event-driven safety sweep's period and cost (nil in
	// polling mode).
	Backstop *Backstop `json:"backstop,omitempty"`
}

// Backstop is what the event-driven mode's safety sweep costs: the
// bound on how long a written item can go unseen when every signal for
// it was lost (engine.Options.SafetySweepInterval).
type Backstop struct {
	// PeriodS is the configured sweep period (each sweep jittered by up
	// to a tenth below it).
	PeriodS float64 `json:"period_s"`
	// Sweeps counts the sweeps the replicas ran in the window, and
	// SweepsPerMin is their rate per replica: the period as measured.
	Sweeps       int64   `json:"sweeps"`
	SweepsPerMin float64 `json:"sweeps_per_min_per_replica"`
	// RUPerSweep is the window's cross-partition query charge divided by
	// its sweeps (0 when none ran); RUPerMin is the sweeps' charge per
	// replica and minute.
	RUPerSweep float64 `json:"ru_per_sweep"`
	RUPerMin   float64 `json:"ru_per_min_per_replica"`
}

// OpRate is the rate of one kind of operation.
type OpRate struct {
	RequestsPerMin float64 `json:"requests_per_min"`
	RUPerMin       float64 `json:"ru_per_min"`
}

// RunIdle runs one idle scenario in a container of its own and closes its
// providers.
func (e *Env) RunIdle(ctx context.Context, s IdleScenario) (res IdleResult, err error) {
	s.Fetch = s.Fetch.withDefaults()
	if s.Replicas <= 0 {
		s.Replicas = 1
	}
	if s.Slices <= 0 {
		s.Slices = 1
	}
	res = IdleResult{Mode: s.Mode, Replicas: s.Replicas, InjectedLatencyMS: ms(e.Latency()),
		WarmupS: s.Warmup.Seconds(), WindowS: s.Window.Seconds()}
	if s.Window <= 0 {
		return res, fmt.Errorf("bench: idle window must be positive")
	}
	container, drop, err := e.newContainer(ctx, fmt.Sprintf("idle-%s-%d", s.Mode, s.Replicas))
	if err != nil {
		return res, err
	}
	defer drop()
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var fetches, errs atomic.Int64
	var replicas []*provider.Provider
	defer func() {
		stop()
		wg.Wait()
		for _, p := range replicas {
			_ = p.Close()
		}
		u := e.usage(container)
		var sum float64
		for _, op := range u.ByOperation {
			sum += op.RequestCharge
		}
		res.CounterDriftRU = round2(math.Abs(u.RequestCharge - sum))
	}()
	for range s.Replicas {
		p, err := e.openProvider(ctx, container, s.Mode)
		if err != nil {
			return res, err
		}
		replicas = append(replicas, p)
		wg.Go(func() { runFetchLoop(loopCtx, countingProvider{p, &fetches}, s.Mode, s.Fetch, &errs, nil) })
		wg.Go(func() { runWorkerLoop(loopCtx, countingProvider{p, &fetches}, s.Mode, s.Fetch, &errs) })
	}
	if !clock.Sleep(ctx, s.Warmup) {
		return res, ctx.Err()
	}
	sweeps := func() int64 {
		var n int64
		for _, p := range replicas {
			if st, ok := p.EngineStats(); ok {
				n += st.Sweeps
			}
		}
		return n
	}
	start, f0, e0, s0 := e.usage(container), fetches.Load(), errs.Load(), sweeps()
	prev := start
	slice := s.Window / time.Duration(s.Slices)
	perReplicaMin := func(v float64, d time.Duration) float64 {
		return round2(v / float64(s.Replicas) / d.Minutes())
	}
	for range s.Slices {
		if !clock.Sleep(ctx, slice) {
			return res, ctx.Err()
		}
		cur := e.usage(container)
		res.SliceRUPerMin = append(res.SliceRUPerMin, perReplicaMin(cur.RequestCharge-prev.RequestCharge, slice))
		prev = cur
	}
	window := slice * time.Duration(s.Slices)
	total := prev.sub(start)
	res.WindowS = window.Seconds()
	res.RequestsPerMin = perReplicaMin(float64(total.Requests), window)
	res.RUPerMin = perReplicaMin(total.RequestCharge, window)
	res.RUPerSec = math.Round(res.RUPerMin/60*1000) / 1000
	res.ByOperation = map[string]OpRate{}
	for k, u := range total.ByOperation {
		res.ByOperation[k] = OpRate{RequestsPerMin: perReplicaMin(float64(u.Requests), window), RUPerMin: perReplicaMin(u.RequestCharge, window)}
	}
	res.FetchesPerMin = perReplicaMin(float64(fetches.Load()-f0), window)
	res.FetchErrors = errs.Load() - e0
	if s.Mode == ModeEventDriven {
		b := &Backstop{PeriodS: e.sweepPeriod().Seconds(), Sweeps: sweeps() - s0}
		b.SweepsPerMin = perReplicaMin(float64(b.Sweeps), window)
		var ru float64
		for k, u := range total.ByOperation {
			if strings.HasSuffix(k, account.CrossPartition) {
				ru += u.RequestCharge
			}
		}
		if b.Sweeps > 0 {
			b.RUPerSweep = round2(ru / float64(b.Sweeps))
		}
		b.RUPerMin = perReplicaMin(ru, window)
		res.Backstop = b
	}
	return res, nil
}
