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
		maxIdle   time.Duration
	}{
		{name: "defaults", budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 2 * time.Second,
			maxIdle: DefaultFeedMaxIdlePeriod},
		{name: "peer wake: the feed's defaults kept", in: Options{PeerWake: &PeerWakeOptions{}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 2 * time.Second,
			maxIdle: DefaultFeedMaxIdlePeriod}, // a wake lost on the channel waits for no more than without it
		{name: "no idle bound", in: Options{Feed: &FeedOptions{MaxIdlePeriod: -1}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 2 * time.Second},
		{name: "explicit idle bound", in: Options{Feed: &FeedOptions{MaxIdlePeriod: 2 * time.Second}, PeerWake: &PeerWakeOptions{}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 2 * time.Second, maxIdle: 2 * time.Second},
		{name: "no reads per change", in: Options{Feed: &FeedOptions{ReadsPerChange: -1}},
			budget: DefaultFeedEmptyReadBudget, hold: -1, watchIdle: 2 * time.Second, maxIdle: DefaultFeedMaxIdlePeriod},
		{name: "longer expiry", in: Options{Leases: &LeaseOptions{Expiry: 30 * time.Second}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 6 * time.Second, maxIdle: DefaultFeedMaxIdlePeriod},
		{name: "explicit watch ceiling", in: Options{Leases: &LeaseOptions{WatchIdleCeiling: 300 * time.Millisecond}},
			budget: DefaultFeedEmptyReadBudget, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 300 * time.Millisecond, maxIdle: DefaultFeedMaxIdlePeriod},
		{name: "no budget: back-off with warm hold", in: Options{Feed: &FeedOptions{EmptyReadBudget: -1}},
			budget: -1, perChange: DefaultFeedReadsPerChange, hold: DefaultFeedWarmHold, watchIdle: 2 * time.Second, maxIdle: DefaultFeedMaxIdlePeriod},
		{name: "no budget, peer wake: no hold", in: Options{Feed: &FeedOptions{EmptyReadBudget: -1}, PeerWake: &PeerWakeOptions{}},
			budget: -1, perChange: DefaultFeedReadsPerChange, hold: -1, watchIdle: 2 * time.Second, maxIdle: DefaultFeedMaxIdlePeriod},
		{name: "explicit hold kept", in: Options{Feed: &FeedOptions{EmptyReadBudget: 4, ReadsPerChange: 3, WarmHold: 500 * time.Millisecond}},
			budget: 4, perChange: 3, hold: 500 * time.Millisecond, watchIdle: 2 * time.Second, maxIdle: DefaultFeedMaxIdlePeriod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.in.WithDefaults()
			require.NoError(t, err)
			require.Equal(t, tt.budget, got.Feed.EmptyReadBudget)
			require.Equal(t, tt.perChange, got.Feed.ReadsPerChange)
			require.Equal(t, tt.hold, got.Feed.WarmHold)
			require.Equal(t, tt.watchIdle, got.Leases.WatchIdleCeiling)
			require.Equal(t, tt.maxIdle, got.Feed.MaxIdlePeriod)
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

// TestPeerWakeEndpointChecked: an endpoint no peer could dial is refused
// when the engine is made, with the setting to change named.
func TestPeerWakeEndpointChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen, advertise string
		err               string // "" for accepted
	}{
		{"", "", ""},                                    // default: loopback, one machine
		{"127.0.0.1:0", "", ""},                         // one machine
		{"[::1]:7070", "", ""},                          // one machine, IPv6
		{"localhost:7070", "", ""},                      // one machine, by name
		{"10.0.0.5:7070", "", ""},                       // a pod's own address
		{":7070", "10.0.0.5:7070", ""},                  // wildcard listener, a dialable endpoint
		{":7070", "replica-1.internal:7070", ""},        // a hostname is taken as given
		{":7070", "", "wildcard"},                       // publishes [::]:7070
		{"0.0.0.0:7070", "", "wildcard"},                // publishes 0.0.0.0:7070
		{"[::]:7070", "", "wildcard"},                   // publishes [::]:7070
		{":7070", "0.0.0.0:7070", "wildcard"},           // a wildcard advertised
		{":7070", "127.0.0.1:7070", "loopback"},         // peers elsewhere cannot dial it
		{"10.0.0.5:7070", "localhost:7070", "loopback"}, // likewise
		{"nonsense", "", "not host:port"},
		{":7070", "nonsense", "not host:port"},
	} {
		_, err := Options{PeerWake: &PeerWakeOptions{Listen: tc.listen, Advertise: tc.advertise}}.WithDefaults()
		if tc.err == "" {
			require.NoError(t, err, "listen %q advertise %q", tc.listen, tc.advertise)
			continue
		}
		require.ErrorContains(t, err, tc.err, "listen %q advertise %q", tc.listen, tc.advertise)
		require.ErrorContains(t, err, "PeerWake.", "names the setting")
	}
}
