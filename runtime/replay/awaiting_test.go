package replay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAwaitingHint: a turn that ends blocked names the outstanding
// activities the orchestration needs every one of (a Join's, or the one
// an Await waits for), and nothing when any one would do (a Select) or
// when it also waits for something other than an activity.
func TestAwaitingHint(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fn    OrchestratorFunc
		want  []uint64 // after the first turn (activities get ids 2, 3, …)
		later []uint64 // after the completion of activity 2
	}{
		{"join of three", func(ctx *Context, _ string) (string, error) {
			a, b, c := ctx.CallActivityRaw("A", ""), ctx.CallActivityRaw("B", ""), ctx.CallActivityRaw("C", "")
			return "", ctx.Join(a, b, c)
		}, []uint64{2, 3, 4}, []uint64{3, 4}},
		{"await one of two scheduled", func(ctx *Context, _ string) (string, error) {
			a, b := ctx.CallActivityRaw("A", ""), ctx.CallActivityRaw("B", "")
			if _, err := a.AwaitRaw(); err != nil {
				return "", err
			}
			_, err := b.AwaitRaw()
			return "", err
		}, []uint64{2}, []uint64{3}},
		{"select of two", func(ctx *Context, _ string) (string, error) {
			_, err := ctx.Select(ctx.CallActivityRaw("A", ""), ctx.CallActivityRaw("B", ""))
			return "", err
		}, nil, nil},
		{"join with a timer", func(ctx *Context, _ string) (string, error) {
			return "", ctx.Join(ctx.CallActivityRaw("A", ""), ctx.CreateTimer(time.Hour))
		}, nil, nil},
		{"event wait beside an activity", func(ctx *Context, _ string) (string, error) {
			a := ctx.CallActivityRaw("A", "")
			if _, err := ctx.WaitForEvent("go").AwaitRaw(); err != nil {
				return "", err
			}
			_, err := a.AwaitRaw()
			return "", err
		}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, one("O", tc.fn))
			r := s.turn(start(""))
			require.Equal(t, OutcomeContinue, r.Outcome)
			require.Equal(t, tc.want, r.Turn.AwaitingActivities)
			r = s.turn(actDone(s, 2, `""`))
			if r.Outcome == OutcomeContinue {
				require.Equal(t, tc.later, r.Turn.AwaitingActivities)
			}
		})
	}
}

// TestAwaitingHintOnlyWhileBlocked: a turn that completes the
// orchestration carries no hint.
func TestAwaitingHintOnlyWhileBlocked(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	require.Equal(t, []uint64{2}, s.turn(start("bob")).Turn.AwaitingActivities)
	r := s.turn(actDone(s, 2, `"hi"`))
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Empty(t, r.Turn.AwaitingActivities)
}
