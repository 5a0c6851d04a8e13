package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/slots"
)

// BenchmarkOperationCost reports Cosmos DB requests and simulated request
// units per provider operation (cosmosemu/knobs' charge model, anchored on
// Azure's published point-operation costs), counted by emulator middleware
// on the benchmark's container.
func BenchmarkOperationCost(b *testing.B) {
	ctx := context.Background()
	run := 0
	measure := func(b *testing.B, container string, setup func(i int), op func(i int)) {
		run++
		read := middleware.counter(container)
		var reqs int
		var charge float64
		for i := 0; i < b.N; i++ {
			setup(i)
			r0, c0 := read()
			op(i)
			r1, c1 := read()
			reqs += r1 - r0
			charge += c1 - c0
		}
		b.ReportMetric(float64(reqs)/float64(b.N), "requests/op")
		b.ReportMetric(charge/float64(b.N), "RU/op")
	}
	b.Run("enqueue", func(b *testing.B) {
		container := "bench-enqueue"
		p := openProvider(b, quietConfig(container))
		measure(b, container, func(int) {}, func(i int) {
			if err := p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: fmt.Sprint("e", i), Name: "x"}, 0); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("orchestration_turn", func(b *testing.B) {
		container := "bench-orch"
		p := openProvider(b, quietConfig(container))
		measure(b, container, func(i int) {
			if err := p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: fmt.Sprint("o", run, "-", i), Orchestration: "O", Input: "{}", ExecutionID: 1}, 0); err != nil {
				b.Fatal(err)
			}
		}, func(i int) {
			inst := fmt.Sprint("o", run, "-", i)
			item, err := p.FetchOrchestrationItem(ctx, lockLong, 0, nil)
			if err != nil || item == nil {
				b.Fatal("fetch", err)
			}
			err = p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
					ev(inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"})},
				WorkerItems: []durable.WorkItem{durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}},
				Metadata:    durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0"}})
			if err != nil {
				b.Fatal(err)
			}
			// Keep the queue short: the work item is not part of the measurement.
		})
	})
	b.Run("work_item", func(b *testing.B) {
		container := "bench-work"
		p := openProvider(b, quietConfig(container))
		measure(b, container, func(i int) {
			if err := p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: fmt.Sprint("w", run, "-", i), ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}); err != nil {
				b.Fatal(err)
			}
		}, func(i int) {
			w, err := p.FetchWorkItem(ctx, lockLong, 0, nil, durable.AnyTag())
			if err != nil || w == nil {
				b.Fatal("fetch", err)
			}
			if err := p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: fmt.Sprint("w", run, "-", i), ExecutionID: 1, ID: 2, Result: "r"}); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkTurnCostEventDriven reports Cosmos DB requests and simulated
// request units of an orchestration turn in event-driven mode, counted on
// the instance's own partition (the engine's feed reads and lease writes
// are not part of a turn): the first turn of a new instance (fetch: one
// query and the lock batch; ack: the commit batch), and the next turn of
// that instance, woken by its activity's result and completing it, from
// the instance document the first ack left (the same three requests: the
// completion's KV merge uses the KV documents the fetch read).
//
//	go test -run '^$' -bench TurnCostEventDriven -benchtime 100x ./provider/
func BenchmarkTurnCostEventDriven(b *testing.B) {
	ctx := context.Background()
	container := freshContainer("bench-turn-ed")
	cfg := eventConfig(container)
	cfg.joinEagerly = true
	p := openProvider(b, cfg)
	turn := func(b *testing.B, inst string, took func() []keyedOp, delta []history.Event, work []durable.WorkItem, status durable.Status) (int, float64) {
		item, err := p.FetchOrchestrationItem(ctx, lockLong, 5*time.Second, nil)
		if err != nil || item == nil || item.Instance != inst {
			b.Fatal("fetch", err)
		}
		err = p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1, HistoryDelta: delta, WorkerItems: work,
			Metadata: durable.ExecutionMetadata{Status: status, OrchestrationName: "O", OrchestrationVersion: "1.0.0"}})
		if err != nil {
			b.Fatal("ack", err)
		}
		var charge float64
		rec := took()
		for _, r := range rec {
			charge += r.charge
		}
		return len(rec), charge
	}
	var firstReqs, nextReqs int
	var firstRU, nextRU float64
	for i := 0; i < b.N; i++ {
		inst := fmt.Sprint("t", i)
		took := middleware.record(container, inst)
		if err := p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0); err != nil {
			b.Fatal(err)
		}
		took()
		n, c := turn(b, inst, took, []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"}),
			ev(inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"})},
			[]durable.WorkItem{durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}}, "")
		firstReqs, firstRU = firstReqs+n, firstRU+c
		if err := p.EnqueueForOrchestrator(ctx, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "r"}, 0); err != nil {
			b.Fatal(err)
		}
		took()
		n, c = turn(b, inst, took, []history.Event{ev(inst, 1, 3, history.ActivityCompleted{Result: "r"}),
			ev(inst, 1, 4, history.OrchestrationCompleted{Output: "{}"})}, nil, durable.StatusCompleted)
		nextReqs, nextRU = nextReqs+n, nextRU+c
	}
	b.ReportMetric(float64(firstReqs)/float64(b.N), "first-turn-requests/op")
	b.ReportMetric(firstRU/float64(b.N), "first-turn-RU/op")
	b.ReportMetric(float64(nextReqs)/float64(b.N), "next-turn-requests/op")
	b.ReportMetric(nextRU/float64(b.N), "next-turn-RU/op")
}

// BenchmarkIdleReplicaCost reports the simulated request units per second
// of one idle replica with default settings, running one orchestration and
// one worker dispatcher loop as the runtime does (polling: a fetch, then
// 1 s of idle back-off; event-driven: 5 s long polls), over 30 s after a
// 5 s warm-up. The event-driven safety sweep (one query every 60 s, 9.2 RU
// on 4 partitions) falls outside the window: add 0.15 RU/s.
//
//	go test -run '^$' -bench IdleReplicaCost -benchtime 1x ./provider/
func BenchmarkIdleReplicaCost(b *testing.B) {
	for _, mode := range []Mode{ModePolling, ModeEventDriven} {
		b.Run(mode.String(), func(b *testing.B) {
			container := "bench-idle-" + mode.String()
			cfg := testConfig(container)
			cfg.Mode = mode
			cfg.ReconcileInterval, cfg.ReconcileAge = 0, 0
			p := openProvider(b, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			poll := 5 * time.Second
			loop := func(fetch func() error) {
				for ctx.Err() == nil {
					_ = fetch()
					if mode == ModePolling {
						select {
						case <-ctx.Done():
						case <-time.After(time.Second):
						}
					}
				}
			}
			go loop(func() error { _, err := p.FetchOrchestrationItem(ctx, lockLong, poll, nil); return err })
			go loop(func() error { _, err := p.FetchWorkItem(ctx, lockLong, poll, nil, durable.AnyTag()); return err })
			time.Sleep(5 * time.Second)
			read := middleware.counter(container)
			const window = 30 * time.Second
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.Sleep(window)
			}
			reqs, charge := read()
			b.ReportMetric(float64(reqs)/window.Seconds()/float64(b.N), "requests/s")
			b.ReportMetric(charge/window.Seconds()/float64(b.N), "RU/s")
		})
	}
}

// BenchmarkReplicaOwnership measures what TestReplicasShareSlots waits
// for, with the tests' lease settings (expiry 3 s, heartbeat 600 ms):
// how long until the survivors own every slot after a graceful stop
// (handoff-ms) and after a crash (takeover-ms, bounded by the expiry),
// and how long a newcomer takes to own its share from New (join-ms).
//
//	go test -run '^$' -bench ReplicaOwnership -benchtime 3x ./provider/
func BenchmarkReplicaOwnership(b *testing.B) {
	var handoff, join, takeover time.Duration
	for i := 0; i < b.N; i++ {
		cfg := replicaConfig(freshContainer(fmt.Sprint("bench-owners-", i)))
		cfg.joinEagerly = true
		open := func(id string) *Provider {
			c := cfg
			c.ReplicaID = id
			return openProvider(b, c)
		}
		await := func(what string, cond func() bool) time.Duration {
			start := time.Now()
			for !cond() {
				if time.Since(start) > hang {
					b.Fatalf("%s: not within %v", what, hang)
				}
				time.Sleep(time.Millisecond)
			}
			return time.Since(start)
		}
		x, y, z := open("a"), open("b"), open("c")
		await("start", func() bool { return ownedOnce(x, y, z) })
		start := time.Now()
		_ = z.Close()
		await("hand-off", func() bool { return ownedOnce(x, y) })
		handoff += time.Since(start)
		start = time.Now()
		w := open("d")
		fair := slots.Count / 3 / (slots.Count / slots.DefaultBlocks) * (slots.Count / slots.DefaultBlocks)
		await("join", func() bool { return ownedCount(w) >= fair })
		join += time.Since(start)
		await("balanced", func() bool { return ownedOnce(x, y, w) })
		y.Crash()
		takeover += await("take-over", func() bool { return ownedOnce(x, w) })
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
	b.ReportMetric(ms(handoff), "handoff-ms")
	b.ReportMetric(ms(join), "join-ms")
	b.ReportMetric(ms(takeover), "takeover-ms")
}
