package chaos

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/provider"
)

// logWriter writes each line to the test log (shown with -v or on failure).
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestChaosCampaign runs the campaign of `make chaos` at a small scale in
// both modes: faults, a split, a killed replica and its replacement; the
// checker must find nothing. The deadlines only catch hangs.
func TestChaosCampaign(t *testing.T) {
	tests := []struct {
		mode provider.Mode
	}{
		{mode: provider.ModeEventDriven},
		{mode: provider.ModePolling},
	}
	for _, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			const n = 48 // eight of each kind
			res, err := Campaign{Mode: tc.mode, Orchestrations: n, Timeout: 5 * time.Minute, SettleTimeout: 3 * time.Minute,
				Progress: logWriter{t}}.Run(ctx)
			require.NoError(t, err)
			var details bytes.Buffer
			res.WriteDetails(&details)
			t.Log(res.Summary() + "\n" + details.String())

			rep := res.Report
			require.Equal(t, 1, res.Splits, "the partition split did not happen")
			require.Equal(t, 1, res.Killed, "no replica was killed")
			require.Equal(t, 1, res.Joined, "no replacement joined")
			require.Equal(t, n, rep.Expected)
			require.Equal(t, n, rep.Completed, "roots completed with the expected output")
			require.Zero(t, rep.Wrong+rep.Missing, "wrong or missing roots")
			require.Zero(t, rep.Stuck, "instances left running")
			require.Zero(t, rep.QueueDepths, "messages left in the queues")
			require.Zero(t, rep.DuplicateEvents, "client calls that took effect twice")
			require.Zero(t, rep.LostEvents, "client events never recorded")
			require.Zero(t, rep.DuplicateCompletions+rep.MissingCompletions, "scheduled work without exactly one completion")
			require.Zero(t, rep.EventIDViolations+rep.ShapeViolations, "malformed histories")
			require.Zero(t, rep.PhantomActivities, "activities run without a schedule")
			require.Empty(t, rep.Findings)
			require.True(t, res.OK())
		})
	}
}
