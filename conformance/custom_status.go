package conformance

import (
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// customStatusScenarios checks the custom status materialised from
// CustomStatusUpdated events:
//
//   - an ack whose delta holds CustomStatusUpdated events applies the last
//     one (set or clear) and increments the version by one;
//   - an ack without such an event leaves status and version untouched;
//   - a new instance has version 0 and no status;
//   - GetCustomStatus returns the status only when its version is greater
//     than the caller's last seen version, nil for an unknown instance, and
//     takes no lock.
func customStatusScenarios() []Scenario {
	return []Scenario{
		{"custom_status_set", func(h *H) {
			inst := h.ID("cs-set")
			h.CreateInstance(h.P, inst)
			customStatusTurn(h, inst, customStatusEvent(inst, 2, Str("progress")))
			customStatusRequire(h, inst, Str("progress"), 1)
		}},
		{"custom_status_clear", func(h *H) {
			inst := h.ID("cs-clear")
			h.CreateInstance(h.P, inst)
			customStatusTurn(h, inst, customStatusEvent(inst, 2, Str("temp")))
			customStatusRequire(h, inst, Str("temp"), 1)

			customStatusTurn(h, inst, customStatusEvent(inst, 3, nil))
			customStatusRequire(h, inst, nil, 2)
		}},
		{"custom_status_none_preserves", func(h *H) {
			inst := h.ID("cs-noop")
			h.CreateInstance(h.P, inst)
			customStatusTurn(h, inst, customStatusEvent(inst, 2, Str("keep-me")))
			// A turn with other events but no CustomStatusUpdated, then an empty one.
			customStatusTurn(h, inst, Event(inst, 1, 3, history.ExternalEvent{Name: "poke", Data: "{}"}))
			customStatusTurn(h, inst)
			customStatusRequire(h, inst, Str("keep-me"), 1)
		}},
		{"custom_status_version_increments", func(h *H) {
			inst := h.ID("cs-ver")
			h.CreateInstance(h.P, inst)
			customStatusTurn(h, inst, customStatusEvent(inst, 2, Str("a")))
			customStatusRequire(h, inst, Str("a"), 1)
			customStatusTurn(h, inst, customStatusEvent(inst, 3, Str("b")))
			customStatusRequire(h, inst, Str("b"), 2)
			customStatusTurn(h, inst, customStatusEvent(inst, 4, nil))
			customStatusRequire(h, inst, nil, 3)
			// Clearing an already cleared status is still a change.
			customStatusTurn(h, inst, customStatusEvent(inst, 5, nil))
			customStatusRequire(h, inst, nil, 4)
		}},
		{"custom_status_polling_no_change", func(h *H) {
			inst := h.ID("cs-poll")
			h.CreateInstance(h.P, inst)
			customStatusTurn(h, inst, customStatusEvent(inst, 2, Str("v1")))

			cs, err := h.P.GetCustomStatus(h.Ctx, inst, 1)
			require.NoError(h.T, err)
			require.Nil(h.T, cs, "no change since version 1")
			cs, err = h.P.GetCustomStatus(h.Ctx, inst, 5)
			require.NoError(h.T, err)
			require.Nil(h.T, cs, "a last seen version ahead of the stored one is no change")
			cs, err = h.P.GetCustomStatus(h.Ctx, inst, 0)
			require.NoError(h.T, err)
			require.NotNil(h.T, cs, "version 1 is newer than 0")
			require.Equal(h.T, uint64(1), cs.Version)
			require.Equal(h.T, Str("v1"), cs.Status)
		}},
		{"custom_status_nonexistent_instance", func(h *H) {
			cs, err := h.P.GetCustomStatus(h.Ctx, h.ID("does-not-exist"), 0)
			require.NoError(h.T, err)
			require.Nil(h.T, cs)
		}},
		{"custom_status_default_on_new_instance", func(h *H) {
			inst := h.ID("cs-default")
			h.CreateInstance(h.P, inst)
			cs, err := h.P.GetCustomStatus(h.Ctx, inst, 0)
			require.NoError(h.T, err)
			require.Nil(h.T, cs, "a new instance has version 0, which is not newer than 0")
		}},
		{"custom_status_last_update_in_delta_wins", func(h *H) {
			inst := h.ID("cs-last")
			h.CreateInstance(h.P, inst)
			// Set, clear, set in one turn: the last one is applied, once.
			customStatusTurn(h, inst,
				customStatusEvent(inst, 2, Str("first")),
				customStatusEvent(inst, 3, nil),
				Event(inst, 1, 4, history.ExternalEvent{Name: "poke", Data: "{}"}),
				customStatusEvent(inst, 5, Str("last")),
				Event(inst, 1, 6, history.ExternalEvent{Name: "poke", Data: "{}"}))
			customStatusRequire(h, inst, Str("last"), 1)

			// Set then clear in one turn: cleared.
			customStatusTurn(h, inst, customStatusEvent(inst, 7, Str("x")), customStatusEvent(inst, 8, nil))
			customStatusRequire(h, inst, nil, 2)

			hist, err := h.P.Read(h.Ctx, inst)
			require.NoError(h.T, err)
			require.Len(h.T, hist, 8, "every CustomStatusUpdated event is kept in the history")
		}},
		{"custom_status_readable_while_instance_locked", func(h *H) {
			inst := h.ID("cs-locked")
			h.CreateInstance(h.P, inst)
			customStatusTurn(h, inst, customStatusEvent(inst, 2, Str("busy")))

			h.Enqueue(h.P, durable.ExternalRaised{Instance: inst, Name: "poke", Data: "{}"})
			item := h.MustFetchOrch(h.P, LongLock)
			require.Equal(h.T, inst, item.Instance)
			// Reading takes no lock: it works from another replica while the
			// instance is locked, and leaves the lock intact.
			cs, err := h.Open().GetCustomStatus(h.Ctx, inst, 0)
			require.NoError(h.T, err)
			require.NotNil(h.T, cs)
			require.Equal(h.T, Str("busy"), cs.Status)
			require.Equal(h.T, uint64(1), cs.Version)
			require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: 1, HistoryDelta: []history.Event{customStatusEvent(inst, 3, Str("done"))}}))
			customStatusRequire(h, inst, Str("done"), 2)
		}},
	}
}

// customStatusEvent is a CustomStatusUpdated event of execution 1: set to
// *status, or cleared for nil.
func customStatusEvent(instance string, eventID uint64, status *string) history.Event {
	return Event(instance, 1, eventID, history.CustomStatusUpdated{Status: status})
}

// customStatusTurn runs one turn of instance (triggered by an external
// event) that appends delta and changes no metadata.
func customStatusTurn(h *H, instance string, delta ...history.Event) {
	h.T.Helper()
	h.Enqueue(h.P, durable.ExternalRaised{Instance: instance, Name: "poke", Data: "{}"})
	item := h.MustFetchOrch(h.P, LongLock)
	require.Equal(h.T, instance, item.Instance)
	require.NoError(h.T, h.P.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: delta}))
}

// customStatusRequire checks the instance's custom status and version as
// read with last seen version 0.
func customStatusRequire(h *H, instance string, status *string, version uint64) {
	h.T.Helper()
	cs, err := h.P.GetCustomStatus(h.Ctx, instance, 0)
	require.NoError(h.T, err)
	require.NotNil(h.T, cs, "custom status version %d expected", version)
	require.Equal(h.T, version, cs.Version)
	require.Equal(h.T, status, cs.Status)
}
