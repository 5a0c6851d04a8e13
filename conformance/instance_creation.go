package conformance

import (
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// instanceCreationScenarios checks how instances come into existence:
//   - enqueuing a StartOrchestration (or any message) creates nothing;
//     fetching it works without an instance and reports the orchestration
//     name from the message, execution 1 and an empty history;
//   - the first acked turn creates the instance from its metadata, and the
//     orchestration version stored then (resolved by the runtime) is the one
//     later fetches report, even when the start message carried none;
//   - sub-orchestrations are created the same way, with their parent link;
//   - instance ids are opaque: ids with '/', '\', '#', '?', '%', spaces,
//     non-ASCII characters or over 200 characters work end to end (enqueue,
//     fetch, ack, read, worker round trip) and never collide.
func instanceCreationScenarios() []Scenario {
	return []Scenario{
		{"instance_creation_via_metadata", creationViaMetadata},
		{"no_instance_creation_on_enqueue", creationNotOnEnqueue},
		{"null_version_handling", creationNullVersion},
		{"sub_orchestration_instance_creation", creationSubOrchestration},
		{"special_character_instance_ids", creationSpecialIDs},
	}
}

// creationFirstTurn is the first turn of a new instance: OrchestrationStarted
// (event 1 of execution 1) with the started metadata.
func creationFirstTurn(instance string) durable.OrchestrationTurn {
	return durable.OrchestrationTurn{ExecutionID: 1, HistoryDelta: []history.Event{Started(instance, 1)},
		Metadata: StartedMetadata()}
}

// creationStartedAs is an OrchestrationStarted event for a runtime-resolved
// name and version.
func creationStartedAs(instance, name, version string) history.Event {
	return Event(instance, 1, 1, history.OrchestrationStarted{Name: name, Version: version, Input: "{}"})
}

// creationRequireAbsent asserts that the instance does not exist for p:
// no history, no stats, and (with management) no instance info or listing.
func creationRequireAbsent(h *H, p durable.Provider, instance string) {
	h.T.Helper()
	events, err := p.Read(h.Ctx, instance)
	require.NoError(h.T, err)
	require.Empty(h.T, events, "history of %q before its first ack", instance)
	stats, err := p.GetInstanceStats(h.Ctx, instance)
	require.NoError(h.T, err)
	require.Nil(h.T, stats, "stats of %q before its first ack", instance)
	if a, ok := p.Admin(); ok {
		_, err := a.GetInstanceInfo(h.Ctx, instance)
		require.ErrorIs(h.T, err, durable.ErrPermanent, "instance info of %q before its first ack", instance)
		ids, err := a.ListInstances(h.Ctx)
		require.NoError(h.T, err)
		require.NotContains(h.T, ids, instance, "instance listed before its first ack")
	}
}

func creationViaMetadata(h *H) {
	id := h.ID("instance-a")
	h.Enqueue(h.P, StartItem(id))
	creationRequireAbsent(h, h.P, id)

	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, TestOrchestration, item.OrchestrationName, "a new instance's name comes from its start message")
	require.Equal(h.T, uint64(1), item.ExecutionID)
	require.Empty(h.T, item.History)
	require.Empty(h.T, item.HistoryError)
	require.Equal(h.T, []durable.WorkItem{StartItem(id)}, item.Messages)
	creationRequireAbsent(h, h.P, id) // fetching creates nothing either

	// The runtime resolved version 2.0.0, unlike the message's 1.0.0.
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{creationStartedAs(id, TestOrchestration, "2.0.0")},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: TestOrchestration, OrchestrationVersion: "2.0.0"},
	}))

	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "poke", Data: "{}"})
	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, again.Instance)
	require.Equal(h.T, TestOrchestration, again.OrchestrationName)
	require.Equal(h.T, "2.0.0", again.Version, "the version comes from the stored metadata")
	require.Equal(h.T, uint64(1), again.ExecutionID)
	require.Len(h.T, again.History, 1)
	require.Equal(h.T, uint64(1), again.History[0].EventID)
	require.IsType(h.T, history.OrchestrationStarted{}, again.History[0].Kind)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, again.LockToken, durable.OrchestrationTurn{ExecutionID: 1}))

	stats, err := h.P.GetInstanceStats(h.Ctx, id)
	require.NoError(h.T, err)
	require.NotNil(h.T, stats)
	require.Equal(h.T, uint64(1), stats.ExecutionID)
	require.Equal(h.T, uint64(1), stats.HistoryEventCount)
	if a, ok := h.P.Admin(); ok {
		info, err := a.GetInstanceInfo(h.Ctx, id)
		require.NoError(h.T, err)
		require.Equal(h.T, id, info.InstanceID)
		require.Equal(h.T, TestOrchestration, info.OrchestrationName)
		require.Equal(h.T, "2.0.0", info.OrchestrationVersion)
		require.Equal(h.T, uint64(1), info.CurrentExecutionID)
		require.Equal(h.T, durable.StatusRunning, info.Status)
		require.Empty(h.T, info.ParentInstanceID)
	}
}

func creationNotOnEnqueue(h *H) {
	id := h.ID("instance-b")
	h.Enqueue(h.P, StartItem(id))
	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "early", Data: "1"})
	creationRequireAbsent(h, h.P, id)
	creationRequireAbsent(h, h.Open(), id)

	// The work is fetchable although the instance does not exist.
	item := lockingFetchBatch(h, h.P, LongLock, 2)
	require.Equal(h.T, id, item.Instance)
	require.Empty(h.T, item.History)

	// Abandoning the first turn still creates nothing.
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
	creationRequireAbsent(h, h.P, id)

	item = lockingFetchBatch(h, h.P, LongLock, 2)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, creationFirstTurn(id)))
	events, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Len(h.T, events, 1, "the first ack creates the instance")
}

func creationNullVersion(h *H) {
	id := h.ID("instance-c")
	start := StartItem(id)
	start.Version = ""
	h.Enqueue(h.P, start)

	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, TestOrchestration, item.OrchestrationName)
	require.Equal(h.T, []durable.WorkItem{start}, item.Messages, "the start message keeps its empty version")

	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{creationStartedAs(id, TestOrchestration, "3.0.0")},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: TestOrchestration, OrchestrationVersion: "3.0.0"},
	}))

	h.Enqueue(h.P, durable.ExternalRaised{Instance: id, Name: "poke", Data: "{}"})
	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, "3.0.0", again.Version, "the version resolved by the runtime is stored at ack")
	require.Equal(h.T, TestOrchestration, again.OrchestrationName)
}

func creationSubOrchestration(h *H) {
	parent := h.ID("parent-instance")
	child := parent + "::child-instance"
	childStart := durable.StartOrchestration{Instance: child, Orchestration: "ChildOrch", Input: "{}",
		ParentInstance: parent, ParentID: 2, ExecutionID: 1}

	h.Enqueue(h.P, StartItem(parent))
	item := h.MustFetchOrch(h.P, LongLock)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		HistoryDelta: []history.Event{
			creationStartedAs(parent, "ParentOrch", "1.0.0"),
			Event(parent, 1, 2, history.SubOrchestrationScheduled{Name: "ChildOrch", Instance: child, Input: "{}"}),
		},
		OrchestratorItems: []durable.WorkItem{childStart},
		Metadata:          durable.ExecutionMetadata{OrchestrationName: "ParentOrch", OrchestrationVersion: "1.0.0"},
	}))

	// The child's start is queued, the child itself does not exist yet.
	creationRequireAbsent(h, h.P, child)
	childItem := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, child, childItem.Instance)
	require.Equal(h.T, "ChildOrch", childItem.OrchestrationName)
	require.Equal(h.T, uint64(1), childItem.ExecutionID)
	require.Empty(h.T, childItem.History)
	require.Equal(h.T, []durable.WorkItem{childStart}, childItem.Messages, "parent link travels on the start message")

	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, childItem.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		HistoryDelta: []history.Event{Event(child, 1, 1, history.OrchestrationStarted{Name: "ChildOrch", Version: "1.5.0",
			Input: "{}", ParentInstance: parent, ParentID: 2})},
		Metadata: durable.ExecutionMetadata{OrchestrationName: "ChildOrch", OrchestrationVersion: "1.5.0",
			ParentInstanceID: parent},
	}))

	h.Enqueue(h.P, durable.ExternalRaised{Instance: child, Name: "poke", Data: "{}"})
	again := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, child, again.Instance)
	require.Equal(h.T, "ChildOrch", again.OrchestrationName)
	require.Equal(h.T, "1.5.0", again.Version, "the child's version comes from its metadata")
	require.Len(h.T, again.History, 1)

	if a, ok := h.P.Admin(); ok {
		got, err := a.GetParentID(h.Ctx, child)
		require.NoError(h.T, err)
		require.Equal(h.T, parent, got)
		info, err := a.GetInstanceInfo(h.Ctx, child)
		require.NoError(h.T, err)
		require.Equal(h.T, parent, info.ParentInstanceID)
		children, err := a.ListChildren(h.Ctx, parent)
		require.NoError(h.T, err)
		require.Equal(h.T, []string{child}, children)
	}
}

func creationSpecialIDs(h *H) {
	ids := []string{
		h.ID("slash/separated/id"),
		h.ID(`back\slash\id`),
		h.ID("hash#fragment"),
		h.ID("question?mark=1&and=2"),
		h.ID("with  spaces in it "),
		h.ID("percent%2Fencoded%20"),
		h.ID("unicode-ünïcødé-日本語-🚀"),
		h.ID("mixed/a\\b#c?d e%f"),
		h.ID(strings.Repeat("long-", 44)),
	}
	require.Greater(h.T, len(ids[len(ids)-1]), 200)

	// Create them all first: ids that collide in storage would then share
	// history and break the later turns.
	for _, id := range ids {
		h.CreateInstance(h.P, id)
	}
	for _, id := range ids {
		events, err := h.P.Read(h.Ctx, id)
		require.NoError(h.T, err)
		require.Len(h.T, events, 1, "history of %q", id)
		require.Equal(h.T, id, events[0].InstanceID)
	}
	for _, id := range ids {
		require.NoError(h.T, h.P.EnqueueForWorker(h.Ctx, queueActivity(id, 2)))
		w := h.MustFetchWork(h.P, LongLock)
		require.Equal(h.T, queueActivity(id, 2), queueActivityOf(h, w), "worker item for %q", id)
		require.NoError(h.T, h.P.AckWorkItem(h.Ctx, w.LockToken, queueCompletion(id, 2, "ok")))

		item := h.MustFetchOrch(h.P, LongLock)
		require.Equal(h.T, id, item.Instance)
		require.Equal(h.T, []durable.WorkItem{queueCompletion(id, 2, "ok")}, item.Messages)
		require.Len(h.T, item.History, 1, "history of %q at fetch", id)
		h.Complete(h.P, item, "done")

		events, err := h.P.Read(h.Ctx, id)
		require.NoError(h.T, err)
		require.Len(h.T, events, 2, "history of %q after completion", id)
		stats, err := h.P.GetInstanceStats(h.Ctx, id)
		require.NoError(h.T, err)
		require.NotNil(h.T, stats, "stats of %q", id)
	}
	if a, ok := h.P.Admin(); ok {
		listed, err := a.ListInstances(h.Ctx)
		require.NoError(h.T, err)
		require.ElementsMatch(h.T, ids, listed)
		for _, id := range ids {
			info, err := a.GetInstanceInfo(h.Ctx, id)
			require.NoError(h.T, err)
			require.Equal(h.T, id, info.InstanceID)
			require.Equal(h.T, durable.StatusCompleted, info.Status)
		}
	}
	h.NoOrchOrWork(h.P)
}
