package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Benchmarks: one emulator per injected latency, shared by every
// benchmark of the package and closed by TestMain.
//
//	go test -run '^$' -bench . -benchtime 30x ./bench/
//
// A wake or timer iteration is one sample (one item in flight, a random
// pause of -interval before each enqueue, so a sample takes about half a
// second in polling mode); an idle iteration is one second of measurement
// window after -idle-warmup. Metrics replace ns/op.
var (
	benchIdleWarmup = flag.Duration("idle-warmup", 15*time.Second, "BenchmarkIdleCost: wait before the window")

	envMu sync.Mutex
	envs  = map[time.Duration]*Env{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	envMu.Lock()
	for _, e := range envs {
		_ = e.Close()
	}
	envMu.Unlock()
	os.Exit(code)
}

// sharedEnv returns the package's emulator with the given injected latency.
func sharedEnv(tb testing.TB, latency time.Duration) *Env {
	tb.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	if e, ok := envs[latency]; ok {
		return e
	}
	e, _, err := StartEnv(context.Background(), EnvOptions{Latency: latency})
	if err != nil {
		tb.Fatal(err)
	}
	envs[latency] = e
	return e
}

var benchLatencies = []time.Duration{0, 2 * time.Millisecond}

func benchLatency(b *testing.B, cases ...Case) {
	d := DefaultConfig()
	for _, lat := range benchLatencies {
		for _, c := range cases {
			for _, m := range Modes {
				b.Run(fmt.Sprintf("latency=%v/case=%s/mode=%s", lat, c, m), func(b *testing.B) {
					e := sharedEnv(b, lat)
					r, err := e.RunLatency(context.Background(), LatencyScenario{Mode: m, Case: c, Samples: b.N, Warmup: 1,
						Interval: d.Interval, TimerDelay: d.TimerDelay, Fetch: d.Fetch, SampleTimeout: d.SampleTimeout, Seed: d.Seed})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(r.P50MS, "p50-ms")
					b.ReportMetric(r.P99MS, "p99-ms")
					b.ReportMetric(r.MeanMS, "mean-ms")
					b.ReportMetric(float64(r.Lost), "lost")
				})
			}
		}
	}
}

// BenchmarkWakeLatency reports the p50 and p99 enqueue-to-fetch latency,
// enqueued through another provider instance (wake-remote, and
// wake-remote-busy with background work flowing) and through the fetcher's
// own (wake-local), in both modes.
func BenchmarkWakeLatency(b *testing.B) {
	benchLatency(b, CaseWakeRemote, CaseWakeRemoteBusy, CaseWakeLocal)
}

// BenchmarkTimerLateness reports the p50 and p99 lateness of TimerFired
// items enqueued with a visibility delay of 200 ms to 1 s.
func BenchmarkTimerLateness(b *testing.B) { benchLatency(b, CaseTimer) }

// BenchmarkIdleCost reports requests and simulated RU per minute and
// replica while nothing happens, for 1 and 3 replicas in both modes.
func BenchmarkIdleCost(b *testing.B) {
	for _, lat := range benchLatencies {
		for _, n := range []int{1, 3} {
			for _, m := range Modes {
				b.Run(fmt.Sprintf("latency=%v/replicas=%d/mode=%s", lat, n, m), func(b *testing.B) {
					e := sharedEnv(b, lat)
					r, err := e.RunIdle(context.Background(), IdleScenario{Mode: m, Replicas: n,
						Warmup: *benchIdleWarmup, Window: time.Duration(b.N) * time.Second})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(r.RequestsPerMin, "requests/min/replica")
					b.ReportMetric(r.RUPerMin, "RU/min/replica")
				})
			}
		}
	}
}
