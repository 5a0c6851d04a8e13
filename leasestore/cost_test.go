package leasestore

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/require"
)

var writeOps = []cosmosemu.OperationType{cosmosemu.OpCreate, cosmosemu.OpReplace, cosmosemu.OpUpsert, cosmosemu.OpPatch, cosmosemu.OpDelete, cosmosemu.OpBatch}

func sumOps(s knobs.Snapshot, ops ...cosmosemu.OperationType) (n int64, ru float64) {
	for _, op := range ops {
		n += s.ByOperation[op].Requests
		ru += s.ByOperation[op].RequestCharge
	}
	return n, ru
}

// TestRenewalWritesScaleWithReplicas: with 3 replicas and 16 leases, a
// steady state writes one heartbeat per replica per period and no lease
// document at all.
func TestRenewalWritesScaleWithReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, c := e.start("a", nil), e.start("b", nil), e.start("c", nil)
	e.log.waitFor(t, generous, "three-way balance", balanced(16, names(a, b, c)...))
	time.Sleep(testExpiry) // let refused or pending steal requests settle

	events := len(e.log.snapshot())
	from := len(e.rec.snapshot())
	e.k.Counters().Reset()
	start := time.Now()
	time.Sleep(10 * testHeartbeat)
	snap := e.k.Counters().Snapshot()
	elapsed := time.Since(start)
	ws := e.rec.snapshot()[from:]

	var heartbeats, leaseWrites int
	for _, w := range ws {
		switch {
		case strings.HasPrefix(w.doc, ownerIDPrefix):
			heartbeats++
		default:
			leaseWrites++
		}
	}
	writes, _ := sumOps(snap, writeOps...)
	periods := float64(elapsed) / float64(testHeartbeat)
	t.Logf("over %.1f heartbeat periods: %d writes counted by knobs (%d heartbeats, %d other) = %.2f per period with 3 replicas and 16 leases",
		periods, writes, heartbeats, leaseWrites, float64(writes)/periods)
	require.Zero(t, leaseWrites, "no lease document is renewed")
	require.InDelta(t, heartbeats, writes, 3, "every write is a heartbeat")
	require.InDelta(t, 3, float64(writes)/periods, 1, "about one write per replica per period")
	require.Len(t, e.log.snapshot(), events, "no ownership change in a steady state")
}

// TestClockSkewDoesNotMatter runs replicas whose wall clocks are hours off
// (one jumps at random on every reading): balance, steady state and
// take-over all behave as with correct clocks, because liveness is measured
// on each observer's monotonic clock; the wall clock only ends up in
// informational timestamps.
func TestClockSkewDoesNotMatter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	skew := func(d time.Duration) func(*Options) {
		return func(o *Options) { o.WallClock = func() time.Time { return time.Now().Add(d) } }
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	chaos := func(o *Options) {
		o.WallClock = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return time.Now().Add(time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour)
		}
	}
	a, b, c := e.start("a", skew(-5*time.Hour)), e.start("b", skew(7*time.Hour)), e.start("c", chaos)
	e.log.waitFor(t, generous, "three-way balance", balanced(16, names(a, b, c)...))

	// Steady state over several expiries: nobody is declared dead.
	mark := len(e.log.snapshot())
	time.Sleep(3 * testExpiry)
	for _, en := range e.log.snapshot()[mark:] {
		require.NotEqual(t, ReasonExpired, en.ev.Reason, "%+v", en)
		require.NotEqual(t, ReasonTaken, en.ev.Reason, "%+v", en)
	}

	// The wall clock is only written: checkpointAt carries a's skew,
	// writtenAt b's.
	var l changefeed.Lease
	for l == nil {
		cand := <-a.leases
		select {
		case <-cand.Done():
		default:
			l = cand
		}
	}
	require.NoError(t, l.Checkpoint(context.Background(), "tok"))
	d, _ := readLease(t, e.container(nil), idxOf(l))
	at, err := time.Parse(time.RFC3339Nano, d.CheckpointAt)
	require.NoError(t, err)
	require.InDelta(t, float64(-5*time.Hour), float64(time.Until(at)), float64(time.Minute))
	resp, err := e.container(nil).ReadItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), ownerID("b"), nil)
	require.NoError(t, err)
	od, err := decodeDoc(resp.Value)
	require.NoError(t, err)
	at, err = time.Parse(time.RFC3339Nano, od.owner.WrittenAt)
	require.NoError(t, err)
	require.InDelta(t, float64(7*time.Hour), float64(time.Until(at)), float64(time.Minute))

	// Take-over of the chaotic replica follows the monotonic rule exactly.
	before := e.log.snapshot()
	seq := before[len(before)-1].seq
	victims := heldBy(holders(before), c.name)
	c.stop()
	e.log.waitFor(t, generous, "c's leases moved", balanced(16, names(a, b)...))
	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	hb := lastHeartbeat(e.rec.snapshot(), "c")
	for _, i := range victims {
		got, ok := firstAcquiredAfter(entries, seq, i)
		require.True(t, ok)
		require.GreaterOrEqual(t, got.at.Sub(hb), testExpiry)
	}
}

// BenchmarkIdleCost measures what an idle replica costs at the default
// settings: three replicas over 16 leases, balanced, nothing checkpointing,
// for a 30 s window (one iteration is enough; b.N is not used).
func BenchmarkIdleCost(b *testing.B) {
	e := newEnv(b)
	defaults := func(o *Options) {
		o.LeaseExpiry, o.HeartbeatInterval, o.WatchActiveDelay, o.WatchIdleCeiling = 0, 0, 0, 0
	}
	ns := []*node{e.start("a", defaults), e.start("b", defaults), e.start("c", defaults)}
	e.log.waitFor(b, time.Minute, "three-way balance", balanced(16, names(ns...)...))
	time.Sleep(3 * time.Second)
	e.k.Counters().Reset()
	b.ResetTimer()
	const window = 30 * time.Second
	time.Sleep(window)
	snap := e.k.Counters().Snapshot()
	b.StopTimer()
	perMin := func(v float64) float64 { return v / 3 / window.Minutes() }
	writes, wru := sumOps(snap, writeOps...)
	feeds, fru := sumOps(snap, cosmosemu.OpChangeFeed)
	queries, qru := sumOps(snap, cosmosemu.OpQuery)
	b.ReportMetric(perMin(float64(snap.Total.Requests)), "req/min/replica")
	b.ReportMetric(perMin(snap.Total.RequestCharge), "RU/min/replica")
	b.ReportMetric(perMin(float64(writes)), "writes/min/replica")
	b.ReportMetric(perMin(float64(feeds)), "polls/min/replica")
	b.ReportMetric(perMin(float64(queries)), "queries/min/replica")
	b.Logf("per replica per minute: writes %.0f (%.0f RU), feed polls %.0f (%.0f RU), queries %.1f (%.0f RU); total %.0f requests, %.0f RU",
		perMin(float64(writes)), perMin(wru), perMin(float64(feeds)), perMin(fru), perMin(float64(queries)), perMin(qru),
		perMin(float64(snap.Total.Requests)), perMin(snap.Total.RequestCharge))
}

// BenchmarkHandOffAtDefaults measures, at the default settings with three
// replicas over 16 leases, how long after Release began the released
// leases are held by the others, and how long after a replica stops
// without releasing its leases are held by the others (one iteration is
// enough; b.N is not used).
func BenchmarkHandOffAtDefaults(b *testing.B) {
	e := newEnv(b)
	defaults := func(o *Options) {
		o.LeaseExpiry, o.HeartbeatInterval, o.WatchActiveDelay, o.WatchIdleCeiling = 0, 0, 0, 0
	}
	x, y, z := e.start("x", defaults), e.start("y", defaults), e.start("z", defaults)
	e.log.waitFor(b, time.Minute, "three-way balance", balanced(16, names(x, y, z)...))
	time.Sleep(2 * DefaultWatchIdleCeiling)
	b.ResetTimer()

	start := time.Now()
	if err := z.s.Release(context.Background()); err != nil {
		b.Fatal(err)
	}
	e.log.waitFor(b, time.Minute, "released leases moved", balanced(16, names(x, y)...))
	release := time.Since(start)

	w := e.start("w", defaults)
	e.log.waitFor(b, time.Minute, "three-way balance", balanced(16, names(x, y, w)...))
	time.Sleep(2 * DefaultWatchIdleCeiling)
	start = time.Now()
	w.stop()
	e.log.waitFor(b, time.Minute, "stopped store's leases moved", balanced(16, names(x, y)...))
	crash := time.Since(start)
	b.StopTimer()
	checkNoOverlap(b, e.log.snapshot())
	b.ReportMetric(float64(release.Milliseconds()), "release-ms")
	b.ReportMetric(float64(crash.Milliseconds()), "stop-ms")
	b.Logf("defaults: released leases held by others after %v; a stopped store's after %v (expiry %v)", release, crash, DefaultLeaseExpiry)
}
