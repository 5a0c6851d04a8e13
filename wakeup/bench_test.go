package wakeup

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durafeed/durafeed/internal/clock/clocktest"
	"github.com/durafeed/durafeed/slots"
)

func benchNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("instance-", i)
	}
	return names
}

// BenchmarkSignalTake: Signal then a Wait that finds it due at once.
func BenchmarkSignalTake(b *testing.B) {
	h, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	names := benchNames(1024)
	set := SetOf(42)
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Signal(42, names[i%len(names)], now)
		if _, ok := h.Wait(ctx, set, 0); !ok {
			b.Fatal("no wakeup")
		}
	}
}

// BenchmarkSignalWaitLatency: one waiter blocked on its slot; each op is a
// Signal, its hand-off to the waiter and the waiter's answer on a channel.
// p50/p99 are Signal-to-return latencies.
func BenchmarkSignalWaitLatency(b *testing.B) {
	h, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	names := benchNames(1024)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan time.Time)
	go func() {
		for {
			if _, ok := h.Wait(ctx, SetOf(7), time.Hour); !ok {
				return
			}
			got <- time.Now()
		}
	}()
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		h.Signal(7, names[i%len(names)], start)
		end := <-got
		if len(lat) < cap(lat) {
			lat = append(lat, end.Sub(start))
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkContention32: 32 waiters on disjoint shares of 8 slots.
//
// flood: parallel producers signal across all 256 slots as fast as they
// can; ns/op is the cost per delivered wakeup. handoff: all 32 waiters are
// blocked and each signal goes to a different share in turn; ns/op is the
// Signal-to-answer round trip, to compare with BenchmarkSignalWaitLatency
// (one waiter): a thundering herd would wake 32 goroutines per signal.
// empty-wakes/op counts Waits that returned with nothing (a herd's
// signature); handoffs/op the share of wakeups handed to blocked waiters.
func BenchmarkContention32(b *testing.B) {
	b.Run("flood", func(b *testing.B) { benchContention(b, false) })
	b.Run("handoff", func(b *testing.B) { benchContention(b, true) })
}

func benchContention(b *testing.B, pingPong bool) {
	const waiters = 32
	h, err := New(Options{MaxPendingPerSlot: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	names := benchNames(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var taken, empty atomic.Int64
	done := make(chan struct{})
	ack := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, share := range blocks(waiters) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, ok := h.Wait(ctx, share, time.Hour)
				if !ok {
					if ctx.Err() != nil {
						return
					}
					empty.Add(1)
					continue
				}
				if pingPong {
					ack <- struct{}{}
				}
				if taken.Add(1) == int64(b.N) {
					close(done)
				}
			}
		}()
	}
	now := time.Now()
	b.ResetTimer()
	if pingPong {
		for i := range b.N {
			// slot 8k+i/32%8 of share k = i%32: every share in turn.
			h.Signal((i%waiters)*8+(i/waiters)%8, names[i], now)
			<-ack
		}
	} else {
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(next.Add(1) - 1)
				h.Signal(i%slots.Count, names[i], now)
			}
		})
	}
	<-done
	b.StopTimer()
	st := h.Snapshot()
	cancel()
	wg.Wait()
	b.ReportMetric(float64(empty.Load())/float64(b.N), "empty-wakes/op")
	b.ReportMetric(float64(st.Handoffs)/float64(b.N), "handoffs/op")
}

// BenchmarkTimerDue: wakeups scheduled in the future become due through the
// timer heap (fake clock).
func BenchmarkTimerDue(b *testing.B) {
	clk := clocktest.NewManual(epoch)
	h, err := New(Options{Clock: clk, MaxPendingPerSlot: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	names := benchNames(4096)
	ctx := context.Background()
	all := All(slots.Count)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Signal(i%slots.Count, names[i%len(names)], clk.Now().Add(time.Duration(1+i%64)*time.Millisecond))
		if i%64 == 63 {
			clk.Advance(64 * time.Millisecond)
			for {
				if _, ok := h.Wait(ctx, all, 0); !ok {
					break
				}
			}
		}
	}
}

// BenchmarkBacklogCount: the backlog check's question (how many wakeups
// are due, per slot) with n pending wakeups over every slot, asked through
// DueCounts and through a Snapshot. DueCounts' cost should not grow with n.
func BenchmarkBacklogCount(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		h, err := New(Options{MaxPendingPerSlot: 1 << 16})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		for i, name := range benchNames(n) {
			h.Signal(i%slots.Count, name, now)
		}
		all := All(slots.Count)
		b.Run(fmt.Sprintf("DueCounts/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, total := h.DueCounts(all); total != n {
					b.Fatalf("%d due, want %d", total, n)
				}
			}
		})
		b.Run(fmt.Sprintf("Snapshot/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := len(h.Snapshot().Pending); got != n {
					b.Fatalf("%d pending, want %d", got, n)
				}
			}
		})
		h.Close()
	}
}

// BenchmarkPendingMemory reports the heap one pending instance wakeup
// takes (B/wakeup): 100,000 signals with distinct keys, over every slot,
// measured after a garbage collection on each side. The keys' own bytes
// are allocated before and not counted.
func BenchmarkPendingMemory(b *testing.B) {
	const n = 100_000
	names := benchNames(n)
	now := time.Now()
	var perWakeup float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		h, err := New(Options{MaxPendingPerSlot: 1 << 16})
		if err != nil {
			b.Fatal(err)
		}
		for i, name := range names {
			h.Signal(i%slots.Count, name, now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perWakeup = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(h)
		h.Close()
	}
	b.ReportMetric(perWakeup, "B/wakeup")
}
