package polling

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// TestReconcilerStartsAtFirstFetch: a dispatcher that never fetches (a
// client's) runs no reconciler; the first fetch starts it, Close stops it,
// and no fetch after Close starts it again.
func TestReconcilerStartsAtFirstFetch(t *testing.T) {
	t.Parallel()
	// No store: nothing here may touch one (the reconciler's first pass
	// is an hour away, and a worker fetch accepting no tags returns at
	// once).
	d := New(nil, Options{ReconcileInterval: time.Hour})
	require.False(t, d.Reconciling(), "a client's dispatcher does not scan")

	item, err := d.FetchWorkItem(context.Background(), time.Second, 0, nil, durable.NoTags())
	require.NoError(t, err)
	require.Nil(t, item)
	require.True(t, d.Reconciling(), "the first fetch starts it")

	d.Close(true)
	require.False(t, d.Reconciling())
	_, err = d.FetchWorkItem(context.Background(), time.Second, 0, nil, durable.NoTags())
	require.NoError(t, err)
	require.False(t, d.Reconciling(), "not restarted after Close")
}
