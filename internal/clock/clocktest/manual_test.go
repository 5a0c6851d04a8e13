package clocktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestManual: timers fire when Advance passes their deadline (at once for
// none), not before; a stopped timer never fires.
func TestManual(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewManual(start)
	now := c.NewTimer(0)
	soon, later, stopped := c.NewTimer(time.Second), c.NewTimer(time.Minute), c.NewTimer(time.Second)
	require.Equal(t, 3, c.Timers())
	require.Len(t, now.C(), 1, "a timer of zero fires at once")
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "stopped once")

	c.Advance(999 * time.Millisecond)
	require.Empty(t, soon.C())
	c.Advance(time.Millisecond)
	require.Equal(t, start.Add(time.Second), <-soon.C())
	require.Empty(t, later.C())
	require.Empty(t, stopped.C())
	require.Equal(t, start.Add(time.Second), c.Now())
	require.Equal(t, 1, c.Timers())
	require.False(t, soon.Stop(), "a fired timer is not pending")
}
