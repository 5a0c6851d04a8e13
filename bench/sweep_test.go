package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTinySweep runs a sweep phase alone with small loads (a fast Poisson
// stream, a slow one and a burst) in both modes: every item is fetched
// once and timed, each load is charged, the targets are judged per load,
// and the table, the JSON and the picture carry the results.
func TestTinySweep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tinyConfig()
	cfg.Cases, cfg.Replicas = []Case{}, []int{}
	cfg.Sweep = []SweepLoad{
		{Name: "20ms", MeanGap: 20 * time.Millisecond, Items: 25},
		{Name: "1s", MeanGap: time.Second, Items: 3},
		{Name: "burst", Burst: 10, Items: 10, Quiet: 300 * time.Millisecond},
	}
	cfg.SweepTail, cfg.SweepSettle = 300*time.Millisecond, 200*time.Millisecond
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Errors)
	require.Empty(t, rep.Latency)
	require.Empty(t, rep.Idle)
	require.Positive(t, rep.Environments[0].FetchFloorMS)

	require.Len(t, rep.Sweep, len(cfg.Sweep)*len(Modes))
	for _, r := range rep.Sweep {
		name := r.Load + "/" + string(r.Mode)
		var want SweepLoad
		for _, l := range cfg.Sweep {
			if l.Name == r.Load {
				want = l
			}
		}
		require.Equal(t, want.Items, r.N, name)
		require.Zero(t, r.Lost, name)
		require.Zero(t, r.FetchErrors+r.AckErrors, name)
		require.LessOrEqual(t, r.P50MS, r.P99MS, name)
		// A broken harness, not a slow machine, misses this: an item is
		// fetched after it was sent, less a round trip.
		require.Greater(t, r.MinMS, -50.0, name)
		require.Positive(t, r.RequestsPerMin, name)
		require.Positive(t, r.RUPerMin, name)
		require.Positive(t, r.RUPerWake, name)
		require.NotEmpty(t, r.ByOperation, name)
		// The window spans the arrivals and the tail.
		require.GreaterOrEqual(t, r.WindowS, cfg.SweepTail.Seconds(), name)
	}
	n := 0
	for _, tr := range rep.Targets {
		if tr.Subject == "sweep 20ms" || tr.Subject == "sweep 1s" || tr.Subject == "sweep burst" {
			n++
		}
	}
	require.Equal(t, 3*len(cfg.Sweep), n, "p50, p99 and cost judged per load")

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "Sweep: open-loop arrivals")
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, rep.Sweep, back.Sweep)

	var pic bytes.Buffer
	require.NoError(t, rep.WriteSweepPNG(&pic))
	img, err := png.Decode(&pic)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 100)
}

func TestSweepPNGNeedsResults(t *testing.T) {
	var pic bytes.Buffer
	require.Error(t, (&Report{}).WriteSweepPNG(&pic))
	require.Zero(t, pic.Len())
}

func TestSelectSweep(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		scale float64
		want  []SweepLoad
		err   bool
	}{
		{name: "all", names: []string{"all"}, scale: 1, want: DefaultSweepLoads()},
		{name: "subset in default order, scaled", names: []string{"burst", "10ms"}, scale: 0.1, want: []SweepLoad{
			{Name: "10ms", MeanGap: 10 * time.Millisecond, Items: 200},
			{Name: "burst", Burst: 100, Items: 100, Quiet: 6 * time.Second},
		}},
		{name: "at least three items", names: []string{"60s"}, scale: 0.01, want: []SweepLoad{{Name: "60s", MeanGap: time.Minute, Items: 3}}},
		{name: "unknown load", names: []string{"5s"}, scale: 1, err: true},
		{name: "scale not positive", names: []string{"all"}, scale: 0, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectSweep(tt.names, tt.scale)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestJudgeSweep(t *testing.T) {
	res := func(p50, p99, ru float64) SweepResult {
		return SweepResult{Summary: Summary{N: 10, P50MS: p50, P99MS: p99}, RUPerMin: ru}
	}
	tests := []struct {
		name            string
		ed, poll        SweepResult
		floor           float64
		p50, p99, cost  bool
		wantLimitPrefix string
	}{
		{name: "20x below a slow poller", ed: res(20, 200, 90), poll: res(500, 1000, 100), floor: 1,
			p50: true, p99: true, cost: true, wantLimitPrefix: "≤ 25.00 ms (20×"},
		{name: "10x only where polling is fast", ed: res(9, 10, 100), poll: res(90, 40, 100), floor: 1,
			p50: true, p99: true, cost: true, wantLimitPrefix: "≤ 9.00 ms (10×"},
		{name: "the floor where 10x falls below it", ed: res(1.9, 1, 50), poll: res(5, 8, 100), floor: 1,
			p50: true, p99: true, cost: true, wantLimitPrefix: "≤ 2.00 ms (2× the floor"},
		{name: "every criterion fails", ed: res(30, 300, 101), poll: res(500, 1000, 100), floor: 1,
			p50: false, p99: false, cost: false, wantLimitPrefix: "≤ 25.00 ms"},
		{name: "a lost item fails every criterion", ed: func() SweepResult { r := res(1, 1, 1); r.Lost = 1; return r }(),
			poll: res(500, 1000, 100), floor: 1, wantLimitPrefix: "≤ 25.00 ms"},
		{name: "polling without samples fails every criterion", ed: res(1, 1, 1),
			poll: func() SweepResult { r := res(0, 0, 100); r.N = 0; return r }(), floor: 1, wantLimitPrefix: "≤ 2.00 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := judgeSweep(tt.ed, tt.poll, tt.floor)
			require.Equal(t, tt.p50, c.p50, "p50")
			require.Equal(t, tt.p99, c.p99, "p99")
			require.Equal(t, tt.cost, c.cost, "cost")
			require.Contains(t, c.p50Want, tt.wantLimitPrefix)
		})
	}
}

// TestTinySweepPeerWake runs one small load with the peer wake channel on
// in event-driven mode: every item is fetched once, and the report says
// the channel was on.
func TestTinySweepPeerWake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tinyConfig()
	cfg.Cases, cfg.Replicas, cfg.PeerWake = []Case{}, []int{}, true
	cfg.Modes = []Mode{ModeEventDriven}
	cfg.Sweep = []SweepLoad{{Name: "20ms", MeanGap: 20 * time.Millisecond, Items: 25}}
	cfg.SweepTail, cfg.SweepSettle = 300*time.Millisecond, 200*time.Millisecond
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.True(t, rep.Settings.PeerWake)
	require.Len(t, rep.Sweep, 1)
	require.Equal(t, 25, rep.Sweep[0].N)
	require.Zero(t, rep.Sweep[0].Lost)
}
