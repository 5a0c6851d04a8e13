package leasestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/durafeed/durafeed/slots"
)

// generous bounds a wait that only guards against hanging.
const generous = 20 * time.Second

func heldBy(h map[int]string, instance string) []int {
	var out []int
	for i, who := range h {
		if who == instance {
			out = append(out, i)
		}
	}
	return out
}

// firstAcquiredAfter returns the first acquisition of lease i logged after
// seq, by anyone.
func firstAcquiredAfter(entries []entry, seq int64, i int) (entry, bool) {
	for _, e := range entries {
		if e.seq > seq && e.ev.Kind == EventAcquired && e.ev.Lease.Index == i {
			return e, true
		}
	}
	return entry{}, false
}

// lastHeartbeat returns when the last successful heartbeat write of
// replica id arrived at the emulator.
func lastHeartbeat(ws []write, id string) time.Time {
	var last time.Time
	for _, w := range ws {
		if w.doc == ownerID(id) && w.op == cosmosemu.OpReplace && w.status == 200 {
			last = w.at
		}
	}
	return last
}

func TestThreeStoresBalance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, c := e.start("a", relaxed), e.start("b", relaxed), e.start("c", relaxed)
	e.log.waitFor(t, generous, "three-way balance", balanced(16, names(a, b, c)...))
	checkNoOverlap(t, e.log.snapshot())

	// Owned agrees with the log, Members with the heartbeats.
	total := 0
	for _, n := range []*node{a, b, c} {
		owned := n.s.Owned()
		require.GreaterOrEqual(t, len(owned), 5)
		require.LessOrEqual(t, len(owned), 6)
		for _, li := range owned {
			require.Equal(t, n.s.ReplicaID(), li.Owner)
			require.Equal(t, n.s.ReplicaID(), n.s.OwnerOf(li.Index), "OwnerOf agrees with Owned")
			require.Equal(t, leaseID(li.Index), li.ID)
			require.Equal(t, slots.Ranges(16)[li.Index], li.Range)
		}
		total += len(owned)
		require.Eventually(t, func() bool {
			return fmt.Sprint(n.s.Members()) == "[a b c]"
		}, generous, 5*time.Millisecond)
	}
	require.Equal(t, 16, total)
	require.Empty(t, a.s.OwnerOf(-1))
	require.Empty(t, a.s.OwnerOf(16))

	// Every lease document agrees with the log.
	h := holders(e.log.snapshot())
	cl := e.container(nil)
	for i := 0; i < 16; i++ {
		d, _ := readLease(t, cl, i)
		require.Equal(t, strings.Split(h[i], "#")[0], d.Owner, "lease %d", i)
	}
}

func TestStoppedStoreLeasesTakenAfterExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, c := e.start("a", nil), e.start("b", nil), e.start("c", nil)
	e.log.waitFor(t, generous, "three-way balance", balanced(16, names(a, b, c)...))
	before := e.log.snapshot()
	mark := before[len(before)-1].seq
	victims := heldBy(holders(before), c.name)
	require.NotEmpty(t, victims)

	// The check below measures from c's last heartbeat replace: let it
	// write one (balancing can end before its first).
	require.Eventually(t, func() bool { return !lastHeartbeat(e.rec.snapshot(), "c").IsZero() }, generous, time.Millisecond)
	c.stop() // no Release: its documents keep naming it
	stopped := time.Now()
	e.log.waitFor(t, generous, "c's leases moved to a and b", balanced(16, names(a, b)...))

	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	hb := lastHeartbeat(e.rec.snapshot(), "c")
	require.False(t, hb.IsZero())
	var slowest time.Duration
	for _, i := range victims {
		got, ok := firstAcquiredAfter(entries, mark, i)
		require.True(t, ok)
		require.NotEqual(t, c.name, got.instance)
		// Never while c's heartbeat was still changing: a full expiry
		// after its last heartbeat write reached the emulator.
		require.GreaterOrEqual(t, got.at.Sub(hb), testExpiry, "lease %d taken %v after c's last heartbeat", i, got.at.Sub(hb))
		slowest = max(slowest, got.at.Sub(stopped))
	}
	// How soon after the expiry they move is a figure for the benchmark
	// (BenchmarkHandOffAtDefaults), not an assertion: the waitFor above
	// only catches leases that never move.
	t.Logf("leases of a stopped store taken %v after the stop (expiry %v, watch ceiling %v)", slowest, testExpiry, testCeiling)
}

// TestReleaseHandsOffByItsOwnWrites: Release hands its leases to the live
// replicas by its own writes. The documents name the new owners when it
// returns, every lease was closed by c before anyone acquired it, and each
// acquisition came before any peer could have counted c as expired (its
// lease expiry is a minute here, so that no run slow enough to blur the
// two can pass), at the default heartbeat and watch settings. How fast the
// hand-off is is a figure for BenchmarkHandOffAtDefaults, logged here.
func TestReleaseHandsOffByItsOwnWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const expiry = time.Minute
	defaults := func(o *Options) {
		o.LeaseExpiry, o.HeartbeatInterval = expiry, DefaultLeaseExpiry/DefaultHeartbeatDivisor
		o.WatchActiveDelay, o.WatchIdleCeiling = 0, 0
	}
	a, b, c := e.start("a", defaults), e.start("b", defaults), e.start("c", defaults)
	e.log.waitFor(t, 60*time.Second, "three-way balance", balanced(16, names(a, b, c)...))
	// Let the watchers fall back to their idle polling.
	time.Sleep(2 * DefaultWatchIdleCeiling)

	before := e.log.snapshot()
	mark := before[len(before)-1].seq
	moving := heldBy(holders(before), c.name)
	require.NotEmpty(t, moving)
	start := time.Now()
	require.NoError(t, c.s.Release(context.Background()))
	released := time.Since(start)
	// Release's writes moved every lease: none still names c.
	cl := e.container(nil)
	for _, i := range moving {
		d, _ := readLease(t, cl, i)
		require.Contains(t, []string{"a", "b"}, d.Owner, "lease %d after Release returned", i)
	}
	e.log.waitFor(t, generous, "c's leases handed to a and b", balanced(16, names(a, b)...))
	handedOff := time.Since(start)
	require.NoError(t, <-c.done, "Run returns nil after Release")
	c.done <- nil

	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	// c's last heartbeat write (its "leaving" mark, from Release): a peer
	// counts c expired no sooner than a lease expiry after it.
	hb := lastHeartbeat(e.rec.snapshot(), "c")
	require.False(t, hb.IsZero())
	for _, i := range moving {
		got, ok := firstAcquiredAfter(entries, mark, i)
		require.True(t, ok)
		require.Contains(t, []string{a.name, b.name}, got.instance)
		// c closed Done of the lease before anyone acquired it.
		var lost int64 = -1
		for _, en := range entries {
			if en.seq > mark && en.instance == c.name && en.ev.Kind == EventLost && en.ev.Lease.Index == i {
				require.Equal(t, ReasonReleased, en.ev.Reason)
				lost = en.seq
			}
		}
		require.Greater(t, got.seq, lost)
		require.GreaterOrEqual(t, lost, int64(0))
		// Handed off, not taken over from an expired c.
		require.Less(t, got.at.Sub(hb), expiry, "lease %d acquired after c's heartbeat could have expired", i)
	}
	// The heartbeat document is gone.
	_, err := cl.ReadItem(context.Background(), azcosmos.NewPartitionKeyString("$leases"), ownerID("c"), nil)
	require.Equal(t, 404, statusOf(err))
	t.Logf("Release returned after %v; %d leases acquired by others %v after Release began (default heartbeat and watch settings)", released, len(moving), handedOff)
	require.Eventually(t, func() bool { return fmt.Sprint(a.s.Members()) == "[a b]" }, generous, 10*time.Millisecond)
}

// TestFirstStoreAcquiresInOneBatch: a store alone with free leases takes
// them all in one transactional batch, not one write per lease.
func TestFirstStoreAcquiresInOneBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start("a", nil)
	e.log.waitFor(t, generous, "a holds every lease", balanced(16, names(a)...))
	batches, leaseWrites := 0, 0
	for _, w := range e.rec.snapshot() {
		switch {
		case w.op == cosmosemu.OpBatch:
			batches++
		case w.op == cosmosemu.OpReplace && strings.HasPrefix(w.doc, leaseIDPrefix):
			leaseWrites++
		}
	}
	require.Equal(t, 1, batches, "one batch took the free leases")
	require.Zero(t, leaseWrites, "no lease written on its own")
}

// TestJoinGetsShareByConsentedSteals: a store joining a balanced group gets
// its share, every lease of it handed off by its previous holder. How many
// heartbeats that takes is a figure for the log (and the benchmarks), not
// an assertion.
func TestJoinGetsShareByConsentedSteals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A longer heartbeat and expiry than the other tests, so that a loaded
	// machine does not fence the holders; the watch settings stay short.
	hb := 400 * time.Millisecond
	slow := func(o *Options) { o.HeartbeatInterval, o.LeaseExpiry = hb, 5*hb }
	a, b, c := e.start("a", slow), e.start("b", slow), e.start("c", slow)
	e.log.waitFor(t, generous, "three-way balance", balanced(16, names(a, b, c)...))
	time.Sleep(4 * testCeiling) // idle watchers

	started := time.Now()
	d := e.start("d", slow)
	e.log.waitFor(t, generous, "d's share", func(h map[int]string) bool { return len(heldBy(h, d.name)) >= 16/4 })
	got := time.Now()
	e.log.waitFor(t, generous, "four-way balance", balanced(16, names(a, b, c, d)...))
	checkNoOverlap(t, e.log.snapshot())
	// The join is d's registration (the sending of its first heartbeat).
	d.s.mu.Lock()
	require.True(t, d.s.registered)
	joined := d.s.firstBeat
	d.s.mu.Unlock()
	t.Logf("joining store held its share (%d leases) %v after registering, %v after starting (heartbeat %v)", 16/4, got.Sub(joined), got.Sub(started), hb)
	// Every move to d was a consented steal: its previous holder handed
	// it off.
	for _, en := range e.log.snapshot() {
		if en.ev.Kind == EventLost && en.instance != d.name {
			require.Equal(t, ReasonHandedOff, en.ev.Reason, "%+v", en)
		}
	}
}

func TestReplicaIDReuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.start("a", nil), e.start("b", nil)
	e.log.waitFor(t, generous, "two-way balance", balanced(16, names(a, b)...))

	// After a Release the id is free at once: its heartbeat document is
	// gone, so the next incarnation registers without waiting on it.
	require.NoError(t, a.s.Release(context.Background()))
	a.stop()
	_, err := e.container(nil).ReadItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), ownerID("a"), nil)
	require.Equal(t, 404, statusOf(err), "Release deleted the heartbeat document")
	began := time.Now()
	var waits *observer.ObservedLogs
	a2 := e.start("a", func(o *Options) {
		var core zapcore.Core
		core, waits = observer.New(zap.WarnLevel)
		o.Logger = zap.New(zapcore.NewTee(o.Logger.Core(), core))
	})
	e.log.waitFor(t, generous, "two-way balance", balanced(16, names(a2, b)...))
	a2.s.mu.Lock()
	joined := a2.s.firstBeat
	a2.s.mu.Unlock()
	require.Zero(t, waits.FilterMessageSnippet("waiting for it to expire").Len(), "no wait after a graceful release")
	t.Logf("after a graceful release the id's next incarnation registered %v after starting (expiry %v)", joined.Sub(began), testExpiry)

	// After a crash, a replica restarted on another host waits for its
	// predecessor's heartbeat to expire, then claims what still names it
	// (TestRestartInPlaceTakesOverAtOnce: on the same host it does not).
	a2.stop()
	stopped := time.Now()
	a3 := e.start("a", func(o *Options) { o.Host = "another-host" })
	e.log.waitFor(t, generous, "two-way balance", balanced(16, names(a3, b)...))
	a3.s.mu.Lock()
	joined = a3.s.firstBeat
	a3.s.mu.Unlock()
	var last time.Time // a2's last heartbeat
	for _, w := range e.rec.snapshot() {
		if w.doc == ownerID("a") && w.op == cosmosemu.OpReplace && w.status == 200 && w.at.Before(stopped) {
			last = w.at
		}
	}
	require.GreaterOrEqual(t, joined.Sub(last), testExpiry, "joined only once the old heartbeat expired")
	checkNoOverlap(t, e.log.snapshot())

	// A second process under a live id is refused and never acquires.
	mark := len(e.log.snapshot())
	dup := e.start("a", func(o *Options) { o.Host = "a-third-host" })
	err = <-dup.done
	dup.done <- nil
	require.ErrorIs(t, err, ErrDuplicateReplica)
	for _, en := range e.log.snapshot()[mark:] {
		require.NotEqual(t, dup.name, en.instance)
		require.NotEqual(t, a3.name, en.instance, "the running holder of the id is undisturbed")
	}
	require.NotEmpty(t, a3.s.Owned())
}

// TestRestartInPlaceTakesOverAtOnce: a registration whose predecessor
// under the same ReplicaID ran on the same Host takes over at once, with
// a lease expiry far longer than the test may wait: it claims every lease
// and reports the predecessor's Holder to OnExpired (its locks go). A
// crashed predecessor stays silent; one still running finds its
// heartbeat taken at its next beat and stops with ErrDuplicateReplica.
func TestRestartInPlaceTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		crashed bool
	}{{"crashed predecessor", true}, {"predecessor still running", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			long := func(o *Options) { o.LeaseExpiry = time.Hour } // waiting it out would hang the test
			a := e.start("a", long)
			e.log.waitFor(t, generous, "a holds every lease", balanced(16, a.name))
			holder := a.s.Holder()
			require.NotEmpty(t, holder)
			if tc.crashed {
				a.stop()
			}
			expired := make(chan string, 4)
			a2 := e.start("a", func(o *Options) {
				long(o)
				o.OnExpired = func(h string) { expired <- h }
			})
			e.log.waitFor(t, generous, "the restart holds every lease", balanced(16, a2.name))
			select {
			case h := <-expired:
				require.Equal(t, holder, h, "the predecessor's locks are to be freed")
			case <-time.After(generous):
				t.Fatal("OnExpired was not called with the predecessor's holder")
			}
			require.NotEqual(t, holder, a2.s.Holder())
			if !tc.crashed {
				select {
				case err := <-a.done:
					a.done <- nil
					require.ErrorIs(t, err, ErrDuplicateReplica, "the predecessor is fenced by its next heartbeat")
				case <-time.After(generous):
					t.Fatal("the predecessor kept running")
				}
				require.Empty(t, a.s.Owned())
			}
		})
	}
}

// TestDefaultReplicaID: the platform's stable replica name is the
// default id where there is one; elsewhere a fresh id per process.
func TestDefaultReplicaID(t *testing.T) {
	t.Parallel()
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	require.Equal(t, "app--rev-7d9f-x1", defaultReplicaID(env(map[string]string{"CONTAINER_APP_REPLICA_NAME": "app--rev-7d9f-x1"}), host("ignored")))
	require.Equal(t, "web-5c7d9-abcde", defaultReplicaID(env(map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1"}), host("web-5c7d9-abcde")))
	require.Equal(t, "a-b-c", defaultReplicaID(env(map[string]string{"CONTAINER_APP_REPLICA_NAME": "a/b#c"}), host("h")))
	one, two := defaultReplicaID(env(nil), host("laptop")), defaultReplicaID(env(nil), host("laptop"))
	require.Regexp(t, `^laptop-[0-9a-f]{8}$`, one)
	require.NotEqual(t, one, two, "no platform name: a new id per process")
	require.NoError(t, checkReplicaID(defaultReplicaID(env(nil), host(""))))
}

func TestRangesMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start("a", relaxed)
	e.log.waitFor(t, generous, "a holds all", balanced(16, a.name))
	different := slots.Ranges(16)
	different[3] = slots.Ranges(32)[6] // half of block 3
	for name, rs := range map[string][]epk.Range{
		"fewer":     slots.Ranges(8),
		"different": different,
	} {
		o := testOptions("x-" + name)
		o.Ranges = rs
		s, err := New(e.container(nil), o)
		require.NoError(t, err)
		err = s.Run(context.Background())
		require.ErrorIs(t, err, ErrRangesMismatch, name)
		t.Logf("%s: %v", name, err)
		_, open := <-s.Acquired()
		require.False(t, open, "Acquired is closed when Run returns")
	}
	require.Len(t, a.s.Owned(), 16, "the running store is undisturbed")
}

func TestCompareAndSwapRaceOneWinner(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for round := 0; round < 10; round++ {
		pkv := fmt.Sprintf("$leases-%d", round)
		var stores []*Store
		for _, id := range []string{"a", "b"} {
			o := testOptions(id)
			o.LeaseExpiry, o.HeartbeatInterval = 0, 0 // defaults: no heartbeat loop runs here
			o.PartitionKeyValue = pkv
			o.Ranges = slots.Ranges(1)
			s, err := New(e.container(nil), o)
			require.NoError(t, err)
			require.NoError(t, s.setup(ctx))
			stores = append(stores, s)
		}
		// Both decided from the same version of the free lease.
		acts := make([]action, 2)
		for k, s := range stores {
			s.mu.Lock()
			as, _ := s.planLocked(time.Now())
			s.mu.Unlock()
			require.Len(t, as, 1)
			require.Equal(t, actAcquire, as[0].kind)
			acts[k] = as[0]
		}
		require.Equal(t, acts[0].etag, acts[1].etag)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for k, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				s.acquire(ctx, acts[k])
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		for _, s := range stores {
			winners += len(s.Owned())
		}
		require.Equal(t, 1, winners, "round %d", round)
		resp, err := e.container(nil).ReadItem(ctx, azcosmos.NewPartitionKeyString(pkv), leaseID(0), nil)
		require.NoError(t, err)
		d, err := decodeDoc(resp.Value)
		require.NoError(t, err)
		require.Equal(t, int64(1), d.lease.Epoch, "one ownership change")
		for _, s := range stores {
			if len(s.Owned()) == 1 {
				require.Equal(t, s.id, d.lease.Owner)
			} else {
				s.mu.Lock()
				seen := s.leases[0].doc
				s.mu.Unlock()
				require.Equal(t, d.lease.Owner, seen.Owner, "the loser re-read the document")
			}
		}
	}
}

func TestRacingStartsOneHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	one := func(o *Options) { relaxed(o); o.Ranges = slots.Ranges(1) }
	var ns []*node
	for i := 0; i < 4; i++ {
		ns = append(ns, e.start(fmt.Sprintf("r%d", i), one))
	}
	e.log.waitFor(t, generous, "one holder", func(h map[int]string) bool { return len(h) == 1 })
	// Let every store run a few rounds.
	time.Sleep(3 * testHeartbeat)
	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	require.Len(t, entries, 1, "a single acquisition, no churn")
	d, _ := readLease(t, e.container(nil), 0)
	require.Equal(t, int64(1), d.Epoch)
	_ = ns
}

func TestCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	two := func(o *Options) { relaxed(o); o.Ranges = slots.Ranges(2) }
	a := e.start("a", two)
	e.log.waitFor(t, generous, "a holds both", balanced(2, a.name))
	l1, l2 := <-a.leases, <-a.leases
	cl := e.container(nil)

	require.NoError(t, l1.Checkpoint(ctx, "c1"))
	require.Equal(t, "c1", l1.Continuation())
	d, _ := readLease(t, cl, idxOf(l1))
	require.Equal(t, "c1", d.Continuation)
	require.Equal(t, "a", d.Owner)

	// An unrelated write (a steal request by a replica that is not live)
	// does not make Checkpoint fail: it re-reads and retries.
	mutateLease(t, cl, idxOf(l1), func(d *leaseDoc) { d.StealBy = "ghost" })
	require.NoError(t, l1.Checkpoint(ctx, "c2"))
	d, _ = readLease(t, cl, idxOf(l1))
	require.Equal(t, "c2", d.Continuation)

	// Someone else owns it now: Checkpoint fails with ErrLeaseLost, Done
	// closes, the stored continuation is untouched.
	mutateLease(t, cl, idxOf(l1), func(d *leaseDoc) { d.Owner, d.Epoch = "intruder", d.Epoch+1 })
	err := l1.Checkpoint(ctx, "c3")
	require.ErrorIs(t, err, changefeed.ErrLeaseLost)
	requireClosed(t, l1.Done())
	d, _ = readLease(t, cl, idxOf(l1))
	require.Equal(t, "c2", d.Continuation)
	require.Greater(t, d.Epoch, l1.(*lease).epoch) // (a may have taken it back from the heartbeat-less intruder)

	// After Release: Done closed, ErrLeaseLost without a request.
	require.NoError(t, l2.Checkpoint(ctx, "k1"))
	require.NoError(t, a.s.Release(ctx))
	requireClosed(t, l2.Done())
	require.ErrorIs(t, l2.Checkpoint(ctx, "k2"), changefeed.ErrLeaseLost)
	d, _ = readLease(t, cl, idxOf(l2))
	require.Equal(t, "k1", d.Continuation)
	require.Equal(t, "", d.Owner, "released with nobody live: free")
}

func idxOf(l changefeed.Lease) int { return l.(*lease).idx }

// mutateLease changes lease i as another replica would: read, modify,
// compare-and-swap, retried until it wins.
func mutateLease(t testing.TB, c *azcosmos.ContainerClient, i int, f func(*leaseDoc)) {
	t.Helper()
	for {
		d, etag := readLease(t, c, i)
		f(&d)
		d.Rev++
		body, err := encodeDoc(d, "instanceId", DefaultPartitionKeyValue)
		require.NoError(t, err)
		_, err = c.ReplaceItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), d.ID, body, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		if statusOf(err) == 412 {
			continue
		}
		require.NoError(t, err)
		return
	}
}

func requireClosed(t testing.TB, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(generous):
		t.Fatal("Done not closed")
	}
}

func TestPartitionedStoreFencesBeforeTakeOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, c := e.start("a", nil), e.start("b", nil), e.start("c", nil)
	e.log.waitFor(t, generous, "three-way balance", balanced(16, names(a, b, c)...))
	before := e.log.snapshot()
	mark := before[len(before)-1].seq
	victims := heldBy(holders(before), c.name)

	c.cut.Store(true) // c keeps running but reaches nothing
	e.log.waitFor(t, generous, "c's leases moved to a and b", balanced(16, names(a, b)...))
	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	for _, en := range entries {
		if en.seq > mark && en.instance == c.name {
			require.Equal(t, EventLost, en.ev.Kind)
			require.Equal(t, ReasonFenced, en.ev.Reason, "c let go on its own clock")
		}
	}
	for _, i := range victims {
		got, ok := firstAcquiredAfter(entries, mark, i)
		require.True(t, ok)
		require.NotEqual(t, c.name, got.instance)
	}

	// Healed, c learns it was declared dead, registers anew and gets its
	// share back through steals.
	c.cut.Store(false)
	e.log.waitFor(t, generous, "three-way balance again", balanced(16, names(a, b, c)...))
	checkNoOverlap(t, e.log.snapshot())
}

// TestNoDoubleOwnershipUnderChurn stops, starts, restarts, releases and
// partitions stores at random while consumers checkpoint, and checks in
// the shared log that no lease ever had two believing holders.
func TestNoDoubleOwnershipUnderChurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var (
		mu      sync.Mutex
		live    []*node
		nextID  = 0
		stopped []string
		lostErr int
		ckOK    int
	)
	consume := func(n *node) {
		go func() {
			for l := range n.leases {
				go func() {
					k := 0
					for {
						select {
						case <-l.Done():
							if err := l.Checkpoint(context.Background(), "after-done"); !errors.Is(err, changefeed.ErrLeaseLost) {
								t.Errorf("checkpoint after Done: %v", err)
							}
							return
						case <-time.After(15 * time.Millisecond):
						}
						k++
						err := l.Checkpoint(context.Background(), fmt.Sprintf("%s/%d", n.name, k))
						mu.Lock()
						if err == nil {
							ckOK++
						} else if errors.Is(err, changefeed.ErrLeaseLost) {
							lostErr++
						}
						mu.Unlock()
					}
				}()
			}
		}()
	}
	spawn := func(id string) {
		n := e.start(id, nil)
		consume(n)
		live = append(live, n)
	}
	for nextID < 4 {
		spawn(fmt.Sprintf("r%d", nextID))
		nextID++
	}
	pick := func() (int, *node) { i := rng.IntN(len(live)); return i, live[i] }
	remove := func(i int) { live = append(live[:i], live[i+1:]...) }
	actions := map[string]int{}
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		switch k := rng.IntN(10); {
		case k < 2 && len(live) > 2: // crash
			i, n := pick()
			remove(i)
			n.stop()
			stopped = append(stopped, n.s.ReplicaID())
			actions["stop"]++
		case k < 4 && len(live) < 5: // start, sometimes reusing a stopped id
			if len(stopped) > 0 && rng.IntN(2) == 0 {
				j := rng.IntN(len(stopped))
				spawn(stopped[j])
				stopped = append(stopped[:j], stopped[j+1:]...)
				actions["restart"]++
			} else {
				spawn(fmt.Sprintf("r%d", nextID))
				nextID++
				actions["start"]++
			}
		case k < 5 && len(live) > 2: // graceful release
			i, n := pick()
			remove(i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = n.s.Release(ctx)
			cancel()
			n.stop()
			actions["release"]++
		case k < 7: // partition for a while, healed later
			_, n := pick()
			if !n.cut.Load() {
				n.cut.Store(true)
				heal := time.Duration(rng.IntN(int(2 * testExpiry)))
				time.AfterFunc(heal, func() { n.cut.Store(false) })
				actions["partition"]++
			}
		}
		time.Sleep(time.Duration(20+rng.IntN(130)) * time.Millisecond)
	}
	for _, n := range live {
		n.cut.Store(false)
	}
	defer func() {
		if !t.Failed() {
			return
		}
		for _, n := range live { // why a live node holds no share
			select {
			case err := <-n.done:
				t.Logf("%s: Run returned %v", n.name, err)
				n.done <- err
			default:
				t.Logf("%s: running", n.name)
			}
		}
	}()
	e.log.waitFor(t, 60*time.Second, "balance after churn", balanced(16, names(live...)...))
	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	mu.Lock()
	t.Logf("churn: %v; %d ownership changes logged, %d checkpoints, %d refused with ErrLeaseLost", actions, len(entries), ckOK, lostErr)
	require.Positive(t, ckOK)
	mu.Unlock()
}

func TestReleaseDuringSetupAndWithoutRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()

	// Release before Run: Run then refuses to start.
	s, err := New(e.container(nil), testOptions("early"))
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx))
	require.ErrorIs(t, s.Run(ctx), ErrReleased)
	require.NoError(t, s.Release(ctx), "Release is idempotent")

	// Release while Run cannot get through setup (unreachable service).
	var cut atomic.Bool
	cut.Store(true)
	s, err = New(e.container(&cut), testOptions("stuck"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cancelSetup != nil
	}, generous, time.Millisecond, "Run is in setup")
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = s.Release(rctx) // nothing reachable: the writes fail, Run ends
	require.NoError(t, <-done)

	// Release after Run stopped hands off the leases still naming the id.
	a, b := e.start("a", relaxed), e.start("b", relaxed)
	e.log.waitFor(t, generous, "two-way balance", balanced(16, names(a, b)...))
	a.stop()
	require.NoError(t, a.s.Release(ctx))
	e.log.waitFor(t, generous, "b holds all", balanced(16, b.name))
	checkNoOverlap(t, e.log.snapshot())
}

// TestOnDocumentSeesOtherDocuments: documents of the lease partition that
// are neither leases nor heartbeats reach OnDocument through the watch,
// both when written while running and when present at start.
func TestOnDocumentSeesOtherDocuments(t *testing.T) {
	e := newEnv(t)
	c := e.container(nil)
	pk := azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue)
	put := func(id, v string) {
		body := fmt.Sprintf(`{"id":%q,"instanceId":"$leases","type":"hint","v":%q}`, id, v)
		_, err := c.UpsertItem(context.Background(), pk, []byte(body), nil)
		require.NoError(t, err)
	}
	put("hint:before", "1")
	var mu sync.Mutex
	seen := map[string]string{}
	e.start("a", func(o *Options) {
		o.OnDocument = func(raw []byte) {
			var d struct{ ID, V string }
			require.NoError(t, json.Unmarshal(raw, &d))
			mu.Lock()
			seen[d.ID] = d.V
			mu.Unlock()
		}
	})
	get := func(id string) string {
		mu.Lock()
		defer mu.Unlock()
		return seen[id]
	}
	require.Eventually(t, func() bool { return get("hint:before") == "1" }, generous, 10*time.Millisecond)
	put("hint:after", "2")
	require.Eventually(t, func() bool { return get("hint:after") == "2" }, generous, 10*time.Millisecond)
	put("hint:after", "3")
	require.Eventually(t, func() bool { return get("hint:after") == "3" }, generous, 10*time.Millisecond)
}

// vanishingOwner deletes a replica's heartbeat document just before the
// first replace of it goes out, as a death declaration racing the
// replica's registration would.
type vanishingOwner struct {
	inner *http.Client
	path  string
	del   func()
	once  sync.Once
}

func (v *vanishingOwner) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, v.path) {
		v.once.Do(v.del)
	}
	return v.inner.Do(req)
}

// TestRegisterAfterTheHeartbeatDocumentVanishes: a replica registering
// over its crashed predecessor's heartbeat document, which is deleted
// between its read and its replace, creates the document anew and serves
// (the replace's 404 had ended Run).
func TestRegisterAfterTheHeartbeatDocumentVanishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.start("rv", nil)
	e.log.waitFor(t, generous, "first incarnation balanced", balanced(16, names(first)...))
	first.stop() // a crash: its heartbeat document stays, for the next to replace

	raw := e.container(nil)
	pk := azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue)
	var deleted atomic.Bool
	v := &vanishingOwner{inner: e.srv.HTTPClient(), path: "/docs/" + ownerID("rv"), del: func() {
		_, err := raw.DeleteItem(context.Background(), pk, ownerID("rv"), nil)
		deleted.Store(err == nil)
	}}
	cred, err := azcosmos.NewKeyCredential(e.srv.Key())
	require.NoError(t, err)
	opts := e.srv.ClientOptions()
	opts.Transport = v
	opts.Retry.MaxRetries = -1
	cl, err := azcosmos.NewClientWithKey(e.srv.Endpoint(), cred, opts)
	require.NoError(t, err)
	c, err := cl.NewContainer("db", "c")
	require.NoError(t, err)
	o := testOptions("rv")
	o.OnChange = func(ev Event) { e.log.add("rv#again", ev) }
	s, err := New(c, o)
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	go func() {
		for range s.Acquired() {
		}
	}()
	defer func() { stop(); <-done }()
	e.log.waitFor(t, generous, "the new incarnation holds every lease", balanced(16, "rv#again"))
	require.True(t, deleted.Load(), "the document was deleted before the replace")
	select {
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	default:
	}
}

// TestReleaseAfterAHeartbeatCutOffInFlight: a heartbeat the stopping
// loop sent but never heard back from moves the document's ETag on;
// Release still marks the heartbeat leaving and deletes it, reading the
// document when its remembered ETag is stale, so that the replica id is
// free at once.
func TestReleaseAfterAHeartbeatCutOffInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.start("a", nil)
	e.log.waitFor(t, generous, "a holds leases", func(h map[int]string) bool { return len(h) > 0 })
	a.stop() // Run returns, the loops with it; the document stays
	a.s.mu.Lock()
	inc, seq, etag := a.s.incarnation, a.s.mySeq, a.s.myETag
	a.s.mu.Unlock()

	// The cut-off heartbeat: the same incarnation's document, written
	// anew, so the ETag a holds is stale.
	c := e.container(nil)
	pk := azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue)
	cur, err := c.ReadItem(context.Background(), pk, ownerID("a"), nil)
	require.NoError(t, err)
	_, err = c.ReplaceItem(context.Background(), pk, ownerID("a"), cur.Value, nil)
	require.NoError(t, err)

	m, err := a.s.ensureMeta(context.Background())
	require.NoError(t, err)
	got, err := a.s.markLeaving(context.Background(), m, inc, seq, etag)
	require.NoError(t, err, "the stale ETag is read afresh")
	after, err := c.ReadItem(context.Background(), pk, ownerID("a"), nil)
	require.NoError(t, err)
	require.Equal(t, after.ETag, got, "the ETag of the leaving write")
	d, err := decodeDoc(after.Value)
	require.NoError(t, err)
	require.Equal(t, stateLeaving, d.owner.State)
	require.Equal(t, inc, d.owner.Incarnation)

	// Another incarnation's document is not touched.
	_, err = a.s.markLeaving(context.Background(), m, "another", seq, etag)
	require.Error(t, err)
	again, err := c.ReadItem(context.Background(), pk, ownerID("a"), nil)
	require.NoError(t, err)
	require.Equal(t, after.ETag, again.ETag)
}
