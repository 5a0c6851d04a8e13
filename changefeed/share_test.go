package changefeed_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// quarterLeases returns leases q0..q3 on the quarters of the first
// physical partition, and n keys in each (named after prefix), lease by
// lease.
func quarterLeases(t *testing.T, e *env, store *memStore, prefix string, n int) ([]changefeed.Lease, []string, []epk.Range) {
	t.Helper()
	p0 := pkRange(e.physical(t)[0])
	subs := epk.SplitEven(16)[:4] // the emulator's partitions are the even split in four
	require.Equal(t, p0.Min, subs[0].Min)
	require.Equal(t, p0.Max, subs[3].Max)
	var leases []changefeed.Lease
	var keys []string
	for i, r := range subs {
		leases = append(leases, store.lease(fmt.Sprint("q", i), r))
		keys = append(keys, keysIn(t, fmt.Sprint(prefix, i, "-"), r, n)...)
	}
	return leases, keys, subs
}

// TestLeasesOfOnePartitionShareReads: four leases of one processor on the
// quarters of one physical partition. Every round writes one document and
// wakes the readers, which must all look (the write may be in any
// range). Reading separately, each of them reads; sharing, one reads the
// whole span and the others take their changes from its page. Either way
// every document reaches the lease that holds it, once, in order.
func TestLeasesOfOnePartitionShareReads(t *testing.T) {
	t.Parallel()
	const rounds = 20
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate=%v", separate), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{})
			store := newMemStore()
			leases, keys, subs := quarterLeases(t, e, store, "k", 1)
			rec := newRecorder()
			p, err := changefeed.New(e.c, newMemSource(leases...), rec.handle, changefeed.Options{
				// Reads happen only when woken.
				ActiveDelay: time.Hour, IdleCeiling: time.Hour, BackoffFactor: 1, Jitter: -1,
				SeparateReads: separate, StartFrom: changefeed.StartFromNow()})
			require.NoError(t, err)
			run(t, p)
			require.Eventually(t, func() bool { return p.Stats().Checkpoints >= 4 }, liveness, time.Millisecond,
				"every reader pins its start")

			ctx := context.Background()
			span := epk.Range{Min: subs[0].Min, Max: subs[3].Max}
			s0 := p.Stats()
			for i := range rounds {
				require.NoError(t, e.write(ctx, keys[i%4], i))
				p.Wake(span)
				rec.waitUntil(t, fmt.Sprint("round ", i), func() bool { return len(rec.all) == i+1 })
				// The reader that delivered checkpoints, then moves on;
				// the next round starts once it has.
				require.Eventually(t, func() bool { return p.Stats().Checkpoints >= s0.Checkpoints+int64(i)+1 }, liveness, time.Millisecond)
			}
			s1 := p.Stats()
			reads := s1.Reads - s0.Reads
			t.Logf("%d rounds: %d reads, %d shared pages, %d skipped", rounds, reads, s1.SharedPages-s0.SharedPages, s1.SkippedReads-s0.SkippedReads)
			if separate {
				require.GreaterOrEqual(t, reads, int64(3*rounds), "each woken reader reads")
				require.Zero(t, s1.SharedPages)
			} else {
				// One read a round when the machine keeps up; a reader
				// that had not recorded its position when the next round
				// began reads alone, which a loaded machine makes common.
				// Shared reads must stay well below separate reads' three
				// or more a round, whatever the load.
				require.LessOrEqual(t, reads, int64(2*rounds))
				require.GreaterOrEqual(t, s1.SharedPages-s0.SharedPages, int64(rounds))
			}
			for _, d := range rec.snapshot() {
				require.Equal(t, fmt.Sprint("q", d.Seq%4), d.lease, "document %s went to the lease holding its key", d.ID)
			}
			for i, k := range keys {
				var mine []delivery
				for _, d := range rec.snapshot() {
					if d.PK == k {
						mine = append(mine, d)
					}
				}
				require.Len(t, mine, rounds/4, "key %s", k)
				for j, d := range mine {
					require.Equal(t, 4*j+i, d.Seq, "key %s in order", k)
				}
			}
		})
	}
}

// TestSharedReadsWithALaggingLease: documents flow into all four quarter
// leases at once while one lease's handler fails its first batches, so its
// position falls behind the others'. A lagging reader widens its reads
// over the others (who take only what is past their own positions) and
// is never widened over; every document still arrives exactly once, in
// order, at its own lease.
func TestSharedReadsWithALaggingLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	leases, keys, subs := quarterLeases(t, e, store, "lag", 2)
	rec := newRecorder()
	var failures atomic.Int64
	rec.fail = func(b changefeed.Batch) error {
		if b.LeaseID == "q1" && failures.Add(1) <= 5 {
			return errors.New("not yet")
		}
		return nil
	}
	p, err := changefeed.New(e.c, newMemSource(leases...), rec.handle, changefeed.Options{
		ActiveDelay: 5 * time.Millisecond, WarmHold: time.Hour, RetryInitial: 20 * time.Millisecond, MaxItemCount: 7})
	require.NoError(t, err)
	run(t, p)
	const n = 40
	e.writeAll(t, keys, 0, n)
	rec.waitAll(t, keys, n)
	ds := rec.snapshot()
	requireExactlyInOrder(t, ds, keys, n)
	for _, d := range ds {
		require.True(t, leaseRange(t, subs, d.lease).Contains(keyEPK(t, d.PK)), "document %s delivered to %s", d.ID, d.lease)
	}
	s := p.Stats()
	// Whether a page is shared here depends on the readers' timing (on a
	// loaded machine each may read before another's page is published:
	// a CI run saw none in 95 reads), so it is logged, not asserted; the
	// round-by-round test above asserts the sharing itself. What this
	// test asserts holds whatever the timing: every document once, in
	// order, at its own lease, past the lagging lease's failures.
	t.Logf("%+v", s)
	require.GreaterOrEqual(t, s.HandlerErrors, int64(5))
}

// TestSharedReadsAcrossAHandOff: a lease is lost while documents flow and
// comes back (a new lease object from its last checkpoint) while its
// siblings keep reading; it resumes from its checkpoint without a gap.
func TestSharedReadsAcrossAHandOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	store := newMemStore()
	leases, keys, subs := quarterLeases(t, e, store, "ho", 2)
	rec := newRecorder()
	src := newMemSource(leases...)
	p, err := changefeed.New(e.c, src, rec.handle, changefeed.Options{ActiveDelay: 5 * time.Millisecond, WarmHold: time.Hour})
	require.NoError(t, err)
	run(t, p)
	e.writeAll(t, keys, 0, 20)
	rec.waitAll(t, keys, 20)
	leases[2].(*memLease).lose()
	e.writeAll(t, keys, 20, 40)
	src.ch <- store.lease("q2", subs[2])
	e.writeAll(t, keys, 40, 60)
	rec.waitAll(t, keys, 60)
	ds := rec.snapshot()
	requireOrderedNoGap(t, ds)
	for _, d := range ds {
		require.True(t, leaseRange(t, subs, d.lease).Contains(keyEPK(t, d.PK)), "document %s delivered to %s", d.ID, d.lease)
	}
}

// leaseRange is the range of quarter lease id ("q0".."q3").
func leaseRange(t *testing.T, subs []epk.Range, id string) epk.Range {
	t.Helper()
	var i int
	_, err := fmt.Sscanf(id, "q%d", &i)
	require.NoError(t, err)
	return subs[i]
}
