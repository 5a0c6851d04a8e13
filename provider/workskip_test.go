package provider

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// workSkipFixture is an event-driven replica owning every slot (it runs
// no fetch of its own until the test says so) and a polling provider on
// the same container standing for a worker elsewhere.
type workSkipFixture struct {
	owner, other *Provider
	item         durable.ActivityExecute
}

func newWorkSkipFixture(t *testing.T, name string) *workSkipFixture {
	t.Helper()
	container := freshContainer(name)
	cfg := replicaConfig(container)
	cfg.joinEagerly = true
	f := &workSkipFixture{owner: openProvider(t, cfg), other: openProvider(t, testConfig(container)),
		item: durable.ActivityExecute{Instance: "inst", ExecutionID: 1, ID: 7, Name: "A", Input: "{}"}}
	require.Equal(t, 256, ownedCount(f.owner))
	require.NoError(t, f.owner.EnqueueForWorker(context.Background(), f.item))
	return f
}

// takeElsewhere has the other provider lock the item (for lock).
func (f *workSkipFixture) takeElsewhere(t *testing.T, lock time.Duration) *durable.LockedWorkItem {
	t.Helper()
	var got *durable.LockedWorkItem
	require.Eventually(t, func() bool {
		var err error
		got, err = f.other.FetchWorkItem(context.Background(), lock, 100*time.Millisecond, nil, durable.DefaultOnlyTags())
		require.NoError(t, err)
		return got != nil
	}, hang, time.Millisecond)
	return got
}

// ownerSawLock waits until the owner's feed showed a lock of the item
// expiring after at least min from now: the owner then holds a wakeup for
// the lock's expiry.
func (f *workSkipFixture) ownerSawLock(t *testing.T, min time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, work := f.owner.ev().Pending()
		horizon := time.Now().Add(min)
		for _, w := range work.Pending {
			if w.VisibleAt.After(horizon) {
				return true
			}
			for _, l := range w.Later {
				if l.After(horizon) {
					return true
				}
			}
		}
		return false
	}, hang, time.Millisecond)
}

// TestOwnerDropsWakeupOfItemAckedElsewhere: an item of an owned slot that
// another worker took and acked costs its owner no read: the completion
// on the feed names the item, and the owner's fetch drops the wakeup it
// held for it.
func TestOwnerDropsWakeupOfItemAckedElsewhere(t *testing.T) {
	t.Parallel()
	f := newWorkSkipFixture(t, "skip-acked")
	ctx := context.Background()
	got := f.takeElsewhere(t, time.Minute)
	require.NoError(t, f.other.AckWorkItem(ctx, got.LockToken, durable.ActivityCompleted{Instance: "inst", ExecutionID: 1, ID: 7, Result: "1"}))
	require.Eventually(t, func() bool { return f.owner.ev().Stats().WorkSettled >= 1 }, hang, time.Millisecond,
		"the owner's feed shows the completion naming the item")
	item, err := f.owner.FetchWorkItem(ctx, time.Minute, 200*time.Millisecond, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.Nil(t, item)
	require.EqualValues(t, 1, f.owner.ev().Stats().WorkSkipped, "the wakeup was dropped unread")
	require.Zero(t, f.owner.ev().Stats().WorkFetched)
}

// TestOwnerTakesItemAbandonedElsewhere: while the feed shows an item
// locked elsewhere the owner drops its wakeups from before the lock's
// expiry; once the holder abandons it, the owner takes it at once, not
// when the (hour-long) lock would have expired.
func TestOwnerTakesItemAbandonedElsewhere(t *testing.T) {
	t.Parallel()
	f := newWorkSkipFixture(t, "skip-abandoned")
	ctx := context.Background()
	got := f.takeElsewhere(t, time.Hour)
	f.ownerSawLock(t, 30*time.Minute)
	item, err := f.owner.FetchWorkItem(ctx, time.Minute, 100*time.Millisecond, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.Nil(t, item, "locked elsewhere")
	require.NoError(t, f.other.AbandonWorkItem(ctx, got.LockToken, 0, false))
	item, err = f.owner.FetchWorkItem(ctx, time.Minute, time.Minute, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.NotNil(t, item, "the abandoned item is taken before the long poll ends")
	require.Equal(t, durable.WorkItem(f.item), item.Item)
	require.EqualValues(t, 2, item.AttemptCount)
}
