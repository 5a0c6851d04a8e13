package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// TestDemoTinyWorkload runs the demo's main logic on an embedded emulator
// with 20 orchestrations and checks the summary.
func TestDemoTinyWorkload(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg.Orchestrations, cfg.Replicas, cfg.Timeout = 20, 2, time.Minute
	var out bytes.Buffer
	s, err := run(context.Background(), cfg, &out, false, zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)))
	require.NoError(t, err)
	t.Log("\n" + out.String())

	require.True(t, s.ok(), "summary: %+v", s)
	require.Equal(t, 20, s.Total)
	require.Equal(t, 20, s.Completed)
	require.Zero(t, s.Failed)
	require.Zero(t, s.Unfinished)
	for _, k := range workloadKinds() {
		require.Equal(t, 4, s.CompletedByKind[k], "kind %s", k)
	}
	require.Positive(t, s.Throughput)
	require.Positive(t, s.Elapsed)
	require.LessOrEqual(t, s.P50, s.P90)
	require.LessOrEqual(t, s.P90, s.P99)
	require.LessOrEqual(t, s.P99, s.Max)
	require.GreaterOrEqual(t, s.Max, cfg.TimerDelay, "the timer orchestrations take at least their timer")
	require.True(t, s.Embedded)
	require.Positive(t, s.Requests)
	require.Positive(t, s.RU)

	text := out.String()
	for _, want := range []string{
		"durafeed demo: 20 orchestrations", "embedded cosmosemu", "progress 100%  20/20 finished",
		"completed   20 of 20 (hello 4, fanout 4, timer 4, event 4, suborch 4)", "failed      0",
		"throughput", "orchestrations/s", "p50", "p90", "p99", "requests", "RU simulated",
	} {
		require.Contains(t, text, want)
	}
	require.Equal(t, 10, strings.Count(text, "progress "), "one progress line per 10 %")
}

// An orchestration that fails (here: the approvals time out at once, before
// the demo raises the event) is reported, and the exit status is 1.
func TestDemoReportsFailures(t *testing.T) {
	t.Setenv("COSMOS_ENDPOINT", "")
	var out, errOut bytes.Buffer
	code := realMain([]string{"-n", "5", "-replicas", "1", "-approval-timeout", "1ns", "-timeout", "1m"}, &out, &errOut)
	t.Log("\n" + out.String() + errOut.String())
	require.Equal(t, 1, code)
	require.Contains(t, out.String(), "completed   4 of 5")
	require.Contains(t, out.String(), "failed      1")
	require.Contains(t, out.String(), "no approval within 1ns")
}

func TestRealMainSucceedsAndRejectsBadFlags(t *testing.T) {
	t.Setenv("COSMOS_ENDPOINT", "")
	var out, errOut bytes.Buffer
	require.Equal(t, 0, realMain([]string{"-n", "5", "-replicas", "2", "-latency", "1ms"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "completed   5 of 5")
	require.Contains(t, out.String(), "injected latency 1ms")

	for _, args := range [][]string{{"-n", "0"}, {"-replicas", "0"}, {"-bogus"}, {"extra"}, {"-log-level", "loud"}} {
		errOut.Reset()
		require.Equal(t, 2, realMain(args, &out, &errOut), "args %q", args)
		require.NotEmpty(t, errOut.String())
	}
	require.Equal(t, 0, realMain([]string{"-h"}, &out, &errOut))
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	require.Zero(t, percentile(nil, 50))
	require.Equal(t, 7*time.Millisecond, percentile(ms(7), 99))
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	d := ms(hundred...)
	require.Equal(t, 50*time.Millisecond, percentile(d, 50))
	require.Equal(t, 90*time.Millisecond, percentile(d, 90))
	require.Equal(t, 99*time.Millisecond, percentile(d, 99))
	require.Equal(t, 2*time.Millisecond, percentile(ms(1, 2, 3), 50))
}

func TestProgress(t *testing.T) {
	t.Parallel()
	start := time.Unix(0, 0)
	var plain bytes.Buffer
	p := newProgress(&plain, false, 20, start)
	for done := 0; done <= 20; done++ {
		p.update(start.Add(time.Duration(done)*100*time.Millisecond), done, 0)
		p.update(start.Add(time.Duration(done)*100*time.Millisecond), done, 0) // repeated: no new line
	}
	p.finish()
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	require.Len(t, lines, 10)
	require.Equal(t, "progress  10%  2/20 finished, 0 failed, 0.2s", lines[0])
	require.Equal(t, "progress 100%  20/20 finished, 0 failed, 2.0s", lines[9])

	var tty bytes.Buffer
	p = newProgress(&tty, true, 4, start)
	p.update(start.Add(time.Second), 2, 1)
	p.update(start.Add(2*time.Second), 4, 1)
	p.finish()
	require.Equal(t, "\r[####################....................] 2/4  50%  1 failed  2.0/s  1.0s"+
		"\r[########################################] 4/4 100%  1 failed  2.0/s  2.0s\n", tty.String())
}

func TestSummaryCountsWrongOutputsAsFailures(t *testing.T) {
	t.Parallel()
	start := time.Unix(100, 0)
	results := map[string]result{
		"a": {Kind: kindHello, OK: true, Latency: time.Second, CompletedAt: start.Add(time.Second)},
		"b": {Kind: kindFanOut, OK: true, Latency: 3 * time.Second, CompletedAt: start.Add(4 * time.Second)},
		"c": {Kind: kindTimer, Detail: "completed with 1, want 2"},
	}
	s := summarize(results, 4, start)
	require.Equal(t, 2, s.Completed)
	require.Equal(t, 1, s.Failed)
	require.Equal(t, 1, s.Unfinished)
	require.Equal(t, []string{"c: completed with 1, want 2"}, s.Failures)
	require.Equal(t, 4*time.Second, s.Elapsed)
	require.InDelta(t, 0.5, s.Throughput, 1e-9)
	require.False(t, s.ok())
	var out bytes.Buffer
	s.print(&out)
	require.Contains(t, out.String(), "unfinished  1")
}
