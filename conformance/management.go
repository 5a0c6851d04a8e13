package conformance

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// managementScenarios check the read side of ProviderAdmin:
//   - ListInstances lists every instance, newest first; ListInstancesByStatus
//     lists exactly the instances whose current execution has the status;
//     ListInstancesFiltered combines the status, a creation-time range
//     (from inclusive, to exclusive) and the exact orchestration name, in
//     the same order;
//   - ListExecutions lists execution ids ascending (empty for an unknown
//     instance); LatestExecutionID, ReadHistory and ReadHistoryWithExecutionID
//     see the current or the named execution only;
//   - GetInstanceInfo and GetExecutionInfo report what the turns stored
//     (name, version, status, output, parent, custom status, timestamps,
//     event counts) and fail permanently for an unknown instance or
//     execution;
//   - GetSystemMetrics counts instances by status, executions and events;
//     GetQueueDepths counts visible unlocked messages per queue, with delayed
//     orchestrator messages counted as timers;
//   - another replica on the same store sees the same data.
func managementScenarios() []Scenario {
	return []Scenario{
		// Ported from duroxide's management.rs.
		{"list_instances", mgmtListInstances},
		{"list_instances_by_status", mgmtListInstancesByStatus},
		{"list_executions", mgmtListExecutions},
		{"get_instance_info", mgmtGetInstanceInfo},
		{"get_execution_info", mgmtGetExecutionInfo},
		{"get_system_metrics", mgmtGetSystemMetrics},
		{"get_queue_depths", mgmtGetQueueDepths},
		// From the ProviderAdmin contract and the provider guide's checklist.
		{"list_instances_newest_first", mgmtListInstancesNewestFirst},
		{"empty_store_reports_nothing", mgmtEmptyStore},
		{"list_instances_by_status_each_status", mgmtListInstancesByEachStatus},
		{"list_executions_ascending_after_continue_as_new", mgmtListExecutionsAfterContinueAsNew},
		{"list_executions_unknown_instance_is_empty", mgmtListExecutionsUnknown},
		{"read_history_with_execution_id_isolates_executions", mgmtReadHistoryIsolation},
		{"latest_execution_id_unknown_instance_is_permanent", mgmtLatestExecutionIDUnknown},
		{"get_instance_info_unknown_instance_is_permanent", mgmtGetInstanceInfoUnknown},
		{"get_execution_info_unknown_is_permanent", mgmtGetExecutionInfoUnknown},
		{"get_instance_info_tracks_status_output_and_execution", mgmtInstanceInfoTracksTurns},
		{"get_execution_info_per_execution", mgmtExecutionInfoPerExecution},
		{"get_instance_info_names_parent_of_sub_orchestration", mgmtInstanceInfoParent},
		{"get_system_metrics_counts_by_status", mgmtSystemMetricsByStatus},
		{"get_queue_depths_excludes_locked_messages", mgmtQueueDepthsExcludeLocked},
		{"get_queue_depths_counts_delayed_messages_as_timers", mgmtQueueDepthsTimers},
		{"admin_reads_from_another_replica", mgmtAnotherReplica},
		{"list_instances_filtered_by_status_creation_and_name", mgmtListInstancesFiltered},
		{"get_instance_info_reports_custom_status", mgmtInstanceInfoCustomStatus},
	}
}

// ---- Helpers shared by the management, deletion, bulk_deletion and prune
// categories (all prefixed mgmt).

// mgmtOutput is the output the helpers store for completed executions, and
// mgmtFailure the error message for failed ones.
const (
	mgmtOutput  = "done"
	mgmtFailure = "boom"
)

// mgmtNextInput is the input the helpers hand from execution exec to the next.
func mgmtNextInput(exec uint64) string { return fmt.Sprintf(`{"next":%d}`, exec+1) }

// mgmtPermanent asserts that err is a permanent provider error.
func mgmtPermanent(h *H, err error, what string) {
	h.T.Helper()
	require.Error(h.T, err, "%s: expected a permanent error", what)
	require.True(h.T, errors.Is(err, durable.ErrPermanent), "%s: expected a permanent error, got %v", what, err)
}

// mgmtFetch fetches the next orchestration item with a long lock and requires
// it to belong to instance.
func mgmtFetch(h *H, p durable.Provider, instance string) *durable.OrchestrationItem {
	h.T.Helper()
	item := h.MustFetchOrch(p, LongLock)
	require.Equal(h.T, instance, item.Instance, "fetched an item of another instance")
	return item
}

// mgmtStart enqueues instance's StartOrchestration (as a sub-orchestration of
// parent when parent is not empty) and returns the locked first item.
func mgmtStart(h *H, p durable.Provider, instance, parent string) *durable.OrchestrationItem {
	h.T.Helper()
	return mgmtStartNamed(h, p, instance, parent, TestOrchestration)
}

// mgmtStartNamed is mgmtStart for an orchestration of the given name.
func mgmtStartNamed(h *H, p durable.Provider, instance, parent, name string) *durable.OrchestrationItem {
	h.T.Helper()
	start := StartItem(instance)
	start.Orchestration = name
	if parent != "" {
		start.ParentInstance = parent
		start.ParentID = 2
	}
	h.Enqueue(p, start)
	return mgmtFetch(h, p, instance)
}

// mgmtAckExecution acks item as the single turn of execution exec: it writes
// OrchestrationStarted (event 1), then extra, then the event ending the
// execution with end: OrchestrationCompleted (output mgmtOutput),
// OrchestrationFailed (mgmtFailure) or OrchestrationContinuedAsNew, which
// also enqueues the ContinueAsNew message starting execution exec+1 with
// input mgmtNextInput(exec). StatusRunning leaves the execution running.
// The instance is a sub-orchestration of parent when parent is not empty.
func mgmtAckExecution(h *H, p durable.Provider, item *durable.OrchestrationItem, exec uint64, parent string, end durable.Status, extra ...history.EventKind) {
	h.T.Helper()
	mgmtAckNamed(h, p, item, TestOrchestration, exec, parent, end, extra...)
}

// mgmtAckNamed is mgmtAckExecution for an orchestration of the given name.
func mgmtAckNamed(h *H, p durable.Provider, item *durable.OrchestrationItem, name string, exec uint64, parent string, end durable.Status, extra ...history.EventKind) {
	h.T.Helper()
	instance := item.Instance
	input := "{}"
	if exec > 1 {
		input = mgmtNextInput(exec - 1)
	}
	started := history.OrchestrationStarted{Name: name, Version: TestVersion, Input: input}
	if parent != "" {
		started.ParentInstance = parent
		started.ParentID = 2
	}
	events := []history.Event{Event(instance, exec, 1, started)}
	for _, k := range extra {
		events = append(events, Event(instance, exec, uint64(len(events))+1, k))
	}
	turn := durable.OrchestrationTurn{ExecutionID: exec, Metadata: durable.ExecutionMetadata{
		Status: end, OrchestrationName: name, OrchestrationVersion: TestVersion, ParentInstanceID: parent}}
	next := uint64(len(events)) + 1
	switch end {
	case durable.StatusCompleted:
		events = append(events, Event(instance, exec, next, history.OrchestrationCompleted{Output: mgmtOutput}))
		turn.Metadata.Output = Str(mgmtOutput)
	case durable.StatusFailed:
		details := history.ApplicationError(history.AppOrchestrationFailed, mgmtFailure, false)
		events = append(events, Event(instance, exec, next, history.OrchestrationFailed{Details: details}))
		turn.Metadata.Output = Str(details.DisplayMessage())
	case durable.StatusContinuedAsNew:
		in := mgmtNextInput(exec)
		events = append(events, Event(instance, exec, next, history.OrchestrationContinuedAsNew{Input: in, Version: TestVersion}))
		turn.Metadata.Output = Str(in)
		turn.OrchestratorItems = []durable.WorkItem{durable.ContinueAsNew{Instance: instance,
			Orchestration: name, Input: in, Version: TestVersion}}
	case durable.StatusRunning:
	default:
		h.T.Fatalf("mgmtAckExecution: unsupported end status %q", end)
	}
	turn.HistoryDelta = events
	require.NoError(h.T, p.AckOrchestrationItem(h.Ctx, item.LockToken, turn))
}

// mgmtInstance creates an instance in one turn that ends with status (as a
// sub-orchestration of parent when parent is not empty).
func mgmtInstance(h *H, p durable.Provider, instance, parent string, status durable.Status) {
	h.T.Helper()
	mgmtAckExecution(h, p, mgmtStart(h, p, instance, parent), 1, parent, status)
}

// mgmtContinueAsNew fetches the ContinueAsNew message that the previous
// execution (exec-1) of instance enqueued, and returns the locked item.
func mgmtContinueAsNew(h *H, p durable.Provider, instance string, exec uint64) *durable.OrchestrationItem {
	h.T.Helper()
	item := mgmtFetch(h, p, instance)
	require.Equal(h.T, exec-1, item.ExecutionID, "the continue-as-new turn runs on the previous execution")
	require.Len(h.T, item.Messages, 1)
	_, ok := item.Messages[0].(durable.ContinueAsNew)
	require.True(h.T, ok, "expected the ContinueAsNew message, got %s", item.Messages[0].Kind())
	return item
}

// mgmtExecutions creates a root instance with n executions: executions 1 to
// n-1 continue as new, execution n ends with final (StatusRunning leaves it
// running). Each execution holds OrchestrationStarted and, unless it is
// still running, the event that ended it.
func mgmtExecutions(h *H, p durable.Provider, instance string, n uint64, final durable.Status) {
	h.T.Helper()
	item := mgmtStart(h, p, instance, "")
	for exec := uint64(1); exec <= n; exec++ {
		end := durable.StatusContinuedAsNew
		if exec == n {
			end = final
		}
		mgmtAckExecution(h, p, item, exec, "", end)
		if exec < n {
			item = mgmtContinueAsNew(h, p, instance, exec+1)
		}
	}
}

// mgmtExists asserts that the instance exists for GetInstanceInfo.
func mgmtExists(h *H, a durable.ProviderAdmin, instance string) durable.InstanceInfo {
	h.T.Helper()
	info, err := a.GetInstanceInfo(h.Ctx, instance)
	require.NoError(h.T, err, "instance %q should exist", instance)
	require.Equal(h.T, instance, info.InstanceID)
	return info
}

// mgmtGone asserts that the instance no longer exists: GetInstanceInfo fails
// permanently and its history and executions are empty.
func mgmtGone(h *H, a durable.ProviderAdmin, instance string) {
	h.T.Helper()
	_, err := a.GetInstanceInfo(h.Ctx, instance)
	mgmtPermanent(h, err, fmt.Sprintf("GetInstanceInfo of deleted instance %q", instance))
	execs, err := a.ListExecutions(h.Ctx, instance)
	require.NoError(h.T, err)
	require.Empty(h.T, execs, "deleted instance %q still has executions", instance)
	hist, err := h.P.Read(h.Ctx, instance)
	require.NoError(h.T, err)
	require.Empty(h.T, hist, "deleted instance %q still has history", instance)
}

// mgmtList returns ListInstances.
func mgmtList(h *H, a durable.ProviderAdmin) []string {
	h.T.Helper()
	ids, err := a.ListInstances(h.Ctx)
	require.NoError(h.T, err)
	return ids
}

// mgmtByStatus returns ListInstancesByStatus.
func mgmtByStatus(h *H, a durable.ProviderAdmin, s durable.Status) []string {
	h.T.Helper()
	ids, err := a.ListInstancesByStatus(h.Ctx, s)
	require.NoError(h.T, err)
	return ids
}

// mgmtExecs returns ListExecutions.
func mgmtExecs(h *H, a durable.ProviderAdmin, instance string) []uint64 {
	h.T.Helper()
	ids, err := a.ListExecutions(h.Ctx, instance)
	require.NoError(h.T, err)
	return ids
}

// mgmtDepths waits until GetQueueDepths reports want (providers may count
// new messages a little after the enqueue returns) and fails otherwise.
func mgmtDepths(h *H, a durable.ProviderAdmin, want durable.QueueDepths) {
	h.T.Helper()
	var got durable.QueueDepths
	h.Eventually(func() bool {
		var err error
		got, err = a.GetQueueDepths(h.Ctx)
		require.NoError(h.T, err)
		return got == want
	}, fmt.Sprintf("queue depths %+v (last seen %+v)", want, got))
}

// mgmtTick separates timestamps in scenarios that order or filter by time.
const mgmtTick = 50 * time.Millisecond

// ---- Ported scenarios.

func mgmtListInstances(h *H) {
	a := h.Admin()
	ids := []string{h.ID("inst-0"), h.ID("inst-1"), h.ID("inst-2")}
	for _, id := range ids {
		h.CreateInstance(h.P, id)
	}
	require.ElementsMatch(h.T, ids, mgmtList(h, a), "ListInstances must list exactly the created instances")
}

func mgmtListInstancesByStatus(h *H) {
	a := h.Admin()
	done, running := h.ID("completed"), h.ID("running")
	mgmtInstance(h, h.P, done, "", durable.StatusCompleted)
	h.CreateInstance(h.P, running)
	require.Equal(h.T, []string{done}, mgmtByStatus(h, a, durable.StatusCompleted))
	require.Equal(h.T, []string{running}, mgmtByStatus(h, a, durable.StatusRunning))
}

func mgmtListExecutions(h *H) {
	a := h.Admin()
	id := h.ID("multi-exec")
	h.CreateInstance(h.P, id)
	require.Equal(h.T, []uint64{1}, mgmtExecs(h, a, id))
}

func mgmtGetInstanceInfo(h *H) {
	a := h.Admin()
	id := h.ID("info")
	h.CreateInstanceWith(h.P, durable.StartOrchestration{Instance: id, Orchestration: "InfoOrch", Version: "2.0.0",
		Input: "test", ExecutionID: 1},
		durable.ExecutionMetadata{OrchestrationName: "InfoOrch", OrchestrationVersion: "2.0.0"})
	info := mgmtExists(h, a, id)
	require.Equal(h.T, "InfoOrch", info.OrchestrationName)
	require.Equal(h.T, "2.0.0", info.OrchestrationVersion)
	require.Equal(h.T, uint64(1), info.CurrentExecutionID)
	require.Equal(h.T, durable.StatusRunning, info.Status, "a new execution with no status is Running")
	require.Nil(h.T, info.Output, "a running instance has no output")
	require.Empty(h.T, info.ParentInstanceID, "a root instance has no parent")
	require.False(h.T, info.CreatedAt.IsZero(), "CreatedAt must be set")
	require.False(h.T, info.UpdatedAt.Before(info.CreatedAt), "UpdatedAt precedes CreatedAt")
}

func mgmtGetExecutionInfo(h *H) {
	a := h.Admin()
	id := h.ID("exec-info")
	item := mgmtStart(h, h.P, id, "")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{Started(id, 1), Event(id, 1, 2, history.OrchestrationCompleted{Output: "result"})},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: Str("result"),
			OrchestrationName: TestOrchestration, OrchestrationVersion: TestVersion},
	}))
	info, err := a.GetExecutionInfo(h.Ctx, id, 1)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), info.ExecutionID)
	require.Equal(h.T, durable.StatusCompleted, info.Status)
	require.NotNil(h.T, info.Output)
	require.Equal(h.T, "result", *info.Output)
	require.Equal(h.T, 2, info.EventCount)
	require.False(h.T, info.StartedAt.IsZero(), "StartedAt must be set")
	require.False(h.T, info.CompletedAt.IsZero(), "CompletedAt must be set for a completed execution")
	require.False(h.T, info.CompletedAt.Before(info.StartedAt), "CompletedAt precedes StartedAt")
}

func mgmtGetSystemMetrics(h *H) {
	a := h.Admin()
	before, err := a.GetSystemMetrics(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.SystemMetrics{}, before, "a fresh store has nothing to count")
	h.CreateInstance(h.P, h.ID("metrics"))
	after, err := a.GetSystemMetrics(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.SystemMetrics{TotalInstances: 1, TotalExecutions: 1, RunningInstances: 1, TotalEvents: 1}, after)
}

func mgmtGetQueueDepths(h *H) {
	a := h.Admin()
	mgmtDepths(h, a, durable.QueueDepths{})
	h.Enqueue(h.P, StartItem(h.ID("queue")))
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: 1})
}

// ---- Scenarios from the contract.

func mgmtListInstancesNewestFirst(h *H) {
	a := h.Admin()
	ids := []string{h.ID("first"), h.ID("second"), h.ID("third")}
	for i, id := range ids {
		if i > 0 {
			h.Sleep(mgmtTick)
		}
		h.CreateInstance(h.P, id)
	}
	require.Equal(h.T, []string{ids[2], ids[1], ids[0]}, mgmtList(h, a), "ListInstances orders by creation time, newest first")
	// Later turns do not reorder: ordering is by creation, not update.
	h.Enqueue(h.P, durable.ExternalRaised{Instance: ids[0], Name: "poke", Data: "{}"})
	h.Complete(h.P, mgmtFetch(h, h.P, ids[0]), mgmtOutput)
	require.Equal(h.T, []string{ids[2], ids[1], ids[0]}, mgmtList(h, a), "updating an instance must not change its place")
}

func mgmtEmptyStore(h *H) {
	a := h.Admin()
	ids := mgmtList(h, a)
	require.Empty(h.T, ids)
	for _, s := range []durable.Status{durable.StatusRunning, durable.StatusCompleted, durable.StatusFailed, durable.StatusContinuedAsNew} {
		require.Empty(h.T, mgmtByStatus(h, a, s), "status %s", s)
	}
	m, err := a.GetSystemMetrics(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.SystemMetrics{}, m)
	d, err := a.GetQueueDepths(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.QueueDepths{}, d)
}

func mgmtListInstancesByEachStatus(h *H) {
	a := h.Admin()
	running, done, failed, can := h.ID("running"), h.ID("completed"), h.ID("failed"), h.ID("continued")
	h.CreateInstance(h.P, running)
	mgmtInstance(h, h.P, done, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, failed, "", durable.StatusFailed)
	// The instance whose current execution continued as new, before its next
	// execution starts (the ContinueAsNew message stays queued).
	mgmtInstance(h, h.P, can, "", durable.StatusContinuedAsNew)

	require.Equal(h.T, []string{running}, mgmtByStatus(h, a, durable.StatusRunning))
	require.Equal(h.T, []string{done}, mgmtByStatus(h, a, durable.StatusCompleted))
	require.Equal(h.T, []string{failed}, mgmtByStatus(h, a, durable.StatusFailed))
	require.Equal(h.T, []string{can}, mgmtByStatus(h, a, durable.StatusContinuedAsNew))

	// Once the next execution starts, the instance is Running again: the
	// status is the current execution's.
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, can, 2), 2, "", durable.StatusRunning)
	require.ElementsMatch(h.T, []string{running, can}, mgmtByStatus(h, a, durable.StatusRunning))
	require.Empty(h.T, mgmtByStatus(h, a, durable.StatusContinuedAsNew))
}

func mgmtListExecutionsAfterContinueAsNew(h *H) {
	a := h.Admin()
	id := h.ID("can")
	mgmtExecutions(h, h.P, id, 4, durable.StatusCompleted)
	require.Equal(h.T, []uint64{1, 2, 3, 4}, mgmtExecs(h, a, id), "executions are listed ascending")
	latest, err := a.LatestExecutionID(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(4), latest)
	info := mgmtExists(h, a, id)
	require.Equal(h.T, uint64(4), info.CurrentExecutionID)
	require.Equal(h.T, durable.StatusCompleted, info.Status)
}

func mgmtListExecutionsUnknown(h *H) {
	a := h.Admin()
	execs, err := a.ListExecutions(h.Ctx, h.ID("nobody"))
	require.NoError(h.T, err, "an unknown instance has no executions, which is not an error")
	require.Empty(h.T, execs)
}

func mgmtReadHistoryIsolation(h *H) {
	a := h.Admin()
	id := h.ID("hist")
	item := mgmtStart(h, h.P, id, "")
	mgmtAckExecution(h, h.P, item, 1, "", durable.StatusContinuedAsNew,
		history.ActivityScheduled{Name: "A", Input: "1"}, history.ActivityCompleted{Result: "r"})
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 2), 2, "", durable.StatusRunning)

	kinds := func(evs []history.Event) []string {
		var out []string
		for i, e := range evs {
			require.Equal(h.T, uint64(i+1), e.EventID, "history must be ordered by EventID")
			out = append(out, e.Kind.KindName())
		}
		return out
	}
	first, err := a.ReadHistoryWithExecutionID(h.Ctx, id, 1)
	require.NoError(h.T, err)
	require.Equal(h.T, []string{"OrchestrationStarted", "ActivityScheduled", "ActivityCompleted", "OrchestrationContinuedAsNew"}, kinds(first))
	for _, e := range first {
		require.Equal(h.T, uint64(1), e.ExecutionID)
	}
	second, err := a.ReadHistoryWithExecutionID(h.Ctx, id, 2)
	require.NoError(h.T, err)
	require.Equal(h.T, []string{"OrchestrationStarted"}, kinds(second))
	require.Equal(h.T, uint64(2), second[0].ExecutionID)
	started, ok := second[0].Kind.(history.OrchestrationStarted)
	require.True(h.T, ok)
	require.Equal(h.T, mgmtNextInput(1), started.Input)

	current, err := a.ReadHistory(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, second, current, "ReadHistory returns the current execution's history")
}

func mgmtLatestExecutionIDUnknown(h *H) {
	a := h.Admin()
	id := h.ID("known")
	h.CreateInstance(h.P, id)
	latest, err := a.LatestExecutionID(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), latest)
	_, err = a.LatestExecutionID(h.Ctx, h.ID("unknown"))
	mgmtPermanent(h, err, "LatestExecutionID of an unknown instance")
}

func mgmtGetInstanceInfoUnknown(h *H) {
	a := h.Admin()
	_, err := a.GetInstanceInfo(h.Ctx, h.ID("unknown"))
	mgmtPermanent(h, err, "GetInstanceInfo of an unknown instance")
	// Enqueuing a start does not create the instance: only the first ack does.
	pending := h.ID("pending")
	h.Enqueue(h.P, StartItem(pending))
	_, err = a.GetInstanceInfo(h.Ctx, pending)
	mgmtPermanent(h, err, "GetInstanceInfo of an instance whose start is only queued")
	require.Empty(h.T, mgmtList(h, a), "a queued start is not an instance")
}

func mgmtGetExecutionInfoUnknown(h *H) {
	a := h.Admin()
	_, err := a.GetExecutionInfo(h.Ctx, h.ID("unknown"), 1)
	mgmtPermanent(h, err, "GetExecutionInfo of an unknown instance")
	id := h.ID("known")
	h.CreateInstance(h.P, id)
	_, err = a.GetExecutionInfo(h.Ctx, id, 2)
	mgmtPermanent(h, err, "GetExecutionInfo of an unknown execution")
	info, err := a.GetExecutionInfo(h.Ctx, id, 1)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.StatusRunning, info.Status)
}

func mgmtInstanceInfoTracksTurns(h *H) {
	a := h.Admin()
	id := h.ID("tracked")
	item := mgmtStart(h, h.P, id, "")
	mgmtAckExecution(h, h.P, item, 1, "", durable.StatusContinuedAsNew)
	first := mgmtExists(h, a, id)
	require.Equal(h.T, uint64(1), first.CurrentExecutionID)
	require.Equal(h.T, durable.StatusContinuedAsNew, first.Status)
	require.NotNil(h.T, first.Output)
	require.Equal(h.T, mgmtNextInput(1), *first.Output)

	h.Sleep(mgmtTick)
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 2), 2, "", durable.StatusRunning)
	second := mgmtExists(h, a, id)
	require.Equal(h.T, uint64(2), second.CurrentExecutionID, "the current execution follows the acked turn")
	require.Equal(h.T, durable.StatusRunning, second.Status)
	require.Nil(h.T, second.Output, "the running execution has no output yet")

	h.Sleep(mgmtTick)
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "go", Data: "{}"})
	h.Complete(h.P, mgmtFetch(h, h.P, id), "final")
	last := mgmtExists(h, a, id)
	require.Equal(h.T, uint64(2), last.CurrentExecutionID)
	require.Equal(h.T, durable.StatusCompleted, last.Status)
	require.NotNil(h.T, last.Output)
	require.Equal(h.T, "final", *last.Output)
	require.Equal(h.T, TestOrchestration, last.OrchestrationName)
	require.Equal(h.T, TestVersion, last.OrchestrationVersion)
	require.True(h.T, last.CreatedAt.Equal(first.CreatedAt), "CreatedAt must not change: %v then %v", first.CreatedAt, last.CreatedAt)
	require.True(h.T, last.UpdatedAt.After(first.UpdatedAt), "UpdatedAt must advance with each turn: %v then %v", first.UpdatedAt, last.UpdatedAt)
}

func mgmtExecutionInfoPerExecution(h *H) {
	a := h.Admin()
	id := h.ID("execs")
	item := mgmtStart(h, h.P, id, "")
	mgmtAckExecution(h, h.P, item, 1, "", durable.StatusContinuedAsNew, history.ActivityScheduled{Name: "A", Input: "1"})
	mgmtAckExecution(h, h.P, mgmtContinueAsNew(h, h.P, id, 2), 2, "", durable.StatusRunning)

	first, err := a.GetExecutionInfo(h.Ctx, id, 1)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), first.ExecutionID)
	require.Equal(h.T, durable.StatusContinuedAsNew, first.Status)
	require.NotNil(h.T, first.Output, "a continued execution's output is the next input")
	require.Equal(h.T, mgmtNextInput(1), *first.Output)
	require.Equal(h.T, 3, first.EventCount)
	require.False(h.T, first.CompletedAt.IsZero(), "a continued execution has ended")

	second, err := a.GetExecutionInfo(h.Ctx, id, 2)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(2), second.ExecutionID)
	require.Equal(h.T, durable.StatusRunning, second.Status)
	require.Nil(h.T, second.Output)
	require.Equal(h.T, 1, second.EventCount)
	require.True(h.T, second.CompletedAt.IsZero(), "a running execution has no completion time")
	require.False(h.T, second.StartedAt.Before(first.StartedAt), "execution 2 started before execution 1")
}

func mgmtInstanceInfoParent(h *H) {
	a := h.Admin()
	root, child := h.ID("root"), h.ID("child")
	mgmtInstance(h, h.P, root, "", durable.StatusRunning)
	mgmtInstance(h, h.P, child, root, durable.StatusCompleted)
	require.Equal(h.T, root, mgmtExists(h, a, child).ParentInstanceID)
	require.Empty(h.T, mgmtExists(h, a, root).ParentInstanceID)
}

func mgmtSystemMetricsByStatus(h *H) {
	a := h.Admin()
	h.CreateInstance(h.P, h.ID("running"))
	mgmtInstance(h, h.P, h.ID("done-1"), "", durable.StatusCompleted)
	mgmtInstance(h, h.P, h.ID("done-2"), "", durable.StatusCompleted)
	mgmtInstance(h, h.P, h.ID("failed"), "", durable.StatusFailed)
	mgmtExecutions(h, h.P, h.ID("multi"), 3, durable.StatusCompleted)
	m, err := a.GetSystemMetrics(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.SystemMetrics{
		TotalInstances:     5,
		TotalExecutions:    7,
		RunningInstances:   1,
		CompletedInstances: 3,
		FailedInstances:    1,
		TotalEvents:        1 + 2 + 2 + 2 + 3*2,
	}, m)
}

func mgmtQueueDepthsExcludeLocked(h *H) {
	a := h.Admin()
	x, y := h.ID("x"), h.ID("y")
	h.CreateInstance(h.P, x)
	h.Enqueue(h.P, durable.ExternalRaised{Instance: x, Name: "e1", Data: "{}"})
	h.Enqueue(h.P, durable.ExternalRaised{Instance: x, Name: "e2", Data: "{}"})
	h.Enqueue(h.P, StartItem(y))
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, durable.ActivityExecute{Instance: x, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}))
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, durable.ActivityExecute{Instance: x, ExecutionID: 1, ID: 3, Name: "B", Input: "{}"}))
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: 3, WorkerQueue: 2})

	item := h.MustFetchOrch(h.P, LongLock)
	remaining := 3 - len(item.Messages)
	work := h.MustFetchWork(h.P, LongLock)
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: remaining, WorkerQueue: 1})

	// Released messages are counted again.
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, work.LockToken, 0, false))
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: 3, WorkerQueue: 2})
}

func mgmtQueueDepthsTimers(h *H) {
	a := h.Admin()
	id := h.ID("timer")
	h.CreateInstance(h.P, id)
	fireAt := uint64(time.Now().Add(time.Hour).UnixMilli())
	require.NoError(h.T, h.P.EnqueueForOrchestrator(h.Ctx, durable.TimerFired{Instance: id, ExecutionID: 1, ID: 2, FireAtMS: fireAt}, time.Hour))
	require.NoError(h.T, h.P.EnqueueForOrchestrator(h.Ctx, durable.ExternalRaised{Instance: id, Name: "later", Data: "{}"}, time.Hour))
	mgmtDepths(h, a, durable.QueueDepths{TimerQueue: 2})
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "now", Data: "{}"})
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: 1, TimerQueue: 2})

	// A timer scheduled by a turn is a delayed orchestrator message as well.
	item := mgmtFetch(h, h.P, id)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:       1,
		HistoryDelta:      []history.Event{Event(id, 1, 2, history.TimerCreated{FireAtMS: fireAt})},
		OrchestratorItems: []durable.WorkItem{durable.TimerFired{Instance: id, ExecutionID: 1, ID: 2, FireAtMS: fireAt}},
	}))
	mgmtDepths(h, a, durable.QueueDepths{TimerQueue: 3})
}

func mgmtAnotherReplica(h *H) {
	other := h.Open()
	b, ok := other.Admin()
	require.True(h.T, ok, "every replica has the management capability")
	running, done := h.ID("running"), h.ID("done")
	h.CreateInstance(h.P, running)
	mgmtExecutions(h, h.P, done, 2, durable.StatusCompleted)

	require.ElementsMatch(h.T, []string{running, done}, mgmtList(h, b))
	require.Equal(h.T, []string{done}, mgmtByStatus(h, b, durable.StatusCompleted))
	require.Equal(h.T, []uint64{1, 2}, mgmtExecs(h, b, done))
	info := mgmtExists(h, b, done)
	require.Equal(h.T, durable.StatusCompleted, info.Status)
	require.Equal(h.T, uint64(2), info.CurrentExecutionID)

	// And a deletion through one replica is seen by the other.
	_, err := b.DeleteInstance(h.Ctx, done, false)
	require.NoError(h.T, err)
	mgmtGone(h, h.Admin(), done)
	require.Equal(h.T, []string{running}, mgmtList(h, h.Admin()))
}

func mgmtListInstancesFiltered(h *H) {
	a := h.Admin()
	// Two orchestration names: TestOrchestration and other, interleaved
	// in creation order.
	const other = TestOrchestration + "Other"
	ids := []string{h.ID("first"), h.ID("second"), h.ID("third"), h.ID("fourth")}
	names := []string{TestOrchestration, other, other, TestOrchestration}
	for i, end := range []durable.Status{durable.StatusCompleted, durable.StatusRunning, durable.StatusCompleted, durable.StatusFailed} {
		if i > 0 {
			h.Sleep(mgmtTick)
		}
		mgmtAckNamed(h, h.P, mgmtStartNamed(h, h.P, ids[i], "", names[i]), names[i], 1, "", end)
	}
	created := make([]time.Time, len(ids))
	for i, id := range ids {
		info := mgmtExists(h, a, id)
		require.Equal(h.T, names[i], info.OrchestrationName)
		created[i] = info.CreatedAt
	}
	list := func(f durable.ListFilter) []string {
		h.T.Helper()
		got, err := a.ListInstancesFiltered(h.Ctx, f)
		require.NoError(h.T, err)
		return got
	}
	first, second, third, fourth := ids[0], ids[1], ids[2], ids[3]
	require.Equal(h.T, mgmtList(h, a), list(durable.ListFilter{}), "no criteria: ListInstances")
	require.Equal(h.T, []string{third, first}, list(durable.ListFilter{Status: durable.StatusCompleted}), "by status, newest first")
	require.Equal(h.T, []string{fourth, third, second}, list(durable.ListFilter{CreatedFrom: created[1]}), "from is inclusive")
	require.Equal(h.T, []string{third, second, first}, list(durable.ListFilter{CreatedTo: created[3]}), "to is exclusive")
	require.Equal(h.T, []string{third, second}, list(durable.ListFilter{CreatedFrom: created[1], CreatedTo: created[3]}))
	require.Equal(h.T, []string{third}, list(durable.ListFilter{Status: durable.StatusCompleted, CreatedFrom: created[1], CreatedTo: created[3]}),
		"criteria are ANDed")
	require.Empty(h.T, list(durable.ListFilter{CreatedFrom: created[3].Add(time.Hour)}))
	require.Empty(h.T, list(durable.ListFilter{CreatedTo: created[0]}))

	// By name: exact, and ANDed with the status and the creation range.
	require.Equal(h.T, []string{fourth, first}, list(durable.ListFilter{Name: TestOrchestration}), "by name, newest first")
	require.Equal(h.T, []string{third, second}, list(durable.ListFilter{Name: other}))
	require.Equal(h.T, []string{first}, list(durable.ListFilter{Name: TestOrchestration, Status: durable.StatusCompleted}))
	require.Equal(h.T, []string{third}, list(durable.ListFilter{Name: other, Status: durable.StatusCompleted}))
	require.Empty(h.T, list(durable.ListFilter{Name: other, Status: durable.StatusFailed}))
	require.Equal(h.T, []string{fourth}, list(durable.ListFilter{Name: TestOrchestration, CreatedFrom: created[1]}))
	require.Equal(h.T, []string{second}, list(durable.ListFilter{Name: other, CreatedTo: created[2]}))
	require.Equal(h.T, []string{third}, list(durable.ListFilter{Name: other, Status: durable.StatusCompleted, CreatedFrom: created[1], CreatedTo: created[3]}),
		"all criteria are ANDed")
	require.Empty(h.T, list(durable.ListFilter{Name: TestOrchestration, CreatedFrom: created[1], CreatedTo: created[3]}))
	require.Empty(h.T, list(durable.ListFilter{Name: "NoSuchOrch"}), "an unknown name")
	require.Empty(h.T, list(durable.ListFilter{Name: strings.ToLower(TestOrchestration)}), "names match case-sensitively")
	require.Empty(h.T, list(durable.ListFilter{Name: TestOrchestration[:4]}), "names match exactly, not by prefix")
}

func mgmtInstanceInfoCustomStatus(h *H) {
	a := h.Admin()
	plain, set := h.ID("plain"), h.ID("set")
	mgmtInstance(h, h.P, plain, "", durable.StatusRunning)
	require.Nil(h.T, mgmtExists(h, a, plain).CustomStatus, "never set")

	mgmtAckExecution(h, h.P, mgmtStart(h, h.P, set, ""), 1, "", durable.StatusRunning, history.CustomStatusUpdated{Status: Str("50%")})
	info := mgmtExists(h, a, set)
	require.NotNil(h.T, info.CustomStatus)
	require.Equal(h.T, "50%", *info.CustomStatus, "the turn's custom status")

	// A later turn clears it.
	h.Enqueue(h.P, durable.ExternalRaised{Instance: set, Name: "go", Data: "{}"})
	item := mgmtFetch(h, h.P, set)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{
			Event(set, 1, 3, history.ExternalEvent{Name: "go", Data: "{}"}),
			Event(set, 1, 4, history.CustomStatusUpdated{Status: nil}),
		}}))
	require.Nil(h.T, mgmtExists(h, a, set).CustomStatus, "cleared")
}
