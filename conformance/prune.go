package conformance

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// pruneScenarios check execution pruning:
//   - PruneExecutions deletes an instance's old executions (their history and
//     metadata) and reports exact counts; KeepLast N keeps the N newest, 0
//     and 1 (and no options at all) keep only the current execution;
//     CompletedBefore prunes only executions that ended before it; criteria
//     are ANDed;
//   - it never deletes the current execution, nor a running one, so the
//     instance keeps working; key-value entries are instance-scoped and
//     survive; an unknown instance is a permanent error;
//   - PruneExecutionsBulk prunes every instance matching the filter
//     (running ones included), honours ids, CompletedBefore and Limit, and
//     counts the instances it processed.
func pruneScenarios() []Scenario {
	return []Scenario{
		// Ported from duroxide's prune.rs.
		{"prune_options_combinations", pruneOptionsCombinations},
		{"prune_safety", pruneSafety},
		{"prune_bulk", pruneBulk},
		{"prune_bulk_includes_running_instances", pruneBulkIncludesRunning},
		// From the ProviderAdmin contract and the provider guide's checklist.
		{"prune_keep_last_keeps_newest_executions", pruneKeepLastKeepsNewest},
		{"prune_never_prunes_running_current_execution", pruneRunningCurrent},
		{"prune_completed_before", pruneCompletedBefore},
		{"prune_criteria_are_anded", pruneCriteriaAnded},
		{"prune_keeps_kv_entries", pruneKeepsKV},
		{"prune_single_execution_is_noop", pruneSingleExecution},
		{"prune_bulk_honours_completed_before_and_limit", pruneBulkFilter},
	}
}

// pruneRun runs PruneExecutions and returns its result.
func pruneRun(h *H, a durable.ProviderAdmin, instance string, o durable.PruneOptions) durable.PruneResult {
	h.T.Helper()
	res, err := a.PruneExecutions(h.Ctx, instance, o)
	require.NoError(h.T, err)
	return res
}

// pruneBulkRun runs PruneExecutionsBulk and returns its result.
func pruneBulkRun(h *H, a durable.ProviderAdmin, f durable.InstanceFilter, o durable.PruneOptions) durable.PruneResult {
	h.T.Helper()
	res, err := a.PruneExecutionsBulk(h.Ctx, f, o)
	require.NoError(h.T, err)
	return res
}

func pruneOptionsCombinations(h *H) {
	a := h.Admin()
	id := h.ID("options")
	mgmtExecutions(h, h.P, id, 4, durable.StatusCompleted)
	require.Equal(h.T, []uint64{1, 2, 3, 4}, mgmtExecs(h, a, id))

	res := pruneRun(h, a, id, durable.PruneOptions{KeepLast: 2})
	require.Equal(h.T, durable.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 2, EventsDeleted: 4}, res)
	require.Equal(h.T, []uint64{3, 4}, mgmtExecs(h, a, id), "the newest executions are kept")

	empty := h.ID("options-empty")
	mgmtExecutions(h, h.P, empty, 3, durable.StatusCompleted)
	current := mgmtExists(h, a, empty).CurrentExecutionID
	res = pruneRun(h, a, empty, durable.PruneOptions{})
	require.Equal(h.T, uint64(2), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{current}, mgmtExecs(h, a, empty), "no options prunes everything but the current execution")
}

func pruneSafety(h *H) {
	a := h.Admin()
	id := h.ID("current")
	mgmtExecutions(h, h.P, id, 3, durable.StatusCompleted)
	pruneRun(h, a, id, durable.PruneOptions{KeepLast: 0})
	info := mgmtExists(h, a, id)
	require.Equal(h.T, uint64(3), info.CurrentExecutionID)
	require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, id))

	_, err := a.PruneExecutions(h.Ctx, h.ID("does-not-exist"), durable.PruneOptions{KeepLast: 1})
	mgmtPermanent(h, err, "pruning an unknown instance")

	for _, c := range []struct {
		name string
		opts durable.PruneOptions
	}{{"none", durable.PruneOptions{}}, {"zero", durable.PruneOptions{KeepLast: 0}}, {"one", durable.PruneOptions{KeepLast: 1}}} {
		inst := h.ID("terminal-" + c.name)
		mgmtExecutions(h, h.P, inst, 4, durable.StatusCompleted)
		info := mgmtExists(h, a, inst)
		require.Equal(h.T, durable.StatusCompleted, info.Status)
		res := pruneRun(h, a, inst, c.opts)
		require.Equal(h.T, durable.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 3, EventsDeleted: 6}, res, "options %s", c.name)
		require.Equal(h.T, []uint64{info.CurrentExecutionID}, mgmtExecs(h, a, inst), "options %s", c.name)
		require.Equal(h.T, durable.StatusCompleted, mgmtExists(h, a, inst).Status, "pruning does not change the status")
	}
}

func pruneBulk(h *H) {
	a := h.Admin()
	ids := []string{h.ID("bulk-0"), h.ID("bulk-1"), h.ID("bulk-2")}
	for _, id := range ids {
		mgmtExecutions(h, h.P, id, 4, durable.StatusCompleted)
	}
	res := pruneBulkRun(h, a, durable.InstanceFilter{InstanceIDs: ids[:2]}, durable.PruneOptions{KeepLast: 1})
	require.Equal(h.T, durable.PruneResult{InstancesProcessed: 2, ExecutionsDeleted: 6, EventsDeleted: 12}, res)
	require.Equal(h.T, []uint64{4}, mgmtExecs(h, a, ids[0]))
	require.Equal(h.T, []uint64{4}, mgmtExecs(h, a, ids[1]))
	require.Equal(h.T, []uint64{1, 2, 3, 4}, mgmtExecs(h, a, ids[2]), "an instance outside the filter is untouched")
}

func pruneBulkIncludesRunning(h *H) {
	a := h.Admin()
	id := h.ID("running")
	mgmtExecutions(h, h.P, id, 3, durable.StatusRunning)
	require.Equal(h.T, []uint64{1, 2, 3}, mgmtExecs(h, a, id))
	info := mgmtExists(h, a, id)
	require.Equal(h.T, durable.StatusRunning, info.Status)
	require.Equal(h.T, uint64(3), info.CurrentExecutionID)

	res := pruneBulkRun(h, a, durable.InstanceFilter{InstanceIDs: []string{id}}, durable.PruneOptions{KeepLast: 1})
	require.Equal(h.T, uint64(1), res.InstancesProcessed, "a running instance is processed")
	require.Equal(h.T, uint64(2), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, id))
	require.Equal(h.T, durable.StatusRunning, mgmtExists(h, a, id).Status)
}

// ---- Scenarios from the contract.

func pruneKeepLastKeepsNewest(h *H) {
	a := h.Admin()
	id := h.ID("newest")
	mgmtExecutions(h, h.P, id, 5, durable.StatusCompleted)

	res := pruneRun(h, a, id, durable.PruneOptions{KeepLast: 10})
	require.Equal(h.T, durable.PruneResult{InstancesProcessed: 1}, res, "keeping more than exist prunes nothing")
	require.Equal(h.T, []uint64{1, 2, 3, 4, 5}, mgmtExecs(h, a, id))

	res = pruneRun(h, a, id, durable.PruneOptions{KeepLast: 3})
	require.Equal(h.T, durable.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 2, EventsDeleted: 4}, res)
	require.Equal(h.T, []uint64{3, 4, 5}, mgmtExecs(h, a, id))
	for _, gone := range []uint64{1, 2} {
		evs, err := a.ReadHistoryWithExecutionID(h.Ctx, id, gone)
		require.NoError(h.T, err)
		require.Empty(h.T, evs, "execution %d's history must be pruned", gone)
		_, err = a.GetExecutionInfo(h.Ctx, id, gone)
		mgmtPermanent(h, err, "GetExecutionInfo of a pruned execution")
	}
	for _, kept := range []uint64{3, 4, 5} {
		evs, err := a.ReadHistoryWithExecutionID(h.Ctx, id, kept)
		require.NoError(h.T, err)
		require.Len(h.T, evs, 2, "execution %d's history must be intact", kept)
		require.Equal(h.T, kept, evs[0].ExecutionID)
	}
	latest, err := a.LatestExecutionID(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(5), latest)
	m, err := a.GetSystemMetrics(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.SystemMetrics{TotalInstances: 1, TotalExecutions: 3, CompletedInstances: 1, TotalEvents: 6}, m)
}

func pruneRunningCurrent(h *H) {
	a := h.Admin()
	id := h.ID("running")
	mgmtExecutions(h, h.P, id, 3, durable.StatusRunning)
	res := pruneRun(h, a, id, durable.PruneOptions{KeepLast: 0, CompletedBefore: time.Now().Add(time.Hour)})
	require.Equal(h.T, uint64(2), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, id))

	// The running execution keeps working after the prune.
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "go", Data: "{}"})
	item := mgmtFetch(h, h.P, id)
	require.Equal(h.T, uint64(3), item.ExecutionID)
	require.Len(h.T, item.History, 1)
	h.Complete(h.P, item, "finished")
	info := mgmtExists(h, a, id)
	require.Equal(h.T, durable.StatusCompleted, info.Status)
	require.Equal(h.T, uint64(3), info.CurrentExecutionID)
	hist, err := a.ReadHistory(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, hist, 2)
}

func pruneCompletedBefore(h *H) {
	a := h.Admin()
	id := h.ID("dated")
	item := mgmtStart(h, h.P, id, "")
	mgmtAckExecution(h, h.P, item, 1, "", durable.StatusContinuedAsNew)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 2), 2, "", durable.StatusContinuedAsNew)
	h.Sleep(mgmtTick)
	cutoff := time.Now()
	h.Sleep(mgmtTick)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 3), 3, "", durable.StatusContinuedAsNew)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 4), 4, "", durable.StatusCompleted)

	res := pruneRun(h, a, id, durable.PruneOptions{CompletedBefore: cutoff})
	require.Equal(h.T, durable.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 2, EventsDeleted: 4}, res)
	require.Equal(h.T, []uint64{3, 4}, mgmtExecs(h, a, id), "executions that ended after the cutoff are kept")

	h.Sleep(mgmtTick)
	res = pruneRun(h, a, id, durable.PruneOptions{CompletedBefore: time.Now()})
	require.Equal(h.T, uint64(1), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{4}, mgmtExecs(h, a, id), "the current execution is kept even if it ended before the cutoff")
}

func pruneCriteriaAnded(h *H) {
	a := h.Admin()
	id := h.ID("anded")
	item := mgmtStart(h, h.P, id, "")
	mgmtAckExecution(h, h.P, item, 1, "", durable.StatusContinuedAsNew)
	h.Sleep(mgmtTick)
	cutoff := time.Now()
	h.Sleep(mgmtTick)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 2), 2, "", durable.StatusContinuedAsNew)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 3), 3, "", durable.StatusContinuedAsNew)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 4), 4, "", durable.StatusCompleted)

	// KeepLast 2 alone would prune 1 and 2; CompletedBefore alone only 1.
	res := pruneRun(h, a, id, durable.PruneOptions{KeepLast: 2, CompletedBefore: cutoff})
	require.Equal(h.T, uint64(1), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{2, 3, 4}, mgmtExecs(h, a, id))

	// CompletedBefore now alone would prune 2 and 3; KeepLast 2 only 2.
	h.Sleep(mgmtTick)
	res = pruneRun(h, a, id, durable.PruneOptions{KeepLast: 2, CompletedBefore: time.Now()})
	require.Equal(h.T, uint64(1), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{3, 4}, mgmtExecs(h, a, id))
}

func pruneKeepsKV(h *H) {
	a := h.Admin()
	id := h.ID("kv")
	now := uint64(time.Now().UnixMilli())
	item := mgmtStart(h, h.P, id, "")
	mgmtAckExecution(h, h.P, item, 1, "", durable.StatusContinuedAsNew, history.KeyValueSet{Key: "k1", Value: "v1", LastUpdatedAtMS: now})
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 2), 2, "", durable.StatusContinuedAsNew,
		history.KeyValueSet{Key: "k2", Value: "v2", LastUpdatedAtMS: now})
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 3), 3, "", durable.StatusRunning)

	res := pruneRun(h, a, id, durable.PruneOptions{KeepLast: 1})
	require.Equal(h.T, uint64(2), res.ExecutionsDeleted)
	require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, id))

	kv, err := h.P.GetKVAllValues(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, map[string]string{"k1": "v1", "k2": "v2"}, kv, "key-value entries are instance-scoped and survive pruning")
	v, ok, err := h.P.GetKVValue(h.Ctx, id, "k1")
	require.NoError(h.T, err)
	require.True(h.T, ok)
	require.Equal(h.T, "v1", v)
	stats, err := h.P.GetInstanceStats(h.Ctx, id)
	require.NoError(h.T, err)
	require.NotNil(h.T, stats)
	require.Equal(h.T, uint64(3), stats.ExecutionID)
	require.Equal(h.T, uint64(1), stats.HistoryEventCount)
	require.Equal(h.T, uint64(2), stats.KVKeyCount)

	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "go", Data: "{}"})
	next := mgmtFetch(h, h.P, id)
	require.Len(h.T, next.KVSnapshot, 2, "the next turn still sees the key-value entries")
	require.Equal(h.T, "v2", next.KVSnapshot["k2"].Value)
}

func pruneSingleExecution(h *H) {
	a := h.Admin()
	done, running := h.ID("single-done"), h.ID("single-running")
	mgmtInstance(h, h.P, done, "", durable.StatusCompleted)
	h.CreateInstance(h.P, running)
	for _, id := range []string{done, running} {
		res := pruneRun(h, a, id, durable.PruneOptions{KeepLast: 0, CompletedBefore: time.Now().Add(time.Hour)})
		require.Equal(h.T, durable.PruneResult{InstancesProcessed: 1}, res, "instance %q", id)
		require.Equal(h.T, []uint64{1}, mgmtExecs(h, a, id))
		hist, err := a.ReadHistory(h.Ctx, id)
		require.NoError(h.T, err)
		require.NotEmpty(h.T, hist, "the only execution's history is kept")
	}
}

func pruneBulkFilter(h *H) {
	a := h.Admin()
	old1, old2, recent := h.ID("old-1"), h.ID("old-2"), h.ID("recent")
	mgmtExecutions(h, h.P, old1, 3, durable.StatusCompleted)
	mgmtExecutions(h, h.P, old2, 3, durable.StatusFailed)
	h.Sleep(mgmtTick)
	cutoff := time.Now()
	h.Sleep(mgmtTick)
	mgmtExecutions(h, h.P, recent, 3, durable.StatusCompleted)
	running := h.ID("running")
	mgmtExecutions(h, h.P, running, 2, durable.StatusRunning)

	res := pruneBulkRun(h, a, durable.InstanceFilter{CompletedBefore: cutoff}, durable.PruneOptions{KeepLast: 1})
	require.Equal(h.T, durable.PruneResult{InstancesProcessed: 2, ExecutionsDeleted: 4, EventsDeleted: 8}, res,
		"only instances that ended before the cutoff match")
	require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, old1))
	require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, old2))
	require.Equal(h.T, []uint64{1, 2, 3}, mgmtExecs(h, a, recent))
	require.Equal(h.T, []uint64{1, 2}, mgmtExecs(h, a, running), "a running instance has not completed before any time")

	res = pruneBulkRun(h, a, durable.InstanceFilter{Limit: 1}, durable.PruneOptions{KeepLast: 1})
	require.Equal(h.T, uint64(1), res.InstancesProcessed, "Limit caps the instances processed")

	res = pruneBulkRun(h, a, durable.InstanceFilter{}, durable.PruneOptions{KeepLast: 1})
	require.Equal(h.T, uint64(4), res.InstancesProcessed, "an empty filter matches every instance")
	for _, id := range []string{old1, old2, recent} {
		require.Equal(h.T, []uint64{3}, mgmtExecs(h, a, id))
	}
	require.Equal(h.T, []uint64{2}, mgmtExecs(h, a, running))
}
