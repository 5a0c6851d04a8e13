package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/bench"
)

func TestParseFlagsDefaults(t *testing.T) {
	o, err := parseFlags(nil, noEnv, io.Discard)
	require.NoError(t, err)
	d := bench.DefaultConfig()
	require.Equal(t, d.Modes, o.cfg.Modes)
	require.Equal(t, d.Cases, o.cfg.Cases)
	require.Equal(t, d.Latencies, o.cfg.Latencies)
	require.Equal(t, d.Replicas, o.cfg.Replicas)
	require.Equal(t, d.Interval, o.cfg.Interval)
	require.Equal(t, d.TimerDelay, o.cfg.TimerDelay)
	require.Equal(t, d.Samples, o.cfg.Samples)
	require.Equal(t, d.Fetch, o.cfg.Fetch)
	require.Equal(t, "durafeed-bench.json", o.out)
	require.Nil(t, o.cfg.Sweep, "no sweep phase unless asked for")
	require.Nil(t, o.cfg.Stress, "no stress phase unless asked for")
	require.Nil(t, o.cfg.Backlog, "no backlog phase unless asked for")
	require.Equal(t, "durafeed-bench.png", o.png)
}

func TestParseFlagsStress(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want bench.StressConfig
	}{
		{name: "defaults", args: []string{"-stress"}, want: bench.DefaultStressConfig()},
		{name: "every stress flag", args: []string{"-stress", "-stress-replicas", "2, 4", "-stress-orchestrations", "50", "-stress-inflight", "8",
			"-stress-tasks", "3", "-stress-activity", "2ms", "-stress-poll-interval", "1s", "-stress-duration", "-1s", "-stress-client", "replica"},
			want: func() bench.StressConfig {
				c := bench.DefaultStressConfig()
				c.Replicas, c.Orchestrations, c.MaxInFlight, c.TasksPerInstance = []int{2, 4}, 50, 8, 3
				c.ActivityDelay, c.PollInterval, c.MaxDuration = 2*time.Millisecond, time.Second, -time.Second
				c.Client = bench.StressClientReplica
				return c
			}()},
		{name: "the other phases' flags are overridden", args: []string{"-stress", "-cases", "wake-local", "-replicas", "2", "-failover", "10s",
			"-sweep", "1s"}, want: bench.DefaultStressConfig()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, noEnv, io.Discard)
			require.NoError(t, err)
			require.NotNil(t, o.cfg.Stress)
			require.Equal(t, tt.want, *o.cfg.Stress)
			// Only the stress phase runs.
			require.Empty(t, o.cfg.Cases)
			require.NotNil(t, o.cfg.Cases)
			require.Empty(t, o.cfg.Replicas)
			require.NotNil(t, o.cfg.Replicas)
			require.Negative(t, o.cfg.Failover)
			require.Nil(t, o.cfg.Sweep)
		})
	}

	// Modes, latencies and the event-driven settings still apply.
	o, err := parseFlags([]string{"-stress", "-modes", "event-driven", "-latencies", "2ms", "-peer-wake", "-feed-budget", "3", "-sibling-wait", "25ms"}, noEnv, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 25*time.Millisecond, o.cfg.SiblingWait)
	require.Equal(t, []bench.Mode{bench.ModeEventDriven}, o.cfg.Modes)
	require.Equal(t, []time.Duration{2 * time.Millisecond}, o.cfg.Latencies)
	require.True(t, o.cfg.PeerWake)
	require.Equal(t, 3.0, o.cfg.FeedBudget)

	for _, bad := range [][]string{
		{"-stress", "-stress-replicas", ""}, {"-stress", "-stress-replicas", "0"}, {"-stress", "-stress-replicas", "x"},
		{"-stress", "-stress-orchestrations", "0"}, {"-stress", "-stress-inflight", "0"}, {"-stress", "-stress-tasks", "-1"},
		{"-stress", "-stress-client", "elsewhere"}, {"-stress", "-stress-activity", "0"}, {"-stress", "-stress-poll-interval", "0"}, {"-stress", "-stress-duration", "0"},
	} {
		_, err := parseFlags(bad, noEnv, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

func TestParseFlagsBacklog(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      bench.BacklogConfig
		latencies []time.Duration
	}{
		{name: "defaults: 100 and 100,000, 3 replicas, both modes, 0 ms", args: []string{"-backlog"}, want: bench.DefaultBacklogConfig(),
			latencies: []time.Duration{0}},
		{name: "every backlog flag", args: []string{"-backlog", "-backlog-depths", "10, 1000", "-backlog-polling-depths", "10,100",
			"-backlog-replicas", "2", "-backlog-tasks", "3", "-backlog-activity", "5ms", "-backlog-enqueue-concurrency", "8",
			"-backlog-max-drain", "-1s", "-backlog-polling-max-drain", "5m", "-latencies", "0,2ms"},
			want: func() bench.BacklogConfig {
				c := bench.DefaultBacklogConfig()
				c.Depths, c.PollingDepths, c.Replicas, c.TasksPerInstance = []int{10, 1000}, []int{10, 100}, 2, 3
				c.ActivityDelay, c.EnqueueConcurrency, c.MaxDrain, c.PollingMaxDrain = 5*time.Millisecond, 8, -time.Second, 5*time.Minute
				return c
			}(), latencies: []time.Duration{0, 2 * time.Millisecond}},
		{name: "the other phases' flags are overridden", args: []string{"-backlog", "-cases", "wake-local", "-replicas", "2", "-failover", "10s",
			"-sweep", "1s"}, want: bench.DefaultBacklogConfig(), latencies: []time.Duration{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, noEnv, io.Discard)
			require.NoError(t, err)
			require.NotNil(t, o.cfg.Backlog)
			require.Equal(t, tt.want, *o.cfg.Backlog)
			require.Equal(t, tt.latencies, o.cfg.Latencies)
			require.Equal(t, bench.Modes, o.cfg.Modes, "both modes by default")
			// Only the backlog phase runs.
			require.Empty(t, o.cfg.Cases)
			require.NotNil(t, o.cfg.Cases)
			require.Empty(t, o.cfg.Replicas)
			require.NotNil(t, o.cfg.Replicas)
			require.Negative(t, o.cfg.Failover)
			require.Nil(t, o.cfg.Sweep)
			require.Nil(t, o.cfg.Stress)
		})
	}
	for _, bad := range [][]string{
		{"-backlog", "-backlog-depths", ""}, {"-backlog", "-backlog-depths", "0"}, {"-backlog", "-backlog-depths", "x"},
		{"-backlog", "-backlog-polling-depths", "-5"}, {"-backlog", "-backlog-replicas", "0"}, {"-backlog", "-backlog-tasks", "0"},
		{"-backlog", "-backlog-activity", "0"}, {"-backlog", "-backlog-enqueue-concurrency", "0"}, {"-backlog", "-backlog-max-drain", "0"},
		{"-backlog", "-stress"},
	} {
		_, err := parseFlags(bad, noEnv, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

// TestRunBacklog runs a minimal backlog phase end to end: its table, its
// results and its targets, and no other phase.
func TestRunBacklog(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout bytes.Buffer
	err := run(noEnv, []string{"-backlog", "-modes", "event-driven", "-backlog-depths", "3,6", "-backlog-replicas", "1",
		"-backlog-tasks", "2", "-out", out, "-png", "", "-quiet"}, &stdout, io.Discard)
	require.NoError(t, err)
	require.Contains(t, stdout.String(), "Backlog: starts of a fan-out of 2 activities")
	require.Contains(t, stdout.String(), "backlog event-driven, 6 vs 3 queued")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep bench.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Empty(t, rep.Latency)
	require.Empty(t, rep.Idle)
	require.Empty(t, rep.Failover)
	require.Len(t, rep.Backlog, 2)
	for i, depth := range []int{3, 6} {
		require.Equal(t, depth, rep.Backlog[i].Depth)
		require.Equal(t, depth, rep.Backlog[i].Completed)
		require.Equal(t, int64(2*depth), rep.Backlog[i].Activities)
	}
	require.Len(t, rep.Targets, 3)
}

func TestParseFlagsSweep(t *testing.T) {
	o, err := parseFlags([]string{"-sweep", "1s,burst", "-sweep-scale", "0.5", "-sweep-dispatchers", "2"}, noEnv, io.Discard)
	require.NoError(t, err)
	want, err := bench.SelectSweep([]string{"1s", "burst"}, 0.5)
	require.NoError(t, err)
	require.Equal(t, want, o.cfg.Sweep)
	require.Equal(t, 2, o.cfg.SweepDispatchers)
	for _, bad := range [][]string{{"-sweep", "2s"}, {"-sweep", "all", "-sweep-scale", "0"}} {
		_, err := parseFlags(bad, noEnv, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-modes", "polling", "-cases", "", "-latencies", "0, 2ms,5ms", "-replicas", "2",
		"-interval", "10ms-20ms", "-timer-delay", "300ms", "-samples", "7"}, noEnv, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []bench.Mode{bench.ModePolling}, o.cfg.Modes)
	require.Empty(t, o.cfg.Cases)
	require.NotNil(t, o.cfg.Cases, "an empty list disables the phase rather than taking the default")
	require.Equal(t, []time.Duration{0, 2 * time.Millisecond, 5 * time.Millisecond}, o.cfg.Latencies)
	require.Equal(t, []int{2}, o.cfg.Replicas)
	require.Equal(t, bench.Range{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}, o.cfg.Interval)
	require.Equal(t, bench.Range{Min: 300 * time.Millisecond, Max: 300 * time.Millisecond}, o.cfg.TimerDelay)
	require.Equal(t, 7, o.cfg.Samples)

	for _, bad := range [][]string{
		{"-modes", "fast"}, {"-modes", ""}, {"-cases", "wake"}, {"-latencies", "2"}, {"-latencies", "-1ms"},
		{"-replicas", "0"}, {"-interval", "2s-1s"}, {"-timer-delay", "x"}, {"-samples", "0"}, {"extra"},
	} {
		_, err := parseFlags(bad, noEnv, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

// TestRunWritesTableAndJSON runs a minimal polling benchmark end to end.
func TestRunWritesTableAndJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout bytes.Buffer
	err := run(noEnv, []string{"-modes", "polling", "-cases", "wake-local", "-latencies", "0", "-replicas", "1",
		"-samples", "2", "-warmup", "0", "-interval", "1ms-5ms", "-poll-interval", "20ms",
		"-idle-warmup", "0s", "-idle-window", "300ms", "-idle-slices", "1", "-failover", "-1s", "-out", out, "-quiet"}, &stdout, io.Discard)
	require.NoError(t, err)
	require.Contains(t, stdout.String(), "wake-local")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep bench.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Latency, 1)
	require.Equal(t, 2, rep.Latency[0].N)
	require.Len(t, rep.Idle, 1)
	require.Greater(t, rep.Idle[0].RequestsPerMin, 0.0)
}

// TestRunStress runs a minimal stress phase end to end: the stress table
// and its results, and no other phase.
func TestRunStress(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout bytes.Buffer
	err := run(noEnv, []string{"-stress", "-modes", "polling", "-latencies", "0", "-stress-replicas", "1", "-stress-orchestrations", "4",
		"-stress-inflight", "2", "-stress-tasks", "2", "-stress-activity", "1ms", "-stress-poll-interval", "20ms", "-out", out, "-png", "", "-quiet"},
		&stdout, io.Discard)
	require.NoError(t, err)
	require.Contains(t, stdout.String(), "Stress (duroxide's parallel_orchestrations)")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep bench.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Empty(t, rep.Latency)
	require.Empty(t, rep.Idle)
	require.Empty(t, rep.Failover)
	require.Len(t, rep.Stress, 1)
	require.Equal(t, 4, rep.Stress[0].Completed)
	require.Equal(t, int64(8), rep.Stress[0].Activities)
}

// TestReplotDrawsAReport: -replot draws the sweep picture of a saved
// report without running anything; a report without a sweep is an error.
func TestReplotDrawsAReport(t *testing.T) {
	dir := t.TempDir()
	rep := bench.Report{Sweep: []bench.SweepResult{
		{Mode: bench.ModeEventDriven, Load: "1s", MeanGapMS: 1000, Summary: bench.Summary{N: 3, P50MS: 2, P99MS: 5}, RUPerMin: 100},
		{Mode: bench.ModePolling, Load: "1s", MeanGapMS: 1000, Summary: bench.Summary{N: 3, P50MS: 500, P99MS: 990}, RUPerMin: 300},
	}}
	b, err := json.Marshal(rep)
	require.NoError(t, err)
	in, out := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.png")
	require.NoError(t, os.WriteFile(in, b, 0o600))
	require.NoError(t, run(noEnv, []string{"-replot", in, "-png", out}, io.Discard, io.Discard))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	_, err = png.Decode(f)
	require.NoError(t, err)

	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte("{}"), 0o600))
	require.Error(t, run(noEnv, []string{"-replot", empty, "-png", filepath.Join(dir, "e.png")}, io.Discard, io.Discard))
}

// noEnv is an environment without any variable (no COSMOS_ENDPOINT: the
// embedded emulator).
func noEnv(string) string { return "" }
