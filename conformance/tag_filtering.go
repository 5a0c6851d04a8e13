package conformance

import (
	"fmt"
	"slices"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// tagFilteringScenarios checks activity routing by tag in FetchWorkItem:
//
//   - DefaultOnlyTags returns only untagged activities, OnlyTags only those
//     carrying one of its tags, DefaultAndTags both, AnyTag every activity
//     and NoTags none;
//   - the tag is persisted as given, both by EnqueueForWorker and by the
//     WorkerItems of AckOrchestrationItem, and survives abandon and refetch;
//   - workers with different (disjoint, overlapping or superset) filters
//     sharing the queue never receive the same item, nor one their filter
//     rejects.
func tagFilteringScenarios() []Scenario {
	return []Scenario{
		{"default_only_fetches_untagged", func(h *H) {
			inst := h.ID("inst-1")
			tagEnqueue(h, tagActivity(inst, 1, ""), tagActivity(inst, 2, "gpu"), tagActivity(inst, 3, ""))
			got := tagTake(h, h.P, durable.DefaultOnlyTags(), 2)
			require.Equal(h.T, []uint64{1, 3}, tagIDs(got))
			tagNone(h, h.P, durable.DefaultOnlyTags())
			tagNone(h, h.P, durable.TagFilter{}) // the zero value is DefaultOnly
		}},
		{"tags_fetches_only_matching", func(h *H) {
			inst := h.ID("inst-1")
			tagEnqueue(h, tagActivity(inst, 1, ""), tagActivity(inst, 2, "gpu"), tagActivity(inst, 3, "cpu"), tagActivity(inst, 4, "gpu"))
			gpu := tagOnly(h, "gpu")
			got := tagTake(h, h.P, gpu, 2)
			require.Equal(h.T, []uint64{2, 4}, tagIDs(got))
			tagNone(h, h.P, gpu)
		}},
		{"default_and_fetches_untagged_and_matching", func(h *H) {
			inst := h.ID("inst-1")
			tagEnqueue(h, tagActivity(inst, 1, ""), tagActivity(inst, 2, "gpu"), tagActivity(inst, 3, "cpu"))
			f, err := durable.DefaultAndTags("gpu")
			require.NoError(h.T, err)
			got := tagTake(h, h.P, f, 2)
			require.Equal(h.T, []uint64{1, 2}, tagIDs(got))
			tagNone(h, h.P, f)
			// The cpu item is there, just not for this filter.
			got = tagTake(h, h.P, durable.AnyTag(), 1)
			require.Equal(h.T, []uint64{3}, tagIDs(got))
		}},
		{"none_filter_returns_nothing", func(h *H) {
			inst := h.ID("inst-1")
			tagEnqueue(h, tagActivity(inst, 1, ""), tagActivity(inst, 2, "gpu"))
			// Make sure both are fetchable, then put them back.
			for _, w := range tagTakeLocked(h, h.P, durable.AnyTag(), 2) {
				require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true))
			}
			tagNone(h, h.P, durable.NoTags())
			got := tagTake(h, h.P, durable.AnyTag(), 2)
			require.Equal(h.T, []uint64{1, 2}, tagIDs(got), "NoTags must not have taken anything")
		}},
		{"multi_tag_filter", func(h *H) {
			inst := h.ID("inst-1")
			tagEnqueue(h, tagActivity(inst, 1, "gpu"), tagActivity(inst, 2, "tpu"), tagActivity(inst, 3, "cpu"), tagActivity(inst, 4, ""))
			f := tagOnly(h, "gpu", "tpu")
			got := tagTake(h, h.P, f, 2)
			require.Equal(h.T, []uint64{1, 2}, tagIDs(got))
			tagNone(h, h.P, f)
		}},
		{"tag_round_trip_preservation", func(h *H) {
			want := durable.ActivityExecute{Instance: h.ID("inst-1"), ExecutionID: 1, ID: 1, Name: "Activity1",
				Input: `{"model":"v3"}`, Tag: "gpu"}
			tagEnqueue(h, want)
			w := tagTakeLocked(h, h.P, tagOnly(h, "gpu"), 1)[0]
			require.Equal(h.T, durable.WorkItem(want), w.Item, "the item, tag included, must round-trip unchanged")
		}},
		{"any_filter_fetches_everything", func(h *H) {
			tagEnqueue(h, tagActivity(h.ID("inst-1"), 1, ""), tagActivity(h.ID("inst-2"), 2, "gpu"), tagActivity(h.ID("inst-3"), 3, "cpu"))
			got := tagTake(h, h.P, durable.AnyTag(), 3)
			require.Equal(h.T, []uint64{1, 2, 3}, tagIDs(got))
			tagNone(h, h.P, durable.AnyTag())
		}},
		{"tag_survives_abandon_and_refetch", func(h *H) {
			inst := h.ID("inst-1")
			tagEnqueue(h, tagActivity(inst, 1, "gpu"), tagActivity(inst, 2, ""))
			gpu := tagOnly(h, "gpu")
			w := tagTakeLocked(h, h.P, gpu, 1)[0]
			require.Equal(h.T, tagActivity(inst, 1, "gpu"), w.Item)
			require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, false))

			w2 := tagTakeLocked(h, h.P, gpu, 1)[0]
			require.Equal(h.T, tagActivity(inst, 1, "gpu"), w2.Item, "the tag must survive abandon")
			require.Equal(h.T, uint32(2), w2.AttemptCount)
			require.NotEqual(h.T, w.LockToken, w2.LockToken)

			got := tagTake(h, h.P, durable.DefaultOnlyTags(), 1)
			require.Equal(h.T, []uint64{2}, tagIDs(got), "DefaultOnly must see only the untagged item")
			tagNone(h, h.P, durable.DefaultOnlyTags())
		}},
		{"multi_runtime_tag_isolation", func(h *H) {
			items := []durable.ActivityExecute{
				tagActivity(h.ID("inst-1"), 1, ""),
				tagActivity(h.ID("inst-2"), 2, "gpu"),
				tagActivity(h.ID("inst-3"), 3, "cpu"),
				tagActivity(h.ID("inst-4"), 4, "fpga"),
				tagActivity(h.ID("inst-5"), 5, "gpu"),
			}
			tagEnqueue(h, items...)
			taken := map[uint64]bool{}
			take := func(p durable.Provider, f durable.TagFilter, n int) {
				h.T.Helper()
				for _, a := range tagTake(h, p, f, n) {
					require.False(h.T, taken[a.ID], "item %d was delivered twice", a.ID)
					taken[a.ID] = true
				}
			}
			remaining := func(f durable.TagFilter) int {
				n := 0
				for _, a := range items {
					if !taken[a.ID] && f.Matches(a.Tag) {
						n++
					}
				}
				return n
			}

			// Each runtime is a separate replica with its own filter.
			// Mutually exclusive: DefaultOnly gets exactly the untagged item.
			rDefault := h.Open()
			take(rDefault, durable.DefaultOnlyTags(), 1)
			require.True(h.T, taken[1])
			tagNone(h, rDefault, durable.DefaultOnlyTags())

			// Partial overlap: gpu+cpu takes two of its three items, then
			// cpu+fpga takes whatever of its own is left.
			gpuCPU, cpuFPGA := tagOnly(h, "gpu", "cpu"), tagOnly(h, "cpu", "fpga")
			take(h.Open(), gpuCPU, 2)
			rCPUFPGA := h.Open()
			take(rCPUFPGA, cpuFPGA, remaining(cpuFPGA))
			require.True(h.T, taken[4], "cpu+fpga must get the fpga item")
			tagNone(h, rCPUFPGA, cpuFPGA)

			// Full overlap: Any gets the rest, and nothing twice.
			rAny := h.Open()
			take(rAny, durable.AnyTag(), remaining(durable.AnyTag()))
			require.Len(h.T, taken, len(items))
			tagNone(h, rAny, durable.AnyTag())
		}},
		{"tag_preserved_through_ack_orchestration_item", func(h *H) {
			inst := h.ID("tag-ack-inst")
			h.Enqueue(h.P, StartItem(inst))
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			gpuWork := durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "GpuWork", Input: `"model-v3"`, Tag: "gpu"}
			cpuWork := durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 3, Name: "CpuWork", Input: `"data"`}
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: 1,
				HistoryDelta: []history.Event{Started(inst, 1),
					Event(inst, 1, 2, history.ActivityScheduled{Name: "GpuWork", Input: `"model-v3"`, Tag: "gpu"}),
					Event(inst, 1, 3, history.ActivityScheduled{Name: "CpuWork", Input: `"data"`})},
				WorkerItems: []durable.WorkItem{gpuWork, cpuWork},
				Metadata:    StartedMetadata(),
			}))

			w := tagTakeLocked(h, h.P, durable.DefaultOnlyTags(), 1)[0]
			require.Equal(h.T, durable.WorkItem(cpuWork), w.Item, "DefaultOnly must return the untagged item")
			require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, nil))
			tagNone(h, h.P, durable.DefaultOnlyTags()) // the gpu item is not untagged

			w = tagTakeLocked(h, h.P, tagOnly(h, "gpu"), 1)[0]
			require.Equal(h.T, durable.WorkItem(gpuWork), w.Item, "the ack path must persist the tag")
		}},
	}
}

// tagActivity is activity id of execution 1 of instance, named ActivityN,
// with the given tag ("" for untagged).
func tagActivity(instance string, id uint64, tag string) durable.ActivityExecute {
	return durable.ActivityExecute{Instance: instance, ExecutionID: 1, ID: id, Name: fmt.Sprintf("Activity%d", id), Input: "{}", Tag: tag}
}

// tagEnqueue puts the activities on h.P's worker queue, in order.
func tagEnqueue(h *H, acts ...durable.ActivityExecute) {
	h.T.Helper()
	for _, a := range acts {
		require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, a))
	}
}

// tagOnly is OnlyTags(tags...), failing the scenario on error.
func tagOnly(h *H, tags ...string) durable.TagFilter {
	h.T.Helper()
	f, err := durable.OnlyTags(tags...)
	require.NoError(h.T, err)
	return f
}

// tagTakeLocked fetches n work items from p with filter (each retried
// briefly, for providers that make new work visible with a delay), checks
// that each is an ActivityExecute the filter accepts, and returns them,
// still locked.
func tagTakeLocked(h *H, p durable.Provider, filter durable.TagFilter, n int) []*durable.LockedWorkItem {
	h.T.Helper()
	var out []*durable.LockedWorkItem
	for i := range n {
		var w *durable.LockedWorkItem
		h.Eventually(func() bool {
			var err error
			w, err = p.FetchWorkItem(h.Ctx, LongLock, 0, nil, filter)
			require.NoError(h.T, err)
			return w != nil
		}, fmt.Sprintf("work item %d of %d for tag filter %s", i+1, n, filter))
		a, ok := w.Item.(durable.ActivityExecute)
		require.True(h.T, ok, "expected ActivityExecute, got %T", w.Item)
		require.True(h.T, filter.Matches(a.Tag), "filter %s returned an item tagged %q", filter, a.Tag)
		out = append(out, w)
	}
	return out
}

// tagTake is tagTakeLocked returning the activities.
func tagTake(h *H, p durable.Provider, filter durable.TagFilter, n int) []durable.ActivityExecute {
	h.T.Helper()
	var out []durable.ActivityExecute
	for _, w := range tagTakeLocked(h, p, filter, n) {
		out = append(out, w.Item.(durable.ActivityExecute))
	}
	return out
}

// tagNone asserts that p has no work item for filter now.
func tagNone(h *H, p durable.Provider, filter durable.TagFilter) {
	h.T.Helper()
	w, err := p.FetchWorkItem(h.Ctx, LongLock, 0, nil, filter)
	require.NoError(h.T, err)
	if w != nil {
		h.T.Fatalf("tag filter %s: expected no work item, got %+v", filter, w.Item)
	}
}

// tagIDs returns the activities' ids, sorted.
func tagIDs(acts []durable.ActivityExecute) []uint64 {
	ids := make([]uint64, 0, len(acts))
	for _, a := range acts {
		ids = append(ids, a.ID)
	}
	slices.Sort(ids)
	return ids
}
