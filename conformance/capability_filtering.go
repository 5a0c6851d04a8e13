package conformance

import (
	"slices"
	"strings"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// capabilityFilteringScenarios checks fetching by pinned runtime version and
// the history deserialization contract:
//
//   - a nil filter returns any item; a filter returns only executions whose
//     pinned version lies in one of its (inclusive) ranges, and nothing, not
//     an error, when none does; an empty filter matches no pinned execution;
//   - an execution with no pinned version is compatible with every filter;
//   - the filter is applied before locking: a skipped instance is neither
//     locked nor has its attempt counted;
//   - ExecutionMetadata.PinnedVersion is stored as told on every ack that
//     carries it (set, backfilled or changed) and kept when absent; each
//     execution has its own pinned version (continue-as-new does not
//     inherit it);
//   - an undecodable history is returned as an item with HistoryError set,
//     History empty, the lock held and the attempt counted on every fetch;
//     ack stays append-only so the poisoned instance can still be failed;
//   - the filter is applied before history is read, so a corrupt history of
//     an excluded version yields no item and no error;
//   - every event keeps the runtime version stamped on it when appended,
//     through fetch, Read and ReadWithExecution and later turns by newer
//     runtimes (the runtime chooses an execution's replay rules from the
//     stamp on its OrchestrationStarted).
func capabilityFilteringScenarios() []Scenario {
	return []Scenario{
		{"fetch_with_filter_none_returns_any_item", func(h *H) {
			inst := h.ID("inst-1")
			capabilitySeed(h, inst, capabilityV(1, 2, 3))
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
		}},
		{"fetch_with_compatible_filter_returns_item", func(h *H) {
			inst := h.ID("inst-2")
			capabilitySeed(h, inst, capabilityV(1, 2, 3))
			item := capabilityMustFetch(h, capabilityRange(capabilityV(1, 0, 0), capabilityV(1, 9, 9)))
			require.Equal(h.T, inst, item.Instance)
		}},
		{"fetch_with_incompatible_filter_skips_item", func(h *H) {
			inst := h.ID("inst-3")
			capabilitySeed(h, inst, capabilityV(1, 2, 3))
			capabilityAwait(h, inst)
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9))),
				"an incompatible filter must return no item")
		}},
		{"fetch_filter_skips_incompatible_selects_compatible", func(h *H) {
			v1, v2 := h.ID("inst-v1"), h.ID("inst-v2")
			capabilitySeed(h, v1, capabilityV(1, 0, 0))
			capabilitySeed(h, v2, capabilityV(2, 0, 0))

			item := capabilityMustFetch(h, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9)))
			require.Equal(h.T, v2, item.Instance)
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))

			item = capabilityMustFetch(h, capabilityRange(capabilityV(1, 0, 0), capabilityV(1, 9, 9)))
			require.Equal(h.T, v1, item.Instance)
		}},
		{"fetch_filter_does_not_lock_skipped_instances", func(h *H) {
			inst := h.ID("inst-5")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			capabilityAwait(h, inst)
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9))))

			// Had the skipped fetch locked the instance, this would return nil.
			item := capabilityFetch(h, capabilityRange(capabilityV(0, 0, 0), capabilityV(1, 9, 9)))
			require.NotNil(h.T, item, "an incompatible fetch must not lock the instance it skips")
			require.Equal(h.T, inst, item.Instance)
		}},
		{"fetch_filter_null_pinned_version_always_compatible", func(h *H) {
			inst := h.ID("inst-null")
			h.Enqueue(h.P, StartItem(inst))
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:  1,
				HistoryDelta: []history.Event{capabilityStarted(inst, 1, "0.0.0")},
				Metadata:     StartedMetadata(), // no pinned version
			}))
			h.Enqueue(h.P, capabilityPing(inst, "ping"))

			item = capabilityMustFetch(h, capabilityRange(capabilityV(99, 0, 0), capabilityV(99, 9, 9)))
			require.Equal(h.T, inst, item.Instance, "an execution without pinned version matches every filter")
		}},
		{"fetch_filter_boundary_versions", func(h *H) {
			filter := capabilityRange(capabilityV(1, 0, 0), capabilityV(1, 9, 99))

			low := h.ID("v1-low")
			capabilitySeed(h, low, capabilityV(1, 0, 0))
			item := capabilityMustFetch(h, filter)
			require.Equal(h.T, low, item.Instance, "1.0.0 is within [1.0.0, 1.9.99]")
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))

			high := h.ID("v1-high")
			capabilitySeed(h, high, capabilityV(1, 9, 99))
			var got []string
			for range 2 {
				item = capabilityMustFetch(h, filter)
				got = append(got, item.Instance) // both stay locked
			}
			slices.Sort(got)
			want := []string{high, low}
			slices.Sort(want)
			require.Equal(h.T, want, got, "1.0.0 and 1.9.99 are both within [1.0.0, 1.9.99]")

			// Just outside the range. Both v1 instances stay locked, so only
			// the new instance can come up.
			out := h.ID("v2-exact")
			capabilitySeed(h, out, capabilityV(2, 0, 0))
			capabilityAwait(h, out)
			require.Nil(h.T, capabilityFetch(h, filter), "2.0.0 is not within [1.0.0, 1.9.99]")
			item = h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, out, item.Instance, "2.0.0 is fetchable without filter")
		}},
		{"pinned_version_stored_via_ack_metadata", func(h *H) {
			inst := h.ID("inst-8")
			capabilitySeed(h, inst, capabilityV(3, 1, 4))
			capabilityAwait(h, inst)
			// The exact version: [3.1.4, 3.1.4] matches, its neighbours do not.
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(3, 1, 5), capabilityV(3, 9, 9))))
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(3, 0, 0), capabilityV(3, 1, 3))))
			item := capabilityFetch(h, capabilityRange(capabilityV(3, 1, 4), capabilityV(3, 1, 4)))
			require.NotNil(h.T, item, "the version stored from the ack's metadata must be filterable")
			require.Equal(h.T, inst, item.Instance)
		}},
		{"pinned_version_immutable_across_ack_cycles", func(h *H) {
			inst := h.ID("inst-9")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			filter := capabilityRange(capabilityV(0, 0, 0), capabilityV(1, 9, 9))
			item := capabilityMustFetch(h, filter)
			require.Equal(h.T, inst, item.Instance)
			// A later turn carries no pinned version: the stored one stays.
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: 1, Metadata: StartedMetadata()}))
			h.Enqueue(h.P, capabilityPing(inst, "ping2"))

			capabilityAwait(h, inst)
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9))),
				"an ack without pinned version must not clear the stored one")
			item = capabilityFetch(h, filter)
			require.NotNil(h.T, item, "the pinned version must persist across ack cycles")
			require.Equal(h.T, inst, item.Instance)
		}},
		{"continue_as_new_execution_gets_own_pinned_version", func(h *H) {
			inst := h.ID("inst-can")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			item := capabilityMustFetch(h, capabilityRange(capabilityV(0, 0, 0), capabilityV(1, 9, 9)))
			require.Equal(h.T, inst, item.Instance)
			input := "{}"
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:  1,
				HistoryDelta: []history.Event{Event(inst, 1, 2, history.OrchestrationContinuedAsNew{Input: input})},
				OrchestratorItems: []durable.WorkItem{durable.ContinueAsNew{Instance: inst, Orchestration: TestOrchestration,
					Input: input, Version: TestVersion}},
				Metadata: durable.ExecutionMetadata{Status: durable.StatusContinuedAsNew, Output: &input,
					OrchestrationName: TestOrchestration, OrchestrationVersion: TestVersion},
			}))

			// Execution 2 starts, pinned at 2.0.0.
			item = h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			v2 := capabilityV(2, 0, 0)
			md := StartedMetadata()
			md.PinnedVersion = &v2
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: 2, HistoryDelta: []history.Event{capabilityStarted(inst, 2, "2.0.0")}, Metadata: md}))
			h.Enqueue(h.P, capabilityPing(inst, "ping"))

			item = capabilityMustFetch(h, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9)))
			require.Equal(h.T, inst, item.Instance)
			require.Equal(h.T, uint64(2), item.ExecutionID)
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))

			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(1, 0, 0), capabilityV(1, 9, 9))),
				"execution 2 is pinned at 2.0.0; it must not inherit execution 1's 1.0.0")
		}},
		{"filter_with_empty_supported_versions_returns_nothing", func(h *H) {
			inst := h.ID("inst-empty")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			capabilityAwait(h, inst)
			require.Nil(h.T, capabilityFetch(h, &durable.DispatcherCapabilityFilter{}),
				"a filter with no supported range matches no pinned execution")
		}},
		{"concurrent_filtered_fetch_no_double_lock", func(h *H) {
			inst := h.ID("inst-conc")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			filter := capabilityRange(capabilityV(0, 0, 0), capabilityV(1, 9, 9))
			item := capabilityMustFetch(h, filter)
			require.Equal(h.T, inst, item.Instance)
			require.Nil(h.T, capabilityFetch(h, filter), "a locked instance must not be returned again")
			p2 := h.Open()
			item2, err := p2.FetchOrchestrationItem(h.Ctx, LongLock, 0, filter)
			require.NoError(h.T, err)
			require.Nil(h.T, item2, "a locked instance must not be returned to another replica")
		}},
		{"ack_stores_pinned_version_via_metadata_update", func(h *H) {
			inst := h.ID("inst-backfill")
			h.Enqueue(h.P, StartItem(inst))
			item := h.MustFetchOrch(h.P, LongLock)
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:  1,
				HistoryDelta: []history.Event{capabilityStarted(inst, 1, "1.2.3")},
				Metadata:     StartedMetadata(), // no pinned version yet
			}))
			h.Enqueue(h.P, capabilityPing(inst, "ping"))

			// A later turn backfills the pinned version.
			item = h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			v := capabilityV(1, 2, 3)
			md := StartedMetadata()
			md.PinnedVersion = &v
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1, Metadata: md}))
			h.Enqueue(h.P, capabilityPing(inst, "ping2"))

			capabilityAwait(h, inst)
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9))),
				"the backfilled version must be stored, not left unpinned")
			item = capabilityFetch(h, capabilityRange(capabilityV(1, 0, 0), capabilityV(1, 9, 9)))
			require.NotNil(h.T, item, "the backfilled pinned version must be filterable")
			require.Equal(h.T, inst, item.Instance)
		}},
		{"provider_updates_pinned_version_when_told", func(h *H) {
			inst := h.ID("inst-update")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			item := capabilityMustFetch(h, capabilityRange(capabilityV(0, 0, 0), capabilityV(1, 9, 9)))
			v2 := capabilityV(2, 0, 0)
			md := StartedMetadata()
			md.PinnedVersion = &v2
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1, Metadata: md}),
				"the provider stores whatever pinned version the runtime gives, with no write-once guard")
			h.Enqueue(h.P, capabilityPing(inst, "ping2"))

			item = capabilityMustFetch(h, capabilityRange(v2, v2))
			require.Equal(h.T, inst, item.Instance)
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
			require.Nil(h.T, capabilityFetch(h, capabilityRange(capabilityV(1, 0, 0), capabilityV(1, 0, 0))),
				"the pinned version was updated to 2.0.0")
		}},
		{"fetch_corrupted_history_filtered_vs_unfiltered", func(h *H) {
			inst := h.ID("inst-corrupt")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			capabilityAwait(h, inst)
			h.CorruptHistory(inst)

			item, err := h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9)))
			require.NoError(h.T, err, "an excluded item must produce no error")
			require.Nil(h.T, item, "an excluded item must not be returned")

			item, err = h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
			require.NoError(h.T, err, "a corrupt history is reported in the item, not as an error")
			require.NotNil(h.T, item, "a corrupt history must still yield the item")
			require.Equal(h.T, inst, item.Instance)
			require.NotEmpty(h.T, item.HistoryError)
			require.Empty(h.T, item.History)
			require.NotEmpty(h.T, item.LockToken)
			require.Equal(h.T, uint32(1), item.AttemptCount)
			h.NoOrch(h.P) // the lock is held
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
			// Released, the same work comes back, the history error with it.
			again := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, again.Instance)
			require.Equal(h.T, item.Messages, again.Messages)
			require.NotEmpty(h.T, again.HistoryError)
			require.Equal(h.T, uint32(1), again.AttemptCount, "the abandon took back the first attempt")
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, again.LockToken, 0, true))
		}},
		{"fetch_deserialization_error_increments_attempt_count", func(h *H) {
			inst := h.ID("inst-deser")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			h.CorruptHistory(inst)
			capabilityPoisonCycles(h, inst, 2)
		}},
		{"fetch_deserialization_error_eventually_reaches_poison", func(h *H) {
			inst := h.ID("inst-poison")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			h.CorruptHistory(inst)
			capabilityPoisonCycles(h, inst, 5)
		}},
		{"fetch_filter_applied_before_history_deserialization", func(h *H) {
			inst := h.ID("inst-order")
			capabilitySeed(h, inst, capabilityV(99, 0, 0))
			capabilityAwait(h, inst)
			h.CorruptHistory(inst)

			item, err := h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, capabilityRange(capabilityV(1, 0, 0), capabilityV(2, 0, 0)))
			require.NoError(h.T, err, "the filter must be applied before the history is read")
			require.Nil(h.T, item, "an excluded version must not be returned, even with a corrupt history")

			item, err = h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
			require.NoError(h.T, err)
			require.NotNil(h.T, item)
			require.NotEmpty(h.T, item.HistoryError)
			require.Equal(h.T, uint32(1), item.AttemptCount, "the excluded fetch must not have counted an attempt")
			require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
		}},
		{
			// duroxide's fetch_single_range_only_uses_first_range pins a
			// phase-1 limitation (only the first range is used); our contract
			// (durable.DispatcherCapabilityFilter) matches any range.
			"fetch_multi_range_filter_matches_any_range", func(h *H) {
				a, b, c := h.ID("inst-range-a"), h.ID("inst-range-b"), h.ID("inst-range-c")
				capabilitySeed(h, a, capabilityV(1, 0, 0))
				capabilitySeed(h, b, capabilityV(3, 0, 0))
				capabilitySeed(h, c, capabilityV(2, 0, 0))
				filter := &durable.DispatcherCapabilityFilter{SupportedVersions: []durable.SemVerRange{
					{Min: capabilityV(1, 0, 0), Max: capabilityV(1, 5, 0)},
					{Min: capabilityV(3, 0, 0), Max: capabilityV(3, 5, 0)},
				}}
				var got []string
				for range 2 {
					got = append(got, capabilityMustFetch(h, filter).Instance) // both stay locked
				}
				slices.Sort(got)
				want := []string{a, b}
				slices.Sort(want)
				require.Equal(h.T, want, got, "an execution in any of the ranges is compatible")
				require.Nil(h.T, capabilityFetch(h, filter), "2.0.0 lies in neither range")
				item := h.MustFetchOrch(h.P, LongLock)
				require.Equal(h.T, c, item.Instance)
			}},
		{"ack_appends_event_to_corrupted_history", func(h *H) {
			inst := h.ID("inst-ack-corrupt")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			h.CorruptHistory(inst)

			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			require.NotEmpty(h.T, item.HistoryError)
			require.Empty(h.T, item.History)

			// The runtime ends the poisoned instance; the ack must only
			// append, never re-read or re-encode the corrupt events.
			details := history.PoisonError(history.PoisonDetails{AttemptCount: 4, MaxAttempts: 3,
				Type: history.PoisonFailedDeserialization, Instance: inst, ExecutionID: item.ExecutionID,
				DecodeError: item.HistoryError})
			output := details.DisplayMessage()
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:  item.ExecutionID,
				HistoryDelta: []history.Event{Event(inst, item.ExecutionID, 99999, history.OrchestrationFailed{Details: details})},
				Metadata: durable.ExecutionMetadata{Status: durable.StatusFailed, Output: &output,
					OrchestrationName: item.OrchestrationName, OrchestrationVersion: item.Version},
			}), "ack must succeed on a corrupt history")

			info, err := h.Admin().GetInstanceInfo(h.Ctx, inst)
			require.NoError(h.T, err)
			require.Equal(h.T, durable.StatusFailed, info.Status)
			require.NotNil(h.T, info.Output)
			require.Equal(h.T, output, *info.Output)
			require.True(h.T, strings.Contains(*info.Output, "deserialization failed"))
			h.NoOrch(h.P) // the poisoned message was consumed
		}},
		{"fetch_with_default_filter_accepts_older_rejects_newer", func(h *H) {
			older, newer := h.ID("inst-older"), h.ID("inst-newer")
			capabilitySeed(h, older, capabilityV(0, 5, 0))
			capabilitySeed(h, newer, capabilityV(1, 0, 1))
			filter := durable.DefaultCapabilityFilter(capabilityV(1, 0, 0))

			item := capabilityMustFetch(h, filter)
			require.Equal(h.T, older, item.Instance)
			require.Nil(h.T, capabilityFetch(h, filter), "a newer pinned version must be skipped")
			item = h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, newer, item.Instance)
		}},
		{"fetch_filter_skip_does_not_count_attempt", func(h *H) {
			inst := h.ID("inst-skip-attempt")
			capabilitySeed(h, inst, capabilityV(1, 0, 0))
			capabilityAwait(h, inst)
			excluded := capabilityRange(capabilityV(2, 0, 0), capabilityV(2, 9, 9))
			for range 3 {
				require.Nil(h.T, capabilityFetch(h, excluded))
			}
			item := capabilityFetch(h, nil)
			require.NotNil(h.T, item)
			require.Equal(h.T, inst, item.Instance)
			require.Equal(h.T, uint32(1), item.AttemptCount, "skipped fetches must not count attempts")
		}},
		{"runtime_version_stamps_round_trip", capabilityStampsRoundTrip},
	}
}

func capabilityStampsRoundTrip(h *H) {
	id := h.ID("stamps")
	old := capabilityV(0, 0, 9) // older than the runtime writing the later turns
	h.Enqueue(h.P, StartItem(id))
	item := h.MustFetchOrch(h.P, LongLock)
	started := capabilityStarted(id, 1, old.String())
	scheduled := Event(id, 1, 2, history.ActivityScheduled{Name: "Activity", Input: "{}"})
	scheduled.RuntimeVersion = old.String()
	md := StartedMetadata()
	md.PinnedVersion = &old
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: []history.Event{started, scheduled}, Metadata: md}))

	// A newer runtime fetches the execution: the history comes back as the
	// older one wrote it.
	h.Enqueue(h.P, capabilityPing(id, "ping-1"))
	item = h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, []history.Event{started, scheduled}, item.History, "fetch returns the stamps as written")

	// Its turn appends events with its own stamp and leaves the pinned version alone.
	newer := Event(id, 1, 3, history.ExternalEvent{Name: "ping-1", Data: "{}"})
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: []history.Event{newer}}))
	want := []history.Event{started, scheduled, newer}
	got, err := h.P.Read(h.Ctx, id)
	require.NoError(h.T, err)
	require.Equal(h.T, want, got, "Read returns every event with the stamp it was appended with")
	got, err = h.P.ReadWithExecution(h.Ctx, id, 1)
	require.NoError(h.T, err)
	require.Equal(h.T, want, got, "ReadWithExecution likewise")

	// Fetched again, only under a filter for the older pinned version.
	h.Enqueue(h.P, capabilityPing(id, "ping-2"))
	item = capabilityMustFetch(h, capabilityRange(old, old))
	require.Equal(h.T, id, item.Instance)
	require.Equal(h.T, want, item.History)
}

// capabilityV builds a SemVer.
func capabilityV(major, minor, patch uint64) durable.SemVer {
	return durable.SemVer{Major: major, Minor: minor, Patch: patch}
}

// capabilityRange is a filter for the single inclusive range [lo, hi].
func capabilityRange(lo, hi durable.SemVer) *durable.DispatcherCapabilityFilter {
	return &durable.DispatcherCapabilityFilter{SupportedVersions: []durable.SemVerRange{{Min: lo, Max: hi}}}
}

// capabilityPing is a message that triggers another turn of instance.
func capabilityPing(instance, name string) durable.WorkItem {
	return durable.ExternalRaised{Instance: instance, Name: name, Data: "{}"}
}

// capabilityStarted is OrchestrationStarted of an execution, stamped with
// the given runtime version.
func capabilityStarted(instance string, executionID uint64, runtimeVersion string) history.Event {
	ev := Started(instance, executionID)
	ev.RuntimeVersion = runtimeVersion
	return ev
}

// capabilityFetch fetches once from h.P with the filter, with a long lock.
func capabilityFetch(h *H, filter *durable.DispatcherCapabilityFilter) *durable.OrchestrationItem {
	h.T.Helper()
	item, err := h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, filter)
	require.NoError(h.T, err)
	return item
}

// capabilityMustFetch fetches from h.P with the filter, retrying briefly,
// and fails if nothing comes.
func capabilityMustFetch(h *H, filter *durable.DispatcherCapabilityFilter) *durable.OrchestrationItem {
	h.T.Helper()
	var item *durable.OrchestrationItem
	h.Eventually(func() bool {
		item = capabilityFetch(h, filter)
		return item != nil
	}, "an orchestration item matching the filter")
	return item
}

// capabilitySeed creates instance on h.P with its execution 1 pinned at v,
// and leaves one message queued for it, enqueued by the same ack.
func capabilitySeed(h *H, instance string, v durable.SemVer) {
	h.T.Helper()
	h.Enqueue(h.P, StartItem(instance))
	// Earlier seeds left messages queued: set their instances aside until
	// the new one comes up.
	var others []string
	var item *durable.OrchestrationItem
	for {
		item = h.MustFetchOrch(h.P, LongLock)
		if item.Instance == instance {
			break
		}
		others = append(others, item.LockToken)
	}
	md := StartedMetadata()
	md.PinnedVersion = &v
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:       1,
		HistoryDelta:      []history.Event{capabilityStarted(instance, 1, v.String())},
		OrchestratorItems: []durable.WorkItem{capabilityPing(instance, "ping")},
		Metadata:          md,
	}))
	for _, tok := range others {
		require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, tok, 0, true))
	}
}

// capabilityAwait waits until instance's queued work is fetchable from h.P
// (fetching it unfiltered, then abandoning it without counting the
// attempt), so that a following "no item" check is not vacuous on a provider
// that makes new work visible with a delay. The instance must be the only
// one with work.
func capabilityAwait(h *H, instance string) {
	h.T.Helper()
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, instance, item.Instance)
	require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, true))
}

// capabilityPoisonCycles fetches the corrupt instance n times, abandoning
// it each time without undoing the attempt, and checks that every fetch
// reports the history error with the attempt counted.
func capabilityPoisonCycles(h *H, instance string, n uint32) {
	h.T.Helper()
	for i := uint32(1); i <= n; i++ {
		item, err := h.P.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
		if err == nil && item == nil {
			// Work may become visible again with a delay: retry briefly.
			item = h.MustFetchOrch(h.P, LongLock)
		}
		require.NoError(h.T, err, "fetch %d: a corrupt history is reported in the item, not as an error", i)
		require.Equal(h.T, instance, item.Instance)
		require.NotEmpty(h.T, item.HistoryError, "fetch %d must set HistoryError", i)
		require.Empty(h.T, item.History, "fetch %d must return no history", i)
		require.Equal(h.T, i, item.AttemptCount, "fetch %d must count its attempt", i)
		require.NoError(h.T, h.P.AbandonOrchestrationItem(h.Ctx, item.LockToken, 0, false))
	}
	require.GreaterOrEqual(h.T, h.MaxAttemptCount(instance), n,
		"the stored attempt count must reach the number of fetches")
}
