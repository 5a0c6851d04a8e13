package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
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
