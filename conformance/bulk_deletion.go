package conformance

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

// bulkDeletionScenarios check DeleteInstanceBulk:
//   - it deletes the terminal root instances matching the filter (ids,
//     CompletedBefore and Limit, ANDed), each with all its descendants, and
//     counts every deleted instance;
//   - it skips running instances and sub-orchestrations without error;
//   - unknown ids delete nothing; an empty filter matches every terminal
//     root; Limit caps each call so repeated calls drain the store.
func bulkDeletionScenarios() []Scenario {
	return []Scenario{
		// Ported from duroxide's bulk_deletion.rs.
		{"delete_instance_bulk_filter_combinations", bulkFilterCombinations},
		{"delete_instance_bulk_safety_and_limits", bulkSafetyAndLimits},
		{"delete_instance_bulk_completed_before_filter", bulkCompletedBefore},
		{"delete_instance_bulk_cascades_to_children", bulkCascades},
		// From the ProviderAdmin contract.
		{"delete_instance_bulk_skips_sub_orchestrations", bulkSkipsSubOrchestrations},
		{"delete_instance_bulk_deletes_failed_and_completed_only", bulkTerminalStatuses},
	}
}

// bulkDelete runs DeleteInstanceBulk and returns how many instances it deleted.
func bulkDelete(h *H, a durable.ProviderAdmin, f durable.InstanceFilter) uint64 {
	h.T.Helper()
	res, err := a.DeleteInstanceBulk(h.Ctx, f)
	require.NoError(h.T, err)
	return res.InstancesDeleted
}

func bulkFilterCombinations(h *H) {
	a := h.Admin()
	var ids []string
	for _, n := range []string{"f-0", "f-1", "f-2", "f-3", "f-4"} {
		ids = append(ids, h.ID(n))
		mgmtInstance(h, h.P, h.ID(n), "", durable.StatusCompleted)
	}

	res, err := a.DeleteInstanceBulk(h.Ctx, durable.InstanceFilter{InstanceIDs: ids[:2]})
	require.NoError(h.T, err)
	require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 2, ExecutionsDeleted: 2, EventsDeleted: 4}, res)
	mgmtGone(h, a, ids[0])
	mgmtGone(h, a, ids[1])
	require.ElementsMatch(h.T, ids[2:], mgmtList(h, a))

	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: []string{h.ID("nope-1"), h.ID("nope-2")}}),
		"unknown ids delete nothing")
	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: []string{}}),
		"an empty (non-nil) id list matches nothing")
	require.Len(h.T, mgmtList(h, a), 3)

	// Ids AND time: a cutoff in the past matches none of the listed ids.
	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: ids[2:3],
		CompletedBefore: time.Now().Add(-time.Hour)}))
	mgmtExists(h, a, ids[2])

	require.Equal(h.T, uint64(3), bulkDelete(h, a, durable.InstanceFilter{}), "an empty filter matches every terminal root")
	require.Empty(h.T, mgmtList(h, a))
}

func bulkSafetyAndLimits(h *H) {
	a := h.Admin()
	done1, done2 := h.ID("completed-1"), h.ID("completed-2")
	run1, run2 := h.ID("running-1"), h.ID("running-2")
	mgmtInstance(h, h.P, done1, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, done2, "", durable.StatusCompleted)
	h.CreateInstance(h.P, run1)
	h.CreateInstance(h.P, run2)

	require.Equal(h.T, uint64(2), bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: []string{done1, done2, run1, run2}}),
		"running instances are skipped, not errors")
	mgmtExists(h, a, run1)
	mgmtExists(h, a, run2)
	mgmtGone(h, a, done1)
	mgmtGone(h, a, done2)

	for _, n := range []string{"batch-0", "batch-1", "batch-2", "batch-3"} {
		mgmtInstance(h, h.P, h.ID(n), "", durable.StatusCompleted)
	}
	require.Equal(h.T, uint64(2), bulkDelete(h, a, durable.InstanceFilter{Limit: 2}), "first batch")
	require.Len(h.T, mgmtList(h, a), 4)
	require.Equal(h.T, uint64(2), bulkDelete(h, a, durable.InstanceFilter{Limit: 2}), "second batch")
	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{Limit: 2}), "nothing terminal is left")
	require.ElementsMatch(h.T, []string{run1, run2}, mgmtList(h, a))
}

func bulkCompletedBefore(h *H) {
	a := h.Admin()
	old1, old2, recent := h.ID("time-1"), h.ID("time-2"), h.ID("time-3")
	beforeAll := time.Now()
	h.Sleep(mgmtTick)
	mgmtInstance(h, h.P, old1, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, old2, "", durable.StatusFailed)
	h.Sleep(mgmtTick)
	between := time.Now()
	h.Sleep(mgmtTick)
	mgmtInstance(h, h.P, recent, "", durable.StatusCompleted)
	ids := []string{old1, old2, recent}

	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: ids, CompletedBefore: beforeAll}),
		"nothing completed before the cutoff")
	require.Len(h.T, mgmtList(h, a), 3)

	require.Equal(h.T, uint64(2), bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: ids, CompletedBefore: between}))
	mgmtGone(h, a, old1)
	mgmtGone(h, a, old2)
	mgmtExists(h, a, recent)

	h.Sleep(mgmtTick)
	require.Equal(h.T, uint64(1), bulkDelete(h, a, durable.InstanceFilter{CompletedBefore: time.Now()}))
	mgmtGone(h, a, recent)
}

func bulkCascades(h *H) {
	a := h.Admin()
	parent1, child1 := h.ID("parent1"), h.ID("child1")
	parent2 := h.ID("parent2")
	children2 := []string{h.ID("child2a"), h.ID("child2b"), h.ID("child2c")}
	standalone := h.ID("standalone")
	mgmtInstance(h, h.P, parent1, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, child1, parent1, durable.StatusCompleted)
	mgmtInstance(h, h.P, parent2, "", durable.StatusCompleted)
	for _, c := range children2 {
		mgmtInstance(h, h.P, c, parent2, durable.StatusCompleted)
	}
	mgmtInstance(h, h.P, standalone, "", durable.StatusCompleted)

	res, err := a.DeleteInstanceBulk(h.Ctx, durable.InstanceFilter{InstanceIDs: []string{parent1, parent2, standalone}})
	require.NoError(h.T, err)
	require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 7, ExecutionsDeleted: 7, EventsDeleted: 14}, res,
		"3 roots and their 4 children")
	for _, id := range append([]string{parent1, child1, parent2, standalone}, children2...) {
		mgmtGone(h, a, id)
	}
}

func bulkSkipsSubOrchestrations(h *H) {
	a := h.Admin()
	root, child := h.ID("root"), h.ID("child")
	mgmtInstance(h, h.P, root, "", durable.StatusRunning)
	mgmtInstance(h, h.P, child, root, durable.StatusCompleted)

	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{InstanceIDs: []string{child}}),
		"a sub-orchestration is deleted only with its root")
	require.Zero(h.T, bulkDelete(h, a, durable.InstanceFilter{}), "the only terminal instance is a sub-orchestration")
	mgmtExists(h, a, root)
	mgmtExists(h, a, child)
	children, err := a.ListChildren(h.Ctx, root)
	require.NoError(h.T, err)
	require.Equal(h.T, []string{child}, children)
}

func bulkTerminalStatuses(h *H) {
	a := h.Admin()
	done, failed, running := h.ID("completed"), h.ID("failed"), h.ID("running")
	mgmtInstance(h, h.P, done, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, failed, "", durable.StatusFailed)
	mgmtExecutions(h, h.P, running, 2, durable.StatusRunning)

	require.Equal(h.T, uint64(2), bulkDelete(h, a, durable.InstanceFilter{}))
	require.Equal(h.T, []string{running}, mgmtList(h, a))
	require.Equal(h.T, []uint64{1, 2}, mgmtExecs(h, a, running), "a skipped instance keeps all its executions")
	require.Equal(h.T, durable.StatusRunning, mgmtExists(h, a, running).Status)
}
