package engine

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOptionsDefaults: the feed budget, the warm hold it replaces and the
// lease watch's ceiling tied to the lease expiry.
func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        Options
		budget    float64
		perChange float64
		hold      time.Duration
		watchIdle time.Duration
	}{
		{name: "defaults", budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 2 * time.Second},
		{name: "peer wake: no reads per change", in: Options{PeerWake: &PeerWakeOptions{}},
			budget: DefaultFeedEmptyReadBudget, hold: -1, watchIdle: 2 * time.Second},
		{name: "no reads per change", in: Options{Feed: &FeedOptions{ReadsPerChange: -1}},
			budget: DefaultFeedEmptyReadBudget, hold: -1, watchIdle: 2 * time.Second},
		{name: "longer expiry", in: Options{Leases: &LeaseOptions{Expiry: 30 * time.Second}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 6 * time.Second},
		{name: "explicit watch ceiling", in: Options{Leases: &LeaseOptions{WatchIdleCeiling: 300 * time.Millisecond}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 300 * time.Millisecond},
		{name: "no budget: back-off with warm hold", in: Options{Feed: &FeedOptions{EmptyReadBudget: -1}},
			budget: -1, perChange: DefaultFeedReadsPerChange, hold: DefaultFeedWarmHold, watchIdle: 2 * time.Second},
		{name: "no budget, peer wake: no hold", in: Options{Feed: &FeedOptions{EmptyReadBudget: -1}, PeerWake: &PeerWakeOptions{}},
			budget: -1, hold: -1, watchIdle: 2 * time.Second},
		{name: "explicit hold kept", in: Options{Feed: &FeedOptions{EmptyReadBudget: 4, ReadsPerChange: 3, WarmHold: 500 * time.Millisecond}},
			budget: 4, perChange: 3, hold: 500 * time.Millisecond, watchIdle: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.WithDefaults()
			require.NoError(t, err)
			require.Equal(t, tt.budget, got.Feed.EmptyReadBudget)
			require.Equal(t, tt.perChange, got.Feed.ReadsPerChange)
			require.Equal(t, tt.hold, got.Feed.WarmHold)
			require.Equal(t, tt.watchIdle, got.Leases.WatchIdleCeiling)
		})
	}
}

func TestOptionsRejectBadBudget(t *testing.T) {
	t.Parallel()
	for _, b := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := Options{Feed: &FeedOptions{EmptyReadBudget: b}}.WithDefaults()
		require.ErrorContains(t, err, "EmptyReadBudget")
		_, err = Options{Feed: &FeedOptions{ReadsPerChange: b}}.WithDefaults()
		require.ErrorContains(t, err, "ReadsPerChange")
	}
}
