package provider

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/runtime/runtimetest"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// The bad-input tests feed the provider what a careless caller, a
// corrupted store or an operator's hand can produce, and check that each
// gets a clear error or a recovery: no panic, nothing half written,
// nothing silently dropped, nothing stuck.

// eachMode runs f as parallel subtests on a polling provider and on an
// event-driven replica that owns every slot (its own lease partition),
// each on a container of its own.
func eachMode(t *testing.T, name string, f func(t *testing.T, p *Provider, container string)) {
	t.Parallel()
	for _, mode := range []Mode{ModePolling, ModeEventDriven} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			container := freshContainer(name + "-" + mode.String())
			f(t, openMode(t, mode, container), container)
		})
	}
}

// openMode opens a provider of mode on container: polling with its
// reconciler out of the way, or an event-driven replica with a lease
// partition of its own that has joined and owns every slot.
func openMode(t *testing.T, mode Mode, container string) *Provider {
	t.Helper()
	if mode == ModePolling {
		return openProvider(t, quietConfig(container))
	}
	cfg := eventConfig(container)
	cfg.leasePartition = "$leases-" + randomID()
	cfg.joinEagerly = true
	p := openProvider(t, cfg)
	require.Eventually(t, func() bool { return ownedCount(p) == slots.Count }, hang, 5*time.Millisecond, "the replica owns every slot")
	return p
}

// fetchFor fetches until an orchestration item comes (long-polling in
// event-driven mode, polling every few milliseconds otherwise), failing
// after hang; the item must be inst's.
func fetchFor(t *testing.T, p *Provider, inst string) *durable.OrchestrationItem {
	t.Helper()
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		item, err := p.FetchOrchestrationItem(context.Background(), lockLong, 200*time.Millisecond, nil)
		require.NoError(t, err)
		if item != nil {
			require.Equal(t, inst, item.Instance)
			return item
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.FailNow(t, "no orchestration item", "instance %q not fetched within %v", inst, hang)
	return nil
}

// fetchWorkFor fetches until a work item comes, failing after hang.
func fetchWorkFor(t *testing.T, p *Provider) *durable.LockedWorkItem {
	t.Helper()
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		w, err := p.FetchWorkItem(context.Background(), lockLong, 200*time.Millisecond, nil, durable.AnyTag())
		require.NoError(t, err)
		if w != nil {
			return w
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.FailNow(t, "no work item", "nothing fetched within %v", hang)
	return nil
}

// until evaluates cond on the test's goroutine (so that it may use
// require) every few milliseconds until it holds, failing after hang.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out", "%s: not within %v", what, hang)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startTurn enqueues a start for inst, fetches it and commits its first
// turn (OrchestrationStarted), in either mode.
func startTurn(t *testing.T, p *Provider, inst string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
	item := fetchFor(t, p, inst)
	require.Len(t, item.Messages, 1)
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", Status: durable.StatusRunning}}))
}

// requirePermanent checks that err is a permanent provider error whose
// text mentions every one of words.
func requirePermanent(t *testing.T, err error, words ...string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, durable.ErrPermanent, "%v", err)
	var pe *durable.ProviderError
	require.True(t, errors.As(err, &pe), "%T is a *durable.ProviderError", err)
	for _, w := range words {
		require.Contains(t, err.Error(), w)
	}
}

// oversizeBytes is a payload size beyond Cosmos DB's 2 MB document limit.
const oversizeBytes = store.MaxDocumentBytes + 1

// TestBadInputOversizePayloads: every write whose document would exceed
// Cosmos DB's 2 MB limit (a start's input, a raised event's data, an
// activity's input, an activity result, a history event, an activity a
// turn schedules) fails permanently, naming the limit, and writes
// nothing; the lock of a refused ack is still held, so a corrected ack
// commits.
func TestBadInputOversizePayloads(t *testing.T) {
	eachMode(t, "oversize", func(t *testing.T, p *Provider, container string) {
		ctx := context.Background()
		const inst = "big"
		oversize := strings.Repeat("x", oversizeBytes)

		err := p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: oversize, ExecutionID: 1}, 0)
		requirePermanent(t, err, "2 MB")
		err = p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: oversize, ExecutionID: 1,
			RequestID: "req-big"}, 0)
		requirePermanent(t, err, "2 MB")
		require.Zero(t, countDocs(t, container, inst, "true"), "a refused start writes nothing")

		startTurn(t, p, inst)
		err = p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: oversize}, 0)
		requirePermanent(t, err, "2 MB")
		err = p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: oversize})
		requirePermanent(t, err, "2 MB")
		require.Zero(t, countDocs(t, container, inst, "c.type = 'orch_queue' OR c.type = 'worker_queue'"), "nothing enqueued")

		// A turn with an oversize event, then one scheduling an activity
		// with an oversize input: refused, nothing written, lock kept.
		require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: "{}"}, 0))
		item := fetchFor(t, p, inst)
		err = p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ExternalEvent{Name: "go", Data: oversize})}})
		requirePermanent(t, err, "2 MB")
		err = p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"})},
			WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: oversize}}})
		requirePermanent(t, err, "2 MB")
		evs, err := p.Read(ctx, inst)
		require.NoError(t, err)
		require.Len(t, evs, 1, "no refused event is visible")
		require.Zero(t, countDocs(t, container, inst, "c.type = 'staged' OR IS_DEFINED(c.stagedBy) OR c.type = 'worker_queue'"), "nothing staged")
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"})},
			WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}}}),
			"the lock survived the refused acks")

		// An activity result beyond the limit: refused, the item stays
		// locked by its worker, which can still complete it.
		w := fetchWorkFor(t, p)
		err = p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: oversize})
		requirePermanent(t, err, "2 MB")
		require.Equal(t, 1, countDocs(t, container, inst, "c.type = 'worker_queue'"), "the work item is kept")
		require.Zero(t, countDocs(t, container, inst, "c.type = 'orch_queue'"), "no completion written")
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: `"ok"`}))
		item = fetchFor(t, p, inst)
		require.Len(t, item.Messages, 1)
		require.Equal(t, `"ok"`, item.Messages[0].(durable.ActivityCompleted).Result)
	})
}

// TestBadInputInvalidUTF8: a payload string that is not valid UTF-8 (a
// start's input, a raised event's data, an event of a turn, an activity
// result) cannot be stored as it was given (JSON would replace the bad
// bytes with U+FFFD, a silent change of the caller's data): each such
// write fails permanently and writes nothing.
func TestBadInputInvalidUTF8(t *testing.T) {
	eachMode(t, "utf8", func(t *testing.T, p *Provider, container string) {
		ctx := context.Background()
		const inst = "utf8"
		bad := "ok\xff\xfe" + "tail"

		requirePermanent(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O", Input: bad, ExecutionID: 1}, 0), "UTF-8")
		requirePermanent(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: inst, Orchestration: "O\xc3", Input: "{}", ExecutionID: 1}, 0), "UTF-8")
		require.Zero(t, countDocs(t, container, inst, "true"))

		startTurn(t, p, inst)
		requirePermanent(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: bad}, 0), "UTF-8")
		requirePermanent(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: bad}), "UTF-8")
		require.Zero(t, countDocs(t, container, inst, "c.type = 'orch_queue' OR c.type = 'worker_queue'"))

		require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: "{}"}, 0))
		item := fetchFor(t, p, inst)
		requirePermanent(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ExternalEvent{Name: "go", Data: bad})}}), "UTF-8")
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ActivityScheduled{Name: "A", Input: "{}"})},
			WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}}}))
		w := fetchWorkFor(t, p)
		requirePermanent(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: bad}), "UTF-8")
		require.Zero(t, countDocs(t, container, inst, "c.type = 'orch_queue'"))
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 2, Result: "\u00e9\U0001F600"}))
		item = fetchFor(t, p, inst)
		require.Equal(t, "\u00e9\U0001F600", item.Messages[0].(durable.ActivityCompleted).Result, "valid UTF-8 round-trips exactly")
		evs, err := p.Read(ctx, inst)
		require.NoError(t, err)
		require.Len(t, evs, 2)
	})
}

// writeRaw creates a document in container, as an operator or another
// program would, bypassing the provider.
func writeRaw(t *testing.T, container, partition string, doc map[string]any) {
	t.Helper()
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = rawContainer(t, container).CreateItem(context.Background(), azcosmos.NewPartitionKeyString(partition), b, nil)
	require.NoError(t, err)
}

// rawQueueDoc is a queue document as the store writes it, with workItem
// as given.
func rawQueueDoc(id, inst, typ string, workItem any) map[string]any {
	now := time.Now()
	return map[string]any{"id": id, "instanceId": inst, "type": typ, "workItem": workItem,
		"dispatchSlot": slots.Of(inst), "visibleAt": now.UnixMilli(), "enqueuedAt": now.UnixMicro(),
		"lockedUntil": 0, "attemptCount": 0, "sessionId": "", "tag": ""}
}

// TestBadInputGarbageOrchestratorMessage: orchestrator messages whose
// workItem is not a work item (garbage text, or not even a string),
// written behind the provider's back, never wedge their instance. As the
// store documents, a fetch drops an undecodable orchestrator message
// (deletes it, logging the instance and message id at Error) and returns
// the instance's other messages; a garbage message of an instance that
// never started goes the same way without a lock.
func TestBadInputGarbageOrchestratorMessage(t *testing.T) {
	eachMode(t, "garbage-orch", func(t *testing.T, p *Provider, container string) {
		ctx := context.Background()
		const inst = "g"
		startTurn(t, p, inst)
		writeRaw(t, container, inst, rawQueueDoc("garbage-text", inst, "orch_queue", `{"type":"ExternalRaised","instance":`))
		writeRaw(t, container, inst, rawQueueDoc("garbage-kind", inst, "orch_queue", `{"type":"NoSuchWorkItem","instance":"g"}`))
		writeRaw(t, container, inst, rawQueueDoc("garbage-number", inst, "orch_queue", 42))
		writeRaw(t, container, inst, rawQueueDoc("garbage-object", inst, "orch_queue", map[string]any{"type": "ExternalRaised"}))
		require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: "{}"}, 0))

		item := fetchFor(t, p, inst)
		require.Empty(t, item.HistoryError)
		require.Len(t, item.History, 1)
		require.Len(t, item.Messages, 1, "only the decodable message is returned")
		require.Equal(t, "go", item.Messages[0].(durable.ExternalRaised).Name)
		require.Zero(t, countDocs(t, container, inst, "STARTSWITH(c.id, 'garbage-')"), "the undecodable messages were dropped")
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(inst, 1, 2, history.ExternalEvent{Name: "go", Data: "{}"})}}))
		require.Zero(t, countDocs(t, container, inst, "c.type = 'orch_queue'"))

		// An instance that never started, with only garbage: nothing to
		// run, nothing stuck.
		const lone = "g-lone"
		writeRaw(t, container, lone, rawQueueDoc("garbage-lone", lone, "orch_queue", "not json"))
		until(t, "the lone garbage message is dropped", func() bool {
			item, err := p.FetchOrchestrationItem(ctx, lockLong, 100*time.Millisecond, nil)
			require.NoError(t, err)
			require.Nil(t, item, "nothing to run")
			return countDocs(t, container, lone, "true") == 0
		})
		startTurn(t, p, lone)
	})
}

// TestBadInputGarbageWorkItem: a worker item whose workItem cannot be
// decoded, written behind the provider's back, does not fail fetches
// forever. The fetch that locks it poisons it instead: the item is
// replaced, in one batch, by an ActivityFailed completion for the
// activity its document names (a non-retryable infrastructure failure
// carrying the decoding error), so the orchestration waiting on it
// learns the activity failed; the fetch goes on to the next item.
func TestBadInputGarbageWorkItem(t *testing.T) {
	eachMode(t, "garbage-work", func(t *testing.T, p *Provider, container string) {
		ctx := context.Background()
		const inst = "gw"
		startTurn(t, p, inst)
		doc := rawQueueDoc("w:1:2", inst, "worker_queue", `{"type":"ActivityExecute","instance":"gw","id":`)
		doc["executionId"], doc["activityId"] = 1, 2
		writeRaw(t, container, inst, doc)
		require.NoError(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: inst, ExecutionID: 1, ID: 3, Name: "A", Input: "{}"}))

		w := fetchWorkFor(t, p)
		require.Equal(t, uint64(3), w.Item.(durable.ActivityExecute).ID, "the fetch skips the poisoned item")
		require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: inst, ExecutionID: 1, ID: 3, Result: "{}"}))
		until(t, "the undecodable item is poisoned", func() bool {
			w, err := p.FetchWorkItem(ctx, lockLong, 100*time.Millisecond, nil, durable.AnyTag())
			require.NoError(t, err, "fetches never fail on the undecodable item")
			require.Nil(t, w, "nothing else to run")
			return countDocs(t, container, inst, "c.type = 'worker_queue'") == 0
		})

		var failed *durable.ActivityFailed
		until(t, "the orchestration receives the ActivityFailed", func() bool {
			item, err := p.FetchOrchestrationItem(ctx, lockLong, 100*time.Millisecond, nil)
			require.NoError(t, err)
			if item == nil {
				return false
			}
			for _, m := range item.Messages {
				if f, ok := m.(durable.ActivityFailed); ok {
					failed = &f
				}
			}
			require.NoError(t, p.AbandonOrchestrationItem(ctx, item.LockToken, 0, true))
			return failed != nil
		})
		require.Equal(t, uint64(2), failed.ID)
		require.Equal(t, history.CategoryInfrastructure, failed.Details.Category)
		require.False(t, failed.Details.IsRetryable())
		require.Contains(t, failed.Details.Message, "cannot be decoded")
	})
}

// editHistory replaces the stored document of event id of inst's first
// execution with edit's version of it, as an operator's hand would.
func editHistory(t *testing.T, container, inst string, id uint64, edit func(doc map[string]any)) {
	t.Helper()
	cc := rawContainer(t, container)
	ctx := context.Background()
	docID := "h:1:" + strconv.FormatUint(id, 10)
	resp, err := cc.ReadItem(ctx, azcosmos.NewPartitionKeyString(inst), docID, nil)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	edit(doc)
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = cc.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(inst), docID, b, nil)
	require.NoError(t, err)
}

// TestCorruptHistoryEditedInPlace: a history document edited by hand
// (eventData replaced with garbage, with something that is not a string
// at all, or with a well-formed event claiming another event id) is
// reported by the next fetch, with the lock held and the attempt counted
// (HistoryError, no History), and by reads as a permanent error, never
// replayed as if it were sound. The runtime's answer, a poison turn that
// fails the instance, commits.
func TestCorruptHistoryEditedInPlace(t *testing.T) {
	otherID, err := history.Marshal(ev("x", 1, 9, history.ExternalEvent{Name: "go", Data: "{}"}))
	require.NoError(t, err)
	edits := []struct {
		name string
		edit func(doc map[string]any)
	}{
		{"garbage", func(doc map[string]any) { doc["eventData"] = `{"type":"NoSuchEvent","corrupt":` }},
		{"not-a-string", func(doc map[string]any) { doc["eventData"] = map[string]any{"type": "ExternalEvent", "event_id": 2} }},
		{"no-event-id", func(doc map[string]any) { doc["eventId"] = "two" }},
		{"another-id", func(doc map[string]any) { doc["eventData"] = string(otherID) }},
	}
	eachMode(t, "corrupt-history", func(t *testing.T, p *Provider, container string) {
		ctx := context.Background()
		for _, tc := range edits {
			inst := "h-" + tc.name
			startTurn(t, p, inst)
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "go", Data: "{}"}, 0))
			item := fetchFor(t, p, inst)
			require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(inst, 1, 2, history.ExternalEvent{Name: "go", Data: "{}"})}}))

			editHistory(t, container, inst, 2, tc.edit)
			_, rerr := p.Read(ctx, inst)
			requirePermanent(t, rerr)
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: inst, Name: "again", Data: "{}"}, 0))
			item = fetchFor(t, p, inst)
			require.NotEmpty(t, item.HistoryError, "%s: the fetch reports the corrupt history", tc.name)
			require.Empty(t, item.History, tc.name)
			require.Len(t, item.Messages, 1, tc.name)
			require.EqualValues(t, 1, item.AttemptCount)

			out := "history cannot be decoded: " + item.HistoryError
			require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(inst, 1, history.PoisonEventID, history.OrchestrationFailed{
					Details: history.PoisonError(history.PoisonDetails{Type: history.PoisonFailedDeserialization, Instance: inst,
						ExecutionID: 1, AttemptCount: 1, DecodeError: item.HistoryError})})},
				Metadata: durable.ExecutionMetadata{Status: durable.StatusFailed, Output: &out}}), "%s: the poison turn commits", tc.name)
			info, err := p.GetInstanceInfo(ctx, inst)
			require.NoError(t, err)
			require.Equal(t, durable.StatusFailed, info.Status, tc.name)
			require.Zero(t, countDocs(t, container, inst, "c.type = 'orch_queue'"), "%s: nothing left queued", tc.name)
		}
	})
}

// TestCorruptHistoryAnotherKindFailsReplay: a history event replaced by a
// well-formed event of another kind under the same id cannot be told from
// a sound one by the store; the runtime's replay must catch it. An
// orchestration that ran an activity and waits for an event has its
// ActivityScheduled replaced by a TimerCreated: on the next turn the
// replay finds that the history does not match what the code schedules,
// and the instance fails as nondeterministic instead of running on from a
// wrong history.
func TestCorruptHistoryAnotherKindFailsReplay(t *testing.T) {
	t.Parallel()
	container := freshContainer("corrupt-kind")
	env := &runtimetest.Env{T: t, Open: func() durable.Provider { return openProvider(t, testConfig(container)) },
		Reg: runtime.NewRegistry()}
	env.Client = runtime.NewClient(env.Open())
	runtime.RegisterActivityRaw(env.Reg, "A", func(context.Context, string) (string, error) { return `"a"`, nil })
	runtime.RegisterOrchestrationRaw(env.Reg, "ActThenWait", func(ctx *runtime.OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.CallActivityRaw("A", "").AwaitRaw(); err != nil {
			return "", err
		}
		return ctx.WaitForEvent("go").AwaitRaw()
	})
	env.StartDefault()
	ctx := env.Ctx()
	const inst = "kind"
	require.NoError(t, env.Client.StartOrchestrationRaw(ctx, inst, "ActThenWait", ""))
	env.WaitForSubscription(inst, "go", 1)
	evs, err := env.Client.ReadHistory(ctx, inst)
	require.NoError(t, err)
	var scheduled uint64
	for _, e := range evs {
		if _, ok := e.Kind.(history.ActivityScheduled); ok {
			scheduled = e.EventID
		}
	}
	require.NotZero(t, scheduled)
	timer, err := history.Marshal(ev(inst, 1, scheduled, history.TimerCreated{FireAtMS: 1}))
	require.NoError(t, err)
	editHistory(t, container, inst, scheduled, func(doc map[string]any) { doc["eventData"] = string(timer) })

	require.NoError(t, env.Client.RaiseEventRaw(ctx, inst, "go", `"x"`))
	failure := env.RequireFailed(inst)
	require.Equal(t, history.CategoryConfiguration, failure.Category, failure.DisplayMessage())
	require.Equal(t, string(history.ConfigNondeterminism), failure.Kind, failure.DisplayMessage())
	t.Logf("failure: %s", failure.DisplayMessage())
}

// instanceIDs are ids of every character class the provider must carry
// through unchanged: characters Cosmos DB refuses or cannot address in
// document ids (escaped in the ids that embed user strings), the escape
// character itself, controls, quotes, characters outside the BMP,
// combining marks, and the longest ids accepted.
func instanceIDs() map[string]string {
	return map[string]string{
		"ascii":       "abcXYZ0189",
		"slash":       "a/b",
		"dotdot":      "../a/./b/..",
		"backslash":   `a\b`,
		"question":    "a?b=c",
		"hash":        "a#b",
		"percent":     "a%2Fb%",
		"spaces":      " a b ",
		"tilde":       "~7E~a~",
		"controls":    "a\x00b\x01\t\n\r\x1f\x7fc",
		"quotes":      `a"b'c` + "`",
		"json":        `{"id":"x","instanceId":["y"]}`,
		"emoji":       "\U0001F680\U0001F469\u200d\U0001F4BB",
		"combining":   "e\u0301\u0301a\u0308",
		"lone-mark":   "\u0301",
		"bom-nbsp":    "\ufeff\u00a0\u2028",
		"max-ascii":   strings.Repeat("m", 1024),
		"max-utf8":    strings.Repeat("\u20ac", 341) + "a",
		"max-escaped": strings.Repeat("/", 1024),
	}
}

// TestBadInputInstanceIDs: every id of instanceIDs makes the whole round
// trip, in both modes: a client (another provider, so that in
// event-driven mode the replica learns of the work from its change feed)
// starts it; a turn schedules a child (an outbox delivery keyed by the
// id) and an activity; the child's completion, the activity's and a
// raised event come back to it; its history reads back with the id on
// every event; it is listed; deleting it (with its child) empties both
// partitions. An id over store.MaxInstanceIDBytes, an empty one and one
// that is not UTF-8 are refused permanently, with nothing written.
func TestBadInputInstanceIDs(t *testing.T) {
	eachMode(t, "ids", func(t *testing.T, p *Provider, container string) {
		ctx := context.Background()
		client := openProvider(t, quietConfig(container))
		for name, id := range instanceIDs() {
			require.LessOrEqual(t, len(id), store.MaxInstanceIDBytes, name)
			idRoundTrip(t, p, client, container, name, id)
		}

		for name, id := range map[string]string{"over": strings.Repeat("o", store.MaxInstanceIDBytes+1), "empty": "",
			"not-utf8": "a\xffb"} {
			err := client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0)
			requirePermanent(t, err, "instance")
			requirePermanent(t, client.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: id, Name: "go"}, 0), "instance")
			requirePermanent(t, client.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: 1, Name: "A"}), "instance")
			if id != "" {
				require.Zero(t, countVia(t, client, id, "true"), "%s: nothing written", name)
			}
		}
		// A turn naming an over-long child is refused as a whole.
		startTurn(t, p, "parent-of-long")
		require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "parent-of-long", Name: "go", Data: "{}"}, 0))
		item := fetchFor(t, p, "parent-of-long")
		long := strings.Repeat("l", store.MaxInstanceIDBytes+1)
		requirePermanent(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta:      []history.Event{ev("parent-of-long", 1, 2, history.SubOrchestrationScheduled{Name: "C", Instance: long, Input: "{}"})},
			OrchestratorItems: []durable.WorkItem{durable.StartOrchestration{Instance: long, Orchestration: "C", Input: "{}", ExecutionID: 1, ParentInstance: "parent-of-long", ParentID: 2}}}))
		require.Zero(t, countDocs(t, container, "parent-of-long", "c.type = 'outbox_intent' OR c.type = 'history' AND c.eventId = 2"))
		require.NoError(t, p.AbandonOrchestrationItem(ctx, item.LockToken, 0, true))
	})
}

// countVia counts the documents of a partition matching where, through
// p's own container client (whose request policy carries any partition
// key value, emoji included, which a bare SDK client cannot).
func countVia(t *testing.T, p *Provider, partition, where string) int {
	t.Helper()
	pager := p.s.Container().NewQueryItemsPager("SELECT c.id FROM c WHERE "+where, azcosmos.NewPartitionKeyString(partition), nil)
	n := 0
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		n += len(page.Items)
	}
	return n
}

// idRoundTrip drives instance id through its whole life (see
// TestBadInputInstanceIDs).
func idRoundTrip(t *testing.T, p, client *Provider, container, name, id string) {
	t.Helper()
	ctx := context.Background()
	hasChild := len(id) < store.MaxInstanceIDBytes
	child := id + "\u00b7child"
	at := func(n uint64, k history.EventKind) history.Event { return ev(id, 1, n, k) }

	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "O", Input: "{}",
		ExecutionID: 1, RequestID: "start-" + name}, 0), name)
	item := fetchFor(t, p, id)
	require.Equal(t, id, item.Messages[0].(durable.StartOrchestration).Instance, name)
	turn := durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{at(1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "O", OrchestrationVersion: "1.0.0", Status: durable.StatusRunning}}
	if hasChild {
		turn.HistoryDelta = append(turn.HistoryDelta, at(2, history.SubOrchestrationScheduled{Name: "C", Instance: child, Input: "{}"}))
		turn.OrchestratorItems = []durable.WorkItem{durable.StartOrchestration{Instance: child, Orchestration: "C", Input: "{}",
			ExecutionID: 1, ParentInstance: id, ParentExecutionID: 1, ParentID: 2}}
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, turn), name)
	next := uint64(len(turn.HistoryDelta)) + 1

	if hasChild {
		c := fetchFor(t, p, child)
		out := `"child done"`
		require.NoError(t, p.AckOrchestrationItem(ctx, c.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{ev(child, 1, 1, history.OrchestrationStarted{Name: "C", Version: "1.0.0", Input: "{}", ParentInstance: id, ParentExecutionID: 1, ParentID: 2}),
				ev(child, 1, 2, history.OrchestrationCompleted{Output: out})},
			OrchestratorItems: []durable.WorkItem{durable.SubOrchCompleted{ParentInstance: id, ParentExecutionID: 1, ParentID: 2, Result: out}},
			Metadata: durable.ExecutionMetadata{OrchestrationName: "C", OrchestrationVersion: "1.0.0", ParentInstanceID: id,
				Status: durable.StatusCompleted, Output: &out}}), name)
		item = fetchFor(t, p, id)
		require.Len(t, item.Messages, 1, name)
		require.Equal(t, id, item.Messages[0].(durable.SubOrchCompleted).ParentInstance, name)
		require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
			HistoryDelta: []history.Event{at(next, history.SubOrchestrationCompleted{Result: out})}}), name)
		next++
	}

	// An activity, its completion, then a raised event.
	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: id, Name: "act", Data: "{}"}, 0), name)
	item = fetchFor(t, p, id)
	act := next + 1
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{at(next, history.ExternalEvent{Name: "act", Data: "{}"}), at(act, history.ActivityScheduled{Name: "A", Input: "{}"})},
		WorkerItems:  []durable.WorkItem{durable.ActivityExecute{Instance: id, ExecutionID: 1, ID: act, Name: "A", Input: "{}"}}}), name)
	next = act + 1
	w := fetchWorkFor(t, p)
	require.Equal(t, id, w.Item.(durable.ActivityExecute).Instance, name)
	require.NoError(t, p.AckWorkItem(ctx, w.LockToken, durable.ActivityCompleted{Instance: id, ExecutionID: 1, ID: act, Result: `"a"`}), name)
	item = fetchFor(t, p, id)
	require.Equal(t, id, item.Messages[0].(durable.ActivityCompleted).Instance, name)
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{at(next, history.ActivityCompleted{Result: `"a"`})}}), name)
	next++
	require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: id, Name: "go", Data: `"x"`, RequestID: "go-" + name}, 0), name)
	item = fetchFor(t, p, id)
	out := `"done"`
	require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
		HistoryDelta: []history.Event{at(next, history.ExternalEvent{Name: "go", Data: `"x"`}), at(next+1, history.OrchestrationCompleted{Output: out})},
		Metadata:     durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &out}}), name)

	evs, err := client.Read(ctx, id)
	require.NoError(t, err, name)
	require.Len(t, evs, int(next+1), name)
	for i, e := range evs {
		require.Equal(t, uint64(i+1), e.EventID, name)
		require.Equal(t, id, e.InstanceID, name)
	}
	info, err := client.GetInstanceInfo(ctx, id)
	require.NoError(t, err, name)
	require.Equal(t, durable.StatusCompleted, info.Status, name)
	list, err := client.ListInstances(ctx)
	require.NoError(t, err)
	require.Contains(t, list, id, name)

	res, err := client.DeleteInstance(ctx, id, false)
	require.NoError(t, err, name)
	want := uint64(1)
	if hasChild {
		want = 2
	}
	require.Equal(t, want, res.InstancesDeleted, name)
	require.Zero(t, countVia(t, client, id, "true"), "%s: partition empty", name)
	if hasChild {
		require.Zero(t, countVia(t, client, child, "true"), "%s: child partition empty", name)
	}
	evs, err = client.Read(ctx, id)
	require.NoError(t, err, name)
	require.Empty(t, evs, name)
}

// oneInstancePerBlock returns an instance id in each lease block, with
// prefix.
func oneInstancePerBlock(prefix string) []string {
	per := slots.Count / slots.DefaultBlocks
	var ids []string
	for i := 0; len(ids) < slots.DefaultBlocks; i++ {
		id := prefix + strconv.Itoa(i)
		if slots.Of(id)/per == len(ids) {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestCorruptLeasesWhileReplicasServe: while two event-driven replicas
// serve, lease documents are corrupted by hand (one replaced with fields
// that cannot be a lease's, one deleted) and a heartbeat document is
// deleted. The replicas log, repair or re-create what they need, and keep
// serving: an orchestration started afterwards in every lease block
// completes, and in the end every slot is owned exactly once and every
// lease document is sound.
func TestCorruptLeasesWhileReplicasServe(t *testing.T) {
	t.Parallel()
	container := freshContainer("corrupt-leases")
	cfg := replicaConfig(container)
	j := newJournal()
	a := startReplica(t, cfg, "a", j, 2, 0)
	b := startReplica(t, cfg, "b", j, 2, 0)
	requireOwnership(t, "start", a, b)
	ctx := context.Background()
	client := openProvider(t, quietConfig(container))
	warm := oneInstancePerBlock("warm-")
	for _, id := range warm {
		require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "Fan", Input: "1", Version: "1.0.0", ExecutionID: 1}, 0))
	}
	require.Eventually(t, func() bool { return j.doneCount() == len(warm) }, hang, 10*time.Millisecond, "warm-up instances complete")

	leases := rawContainer(t, container)
	pk := azcosmos.NewPartitionKeyString(leasestore.DefaultPartitionKeyValue)
	garbage, _ := json.Marshal(map[string]any{"id": "lease:2", "instanceId": leasestore.DefaultPartitionKeyValue, "type": "lease", "owner": 42, "epoch": "x"})
	_, err := leases.ReplaceItem(ctx, pk, "lease:2", garbage, nil)
	require.NoError(t, err)
	_, err = leases.DeleteItem(ctx, pk, "lease:5", nil)
	require.NoError(t, err)
	_, err = leases.DeleteItem(ctx, pk, "owner:b", nil)
	require.NoError(t, err)

	ids := oneInstancePerBlock("after-")
	for _, id := range ids {
		require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: id, Orchestration: "Fan", Input: "2", Version: "1.0.0", ExecutionID: 1}, 0))
	}
	awaitCompletion(t, container, time.Minute, func() bool { return j.doneCount() == len(warm)+len(ids) },
		func() int64 { return a.turns.Load() + a.acts.Load() + b.turns.Load() + b.acts.Load() }, nil, a, b)
	j.mu.Lock()
	require.Empty(t, j.problems)
	j.mu.Unlock()
	requireOwnership(t, "after the corruption", a, b)
	until(t, "every lease document sound and owned", func() bool {
		type leaseRow struct {
			ID    string `json:"id"`
			Owner any    `json:"owner"`
			Range struct {
				Max string `json:"max"`
			} `json:"range"`
		}
		rows := queryRows[leaseRow](t, container, leasestore.DefaultPartitionKeyValue, "SELECT c.id, c.owner, c.range FROM c WHERE c.type = 'lease'")
		sound := 0
		for _, r := range rows {
			if o, ok := r.Owner.(string); ok && o != "" && r.Range.Max != "" {
				sound++
			}
		}
		return len(rows) == slots.DefaultBlocks && sound == slots.DefaultBlocks
	})
}

// TestBadInputContainerDeleted: the container is deleted under a running
// provider, in both modes. Cosmos DB answers every request on its
// documents 404 with sub-status 1003 (the owner resource does not
// exist): nothing will succeed until someone creates the container
// again, so every call fails with a permanent error that says the
// container does not exist, where a 404 would otherwise read as "no such
// instance" (an empty history, no instance): enqueues, acks, reads,
// instance info, and fetches, which in event-driven mode wait on a feed
// that cannot read and would otherwise return "no work". Once the
// container is created again (here by a new provider, as a deployment
// would), the running provider serves again without a restart: in
// event-driven mode its replica registers anew and re-creates the lease
// documents. Close returns either way.
func TestBadInputContainerDeleted(t *testing.T) {
	for _, mode := range []Mode{ModePolling, ModeEventDriven} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			container := freshContainer("deleted-" + mode.String())
			var p *Provider
			leasePartition := ""
			if mode == ModePolling {
				p = openMode(t, mode, container)
			} else {
				// The safety sweep is out of the way: after the
				// re-creation, the change feed must bring the work.
				cfg := eventConfig(container)
				cfg.leasePartition, cfg.joinEagerly, cfg.SafetySweepInterval = "$leases-"+randomID(), true, time.Hour
				leasePartition = cfg.leasePartition
				p = openProvider(t, cfg)
				require.Eventually(t, func() bool { return ownedCount(p) == slots.Count }, hang, 5*time.Millisecond)
			}
			ctx := context.Background()
			startTurn(t, p, "before")
			require.NoError(t, p.EnqueueForOrchestrator(ctx, durable.ExternalRaised{Instance: "before", Name: "go", Data: "{}"}, 0))
			held := fetchFor(t, p, "before")
			// "after" lives in the lease block of "before", whose lease has
			// checkpointed a position in the container about to go.
			per := slots.Count / slots.DefaultBlocks
			after := ""
			for i := 0; after == ""; i++ {
				if id := "after-" + strconv.Itoa(i); slots.Of(id)/per == slots.Of("before")/per {
					after = id
				}
			}
			if mode == ModeEventDriven {
				block := "lease:" + strconv.Itoa(slots.Of("before")/per)
				until(t, "the lease of the block checkpointed", func() bool {
					rows := queryRows[struct {
						Continuation string `json:"continuation"`
					}](t, container, leasePartition, "SELECT c.continuation FROM c WHERE c.id = '"+block+"'")
					return len(rows) == 1 && rows[0].Continuation != ""
				})
			}

			_, err := rawContainer(t, container).Delete(ctx, nil)
			require.NoError(t, err)
			gone := "does not exist"
			requirePermanent(t, p.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: "new", Orchestration: "O", Input: "{}", ExecutionID: 1}, 0), gone)
			requirePermanent(t, p.EnqueueForWorker(ctx, durable.ActivityExecute{Instance: "new", ExecutionID: 1, ID: 1, Name: "A", Input: "{}"}), gone)
			requirePermanent(t, p.AckOrchestrationItem(ctx, held.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev("before", 1, 2, history.ExternalEvent{Name: "go", Data: "{}"})}}), gone)
			_, err = p.Read(ctx, "before")
			requirePermanent(t, err, gone)
			_, err = p.GetInstanceInfo(ctx, "before")
			requirePermanent(t, err, gone)
			_, err = p.FetchOrchestrationItem(ctx, lockLong, 200*time.Millisecond, nil)
			requirePermanent(t, err, gone)
			_, err = p.FetchWorkItem(ctx, lockLong, 200*time.Millisecond, nil, durable.AnyTag())
			requirePermanent(t, err, gone)

			if mode == ModeEventDriven {
				require.Eventually(t, func() bool { return ownedCount(p) == 0 }, hang, 10*time.Millisecond,
					"the replica, whose heartbeat document is gone, gives up its leases")
			}

			// Created again: the running provider serves again, work
			// enqueued by another process included.
			client := openProvider(t, quietConfig(container))
			if mode == ModeEventDriven {
				require.Eventually(t, func() bool { return ownedCount(p) == slots.Count }, hang, 10*time.Millisecond,
					"the replica owns every slot again")
			}
			require.NoError(t, client.EnqueueForOrchestrator(ctx, durable.StartOrchestration{Instance: after, Orchestration: "O", Input: "{}", ExecutionID: 1}, 0))
			var item *durable.OrchestrationItem
			until(t, "the work enqueued after the re-creation is fetched", func() bool {
				var err error
				item, err = p.FetchOrchestrationItem(ctx, lockLong, 200*time.Millisecond, nil)
				require.NoError(t, err)
				return item != nil
			})
			require.Equal(t, after, item.Instance)
			require.NoError(t, p.AckOrchestrationItem(ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1,
				HistoryDelta: []history.Event{ev(after, 1, 1, history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "{}"})}}))
			evs, err := p.Read(ctx, after)
			require.NoError(t, err)
			require.Len(t, evs, 1)
			evs, err = p.Read(ctx, "before")
			require.NoError(t, err)
			require.Empty(t, evs, "what the deleted container held is gone")

			closed := make(chan struct{})
			go func() { _ = p.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(hang):
				require.FailNow(t, "Close did not return")
			}
		})
	}
}
