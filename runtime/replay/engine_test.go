package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// resolver is a map of orchestrations by name and version.
type resolver map[string]map[string]OrchestratorFunc

func (r resolver) ResolveOrchestration(name, version string) (OrchestratorFunc, string, bool) {
	vs := r[name]
	if version == "" {
		best := ""
		for v := range vs {
			if best == "" || semver(v).Compare(semver(best)) > 0 {
				best = v
			}
		}
		if best == "" {
			return nil, "", false
		}
		return vs[best], best, true
	}
	fn, ok := vs[version]
	return fn, version, ok
}

func semver(s string) durable.SemVer {
	v, err := durable.ParseSemVer(s)
	if err != nil {
		panic(err)
	}
	return v
}

func one(name string, fn OrchestratorFunc) resolver {
	return resolver{name: {"1.0.0": fn}}
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// sim drives an instance turn by turn, keeping its history like a provider.
type sim struct {
	t        *testing.T
	inst     string
	res      Resolver
	execID   uint64
	hist     []history.Event
	kv       map[string]durable.KVEntry
	now      time.Time
	logger   *zap.Logger
	last     Result
	allTurns []Result
}

func newSim(t *testing.T, res Resolver) *sim {
	return &sim{t: t, inst: "i1", res: res, execID: 1, kv: map[string]durable.KVEntry{}, now: epoch}
}

// turn executes one turn with msgs and commits it into the sim's history.
func (s *sim) turn(msgs ...durable.WorkItem) Result {
	s.t.Helper()
	item := &durable.OrchestrationItem{
		Instance: s.inst, ExecutionID: s.execID, History: append([]history.Event(nil), s.hist...),
		Messages: msgs, KVSnapshot: s.kv,
	}
	r, err := Execute(context.Background(), Input{Item: item, Now: s.now, RuntimeVersion: durable.SemVer{Minor: 1}, Resolver: s.res, Logger: s.logger})
	require.NoError(s.t, err)
	s.now = s.now.Add(time.Second)
	if r.Outcome == OutcomeNone || r.Outcome == OutcomeAbandon {
		s.last = r
		return r
	}
	if r.Turn.ExecutionID != s.execID {
		// New execution: earlier KV writes are merged into the snapshot.
		s.mergeKV()
		s.execID = r.Turn.ExecutionID
		s.hist = nil
	}
	// Event ids must continue the history contiguously.
	for i, ev := range r.Turn.HistoryDelta {
		require.Equal(s.t, uint64(len(s.hist)+i+1), ev.EventID, "contiguous event ids")
		require.Equal(s.t, s.execID, ev.ExecutionID)
	}
	s.hist = append(s.hist, r.Turn.HistoryDelta...)
	if r.Outcome != OutcomeContinue {
		s.mergeKV()
	}
	s.last = r
	s.allTurns = append(s.allTurns, r)
	return r
}

func (s *sim) mergeKV() {
	for _, ev := range s.hist {
		switch k := ev.Kind.(type) {
		case history.KeyValueSet:
			s.kv[k.Key] = durable.KVEntry{Value: k.Value, LastUpdatedAtMS: k.LastUpdatedAtMS}
		case history.KeyValueCleared:
			delete(s.kv, k.Key)
		case history.KeyValuesCleared:
			s.kv = map[string]durable.KVEntry{}
		}
	}
	// Avoid merging twice.
	s.kv = cloneKV(s.kv)
}

func cloneKV(m map[string]durable.KVEntry) map[string]durable.KVEntry {
	out := map[string]durable.KVEntry{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func start(input string) durable.StartOrchestration {
	return durable.StartOrchestration{Instance: "i1", Orchestration: "O", Input: input, ExecutionID: 1}
}

func actDone(s *sim, id uint64, result string) durable.ActivityCompleted {
	return durable.ActivityCompleted{Instance: s.inst, ExecutionID: s.execID, ID: id, Result: result}
}

func kinds(events []history.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Kind.KindName()
	}
	return out
}

func requireFailure(t *testing.T, r Result, cat history.ErrorCategory, kind string) {
	t.Helper()
	require.Equal(t, OutcomeFailed, r.Outcome, "outcome")
	require.NotNil(t, r.Failure)
	require.Equal(t, cat, r.Failure.Category, r.Failure.DisplayMessage())
	require.Equal(t, kind, r.Failure.Kind, r.Failure.DisplayMessage())
	last := r.Turn.HistoryDelta[len(r.Turn.HistoryDelta)-1]
	require.IsType(t, history.OrchestrationFailed{}, last.Kind)
	require.Equal(t, durable.StatusFailed, r.Turn.Metadata.Status)
}

func greet(ctx *Context, input string) (string, error) {
	var out string
	if err := ctx.CallActivityRaw("Greet", input).Await(&out); err != nil {
		return "", err
	}
	return "done:" + out, nil
}

func TestFirstTurnSchedulesActivity(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	r := s.turn(start("bob"))
	require.Equal(t, OutcomeContinue, r.Outcome)
	require.Equal(t, []string{"OrchestrationStarted", "ActivityScheduled"}, kinds(r.Turn.HistoryDelta))
	require.Equal(t, uint64(1), r.Turn.ExecutionID)
	st := r.Turn.HistoryDelta[0].Kind.(history.OrchestrationStarted)
	require.Equal(t, "1.0.0", st.Version)
	require.Equal(t, "0.1.0", r.Turn.HistoryDelta[0].RuntimeVersion)
	require.Equal(t, uint64(epoch.UnixMilli()), r.Turn.HistoryDelta[0].TimestampMS)
	md := r.Turn.Metadata
	require.Equal(t, durable.StatusRunning, md.Status)
	require.Equal(t, "O", md.OrchestrationName)
	require.Equal(t, "1.0.0", md.OrchestrationVersion)
	require.Equal(t, &durable.SemVer{Minor: 1}, md.PinnedVersion)
	require.Equal(t, []durable.WorkItem{durable.ActivityExecute{Instance: "i1", ExecutionID: 1, ID: 2, Name: "Greet", Input: "bob"}}, r.Turn.WorkerItems)

	r = s.turn(actDone(s, 2, `"hi bob"`))
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "done:hi bob", r.Output)
	require.Equal(t, []string{"ActivityCompleted", "OrchestrationCompleted"}, kinds(r.Turn.HistoryDelta))
	require.Nil(t, r.Turn.Metadata.PinnedVersion, "pinned only on the first turn of an execution")
	require.Equal(t, durable.StatusCompleted, r.Turn.Metadata.Status)
	require.Equal(t, "done:hi bob", *r.Turn.Metadata.Output)
}

func TestActivityFailureReachesCode(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		_, err := ctx.CallActivityRaw("A", "").AwaitRaw()
		var d history.ErrorDetails
		if errors.As(err, &d) {
			return "recovered:" + d.Message, nil
		}
		return "no error", nil
	}))
	s.turn(start(""))
	r := s.turn(durable.ActivityFailed{Instance: "i1", ExecutionID: 1, ID: 2, Details: history.ApplicationError(history.AppActivityFailed, "boom", false)})
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "recovered:boom", r.Output)
}

func TestSystemActivityFailureFailsOrchestration(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	s.turn(start(""))
	r := s.turn(durable.ActivityFailed{Instance: "i1", ExecutionID: 1, ID: 2, Details: history.ConfigurationError(history.ConfigUnregistered, "Greet", "not registered")})
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigUnregistered))
	require.Equal(t, []string{"ActivityFailed", "OrchestrationFailed"}, kinds(r.Turn.HistoryDelta))
}

func TestNondeterminismScheduleMismatch(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	s.turn(start("x"))
	// New code calls a different activity.
	s.res = one("O", func(ctx *Context, input string) (string, error) {
		return ctx.CallActivityRaw("Other", input).AwaitRaw()
	})
	r := s.turn(actDone(s, 2, `"r"`))
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigNondeterminism))
	require.Contains(t, r.Failure.Message, `name "Greet" in history, "Other" now`)
}

func TestNondeterminismMissingSchedule(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	s.turn(start("x"))
	s.res = one("O", func(ctx *Context, input string) (string, error) { return "early", nil })
	r := s.turn(actDone(s, 2, `"r"`))
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigNondeterminism))
	require.Contains(t, r.Failure.Message, "did not schedule it")
}

func TestNondeterminismInputMismatchAndExtraCode(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	s.turn(start("x"))
	s.res = one("O", func(ctx *Context, input string) (string, error) {
		ctx.CreateTimer(time.Second) // inserted before the activity
		return ctx.CallActivityRaw("Greet", input).AwaitRaw()
	})
	r := s.turn(actDone(s, 2, `"r"`))
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigNondeterminism))
}

func TestNondeterminismCompletionKindMismatch(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	s.turn(start(""))
	r := s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 2, FireAtMS: 1})
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigNondeterminism))
}

func TestPanicFailsWithAppPanicked(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		idx := len(ctx.InstanceID()) + 5
		return fmt.Sprint([]int{1}[idx]), nil // index out of range
	}))
	r := s.turn(start(""))
	requireFailure(t, r, history.CategoryApplication, string(history.AppPanicked))
	require.Contains(t, r.Failure.Message, "index out of range")
}

func TestPanicAfterWait(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		_, _ = ctx.CallActivityRaw("A", "").AwaitRaw()
		panic("after activity")
	}))
	s.turn(start(""))
	r := s.turn(actDone(s, 2, "x"))
	requireFailure(t, r, history.CategoryApplication, string(history.AppPanicked))
}

func TestUnregisteredOrchestration(t *testing.T) {
	t.Parallel()
	s := newSim(t, resolver{})
	r := s.turn(start(""))
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigUnregistered))
	require.Equal(t, []string{"OrchestrationStarted", "OrchestrationFailed"}, kinds(r.Turn.HistoryDelta))
	require.Equal(t, "O", r.Failure.Resource)
}

func TestUnregisteredVersionOfRunningExecutionAbandons(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	s.turn(start(""))
	s.res = resolver{"O": {"2.0.0": greet}}
	r := s.turn(actDone(s, 2, "x"))
	require.Equal(t, OutcomeAbandon, r.Outcome)
	require.Contains(t, r.Reason, "1.0.0")
}

func TestVersionResolution(t *testing.T) {
	t.Parallel()
	v := func(tag string) OrchestratorFunc {
		return func(ctx *Context, _ string) (string, error) { return tag + ":" + ctx.OrchestrationVersion(), nil }
	}
	res := resolver{"O": {"1.0.0": v("one"), "1.10.0": v("ten"), "1.2.0": v("two")}}
	s := newSim(t, res)
	r := s.turn(start(""))
	require.Equal(t, "ten:1.10.0", r.Output, "latest by semver")
	s2 := newSim(t, res)
	st := start("")
	st.Version = "1.2.0"
	r = s2.turn(st)
	require.Equal(t, "two:1.2.0", r.Output)
}

func TestBadInputAsTypedFailure(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, in string) (string, error) {
		return "", history.ConfigurationError(history.ConfigBadInput, "O", "cannot decode")
	}))
	r := s.turn(start("{"))
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigBadInput))
}

func TestTimerRacesActivityTimerWins(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		act := ctx.CallActivityRaw("Slow", "")
		timer := ctx.CreateTimer(5 * time.Second)
		w, err := ctx.Select(act, timer)
		if err != nil {
			return "", err
		}
		if w == 1 {
			_, aerr := act.AwaitRaw()
			require.ErrorIs(t, aerr, ErrCancelled)
			return "timeout", nil
		}
		return act.AwaitRaw()
	}))
	r := s.turn(start(""))
	require.Equal(t, []string{"OrchestrationStarted", "ActivityScheduled", "TimerCreated"}, kinds(r.Turn.HistoryDelta))
	tc := r.Turn.HistoryDelta[2].Kind.(history.TimerCreated)
	require.Equal(t, uint64(epoch.Add(5*time.Second).UnixMilli()), tc.FireAtMS)
	require.Equal(t, []durable.WorkItem{durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 3, FireAtMS: tc.FireAtMS}}, r.Turn.OrchestratorItems)

	r = s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 3, FireAtMS: tc.FireAtMS})
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "timeout", r.Output)
	require.Equal(t, []string{"TimerFired", "ActivityCancelRequested", "OrchestrationCompleted"}, kinds(r.Turn.HistoryDelta))
	require.Equal(t, uint64(2), r.Turn.HistoryDelta[1].SourceEventID)
	require.Equal(t, []durable.ScheduledActivityIdentifier{{Instance: "i1", ExecutionID: 1, ActivityID: 2}}, r.Turn.CancelledActivities)
}

func TestSelectWinnerIsFirstInHistory(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, _ string) (string, error) {
		a := ctx.CallActivityRaw("A", "")
		b := ctx.CallActivityRaw("B", "")
		w, _ := ctx.Select(a, b)
		return fmt.Sprint(w), nil
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	// Both complete in the same batch, B first: B wins.
	r := s.turn(actDone(s, 3, "b"), actDone(s, 2, "a"))
	require.Equal(t, "1", r.Output)
	require.Empty(t, r.Turn.CancelledActivities, "the loser had completed")
}

func TestSelectLoserActivityAlreadyCancelledOnReplay(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, _ string) (string, error) {
		a := ctx.CallActivityRaw("A", "")
		w, _ := ctx.Select(a, ctx.CreateTimer(time.Second))
		if w == 0 {
			return "activity", nil
		}
		// After the race, keep going: another activity.
		return ctx.CallActivityRaw("B", "").AwaitRaw()
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	r := s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 3, FireAtMS: 1})
	require.Equal(t, []string{"TimerFired", "ActivityScheduled", "ActivityCancelRequested"}, kinds(r.Turn.HistoryDelta))
	// The loser's late completion is recorded but changes nothing; the
	// cancellation is not recorded twice.
	r = s.turn(actDone(s, 2, "late"))
	require.Equal(t, []string{"ActivityCompleted"}, kinds(r.Turn.HistoryDelta))
	require.Empty(t, r.Turn.CancelledActivities)
	r = s.turn(actDone(s, 5, "b"))
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "b", r.Output)
}

func TestExternalEventsPositional(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, _ string) (string, error) {
		a, _ := ctx.WaitForEvent("go").AwaitRaw()
		b, _ := ctx.WaitForEvent("go").AwaitRaw()
		return a + "," + b, nil
	}
	s := newSim(t, one("O", fn))
	// Raised in the same batch as the start: no subscription yet, dropped.
	r := s.turn(start(""), durable.ExternalRaised{Instance: "i1", Name: "go", Data: "early"})
	require.Equal(t, []string{"OrchestrationStarted", "ExternalEvent", "ExternalSubscribed"}, kinds(r.Turn.HistoryDelta))
	r = s.turn(durable.ExternalRaised{Instance: "i1", Name: "other", Data: "x"}, durable.ExternalRaised{Instance: "i1", Name: "go", Data: "1"})
	require.Equal(t, []string{"ExternalEvent", "ExternalEvent", "ExternalSubscribed"}, kinds(r.Turn.HistoryDelta))
	r = s.turn(durable.ExternalRaised{Instance: "i1", Name: "go", Data: "2"})
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "1,2", r.Output)
}

func TestSelectEventVsTimerAndResubscribe(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, _ string) (string, error) {
		for i := 0; ; i++ {
			ev := ctx.WaitForEvent("ping")
			w, _ := ctx.Select(ev, ctx.CreateTimer(time.Minute))
			if w == 0 {
				d, _ := ev.AwaitRaw()
				return fmt.Sprintf("%s after %d timeouts", d, i), nil
			}
		}
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	r := s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 3, FireAtMS: 1})
	require.Equal(t, []string{"TimerFired", "ExternalSubscribed", "TimerCreated", "ExternalSubscribedCancelled"}, kinds(r.Turn.HistoryDelta))
	// The cancelled subscription does not swallow the event.
	r = s.turn(durable.ExternalRaised{Instance: "i1", Name: "ping", Data: "pong"})
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "pong after 1 timeouts", r.Output)
}

func TestQueueMailboxFIFOAndCarryForward(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, in string) (string, error) {
		var n int
		_ = json.Unmarshal([]byte(in), &n)
		msg, _ := ctx.DequeueEvent("inbox").AwaitRaw()
		ctx.SetCustomStatus(fmt.Sprintf("got %s", msg))
		if n >= 2 {
			return msg, nil
		}
		return "", ctx.ContinueAsNewRaw(fmt.Sprint(n + 1))
	}
	s := newSim(t, one("O", fn))
	s.turn(start("0"))
	// Three messages arrive together: one consumed, two carried forward.
	q := func(d string) durable.QueueMessage {
		return durable.QueueMessage{Instance: "i1", Name: "inbox", Data: d}
	}
	r := s.turn(q("a"), q("b"), q("c"))
	require.Equal(t, OutcomeContinuedAsNew, r.Outcome)
	can := r.Turn.OrchestratorItems[len(r.Turn.OrchestratorItems)-1].(durable.ContinueAsNew)
	require.Equal(t, []history.QueuedEvent{{Name: "inbox", Data: "b"}, {Name: "inbox", Data: "c"}}, can.CarryForwardEvents)
	require.Equal(t, "got a", *can.InitialCustomStatus)
	require.Equal(t, "1", can.Input)
	require.Equal(t, durable.StatusContinuedAsNew, r.Turn.Metadata.Status)

	// Next execution starts from the ContinueAsNew message.
	r = s.turn(can)
	require.Equal(t, uint64(2), r.Turn.ExecutionID)
	st := r.Turn.HistoryDelta[0].Kind.(history.OrchestrationStarted)
	require.Equal(t, can.CarryForwardEvents, st.CarryForwardEvents)
	require.Equal(t, &durable.SemVer{Minor: 1}, r.Turn.Metadata.PinnedVersion, "pinned on the first turn of every execution")
	require.Equal(t, OutcomeContinuedAsNew, r.Outcome, "b consumed from the carried mailbox")
	can = r.Turn.OrchestratorItems[len(r.Turn.OrchestratorItems)-1].(durable.ContinueAsNew)
	require.Equal(t, []history.QueuedEvent{{Name: "inbox", Data: "c"}}, can.CarryForwardEvents)
	r = s.turn(can)
	require.Equal(t, uint64(3), r.Turn.ExecutionID)
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "c", r.Output)
}

func TestContinueAsNewVersionUpgrade(t *testing.T) {
	t.Parallel()
	res := resolver{"O": {
		"1.0.0": func(ctx *Context, _ string) (string, error) {
			return "", ctx.ContinueAsNewRaw("x", WithNextVersion("2.0.0"))
		},
		"2.0.0": func(ctx *Context, in string) (string, error) { return "v2:" + in, nil },
	}}
	s := newSim(t, res)
	st := start("")
	st.Version = "1.0.0"
	r := s.turn(st)
	require.Equal(t, OutcomeContinuedAsNew, r.Outcome)
	can := r.Turn.OrchestratorItems[0].(durable.ContinueAsNew)
	require.Equal(t, "2.0.0", can.Version)
	r = s.turn(can)
	require.Equal(t, "v2:x", r.Output)
	require.Equal(t, "2.0.0", r.Turn.Metadata.OrchestrationVersion)
}

func TestTerminalAndUnstartedInstancesDoNothing(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(*Context, string) (string, error) { return "ok", nil }))
	r := s.turn(durable.ExternalRaised{Instance: "i1", Name: "x"})
	require.Equal(t, OutcomeNone, r.Outcome)
	r = s.turn(start(""))
	require.Equal(t, OutcomeCompleted, r.Outcome)
	r = s.turn(start(""), durable.ExternalRaised{Instance: "i1", Name: "x"})
	require.Equal(t, OutcomeNone, r.Outcome, "a second start of a finished instance does not restart it")
	require.Empty(t, r.Turn.HistoryDelta)
}

func TestDuplicateStartAndCompletionsIgnored(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", greet))
	r := s.turn(start("a"), start("b"))
	require.Equal(t, []string{"OrchestrationStarted", "ActivityScheduled"}, kinds(r.Turn.HistoryDelta))
	r = s.turn(start("c"))
	require.Equal(t, OutcomeContinue, r.Outcome)
	require.Empty(t, r.Turn.HistoryDelta, "a duplicate start of a running instance changes nothing")
	stale := durable.ActivityCompleted{Instance: "i1", ExecutionID: 7, ID: 2, Result: `"x"`}
	r = s.turn(stale)
	require.Empty(t, r.Turn.HistoryDelta, "completion of another execution dropped")
	r = s.turn(actDone(s, 2, `"x"`), actDone(s, 2, `"y"`))
	require.Equal(t, "done:x", r.Output)
	require.Equal(t, []string{"ActivityCompleted", "OrchestrationCompleted"}, kinds(r.Turn.HistoryDelta))
}

func TestSubOrchestrationAutoIDAndParentCompletion(t *testing.T) {
	t.Parallel()
	parent := func(ctx *Context, _ string) (string, error) {
		a := ctx.CallSubOrchestrationRaw("Child", "in1")
		b := ctx.CallSubOrchestrationRaw("Child", "in2", WithInstanceID("explicit"), WithChildVersion("1.0.0"))
		if err := ctx.Join(a, b); err != nil {
			return "", err
		}
		ra, _ := a.AwaitRaw()
		rb, _ := b.AwaitRaw()
		return ra + "+" + rb + "@" + a.ChildInstance(), nil
	}
	s := newSim(t, one("O", parent))
	r := s.turn(start(""))
	require.Equal(t, []durable.WorkItem{
		durable.StartOrchestration{Instance: "i1::sub::2", Orchestration: "Child", Input: "in1", ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2, ExecutionID: 1},
		durable.StartOrchestration{Instance: "explicit", Orchestration: "Child", Input: "in2", Version: "1.0.0", ParentInstance: "i1", ParentExecutionID: 1, ParentID: 3, ExecutionID: 1},
	}, r.Turn.OrchestratorItems)
	r = s.turn(durable.SubOrchCompleted{ParentInstance: "i1", ParentExecutionID: 1, ParentID: 3, Result: "B"})
	require.Equal(t, OutcomeContinue, r.Outcome)
	r = s.turn(durable.SubOrchCompleted{ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2, Result: "A"})
	require.Equal(t, "A+B@i1::sub::2", r.Output)

	// The child side: a sub-orchestration reports to its parent.
	child := newSim(t, one("Child", func(ctx *Context, in string) (string, error) { return "r-" + in, nil }))
	child.inst = "i1::sub::2"
	r = child.turn(durable.StartOrchestration{Instance: "i1::sub::2", Orchestration: "Child", Input: "in1", ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2, ExecutionID: 1})
	require.Equal(t, "i1", r.Turn.Metadata.ParentInstanceID)
	require.Equal(t, uint64(1), child.hist[0].Kind.(history.OrchestrationStarted).ParentExecutionID)
	require.Equal(t, []durable.WorkItem{durable.SubOrchCompleted{ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2, Result: "r-in1"}}, r.Turn.OrchestratorItems)
}

// A child that the parent's first execution scheduled completes after the
// parent continued as new, and the new execution has scheduled another
// child under the same event id: the late completion names execution 1 and
// must not complete execution 2's child.
func TestLateChildCompletionAfterContinueAsNewIsDropped(t *testing.T) {
	t.Parallel()
	parent := func(ctx *Context, _ string) (string, error) {
		child := ctx.CallSubOrchestrationRaw("Child", fmt.Sprint("exec-", ctx.ExecutionID()))
		if ctx.ExecutionID() == 1 {
			if _, err := ctx.WaitForEvent("restart").AwaitRaw(); err != nil {
				return "", err
			}
			return "", ctx.ContinueAsNewRaw("")
		}
		return child.AwaitRaw()
	}
	s := newSim(t, one("O", parent))
	r := s.turn(start(""))
	require.Equal(t, []durable.WorkItem{durable.StartOrchestration{Instance: "i1::sub::2", Orchestration: "Child", Input: "exec-1",
		ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2, ExecutionID: 1}}, r.Turn.OrchestratorItems)
	r = s.turn(durable.ExternalRaised{Instance: "i1", Name: "restart"})
	require.Equal(t, OutcomeContinuedAsNew, r.Outcome)
	require.Empty(t, r.Turn.OrchestratorItems[:len(r.Turn.OrchestratorItems)-1], "continue-as-new does not cancel children")
	r = s.turn(r.Turn.OrchestratorItems[0])
	require.Equal(t, uint64(2), r.Turn.ExecutionID)
	require.Equal(t, []durable.WorkItem{durable.StartOrchestration{Instance: "i1::exec2::sub::2", Orchestration: "Child", Input: "exec-2",
		ParentInstance: "i1", ParentExecutionID: 2, ParentID: 2, ExecutionID: 1}}, r.Turn.OrchestratorItems,
		"same event id as execution 1's child, but another child instance and parent execution")

	late := durable.SubOrchCompleted{ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2, Result: "from-exec-1"}
	r = s.turn(late)
	require.Equal(t, OutcomeContinue, r.Outcome)
	require.Empty(t, r.Turn.HistoryDelta, "the late completion of execution 1's child is not applied to execution 2")
	lateFail := durable.SubOrchFailed{ParentInstance: "i1", ParentExecutionID: 1, ParentID: 2,
		Details: history.ApplicationError(history.AppOrchestrationFailed, "late failure", false)}
	r = s.turn(lateFail)
	require.Empty(t, r.Turn.HistoryDelta, "nor is a late failure")

	r = s.turn(durable.SubOrchCompleted{ParentInstance: "i1", ParentExecutionID: 2, ParentID: 2, Result: "from-exec-2"})
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "from-exec-2", r.Output)
}

// Completions of children started before ParentExecutionID existed carry
// the execution the dispatcher looked up, or 0 if none was filled in: both
// are accepted.
func TestChildCompletionWithoutParentExecutionAccepted(t *testing.T) {
	t.Parallel()
	parent := func(ctx *Context, _ string) (string, error) {
		return ctx.CallSubOrchestrationRaw("Child", "").AwaitRaw()
	}
	s := newSim(t, one("O", parent))
	s.turn(start(""))
	r := s.turn(durable.SubOrchCompleted{ParentInstance: "i1", ParentID: 2, Result: "legacy"})
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "legacy", r.Output)

	// A legacy child (no ParentExecutionID in its start) reports 0, so the
	// dispatcher can tell it must look the parent's execution up.
	child := newSim(t, one("Child", func(*Context, string) (string, error) { return "", errors.New("boom") }))
	child.inst = "i1::sub::2"
	r = child.turn(durable.StartOrchestration{Instance: "i1::sub::2", Orchestration: "Child", ParentInstance: "i1", ParentID: 2, ExecutionID: 1})
	require.Len(t, r.Turn.OrchestratorItems, 1)
	failed := r.Turn.OrchestratorItems[0].(durable.SubOrchFailed)
	require.Zero(t, failed.ParentExecutionID)
}

// A sub-orchestration that continues as new keeps its parent link, the
// parent's execution included, and reports to that execution.
func TestChildContinueAsNewKeepsParentExecution(t *testing.T) {
	t.Parallel()
	child := newSim(t, one("Child", func(ctx *Context, in string) (string, error) {
		if in == "" {
			return "", ctx.ContinueAsNewRaw("again")
		}
		return "done:" + in, nil
	}))
	child.inst = "p::sub::4"
	r := child.turn(durable.StartOrchestration{Instance: "p::sub::4", Orchestration: "Child", ParentInstance: "p", ParentExecutionID: 3, ParentID: 4, ExecutionID: 1})
	require.Equal(t, OutcomeContinuedAsNew, r.Outcome)
	r = child.turn(r.Turn.OrchestratorItems[0])
	require.Equal(t, OutcomeCompleted, r.Outcome)
	started := child.hist[0].Kind.(history.OrchestrationStarted)
	require.Equal(t, uint64(3), started.ParentExecutionID)
	require.Equal(t, []durable.WorkItem{durable.SubOrchCompleted{ParentInstance: "p", ParentExecutionID: 3, ParentID: 4, Result: "done:again"}}, r.Turn.OrchestratorItems)
}

// Auto-named children of later executions recorded in the first-execution
// form (histories written before execution-qualified ids) still replay.
func TestLegacyAutoChildIDReplays(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, in string) (string, error) {
		if ctx.ExecutionID() == 1 {
			return "", ctx.ContinueAsNewRaw("x")
		}
		c := ctx.CallSubOrchestrationRaw("Child", in)
		ctx.StartOrchestrationRaw("Other", in)
		out, err := c.AwaitRaw()
		return out + "@" + c.ChildInstance(), err
	}
	hist := []history.Event{
		{EventID: 1, InstanceID: "i1", ExecutionID: 2, Kind: history.OrchestrationStarted{Name: "O", Version: "1.0.0", Input: "x"}},
		{EventID: 2, InstanceID: "i1", ExecutionID: 2, Kind: history.SubOrchestrationScheduled{Name: "Child", Instance: "i1::sub::2", Input: "x"}},
		{EventID: 3, InstanceID: "i1", ExecutionID: 2, Kind: history.OrchestrationChained{Name: "Other", Instance: "i1::detached::3", Input: "x"}},
	}
	item := &durable.OrchestrationItem{Instance: "i1", ExecutionID: 2, History: hist,
		Messages: []durable.WorkItem{durable.SubOrchCompleted{ParentInstance: "i1", ParentExecutionID: 2, ParentID: 2, Result: "ok"}}}
	r, err := Execute(context.Background(), Input{Item: item, Now: epoch, Resolver: one("O", fn)})
	require.NoError(t, err)
	require.Equal(t, OutcomeCompleted, r.Outcome, "%v", r.Failure)
	require.Equal(t, "ok@i1::sub::2", r.Output)
}

func TestDetachedStart(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		ctx.StartOrchestrationRaw("Other", "x", WithInstanceID("det-1"))
		ctx.StartOrchestrationRaw("Other", "y")
		return "started", nil
	}))
	r := s.turn(start(""))
	require.Equal(t, []string{"OrchestrationStarted", "OrchestrationChained", "OrchestrationChained", "OrchestrationCompleted"}, kinds(r.Turn.HistoryDelta))
	require.Equal(t, []durable.WorkItem{
		durable.StartOrchestration{Instance: "det-1", Orchestration: "Other", Input: "x", ExecutionID: 1},
		durable.StartOrchestration{Instance: "i1::detached::3", Orchestration: "Other", Input: "y", ExecutionID: 1},
	}, r.Turn.OrchestratorItems)
}

func TestCancellationCascades(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		child := ctx.CallSubOrchestrationRaw("Child", "")
		act := ctx.CallActivityRaw("Long", "")
		return "", ctx.Join(child, act)
	}))
	s.turn(start(""))
	r := s.turn(durable.CancelInstance{Instance: "i1", Reason: "user request"})
	requireFailure(t, r, history.CategoryApplication, string(history.AppCancelled))
	require.Equal(t, "user request", r.Failure.Reason)
	require.Equal(t, []string{"OrchestrationCancelRequested", "OrchestrationFailed"}, kinds(r.Turn.HistoryDelta))
	require.Contains(t, r.Turn.OrchestratorItems, durable.WorkItem(durable.CancelInstance{Instance: "i1::sub::2", Reason: "parent ended: canceled: user request"}))
	require.Equal(t, []durable.ScheduledActivityIdentifier{{Instance: "i1", ExecutionID: 1, ActivityID: 3}}, r.Turn.CancelledActivities)
	// A second cancel after the end changes nothing.
	r = s.turn(durable.CancelInstance{Instance: "i1", Reason: "again"})
	require.Equal(t, OutcomeNone, r.Outcome)
}

func TestKeyValueReplay(t *testing.T) {
	t.Parallel()
	// Read-modify-write across turns: reads must see what the first run saw.
	fn := func(ctx *Context, _ string) (string, error) {
		for _, b := range []string{"a", "b", "c"} {
			cur, _ := ctx.GetKV("n")
			if _, err := ctx.CallActivityRaw("P", b).AwaitRaw(); err != nil {
				return "", err
			}
			ctx.SetKV("n", cur+b)
		}
		ctx.ClearKV("missing")
		v, _ := ctx.GetKV("n")
		return v, nil
	}
	s := newSim(t, one("O", fn))
	s.kv["n"] = durable.KVEntry{Value: "0"}
	s.turn(start(""))
	s.turn(actDone(s, 2, ""))
	s.turn(actDone(s, 5, ""))
	r := s.turn(actDone(s, 8, ""))
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "0abc", r.Output)
	require.Equal(t, "0abc", s.kv["n"].Value)

	// Changed code writing another value is nondeterministic.
	s2 := newSim(t, one("O", fn))
	s2.turn(start(""))
	s2.turn(actDone(s2, 2, ""))
	s2.res = one("O", func(ctx *Context, _ string) (string, error) {
		_, _ = ctx.CallActivityRaw("P", "a").AwaitRaw()
		ctx.SetKV("n", "different")
		return "", nil
	})
	r = s2.turn(actDone(s2, 5, ""))
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigNondeterminism))
}

func TestKVClearAllAndCustomStatusReset(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		ctx.SetKV("a", "1")
		ctx.SetCustomStatus("busy")
		ctx.ClearAllKV()
		ctx.ResetCustomStatus()
		_, ok := ctx.CustomStatus()
		return fmt.Sprint(len(ctx.GetKVAll()), ok), nil
	}))
	s.kv["old"] = durable.KVEntry{Value: "x"}
	r := s.turn(start(""))
	require.Equal(t, "0 false", r.Output)
	require.Equal(t, []string{"OrchestrationStarted", "KeyValueSet", "CustomStatusUpdated", "KeyValuesCleared", "CustomStatusUpdated", "OrchestrationCompleted"}, kinds(r.Turn.HistoryDelta))
}

func TestDeterministicTimeAndGUID(t *testing.T) {
	t.Parallel()
	var seen []string
	fn := func(ctx *Context, _ string) (string, error) {
		g1 := ctx.NewGUID()
		t1 := ctx.Now()
		_, _ = ctx.CallActivityRaw("A", "").AwaitRaw()
		t2 := ctx.Now()
		seen = append(seen, fmt.Sprint(g1, t1.UnixMilli(), t2.UnixMilli(), ctx.NewGUID() != g1))
		return "", nil
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	s.turn(actDone(s, 2, ""))
	require.Len(t, seen, 1)
	first := seen[0]
	// Replaying the same history again yields the same values.
	item := &durable.OrchestrationItem{Instance: "i1", ExecutionID: 1, History: s.hist[:2], Messages: []durable.WorkItem{actDone(s, 2, "")}}
	_, err := Execute(context.Background(), Input{Item: item, Now: epoch.Add(time.Hour), Resolver: one("O", fn)})
	require.NoError(t, err)
	require.Len(t, seen, 2)
	require.NotEqual(t, first, seen[1], "the completion is stamped with the new now")
	// Full replay of the recorded completion.
	item = &durable.OrchestrationItem{Instance: "i1", ExecutionID: 1, History: s.hist[:3]}
	_, err = Execute(context.Background(), Input{Item: item, Now: epoch.Add(time.Hour), Resolver: one("O", fn)})
	require.NoError(t, err)
	require.Equal(t, first, seen[2])
	require.Contains(t, first, fmt.Sprint(epoch.UnixMilli(), " ", epoch.Add(time.Second).UnixMilli()))
}

func TestRetryPolicyUsesDurableTimers(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, _ string) (string, error) {
		return ctx.CallActivityRaw("Flaky", "", WithRetry(RetryPolicy{MaxAttempts: 3, Backoff: Backoff{Kind: BackoffFixed, Base: 2 * time.Second}})).AwaitRaw()
	}
	fail := func(id uint64) durable.ActivityFailed {
		return durable.ActivityFailed{Instance: "i1", ExecutionID: 1, ID: id, Details: history.ApplicationError(history.AppActivityFailed, "flaky", true)}
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	r := s.turn(fail(2))
	require.Equal(t, []string{"ActivityFailed", "TimerCreated"}, kinds(r.Turn.HistoryDelta))
	r = s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 4})
	require.Equal(t, []string{"TimerFired", "ActivityScheduled"}, kinds(r.Turn.HistoryDelta))
	r = s.turn(fail(6))
	r = s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 8})
	r = s.turn(fail(10))
	requireFailure(t, r, history.CategoryApplication, string(history.AppOrchestrationFailed))
	require.Contains(t, r.Failure.Message, "flaky")
}

func TestRetryTimeout(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, _ string) (string, error) {
		_, err := ctx.CallActivityRaw("Slow", "", WithRetry(RetryPolicy{MaxAttempts: 3, Timeout: time.Second})).AwaitRaw()
		if errors.Is(err, ErrTimeout) {
			return "timed out", nil
		}
		return "", err
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	r := s.turn(durable.TimerFired{Instance: "i1", ExecutionID: 1, ID: 3})
	require.Equal(t, "timed out", r.Output)
	require.Len(t, r.Turn.CancelledActivities, 1)
}

func TestBackoffDelays(t *testing.T) {
	t.Parallel()
	b := DefaultBackoff()
	require.Equal(t, 100*time.Millisecond, b.Delay(1))
	require.Equal(t, 400*time.Millisecond, b.Delay(3))
	require.Equal(t, 30*time.Second, b.Delay(20))
	require.Equal(t, 3*time.Second, Backoff{Kind: BackoffLinear, Base: time.Second, Max: 3 * time.Second}.Delay(5))
	require.Equal(t, time.Duration(0), Backoff{}.Delay(2))
}

func TestReplaySafeLogging(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	fn := func(ctx *Context, _ string) (string, error) {
		ctx.Logger().Info("before")
		_, _ = ctx.CallActivityRaw("A", "").AwaitRaw()
		ctx.Logger().Info("after", zap.Bool("replaying", ctx.IsReplaying()))
		return "", nil
	}
	s := newSim(t, one("O", fn))
	s.logger = zap.New(core)
	s.turn(start(""))
	s.turn(actDone(s, 2, ""))
	var msgs []string
	for _, e := range logs.FilterMessageSnippet("").All() {
		if e.Message == "before" || e.Message == "after" {
			msgs = append(msgs, e.Message)
		}
	}
	require.Equal(t, []string{"before", "after"}, msgs, "each line once")
}

func TestNoGoroutineLeaks(t *testing.T) {
	// Not parallel: counts goroutines.
	before := runtime.NumGoroutine()
	fn := func(ctx *Context, _ string) (string, error) {
		defer func() { _ = recover() }() // even code that recovers is unwound
		for {
			_, _ = ctx.WaitForEvent("never").AwaitRaw()
		}
	}
	for i := 0; i < 50; i++ {
		s := newSim(t, one("O", fn))
		r := s.turn(start(""))
		require.Equal(t, OutcomeContinue, r.Outcome)
		s.turn(durable.ExternalRaised{Instance: "i1", Name: "other"})
	}
	waitGoroutines(t, before)
}

func TestContextCancelledWhileCodeRuns(t *testing.T) {
	before := runtime.NumGoroutine()
	release := make(chan struct{})
	fn := func(ctx *Context, _ string) (string, error) {
		<-release // misbehaving code blocks outside the context
		return ctx.CallActivityRaw("A", "").AwaitRaw()
	}
	goctx, cancel := context.WithCancel(context.Background())
	cancel()
	item := &durable.OrchestrationItem{Instance: "i1", ExecutionID: 1, Messages: []durable.WorkItem{start("")}}
	_, err := Execute(goctx, Input{Item: item, Now: epoch, Resolver: one("O", fn)})
	require.ErrorIs(t, err, ErrAbandoned)
	close(release)
	waitGoroutines(t, before)
}

func TestCorruptHistoryFirstEvent(t *testing.T) {
	t.Parallel()
	item := &durable.OrchestrationItem{Instance: "i1", ExecutionID: 1, History: []history.Event{
		{EventID: 1, InstanceID: "i1", ExecutionID: 1, Kind: history.TimerCreated{}},
	}, Messages: []durable.WorkItem{durable.ExternalRaised{Instance: "i1", Name: "x"}}}
	r, err := Execute(context.Background(), Input{Item: item, Now: epoch, Resolver: one("O", greet)})
	require.NoError(t, err)
	requireFailure(t, r, history.CategoryConfiguration, string(history.ConfigNondeterminism))
	require.Equal(t, uint64(2), r.Turn.HistoryDelta[0].EventID)
}

func TestSelectArgumentErrors(t *testing.T) {
	t.Parallel()
	s := newSim(t, one("O", func(ctx *Context, _ string) (string, error) {
		if _, err := ctx.Select(); err == nil {
			return "", errors.New("expected error")
		}
		retry := ctx.CallActivityRaw("A", "", WithRetry(RetryPolicy{MaxAttempts: 2}))
		if _, err := ctx.Select(retry); err == nil {
			return "", errors.New("expected error for retry task")
		}
		return "ok", nil
	}))
	r := s.turn(start(""))
	require.Equal(t, "ok", r.Output)
}

func TestOutcomeStrings(t *testing.T) {
	t.Parallel()
	for o := OutcomeNone; o <= OutcomeAbandon; o++ {
		require.NotContains(t, o.String(), "Outcome(")
	}
}

// waitGoroutines waits (without spawning goroutines itself) until the
// goroutine count is back to at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if runtime.NumGoroutine() <= n {
			return
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("goroutines leaked: %d > %d", runtime.NumGoroutine(), n)
}

// raceCompetition dequeues twice, loses the first dequeue to a timer, and
// returns what the second dequeue gets before its own timer: under the
// current queue race rule the arrival the loser would have been paired
// with reaches the second dequeue; under the earlier rule the loser
// swallows it and the second dequeue times out.
func raceCompetition(ctx *Context, _ string) (string, error) {
	first := ctx.DequeueEvent("q")
	second := ctx.DequeueEvent("q")
	t0 := ctx.CreateTimer(30 * time.Second)
	t1 := ctx.CreateTimer(60 * time.Second)
	if _, err := ctx.Select(first, t0); err != nil {
		return "", err
	}
	i, err := ctx.Select(second, t1)
	if err != nil {
		return "", err
	}
	if i == 1 {
		return "second-timeout", nil
	}
	return second.AwaitRaw()
}

// raceBatch is the competition's deciding batch: the first timer, then the
// arrival, then the second timer.
func raceBatch(t *testing.T, s *sim) []durable.WorkItem {
	t.Helper()
	var timers []durable.WorkItem
	for _, ev := range s.hist {
		if k, ok := ev.Kind.(history.TimerCreated); ok {
			timers = append(timers, durable.TimerFired{Instance: s.inst, ExecutionID: s.execID, ID: ev.EventID, FireAtMS: k.FireAtMS})
		}
	}
	require.Len(t, timers, 2)
	return []durable.WorkItem{timers[0], durable.QueueMessage{Instance: s.inst, Name: "q", Data: "first"}, timers[1]}
}

func TestQueueRaceRuleFollowsStartedStamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stamp, want string
	}{
		{"0.0.9", "second-timeout"}, // started by a runtime older than the current rule
		{"0.1.0", "first"},          // the rule's first version
		{"0.2.3", "first"},
		{"", "first"}, // no stamp: current rules
	} {
		t.Run("stamp="+tc.stamp, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, one("O", raceCompetition))
			s.turn(start(""))
			// The execution was started by a runtime of version tc.stamp;
			// this sim's runtime (0.1.0) replays and continues it.
			s.hist[0].RuntimeVersion = tc.stamp
			r := s.turn(raceBatch(t, s)...)
			require.Equal(t, OutcomeCompleted, r.Outcome)
			require.Equal(t, tc.want, r.Output, "the decision of the runtime that started the execution")
			require.Equal(t, tc.stamp, s.hist[0].RuntimeVersion, "the stamp is history: a newer runtime never rewrites it")
			for _, ev := range r.Turn.HistoryDelta {
				require.Equal(t, "0.1.0", ev.RuntimeVersion, "new events carry the version of the runtime that wrote them")
			}

			// Replaying the recorded turn takes the same decision and adds nothing.
			body := s.hist[:len(s.hist)-1] // without OrchestrationCompleted
			item := &durable.OrchestrationItem{Instance: s.inst, ExecutionID: 1, History: body}
			rr, err := Execute(context.Background(), Input{Item: item, Now: s.now, RuntimeVersion: durable.SemVer{Minor: 7}, Resolver: s.res})
			require.NoError(t, err)
			require.Equal(t, OutcomeCompleted, rr.Outcome)
			require.Equal(t, tc.want, rr.Output, "a replay by a newer runtime keeps the recorded decision")
			require.Equal(t, []string{"OrchestrationCompleted"}, kinds(rr.Turn.HistoryDelta))
		})
	}
}

func TestContinueAsNewSuccessorTakesItsStarterRules(t *testing.T) {
	t.Parallel()
	fn := func(ctx *Context, in string) (string, error) {
		if ctx.ExecutionID() == 1 {
			if _, err := ctx.CreateTimer(time.Second).AwaitRaw(); err != nil {
				return "", err
			}
			return "", ctx.ContinueAsNewRaw("next")
		}
		return raceCompetition(ctx, in)
	}
	s := newSim(t, one("O", fn))
	s.turn(start(""))
	s.hist[0].RuntimeVersion = "0.0.9" // the predecessor was started by an older runtime
	var timer durable.WorkItem
	for _, ev := range s.hist {
		if k, ok := ev.Kind.(history.TimerCreated); ok {
			timer = durable.TimerFired{Instance: s.inst, ExecutionID: 1, ID: ev.EventID, FireAtMS: k.FireAtMS}
		}
	}
	r := s.turn(timer)
	require.Equal(t, OutcomeContinuedAsNew, r.Outcome)
	can := r.Turn.OrchestratorItems[len(r.Turn.OrchestratorItems)-1]
	s.turn(can)
	require.Equal(t, uint64(2), s.execID)
	require.Equal(t, "0.1.0", s.hist[0].RuntimeVersion, "the successor is stamped by the runtime that started it")
	r = s.turn(raceBatch(t, s)...)
	require.Equal(t, OutcomeCompleted, r.Outcome)
	require.Equal(t, "first", r.Output, "the predecessor's stamp does not select the successor's rules")
}
