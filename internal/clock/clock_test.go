package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/durafeed/durafeed/internal/clock"
	"github.com/stretchr/testify/require"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{"no wait, live context", live, 0, true},
		{"no wait, ended context", ended, 0, false},
		{"negative wait, live context", live, -time.Second, true},
		{"short wait runs its course", live, time.Millisecond, true},
		{"an ended context ends a long wait", ended, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, clock.Sleep(tc.ctx, tc.d))
		})
	}
}
