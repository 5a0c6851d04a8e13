package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/internal/account"
)

// tinyConfig is a complete run in a few seconds: every mode and case, one
// replica, short intervals and a fast polling loop.
func tinyConfig() Config {
	return Config{
		Latencies:     []time.Duration{0},
		Replicas:      []int{1},
		Samples:       3,
		Warmup:        1,
		Interval:      Range{Min: time.Millisecond, Max: 20 * time.Millisecond},
		TimerDelay:    Range{Min: 30 * time.Millisecond, Max: 60 * time.Millisecond},
		Fetch:         FetchLoop{PollInterval: 50 * time.Millisecond, PollTimeout: 500 * time.Millisecond},
		SampleTimeout: 20 * time.Second,
		IdleWarmup:    200 * time.Millisecond,
		IdleWindow:    800 * time.Millisecond,
		IdleSlices:    2,
		Failover:      -1, // TestFailoverHarness; the phase takes a lease expiry
	}
}

// TestFailoverHarness runs the failover scenario in polling mode with a
// short lock: the item the crashed replica held is completed by a
// survivor once its lock expires, and every other item completes.
func TestFailoverHarness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, _, err := StartEnv(ctx, EnvOptions{PartitionCount: 2})
	require.NoError(t, err)
	defer func() { _ = e.Close() }()
	r, err := e.RunFailover(ctx, FailoverScenario{Mode: ModePolling, Warmup: 300 * time.Millisecond, Before: 300 * time.Millisecond,
		After: 700 * time.Millisecond, Interval: Range{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond},
		Fetch: FetchLoop{PollInterval: 20 * time.Millisecond, PollTimeout: 50 * time.Millisecond, LockTimeout: 500 * time.Millisecond}, Seed: 1})
	require.NoError(t, err)
	t.Logf("%+v", r)
	require.Zero(t, r.Lost)
	require.Equal(t, 1, r.Held.N, "the crashed replica held one turn")
	require.GreaterOrEqual(t, r.Held.MaxMS, 500.0*0.9, "which waited for its lock to expire")
	require.Positive(t, r.Before.N)
	require.Positive(t, r.After.N)
	require.Positive(t, r.RUPerMin)
	require.Zero(t, r.FetchErrors+r.AckErrors)
}

func TestTinyRunProducesSaneNumbers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var lines []string
	cfg := tinyConfig()
	cfg.Progress = func(s string) { lines = append(lines, s) } // Run serialises the calls
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, lines)
	require.Empty(t, rep.Errors)
	require.Len(t, rep.Environments, 1)
	env := rep.Environments[0]
	require.Greater(t, env.RoundTripMS, 0.0)
	require.Greater(t, env.BackToBackRoundTripMS, 0.0)
	// A bare wake waits for the next read, uniformly up to one active
	// delay, then reads and writes: the second largest of 120 such waits
	// is below 0.9 of the delay with a probability under 1e-4.
	require.Greater(t, env.BareWakeP99MS, 0.9*ms(activeFeedDelay()))

	require.Len(t, rep.Latency, len(Cases)*len(Modes))
	for _, l := range rep.Latency {
		name := string(l.Case) + "/" + string(l.Mode)
		require.Equal(t, 3, l.N, name)
		require.Zero(t, l.Lost, name)
		require.Len(t, l.SamplesMS, 3, name)
		require.Len(t, l.PausesMS, 3, name)
		require.LessOrEqual(t, l.MinMS, l.P50MS, name)
		require.LessOrEqual(t, l.P50MS, l.P99MS, name)
		require.Equal(t, l.P99MS, l.MaxMS, name)
		// Loose bounds that only a broken harness misses: an item is
		// fetched within the poll interval (or a feed read) plus slack,
		// never long before it was enqueued.
		require.Greater(t, l.MinMS, -50.0, name)
		require.Less(t, l.MaxMS, 10000.0, name)
		// What the samples cost: only the event-driven fetcher reads the
		// change feed of the document ranges (how often in a window of a
		// few samples depends on its budget's period, so possibly never).
		require.Positive(t, l.RUPerMin, name)
		require.Positive(t, l.RUPerWake, name)
		if l.Mode == ModePolling {
			require.Zero(t, l.FeedReadsPerMin, name)
		}
		// A timer is visible from its enqueue's start plus its delay,
		// and a local write's turn may reach the fetch before the write
		// returns (the enqueue locks it): only the remote wakes are
		// positive by construction.
		if l.Case != CaseTimer && l.Case != CaseWakeLocal {
			require.Greater(t, l.MinMS, 0.0, name)
		}
	}

	require.Len(t, rep.Idle, len(Modes))
	for _, r := range rep.Idle {
		name := string(r.Mode)
		require.Greater(t, r.RequestsPerMin, 0.0, name)
		require.Greater(t, r.RUPerMin, 0.0, name)
		require.Len(t, r.SliceRUPerMin, 2, name)
		require.NotEmpty(t, r.ByOperation, name)
		// The per-operation counter and the knobs' per-container counter
		// see the same requests (compared once nothing is in flight).
		require.Less(t, r.CounterDriftRU, 0.05, name)
		require.Greater(t, r.FetchesPerMin, 0.0, name)
		if r.Mode == ModeEventDriven {
			require.NotNil(t, r.Backstop, name)
			require.Equal(t, engine.DefaultSafetySweepInterval.Seconds(), r.Backstop.PeriodS, name)
		} else {
			require.Nil(t, r.Backstop, name)
		}
	}
	require.NotEmpty(t, rep.Targets)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, want := range []string{"Wake latency", "Idle cost per replica", "Targets", "wake-remote", "event-driven", "polling"} {
		require.Contains(t, table.String(), want)
	}
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, rep.Latency, back.Latency)
	require.Equal(t, rep.Idle, back.Idle)
	require.Equal(t, rep.Targets, back.Targets)
}

// TestRunRefusesAboveTheCap: a run estimated above MaxRU starts nothing;
// an Env whose clients spend past it stops with account.ErrOverCap.
func TestRunRefusesAboveTheCap(t *testing.T) {
	t.Parallel()
	cfg := Config{Modes: []Mode{ModePolling}, Cases: []Case{}, Replicas: []int{1}, Latencies: []time.Duration{0}, Failover: -1}
	est := Estimate(cfg)
	require.Greater(t, est, 0.0)
	rep, err := Run(t.Context(), Config{Modes: cfg.Modes, Cases: cfg.Cases, Replicas: cfg.Replicas, Latencies: cfg.Latencies,
		Failover: -1, MaxRU: est - 1})
	require.ErrorIs(t, err, account.ErrOverCap)
	require.Nil(t, rep)

	// The probe alone spends more than 50 RU.
	_, _, err = StartEnv(t.Context(), EnvOptions{PartitionCount: 1, ProbeSamples: 20, MaxRU: 50})
	require.ErrorIs(t, err, account.ErrOverCap)
}
