package memprovider

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// fakeClock is a controllable time source.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const lock = 30 * time.Second

type env struct {
	t     *testing.T
	ctx   context.Context
	store *Store
	clock *fakeClock
	p     durable.Provider
	admin durable.ProviderAdmin
}

func newEnv(t *testing.T) *env {
	s := NewStore()
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetClock(c.now)
	p := s.Open()
	a, ok := p.Admin()
	require.True(t, ok)
	return &env{t: t, ctx: context.Background(), store: s, clock: c, p: p, admin: a}
}

func ev(inst string, exec, id uint64, k history.EventKind) history.Event {
	return history.Event{EventID: id, InstanceID: inst, ExecutionID: exec, TimestampMS: 1, RuntimeVersion: "0.1.0", Kind: k}
}

func start(inst string) durable.StartOrchestration {
	return durable.StartOrchestration{Instance: inst, Orchestration: "Orch", Input: "{}", Version: "1.0.0", ExecutionID: 1}
}

func (e *env) enqueue(w durable.WorkItem) {
	e.t.Helper()
	require.NoError(e.t, e.p.EnqueueForOrchestrator(e.ctx, w, 0))
}

func (e *env) fetch(filter *durable.DispatcherCapabilityFilter) *durable.OrchestrationItem {
	e.t.Helper()
	item, err := e.p.FetchOrchestrationItem(e.ctx, lock, 0, filter)
	require.NoError(e.t, err)
	return item
}

// create runs an instance's first turn, optionally pinning its execution.
func (e *env) create(inst string, pinned *durable.SemVer) {
	e.t.Helper()
	e.enqueue(start(inst))
	item := e.fetch(nil)
	require.NotNil(e.t, item)
	require.Equal(e.t, inst, item.Instance)
	require.NoError(e.t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{ev(inst, 1, 1, history.OrchestrationStarted{Name: "Orch", Version: "1.0.0", Input: "{}"})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "Orch", OrchestrationVersion: "1.0.0", PinnedVersion: pinned},
	}))
}

func isPermanent(err error) bool {
	var pe *durable.ProviderError
	return errors.As(err, &pe) && errors.Is(err, durable.ErrPermanent)
}

func TestDuplicateEventIDAtomicity(t *testing.T) {
	cases := []struct {
		name  string
		delta func(inst string) []history.Event
	}{
		{"duplicate of stored event", func(inst string) []history.Event {
			return []history.Event{
				ev(inst, 1, 2, history.CustomStatusUpdated{Status: ptr("x")}),
				ev(inst, 1, 1, history.ActivityScheduled{Name: "A", Input: "1"}),
			}
		}},
		{"duplicate within the delta", func(inst string) []history.Event {
			return []history.Event{
				ev(inst, 1, 2, history.KeyValueSet{Key: "k", Value: "v"}),
				ev(inst, 1, 2, history.CustomStatusUpdated{Status: ptr("x")}),
			}
		}},
		{"zero event id", func(inst string) []history.Event {
			return []history.Event{ev(inst, 1, 0, history.KeyValueSet{Key: "k", Value: "v"})}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.create("i", nil)
			e.enqueue(durable.ExternalRaised{Instance: "i", Name: "go", Data: "1"})
			item := e.fetch(nil)
			require.NotNil(t, item)
			err := e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID:       1,
				HistoryDelta:      append(tc.delta("i"), ev("i", 1, 3, history.KeyValueSet{Key: "k", Value: "v"})),
				WorkerItems:       []durable.WorkItem{durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "A"}},
				OrchestratorItems: []durable.WorkItem{start("child")},
				Metadata:          durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: ptr("done")},
			})
			require.Error(t, err)
			assert.True(t, isPermanent(err), "want a permanent error, got %v", err)

			// Nothing applied.
			hist, err := e.p.Read(e.ctx, "i")
			require.NoError(t, err)
			assert.Len(t, hist, 1)
			_, ok, err := e.p.GetKVValue(e.ctx, "i", "k")
			require.NoError(t, err)
			assert.False(t, ok)
			cs, err := e.p.GetCustomStatus(e.ctx, "i", 0)
			require.NoError(t, err)
			assert.Nil(t, cs)
			info, err := e.admin.GetInstanceInfo(e.ctx, "i")
			require.NoError(t, err)
			assert.Equal(t, durable.StatusRunning, info.Status)
			depths, err := e.admin.GetQueueDepths(e.ctx)
			require.NoError(t, err)
			assert.Equal(t, durable.QueueDepths{}, depths, "no item enqueued, locked message still locked")

			// The lock is still held: a correct ack succeeds and consumes the message.
			require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: 1, HistoryDelta: []history.Event{ev("i", 1, 2, history.ExternalEvent{Name: "go", Data: "1"})},
			}))
			assert.Nil(t, e.fetch(nil))
		})
	}
}

func TestQueueMessageDrop(t *testing.T) {
	qm := durable.QueueMessage{Instance: "i", Name: "q", Data: "d"}
	cases := []struct {
		name      string
		created   bool
		batch     []durable.WorkItem
		wantKinds []string // nil: no item
	}{
		{"only queue messages, not started", false, []durable.WorkItem{qm, qm}, nil},
		{"queue message with start", false, []durable.WorkItem{qm, start("i")}, []string{"QueueMessage", "StartOrchestration"}},
		{"queue message for started instance", true, []durable.WorkItem{qm}, []string{"QueueMessage"}},
		{"queue message and external event, not started", false,
			[]durable.WorkItem{qm, durable.ExternalRaised{Instance: "i", Name: "e"}}, []string{"ExternalRaised"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.created {
				e.create("i", nil)
			}
			for _, w := range tc.batch {
				e.enqueue(w)
			}
			item := e.fetch(nil)
			if tc.wantKinds == nil {
				assert.Nil(t, item)
				assert.Nil(t, e.fetch(nil), "dropped messages must be deleted")
				assert.Zero(t, e.store.MaxAttemptCount("i"))
				d, err := e.admin.GetQueueDepths(e.ctx)
				require.NoError(t, err)
				assert.Zero(t, d.OrchestratorQueue)
				return
			}
			require.NotNil(t, item)
			var kinds []string
			for _, m := range item.Messages {
				kinds = append(kinds, m.Kind())
			}
			assert.Equal(t, tc.wantKinds, kinds)
			assert.Equal(t, uint32(1), item.AttemptCount)
			_, err := e.admin.GetInstanceInfo(e.ctx, "i")
			if !tc.created {
				assert.Error(t, err, "fetch must not create the instance")
			}
		})
	}
}

func TestCapabilityFilterBeforeLock(t *testing.T) {
	v := func(s string) *durable.SemVer {
		x, err := durable.ParseSemVer(s)
		require.NoError(t, err)
		return &x
	}
	filter := &durable.DispatcherCapabilityFilter{SupportedVersions: []durable.SemVerRange{{Min: *v("1.0.0"), Max: *v("1.9.9")}}}
	cases := []struct {
		name   string
		pins   map[string]*durable.SemVer // instance → pinned version, in creation order a, b
		filter *durable.DispatcherCapabilityFilter
		want   string // "" for no item
	}{
		{"incompatible skipped", map[string]*durable.SemVer{"a": v("2.0.0")}, filter, ""},
		{"compatible returned", map[string]*durable.SemVer{"a": v("1.2.3")}, filter, "a"},
		{"unpinned always compatible", map[string]*durable.SemVer{"a": nil}, filter, "a"},
		{"skips to compatible", map[string]*durable.SemVer{"a": v("3.0.0"), "b": v("1.0.0")}, filter, "b"},
		{"nil filter fetches anything", map[string]*durable.SemVer{"a": v("9.0.0")}, nil, "a"},
		{"empty filter: pinned incompatible", map[string]*durable.SemVer{"a": v("1.0.0")}, &durable.DispatcherCapabilityFilter{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, inst := range []string{"a", "b"} {
				if pin, ok := tc.pins[inst]; ok {
					e.create(inst, pin)
				}
			}
			for _, inst := range []string{"a", "b"} {
				if _, ok := tc.pins[inst]; ok {
					e.enqueue(durable.ExternalRaised{Instance: inst, Name: "go"})
				}
			}
			item := e.fetch(tc.filter)
			if tc.want == "" {
				require.Nil(t, item)
				// Skipped instances were neither locked nor counted.
				assert.Zero(t, e.store.MaxAttemptCount("a"))
				again := e.fetch(nil)
				require.NotNil(t, again, "a skipped instance must not be locked")
				return
			}
			require.NotNil(t, item)
			assert.Equal(t, tc.want, item.Instance)
			for inst := range tc.pins {
				if inst != tc.want {
					assert.Zero(t, e.store.MaxAttemptCount(inst))
				}
			}
		})
	}
}

func TestCorruptHistory(t *testing.T) {
	e := newEnv(t)
	e.create("i", nil)
	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "go"})
	e.store.CorruptHistory("i")

	_, err := e.p.Read(e.ctx, "i")
	require.Error(t, err)
	assert.True(t, isPermanent(err))

	for attempt := uint32(1); attempt <= 3; attempt++ {
		item := e.fetch(nil)
		require.NotNil(t, item, "attempt %d", attempt)
		assert.NotEmpty(t, item.HistoryError)
		assert.Empty(t, item.History)
		assert.Equal(t, attempt, item.AttemptCount)
		assert.Equal(t, attempt, e.store.MaxAttemptCount("i"))
		assert.Nil(t, e.fetch(nil), "the item is locked")
		require.NoError(t, e.p.AbandonOrchestrationItem(e.ctx, item.LockToken, 0, false))
	}

	// Poison termination appends to the corrupt history (append-only ack).
	item := e.fetch(nil)
	require.NotNil(t, item)
	require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{ev("i", 1, 99999, history.OrchestrationFailed{Details: history.ApplicationError(history.AppOrchestrationFailed, "poison", false)})},
		Metadata:     durable.ExecutionMetadata{Status: durable.StatusFailed, Output: ptr("poison")},
	}))
	info, err := e.admin.GetInstanceInfo(e.ctx, "i")
	require.NoError(t, err)
	assert.Equal(t, durable.StatusFailed, info.Status)
	_, err = e.p.Read(e.ctx, "i")
	assert.Error(t, err, "corrupt events are reported, never dropped")
}

func TestSessionClaim(t *testing.T) {
	const sessionLock = 10 * time.Second
	cfg := func(owner string) *durable.SessionFetchConfig {
		return &durable.SessionFetchConfig{OwnerID: owner, LockTimeout: sessionLock}
	}
	act := func(id uint64, session string) durable.ActivityExecute {
		return durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: id, Name: "A", SessionID: session}
	}
	type step struct {
		session *durable.SessionFetchConfig
		advance time.Duration
		want    uint64 // activity id expected, 0 for none
	}
	cases := []struct {
		name  string
		items []durable.ActivityExecute
		steps []step
	}{
		{"nil session skips session items", []durable.ActivityExecute{act(1, "s"), act(2, "")},
			[]step{{session: nil, want: 2}, {session: nil, want: 0}}},
		{"owner keeps affinity, others blocked", []durable.ActivityExecute{act(1, "s"), act(2, "s")},
			[]step{{session: cfg("A"), want: 1}, {session: cfg("B"), want: 0}, {session: cfg("A"), want: 2}}},
		{"expired session claimable by another", []durable.ActivityExecute{act(1, "s"), act(2, "s")},
			[]step{{session: cfg("A"), want: 1}, {session: cfg("B"), advance: sessionLock, want: 2}, {session: cfg("A"), want: 0}}},
		{"different sessions different owners", []durable.ActivityExecute{act(1, "s1"), act(2, "s2")},
			[]step{{session: cfg("A"), want: 1}, {session: cfg("B"), want: 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for _, a := range tc.items {
				require.NoError(t, e.p.EnqueueForWorker(e.ctx, a))
			}
			for i, st := range tc.steps {
				e.clock.advance(st.advance)
				got, err := e.p.FetchWorkItem(e.ctx, time.Hour, 0, st.session, durable.AnyTag())
				require.NoError(t, err)
				if st.want == 0 {
					assert.Nil(t, got, "step %d", i)
					continue
				}
				require.NotNil(t, got, "step %d", i)
				assert.Equal(t, st.want, got.Item.(durable.ActivityExecute).ID, "step %d", i)
			}
		})
	}
}

func TestLockSemantics(t *testing.T) {
	e := newEnv(t)
	e.create("i", nil)
	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "a"})
	item := e.fetch(nil)
	require.NotNil(t, item)
	// A message arriving during the lock waits for the next turn.
	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "b"})
	assert.Nil(t, e.fetch(nil))

	e.clock.advance(lock)
	err := e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{ExecutionID: 1})
	assert.True(t, isPermanent(err), "expired lock: %v", err)
	assert.True(t, isPermanent(e.p.RenewOrchestrationItemLock(e.ctx, item.LockToken, lock)))

	again := e.fetch(nil)
	require.NotNil(t, again)
	assert.Len(t, again.Messages, 2)
	assert.Equal(t, uint32(2), again.AttemptCount)
	require.NoError(t, e.p.AbandonOrchestrationItem(e.ctx, again.LockToken, 0, true))
	assert.Equal(t, uint32(1), e.store.MaxAttemptCount("i"))
	assert.True(t, isPermanent(e.p.AbandonOrchestrationItem(e.ctx, again.LockToken, 0, false)))
}

func TestWorkerAckAfterCancel(t *testing.T) {
	e := newEnv(t)
	e.create("i", nil)
	require.NoError(t, e.p.EnqueueForWorker(e.ctx, durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "A"}))
	w, err := e.p.FetchWorkItem(e.ctx, lock, 0, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	require.NotNil(t, w)

	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "x"})
	item := e.fetch(nil)
	require.NotNil(t, item)
	require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:         1,
		CancelledActivities: []durable.ScheduledActivityIdentifier{{Instance: "i", ExecutionID: 1, ActivityID: 2}},
	}))
	assert.True(t, isPermanent(e.p.RenewWorkItemLock(e.ctx, w.LockToken, lock)))
	assert.True(t, isPermanent(e.p.AckWorkItem(e.ctx, w.LockToken, durable.ActivityCompleted{Instance: "i", ExecutionID: 1, ID: 2})))
	assert.NoError(t, e.p.AbandonWorkItem(e.ctx, w.LockToken, 0, false))
}

func ptr(s string) *string { return &s }

func TestAckEnqueueThenCancelAndTimerVisibility(t *testing.T) {
	e := newEnv(t)
	e.create("i", nil)
	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "x"})
	item := e.fetch(nil)
	require.NotNil(t, item)
	fireAt := e.clock.now().Add(time.Minute)
	require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		WorkerItems: []durable.WorkItem{
			durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 2, Name: "dropped"},
			durable.ActivityExecute{Instance: "i", ExecutionID: 1, ID: 3, Name: "kept", Tag: "gpu"},
		},
		OrchestratorItems:   []durable.WorkItem{durable.TimerFired{Instance: "i", ExecutionID: 1, ID: 4, FireAtMS: uint64(fireAt.UnixMilli())}},
		CancelledActivities: []durable.ScheduledActivityIdentifier{{Instance: "i", ExecutionID: 1, ActivityID: 2}},
	}))
	d, err := e.admin.GetQueueDepths(e.ctx)
	require.NoError(t, err)
	assert.Equal(t, durable.QueueDepths{WorkerQueue: 1, TimerQueue: 1}, d)

	w, err := e.p.FetchWorkItem(e.ctx, lock, 0, nil, durable.DefaultOnlyTags())
	require.NoError(t, err)
	assert.Nil(t, w, "the remaining activity is tagged")
	only, err := durable.OnlyTags("gpu")
	require.NoError(t, err)
	w, err = e.p.FetchWorkItem(e.ctx, lock, 0, nil, only)
	require.NoError(t, err)
	require.NotNil(t, w)
	assert.Equal(t, "kept", w.Item.(durable.ActivityExecute).Name)

	assert.Nil(t, e.fetch(nil), "timer not due")
	e.clock.advance(time.Minute)
	due := e.fetch(nil)
	require.NotNil(t, due)
	assert.Equal(t, "TimerFired", due.Messages[0].Kind())
}

func TestDeleteAndPrune(t *testing.T) {
	e := newEnv(t)
	complete := func(inst string, exec uint64, next uint64, status durable.Status) {
		t.Helper()
		e.enqueue(durable.ExternalRaised{Instance: inst, Name: "x"})
		item := e.fetch(nil)
		require.NotNil(t, item)
		require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
			ExecutionID:  exec,
			HistoryDelta: []history.Event{ev(inst, exec, next, history.OrchestrationCompleted{Output: "o"})},
			Metadata:     durable.ExecutionMetadata{Status: status, Output: ptr("o")},
		}))
	}
	e.create("root", nil)
	complete("root", 1, 2, durable.StatusCompleted)
	// A child, linked by metadata.
	e.enqueue(durable.StartOrchestration{Instance: "child", Orchestration: "Orch", ParentInstance: "root", ParentID: 2, ExecutionID: 1})
	item := e.fetch(nil)
	require.NotNil(t, item)
	require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  1,
		HistoryDelta: []history.Event{ev("child", 1, 1, history.OrchestrationStarted{Name: "Orch", ParentInstance: "root", ParentID: 2})},
		Metadata:     durable.ExecutionMetadata{OrchestrationName: "Orch", ParentInstanceID: "root"},
	}))

	_, err := e.admin.DeleteInstancesAtomic(e.ctx, []string{"root"}, true)
	assert.True(t, isPermanent(err), "orphaning a child must fail: %v", err)
	_, err = e.admin.DeleteInstance(e.ctx, "child", true)
	assert.True(t, isPermanent(err), "a sub-orchestration cannot be deleted directly: %v", err)
	_, err = e.admin.DeleteInstance(e.ctx, "root", false)
	assert.True(t, isPermanent(err), "running child without force: %v", err)

	res, err := e.admin.DeleteInstanceBulk(e.ctx, durable.InstanceFilter{})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), res.InstancesDeleted, "terminal root deleted with its running child")
	ids, err := e.admin.ListInstances(e.ctx)
	require.NoError(t, err)
	assert.Empty(t, ids)

	// Pruning keeps the current execution and the KV store.
	e.create("p", nil)
	for exec := uint64(1); exec <= 3; exec++ {
		if exec > 1 {
			e.enqueue(durable.ContinueAsNew{Instance: "p", Orchestration: "Orch", Input: "{}"})
			item := e.fetch(nil)
			require.NotNil(t, item)
			require.NoError(t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
				ExecutionID: exec,
				HistoryDelta: []history.Event{
					ev("p", exec, 1, history.OrchestrationStarted{Name: "Orch", Input: "{}"}),
					ev("p", exec, 2, history.KeyValueSet{Key: "k", Value: "v"}),
				},
				Metadata: durable.ExecutionMetadata{OrchestrationName: "Orch"},
			}))
		}
		if exec < 3 {
			complete("p", exec, 3, durable.StatusContinuedAsNew)
		}
	}
	pr, err := e.admin.PruneExecutions(e.ctx, "p", durable.PruneOptions{KeepLast: 2})
	require.NoError(t, err)
	assert.Equal(t, durable.PruneResult{InstancesProcessed: 1, ExecutionsDeleted: 1, EventsDeleted: 2}, pr)
	pr, err = e.admin.PruneExecutions(e.ctx, "p", durable.PruneOptions{})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), pr.ExecutionsDeleted)
	execs, err := e.admin.ListExecutions(e.ctx, "p")
	require.NoError(t, err)
	assert.Equal(t, []uint64{3}, execs)
	v, ok, err := e.p.GetKVValue(e.ctx, "p", "k")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "v", v)
}

// kvTurn acks one turn of instance i carrying kinds (event ids from next)
// with status, and returns the KV snapshot its fetch saw.
func (e *env) kvTurn(exec, next uint64, status durable.Status, kinds ...history.EventKind) map[string]durable.KVEntry {
	e.t.Helper()
	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "poke"})
	item := e.fetch(nil)
	require.NotNil(e.t, item)
	delta := make([]history.Event, 0, len(kinds))
	for j, k := range kinds {
		delta = append(delta, ev("i", exec, next+uint64(j), k))
	}
	turn := durable.OrchestrationTurn{ExecutionID: exec, HistoryDelta: delta, Metadata: durable.ExecutionMetadata{Status: status}}
	if status == durable.StatusContinuedAsNew {
		// The next execution's start, without which the instance's
		// messages wait.
		turn.OrchestratorItems = []durable.WorkItem{durable.ContinueAsNew{Instance: "i", Orchestration: "Orch", Input: "{}"}}
	}
	require.NoError(e.t, e.p.AckOrchestrationItem(e.ctx, item.LockToken, turn))
	return item.KVSnapshot
}

func (e *env) kvAll() map[string]string {
	e.t.Helper()
	m, err := e.p.GetKVAllValues(e.ctx, "i")
	require.NoError(e.t, err)
	return m
}

func values(s map[string]durable.KVEntry) map[string]string {
	out := map[string]string{}
	for k, e := range s {
		out[k] = e.Value
	}
	return out
}

func TestKVDeltaMergedWhenExecutionEnds(t *testing.T) {
	set := func(k, v string) history.KeyValueSet {
		return history.KeyValueSet{Key: k, Value: v, LastUpdatedAtMS: 7}
	}
	for _, end := range []durable.Status{durable.StatusCompleted, durable.StatusFailed, durable.StatusContinuedAsNew} {
		t.Run(string(end), func(t *testing.T) {
			e := newEnv(t)
			e.create("i", nil)
			// Execution 1 writes; nothing of it is in the snapshot.
			assert.Empty(t, e.kvTurn(1, 2, "", set("a", "1"), set("b", "2")))
			assert.Empty(t, e.kvTurn(1, 4, durable.StatusRunning, history.KeyValueCleared{Key: "b"}, set("c", "3")),
				"a Running status does not end the execution")
			assert.Equal(t, map[string]string{"a": "1", "c": "3"}, e.kvAll(), "clients see the delta")
			snap := e.kvTurn(1, 6, end, set("d", "4"))
			assert.Empty(t, snap, "the ending turn's fetch still sees the pre-execution state")
			// Merged, with the ending turn's own writes.
			snap = e.kvTurn(1, 7, "")
			assert.Equal(t, map[string]durable.KVEntry{"a": {Value: "1", LastUpdatedAtMS: 7}, "c": {Value: "3", LastUpdatedAtMS: 7},
				"d": {Value: "4", LastUpdatedAtMS: 7}}, snap)
			assert.Equal(t, map[string]string{"a": "1", "c": "3", "d": "4"}, e.kvAll())
		})
	}
}

func TestKVDeltaOverlay(t *testing.T) {
	e := newEnv(t)
	e.create("i", nil)
	e.kvTurn(1, 2, durable.StatusContinuedAsNew,
		history.KeyValueSet{Key: "a", Value: "1"}, history.KeyValueSet{Key: "b", Value: "2"}, history.KeyValueSet{Key: "c", Value: "3"})
	stored := map[string]string{"a": "1", "b": "2", "c": "3"}

	// Execution 2: overwrite, tombstone, add.
	e.kvTurn(2, 1, "", history.OrchestrationStarted{Name: "Orch"},
		history.KeyValueSet{Key: "a", Value: "10"}, history.KeyValueCleared{Key: "b"}, history.KeyValueSet{Key: "d", Value: "4"})
	assert.Equal(t, map[string]string{"a": "10", "c": "3", "d": "4"}, e.kvAll())
	_, ok, err := e.p.GetKVValue(e.ctx, "i", "b")
	require.NoError(t, err)
	assert.False(t, ok, "a tombstone hides the stored key")
	v, ok, err := e.p.GetKVValue(e.ctx, "i", "c")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "3", v, "an untouched stored key shows through")
	st, err := e.p.GetInstanceStats(e.ctx, "i")
	require.NoError(t, err)
	assert.Equal(t, uint64(3), st.KVKeyCount, "stats count what clients see")
	assert.Equal(t, uint64(len("a10c3d4")), st.KVSizeBytes)

	// Clear-all hides every stored key; a later set survives it; a clear of
	// a key set after the clear-all removes it again.
	assert.Equal(t, stored, values(e.kvTurn(2, 5, "", history.KeyValuesCleared{},
		history.KeyValueSet{Key: "e", Value: "5"}, history.KeyValueSet{Key: "f", Value: "6"}, history.KeyValueCleared{Key: "f"})),
		"the snapshot is the store only")
	assert.Equal(t, map[string]string{"e": "5"}, e.kvAll())
	for _, k := range []string{"a", "c", "d", "f"} {
		_, ok, err := e.p.GetKVValue(e.ctx, "i", k)
		require.NoError(t, err)
		assert.False(t, ok, "key %q after clear-all", k)
	}
	st, err = e.p.GetInstanceStats(e.ctx, "i")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), st.KVKeyCount)

	// Pruning leaves both layers alone.
	assert.Equal(t, stored, values(e.kvTurn(2, 9, durable.StatusCompleted)), "the store is unchanged until the merge")
	e.kvTurn(3, 1, "", history.OrchestrationStarted{Name: "Orch"}, history.KeyValueSet{Key: "g", Value: "7"})
	pr, err := e.admin.PruneExecutions(e.ctx, "i", durable.PruneOptions{KeepLast: 1})
	require.NoError(t, err)
	assert.Equal(t, uint64(2), pr.ExecutionsDeleted)
	assert.Equal(t, map[string]string{"e": "5", "g": "7"}, e.kvAll())
	assert.Equal(t, map[string]string{"e": "5"}, values(e.kvTurn(3, 3, "")))

	// Deletion removes the store and the delta.
	_, err = e.admin.DeleteInstance(e.ctx, "i", true)
	require.NoError(t, err)
	assert.Empty(t, e.kvAll())
	assert.Empty(t, e.store.kv, "no KV state left behind")
	e.create("i", nil)
	assert.Empty(t, e.kvTurn(1, 2, durable.StatusCompleted))
	assert.Empty(t, e.kvAll())
}

func TestKVFailedTerminalAckMergesNothing(t *testing.T) {
	e := newEnv(t)
	e.create("i", nil)
	e.kvTurn(1, 2, "", history.KeyValueSet{Key: "a", Value: "1"})
	e.enqueue(durable.ExternalRaised{Instance: "i", Name: "poke"})
	item := e.fetch(nil)
	require.NotNil(t, item)
	err := e.p.AckOrchestrationItem(e.ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1,
		HistoryDelta: []history.Event{
			ev("i", 1, 3, history.KeyValueSet{Key: "b", Value: "2"}),
			ev("i", 1, 1, history.OrchestrationCompleted{Output: "x"}), // duplicate id
		},
		Metadata: durable.ExecutionMetadata{Status: durable.StatusCompleted},
	})
	require.True(t, isPermanent(err), "duplicate id: %v", err)
	assert.Equal(t, map[string]string{"a": "1"}, e.kvAll())
	require.NoError(t, e.p.AbandonOrchestrationItem(e.ctx, item.LockToken, 0, false))
	assert.Empty(t, e.kvTurn(1, 3, ""), "a failed ending ack merges nothing")
}
