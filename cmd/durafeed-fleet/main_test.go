package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable/history"
)

// The binaries of the tests, built once for the test binary
// (testBinaries) and removed by TestMain.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// testBinaries returns the directory holding the cosmosemu and
// durafeed-service binaries, building them at the first call.
func testBinaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "durafeed-fleet-test-bin-"); binErr == nil {
			_, _, binErr = binaries(context.Background(), "", binDir, true)
		}
	})
	require.NoError(t, binErr)
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// TestFleet runs the multi-process test at a small scale in both modes:
// the emulator and the services as processes, a service killed and
// started again under its replica id, another stopped by SIGTERM and
// replaced, and every history checked.
func TestFleet(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	err := realMain(ctx, []string{"-n", "60", "-inflight", "10", "-grace", "15s", "-bin-dir", testBinaries(t)}, defaultEnv(os.Environ()), &out, &log)
	t.Log(out.String())
	require.NoError(t, err, "%s\n%s", out.String(), log.String())
	for _, mode := range []string{"event-driven", "polling"} {
		require.Contains(t, out.String(), "durafeed fleet, "+mode)
		report := out.String()[strings.Index(out.String(), "durafeed fleet, "+mode):]
		require.Contains(t, report, "completed     60 of 60", mode)
		require.Contains(t, report, "started again under its replica id 1s later: true (ready", mode)
	}
	require.Contains(t, out.String(), "status 0: true, leases handed over: true")
	require.Contains(t, out.String(), "after the kill and restart in place")
}

// TestCheckHistory: the checker tells a right history from each kind of
// wrong one.
func TestCheckHistory(t *testing.T) {
	t.Parallel()
	ev := func(id, src uint64, k history.EventKind) history.Event {
		return history.Event{EventID: id, SourceEventID: src, Kind: k}
	}
	right := []history.Event{
		ev(1, 0, history.OrchestrationStarted{Name: "Greet"}),
		ev(2, 0, history.ActivityScheduled{Name: "SayHello"}),
		ev(3, 2, history.ActivityCompleted{Result: `"Hello, g!"`}),
		ev(4, 0, history.OrchestrationCompleted{Output: `"Hello, g!"`}),
	}
	require.Empty(t, checkHistory("g", "Greet", right))
	twice := append(append([]history.Event{}, right[:3]...), ev(5, 2, history.ActivityCompleted{Result: `"x"`}), right[3])
	require.Contains(t, checkHistory("g", "Greet", twice), "completed 2 times")
	require.Contains(t, checkHistory("g", "Greet", right[:3]), "completed 0 times")
	wrong := append(append([]history.Event{}, right[:3]...), ev(4, 0, history.OrchestrationCompleted{Output: `"Hi"`}))
	require.Contains(t, checkHistory("g", "Greet", wrong), "output")
	approval := []history.Event{
		ev(1, 0, history.OrchestrationStarted{Name: "Approval"}),
		ev(2, 0, history.OrchestrationCompleted{Output: `{"item":"a","approved":true,"by":"fleet"}`}),
	}
	require.Contains(t, checkHistory("a", "Approval", approval), "received 0 times")
}

// TestSweep runs the sweep at a tiny scale: both modes, each on its own
// fleet, three ticks each. It checks what the sweep measured and wrote,
// never the figures' values nor the judge's verdicts (machines are
// noisy).
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "sweep.json")
	var stdout, log bytes.Buffer
	err := realMain(ctx, []string{"-sweep", "-sweep-loads", "300ms", "-sweep-samples", "3", "-sweep-settle", "0s", "-out", out, "-bin-dir", testBinaries(t)},
		defaultEnv(os.Environ()), &stdout, &log)
	t.Log(stdout.String())
	require.NoError(t, err, "%s\n%s", stdout.String(), log.String())
	rep := readSweepReport(t, out)
	require.Equal(t, []string{modeEventDriven, modePolling}, rep.Settings.Modes)
	require.Equal(t, []string{"300ms"}, rep.Settings.Loads)
	require.Len(t, rep.Cells, 2)
	for _, mode := range []string{modeEventDriven, modePolling} {
		i := slices.IndexFunc(rep.Cells, func(c sweepCell) bool { return c.Mode == mode })
		require.GreaterOrEqual(t, i, 0, "no %s cell", mode)
		c := rep.Cells[i]
		require.Empty(t, c.Error, mode)
		require.Empty(t, c.Failures, mode)
		require.Equal(t, "300ms", c.Load)
		require.Equal(t, 3, c.Ticks, mode)
		require.Len(t, c.StartMS, 3, mode)
		require.Len(t, c.EventMS, 3, mode)
		require.Equal(t, 3, c.Start.N, mode)
		require.Equal(t, 3, c.Event.N, mode)
		for _, ms := range append(slices.Clone(c.StartMS), c.EventMS...) {
			require.Positive(t, ms, mode)
		}
		require.Equal(t, 6, c.Completed, mode)
		require.Positive(t, c.RUPerOrch, mode)
		require.Positive(t, c.RequestsPerOrch, mode)
		require.Positive(t, c.MeasuredS, mode)
	}
	require.Len(t, rep.Judges, 1)
	require.Equal(t, modeEventDriven, rep.Judges[0].Mode)
	require.Contains(t, stdout.String(), "judge event-driven")
}

// TestSweepJudge: the judge compares with polling, and a missing cell or
// a measure without samples fails its targets.
func TestSweepJudge(t *testing.T) {
	t.Parallel()
	cell := func(mode string, p50, p99, ru float64, n int) sweepCell {
		s := latencySummary{N: n, P50MS: p50, P99MS: p99, MaxMS: p99}
		return sweepCell{Mode: mode, Load: "1s", Start: s, Event: s, RUPerOrch: ru, Completed: 2 * n}
	}
	polling := cell(modePolling, 1000, 2000, 10, 12)
	for _, tc := range []struct {
		name          string
		cells         []sweepCell
		p50, p99, ru  bool
		pass, ratioed bool
	}{
		{"every target met", []sweepCell{cell(modeEventDriven, 50, 400, 8, 12), polling}, true, true, true, true, true},
		{"p50 missed", []sweepCell{cell(modeEventDriven, 150, 400, 8, 12), polling}, false, true, true, false, true},
		{"p99 missed", []sweepCell{cell(modeEventDriven, 50, 600, 8, 12), polling}, true, false, true, false, true},
		{"costlier", []sweepCell{cell(modeEventDriven, 50, 400, 11, 12), polling}, true, true, false, false, true},
		{"no polling cell", []sweepCell{cell(modeEventDriven, 50, 400, 8, 12)}, false, false, false, false, false},
		{"no event-driven cell", []sweepCell{polling}, false, false, false, false, false},
		{"no samples", []sweepCell{cell(modeEventDriven, 0, 0, 0, 0), polling}, false, false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := judge(tc.cells, "1s", modeEventDriven)
			require.Equal(t, []bool{tc.p50, tc.p99, tc.ru, tc.pass}, []bool{j.P50, j.P99, j.RU, j.Pass})
			require.Equal(t, tc.ratioed, j.StartP50 != nil)
			rep := sweepReport{Cells: tc.cells, Judges: []sweepJudge{j}}
			var out bytes.Buffer
			rep.write(&out)
			want := "→ NO"
			if tc.pass {
				want = "→ PASS"
			}
			require.Contains(t, out.String(), "1s     judge event-driven")
			require.Contains(t, out.String(), want)
		})
	}
}

// TestSweepCounters: the request counters are summed over their label
// sets, and a scrape without them is refused.
func TestSweepCounters(t *testing.T) {
	t.Parallel()
	text := `# HELP durafeed_cosmos_request_units_total request units charged
# TYPE durafeed_cosmos_request_units_total counter
durafeed_cosmos_request_units_total{db_operation_name="batch",otel_scope_name="x y"} 45.5
durafeed_cosmos_request_units_total{db_operation_name="read"} 4.5
durafeed_cosmos_requests_total{db_operation_name="read",db_response_status_code="200"} 3
durafeed_cosmos_requests_total 2
durafeed_cosmos_request_units_total_other 1000
durafeed_cosmos_request_duration_seconds_count{db_operation_name="read"} 7
`
	m, err := sumMetrics(strings.NewReader(text), promRequestUnits, promRequests)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{promRequestUnits: 50, promRequests: 5}, m)
	m, err = sumMetrics(strings.NewReader("go_goroutines 12\n"), promRequestUnits, promRequests)
	require.NoError(t, err)
	require.Empty(t, m, "no sample of either: the scrape refuses it")
	_, err = sumMetrics(strings.NewReader("durafeed_cosmos_requests_total{a=\"b\"} x\n"), promRequests)
	require.Error(t, err)
}

// TestSweepFlags: -sweep-loads and -sweep-samples are checked before
// anything runs.
func TestSweepFlags(t *testing.T) {
	t.Parallel()
	loads, err := parseLoads("100ms, 1s,60s")
	require.NoError(t, err)
	require.Equal(t, []sweepLoad{{"100ms", 100 * time.Millisecond}, {"1s", time.Second}, {"60s", time.Minute}}, loads)
	for _, args := range [][]string{
		{"-sweep", "-sweep-loads", "1s,fast"},
		{"-sweep", "-sweep-loads", "0s"},
		{"-sweep", "-sweep-loads", "1s,1000ms"},
		{"-sweep", "-sweep-samples", "2"},
		{"-sweep", "-sweep-duration", "0s"},
	} {
		var out, log bytes.Buffer
		require.Error(t, realMain(context.Background(), args, defaultEnv(os.Environ()), &out, &log), "%v", args)
		require.Empty(t, out.String(), "%v", args)
	}
}

// readSweepReport reads a sweep's JSON report, refusing unknown fields.
func readSweepReport(t *testing.T, path string) sweepReport {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep sweepReport
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&rep))
	return rep
}
