package bench

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// verdict is what a test reads of one target row.
type verdict struct {
	Got string
	Met bool
}

// verdicts maps "subject: target" to each target row of the report.
func verdicts(t *testing.T, rep *Report) map[string]verdict {
	t.Helper()
	out := map[string]verdict{}
	for _, tr := range evaluateTargets(rep) {
		k := tr.Subject + ": " + tr.Target
		_, dup := out[k]
		require.False(t, dup, "target %q twice", k)
		out[k] = verdict{Got: tr.Got, Met: tr.Met}
	}
	return out
}

// TestTargetsReportMissingResults: every target the configuration asks
// for is a row of the table; a side without a result, or with no samples,
// makes the row unmet and says what is missing instead of dropping it.
func TestTargetsReportMissingResults(t *testing.T) {
	both := []Mode{ModeEventDriven, ModePolling}
	lat := func(m Mode, c Case, n int, p50, p99 float64) LatencyResult {
		return LatencyResult{Mode: m, Case: c, Summary: Summary{N: n, P50MS: p50, P99MS: p99}, RUPerMin: 10, RUPerWake: 1}
	}
	sweep := func(m Mode, n int, p50, p99 float64) SweepResult {
		return SweepResult{Mode: m, Load: "1s", MeanGapMS: 1000, Summary: Summary{N: n, P50MS: p50, P99MS: p99}, RUPerMin: 10}
	}
	const (
		p50Remote  = "wake-remote: p50 wake ≥20× lower than polling"
		p99Remote  = "wake-remote: p99 wake ≤ active feed delay + 5 round trips"
		caseP99    = "wake-remote: case p99 ≤ 1/4 of polling"
		caseCost   = "wake-remote: case RU per wake ≤ polling"
		idle1      = "1 replicas: idle RU per replica ≤ 1/5 of polling"
		sweepP50   = "sweep 1s: sweep p50 ≥10× lower than polling (20× above 100 ms, or 2× the floor)"
		sweepP99   = "sweep 1s: sweep p99 ≤ 1/4 of polling"
		sweepCost  = "sweep 1s: sweep RU/min ≤ polling"
		failover   = "failover: p99 after a replica is cut ≤ lease expiry + 2 s"
		speed1     = "stress, 1 replicas: stress orch/s ≥ 2× polling, 100% success"
		stressP99  = "stress, 1 replicas: stress p99 ≤ polling"
		turns1     = "stress, 1 replicas: stress turns/orch ≤ polling"
		orchFloor1 = "stress, 1 replicas: stress orch/s ≥ 28 (duroxide, SQLite file: 27.95)"
	)
	no := func(got string) verdict { return verdict{Got: got} }
	tests := []struct {
		name  string
		modes []Mode
		rep   Report
		want  map[string]verdict
	}{
		{name: "latency: no event-driven row", modes: both,
			rep: Report{Latency: []LatencyResult{lat(ModePolling, CaseWakeRemote, 10, 500, 990)}},
			want: map[string]verdict{p50Remote: no("no event-driven result"), p99Remote: no("no event-driven result"),
				caseP99: no("no event-driven result"), caseCost: no("no event-driven result")}},
		{name: "latency: both rows without samples", modes: both,
			rep: Report{Latency: []LatencyResult{lat(ModeEventDriven, CaseWakeRemote, 0, 0, 0), lat(ModePolling, CaseWakeRemote, 0, 0, 0)}},
			want: map[string]verdict{p50Remote: no("event-driven: 0 samples; polling: 0 samples"), p99Remote: no("event-driven: 0 samples"),
				caseP99: no("event-driven: 0 samples; polling: 0 samples"), caseCost: no("event-driven: 0 samples; polling: 0 samples")}},
		{name: "latency: polling alone asked judges nothing", modes: []Mode{ModePolling},
			rep:  Report{Latency: []LatencyResult{lat(ModePolling, CaseWakeRemote, 10, 500, 990)}},
			want: map[string]verdict{}},
		{name: "idle: event-driven without a window", modes: both,
			rep:  Report{Idle: []IdleResult{{Mode: ModeEventDriven, Replicas: 1}, {Mode: ModePolling, Replicas: 1, WindowS: 30, RUPerMin: 100}}},
			want: map[string]verdict{idle1: no("event-driven: no window measured")}},
		{name: "sweep: event-driven result, no polling result", modes: both,
			rep: Report{Sweep: []SweepResult{sweep(ModeEventDriven, 10, 2, 5)}},
			want: map[string]verdict{sweepP50: no("no polling result"), sweepP99: no("no polling result"),
				sweepCost: no("no polling result")}},
		{name: "sweep: polling with zero samples", modes: both,
			rep: Report{Sweep: []SweepResult{sweep(ModeEventDriven, 10, 2, 5), sweep(ModePolling, 0, 0, 0)}},
			want: map[string]verdict{sweepP50: no("polling: 0 samples"), sweepP99: no("polling: 0 samples"),
				sweepCost: no("polling: 0 samples")}},
		{name: "failover: nothing fetched after the cut", modes: both,
			rep:  Report{Failover: []FailoverResult{{Mode: ModeEventDriven}, {Mode: ModePolling, After: Summary{N: 10}}}},
			want: map[string]verdict{failover: no("event-driven: 0 samples after the cut")}},
		{name: "stress: the event-driven run was lost", modes: both,
			rep: Report{Stress: []StressResult{{Mode: ModeEventDriven, Replicas: 1},
				{Mode: ModePolling, Replicas: 1, Launched: 10, Completed: 10, SuccessPct: 100, OrchPerSec: 5}}},
			want: map[string]verdict{speed1: no("event-driven: nothing launched"), stressP99: no("event-driven: nothing launched"),
				turns1: no("event-driven: nothing launched"), orchFloor1: no("event-driven: nothing launched")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := tt.rep
			rep.Settings.Modes = tt.modes
			rep.Environments = []EnvInfo{{RoundTripMS: 1, BackToBackRoundTripMS: 0.5}}
			require.Equal(t, tt.want, verdicts(t, &rep))

			// The table shows them as NO and counts them.
			rep.Targets = evaluateTargets(&rep)
			met, unmet := rep.TargetCounts()
			require.Zero(t, met)
			require.Equal(t, len(tt.want), unmet)
			if unmet > 0 {
				var b bytes.Buffer
				require.NoError(t, rep.WriteTable(&b))
				require.Contains(t, b.String(), "NO")
				require.Contains(t, b.String(), "targets met: 0 of")
			}
		})
	}
}

// TestSweepFloorIsTheRoundTrip: the sweep's p50 criterion falls back to
// twice SweepFloorRoundTrips bare round trips, never to durafeed's own
// fetch or burst floor, so a high self-measured floor passes nothing.
func TestSweepFloorIsTheRoundTrip(t *testing.T) {
	res := func(m Mode, load string, gap, p50, p99, ru float64) SweepResult {
		return SweepResult{Mode: m, Load: load, MeanGapMS: gap, Summary: Summary{N: 100, P50MS: p50, P99MS: p99}, RUPerMin: ru}
	}
	tests := []struct {
		name     string
		env      EnvInfo
		ed, poll SweepResult
		met      bool
		want     string
	}{
		// The published run: a burst floor of 133 ms above the 41.7 ms
		// p50 it bounds would have allowed 266 ms.
		{name: "a burst judged against polling, its own floor aside",
			env: EnvInfo{RoundTripMS: 2.5, BurstFloorMS: 133, FetchFloorMS: 8},
			ed:  res(ModeEventDriven, "burst", 0, 41.7, 60, 50), poll: res(ModePolling, "burst", 0, 520, 1000, 100),
			met: false, want: "≤ 26.00 ms (20× lower)"},
		{name: "a Poisson load, its own fetch floor aside",
			env: EnvInfo{RoundTripMS: 2.5, FetchFloorMS: 51},
			ed:  res(ModeEventDriven, "10ms", 10, 30, 40, 50), poll: res(ModePolling, "10ms", 10, 90, 400, 100),
			met: false, want: "≤ 9.00 ms (10× lower)"},
		{name: "the round trip floor where 10× falls below it",
			env: EnvInfo{RoundTripMS: 1, FetchFloorMS: 0.5},
			ed:  res(ModeEventDriven, "10ms", 10, 3.5, 1, 50), poll: res(ModePolling, "10ms", 10, 5, 8, 100),
			met: true, want: "≤ 4.00 ms (2× the floor)"},
		{name: "a burst within 20× of polling",
			env: EnvInfo{RoundTripMS: 2.5, BurstFloorMS: 133},
			ed:  res(ModeEventDriven, "burst", 0, 20, 60, 50), poll: res(ModePolling, "burst", 0, 520, 1000, 100),
			met: true, want: "≤ 26.00 ms (20× lower)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Settings: Settings{Modes: []Mode{ModeEventDriven, ModePolling}}, Environments: []EnvInfo{tt.env},
				Sweep: []SweepResult{tt.ed, tt.poll}}
			var p50 *TargetResult
			for _, tr := range sweepTargets(rep) {
				if tr.Target == "sweep p50 ≥10× lower than polling (20× above 100 ms, or 2× the floor)" {
					p50 = &tr
				}
			}
			require.NotNil(t, p50)
			require.Equal(t, tt.met, p50.Met, p50.Got)
			require.Equal(t, tt.want, p50.Want)
			require.Contains(t, p50.Note, "information")
		})
	}
}
