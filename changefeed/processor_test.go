package changefeed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// mixedLeases covers the EPK space with leases of every shape over 4
// physical partitions P0..P3: half of P0, a lease spanning the P0/P1
// boundary, half of P1, and one spanning P2 and P3 whole.
func mixedLeases(s *memStore) []*memLease {
	r8 := epk.SplitEven(8)
	return []*memLease{
		s.lease("half-p0", r8[0]),
		s.lease("p0-p1", epk.Range{Min: r8[1].Min, Max: r8[2].Max}),
		s.lease("half-p1", r8[3]),
		s.lease("p2-p3", epk.Range{Min: r8[4].Min, Max: r8[7].Max}),
	}
}

func asLeases(ls []*memLease) []changefeed.Lease {
	out := make([]changefeed.Lease, len(ls))
	for i, l := range ls {
		out[i] = l
	}
	return out
}

func TestDeliversEveryChangeInOrderPerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	leases := mixedLeases(store)
	rec := newRecorder()
	p, err := changefeed.New(e.c, newMemSource(asLeases(leases)...), rec.handle, changefeed.Options{MaxItemCount: 20})
	require.NoError(t, err)

	keys := keysIn(t, "k", changefeed.FullRange, 64)
	const before, total = 5, 30
	e.writeAll(t, keys, 0, before) // some history before the processor starts
	run(t, p)
	e.writeAll(t, keys, before, total) // heavy concurrent writes while it runs
	rec.waitAll(t, keys, total)

	ds := rec.snapshot()
	requireExactlyInOrder(t, ds, keys, total)
	// Each document went to the one lease whose range holds its key, even
	// where a lease covers only part of a physical partition.
	owner := map[string]*memLease{}
	for _, k := range keys {
		for _, l := range leases {
			if l.rng.Contains(keyEPK(t, k)) {
				owner[k] = l
			}
		}
	}
	for _, d := range ds {
		require.Equal(t, owner[d.PK].id, d.lease, "key %s", d.PK)
	}
	// Batches carry the sub-range they came from, inside the lease.
	rec.mu.Lock()
	for _, b := range rec.batches {
		var l *memLease
		for _, x := range leases {
			if x.id == b.LeaseID {
				l = x
			}
		}
		require.LessOrEqual(t, epk.Compare(l.rng.Min, b.Range.Min), 0)
		require.GreaterOrEqual(t, epk.Compare(l.rng.Max, b.Range.Max), 0)
		require.LessOrEqual(t, len(b.Documents), 20)
	}
	rec.mu.Unlock()
	// The last checkpoint of every lease is the continuation of its last
	// batch.
	for _, l := range leases {
		require.NotEmpty(t, store.get(l.id), l.id)
	}
	st := p.Stats()
	require.Equal(t, 4, st.Readers)
	require.Equal(t, int64(len(keys)*total), st.Documents)
	require.Zero(t, st.HandlerErrors)
	require.Equal(t, st.Batches, st.Checkpoints)
}

func TestFailingHandlerBatchIsRedeliveredAndNothingSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	leases := mixedLeases(store)
	rec := newRecorder()

	// Fail about a third of the calls; record every attempt per lease.
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	type attempt struct {
		b  changefeed.Batch
		ok bool
	}
	attempts := map[string][]attempt{}
	var failures atomic.Int64
	rec.fail = func(b changefeed.Batch) error {
		mu.Lock()
		defer mu.Unlock()
		fail := rng.IntN(3) == 0
		attempts[b.LeaseID] = append(attempts[b.LeaseID], attempt{b: b, ok: !fail})
		if fail {
			failures.Add(1)
			return errors.New("injected handler failure")
		}
		return nil
	}
	p, err := changefeed.New(e.c, newMemSource(asLeases(leases)...), rec.handle, changefeed.Options{
		MaxItemCount: 7, RetryInitial: 1e6, RetryMax: 5e6,
	})
	require.NoError(t, err)
	keys := keysIn(t, "f", changefeed.FullRange, 32)
	const total = 20
	run(t, p)
	e.writeAll(t, keys, 0, total)
	rec.waitAll(t, keys, total)

	require.Positive(t, failures.Load())
	requireExactlyInOrder(t, rec.snapshot(), keys, total)
	mu.Lock()
	defer mu.Unlock()
	for _, l := range leases {
		as := attempts[l.id]
		var okConts []string
		for i, a := range as {
			if !a.ok {
				// A failed batch is offered again, unchanged.
				require.Less(t, i+1, len(as), "lease %s: failed batch never retried", l.id)
				require.Equal(t, a.b.Continuation, as[i+1].b.Continuation)
				require.Equal(t, a.b.Documents, as[i+1].b.Documents)
				continue
			}
			okConts = append(okConts, a.b.Continuation)
		}
		// Checkpoints are exactly the successful batches' continuations,
		// in order: never one of a failed batch, never ahead of one.
		require.Equal(t, okConts, store.checkpoints(l.id), "lease %s", l.id)
	}
	require.Equal(t, failures.Load(), p.Stats().HandlerErrors)
}

// TestLeaseLostMidStreamHandsOffWithoutGap loses a lease while writes and
// handling continue, then gives it to a second processor, which resumes
// from the checkpoint: everything is delivered, and only what came after
// the last checkpoint is delivered twice.
func TestLeaseLostMidStreamHandsOffWithoutGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	first := store.lease("all", changefeed.FullRange)
	rec1 := newRecorder()
	logs, logger := newLogWatch()
	p1, err := changefeed.New(e.c, newMemSource(first), rec1.handle, changefeed.Options{MaxItemCount: 5, Logger: logger})
	require.NoError(t, err)
	run(t, p1)

	keys := keysIn(t, "h", changefeed.FullRange, 16)
	const total = 40
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		e.writeAll(t, keys, 0, total)
	}()
	rec1.waitUntil(t, "some batches", func() bool { return len(rec1.batches) >= 5 })
	first.lose()
	logs.wait(t, readerStopped, 1)

	// What the first owner checkpointed: the batches up to the last one
	// whose continuation the store holds.
	cp := store.get("all")
	require.NotEmpty(t, cp)
	checkpointed := map[string]bool{}
	rec1.mu.Lock()
	last := -1
	for i, b := range rec1.batches {
		if b.Continuation == cp {
			last = i
		}
	}
	require.GreaterOrEqual(t, last, 0)
	for _, d := range rec1.all {
		if d.batch <= last {
			checkpointed[d.ID] = true
		}
	}
	rec1.mu.Unlock()

	second := store.lease("all", changefeed.FullRange)
	rec2 := newRecorder()
	p2, err := changefeed.New(e.c, newMemSource(second), rec2.handle, changefeed.Options{MaxItemCount: 5})
	require.NoError(t, err)
	run(t, p2)
	<-writes

	// Everything not checkpointed by the first owner reaches the second.
	rec2.waitUntil(t, "the rest", func() bool {
		for _, k := range keys {
			for s := range total {
				id := fmt.Sprintf("%s-%05d", k, s)
				if !checkpointed[id] && rec2.seen[id] == 0 {
					return false
				}
			}
		}
		return true
	})
	for _, d := range rec2.snapshot() {
		require.Falsef(t, checkpointed[d.ID], "%s was checkpointed by the first owner yet redelivered", d.ID)
	}
	requireOrderedNoGap(t, append(rec1.snapshot(), rec2.snapshot()...))
	require.Equal(t, int64(1), p1.Stats().LeasesLost)
}

// TestLostLeaseStopsReaderPromptly checks that closing Done cancels the
// handler's context and that nothing is checkpointed afterwards.
func TestLostLeaseStopsReaderPromptly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	l := store.lease("all", changefeed.FullRange)
	entered := make(chan struct{})
	returned := make(chan error, 1)
	logs, logger := newLogWatch()
	p, err := changefeed.New(e.c, newMemSource(l), func(ctx context.Context, b changefeed.Batch) error {
		close(entered)
		<-ctx.Done() // a handler that would never finish on its own
		returned <- ctx.Err()
		return ctx.Err()
	}, changefeed.Options{Logger: logger})
	require.NoError(t, err)
	run(t, p)
	require.NoError(t, e.write(context.Background(), "x", 0))
	<-entered
	l.lose()
	require.ErrorIs(t, <-returned, context.Canceled)
	logs.wait(t, readerStopped, 1)
	require.Zero(t, p.Stats().Readers)
	require.Empty(t, store.checkpoints("all"))
	require.Equal(t, int64(1), p.Stats().LeasesLost)
}

// TestCheckpointLeaseLostStopsReader: a checkpoint failing with ErrLeaseLost
// stops the reader even though Done is still open.
func TestCheckpointLeaseLostStopsReader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	l := store.lease("all", changefeed.FullRange)
	l.checkpointHook = func() error { return fmt.Errorf("stolen: %w", changefeed.ErrLeaseLost) }
	rec := newRecorder()
	logs, logger := newLogWatch()
	p, err := changefeed.New(e.c, newMemSource(l), rec.handle, changefeed.Options{Logger: logger})
	require.NoError(t, err)
	run(t, p)
	require.NoError(t, e.write(context.Background(), "x", 0))
	logs.wait(t, readerStopped, 1)
	require.Zero(t, p.Stats().Readers)
	require.Equal(t, 1, rec.batchCount())
	require.Equal(t, int64(1), p.Stats().LeasesLost)
}
