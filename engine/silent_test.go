package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPeerSilence: the verdicts of the silent-channel check on sequences
// of checks (a ViewRefresh apart) of a peer's report and of what arrived
// from it. The margin is three checks: a report is trusted to count every
// frame that arrived three checks before it.
func TestPeerSilence(t *testing.T) {
	t.Parallel()
	const (
		step   = time.Second
		margin = 3 * step
	)
	type obs struct {
		inc        string
		sent, recv uint64
		want       silenceChange
		judged     bool
	}
	o := func(sent, recv uint64) obs { return obs{inc: "i1", sent: sent, recv: recv} }
	judged := func(sent, recv uint64) obs { return obs{inc: "i1", sent: sent, recv: recv, judged: true} }
	// The first check meets the peer, the next two wait for the margin,
	// the fourth sets the base: checks are judged from the fifth on.
	start := func(sent, recv uint64) []obs {
		return []obs{o(sent, recv), o(sent, recv), o(sent, recv), o(sent, recv)}
	}
	seq := func(parts ...[]obs) []obs {
		var out []obs
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name string
		seq  []obs
	}{
		{"nothing sent", seq(start(0, 0), []obs{judged(0, 0), judged(0, 0)})},
		{"frames arrive before the report counts them", seq(start(0, 0), []obs{
			judged(0, 0),
			o(0, 10),           // arrived: no base until the margin has passed
			o(0, 10), o(5, 10), // reported a heartbeat or two later
			o(10, 10), // the margin since the arrival has passed: the base
			judged(10, 10), judged(10, 10),
		})},
		{"silent, then frames arrive", seq(start(0, 0), []obs{
			judged(3, 0), // reported now: judged at the next check
			{inc: "i1", sent: 5, want: silenceFound, judged: true},
			judged(8, 0), // once per state change
			{inc: "i1", sent: 9, recv: 1, want: silenceEnded},
			o(12, 4),
		})},
		{"fewer than silentMinSends", seq(start(0, 0), []obs{judged(0, 0), judged(2, 0), judged(2, 0), judged(2, 0)})},
		{"frames in flight at the check that reports them arrive by the next", seq(start(0, 0), []obs{
			judged(0, 0), judged(4, 0),
			o(4, 4), // arrived: no verdict (without it, silent)
		})},
		{"a new incarnation starts over", seq(start(50, 0), []obs{
			judged(50, 0),
			{inc: "i2", sent: 2},  // restarted: no verdict, no base
			{inc: "i2", sent: 10}, // the base (the margin has long passed)
			{inc: "i2", sent: 10, judged: true},
			{inc: "i2", sent: 13, judged: true},
			{inc: "i2", sent: 13, want: silenceFound, judged: true},
		})},
		{"a count that falls starts over", seq(start(50, 0), []obs{
			judged(50, 0), o(1, 0), o(1, 0), judged(1, 0), judged(1, 0),
		})},
		{"a receiver count that falls is no arrival", seq(start(0, 5), []obs{
			judged(0, 5), judged(3, 0),
			{inc: "i1", sent: 3, want: silenceFound, judged: true},
		})},
		{"silent from the first check", []obs{
			o(100, 0), o(200, 0), o(300, 0), o(400, 0), // the base: 400
			judged(500, 0),
			{inc: "i1", sent: 600, want: silenceFound, judged: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p peerSilence
			at := time.Unix(1000, 0)
			for i, o := range tt.seq {
				ch, judged := p.observe(at, o.inc, o.sent, o.recv, margin)
				require.Equal(t, o.want, ch, "check %d", i)
				require.Equal(t, o.judged, judged, "check %d judged", i)
				at = at.Add(step)
			}
		})
	}
}
