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
	o, err := parseFlags(nil, io.Discard)
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
	require.Equal(t, "durafeed-bench.png", o.png)
}

func TestParseFlagsSweep(t *testing.T) {
	o, err := parseFlags([]string{"-sweep", "1s,burst", "-sweep-scale", "0.5", "-sweep-dispatchers", "2"}, io.Discard)
	require.NoError(t, err)
	want, err := bench.SelectSweep([]string{"1s", "burst"}, 0.5)
	require.NoError(t, err)
	require.Equal(t, want, o.cfg.Sweep)
	require.Equal(t, 2, o.cfg.SweepDispatchers)
	for _, bad := range [][]string{{"-sweep", "2s"}, {"-sweep", "all", "-sweep-scale", "0"}} {
		_, err := parseFlags(bad, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-modes", "polling", "-cases", "", "-latencies", "0, 2ms,5ms", "-replicas", "2",
		"-interval", "10ms-20ms", "-timer-delay", "300ms", "-samples", "7"}, io.Discard)
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
		_, err := parseFlags(bad, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

// TestRunWritesTableAndJSON runs a minimal polling benchmark end to end.
func TestRunWritesTableAndJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout bytes.Buffer
	err := run([]string{"-modes", "polling", "-cases", "wake-local", "-latencies", "0", "-replicas", "1",
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
	require.NoError(t, run([]string{"-replot", in, "-png", out}, io.Discard, io.Discard))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	_, err = png.Decode(f)
	require.NoError(t, err)

	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte("{}"), 0o600))
	require.Error(t, run([]string{"-replot", empty, "-png", filepath.Join(dir, "e.png")}, io.Discard, io.Discard))
}
