package changefeed_test

import (
	"context"
	"testing"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/stretchr/testify/require"
)

// TestLag follows one reader on one physical partition: while its handler
// holds the first page, Lag counts every write since that page's first
// change (passively from the reader's own answer); once the figures are
// stale it probes the feed and sees later writes; once everything is
// acknowledged it reports nothing pending.
func TestLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	clk := newFakeClock()
	p0 := pkRange(e.physical(t)[0])
	key := keysIn(t, "lag", p0, 1)[0]
	for s := range 10 {
		require.NoError(t, e.write(context.Background(), key, s))
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("p0", p0)), func(ctx context.Context, b changefeed.Batch) error {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return rec.handle(ctx, b)
	}, changefeed.Options{Clock: clk, MaxItemCount: 4, Jitter: -1})
	require.NoError(t, err)
	run(t, p)
	<-entered

	ctx := context.Background()
	lag, err := p.Lag(ctx)
	require.NoError(t, err)
	require.Len(t, lag, 1)
	l := lag[0]
	require.Equal(t, "p0", l.LeaseID)
	require.Equal(t, p0, l.Range)
	require.False(t, l.Probed)
	require.Equal(t, int64(10), l.PendingLSNs, "ten writes since the first unacknowledged change")
	require.Equal(t, int64(-1), l.ProcessedLSN, "never acknowledged anything")
	require.False(t, l.OldestPending.IsZero())

	for s := 10; s < 15; s++ {
		require.NoError(t, e.write(ctx, key, s))
	}
	lag, err = p.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(10), lag[0].PendingLSNs, "fresh passive figures do not cost a request")
	clk.advance(3 * changefeed.DefaultIdleCeiling)
	lag, err = p.Lag(ctx)
	require.NoError(t, err)
	require.True(t, lag[0].Probed, "stale figures are refreshed by a probe")
	require.Equal(t, int64(15), lag[0].PendingLSNs)

	close(release)
	rec.waitUntil(t, "everything", func() bool { return len(rec.all) == 15 })
	// The last page was not full: the reader pauses ActiveDelay, then
	// finds nothing new.
	tm := clk.next(t)
	require.Equal(t, changefeed.DefaultActiveDelay, tm.d)
	require.True(t, tm.fire())
	clk.next(t)
	lag, err = p.Lag(ctx)
	require.NoError(t, err)
	l = lag[0]
	require.False(t, l.Probed)
	require.Zero(t, l.PendingLSNs)
	require.Equal(t, l.LatestLSN, l.ProcessedLSN)
	require.True(t, l.OldestPending.IsZero())
	require.Equal(t, clk.Now(), l.ObservedAt)
}
