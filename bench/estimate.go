package bench

import "time"

// The estimate's unit costs, in RU: each is above the highest figure the
// published runs measured for it (docs/feed-bound, docs/stress-indexed, on
// the emulator's charge model, anchored on Microsoft's figures), so that
// the estimate errs high.
const (
	// estimateRUPerWake is one item enqueued, fetched and acknowledged,
	// the idle polling between items included (measured at most 160 RU,
	// polling at one item a second or less).
	estimateRUPerWake = 200
	// estimateRUPerReplicaMinute is a replica's idle spend (measured at
	// most 1,400 RU/min, polling every second).
	estimateRUPerReplicaMinute = 1500
	// estimateRUPerOrchestration is one stress orchestration (measured
	// 291–298 RU with five activities).
	estimateRUPerOrchestration = 600
	// estimateRUPerProbeSample is one sample of the start-up probe: its
	// reads and its bare wakes with their feed reads (measured 39 RU, 2,350
	// RU for the default 60).
	estimateRUPerProbeSample = 50
	// estimateRUPerPolledStart is what a polling backlog's orchestration
	// costs on top of estimateRUPerOrchestration per start queued with
	// it: each polling fetch reads every visible queued message of its
	// share (measured 610 RU per orchestration with 100 queued and 2,100
	// with 1,000, docs/backlog).
	estimateRUPerPolledStart = 2
	// estimateRUPerProvider is what opening a provider on a fresh
	// container costs before any work: metadata, leases, catch-up (measured
	// at most about 330 RU with a scenario's first requests).
	estimateRUPerProvider = 500
)

// Estimate returns a deliberately high estimate of what a run of cfg
// costs in RU, for a cap (Config.MaxRU) checked before anything starts:
// the probe, each provider a scenario opens, the scenarios' items at
// estimateRUPerWake, their replicas' minutes at
// estimateRUPerReplicaMinute, stress orchestrations and the backlog
// phase's queued ones at estimateRUPerOrchestration, summed over every
// injected latency; a polling backlog's orchestrations cost
// estimateRUPerPolledStart more per start queued, since each polling
// fetch reads the backlog.
func Estimate(cfg Config) float64 {
	cfg = cfg.withDefaults()
	minutes := func(d time.Duration) float64 { return d.Minutes() }
	modes := float64(len(cfg.Modes))
	ru := float64(defaultProbeSamples) * estimateRUPerProbeSample
	// A latency scenario opens a fetcher and a client.
	ru += float64(len(cfg.Cases)) * modes * (float64(cfg.Samples+cfg.Warmup)*estimateRUPerWake + 2*estimateRUPerProvider)
	for _, n := range cfg.Replicas {
		ru += modes * float64(n) * (minutes(cfg.IdleWarmup+cfg.IdleWindow)*estimateRUPerReplicaMinute + estimateRUPerProvider)
	}
	if cfg.Failover >= 0 {
		// Three replicas and a client, a minute to settle before the cut.
		ru += modes * (3*minutes(cfg.Failover+time.Minute)*estimateRUPerReplicaMinute + 4*estimateRUPerProvider)
	}
	for _, l := range cfg.Sweep {
		span := time.Duration(l.Items)*l.MeanGap + l.Quiet
		ru += modes * (float64(l.Items)*estimateRUPerWake + minutes(span)*estimateRUPerReplicaMinute + 2*estimateRUPerProvider)
	}
	if s := cfg.Stress; s != nil {
		for _, n := range s.Replicas {
			ru += modes * (float64(s.Orchestrations)*estimateRUPerOrchestration + float64(n+1)*estimateRUPerProvider)
		}
	}
	if b := cfg.Backlog; b != nil {
		// Each scenario opens its replicas and a client.
		for _, m := range cfg.Modes {
			for _, depth := range b.DepthsOf(m) {
				perOrch := float64(estimateRUPerOrchestration)
				if m == ModePolling {
					perOrch += estimateRUPerPolledStart * float64(depth)
				}
				ru += float64(depth)*perOrch + float64(b.Replicas+1)*estimateRUPerProvider
			}
		}
	}
	return ru * float64(len(cfg.Latencies))
}
