package conformance

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// deletionScenarios check instance deletion and the instance tree:
//   - DeleteInstance deletes a terminal (completed, failed or cancelled) root
//     instance with everything it owns (history, executions, queue messages,
//     sessions, key-value entries, custom status, locks) and reports exact
//     counts; the id can then be reused for a brand-new instance;
//   - it fails permanently for an unknown instance, for a sub-orchestration
//     (even with force), and for a tree with a running instance unless
//     forced; deleting a root cascades to every descendant;
//   - force-deleting an instance makes in-flight acks of its orchestration
//     turn or of its activities fail permanently, so nothing is recreated or
//     delivered to a recreated instance;
//   - ListChildren lists direct children only (empty for a leaf or unknown
//     instance), GetParentID names the parent ("" for a root, permanent error
//     for unknown), GetInstanceTree lists root first then descendants
//     breadth-first;
//   - DeleteInstancesAtomic is all-or-nothing: a running instance without
//     force, or a child of a listed instance that is not itself listed,
//     fails the whole call and deletes nothing.
func deletionScenarios() []Scenario {
	return []Scenario{
		// Ported from duroxide's deletion.rs.
		{"delete_terminal_instances", delDeleteTerminalInstances},
		{"delete_running_rejected_force_succeeds", delRunningRejectedForceSucceeds},
		{"delete_nonexistent_instance", delNonexistentInstance},
		{"delete_cleans_queues_and_locks", delCleansQueuesAndLocks},
		{"cascade_delete_hierarchy", delCascadeHierarchy},
		{"force_delete_prevents_ack_recreation", delForceDeletePreventsAckRecreation},
		{"list_children", delListChildren},
		{"delete_get_parent_id", delGetParentID},
		{"delete_get_instance_tree", delGetInstanceTree},
		{"delete_instances_atomic", delInstancesAtomic},
		{"delete_instances_atomic_force", delInstancesAtomicForce},
		{"delete_instances_atomic_orphan_detection", delInstancesAtomicOrphanDetection},
		{"stale_activity_after_delete_recreate", delStaleActivityAfterRecreate},
		// From the ProviderAdmin contract and the provider guide's checklist.
		{"delete_removes_kv_sessions_custom_status_and_queues", delRemovesEverythingOwned},
		{"delete_instance_result_counts", delResultCounts},
		{"delete_refuses_tree_with_running_descendant_without_force", delRunningDescendant},
		{"get_instance_tree_root_first_breadth_first", delTreeBreadthFirst},
	}
}

// delTree builds root -> child1, child2; child2 -> grandchild, all
// completed, and returns the four ids.
func delTree(h *H) (root, child1, child2, grandchild string) {
	h.T.Helper()
	root, child1, child2 = h.ID("root"), h.ID("root::sub::2"), h.ID("root::sub::3")
	grandchild = h.ID("root::sub::3::sub::4")
	mgmtInstance(h, h.P, root, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, child1, root, durable.StatusCompleted)
	mgmtInstance(h, h.P, child2, root, durable.StatusCompleted)
	mgmtInstance(h, h.P, grandchild, child2, durable.StatusCompleted)
	return root, child1, child2, grandchild
}

func delDeleteTerminalInstances(h *H) {
	a := h.Admin()
	completed, failed, cancelled := h.ID("completed"), h.ID("failed"), h.ID("cancelled")
	mgmtInstance(h, h.P, completed, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, failed, "", durable.StatusFailed)
	// A cancelled instance is a Failed one whose error is a cancellation.
	item := mgmtStart(h, h.P, cancelled, "")
	details := history.CancelledError("user requested cancellation")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{Started(cancelled, 1), Event(cancelled, 1, 2, history.OrchestrationFailed{Details: details})},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusFailed, Output: Str(details.DisplayMessage()),
			OrchestrationName: TestOrchestration, OrchestrationVersion: TestVersion},
	}))

	for _, id := range []string{completed, failed, cancelled} {
		mgmtExists(h, a, id)
		res, err := a.DeleteInstance(h.Ctx, id, false)
		require.NoError(h.T, err, "deleting terminal instance %q", id)
		require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 1, ExecutionsDeleted: 1, EventsDeleted: 2}, res, "instance %q", id)
		mgmtGone(h, a, id)
	}
	require.Empty(h.T, mgmtList(h, a))
}

func delRunningRejectedForceSucceeds(h *H) {
	a := h.Admin()
	id := h.ID("running")
	h.CreateInstance(h.P, id)

	_, err := a.DeleteInstance(h.Ctx, id, false)
	mgmtPermanent(h, err, "deleting a running instance without force")
	info := mgmtExists(h, a, id)
	require.Equal(h.T, durable.StatusRunning, info.Status)
	hist, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, hist, 1, "a refused deletion must not remove history")

	res, err := a.DeleteInstance(h.Ctx, id, true)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), res.InstancesDeleted)
	mgmtGone(h, a, id)
}

func delNonexistentInstance(h *H) {
	a := h.Admin()
	_, err := a.DeleteInstance(h.Ctx, h.ID("does-not-exist"), false)
	mgmtPermanent(h, err, "deleting an unknown instance")
	_, err = a.DeleteInstance(h.Ctx, h.ID("does-not-exist"), true)
	mgmtPermanent(h, err, "force-deleting an unknown instance")
}

func delCleansQueuesAndLocks(h *H) {
	a := h.Admin()
	id := h.ID("queues-locks")
	h.Enqueue(h.P, StartItem(id))
	activity := durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: 1, Name: "TestActivity", Input: "{}"}
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, activity))
	mgmtAckExecution(h, h.P, mgmtFetch(h, h.P, id), 1, "", durable.StatusCompleted)
	// The activity is fetchable (put back at once), so that its absence
	// below is the deletion's doing.
	w := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, activity, w.Item)
	require.NoError(h.T, h.P.AbandonWorkItem(h.Ctx, w.LockToken, 0, true))

	res, err := a.DeleteInstance(h.Ctx, id, false)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), res.QueueMessagesDeleted, "the queued activity must be deleted with the instance")
	h.NoWork(h.P)

	// The id can be reused: no stale lock, metadata or history survives.
	const name, version, input = "ReusedOrch", "2.0.0", `{"reused":true}`
	h.Enqueue(h.P, durable.StartOrchestration{Instance: id, Orchestration: name, Version: version, Input: input, ExecutionID: 1})
	item := mgmtFetch(h, h.P, id)
	require.Equal(h.T, name, item.OrchestrationName)
	require.Equal(h.T, uint64(1), item.ExecutionID)
	require.Empty(h.T, item.History, "a recreated instance starts with no history")
	require.Empty(h.T, item.KVSnapshot)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{Event(id, 1, 1, history.OrchestrationStarted{Name: name, Version: version, Input: input})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: name, OrchestrationVersion: version},
	}), "recreating a deleted instance must succeed")
	info := mgmtExists(h, a, id)
	require.Equal(h.T, name, info.OrchestrationName)
	require.Equal(h.T, version, info.OrchestrationVersion)
	require.Equal(h.T, durable.StatusRunning, info.Status)
	require.Nil(h.T, info.Output, "no stale output from the deleted instance")
	require.Equal(h.T, []uint64{1}, mgmtExecs(h, a, id))
}

func delCascadeHierarchy(h *H) {
	a := h.Admin()
	root, child1, child2, grandchild := delTree(h)
	all := []string{root, child1, child2, grandchild}
	for _, id := range all {
		mgmtExists(h, a, id)
	}
	for _, sub := range []string{child1, child2, grandchild} {
		_, err := a.DeleteInstance(h.Ctx, sub, false)
		mgmtPermanent(h, err, "deleting sub-orchestration "+sub)
		_, err = a.DeleteInstance(h.Ctx, sub, true)
		mgmtPermanent(h, err, "force-deleting sub-orchestration "+sub)
	}
	for _, id := range all {
		mgmtExists(h, a, id)
	}

	res, err := a.DeleteInstance(h.Ctx, root, false)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 4, ExecutionsDeleted: 4, EventsDeleted: 8}, res,
		"the result aggregates every deleted descendant")
	for _, id := range all {
		mgmtGone(h, a, id)
	}
}

func delForceDeletePreventsAckRecreation(h *H) {
	a := h.Admin()
	id := h.ID("zombie")
	h.CreateInstance(h.P, id)
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "test-event", Data: "{}"})
	item := mgmtFetch(h, h.P, id)

	res, err := a.DeleteInstance(h.Ctx, id, true)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), res.InstancesDeleted)

	err = h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:       1,
		HistoryDelta:      []history.Event{Event(id, 1, 2, history.ExternalEvent{Name: "test-event", Data: "{}"}), Event(id, 1, 3, history.ActivityScheduled{Name: "A", Input: "{}"})},
		WorkerItems:       []durable.WorkItem{durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: 3, Name: "A", Input: "{}"}},
		OrchestratorItems: []durable.WorkItem{durable.ExternalRaised{Instance: id, Name: "self", Data: "{}"}},
		Metadata:          durable.ExecutionMetadata{OrchestrationName: TestOrchestration, OrchestrationVersion: TestVersion},
	})
	mgmtPermanent(h, err, "acking a turn of a force-deleted instance")
	mgmtGone(h, a, id)
	require.Empty(h.T, mgmtList(h, a), "the instance must not be recreated")
	h.NoOrchOrWork(h.P)
	err = h.P.RenewOrchestrationItemLock(h.Ctx, item.LockToken, LongLock)
	mgmtPermanent(h, err, "renewing the lock of a force-deleted instance")
}

func delListChildren(h *H) {
	a := h.Admin()
	root, child1, child2, grandchild := delTree(h)
	children, err := a.ListChildren(h.Ctx, root)
	require.NoError(h.T, err)
	require.ElementsMatch(h.T, []string{child1, child2}, children, "direct children only")
	children, err = a.ListChildren(h.Ctx, child2)
	require.NoError(h.T, err)
	require.Equal(h.T, []string{grandchild}, children)
	for _, leaf := range []string{child1, grandchild, h.ID("non-existent")} {
		children, err = a.ListChildren(h.Ctx, leaf)
		require.NoError(h.T, err, "ListChildren(%q)", leaf)
		require.Empty(h.T, children, "ListChildren(%q)", leaf)
	}
	_, err = a.DeleteInstance(h.Ctx, root, true)
	require.NoError(h.T, err)
	children, err = a.ListChildren(h.Ctx, root)
	require.NoError(h.T, err)
	require.Empty(h.T, children, "deleted children are no longer listed")
}

func delGetParentID(h *H) {
	a := h.Admin()
	root, child := h.ID("root"), h.ID("root::sub::2")
	mgmtInstance(h, h.P, root, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, child, root, durable.StatusCompleted)

	parent, err := a.GetParentID(h.Ctx, root)
	require.NoError(h.T, err)
	require.Empty(h.T, parent, "a root has no parent")
	parent, err = a.GetParentID(h.Ctx, child)
	require.NoError(h.T, err)
	require.Equal(h.T, root, parent)
	_, err = a.GetParentID(h.Ctx, h.ID("non-existent"))
	mgmtPermanent(h, err, "GetParentID of an unknown instance")

	_, err = a.DeleteInstance(h.Ctx, root, true)
	require.NoError(h.T, err)
	_, err = a.GetParentID(h.Ctx, child)
	mgmtPermanent(h, err, "GetParentID of a deleted child")
}

func delGetInstanceTree(h *H) {
	a := h.Admin()
	root, child1, child2, grandchild := delTree(h)
	tree, err := a.GetInstanceTree(h.Ctx, root)
	require.NoError(h.T, err)
	require.Equal(h.T, root, tree.RootID)
	require.Equal(h.T, 4, tree.Size())
	require.False(h.T, tree.IsRootOnly())
	require.ElementsMatch(h.T, []string{root, child1, child2, grandchild}, tree.AllIDs)

	leaf, err := a.GetInstanceTree(h.Ctx, grandchild)
	require.NoError(h.T, err)
	require.Equal(h.T, grandchild, leaf.RootID)
	require.Equal(h.T, []string{grandchild}, leaf.AllIDs)
	require.True(h.T, leaf.IsRootOnly())

	sub, err := a.GetInstanceTree(h.Ctx, child2)
	require.NoError(h.T, err)
	require.Equal(h.T, []string{child2, grandchild}, sub.AllIDs, "a subtree holds only its own descendants")
}

func delInstancesAtomic(h *H) {
	a := h.Admin()
	ids := []string{h.ID("atomic-1"), h.ID("atomic-2"), h.ID("atomic-3")}
	for _, id := range ids {
		mgmtInstance(h, h.P, id, "", durable.StatusCompleted)
	}
	keep := h.ID("bystander")
	mgmtInstance(h, h.P, keep, "", durable.StatusCompleted)

	res, err := a.DeleteInstancesAtomic(h.Ctx, ids, false)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 3, ExecutionsDeleted: 3, EventsDeleted: 6}, res)
	for _, id := range ids {
		mgmtGone(h, a, id)
	}
	mgmtExists(h, a, keep)
	require.Equal(h.T, []string{keep}, mgmtList(h, a), "only the listed instances are deleted")
}

func delInstancesAtomicForce(h *H) {
	a := h.Admin()
	completed, running := h.ID("completed"), h.ID("running")
	mgmtInstance(h, h.P, completed, "", durable.StatusCompleted)
	h.CreateInstance(h.P, running)
	ids := []string{completed, running}

	_, err := a.DeleteInstancesAtomic(h.Ctx, ids, false)
	mgmtPermanent(h, err, "atomic deletion including a running instance without force")
	mgmtExists(h, a, completed)
	mgmtExists(h, a, running)
	hist, err := h.P.Read(h.Ctx, completed)
	require.NoError(h.T, err)
	require.Len(h.T, hist, 2, "nothing of the terminal instance may be deleted when the call fails")

	res, err := a.DeleteInstancesAtomic(h.Ctx, ids, true)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(2), res.InstancesDeleted)
	mgmtGone(h, a, completed)
	mgmtGone(h, a, running)
}

func delInstancesAtomicOrphanDetection(h *H) {
	a := h.Admin()
	root, child := h.ID("orphan-root"), h.ID("orphan-root::sub::2")
	mgmtInstance(h, h.P, root, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, child, root, durable.StatusCompleted)

	for _, force := range []bool{false, true} {
		_, err := a.DeleteInstancesAtomic(h.Ctx, []string{root}, force)
		mgmtPermanent(h, err, "deleting a parent without its child would orphan the child")
		mgmtExists(h, a, root)
		mgmtExists(h, a, child)
		hist, err := h.P.Read(h.Ctx, root)
		require.NoError(h.T, err)
		require.Len(h.T, hist, 2, "a failed atomic deletion deletes nothing")
	}

	res, err := a.DeleteInstancesAtomic(h.Ctx, []string{root, child}, false)
	require.NoError(h.T, err, "deleting the whole tree succeeds")
	require.Equal(h.T, uint64(2), res.InstancesDeleted)
	mgmtGone(h, a, root)
	mgmtGone(h, a, child)
}

func delStaleActivityAfterRecreate(h *H) {
	a := h.Admin()
	id := h.ID("stale-activity")
	item := mgmtStart(h, h.P, id, "")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{Started(id, 1), Event(id, 1, 2, history.ActivityScheduled{Name: "OldActivity", Input: "old-input"})},
		WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: 2, Name: "OldActivity", Input: "old-input"}},
		Metadata:     StartedMetadata(),
	}))
	old := h.MustFetchWork(h.P, LongLock)
	require.Equal(h.T, id, old.Item.TargetInstance())

	res, err := a.DeleteInstance(h.Ctx, id, true)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), res.InstancesDeleted)
	mgmtGone(h, a, id)

	// Recreate the instance identically.
	h.CreateInstance(h.P, id)
	require.Equal(h.T, TestOrchestration, mgmtExists(h, a, id).OrchestrationName)

	err = h.P.AckWorkItem(h.Ctx, old.LockToken, durable.ActivityCompleted{Instance: id, ExecutionID: 1, ID: 2,
		Result: "stale-result-from-old-instance"})
	mgmtPermanent(h, err, "acking an activity of a deleted instance")
	err = h.P.RenewWorkItemLock(h.Ctx, old.LockToken, LongLock)
	mgmtPermanent(h, err, "renewing an activity of a deleted instance")

	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "probe-event", Data: "{}"})
	probe := mgmtFetch(h, h.P, id)
	require.Len(h.T, probe.Messages, 1, "the recreated instance must see only the probe, not a stale completion")
	_, ok := probe.Messages[0].(durable.ExternalRaised)
	require.True(h.T, ok, "unexpected message %s", probe.Messages[0].Kind())
	require.Len(h.T, probe.History, 1, "the recreated instance has only its own history")
}

// ---- Scenarios from the contract.

func delRemovesEverythingOwned(h *H) {
	a := h.Admin()
	id := h.ID("owned")
	session := h.ID("sess")
	fireAt := uint64(time.Now().Add(time.Hour).UnixMilli())

	item := mgmtStart(h, h.P, id, "")
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		HistoryDelta: []history.Event{
			Started(id, 1),
			Event(id, 1, 2, history.KeyValueSet{Key: "k1", Value: "v1", LastUpdatedAtMS: uint64(time.Now().UnixMilli())}),
			Event(id, 1, 3, history.KeyValueSet{Key: "k2", Value: "v2", LastUpdatedAtMS: uint64(time.Now().UnixMilli())}),
			Event(id, 1, 4, history.CustomStatusUpdated{Status: Str("busy")}),
			Event(id, 1, 5, history.ActivityScheduled{Name: "A", Input: "{}", SessionID: session}),
			Event(id, 1, 6, history.TimerCreated{FireAtMS: fireAt}),
		},
		WorkerItems:       []durable.WorkItem{durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: 5, Name: "A", Input: "{}", SessionID: session}},
		OrchestratorItems: []durable.WorkItem{durable.TimerFired{Instance: id, ExecutionID: 1, ID: 6, FireAtMS: fireAt}},
		Metadata:          StartedMetadata(),
	}))
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "pending", Data: "{}"})
	owner := &durable.SessionFetchConfig{OwnerID: "owner-a", LockTimeout: LongLock}
	var work *durable.LockedWorkItem
	h.Eventually(func() bool {
		var err error
		work, err = h.P.FetchWorkItem(h.Ctx, LongLock, 0, owner, durable.AnyTag())
		require.NoError(h.T, err)
		return work != nil
	}, "the session activity to fetch")

	kv, err := h.P.GetKVAllValues(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, kv, 2, "setup: the key-value entries exist")
	cs, err := h.P.GetCustomStatus(h.Ctx, id, 0)
	require.NoError(h.T, err)
	require.NotNil(h.T, cs, "setup: the custom status exists")

	res, err := a.DeleteInstance(h.Ctx, id, true)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 1, ExecutionsDeleted: 1, EventsDeleted: 6,
		QueueMessagesDeleted: 3}, res, "the locked activity, the timer and the external event are deleted")

	mgmtGone(h, a, id)
	kv, err = h.P.GetKVAllValues(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, kv, "key-value entries are deleted with the instance")
	_, ok, err := h.P.GetKVValue(h.Ctx, id, "k1")
	require.NoError(h.T, err)
	require.False(h.T, ok)
	cs, err = h.P.GetCustomStatus(h.Ctx, id, 0)
	require.NoError(h.T, err)
	require.Nil(h.T, cs, "the custom status is deleted with the instance")
	stats, err := h.P.GetInstanceStats(h.Ctx, id)
	require.NoError(h.T, err)
	require.Nil(h.T, stats, "a deleted instance has no stats")
	h.NoOrchOrWork(h.P)
	mgmtDepths(h, a, durable.QueueDepths{})
	err = h.P.AckWorkItem(h.Ctx, work.LockToken, durable.ActivityCompleted{Instance: id, ExecutionID: 1, ID: 5, Result: "late"})
	mgmtPermanent(h, err, "acking the deleted instance's activity")

	// The session went with the instance: once the id is reused, another
	// owner can claim the same session at once (the deleted one was held by
	// owner-a for LongLock).
	h.CreateInstance(h.P, id)
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: 2, Name: "B", Input: "{}", SessionID: session}))
	other := &durable.SessionFetchConfig{OwnerID: "owner-b", LockTimeout: LongLock}
	var claimed *durable.LockedWorkItem
	h.Eventually(func() bool {
		var err error
		claimed, err = h.P.FetchWorkItem(h.Ctx, LongLock, 0, other, durable.AnyTag())
		require.NoError(h.T, err)
		return claimed != nil
	}, "another owner to claim the deleted instance's session")
	act, ok := claimed.Item.(durable.ActivityExecute)
	require.True(h.T, ok)
	require.Equal(h.T, "B", act.Name)
	kv, err = h.P.GetKVAllValues(h.Ctx, id)
	require.NoError(h.T, err)
	require.Empty(h.T, kv, "the recreated instance inherits no key-value entries")
}

func delResultCounts(h *H) {
	a := h.Admin()
	id := h.ID("counted")
	// Three executions (2 + 2 + 1 events), one queued activity and two
	// queued orchestrator messages.
	mgmtExecutions(h, h.P, id, 3, durable.StatusRunning)
	bystander := h.ID("bystander")
	h.CreateInstance(h.P, bystander)
	require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, durable.ActivityExecute{Instance: id, ExecutionID: 3, ID: 2, Name: "A", Input: "{}"}))
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "e1", Data: "{}"})
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "e2", Data: "{}"})
	h.Enqueue(h.P, durable.ExternalRaised{Instance: bystander, Name: "e", Data: "{}"})
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: 3, WorkerQueue: 1})

	res, err := a.DeleteInstance(h.Ctx, id, true)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.DeleteInstanceResult{InstancesDeleted: 1, ExecutionsDeleted: 3, EventsDeleted: 5,
		QueueMessagesDeleted: 3}, res)
	mgmtGone(h, a, id)
	for exec := uint64(1); exec <= 3; exec++ {
		evs, err := a.ReadHistoryWithExecutionID(h.Ctx, id, exec)
		require.NoError(h.T, err)
		require.Empty(h.T, evs, "execution %d's history must be deleted", exec)
	}
	// The other instance and its message are untouched.
	mgmtDepths(h, a, durable.QueueDepths{OrchestratorQueue: 1})
	require.Equal(h.T, bystander, mgmtFetch(h, h.P, bystander).Instance)
	m, err := a.GetSystemMetrics(h.Ctx)
	require.NoError(h.T, err)
	require.Equal(h.T, durable.SystemMetrics{TotalInstances: 1, TotalExecutions: 1, RunningInstances: 1, TotalEvents: 1}, m)
}

func delRunningDescendant(h *H) {
	a := h.Admin()
	root, child := h.ID("root"), h.ID("root::sub::2")
	mgmtInstance(h, h.P, root, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, child, root, durable.StatusRunning)

	_, err := a.DeleteInstance(h.Ctx, root, false)
	mgmtPermanent(h, err, "deleting a tree with a running child without force")
	mgmtExists(h, a, root)
	mgmtExists(h, a, child)

	res, err := a.DeleteInstance(h.Ctx, root, true)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(2), res.InstancesDeleted)
	mgmtGone(h, a, root)
	mgmtGone(h, a, child)
}

func delTreeBreadthFirst(h *H) {
	a := h.Admin()
	// root -> a, b; a -> a1; b -> b1, b2; a1 -> a11 (four levels).
	root := h.ID("r")
	ca, cb := h.ID("r-a"), h.ID("r-b")
	a1, b1, b2 := h.ID("r-a-1"), h.ID("r-b-1"), h.ID("r-b-2")
	a11 := h.ID("r-a-1-1")
	mgmtInstance(h, h.P, root, "", durable.StatusCompleted)
	mgmtInstance(h, h.P, ca, root, durable.StatusCompleted)
	mgmtInstance(h, h.P, cb, root, durable.StatusCompleted)
	mgmtInstance(h, h.P, a1, ca, durable.StatusCompleted)
	mgmtInstance(h, h.P, b1, cb, durable.StatusCompleted)
	mgmtInstance(h, h.P, b2, cb, durable.StatusCompleted)
	mgmtInstance(h, h.P, a11, a1, durable.StatusCompleted)

	tree, err := a.GetInstanceTree(h.Ctx, root)
	require.NoError(h.T, err)
	require.Equal(h.T, root, tree.RootID)
	require.Len(h.T, tree.AllIDs, 7)
	require.Equal(h.T, root, tree.AllIDs[0], "the root comes first")
	require.ElementsMatch(h.T, []string{ca, cb}, tree.AllIDs[1:3], "then the children")
	require.ElementsMatch(h.T, []string{a1, b1, b2}, tree.AllIDs[3:6], "then the grandchildren")
	require.Equal(h.T, a11, tree.AllIDs[6], "then the great-grandchild")

	res, err := a.DeleteInstance(h.Ctx, root, false)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(7), res.InstancesDeleted)
	require.Empty(h.T, mgmtList(h, a))
}
