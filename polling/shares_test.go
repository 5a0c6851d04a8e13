package polling

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShares(t *testing.T) {
	l := newLocalShares(3)
	ctx := context.Background()
	a, ra, _ := l.acquire(ctx)
	b, rb, _ := l.acquire(ctx)
	c, rc, _ := l.acquire(ctx)
	require.NotEqual(t, a, b)
	require.NotEqual(t, b, c)
	require.NotEqual(t, a, c)
	d, rd, _ := l.acquire(ctx) // a fourth fetcher shares the least recently polled
	require.Equal(t, a, d)
	ra()
	rb()
	rc()
	rd()
	e, re, _ := l.acquire(ctx) // all free: the least recently polled (b)
	require.Equal(t, b, e)
	re()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err := l.acquire(cctx)
	require.Error(t, err)
}
