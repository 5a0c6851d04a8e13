package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable"
)

// TestBacklogScenarios drains small backlogs, 20 and 100 queued
// (polling: 20 and 40), with 2 replicas, one scenario at a time: every
// instance completes, the figures are there, the targets are judged, and
// the table and the JSON carry them. The depths are kept small for the
// race detector on 2 cores: there 200 queued took 12 to 25 s to drain
// event-driven, and 30 to 90 s polling, each of whose fetches reads every
// queued start (a drain that grows with the square of the depth).
func TestBacklogScenarios(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, _, err := StartEnv(ctx, EnvOptions{ProbeSamples: 5})
	require.NoError(t, err)
	defer func() { _ = e.Close() }()
	w := BacklogConfig{Depths: []int{20, 100}, PollingDepths: []int{20, 40}, Replicas: 2, PollInterval: 20 * time.Millisecond,
		MemoryInterval: 100 * time.Millisecond}
	var rows []BacklogResult
	for _, m := range Modes {
		for _, depth := range w.withDefaults().DepthsOf(m) {
			r, err := e.RunBacklog(ctx, BacklogScenario{Mode: m, Depth: depth, Workload: w})
			require.NoError(t, err)
			t.Logf("%s %d: enqueued in %.2f s; drained in %.2f s (join %.2f s), %.1f orch/s, %.1f RU/orch, %.1f examined/orch, heap %.0f MB",
				m, depth, r.EnqueueS, r.DrainS, r.JoinS, r.DispatchOrchPerSec, r.RUPerOrch, r.ExaminedPerOrch, r.Memory.HeapInusePeakMB)
			require.Equal(t, m, r.Mode)
			require.Equal(t, depth, r.Depth)
			requireSaneBacklog(t, r)
			rows = append(rows, r)
		}
	}
	require.Len(t, rows, 4)

	rep := &Report{Settings: Settings{Modes: Modes, Backlog: &BacklogSettings{Depths: w.Depths, PollingDepths: w.PollingDepths,
		Replicas: 2, TasksPerInstance: 5, QueriesCounted: true}}, Environments: []EnvInfo{{}}, Backlog: rows}
	rep.Targets = evaluateTargets(rep)
	var judged []string
	for _, tr := range rep.Targets {
		judged = append(judged, tr.Subject+": "+tr.Target)
	}
	for _, subject := range []string{"backlog event-driven, 100 vs 20 queued", "backlog polling, 40 vs 20 queued"} {
		require.Contains(t, judged, subject+": backlog RU/orch ≤ 1.05× the shallow backlog's")
		require.Contains(t, judged, subject+": backlog orch/s ≥ 0.95× the shallow backlog's")
		require.Contains(t, judged, subject+": backlog: no fetch scans it (documents examined/orch ≤ 1.05× the shallow backlog's)")
	}
	require.Len(t, judged, 6)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, want := range []string{"Backlog: starts of a fan-out of 5 activities", "Backlog cost by operation", "examined/orch",
		"backlog RU/orch ≤ 1.05×", "targets met:"} {
		require.Contains(t, table.String(), want)
	}
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, rep.Backlog, back.Backlog)
	require.Equal(t, rep.Settings.Backlog, back.Settings.Backlog)
	require.Equal(t, rep.Targets, evaluateTargets(&back), "a saved report judges the same")
}

// requireSaneBacklog checks what every drain of a small backlog must show
// whatever the machine's speed: every instance completed, as the replicas
// and the store count it, each with a start and a final turn and its five
// activities; a cost, queries, and the heap read.
func requireSaneBacklog(t *testing.T, b BacklogResult) {
	t.Helper()
	name := fmt.Sprintf("%s/%d", b.Mode, b.Depth)
	require.Equal(t, 2, b.Replicas, name)
	require.False(t, b.TimedOut, name)
	require.Equal(t, b.Depth, b.Completed, name)
	require.Zero(t, b.Failed, name)
	require.Equal(t, b.Depth, b.StoreCompleted, name)
	require.Zero(t, b.StoreFailed, name)
	require.Empty(t, b.FirstError, name)
	require.Equal(t, int64(5*b.Depth), b.Activities, name)
	require.GreaterOrEqual(t, b.Turns, int64(2*b.Depth), name)
	require.GreaterOrEqual(t, b.TurnsPerOrch, 2.0, name)

	require.Positive(t, b.EnqueueS, name)
	require.Positive(t, b.EnqueuePerSec, name)
	require.Positive(t, b.EnqueueRUPerStart, name)
	require.Positive(t, b.DrainS, name)
	require.LessOrEqual(t, b.JoinS, b.DrainS, name)
	require.Positive(t, b.OrchPerSec, name)
	require.GreaterOrEqual(t, b.DispatchOrchPerSec, b.OrchPerSec, name)
	require.Positive(t, b.Drain.P10S, name)
	require.LessOrEqual(t, b.Drain.P10S, b.Drain.P50S, name)
	require.LessOrEqual(t, b.Drain.P50S, b.Drain.P90S, name)
	require.LessOrEqual(t, b.Drain.P90S, b.DrainS, name)

	require.Positive(t, b.RUPerOrch, name)
	require.Positive(t, b.RequestsPerOrch, name)
	require.NotEmpty(t, b.ByOperation, name)
	var ru float64
	for _, o := range b.ByOperation {
		ru += o.RU
	}
	require.InDelta(t, b.RUPerOrch, ru, 0.01*float64(len(b.ByOperation))+0.01, name)
	require.LessOrEqual(t, b.JoinRU, b.RequestCharge, name)
	require.Positive(t, b.OpenRU, name)
	require.Equal(t, floorSample, b.WriteFloor.Sampled, name)
	require.Greater(t, b.FloorRatio, 1.0, name)

	require.NotEmpty(t, b.Queries, name)
	require.Positive(t, b.ExaminedPerOrch, name)
	require.Positive(t, b.MaxQueryExamined, name)
	require.Contains(t, b.Queries, b.MaxQueryLabel, name)

	require.GreaterOrEqual(t, b.Memory.Samples, 2, name)
	require.Positive(t, b.Memory.HeapInusePeakMB, name)
	require.Positive(t, b.Memory.LivePeakMB, name)
	require.Positive(t, b.Memory.ReplicasPeakMB, name)
	require.GreaterOrEqual(t, b.Memory.ReplicasPeakMB, b.Memory.ReplicasStartMB, name)
	require.Positive(t, b.Host.CPUs, name)
	if goruntime.GOOS == "linux" {
		require.Positive(t, b.Host.ProcessCPUS, name)
		require.Positive(t, b.Host.LoadMax, name)
	}

	require.Len(t, b.PerReplica, 2, name)
	var turns, acts int64
	for _, p := range b.PerReplica {
		turns += p.Turns
		acts += p.Activities
	}
	require.Equal(t, b.Turns, turns, name)
	require.Equal(t, b.Activities, acts, name)
	if b.Mode == ModePolling {
		require.Nil(t, b.Engine, name)
		require.Equal(t, 20.0, b.PollIntervalMS, name)
		require.Zero(t, b.JoinS, name)
	} else {
		require.NotNil(t, b.Engine, name)
		require.Positive(t, b.Engine.Catchups, name)
		require.Zero(t, b.PollIntervalMS, name)
	}
}

func TestBacklogConfigDefaults(t *testing.T) {
	d := DefaultBacklogConfig()
	require.Equal(t, []int{100, 100_000}, d.Depths)
	require.Equal(t, 3, d.Replicas)
	require.Equal(t, 5, d.TasksPerInstance)
	require.Equal(t, d, BacklogConfig{}.withDefaults())
	kept := BacklogConfig{Depths: []int{5}, PollingDepths: []int{3}, Replicas: 2, TasksPerInstance: 1, ActivityDelay: time.Second,
		PollInterval: time.Second, OrchestrationConcurrency: 4, WorkerConcurrency: 5, EnqueueConcurrency: 6, MaxDrain: -1,
		MemoryInterval: time.Minute, PollingMaxDrain: time.Minute}
	require.Equal(t, kept, kept.withDefaults())
	require.Equal(t, time.Duration(-1), kept.MaxDrainOf(ModeEventDriven))
	require.Equal(t, time.Minute, kept.MaxDrainOf(ModePolling))
	require.Equal(t, time.Hour, d.MaxDrainOf(ModePolling), "polling takes MaxDrain without PollingMaxDrain")
	require.Equal(t, []int{5}, kept.DepthsOf(ModeEventDriven))
	require.Equal(t, []int{3}, kept.DepthsOf(ModePolling))
	require.Equal(t, []int{100, 100_000}, d.DepthsOf(ModePolling), "polling takes Depths without PollingDepths")

	// The estimate counts every depth of every mode, and polling's reads
	// of the backlog.
	cfg := Config{Cases: []Case{}, Replicas: []int{}, Failover: -1, Latencies: []time.Duration{0}}
	base := Estimate(cfg)
	cfg.Backlog = &BacklogConfig{Depths: []int{10, 100}, Replicas: 3}
	polled := float64(estimateRUPerPolledStart * (10*10 + 100*100))
	require.InDelta(t, 2*(110*estimateRUPerOrchestration+2*4*estimateRUPerProvider)+polled, Estimate(cfg)-base, 1e-6)
	cfg.Backlog.PollingDepths = []int{10}
	require.InDelta(t, 120*estimateRUPerOrchestration+3*4*estimateRUPerProvider+estimateRUPerPolledStart*10*10, Estimate(cfg)-base, 1e-6)
	cfg.Modes = []Mode{ModeEventDriven}
	require.InDelta(t, 110*estimateRUPerOrchestration+2*4*estimateRUPerProvider, Estimate(cfg)-base, 1e-6)
}

// TestBacklogTargets: per mode, the deepest backlog against the
// shallowest; both must have drained completely; a missing depth is a
// NO that says so.
func TestBacklogTargets(t *testing.T) {
	row := func(m Mode, depth int, ru, pace, examined float64) BacklogResult {
		return BacklogResult{Mode: m, Depth: depth, Completed: depth, RUPerOrch: ru, DispatchOrchPerSec: pace, OrchPerSec: pace / 2,
			ExaminedPerOrch: examined, RequestCharge: ru * float64(depth)}
	}
	const (
		edCost  = "backlog event-driven, 1000 vs 10 queued: backlog RU/orch ≤ 1.05× the shallow backlog's"
		edPace  = "backlog event-driven, 1000 vs 10 queued: backlog orch/s ≥ 0.95× the shallow backlog's"
		edScan  = "backlog event-driven, 1000 vs 10 queued: backlog: no fetch scans it (documents examined/orch ≤ 1.05× the shallow backlog's)"
		plCost  = "backlog polling, 100 vs 10 queued: backlog RU/orch ≤ 1.05× the shallow backlog's"
		plPace  = "backlog polling, 100 vs 10 queued: backlog orch/s ≥ 0.95× the shallow backlog's"
		plScan  = "backlog polling, 100 vs 10 queued: backlog: no fetch scans it (documents examined/orch ≤ 1.05× the shallow backlog's)"
		missing = "no event-driven result"
	)
	settings := func(counted bool) Settings {
		return Settings{Modes: Modes, Backlog: &BacklogSettings{Depths: []int{10, 1000}, PollingDepths: []int{10, 100}, QueriesCounted: counted}}
	}
	tests := []struct {
		name     string
		settings Settings
		rows     []BacklogResult
		want     map[string]verdict
	}{
		{name: "met within the margins, polling's scan is not", settings: settings(true), rows: []BacklogResult{
			row(ModeEventDriven, 10, 300, 80, 20), row(ModeEventDriven, 1000, 314, 77, 20.9),
			row(ModePolling, 10, 600, 30, 1300), row(ModePolling, 100, 2200, 6, 8900),
		}, want: map[string]verdict{edCost: {Met: true}, edPace: {Met: true}, edScan: {Met: true}, plCost: {}, plPace: {}, plScan: {}}},
		{name: "just outside the margins", settings: settings(true), rows: []BacklogResult{
			row(ModeEventDriven, 10, 300, 80, 20), row(ModeEventDriven, 1000, 316, 75, 21.1),
			row(ModePolling, 10, 600, 30, 1300), row(ModePolling, 100, 600, 30, 1300),
		}, want: map[string]verdict{edCost: {}, edPace: {}, edScan: {}, plCost: {Met: true}, plPace: {Met: true}, plScan: {Met: true}}},
		{name: "the deep backlog was not run", settings: settings(true), rows: []BacklogResult{
			row(ModeEventDriven, 10, 300, 80, 20), row(ModePolling, 10, 600, 30, 1300), row(ModePolling, 100, 600, 30, 1300),
		}, want: map[string]verdict{edCost: {Got: missing}, edPace: {Got: missing}, edScan: {Got: missing},
			plCost: {Met: true}, plPace: {Met: true}, plScan: {Met: true}}},
		{name: "no query counts on an account", settings: settings(false), rows: []BacklogResult{
			row(ModeEventDriven, 10, 300, 80, 0), row(ModeEventDriven, 1000, 300, 80, 0),
			row(ModePolling, 10, 600, 30, 0), row(ModePolling, 100, 600, 30, 0),
		}, want: map[string]verdict{edCost: {Met: true}, edPace: {Met: true}, plCost: {Met: true}, plPace: {Met: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Settings: tt.settings, Environments: []EnvInfo{{}}, Backlog: tt.rows}
			got := map[string]verdict{}
			for k, v := range verdicts(t, rep) {
				if v.Got == missing {
					got[k] = v
					continue
				}
				got[k] = verdict{Met: v.Met}
			}
			require.Equal(t, tt.want, got)
		})
	}

	// A drain stopped at its time limit, or with a failed instance,
	// meets nothing, however its ratios look.
	for _, spoil := range []func(*BacklogResult){
		func(b *BacklogResult) { b.TimedOut, b.Completed = true, b.Depth/2 },
		func(b *BacklogResult) { b.Failed = 1 },
	} {
		deep := row(ModeEventDriven, 1000, 300, 80, 20)
		spoil(&deep)
		rep := &Report{Settings: Settings{Modes: []Mode{ModeEventDriven}, Backlog: &BacklogSettings{Depths: []int{10, 1000}, QueriesCounted: true}},
			Environments: []EnvInfo{{}}, Backlog: []BacklogResult{row(ModeEventDriven, 10, 300, 80, 20), deep}}
		v := verdicts(t, rep)
		require.Len(t, v, 3)
		for k, tr := range v {
			require.False(t, tr.Met, k)
			require.Contains(t, tr.Got, "event-driven 1000", k)
		}
	}

	// One depth: nothing to compare.
	rep := &Report{Settings: Settings{Modes: Modes, Backlog: &BacklogSettings{Depths: []int{10}}}, Environments: []EnvInfo{{}},
		Backlog: []BacklogResult{row(ModeEventDriven, 10, 300, 80, 20), row(ModePolling, 10, 600, 30, 1300)}}
	require.Empty(t, backlogTargets(rep))
}

// TestQueryScans: a query's pages are followed by their continuations,
// so the largest query adds up its pages; queries are counted per
// container and label.
func TestQueryScans(t *testing.T) {
	q := newQueryScans()
	h := q.middleware()
	page := func(container, cont string, pk bool, examined, returned int, next string) {
		r := httptest.NewRequest(http.MethodPost, "/dbs/db/colls/"+container+"/docs", nil)
		r.Header.Set("Content-Type", "application/query+json")
		if pk {
			r.Header.Set("x-ms-documentdb-partitionkey", `["i"]`)
		}
		if cont != "" {
			r.Header.Set("x-ms-continuation", cont)
		}
		answer := func(context.Context, *cosmosemu.Request) *cosmosemu.Response {
			resp := &cosmosemu.Response{Status: 200, Header: http.Header{}, RequestCharge: emuQueryBase + emuQueryPerDoc*float64(examined)}
			resp.Header.Set("x-ms-item-count", fmt.Sprint(returned))
			if next != "" {
				resp.Header.Set("x-ms-continuation", next)
			}
			return resp
		}
		h(answer)(context.Background(), &cosmosemu.Request{Operation: cosmosemu.OpQuery, ResourceType: cosmosemu.ResourceDocument,
			Container: container, HTTP: r})
	}
	page("c1", "", false, 100, 100, "t1")
	page("c1", "t1", false, 50, 40, "")
	page("c1", "", false, 30, 30, "")
	page("c1", "", true, 7, 5, "")
	page("c2", "", false, 1000, 1000, "")
	page("c1", "stale", false, 5, 5, "") // an unknown continuation starts a query

	got := q.snapshot("c1")
	require.Equal(t, map[string]QueryScan{
		"Query (cross-partition)": {Queries: 3, Pages: 4, Examined: 185, Returned: 175, MaxExamined: 150, MaxReturned: 140},
		"Query":                   {Queries: 1, Pages: 1, Examined: 7, Returned: 5, MaxExamined: 7, MaxReturned: 5},
	}, got)
	require.Equal(t, QueryScan{Queries: 4, Pages: 5, Examined: 192, Returned: 180, MaxExamined: 150, MaxReturned: 140}, sumScans(got))
	require.Equal(t, int64(1000), q.snapshot("c2")["Query (cross-partition)"].MaxExamined)
	q.reset("c1")
	require.Empty(t, q.snapshot("c1"))

	var none *queryScans // on an account
	none.reset("c1")
	require.Nil(t, none.snapshot("c1"))
}

func TestHeapOwners(t *testing.T) {
	for fn, want := range map[string]string{
		"github.com/durafeed/durafeed/engine.(*Engine).fetch":          "engine",
		"github.com/durafeed/durafeed/cosmosemu/knobs.(*Knobs).handle": "cosmosemu/knobs",
		"github.com/durafeed/durafeed/wakeup.New.func1":                "wakeup",
		"github.com/durafeed/durafeed/bench.TestHeapOwners":            "bench",
		"encoding/json.Unmarshal":                                      "",
		"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos.(*C).Do":  "",
	} {
		require.Equal(t, want, packageOf(fn), fn)
	}
	require.Zero(t, scaledInUse(0, 0, 512<<10))
	require.Equal(t, int64(1000), scaledInUse(10, 1000, 1))
	// Small objects are sampled rarely, so their bytes are scaled up.
	require.Greater(t, scaledInUse(10, 1000, 512<<10), int64(1000))

	// A live allocation of this package's own, large enough to be
	// sampled whatever the profile's rate, so the replicas' part cannot
	// be empty whatever else the heap holds when the test runs.
	own := make([]byte, 8<<20)
	h := heapAfterGC()
	goruntime.KeepAlive(own)
	require.Positive(t, h.inuse)
	require.Positive(t, h.live)
	require.GreaterOrEqual(t, h.rest, uint64(len(own)))
	var sum uint64
	for _, b := range h.byPackage {
		sum += b
	}
	require.Equal(t, h.rest, sum, "the replicas' part is split by package")
}

// TestBacklogDrainLimit: a drain past MaxDrain, its join included, is
// reported with what was measured, not as an error.
func TestBacklogDrainLimit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, _, err := StartEnv(ctx, EnvOptions{ProbeSamples: 5})
	require.NoError(t, err)
	defer func() { _ = e.Close() }()
	for _, m := range Modes {
		r, err := e.RunBacklog(ctx, BacklogScenario{Mode: m, Depth: 5, Workload: BacklogConfig{Replicas: 1, MaxDrain: time.Nanosecond}})
		require.NoError(t, err, m)
		require.True(t, r.TimedOut, m)
		require.Less(t, r.Completed, 5, m)
		require.Positive(t, r.EnqueueS, m)
		require.Positive(t, r.DrainS, m)
		require.Positive(t, r.Memory.Samples, m)
	}
}

// TestDrainTracker: only committed final turns count, failed ones apart,
// and the drain is done at its target.
func TestDrainTracker(t *testing.T) {
	d := newDrainTracker(2)
	d.start = time.Now()
	final := func(st durable.Status) durable.OrchestrationTurn {
		return durable.OrchestrationTurn{Metadata: durable.ExecutionMetadata{Status: st}}
	}
	lost := &ackCounter{Provider: &fakeProvider{}, terminal: d.terminal}
	_ = lost.AckOrchestrationItem(context.Background(), "t", final(durable.StatusCompleted))
	c := &ackCounter{Provider: &fakeProvider{ok: true}, terminal: d.terminal}
	_ = c.AckOrchestrationItem(context.Background(), "t", durable.OrchestrationTurn{})
	_ = c.AckOrchestrationItem(context.Background(), "t", final(durable.StatusRunning))
	_ = c.AckOrchestrationItem(context.Background(), "t", final(durable.StatusCompleted))
	require.Equal(t, int64(1), d.n.Load(), "a failed ack and a turn that does not end the execution do not count")
	select {
	case <-d.done:
		t.Fatal("done before its target")
	default:
	}
	_ = c.AckOrchestrationItem(context.Background(), "t", final(durable.StatusFailed))
	<-d.done
	require.Equal(t, int64(2), d.n.Load())
	require.Equal(t, int64(1), d.fail.Load())
	require.Positive(t, d.last.Load())
	for i := range d.marks {
		require.Positive(t, d.marks[i].Load(), "mark %d", i)
	}
	require.Equal(t, int64(4), c.turns.Load())
}
