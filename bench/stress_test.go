package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/runtime"
)

// tinyStress is a stress workload of a few seconds.
func tinyStress() StressConfig {
	return StressConfig{Orchestrations: 12, MaxInFlight: 4, TasksPerInstance: 5, ActivityDelay: time.Millisecond,
		PollInterval: 20 * time.Millisecond, WaitTimeout: time.Minute}
}

// requireSaneStress checks what every stress scenario of a tiny workload
// must show whatever the machine's speed: every instance completed, each
// with at least a start turn and a final turn, every activity counted
// once, shares that add up, and a cost.
func requireSaneStress(t *testing.T, w StressConfig, r StressResult) {
	t.Helper()
	name := fmt.Sprintf("%s/%d", r.Mode, r.Replicas)
	require.Equal(t, w.Orchestrations, r.Launched, name)
	require.Equal(t, w.Orchestrations, r.Completed, name)
	require.Zero(t, r.Failed, name)
	require.Empty(t, r.FirstError, name)
	require.Equal(t, 100.0, r.SuccessPct, name)
	require.Equal(t, r.Completed, r.Latency.N, name)
	require.Positive(t, r.Latency.MinMS, name)
	require.LessOrEqual(t, r.Latency.P50MS, r.Latency.P99MS, name)
	require.Positive(t, r.WindowS, name)
	require.Positive(t, r.OrchPerSec, name)
	require.Positive(t, r.ActivitiesPerSec, name)

	// A fan-out takes a start turn and a final turn at least.
	require.GreaterOrEqual(t, r.TurnsPerOrch, 2.0, name)

	// The write floor: a start, a work item and a completion per task;
	// the history (started, a scheduled and a completed event per task,
	// completed) and the instance and execution records at least; and
	// the run cost more than that floor.
	require.Equal(t, min(floorSample, r.Completed), r.WriteFloor.Sampled, name)
	require.Equal(t, float64(1+2*w.TasksPerInstance), r.WriteFloor.Messages, name)
	require.GreaterOrEqual(t, r.WriteFloor.Documents, float64(2*w.TasksPerInstance+2+2), name)
	require.Positive(t, r.WriteFloor.RU, name)
	require.Greater(t, r.FloorRatio, 1.0, name)
	require.Equal(t, int64(r.Completed*w.TasksPerInstance), r.Activities, name)
	require.Len(t, r.PerReplica, r.Replicas, name)
	var turns, acts int64
	var turnShares, actShares float64
	for _, p := range r.PerReplica {
		turns += p.Turns
		acts += p.Activities
		turnShares += p.TurnShare
		actShares += p.ActivityShare
		require.GreaterOrEqual(t, p.TurnShare, r.MinTurnShare, name)
		require.GreaterOrEqual(t, p.ActivityShare, r.MinActivityShare, name)
	}
	require.Equal(t, r.Turns, turns, name)
	require.Equal(t, r.Activities, acts, name)
	require.InDelta(t, 1.0, turnShares, 1e-3, name)
	require.InDelta(t, 1.0, actShares, 1e-3, name)
	if r.Replicas == 1 {
		require.Equal(t, 1.0, r.MinTurnShare, name)
		require.Equal(t, 1.0, r.MinActivityShare, name)
	}

	require.Positive(t, r.RequestsPerOrch, name)
	require.Positive(t, r.RUPerOrch, name)
	require.NotEmpty(t, r.ByOperation, name)
	var ru float64
	for _, o := range r.ByOperation {
		ru += o.RU
	}
	// The breakdown adds up to the total, give or take its rounding.
	require.InDelta(t, r.RUPerOrch, ru, 0.01*float64(len(r.ByOperation))+0.01, name)
	if r.Mode == ModePolling {
		require.Equal(t, ms(w.PollInterval), r.PollIntervalMS, name)
	} else {
		require.Zero(t, r.PollIntervalMS, name)
	}
}

// durafeedGoroutines returns the stacks of the goroutines running
// durafeed code other than the emulator's and the tests', by goroutine
// header ("goroutine 12 [select]:" without the state).
func durafeedGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/durafeed/durafeed/") && !strings.Contains(g, "cosmosemu") && !strings.Contains(g, "bench.Test") {
			id, _, _ := strings.Cut(g, " [")
			out[id] = g
		}
	}
	return out
}

// TestStressScenario runs the tiny workload in both modes on one and two
// replicas (the scenarios at once: each has its own container), then
// checks that nothing the scenarios started still runs.
func TestStressScenario(t *testing.T) {
	// Not parallel with other tests: counts goroutines at the end.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, _, err := StartEnv(ctx, EnvOptions{PartitionCount: 2, ProbeSamples: 5})
	require.NoError(t, err)
	defer func() { _ = e.Close() }()
	w := tinyStress()
	before := durafeedGoroutines() // left by earlier tests, if any
	t.Run("scenarios", func(t *testing.T) {
		for _, tt := range []struct {
			mode     Mode
			replicas int
			client   StressClient
		}{
			{ModeEventDriven, 1, StressClientSeparate},
			{ModePolling, 1, StressClientSeparate},
			{ModeEventDriven, 2, StressClientSeparate},
			{ModePolling, 2, StressClientSeparate},
			{ModeEventDriven, 2, StressClientReplica},
		} {
			t.Run(fmt.Sprintf("%s/%d/%s", tt.mode, tt.replicas, tt.client), func(t *testing.T) {
				t.Parallel()
				w := w
				w.Client = tt.client
				r, err := e.RunStress(ctx, StressScenario{Mode: tt.mode, Replicas: tt.replicas, Workload: w})
				require.NoError(t, err)
				t.Logf("%.1f orch/s, p50 %.0f ms, p99 %.0f ms, %.2f turns/orch, %.1f RU/orch, shares %s / %s", r.OrchPerSec,
					r.Latency.P50MS, r.Latency.P99MS, r.TurnsPerOrch, r.RUPerOrch, formatShares(r.PerReplica, false), formatShares(r.PerReplica, true))
				require.Equal(t, tt.mode, r.Mode)
				require.Equal(t, tt.replicas, r.Replicas)
				require.Equal(t, tt.client, r.Client)
				requireSaneStress(t, w, r)
			})
		}
	})
	// Goroutines may take a moment to return after their contexts end.
	var left []string
	for range 200 {
		left = left[:0]
		for id, g := range durafeedGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Empty(t, left, "goroutines still running after the scenarios")
}

// TestTinyStressRun runs a stress phase alone through Run: both modes on
// one replica, judged, and carried by the table and the JSON.
func TestTinyStressRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tinyConfig()
	cfg.Cases, cfg.Replicas = []Case{}, []int{}
	w := tinyStress()
	w.Replicas = []int{1}
	cfg.Stress = &w
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	require.Empty(t, rep.Latency)
	require.Empty(t, rep.Idle)
	require.NotNil(t, rep.Settings.Stress)
	require.Equal(t, 12, rep.Settings.Stress.Orchestrations)
	require.Equal(t, "20ms", rep.Settings.Stress.PollInterval)
	require.Equal(t, 2, rep.Settings.Stress.OrchestrationConcurrency)
	require.Len(t, rep.Stress, len(Modes))
	for _, r := range rep.Stress {
		requireSaneStress(t, w.withDefaults(), r)
	}
	var judged []string
	for _, tr := range rep.Targets {
		if tr.Subject == "stress, 1 replicas" {
			judged = append(judged, tr.Target)
		}
	}
	require.Len(t, judged, 4, "throughput, p99, turns, and the 28 orch/s of one replica at 0 ms: %q", judged)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, want := range []string{"Stress (duroxide's parallel_orchestrations)", "Stress cost by operation", "stress orch/s ≥ 2× polling"} {
		require.Contains(t, table.String(), want)
	}
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, rep.Stress, back.Stress)
	require.Equal(t, rep.Settings.Stress, back.Settings.Stress)
}

func TestStressConfigDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   StressConfig
		want StressConfig
	}{
		{name: "zero takes every default", in: StressConfig{}, want: DefaultStressConfig()},
		{name: "set fields are kept", in: StressConfig{Replicas: []int{2}, Orchestrations: 7, MaxInFlight: 3, TasksPerInstance: 1,
			ActivityDelay: time.Millisecond, PollInterval: time.Second, MaxDuration: -1, WaitTimeout: time.Second,
			OrchestrationConcurrency: 4, WorkerConcurrency: 5, Client: StressClientReplica},
			want: StressConfig{Replicas: []int{2}, Orchestrations: 7, MaxInFlight: 3, TasksPerInstance: 1,
				ActivityDelay: time.Millisecond, PollInterval: time.Second, MaxDuration: -1, WaitTimeout: time.Second,
				OrchestrationConcurrency: 4, WorkerConcurrency: 5, Client: StressClientReplica}},
		{name: "negative counts take the defaults", in: StressConfig{Orchestrations: -1, MaxInFlight: -1, OrchestrationConcurrency: -1},
			want: DefaultStressConfig()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.in.withDefaults())
		})
	}
	d := DefaultStressConfig()
	require.Equal(t, 100*time.Millisecond, d.PollInterval, "duroxide's stress configuration")
	require.Equal(t, []int{1, 3}, d.Replicas)
}

func TestStressTargets(t *testing.T) {
	res := func(m Mode, n int, orchPerSec, p99, turns float64, failed int, shares ...float64) StressResult {
		r := StressResult{Mode: m, Replicas: n, Launched: 100, Completed: 100 - failed, Failed: failed,
			SuccessPct: float64(100-failed) / 100 * 100, OrchPerSec: orchPerSec, Latency: Summary{N: 100 - failed, P99MS: p99},
			TurnsPerOrch: turns, Turns: 300, Activities: 500, MinTurnShare: 1, MinActivityShare: 1}
		for _, s := range shares {
			r.PerReplica = append(r.PerReplica, StressReplica{TurnShare: s, ActivityShare: s})
			r.MinTurnShare, r.MinActivityShare = min(r.MinTurnShare, s), min(r.MinActivityShare, s)
		}
		return r
	}
	met := func(rep *Report) map[string]bool {
		out := map[string]bool{}
		for _, tr := range stressTargets(rep) {
			out[tr.Subject+": "+tr.Target] = tr.Met
		}
		return out
	}
	const (
		speed1  = "stress, 1 replicas: stress orch/s ≥ 2× polling, 100% success"
		p99_1   = "stress, 1 replicas: stress p99 ≤ polling"
		turns1  = "stress, 1 replicas: stress turns/orch ≤ polling"
		floor1  = "stress, 1 replicas: stress orch/s ≥ 28 (duroxide, SQLite file: 27.95)"
		speed3  = "stress, 3 replicas: stress orch/s ≥ 2× polling, 100% success"
		p99_3   = "stress, 3 replicas: stress p99 ≤ polling"
		turns3  = "stress, 3 replicas: stress turns/orch ≤ polling"
		share3  = "stress, 3 replicas: stress every replica's share of turns ≥ 20%"
		ashare3 = "stress, 3 replicas: stress every replica's share of activities ≥ 20%"
	)
	tests := []struct {
		name    string
		latency float64
		results []StressResult
		want    map[string]bool
	}{
		{name: "every goal met", results: []StressResult{
			res(ModeEventDriven, 1, 60, 500, 3, 0, 1), res(ModePolling, 1, 20, 900, 4, 0, 1),
			res(ModeEventDriven, 3, 90, 500, 3, 0, 0.3, 0.3, 0.4), res(ModePolling, 3, 30, 900, 4, 0, 0.33, 0.33, 0.34),
		}, want: map[string]bool{speed1: true, p99_1: true, turns1: true, floor1: true, speed3: true, p99_3: true, turns3: true, share3: true, ashare3: true}},
		{name: "slow, late, wordy and unbalanced", results: []StressResult{
			res(ModeEventDriven, 1, 20, 950, 5, 0, 1), res(ModePolling, 1, 15, 900, 4, 0, 1),
			res(ModeEventDriven, 3, 50, 500, 3, 0, 0.1, 0.45, 0.45), res(ModePolling, 3, 30, 900, 4, 0, 0.33, 0.33, 0.34),
		}, want: map[string]bool{speed1: false, p99_1: false, turns1: false, floor1: false, speed3: false, p99_3: true, turns3: true, share3: false, ashare3: false}},
		{name: "a failed instance fails the comparisons", results: []StressResult{
			res(ModeEventDriven, 1, 60, 500, 3, 1, 1), res(ModePolling, 1, 20, 900, 4, 0, 1),
		}, want: map[string]bool{speed1: false, p99_1: false, turns1: false, floor1: false}},
		{name: "a failure on the polling side fails the speed-up only", results: []StressResult{
			res(ModeEventDriven, 1, 60, 500, 3, 0, 1), res(ModePolling, 1, 20, 900, 4, 2, 1),
		}, want: map[string]bool{speed1: false, p99_1: true, turns1: true, floor1: true}},
		{name: "no floor target above 0 ms", latency: 2, results: []StressResult{
			res(ModeEventDriven, 1, 60, 500, 3, 0, 1), res(ModePolling, 1, 20, 900, 4, 0, 1),
		}, want: map[string]bool{speed1: true, p99_1: true, turns1: true}},
		{name: "one mode alone: the floor only", results: []StressResult{res(ModeEventDriven, 1, 30, 500, 3, 0, 1)},
			want: map[string]bool{floor1: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.results {
				tt.results[i].InjectedLatencyMS = tt.latency
			}
			rep := &Report{Environments: []EnvInfo{{InjectedLatencyMS: tt.latency}}, Stress: tt.results}
			require.Equal(t, tt.want, met(rep))
		})
	}
}

// fakeProvider answers the calls ackCounter counts or forwards; ok says
// whether acks succeed.
type fakeProvider struct {
	durable.Provider
	ok      bool
	crashed bool
}

func (f *fakeProvider) AckOrchestrationItem(context.Context, string, durable.OrchestrationTurn) error {
	if f.ok {
		return nil
	}
	return durable.Permanent("ack", nil, "lock lost")
}

func (f *fakeProvider) AckWorkItem(context.Context, string, durable.WorkItem) error {
	return f.AckOrchestrationItem(context.Background(), "", durable.OrchestrationTurn{})
}

func (f *fakeProvider) Admin() (durable.ProviderAdmin, bool) { return nil, f.ok }

// pacedFake is a fakeProvider that states a poll interval.
type pacedFake struct{ fakeProvider }

func (*pacedFake) PollInterval() time.Duration { return 250 * time.Millisecond }
func (f *pacedFake) Crash()                    { f.crashed = true }

// TestAckCounter: successful acks are counted apart from failed ones, and
// what the runtime looks for on its provider is the wrapped provider's.
func TestAckCounter(t *testing.T) {
	tests := []struct {
		name      string
		inner     durable.Provider
		ok        bool
		wantPoll  time.Duration
		wantCrash bool
	}{
		{name: "plain provider, acks succeed", inner: &fakeProvider{ok: true}, ok: true},
		{name: "plain provider, acks fail", inner: &fakeProvider{}},
		{name: "polling provider", inner: &pacedFake{fakeProvider{ok: true}}, ok: true, wantPoll: 250 * time.Millisecond, wantCrash: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &ackCounter{Provider: tt.inner}
			for range 3 {
				_ = c.AckOrchestrationItem(context.Background(), "t", durable.OrchestrationTurn{})
			}
			_ = c.AckWorkItem(context.Background(), "t", nil)
			var succeeded int64 // 1 when acks succeed
			if tt.ok {
				succeeded = 1
			}
			require.Equal(t, 3*succeeded, c.turns.Load())
			require.Equal(t, 3*(1-succeeded), c.turnErrs.Load())
			require.Equal(t, succeeded, c.activities.Load())
			require.Equal(t, 1-succeeded, c.activityErrs.Load())
			_, admin := c.Admin()
			require.Equal(t, tt.ok, admin, "Admin is the wrapped provider's")
			require.Equal(t, tt.wantPoll, c.PollInterval())
			var rt durable.Provider = c
			_, isCrasher := rt.(runtime.Crasher)
			require.True(t, isCrasher)
			c.Crash()
			if pf, ok := tt.inner.(*pacedFake); ok {
				require.Equal(t, tt.wantCrash, pf.crashed)
			}
		})
	}
}
