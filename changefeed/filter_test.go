package changefeed_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/stretchr/testify/require"
)

// TestFilterAndCheckpointInterval: filtered documents never reach the
// handler and a page of only filtered documents is not checkpointed; with
// a CheckpointInterval, a burst of batches costs one checkpoint, and the
// pending one is written by a later cycle.
func TestFilterAndCheckpointInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	p0 := pkRange(e.physical(t)[0])
	store := newMemStore()
	rec := newRecorder()
	keep := func(raw json.RawMessage) bool {
		var d struct {
			ID string `json:"id"`
		}
		return json.Unmarshal(raw, &d) == nil && !strings.HasPrefix(d.ID, "skip")
	}
	p, err := changefeed.New(e.c, newMemSource(store.lease("p0", p0)), rec.handle, changefeed.Options{
		ActiveDelay: time.Millisecond, IdleCeiling: 20 * time.Millisecond, Filter: keep,
		CheckpointInterval: 300 * time.Millisecond, StartFrom: changefeed.StartFromNow()})
	require.NoError(t, err)
	run(t, p)
	require.Eventually(t, func() bool { return len(store.checkpoints("p0")) == 1 }, 5*time.Second, 5*time.Millisecond, "now is pinned")
	ctx := context.Background()
	keys := keysIn(t, "skip", p0, 3)
	for i, k := range keys {
		require.NoError(t, e.write(ctx, k, i))
	}
	time.Sleep(200 * time.Millisecond)
	require.Zero(t, rec.batchCount(), "filtered documents are not handed over")
	require.Len(t, store.checkpoints("p0"), 1, "nor checkpointed")

	kept := keysIn(t, "kept", p0, 5)
	start := time.Now()
	for i, k := range kept {
		require.NoError(t, e.write(ctx, k, i))
		time.Sleep(10 * time.Millisecond)
	}
	rec.waitUntil(t, "every kept document", func() bool { return len(rec.seen) == len(kept) })
	// At most one checkpoint per interval, whatever the machine's load
	// stretched the writes to (without the interval each of the five
	// batches would checkpoint): the pinned one, one per started interval,
	// and one at the start.
	allowed := 2 + int(time.Since(start)/(300*time.Millisecond))
	require.LessOrEqual(t, len(store.checkpoints("p0")), allowed, "batches within the interval share a checkpoint")
	last := store.get("p0")
	require.Eventually(t, func() bool { return store.get("p0") != last || len(store.checkpoints("p0")) >= 2 }, 5*time.Second, 5*time.Millisecond,
		"the pending checkpoint is written after the interval")
	require.Eventually(t, func() bool {
		cps := store.checkpoints("p0")
		return len(cps) >= 2 && cps[len(cps)-1] == store.get("p0")
	}, 5*time.Second, 5*time.Millisecond)
}

// TestStopFlushesPendingCheckpoint: a batch acknowledged within the
// CheckpointInterval is left pending; stopping the processor (lease still
// held) records it, so the next owner does not read it again.
func TestStopFlushesPendingCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	p0 := pkRange(e.physical(t)[0])
	store := newMemStore()
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(store.lease("p0", p0)), rec.handle, changefeed.Options{
		ActiveDelay: time.Millisecond, IdleCeiling: 20 * time.Millisecond,
		CheckpointInterval: time.Hour, StartFrom: changefeed.StartFromNow()})
	require.NoError(t, err)
	stop := run(t, p)
	require.Eventually(t, func() bool { return len(store.checkpoints("p0")) == 1 }, 5*time.Second, 5*time.Millisecond, "now is pinned")
	keys := keysIn(t, "k", p0, 2)
	require.NoError(t, e.write(context.Background(), keys[0], 0))
	rec.waitUntil(t, "the first document", func() bool { return len(rec.seen) == 1 })
	require.Eventually(t, func() bool { return len(store.checkpoints("p0")) == 2 }, 5*time.Second, 5*time.Millisecond,
		"the first batch since the pin is checkpointed at once")
	require.NoError(t, e.write(context.Background(), keys[1], 0))
	rec.waitUntil(t, "the second document", func() bool { return len(rec.seen) == 2 })
	require.Len(t, store.checkpoints("p0"), 2, "the next batch's checkpoint waits for the interval")
	stop()
	require.Len(t, store.checkpoints("p0"), 3, "stopping records it")

	// A new processor on the same lease starts after the document.
	rec2 := newRecorder()
	p2, err := changefeed.New(e.c, newMemSource(store.lease("p0", p0)), rec2.handle, changefeed.Options{
		ActiveDelay: time.Millisecond, IdleCeiling: 20 * time.Millisecond})
	require.NoError(t, err)
	run(t, p2)
	require.NoError(t, e.write(context.Background(), keys[0], 1))
	rec2.waitUntil(t, "a later write", func() bool { return len(rec2.all) >= 1 })
	require.Len(t, rec2.snapshot(), 1, "the acknowledged writes are not delivered again")
}
