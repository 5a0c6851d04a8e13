package changefeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
)

// latencyProbe is a handler that signals when awaited documents arrive.
type latencyProbe struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func (lp *latencyProbe) expect(id string) <-chan struct{} {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	ch := make(chan struct{})
	lp.waiting[id] = ch
	return ch
}

func (lp *latencyProbe) handle(_ context.Context, b changefeed.Batch) error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for _, raw := range b.Documents {
		var d doc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		if ch, ok := lp.waiting[d.ID]; ok {
			close(ch)
			delete(lp.waiting, d.ID)
		}
	}
	return nil
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(lat))/1000, "mean-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkEndToEndLatency measures the time from the start of a write to
// the handler receiving the document, on one lease over one physical
// partition of cosmosemu (loopback round trip about 1 ms):
//
//   - active: other changes flow continuously, so the reader polls every
//     ActiveDelay (default 5 ms);
//   - idle: the reader has backed off to IdleCeiling (default 1 s) before
//     each write, which lands at a random phase of its pause;
//   - idle+wake: the same, and the writer calls Processor.Wake after its
//     write.
//
// The idle variants pause about three seconds per operation: run them with
// e.g. -benchtime 20x.
func BenchmarkEndToEndLatency(b *testing.B) {
	for _, mode := range []string{"active", "idle", "idle+wake"} {
		b.Run(mode, func(b *testing.B) {
			e := newEnv(b, envOptions{})
			p0 := pkRange(e.physical(b)[0])
			keys := keysIn(b, "b", p0, 2)
			probe, noise := keys[0], keys[1]
			lp := &latencyProbe{waiting: map[string]chan struct{}{}}
			p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("p0", p0)), lp.handle, changefeed.Options{})
			require.NoError(b, err)
			run(b, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			if mode == "active" {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for s := 0; ctx.Err() == nil; s++ {
						_ = e.write(ctx, noise, s)
						time.Sleep(2 * time.Millisecond)
					}
				}()
			}
			rng := rand.New(rand.NewPCG(1, 1))
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if mode != "active" {
					b.StopTimer()
					// Let the reader reach its ceiling, then write at a
					// random phase of its pause.
					time.Sleep(3*changefeed.DefaultIdleCeiling + time.Duration(rng.Int64N(int64(changefeed.DefaultIdleCeiling))))
					b.StartTimer()
				}
				id := fmt.Sprintf("%s-%05d", probe, i)
				got := lp.expect(id)
				start := time.Now()
				require.NoError(b, e.write(ctx, probe, i))
				if mode == "idle+wake" {
					p.Wake(p0)
				}
				<-got
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkIdleRequestsPerMinute counts, through cosmosemu's request
// counters, the change-feed requests one idle reader (one physical
// partition, default options) makes per minute once it has backed off, and
// their simulated charge (knobs.DefaultChargeModel: a 304 costs 1 RU).
// Each operation is a 10-second window; run with e.g. -benchtime 3x.
func BenchmarkIdleRequestsPerMinute(b *testing.B) {
	e := newEnv(b, envOptions{cfg: knobs.Config{Charges: knobs.DefaultChargeModel()}})
	p0 := pkRange(e.physical(b)[0])
	p, err := changefeed.New(e.c, newMemSource(newMemStore().lease("p0", p0)), newRecorder().handle, changefeed.Options{})
	require.NoError(b, err)
	run(b, p)
	time.Sleep(3 * changefeed.DefaultIdleCeiling) // back off to the ceiling
	const window = 10 * time.Second
	feed := func() knobs.Stat { return e.k.Counters().Snapshot().ByOperation[cosmosemu.OpChangeFeed] }
	var requests int64
	var charge float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := feed()
		time.Sleep(window)
		end := feed()
		requests += end.Requests - start.Requests
		charge += end.RequestCharge - start.RequestCharge
	}
	b.StopTimer()
	windows := float64(b.N) * float64(window) / float64(time.Second)
	b.ReportMetric(float64(requests)/windows*60, "req/min/reader")
	b.ReportMetric(charge/windows, "RU/s/reader")
}

// BenchmarkSiblingLeases measures what sharing a physical partition
// between k leases of one processor costs while changes flow: one document
// at a time, each written at a random phase of the readers' ActiveDelay
// (10 ms, warm throughout) into the leases' ranges in turn, the next
// written once the handler has it. It reports the change-feed reads per
// change and the write-to-handler latency. While the partition is quiet
// its readers take turns (one read per pause); a change makes every reader
// whose turn it was not read after its sibling's read has shown it.
func BenchmarkSiblingLeases(b *testing.B) {
	const active = 10 * time.Millisecond
	for _, k := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("leases=%d", k), func(b *testing.B) {
			e := newEnv(b, envOptions{})
			p0 := pkRange(e.physical(b)[0])
			subs := epk.SplitEven(4 * k)[:k] // the emulator's partitions are the even split in four
			require.Equal(b, p0.Min, subs[0].Min)
			require.Equal(b, p0.Max, subs[k-1].Max)
			store := newMemStore()
			var leases []changefeed.Lease
			var keys []string
			for i, r := range subs {
				leases = append(leases, store.lease(fmt.Sprint("l", i), r))
				keys = append(keys, keysIn(b, fmt.Sprint("s", i, "-"), r, 1)[0])
			}
			lp := &latencyProbe{waiting: map[string]chan struct{}{}}
			p, err := changefeed.New(e.c, newMemSource(leases...), lp.handle, changefeed.Options{
				ActiveDelay: active, WarmHold: time.Hour})
			require.NoError(b, err)
			run(b, p)
			ctx := context.Background()
			write := func(i int) time.Duration {
				key := keys[i%k]
				got := lp.expect(fmt.Sprintf("%s-%05d", key, i))
				start := time.Now()
				require.NoError(b, e.write(ctx, key, i))
				<-got
				return time.Since(start)
			}
			write(0) // warm
			rng := rand.New(rand.NewPCG(1, uint64(k)))
			reads0 := e.feedRequests()
			var lat []time.Duration
			b.ResetTimer()
			for i := 1; i <= b.N; i++ {
				time.Sleep(time.Duration(rng.Int64N(int64(active))))
				lat = append(lat, write(i))
			}
			b.StopTimer()
			b.ReportMetric(float64(e.feedRequests()-reads0)/float64(b.N), "reads/change")
			reportPercentiles(b, lat)
		})
	}
}
