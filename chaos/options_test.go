package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/provider"
)

func TestFaultRatesRules(t *testing.T) {
	tests := []struct {
		name  string
		rates FaultRates
		ids   []string
	}{
		{name: "defaults", rates: DefaultFaultRates(),
			ids: []string{"throttle-429", "unavailable-503", "drop-before", "drop-after", "timeout-408-after", "gone-410"}},
		{name: "none", rates: FaultRates{}},
		{name: "only drops", rates: FaultRates{Drop: 0.1}, ids: []string{"drop-before", "drop-after"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules := tc.rates.rules("db")
			var ids []string
			// The share of all requests each rule answers, rules being
			// tried in order, is the rate asked for.
			left := 1.0
			want := map[string]float64{"throttle-429": tc.rates.Throttle, "unavailable-503": tc.rates.Unavailable,
				"drop-before": tc.rates.Drop / 2, "drop-after": tc.rates.Drop / 2, "timeout-408-after": tc.rates.TimeoutAfter, "gone-410": tc.rates.Gone}
			for _, r := range rules {
				ids = append(ids, r.ID)
				require.Equal(t, "db", r.Database)
				require.InDelta(t, want[r.ID], left*r.Probability, 1e-12, r.ID)
				left *= 1 - r.Probability
				require.Equal(t, r.ID == "drop-after" || r.ID == "timeout-408-after", r.AfterHandler, r.ID)
			}
			require.Equal(t, tc.ids, ids)
		})
	}
	rules := DefaultFaultRates().rules("db")
	require.Equal(t, knobs.FaultThrottle, rules[0].Kind)
	require.Equal(t, 10*time.Millisecond, rules[0].RetryAfter)
}

func TestCampaignDefaultsAndValidation(t *testing.T) {
	c := Campaign{}.withDefaults()
	require.NoError(t, c.validate())
	require.Equal(t, provider.ModeEventDriven, c.Mode)
	require.Equal(t, 1000, c.Orchestrations)
	require.Equal(t, 3, c.Replicas)
	require.Equal(t, 4, c.Partitions)
	require.Equal(t, 2*time.Millisecond, c.Latency)
	require.Equal(t, DefaultFaultRates(), *c.Faults)
	require.Equal(t, 1, c.Splits)
	require.Equal(t, 0.4, c.KillAt)
	require.Equal(t, 5*time.Second, c.LockTimeout)
	require.Equal(t, 100*time.Millisecond, c.IdleBackoff)
	require.Equal(t, time.Second, Campaign{Mode: provider.ModePolling}.withDefaults().IdleBackoff)
	require.NotNil(t, c.Logger)

	none := Campaign{Latency: -1, Splits: -1, KillAt: -1, Faults: &FaultRates{}}.withDefaults()
	require.Zero(t, none.Latency)
	require.Zero(t, none.Splits)
	require.Equal(t, -1.0, none.KillAt)
	require.Equal(t, FaultRates{}, *none.Faults)

	for name, bad := range map[string]Campaign{
		"mode":        {Mode: provider.Mode(7)},
		"replicas":    {Replicas: -1},
		"kill at 1":   {KillAt: 1},
		"split at 1":  {SplitAt: 1.5},
		"rate over 1": {Faults: &FaultRates{Throttle: 1.5}},
		"rates sum":   {Faults: &FaultRates{Throttle: 0.6, Drop: 0.6}},
		"timer":       {TimerDelay: -time.Second},
		"max ru":      {MaxRU: -1},
	} {
		require.Error(t, bad.withDefaults().validate(), name)
	}
}

func TestSummary(t *testing.T) {
	r := &Result{Campaign: Campaign{Mode: provider.ModePolling}, Faults: 42, Splits: 1, Killed: 1,
		Report:     Report{Expected: 10, Completed: 9, Wrong: 1, Stuck: 1, ScheduledActivities: 200, ReExecutions: 3},
		LockStalls: []LockStall{{}}, KillStalls: []LockStall{{}, {}}}
	for i := 1; i <= 100; i++ {
		r.Latencies = append(r.Latencies, time.Duration(i)*100*time.Millisecond)
	}
	r.Report.QueueDepths.WorkerQueue = 2
	r.Report.Findings = []Finding{{Check: CheckWrong}}
	require.Equal(t, "chaos: mode=polling n=10 completed=9 wrong=1 stuck=3 duplicate-events=0 duplicate-completions=0 activity-reexecutions=1.5% lock-stalls=1 faults=42 splits=1 killed=1 p50=5s p99=9.9s max=10s result=FAILED",
		r.Summary())
	require.False(t, r.OK())
	require.Zero(t, (&Result{}).percentile(0.5))
}

func TestEstimateRU(t *testing.T) {
	// The documented model: 600 roots (a multiple of the six kinds) at
	// 5/s, event-driven: the roots' charge plus 135.5 s of the clock's.
	require.InDelta(t, EstimateMargin*(600*RUPerRootEventDriven+RUPerSecondEventDriven*(120+15+0.5)),
		Campaign{Orchestrations: 600}.EstimateRU(), 1e-6)
	ev := Campaign{Orchestrations: 1000}.EstimateRU()
	require.Greater(t, Campaign{Orchestrations: 1000, Mode: provider.ModePolling}.EstimateRU(), ev, "polling costs more")
	require.Greater(t, Campaign{Orchestrations: 2000}.EstimateRU(), ev, "more roots")
	require.Greater(t, Campaign{Orchestrations: 1000, FanOut: 20}.EstimateRU(), ev, "a wider fan-out")
	require.Greater(t, Campaign{Orchestrations: 1000, MailboxItems: 10}.EstimateRU(), ev, "a longer mailbox")
	require.Greater(t, Campaign{Orchestrations: 1000, Rate: 1}.EstimateRU(), ev, "a slower pace: more idle time")
	require.Greater(t, Campaign{Orchestrations: 1000, Replicas: 6}.EstimateRU(), ev, "more replicas")
	require.Less(t, Campaign{Orchestrations: 1000, Rate: -1}.EstimateRU(), ev, "no pacing")
}
