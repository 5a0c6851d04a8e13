package conformance

import (
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// kvStoreScenarios checks the instance key-value store, ported from
// duroxide's provider validation (kv_store.rs, after its kv_delta change):
//
//   - AckOrchestrationItem applies KeyValueSet (value and LastUpdatedAtMS,
//     last writer wins), KeyValueCleared and KeyValuesCleared in the order
//     of the turn's delta, atomically with the rest of the turn: a failed
//     ack applies none of them and ends no execution;
//   - FetchOrchestrationItem's KVSnapshot is the state as it stood when the
//     current execution started: the current execution's writes are left
//     out (the runtime replays them from history) until an ack ends the
//     execution (Completed, Failed or ContinuedAsNew), which merges them;
//     it is empty for an instance without keys;
//   - GetKVValue and GetKVAllValues return the latest state: the snapshot
//     overlaid with the current execution's writes, whose clears hide keys
//     of the snapshot; GetKVValue reports (value, true) for a key, including
//     the empty string, and ok == false for a missing key or unknown
//     instance; GetKVAllValues is empty for an unknown instance;
//   - the store is instance-scoped: it survives completion, continue-as-new
//     and execution pruning, is deleted (current-execution writes included)
//     with the instance and with its descendants, and never leaks between
//     instances;
//   - GetInstanceStats counts the keys and size that clients see.
func kvStoreScenarios() []Scenario {
	return []Scenario{
		{"kv_set_and_get", kvSetAndGet},
		{"kv_overwrite", kvOverwrite},
		{"kv_clear_single", kvClearSingle},
		{"kv_clear_all", kvClearAll},
		{"kv_get_nonexistent", kvGetNonexistent},
		{"kv_snapshot_in_fetch", kvSnapshotInFetch},
		{"kv_snapshot_after_clear_single", kvSnapshotAfterClearSingle},
		{"kv_snapshot_after_clear_all", kvSnapshotAfterClearAll},
		{"kv_execution_id_tracking", kvExecutionIDTracking},
		{"kv_cross_execution_overwrite", kvCrossExecutionOverwrite},
		{"kv_cross_execution_remove_readd", kvCrossExecutionRemoveReadd},
		{"kv_prune_preserves_overwritten", kvPrunePreservesOverwritten},
		{"kv_prune_preserves_all_keys", kvPrunePreservesAllKeys},
		{"kv_instance_isolation", kvInstanceIsolation},
		{"kv_delete_instance_cascades", kvDeleteInstanceCascades},
		{"kv_clear_nonexistent_key", kvClearNonexistentKey},
		{"kv_get_unknown_instance", kvGetUnknownInstance},
		{"kv_set_after_clear", kvSetAfterClear},
		{"kv_empty_value", kvEmptyValue},
		{"kv_large_value", kvLargeValue},
		{"kv_special_chars_in_key", kvSpecialCharsInKey},
		{"kv_snapshot_empty", kvSnapshotEmpty},
		{"kv_snapshot_cross_execution", kvSnapshotCrossExecution},
		{"kv_prune_current_execution_protected", kvPruneCurrentExecutionProtected},
		{"kv_delete_instance_with_children", kvDeleteInstanceWithChildren},
		{"kv_clear_isolation", kvClearIsolation},
		{"kv_delta_snapshot_excludes_current_execution", kvDeltaSnapshotExcludesCurrentExecution},
		{"kv_delta_snapshot_includes_completed_execution", kvDeltaSnapshotIncludesCompletedExecution},
		{"kv_delta_client_reads_merged", kvDeltaClientReadsMerged},
		{"kv_delta_tombstone_overrides_store", kvDeltaTombstoneOverridesStore},
		{"kv_delta_clear_all_tombstones_store", kvDeltaClearAllTombstonesStore},
		{"kv_delta_merged_on_completion", kvDeltaMergedOnCompletion},
		{"kv_delta_merged_on_can", kvDeltaMergedOnCAN},
		{"kv_delta_delete_instance_cascades", kvDeltaDeleteInstanceCascades},
		{"kv_delta_prune_untouched_key_survives", kvDeltaPruneUntouchedKeySurvives},
		// Checklist items no duroxide test covers.
		{"kv_last_updated_at_materialised", kvLastUpdatedAtMaterialised},
		{"kv_events_applied_in_delta_order", kvEventsAppliedInDeltaOrder},
		{"kv_get_all_values", kvGetAllValues},
		{"kv_get_all_values_unknown_instance", kvGetAllValuesUnknownInstance},
		{"kv_failed_ack_applies_nothing", kvFailedAckAppliesNothing},
		{"kv_instance_stats", kvInstanceStats},
		{"kv_failed_execution_merges_writes", kvFailedExecutionMergesWrites},
	}
}

// kvInst drives one instance through turns, assigning contiguous event ids
// in its current execution.
type kvInst struct {
	h    *H
	p    durable.Provider
	id   string
	exec uint64
	next uint64 // next event id in exec
}

// kvCreate creates the instance (execution 1, event 1 = OrchestrationStarted).
func kvCreate(h *H, name string) *kvInst {
	h.T.Helper()
	k := &kvInst{h: h, p: h.P, id: h.ID(name), exec: 1, next: 2}
	h.CreateInstance(h.P, k.id)
	return k
}

func kvSet(key, value string) history.KeyValueSet {
	return history.KeyValueSet{Key: key, Value: value, LastUpdatedAtMS: uint64(time.Now().UnixMilli())}
}

func kvClear(key string) history.KeyValueCleared { return history.KeyValueCleared{Key: key} }

// events stamps kinds as the next events of the current execution.
func (k *kvInst) events(kinds ...history.EventKind) []history.Event {
	evs := make([]history.Event, 0, len(kinds))
	for _, kind := range kinds {
		evs = append(evs, Event(k.id, k.exec, k.next, kind))
		k.next++
	}
	return evs
}

// fetch pokes the instance with an external event and fetches its turn.
func (k *kvInst) fetch() *durable.OrchestrationItem {
	k.h.T.Helper()
	k.h.Enqueue(k.p, durable.ExternalRaised{Instance: k.id, Name: "poke", Data: "{}"})
	item := k.h.MustFetchOrch(k.p, LongLock)
	require.Equal(k.h.T, k.id, item.Instance, "fetched another instance's turn")
	require.Equal(k.h.T, k.exec, item.ExecutionID, "fetched turn is not for the current execution")
	return item
}

// ack commits kinds as the item's turn in the current execution.
func (k *kvInst) ack(item *durable.OrchestrationItem, kinds ...history.EventKind) {
	k.h.T.Helper()
	require.NoError(k.h.T, k.p.AckOrchestrationItem(k.h.Ctx, item.LockToken,
		durable.OrchestrationTurn{ExecutionID: k.exec, HistoryDelta: k.events(kinds...)}))
}

// turn runs one turn whose history delta is kinds.
func (k *kvInst) turn(kinds ...history.EventKind) {
	k.h.T.Helper()
	k.ack(k.fetch(), kinds...)
}

// snapshot runs an empty turn and returns the KV snapshot its fetch saw:
// the state as the current execution started.
func (k *kvInst) snapshot() map[string]durable.KVEntry {
	k.h.T.Helper()
	item := k.fetch()
	k.ack(item)
	return item.KVSnapshot
}

// complete ends the current execution as Completed.
func (k *kvInst) complete() {
	k.h.T.Helper()
	item := k.fetch()
	require.Len(k.h.T, item.History, int(k.next-1), "fetched history of the current execution")
	k.h.Complete(k.p, item, `"done"`)
	k.next++
}

// fail ends the current execution as Failed.
func (k *kvInst) fail() {
	k.h.T.Helper()
	item := k.fetch()
	require.Len(k.h.T, item.History, int(k.next-1), "fetched history of the current execution")
	msg := "boom"
	require.NoError(k.h.T, k.p.AckOrchestrationItem(k.h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: k.exec,
		HistoryDelta: k.events(history.OrchestrationFailed{
			Details: history.ApplicationError(history.AppOrchestrationFailed, msg, false)}),
		Metadata: durable.ExecutionMetadata{Status: durable.StatusFailed, Output: &msg},
	}))
}

// continueAsNew ends the current execution as ContinuedAsNew and runs the
// next execution's first turn, as the runtime does.
func (k *kvInst) continueAsNew() {
	k.h.T.Helper()
	item := k.fetch()
	input := "{}"
	require.NoError(k.h.T, k.p.AckOrchestrationItem(k.h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  k.exec,
		HistoryDelta: k.events(history.OrchestrationContinuedAsNew{Input: input}),
		OrchestratorItems: []durable.WorkItem{durable.ContinueAsNew{Instance: k.id, Orchestration: TestOrchestration,
			Input: input, Version: TestVersion}},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusContinuedAsNew, Output: &input},
	}))
	next := k.h.MustFetchOrch(k.p, LongLock)
	require.Equal(k.h.T, k.id, next.Instance)
	require.Len(k.h.T, next.Messages, 1)
	require.IsType(k.h.T, durable.ContinueAsNew{}, next.Messages[0])
	k.exec++
	k.next = 2
	require.NoError(k.h.T, k.p.AckOrchestrationItem(k.h.Ctx, next.LockToken, durable.OrchestrationTurn{
		ExecutionID:  k.exec,
		HistoryDelta: []history.Event{Started(k.id, k.exec)},
		Metadata:     StartedMetadata(),
	}))
}

// want asserts GetKVValue returns value for key.
func (k *kvInst) want(key, value string, msgAndArgs ...any) {
	k.h.T.Helper()
	got, ok, err := k.p.GetKVValue(k.h.Ctx, k.id, key)
	require.NoError(k.h.T, err)
	require.True(k.h.T, ok, "key %q of %q is missing", key, k.id)
	require.Equal(k.h.T, value, got, msgAndArgs...)
}

// absent asserts GetKVValue reports key missing.
func (k *kvInst) absent(key string, msgAndArgs ...any) {
	k.h.T.Helper()
	kvAbsent(k.h, k.p, k.id, key, msgAndArgs...)
}

func kvAbsent(h *H, p durable.Provider, instance, key string, msgAndArgs ...any) {
	h.T.Helper()
	got, ok, err := p.GetKVValue(h.Ctx, instance, key)
	require.NoError(h.T, err)
	if ok {
		require.Fail(h.T, fmt.Sprintf("key %q of %q should be missing, has %q", key, instance, got), msgAndArgs...)
	}
}

// all returns GetKVAllValues.
func (k *kvInst) all() map[string]string {
	k.h.T.Helper()
	m, err := k.p.GetKVAllValues(k.h.Ctx, k.id)
	require.NoError(k.h.T, err)
	return m
}

// kvValues reduces a snapshot to its values.
func kvValues(s map[string]durable.KVEntry) map[string]string {
	m := make(map[string]string, len(s))
	for key, e := range s {
		m[key] = e.Value
	}
	return m
}

// prune keeps only the current execution and checks how many were deleted.
func (k *kvInst) prune(wantDeleted uint64) {
	k.h.T.Helper()
	res, err := k.h.Admin().PruneExecutions(k.h.Ctx, k.id, durable.PruneOptions{KeepLast: 1})
	require.NoError(k.h.T, err)
	require.Equal(k.h.T, wantDeleted, res.ExecutionsDeleted, "executions pruned")
}

func kvSetAndGet(h *H) {
	k := kvCreate(h, "kv-set")
	k.turn(kvSet("counter", "42"))
	k.want("counter", "42")
}

func kvOverwrite(h *H) {
	k := kvCreate(h, "kv-over")
	k.turn(kvSet("status", "old"))
	k.want("status", "old")
	k.turn(kvSet("status", "new"))
	k.want("status", "new", "a later set overwrites the key")
	require.Equal(h.T, map[string]string{"status": "new"}, k.all())
}

func kvClearSingle(h *H) {
	k := kvCreate(h, "kv-clr1")
	k.turn(kvSet("remove_me", "x"), kvSet("stay", "y"))
	k.want("remove_me", "x")
	k.turn(kvClear("remove_me"))
	k.absent("remove_me")
	k.want("stay", "y", "clearing one key must not touch others")
}

func kvClearAll(h *H) {
	k := kvCreate(h, "kv-clra")
	k.turn(kvSet("a", "1"), kvSet("b", "2"))
	k.want("a", "1")
	k.want("b", "2")
	k.turn(history.KeyValuesCleared{})
	k.absent("a")
	k.absent("b")
	require.Empty(h.T, k.all())
}

func kvGetNonexistent(h *H) {
	k := kvCreate(h, "kv-none")
	k.turn(kvSet("other", "v"))
	k.absent("nope")
}

func kvSnapshotInFetch(h *H) {
	k := kvCreate(h, "kv-fetch")
	k.turn(kvSet("x", "10"), kvSet("y", "20"))
	require.Empty(h.T, k.snapshot(), "the running execution's writes are not in its snapshot")
	k.complete()
	require.Equal(h.T, map[string]string{"x": "10", "y": "20"}, kvValues(k.snapshot()),
		"completing the execution merges its writes into the snapshot")
}

func kvSnapshotAfterClearSingle(h *H) {
	k := kvCreate(h, "kv-fclr1")
	k.turn(kvSet("keep", "yes"), kvSet("remove", "bye"))
	k.turn(kvClear("remove"))
	k.complete()
	require.Equal(h.T, map[string]string{"keep": "yes"}, kvValues(k.snapshot()),
		"the merged snapshot has the set key and not the cleared one")
}

func kvSnapshotAfterClearAll(h *H) {
	k := kvCreate(h, "kv-fclra")
	k.turn(kvSet("a", "1"), kvSet("b", "2"))
	k.turn(history.KeyValuesCleared{})
	require.Empty(h.T, k.snapshot(), "snapshot after clearing every key")
	require.Empty(h.T, k.all())
	k.complete()
	require.Empty(h.T, k.snapshot(), "the merge applies the clear-all after the sets it follows")
}

func kvExecutionIDTracking(h *H) {
	k := kvCreate(h, "kv-exec")
	k.turn(kvSet("shared", "from_exec_1"))
	k.want("shared", "from_exec_1")
	k.continueAsNew()
	k.turn(kvSet("shared", "from_exec_2"))
	k.want("shared", "from_exec_2")
	k.prune(1)
	k.want("shared", "from_exec_2", "pruning the first writer's execution must keep the key")
}

func kvCrossExecutionOverwrite(h *H) {
	k := kvCreate(h, "kv-xexec")
	k.turn(kvSet("k", "v1"))
	k.want("k", "v1")
	k.continueAsNew()
	k.want("k", "v1", "continue-as-new keeps the store")
	k.turn(kvSet("k", "v2"))
	k.want("k", "v2")
}

func kvCrossExecutionRemoveReadd(h *H) {
	k := kvCreate(h, "kv-xrm")
	k.turn(kvSet("cycle", "exec1"))
	k.want("cycle", "exec1")
	k.continueAsNew()
	k.turn(kvClear("cycle"))
	k.absent("cycle")
	k.continueAsNew()
	k.absent("cycle", "a key cleared in execution 2 stays cleared in execution 3")
	k.turn(kvSet("cycle", "exec3"))
	k.want("cycle", "exec3")
}

func kvPrunePreservesOverwritten(h *H) {
	k := kvCreate(h, "kv-prn1")
	k.turn(kvSet("survive", "v1"))
	k.continueAsNew()
	k.turn(kvSet("survive", "v2"))
	k.prune(1)
	k.want("survive", "v2")
}

func kvPrunePreservesAllKeys(h *H) {
	k := kvCreate(h, "kv-prn2")
	k.turn(kvSet("orphan", "survives"))
	k.continueAsNew()
	k.turn(kvSet("keeper", "alive"))
	k.want("orphan", "survives")
	k.want("keeper", "alive")
	k.prune(1)
	k.want("orphan", "survives", "KV entries are instance-scoped: pruning executions keeps them")
	k.want("keeper", "alive")
}

func kvInstanceIsolation(h *H) {
	a := kvCreate(h, "kv-iso-a")
	b := kvCreate(h, "kv-iso-b")
	a.turn(kvSet("shared_name", "from_a"))
	b.turn(kvSet("shared_name", "from_b"))
	a.want("shared_name", "from_a")
	b.want("shared_name", "from_b")
	require.Equal(h.T, map[string]string{"shared_name": "from_a"}, a.all())
	require.Equal(h.T, map[string]string{"shared_name": "from_b"}, b.all())
	a.complete()
	require.Equal(h.T, map[string]string{"shared_name": "from_a"}, kvValues(a.snapshot()))
	require.Empty(h.T, b.snapshot(), "completing one instance merges none of another's writes")
	b.complete()
	require.Equal(h.T, map[string]string{"shared_name": "from_b"}, kvValues(b.snapshot()))
}

func kvDeleteInstanceCascades(h *H) {
	k := kvCreate(h, "kv-del")
	k.turn(kvSet("doomed", "bye"))
	k.complete()
	k.want("doomed", "bye")
	res, err := h.Admin().DeleteInstance(h.Ctx, k.id, false)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), res.InstancesDeleted)
	k.absent("doomed", "KV entries are deleted with the instance")
	require.Empty(h.T, k.all())
	// A new instance under the same id starts with an empty store.
	again := kvCreate(h, "kv-del")
	require.Empty(h.T, again.snapshot(), "a recreated instance must not inherit the deleted one's KV")
	again.absent("doomed")
}

func kvClearNonexistentKey(h *H) {
	k := kvCreate(h, "kv-clrne")
	k.turn(kvSet("present", "p"))
	k.turn(kvClear("never_existed"))
	k.absent("never_existed")
	require.Equal(h.T, map[string]string{"present": "p"}, k.all())
}

func kvGetUnknownInstance(h *H) {
	kvAbsent(h, h.P, h.ID("no-such-instance"), "key")
}

func kvSetAfterClear(h *H) {
	k := kvCreate(h, "kv-sac")
	k.turn(kvSet("old_a", "1"), kvSet("old_b", "2"))
	k.turn(history.KeyValuesCleared{}, kvSet("new_x", "fresh"))
	k.absent("old_a")
	k.absent("old_b")
	k.want("new_x", "fresh", "a set after a clear-all in the same turn survives it")
	require.Equal(h.T, map[string]string{"new_x": "fresh"}, k.all())
}

func kvEmptyValue(h *H) {
	k := kvCreate(h, "kv-empty")
	k.turn(kvSet("blank", ""))
	k.want("blank", "", "the empty string is a value, not a missing key")
	k.complete()
	snap := k.snapshot()
	require.Contains(h.T, snap, "blank")
	require.Equal(h.T, "", snap["blank"].Value)
}

func kvLargeValue(h *H) {
	k := kvCreate(h, "kv-big")
	big := strings.Repeat("x", 16*1024)
	k.turn(kvSet("payload", big))
	k.want("payload", big)
	k.complete()
	require.Equal(h.T, big, k.snapshot()["payload"].Value)
}

func kvSpecialCharsInKey(h *H) {
	k := kvCreate(h, "kv-chars")
	want := map[string]string{
		"key with spaces": "v1",
		"日本語キー":           "v2",
		"dotted.key.name": "v3",
		"path/like/key":   "v4",
		"emoji🎉key":       "v5",
		`quote"and\slash`: "v6",
		"?#%&=+":          "v7",
	}
	var kinds []history.EventKind
	for key, v := range want {
		kinds = append(kinds, kvSet(key, v))
	}
	k.turn(kinds...)
	for key, v := range want {
		k.want(key, v, "key %q", key)
	}
	require.Equal(h.T, want, k.all())
	k.continueAsNew()
	require.Equal(h.T, want, kvValues(k.snapshot()))
}

func kvSnapshotEmpty(h *H) {
	k := kvCreate(h, "kv-sempty")
	require.Empty(h.T, k.snapshot(), "an instance without keys has an empty snapshot")
}

// kvSnapshotCrossExecution: the previous execution's key is in the snapshot,
// the current execution's is not (clients see both).
func kvSnapshotCrossExecution(h *H) {
	k := kvCreate(h, "kv-scross")
	k.turn(kvSet("A", "from_exec1"))
	k.continueAsNew()
	k.turn(kvSet("B", "from_exec2"))
	snap := k.snapshot()
	require.Equal(h.T, map[string]string{"A": "from_exec1"}, kvValues(snap),
		"the snapshot holds only the state of earlier executions")
	require.NotContains(h.T, snap, "B", "a key of the current execution must not be in the snapshot")
	require.Equal(h.T, map[string]string{"A": "from_exec1", "B": "from_exec2"}, k.all())
}

func kvPruneCurrentExecutionProtected(h *H) {
	k := kvCreate(h, "kv-prncur")
	k.turn(kvSet("alive", "yes"))
	k.prune(0)
	k.want("alive", "yes")
}

func kvDeleteInstanceWithChildren(h *H) {
	parent := kvCreate(h, "kv-parent")
	parent.turn(kvSet("parent_key", "parent_val"))

	child := &kvInst{h: h, p: h.P, id: h.ID("kv-child"), exec: 1, next: 2}
	start := StartItem(child.id)
	start.ParentInstance, start.ParentID = parent.id, 1
	md := StartedMetadata()
	md.ParentInstanceID = parent.id
	h.CreateInstanceWith(h.P, start, md)
	child.turn(kvSet("child_key", "child_val"))

	child.complete()
	parent.complete()
	res, err := h.Admin().DeleteInstance(h.Ctx, parent.id, false)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(2), res.InstancesDeleted, "parent and child deleted")
	parent.absent("parent_key")
	child.absent("child_key", "a child's KV is deleted with its root")
	require.Empty(h.T, child.all())
}

func kvClearIsolation(h *H) {
	a := kvCreate(h, "kv-ciso-a")
	b := kvCreate(h, "kv-ciso-b")
	a.turn(kvSet("shared", "from_a"))
	b.turn(kvSet("shared", "from_b"))
	a.turn(history.KeyValuesCleared{})
	a.absent("shared")
	b.want("shared", "from_b", "clearing one instance's store must not affect another")
	b.turn(kvClear("shared"))
	b.absent("shared")
	a.turn(kvSet("shared", "again_a"))
	a.want("shared", "again_a")
}

// kvDeltaSnapshotExcludesCurrentExecution: a key set earlier in the running
// execution is in client reads but not in the next fetch's snapshot (replay
// would otherwise read the execution's own later write).
func kvDeltaSnapshotExcludesCurrentExecution(h *H) {
	k := kvCreate(h, "kv-ds1")
	k.turn(kvSet("counter", "1"))
	k.want("counter", "1", "client reads see the running execution's writes")
	require.Empty(h.T, k.snapshot(),
		"a key set by the running (not ended) execution must not be in its snapshot")
}

func kvDeltaSnapshotIncludesCompletedExecution(h *H) {
	k := kvCreate(h, "kv-ds2")
	k.turn(kvSet("counter", "5"))
	k.continueAsNew()
	require.Equal(h.T, map[string]string{"counter": "5"}, kvValues(k.snapshot()),
		"the next execution's snapshot has the previous execution's keys")
}

// restart starts a new execution of a completed instance directly (no
// continue-as-new), as the duroxide test does.
func (k *kvInst) restart(kinds ...history.EventKind) {
	k.h.T.Helper()
	item := k.fetch()
	k.exec++
	k.next = 1
	require.NoError(k.h.T, k.p.AckOrchestrationItem(k.h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  k.exec,
		HistoryDelta: k.events(append([]history.EventKind{history.OrchestrationStarted{Name: TestOrchestration, Version: TestVersion, Input: "{}"}}, kinds...)...),
		Metadata:     durable.ExecutionMetadata{Status: durable.StatusRunning},
	}))
}

func kvDeltaClientReadsMerged(h *H) {
	k := kvCreate(h, "kv-dm")
	k.turn(kvSet("color", "red"), kvSet("size", "large"))
	k.complete()
	k.restart(kvSet("color", "blue"), kvSet("shape", "circle"))
	k.want("color", "blue", "the newer write wins")
	k.want("size", "large", "an untouched key from the earlier execution is kept")
	k.want("shape", "circle")
	require.Equal(h.T, map[string]string{"color": "blue", "size": "large", "shape": "circle"}, k.all())
	require.Equal(h.T, map[string]string{"color": "red", "size": "large"}, kvValues(k.snapshot()),
		"the snapshot stays at the earlier execution's state")
}

func kvDeltaTombstoneOverridesStore(h *H) {
	k := kvCreate(h, "kv-dt")
	k.turn(kvSet("temp", "exists"), kvSet("other", "kept"))
	k.complete()
	k.restart(kvClear("temp"))
	k.absent("temp", "a clear in a later execution removes the earlier execution's key")
	require.Equal(h.T, map[string]string{"other": "kept"}, k.all())
	require.Equal(h.T, map[string]string{"temp": "exists", "other": "kept"}, kvValues(k.snapshot()),
		"the running execution's clear is not in its snapshot")
	k.complete()
	require.Equal(h.T, map[string]string{"other": "kept"}, kvValues(k.snapshot()),
		"completion merges the clear")
}

func kvDeltaClearAllTombstonesStore(h *H) {
	k := kvCreate(h, "kv-dca")
	k.turn(kvSet("a", "1"), kvSet("b", "2"))
	k.complete()
	k.restart(history.KeyValuesCleared{}, kvSet("c", "3"))
	k.absent("a", "clear-all removes keys of earlier executions")
	k.absent("b", "clear-all removes keys of earlier executions")
	k.want("c", "3", "a key set after the clear-all is kept")
	require.Equal(h.T, map[string]string{"c": "3"}, k.all())
	require.Equal(h.T, map[string]string{"a": "1", "b": "2"}, kvValues(k.snapshot()),
		"the running execution's clear-all and set are not in its snapshot")
	k.complete()
	require.Equal(h.T, map[string]string{"c": "3"}, kvValues(k.snapshot()),
		"completion merges the clear-all, then the set")
}

func kvDeltaMergedOnCompletion(h *H) {
	k := kvCreate(h, "kv-dmc")
	k.turn(kvSet("result", "42"))
	k.complete()
	k.want("result", "42", "the value survives the completion merge")
	require.Equal(h.T, map[string]string{"result": "42"}, k.all())
	require.Equal(h.T, map[string]string{"result": "42"}, kvValues(k.snapshot()),
		"completion merges the execution's writes into the snapshot")
}

func kvDeltaMergedOnCAN(h *H) {
	k := kvCreate(h, "kv-dmc2")
	k.turn(kvSet("version", "1"), kvSet("progress", "50%"))
	k.turn(kvSet("progress", "100%"))
	k.continueAsNew()
	require.Equal(h.T, map[string]string{"version": "1", "progress": "100%"}, kvValues(k.snapshot()),
		"the latest values carry over continue-as-new")
}

func kvDeltaDeleteInstanceCascades(h *H) {
	k := kvCreate(h, "kv-ddel")
	k.turn(kvSet("data", "important"))
	k.want("data", "important")
	res, err := h.Admin().DeleteInstance(h.Ctx, k.id, true)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(1), res.InstancesDeleted)
	k.absent("data", "force-deleting a running instance deletes its KV")
	require.Empty(h.T, k.all())
	stats, err := h.P.GetInstanceStats(h.Ctx, k.id)
	require.NoError(h.T, err)
	require.Nil(h.T, stats, "a deleted instance has no stats")
}

func kvDeltaPruneUntouchedKeySurvives(h *H) {
	k := kvCreate(h, "kv-dprn")
	k.turn(kvSet("stale_config", "from_exec_1"))
	k.continueAsNew()
	k.turn(kvSet("other", "unrelated"))
	k.continueAsNew()
	k.want("stale_config", "from_exec_1")
	k.want("other", "unrelated")
	k.prune(2)
	k.want("stale_config", "from_exec_1", "a key written only by a pruned execution survives")
	k.want("other", "unrelated")
	require.Equal(h.T, map[string]string{"stale_config": "from_exec_1", "other": "unrelated"}, kvValues(k.snapshot()))
}

func kvLastUpdatedAtMaterialised(h *H) {
	k := kvCreate(h, "kv-ts")
	k.turn(history.KeyValueSet{Key: "a", Value: "1", LastUpdatedAtMS: 1_700_000_000_100},
		history.KeyValueSet{Key: "b", Value: "2", LastUpdatedAtMS: 1_700_000_000_200})
	k.continueAsNew()
	require.Equal(h.T, map[string]durable.KVEntry{
		"a": {Value: "1", LastUpdatedAtMS: 1_700_000_000_100},
		"b": {Value: "2", LastUpdatedAtMS: 1_700_000_000_200},
	}, k.snapshot())
	k.turn(history.KeyValueSet{Key: "a", Value: "3", LastUpdatedAtMS: 1_700_000_000_300})
	k.continueAsNew()
	require.Equal(h.T, map[string]durable.KVEntry{
		"a": {Value: "3", LastUpdatedAtMS: 1_700_000_000_300},
		"b": {Value: "2", LastUpdatedAtMS: 1_700_000_000_200},
	}, k.snapshot(), "an overwrite updates the value and its timestamp")
}

func kvEventsAppliedInDeltaOrder(h *H) {
	k := kvCreate(h, "kv-order")
	k.turn(kvSet("k", "first"), kvSet("k", "second"), kvSet("gone", "x"), kvClear("gone"),
		kvClear("back"), kvSet("back", "here"))
	require.Equal(h.T, map[string]string{"k": "second", "back": "here"}, k.all(),
		"KV events of one turn apply in delta order")
	k.turn(kvSet("z", "1"), history.KeyValuesCleared{}, kvSet("y", "2"), kvClear("y"), kvSet("x", "3"))
	require.Equal(h.T, map[string]string{"x": "3"}, k.all())
	k.continueAsNew()
	require.Equal(h.T, map[string]string{"x": "3"}, kvValues(k.snapshot()),
		"the merge applies the execution's writes in their order")
	k.turn(kvClear("x"), kvSet("w", "4"), history.KeyValuesCleared{}, kvSet("v", "5"))
	require.Equal(h.T, map[string]string{"v": "5"}, k.all(),
		"a clear-all hides the earlier executions' keys and the current one's earlier writes")
	k.complete()
	require.Equal(h.T, map[string]string{"v": "5"}, kvValues(k.snapshot()))
}

func kvGetAllValues(h *H) {
	k := kvCreate(h, "kv-all")
	all := k.all()
	require.NotNil(h.T, all, "an instance without keys has an empty, non-nil map")
	require.Empty(h.T, all)
	k.turn(kvSet("a", "1"), kvSet("b", "2"), kvSet("c", ""))
	require.Equal(h.T, map[string]string{"a": "1", "b": "2", "c": ""}, k.all())
	k.turn(kvClear("b"))
	require.Equal(h.T, map[string]string{"a": "1", "c": ""}, k.all())
}

func kvGetAllValuesUnknownInstance(h *H) {
	m, err := h.P.GetKVAllValues(h.Ctx, h.ID("no-such-instance"))
	require.NoError(h.T, err)
	require.NotNil(h.T, m, "an unknown instance has an empty, non-nil map")
	require.Empty(h.T, m)
}

func kvFailedAckAppliesNothing(h *H) {
	k := kvCreate(h, "kv-atomic")
	k.turn(kvSet("base", "0"))

	// An ack after the lock was released fails, writes nothing and ends
	// nothing: the execution's writes are not merged.
	item := k.fetch()
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
	done := `"done"`
	err := h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: k.exec, HistoryDelta: []history.Event{
			Event(k.id, k.exec, k.next, kvSet("stale", "x")),
			Event(k.id, k.exec, k.next+1, history.OrchestrationCompleted{Output: done}),
		},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &done}})
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with a released lock")
	k.absent("stale", "a failed ack must not apply its KV events")

	// An ack with a duplicate event id fails and writes nothing either.
	item = h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, k.id, item.Instance)
	require.Empty(h.T, item.KVSnapshot, "a failed ack that would have completed the execution must not merge its writes")
	err = h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: k.exec, HistoryDelta: []history.Event{
			Event(k.id, k.exec, k.next, kvSet("dup", "x")),
			Event(k.id, k.exec, 1, kvClear("base")),
		}})
	require.ErrorIs(h.T, err, durable.ErrPermanent, "ack with a duplicate event id")
	k.absent("dup", "a failed ack must not apply its KV events")
	k.want("base", "0", "a failed ack must not apply its KV events")
	require.Equal(h.T, map[string]string{"base": "0"}, k.all())
}

func kvInstanceStats(h *H) {
	stats, err := h.P.GetInstanceStats(h.Ctx, h.ID("no-such-instance"))
	require.NoError(h.T, err)
	require.Nil(h.T, stats, "an unknown instance has no stats")

	k := kvCreate(h, "kv-stats")
	stats, err = h.P.GetInstanceStats(h.Ctx, k.id)
	require.NoError(h.T, err)
	require.NotNil(h.T, stats)
	require.Equal(h.T, uint64(0), stats.KVKeyCount)
	require.Equal(h.T, uint64(0), stats.KVSizeBytes)

	value := strings.Repeat("v", 1000)
	k.turn(kvSet("one", value), kvSet("two", value), kvSet("three", "3"))
	stats, err = h.P.GetInstanceStats(h.Ctx, k.id)
	require.NoError(h.T, err)
	require.NotNil(h.T, stats)
	require.Equal(h.T, uint64(3), stats.KVKeyCount)
	require.GreaterOrEqual(h.T, stats.KVSizeBytes, uint64(2*len(value)+1), "KV size covers the stored values")
	require.Equal(h.T, uint64(1), stats.ExecutionID)

	k.turn(kvClear("one"))
	k.continueAsNew()
	stats, err = h.P.GetInstanceStats(h.Ctx, k.id)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(2), stats.KVKeyCount, "KV counts are instance-wide, across executions")
	require.Equal(h.T, uint64(2), stats.ExecutionID)

	// The running execution's clear-all hides the earlier executions' keys
	// from clients, and so from the counts.
	k.turn(history.KeyValuesCleared{})
	stats, err = h.P.GetInstanceStats(h.Ctx, k.id)
	require.NoError(h.T, err)
	require.Equal(h.T, uint64(0), stats.KVKeyCount, "KV counts follow what clients see")
	require.Equal(h.T, uint64(0), stats.KVSizeBytes, "an empty store has no size")
}

// kvFailedExecutionMergesWrites: an execution that ends Failed merges its
// writes like a completed one (duroxide merges on Completed, Failed and
// ContinuedAsNew).
func kvFailedExecutionMergesWrites(h *H) {
	k := kvCreate(h, "kv-dfail")
	k.turn(kvSet("progress", "half"), kvSet("scratch", "tmp"))
	k.turn(kvClear("scratch"), kvSet("progress", "most"))
	require.Empty(h.T, k.snapshot(), "the running execution's writes are not in its snapshot")
	k.fail()
	require.Equal(h.T, map[string]string{"progress": "most"}, k.all())
	require.Equal(h.T, map[string]string{"progress": "most"}, kvValues(k.snapshot()),
		"a failed execution's writes are merged into the snapshot")
	k.restart(kvSet("retry", "1"))
	require.Equal(h.T, map[string]string{"progress": "most"}, kvValues(k.snapshot()),
		"the next execution's snapshot has the failed execution's writes, not its own")
	require.Equal(h.T, map[string]string{"progress": "most", "retry": "1"}, k.all())
}
