package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/durafeed/durafeed/internal/account"
)

// Config configures Run. Zero fields take the documented defaults
// (DefaultConfig).
type Config struct {
	// Modes to compare (default both).
	Modes []Mode
	// Latencies injected per request, one emulator each (default 0 and
	// 2 ms).
	Latencies []time.Duration
	// Cases of the latency phase (default all).
	Cases []Case
	// Replicas are the replica counts of the idle phase (default 1 and 3).
	Replicas []int

	// Samples per latency scenario after Warmup discarded ones (default
	// 100 and 3: with fewer than 100 samples the nearest-rank p99 is the
	// maximum, one outlier). MaxDuration (default 60 s; negative: none)
	// ends an event-driven scenario earlier: they run one at a time, and
	// one whose samples take seconds would otherwise dominate the run.
	// Polling scenarios run all at once before them and always take all
	// their samples (about 1 s each).
	Samples, Warmup int
	MaxDuration     time.Duration
	// Interval is the random pause before each enqueue (default
	// 20 ms–1.02 s). Keep its width a whole number of polling intervals:
	// the loop is closed, so the pause starts when the polling fetcher last
	// found an item, and only such a width puts each enqueue at a uniformly
	// random phase of the polling loop (a 1.2 s width puts polling's mean
	// near 0.7 s instead of 0.5 s).
	Interval Range
	// TimerDelay is the visibility delay of timer items (default
	// 200 ms–1 s).
	TimerDelay Range
	// Fetch says how dispatcher loops call fetch (defaults: 1 s polling
	// sleep, 5 s long-poll, 30 s lock).
	Fetch FetchLoop
	// SampleTimeout bounds the wait for one item (default 30 s).
	SampleTimeout time.Duration

	// IdleWarmup, IdleWindow and IdleSlices shape the idle measurement
	// (default 15 s, 30 s, 6).
	IdleWarmup, IdleWindow time.Duration
	IdleSlices             int

	// Failover runs the failover phase (FailoverScenario, both modes, at
	// every injected latency) with this After window (default 30 s;
	// negative: skip the phase).
	Failover time.Duration

	// Sweep are the loads of the sweep phase (DefaultSweepLoads; nil: no
	// sweep phase). Each load runs in both modes at every injected latency:
	// loads under one arrival a second one scenario at a time (they keep a
	// CPU busy), the others all at once beside them.
	Sweep []SweepLoad
	// SweepDispatchers is the fetch loops of a sweep replica (default 4);
	// SweepTail and SweepSettle are SweepScenario's Tail and Settle
	// (defaults 5 s and 2 s).
	SweepDispatchers       int
	SweepTail, SweepSettle time.Duration

	// Stress runs the stress phase (RunStress: duroxide's
	// parallel_orchestrations) with this workload (nil: no stress phase;
	// its zero fields take DefaultStressConfig's values). Each of its
	// replica counts runs in both modes at every injected latency, one
	// scenario at a time.
	Stress *StressConfig

	// Backlog runs the backlog phase (RunBacklog: a backlog enqueued with
	// no replica running, then drained) with this configuration (nil: no
	// backlog phase; its zero fields take DefaultBacklogConfig's values).
	// Each of its depths runs in every mode at every injected latency,
	// one scenario at a time.
	Backlog *BacklogConfig

	// PeerWake turns the peer wake channel on in event-driven mode
	// (EnvOptions.PeerWake).
	PeerWake bool
	// FeedBudget is the event-driven replicas' empty-read budget in RU per
	// second (EnvOptions.FeedBudget; zero: the engine's default).
	FeedBudget float64
	// FeedReadsPerChange is the replicas' engine.FeedOptions.ReadsPerChange
	// (zero: the engine's default).
	FeedReadsPerChange float64
	// SiblingWait is the replicas' engine.Options.SiblingWait (zero or
	// negative: off, the engine's default).
	SiblingWait time.Duration
	// NoEager is the replicas' engine.Options.DisableEager.
	NoEager bool

	// PartitionCount is the number of physical partitions of the embedded
	// emulator's containers (default 4; an account's are its own).
	PartitionCount int
	// Account, when set, runs every scenario on this account (or an
	// emulator over its endpoint) in a throwaway database: Latencies must
	// be {0} (nothing is injected), and the figures are the account's
	// charges as its answers report them.
	Account *account.Options
	// MaxRU, when positive, refuses a run whose Estimate is above it and
	// stops a run whose clients have spent it (the error wraps
	// account.ErrOverCap).
	MaxRU float64
	// Parallel bounds how many event-driven latency scenarios run at once
	// (default 1; negative: no bound). Polling latency scenarios run all
	// at once before them; idle scenarios all run at once afterwards.
	// Every scenario has its own container.
	Parallel int
	// Seed seeds intervals and delays (default 1).
	Seed uint64
	// Progress, when set, receives one line per finished step (one call at
	// a time).
	Progress func(string)
}

// DefaultConfig returns the configuration `go run ./cmd/durafeed-bench`
// uses without flags.
func DefaultConfig() Config {
	return Config{
		Modes:         append([]Mode(nil), Modes...),
		Latencies:     []time.Duration{0, 2 * time.Millisecond},
		Cases:         append([]Case(nil), Cases...),
		Replicas:      []int{1, 3},
		Samples:       100,
		Warmup:        3,
		MaxDuration:   60 * time.Second,
		Interval:      Range{20 * time.Millisecond, 1020 * time.Millisecond},
		TimerDelay:    Range{200 * time.Millisecond, time.Second},
		Fetch:         FetchLoop{}.withDefaults(),
		SampleTimeout: 30 * time.Second,
		IdleWarmup:    15 * time.Second,
		// Longer than the engine's safety sweep period, so that the
		// window holds each replica's first sweep (IdleResult.Backstop).
		IdleWindow:     75 * time.Second,
		IdleSlices:     6,
		Failover:       30 * time.Second,
		PartitionCount: 4,
		Parallel:       1,
		Seed:           1,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Modes == nil {
		c.Modes = d.Modes
	}
	if c.Latencies == nil {
		c.Latencies = d.Latencies
	}
	if c.Cases == nil {
		c.Cases = d.Cases
	}
	if c.Replicas == nil {
		c.Replicas = d.Replicas
	}
	if c.Samples <= 0 {
		c.Samples = d.Samples
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = d.MaxDuration
	}
	if c.Interval == (Range{}) {
		c.Interval = d.Interval
	}
	if c.TimerDelay == (Range{}) {
		c.TimerDelay = d.TimerDelay
	}
	c.Fetch = c.Fetch.withDefaults()
	if c.SampleTimeout <= 0 {
		c.SampleTimeout = d.SampleTimeout
	}
	if c.IdleWindow <= 0 {
		c.IdleWindow = d.IdleWindow
	}
	if c.IdleWarmup < 0 {
		c.IdleWarmup = 0
	}
	if c.IdleSlices <= 0 {
		c.IdleSlices = d.IdleSlices
	}
	if c.Failover == 0 {
		c.Failover = d.Failover
	}
	if c.PartitionCount <= 0 {
		c.PartitionCount = d.PartitionCount
	}
	if c.Parallel == 0 {
		c.Parallel = d.Parallel
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.Stress != nil {
		s := c.Stress.withDefaults()
		c.Stress = &s
	}
	if c.Backlog != nil {
		b := c.Backlog.withDefaults()
		c.Backlog = &b
	}
	return c
}

// Report is everything a run measured. It is written as a table
// (WriteTable) and as JSON.
type Report struct {
	StartedAt time.Time `json:"started_at"`
	ElapsedS  float64   `json:"elapsed_s"`
	GoVersion string    `json:"go_version"`
	Platform  string    `json:"platform"`
	NumCPU    int       `json:"num_cpu"`
	Settings  Settings  `json:"settings"`
	// Environments are the emulators, one per injected latency, or the
	// account.
	Environments []EnvInfo `json:"environments"`
	// EstimateRU is Estimate's figure for the run; SpentRU and Throttled
	// what its clients were charged and how many 429s they got.
	EstimateRU float64          `json:"estimate_ru"`
	SpentRU    float64          `json:"spent_ru"`
	Throttled  int64            `json:"throttled"`
	Latency    []LatencyResult  `json:"latency"`
	Idle       []IdleResult     `json:"idle"`
	Failover   []FailoverResult `json:"failover,omitempty"`
	Sweep      []SweepResult    `json:"sweep,omitempty"`
	Stress     []StressResult   `json:"stress,omitempty"`
	Backlog    []BacklogResult  `json:"backlog,omitempty"`
	Targets    []TargetResult   `json:"targets"`
	// Errors lists the scenarios that failed.
	Errors []string `json:"errors,omitempty"`
}

// Settings echoes the configuration of a run.
type Settings struct {
	// Modes are the modes the run compares: the targets of a mode asked
	// for are reported even when it measured nothing.
	Modes []Mode `json:"modes,omitempty"`

	Samples         int    `json:"samples"`
	MaxDuration     string `json:"max_duration"`
	Warmup          int    `json:"warmup_samples"`
	Interval        string `json:"interval"`
	TimerDelay      string `json:"timer_delay"`
	PollInterval    string `json:"poll_interval"`
	PollTimeout     string `json:"poll_timeout"`
	IdleWarmup      string `json:"idle_warmup"`
	IdleWindow      string `json:"idle_window"`
	IdleSlices      int    `json:"idle_slices"`
	PartitionCount  int    `json:"partition_count"`
	Parallel        int    `json:"parallel"`
	Seed            uint64 `json:"seed"`
	ActiveFeedDelay string `json:"active_feed_delay"`
	PeerWake        bool   `json:"peer_wake"`
	// FeedBudget is the event-driven empty-read budget (RU/s; negative:
	// the back-off).
	FeedBudget float64 `json:"feed_budget_ru_per_s"`
	// FeedReadsPerChange is the event-driven ReadsPerChange in effect.
	FeedReadsPerChange float64 `json:"feed_reads_per_change"`
	// SiblingWait is the event-driven sibling wait in effect ("off" when
	// zero or negative) and AwaitHold the await hold's bound.
	SiblingWait string `json:"sibling_wait"`
	AwaitHold   string `json:"await_hold"`
	// Eager says whether a replica runs its own writes in slots others
	// own (not engine.Options.DisableEager); MaxIdlePeriod is the
	// feed's idle bound in effect ("none" when off).
	Eager         bool   `json:"eager"`
	MaxIdlePeriod string `json:"feed_max_idle_period"`
	ChargeModel   string `json:"charge_model"`
	// Stress echoes the stress phase's workload (absent without one).
	Stress *StressSettings `json:"stress,omitempty"`
	// Backlog echoes the backlog phase's configuration (absent without
	// one).
	Backlog *BacklogSettings `json:"backlog,omitempty"`
}

// BacklogSettings echoes a BacklogConfig.
type BacklogSettings struct {
	Depths                   []int  `json:"depths"`
	PollingDepths            []int  `json:"polling_depths,omitempty"`
	Replicas                 int    `json:"replicas"`
	TasksPerInstance         int    `json:"tasks_per_instance"`
	ActivityDelay            string `json:"activity_delay"`
	PollInterval             string `json:"poll_interval"`
	OrchestrationConcurrency int    `json:"orchestration_concurrency"`
	WorkerConcurrency        int    `json:"worker_concurrency"`
	EnqueueConcurrency       int    `json:"enqueue_concurrency"`
	MaxDrain                 string `json:"max_drain"`
	PollingMaxDrain          string `json:"polling_max_drain,omitempty"`
	MemoryInterval           string `json:"memory_interval"`
	// QueriesCounted says whether the documents queries examined were
	// counted (on the embedded emulator; not on an account).
	QueriesCounted bool `json:"queries_counted"`
}

// StressSettings echoes a StressConfig.
type StressSettings struct {
	Replicas                 []int  `json:"replicas"`
	Orchestrations           int    `json:"orchestrations"`
	MaxInFlight              int    `json:"max_in_flight"`
	TasksPerInstance         int    `json:"tasks_per_instance"`
	ActivityDelay            string `json:"activity_delay"`
	PollInterval             string `json:"poll_interval"`
	MaxDuration              string `json:"max_duration"`
	WaitTimeout              string `json:"wait_timeout"`
	OrchestrationConcurrency int    `json:"orchestration_concurrency"`
	WorkerConcurrency        int    `json:"worker_concurrency"`
	Client                   string `json:"client"`
}

// EnvInfo describes one emulator or the account.
type EnvInfo struct {
	// Account is the account or emulator: endpoint, authentication,
	// regions, consistency, throughput mode, the run's database.
	Account           account.Info `json:"account"`
	InjectedLatencyMS float64      `json:"injected_latency_ms"`
	// RoundTripMS is the median isolated point-read round trip measured at
	// start (Probe.RoundTrip), the p99 target's unit.
	RoundTripMS float64 `json:"round_trip_ms"`
	// BackToBackRoundTripMS is the median of the same reads issued one
	// right after another (Probe.BackToBack).
	BackToBackRoundTripMS float64 `json:"back_to_back_round_trip_ms"`
	// BareWakeP99MS is the p99 of bare feed-woken wakes, without the
	// engine (Probe.BareWakeP99).
	BareWakeP99MS float64 `json:"bare_wake_p99_ms"`
	// FetchFloorMS is durafeed's own fetch of signalled work (Env.FetchFloor;
	// measured only with a sweep). Information only: it is measured by the
	// code under test, so no target depends on it (SweepFloorRoundTrips).
	FetchFloorMS float64 `json:"fetch_floor_ms,omitempty"`
	// BurstFloorMS is the median wake of a burst the replica writes itself
	// (Env.BurstFloor; measured only with a burst in the sweep).
	// Information only, as FetchFloorMS.
	BurstFloorMS float64 `json:"burst_floor_ms,omitempty"`
}

// Run starts one emulator per latency, runs every latency scenario (phase
// one), every idle scenario (phase two), the failover phase, the sweep,
// the stress phase and the backlog phase (each when configured), and
// evaluates the targets. Failed scenarios are listed in Report.Errors and
// also returned (joined); the report holds everything that did complete.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if cfg.Account != nil && (len(cfg.Latencies) != 1 || cfg.Latencies[0] != 0) {
		return nil, errors.New("bench: on an account no latency is injected: set Latencies to {0}")
	}
	estimate := Estimate(cfg)
	if err := account.CheckEstimate(estimate, cfg.MaxRU); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	start := time.Now()
	var progressMu sync.Mutex
	progress := func(format string, args ...any) {
		progressMu.Lock()
		defer progressMu.Unlock()
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf("[%5.1fs] ", time.Since(start).Seconds()) + fmt.Sprintf(format, args...))
		}
	}
	rep := &Report{StartedAt: start.UTC(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		NumCPU: runtime.NumCPU(), EstimateRU: estimate, Settings: Settings{
			Modes:   slices.Clone(cfg.Modes),
			Samples: cfg.Samples, MaxDuration: cfg.MaxDuration.String(), Warmup: cfg.Warmup, Interval: cfg.Interval.String(), TimerDelay: cfg.TimerDelay.String(),
			PollInterval: cfg.Fetch.PollInterval.String(), PollTimeout: cfg.Fetch.PollTimeout.String(),
			IdleWarmup: cfg.IdleWarmup.String(), IdleWindow: cfg.IdleWindow.String(), IdleSlices: cfg.IdleSlices,
			PartitionCount: cfg.PartitionCount, Parallel: cfg.Parallel, Seed: cfg.Seed,
			ActiveFeedDelay: activeFeedDelay().String(), ChargeModel: "knobs.DefaultChargeModel (simulated RU)", PeerWake: cfg.PeerWake,
		}}
	eo, err := engineOptions(cfg.PeerWake, cfg.FeedBudget, cfg.FeedReadsPerChange, cfg.SiblingWait, cfg.NoEager).WithDefaults()
	if err != nil {
		return rep, fmt.Errorf("bench: event-driven settings: %w", err)
	}
	rep.Settings.FeedBudget, rep.Settings.FeedReadsPerChange = eo.Feed.EmptyReadBudget, eo.Feed.ReadsPerChange
	rep.Settings.SiblingWait, rep.Settings.AwaitHold = "off", eo.AwaitHold.String()
	rep.Settings.Eager, rep.Settings.MaxIdlePeriod = !eo.DisableEager, "none"
	if eo.Feed.MaxIdlePeriod > 0 {
		rep.Settings.MaxIdlePeriod = eo.Feed.MaxIdlePeriod.String()
	}
	if eo.SiblingWait > 0 {
		rep.Settings.SiblingWait = eo.SiblingWait.String()
	}
	if sc := cfg.Stress; sc != nil {
		rep.Settings.Stress = &StressSettings{Replicas: sc.Replicas, Orchestrations: sc.Orchestrations, MaxInFlight: sc.MaxInFlight,
			TasksPerInstance: sc.TasksPerInstance, ActivityDelay: sc.ActivityDelay.String(), PollInterval: sc.PollInterval.String(),
			MaxDuration: sc.MaxDuration.String(), WaitTimeout: sc.WaitTimeout.String(),
			OrchestrationConcurrency: sc.OrchestrationConcurrency, WorkerConcurrency: sc.WorkerConcurrency,
			Client: string(sc.Client)}
	}
	if bc := cfg.Backlog; bc != nil {
		rep.Settings.Backlog = &BacklogSettings{Depths: bc.Depths, PollingDepths: bc.PollingDepths, Replicas: bc.Replicas, TasksPerInstance: bc.TasksPerInstance,
			ActivityDelay: bc.ActivityDelay.String(), PollInterval: bc.PollInterval.String(),
			OrchestrationConcurrency: bc.OrchestrationConcurrency, WorkerConcurrency: bc.WorkerConcurrency,
			EnqueueConcurrency: bc.EnqueueConcurrency, MaxDrain: bc.MaxDrain.String(), PollingMaxDrain: bc.MaxDrainOf(ModePolling).String(), MemoryInterval: bc.MemoryInterval.String(),
			QueriesCounted: cfg.Account == nil}
	}

	if cfg.Account != nil {
		rep.Settings.ChargeModel = "the account's own charges (x-ms-request-charge)"
	}
	var envs []*Env
	defer func() {
		for _, e := range envs {
			_ = e.Close()
		}
	}()
	// overCap turns err into one wrapping account.ErrOverCap when a cap
	// stopped the run.
	overCap := func(err error) error {
		for _, e := range envs {
			if e.OverCap() {
				return fmt.Errorf("bench: the run's clients spent past the cap of %.0f RU: %w", cfg.MaxRU, account.ErrOverCap)
			}
		}
		return err
	}
	defer func() {
		for _, e := range envs {
			u := e.Spent()
			rep.SpentRU, rep.Throttled = round2(rep.SpentRU+u.RequestCharge), rep.Throttled+u.Throttled
		}
	}()
	progress("estimated charge: %.0f RU", estimate)
	for _, lat := range cfg.Latencies {
		e, ectx, err := StartEnv(ctx, EnvOptions{PartitionCount: cfg.PartitionCount, Latency: lat, PeerWake: cfg.PeerWake, FeedBudget: cfg.FeedBudget,
			FeedReadsPerChange: cfg.FeedReadsPerChange, SiblingWait: cfg.SiblingWait, NoEager: cfg.NoEager, Account: cfg.Account,
			MaxRU: cfg.MaxRU})
		if err != nil {
			return rep, err
		}
		envs = append(envs, e)
		// A cap passed in one environment stops the whole run.
		defer context.AfterFunc(ectx, cancelRun)()
		pr := e.Probe()
		rep.Environments = append(rep.Environments, EnvInfo{Account: e.Account(), InjectedLatencyMS: ms(lat), RoundTripMS: ms(pr.RoundTrip),
			BackToBackRoundTripMS: ms(pr.BackToBack), BareWakeP99MS: ms(pr.BareWakeP99)})
		if cfg.Account != nil {
			progress("%s", e.Account())
		}
		progress("%s with %v injected latency: round trip %v isolated, %v back to back; bare wakes' p99 %v", envName(cfg), lat,
			pr.RoundTrip.Round(time.Microsecond), pr.BackToBack.Round(time.Microsecond), pr.BareWakeP99.Round(time.Microsecond))
	}
	modes := cfg.Modes

	var mu sync.Mutex
	var errs []error
	fail := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, fmt.Errorf("%s: %w", what, err))
		rep.Errors = append(rep.Errors, what+": "+err.Error())
	}

	// Phase one: latency, every scenario in its own container. Polling
	// scenarios (dominated by the 1 s interval) all run at once, first;
	// event-driven scenarios measure milliseconds and are sensitive to CPU
	// contention (on 2 CPUs, twelve scenarios at once doubled the
	// same-replica p99; with the eight polling scenarios alongside, the
	// cross-process one at 2 ms had samples of 36–89 ms, at most 31 ms
	// alone), so they run after them, at most cfg.Parallel at once.
	var edJobs, pollJobs []func()
	for _, c := range cfg.Cases {
		for _, m := range modes {
			for _, e := range envs {
				i := len(rep.Latency)
				rep.Latency = append(rep.Latency, LatencyResult{Mode: m, Case: c, InjectedLatencyMS: ms(e.Latency())})
				maxDuration := cfg.MaxDuration
				if m == ModePolling {
					maxDuration = 0
				}
				job := func() {
					r, err := e.RunLatency(ctx, LatencyScenario{Mode: m, Case: c, Samples: cfg.Samples, Warmup: cfg.Warmup,
						Interval: cfg.Interval, TimerDelay: cfg.TimerDelay, Fetch: cfg.Fetch, SampleTimeout: cfg.SampleTimeout, Seed: cfg.Seed,
						MaxDuration: maxDuration})
					mu.Lock()
					rep.Latency[i] = r
					mu.Unlock()
					what := fmt.Sprintf("%s %s at %v", c, m, e.Latency())
					if err != nil {
						fail(what, err)
						return
					}
					progress("%s: p50 %.2f ms, p99 %.2f ms (%d samples, %d lost)", what, r.P50MS, r.P99MS, r.N, r.Lost)
				}
				if m == ModePolling {
					pollJobs = append(pollJobs, job)
				} else {
					edJobs = append(edJobs, job)
				}
			}
		}
	}
	runJobs(0, pollJobs)
	runJobs(cfg.Parallel, edJobs)
	slices.SortStableFunc(rep.Latency, func(a, b LatencyResult) int {
		return cmp.Compare(a.InjectedLatencyMS, b.InjectedLatencyMS)
	})

	// Phase two: idle cost, all at once (request counts per container are
	// insensitive to contention), after the latency phase, whose
	// millisecond figures are not.
	var idleJobs []func()
	for _, e := range envs {
		for _, n := range cfg.Replicas {
			for _, m := range modes {
				i := len(rep.Idle)
				rep.Idle = append(rep.Idle, IdleResult{Mode: m, Replicas: n, InjectedLatencyMS: ms(e.Latency())})
				idleJobs = append(idleJobs, func() {
					r, err := e.RunIdle(ctx, IdleScenario{Mode: m, Replicas: n, Warmup: cfg.IdleWarmup, Window: cfg.IdleWindow,
						Slices: cfg.IdleSlices, Fetch: cfg.Fetch})
					mu.Lock()
					rep.Idle[i] = r
					mu.Unlock()
					what := fmt.Sprintf("idle %s, %d replicas at %v", m, n, e.Latency())
					if err != nil {
						fail(what, err)
						return
					}
					progress("%s: %.1f requests/min, %.1f RU/min per replica", what, r.RequestsPerMin, r.RUPerMin)
				})
			}
		}
	}
	runJobs(0, idleJobs)

	// Phase three: failover, all at once (its figures are seconds).
	var foJobs []func()
	for _, e := range envs {
		for _, m := range modes {
			if cfg.Failover < 0 {
				break
			}
			i := len(rep.Failover)
			rep.Failover = append(rep.Failover, FailoverResult{Mode: m, InjectedLatencyMS: ms(e.Latency())})
			foJobs = append(foJobs, func() {
				r, err := e.RunFailover(ctx, FailoverScenario{Mode: m, After: cfg.Failover, Fetch: cfg.Fetch, Seed: cfg.Seed})
				mu.Lock()
				rep.Failover[i] = r
				mu.Unlock()
				what := fmt.Sprintf("failover %s at %v", m, e.Latency())
				if err != nil {
					fail(what, err)
					return
				}
				progress("%s: after the cut p50 %.0f ms, p99 %.0f ms, max %.0f ms (%d items, %d lost); held turn %.0f ms",
					what, r.After.P50MS, r.After.P99MS, r.After.MaxMS, r.After.N, r.Lost, r.Held.MaxMS)
			})
		}
	}
	runJobs(0, foJobs)

	// The sweep: fast loads one scenario at a time, slow ones all at once
	// beside them (a few requests a second each).
	if len(cfg.Sweep) > 0 {
		for i, e := range envs {
			floor, err := e.FetchFloor(ctx, 21)
			if err != nil {
				fail(fmt.Sprintf("fetch floor at %v", e.Latency()), err)
				continue
			}
			rep.Environments[i].FetchFloorMS = round2(ms(floor))
			progress("fetch floor with %v injected: %v", e.Latency(), floor.Round(time.Microsecond))
			if k := slices.IndexFunc(cfg.Sweep, func(l SweepLoad) bool { return l.Burst > 0 }); k >= 0 {
				n := cfg.Sweep[k].Burst
				bf, err := e.BurstFloor(ctx, n, cfg.SweepDispatchers, cfg.Fetch, cfg.Seed)
				if err != nil {
					fail(fmt.Sprintf("burst floor at %v", e.Latency()), err)
					continue
				}
				rep.Environments[i].BurstFloorMS = round2(ms(bf))
				progress("burst floor (%d items) with %v injected: %v", n, e.Latency(), bf.Round(time.Microsecond))
			}
		}
		var fast, slow []func()
		for _, l := range cfg.Sweep {
			for _, e := range envs {
				for _, m := range modes {
					i := len(rep.Sweep)
					rep.Sweep = append(rep.Sweep, SweepResult{Mode: m, Load: l.Name, MeanGapMS: ms(l.MeanGap), InjectedLatencyMS: ms(e.Latency())})
					job := func() {
						r, err := e.RunSweep(ctx, SweepScenario{Mode: m, Load: l, Dispatchers: cfg.SweepDispatchers, Fetch: cfg.Fetch,
							SampleTimeout: cfg.SampleTimeout, Tail: cfg.SweepTail, Settle: cfg.SweepSettle, Seed: cfg.Seed})
						mu.Lock()
						rep.Sweep[i] = r
						mu.Unlock()
						what := fmt.Sprintf("sweep %s %s at %v", l.Name, m, e.Latency())
						if err != nil {
							fail(what, err)
							return
						}
						progress("%s: p50 %.2f ms, p99 %.2f ms (%d items, %d lost), %.0f RU/min", what, r.P50MS, r.P99MS, r.N, r.Lost, r.RUPerMin)
					}
					if l.fast() {
						fast = append(fast, job)
					} else {
						slow = append(slow, job)
					}
				}
			}
		}
		var sw sync.WaitGroup
		sw.Go(func() { runJobs(0, slow) })
		runJobs(1, fast)
		sw.Wait()
	}

	// The stress phase: one scenario at a time (each keeps every CPU
	// busy), both modes of a replica count one after the other.
	if sc := cfg.Stress; sc != nil {
		var jobs []func()
		for _, e := range envs {
			for _, n := range sc.Replicas {
				for _, m := range modes {
					i := len(rep.Stress)
					rep.Stress = append(rep.Stress, StressResult{Mode: m, Replicas: n, InjectedLatencyMS: ms(e.Latency())})
					jobs = append(jobs, func() {
						r, err := e.RunStress(ctx, StressScenario{Mode: m, Replicas: n, Workload: *sc})
						mu.Lock()
						rep.Stress[i] = r
						mu.Unlock()
						what := fmt.Sprintf("stress %s, %d replicas at %v", m, n, e.Latency())
						if err != nil {
							fail(what, err)
							return
						}
						progress("%s: %d of %d completed, %.1f orch/s, p50 %.0f ms, p99 %.0f ms, %.2f turns and %.1f RU per orchestration, min turn share %.2f",
							what, r.Completed, r.Launched, r.OrchPerSec, r.Latency.P50MS, r.Latency.P99MS, r.TurnsPerOrch, r.RUPerOrch, r.MinTurnShare)
					})
				}
			}
		}
		runJobs(1, jobs)
	}

	// The backlog phase: one scenario at a time (each keeps every CPU
	// busy, and its heap figures need the process to itself), depths in
	// order, every mode of a depth one after the other.
	if bc := cfg.Backlog; bc != nil {
		for _, e := range envs {
			var depths []int // every mode's, in order
			for _, m := range modes {
				for _, d := range bc.DepthsOf(m) {
					if !slices.Contains(depths, d) {
						depths = append(depths, d)
					}
				}
			}
			slices.Sort(depths)
			for _, depth := range depths {
				for _, m := range modes {
					if !slices.Contains(bc.DepthsOf(m), depth) {
						continue
					}
					what := fmt.Sprintf("backlog %s, %d queued, %d replicas at %v", m, depth, bc.Replicas, e.Latency())
					progress("%s: enqueueing", what)
					r, err := e.RunBacklog(ctx, BacklogScenario{Mode: m, Depth: depth, Workload: *bc,
						Progress: func(line string) { progress("%s", line) }})
					rep.Backlog = append(rep.Backlog, r)
					if err != nil {
						fail(what, err)
						continue
					}
					progress("%s: enqueued in %.1f s (emulator +%.0f MB); drained %d of %d in %.1f s (join %.1f s), %.1f orch/s, %.1f RU and %.0f documents examined per orchestration, heap in use at most %.0f MB (replicas' part %.0f MB)%s",
						what, r.EnqueueS, r.EmulatorMB, r.Completed, r.Depth, r.DrainS, r.JoinS, r.DispatchOrchPerSec, r.RUPerOrch,
						r.ExaminedPerOrch, r.Memory.HeapInusePeakMB, r.Memory.ReplicasPeakMB, timedOutText(r.TimedOut))
				}
			}
		}
	}

	rep.Targets = evaluateTargets(rep)
	rep.ElapsedS = time.Since(start).Round(100 * time.Millisecond).Seconds()
	return rep, overCap(errors.Join(errs...))
}

// timedOutText says that a drain hit its time limit (empty when not).
func timedOutText(timedOut bool) string {
	if !timedOut {
		return ""
	}
	return "; stopped at the time limit"
}

// envName names where the run's scenarios run, for progress lines.
func envName(cfg Config) string {
	if cfg.Account != nil {
		return "account"
	}
	return "emulator"
}

// runJobs runs jobs with at most parallel at once (all for parallel <= 0).
func runJobs(parallel int, jobs []func()) {
	if parallel <= 0 {
		parallel = len(jobs)
	}
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			j()
		})
	}
	wg.Wait()
}
