package chaos

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// hist builds one execution's history: each entry is (source, kind), ids
// assigned 1, 2, 3, …
func hist(instance string, exec uint64, entries ...any) []history.Event {
	var out []history.Event
	for i := 0; i < len(entries); i += 2 {
		out = append(out, history.Event{EventID: uint64(len(out) + 1), SourceEventID: uint64(entries[i].(int)),
			InstanceID: instance, ExecutionID: exec, Kind: entries[i+1].(history.EventKind)})
	}
	return out
}

// validEvidence is a small campaign that passed: a chain with one
// activity, a parent with one child, an event job with two raises, a
// mailbox over two executions.
func validEvidence() Evidence {
	started := history.OrchestrationStarted{Name: "x", Version: "1.0.0"}
	return Evidence{
		Expectations: []Expectation{
			{Instance: "chain", Kind: KindChain, Output: "3"},
			{Instance: "parent", Kind: KindSubOrch, Output: "7"},
			{Instance: "event", Kind: KindEvent, Output: `"a,b"`, Raised: []string{`"a"`, `"b"`}},
			{Instance: "mailbox", Kind: KindMailbox, Output: `"p,q"`, Enqueued: []string{`"p"`, `"q"`}},
		},
		Instances: []InstanceRecord{
			{Instance: "chain", Status: durable.StatusCompleted, Output: "3", Executions: [][]history.Event{hist("chain", 1,
				0, started, 0, history.ActivityScheduled{Name: "step"}, 2, history.ActivityCompleted{Result: "3"},
				0, history.OrchestrationCompleted{Output: "3"})}},
			{Instance: "parent", Status: durable.StatusCompleted, Output: "7", Executions: [][]history.Event{hist("parent", 1,
				0, started, 0, history.SubOrchestrationScheduled{Name: "x", Instance: "parent::sub::2"},
				2, history.SubOrchestrationCompleted{Result: "7"}, 0, history.OrchestrationCompleted{Output: "7"})}},
			{Instance: "parent::sub::2", Status: durable.StatusCompleted, Output: "7", Executions: [][]history.Event{hist("parent::sub::2", 1,
				0, started, 0, history.TimerCreated{}, 2, history.TimerFired{}, 0, history.OrchestrationCompleted{Output: "7"})}},
			{Instance: "event", Status: durable.StatusCompleted, Output: `"a,b"`, Executions: [][]history.Event{hist("event", 1,
				0, started, 0, history.ExternalSubscribed{Name: "s"}, 0, history.ExternalEvent{Name: "s", Data: `"a"`},
				0, history.ExternalSubscribed{Name: "s"}, 0, history.ExternalEvent{Name: "s", Data: `"b"`},
				0, history.OrchestrationCompleted{Output: `"a,b"`})}},
			{Instance: "mailbox", Status: durable.StatusCompleted, Output: `"p,q"`, Executions: [][]history.Event{
				hist("mailbox", 1, 0, started, 0, history.QueueSubscribed{Name: "i"}, 0, history.QueueEventDelivered{Name: "i", Data: `"p"`},
					0, history.QueueEventDelivered{Name: "i", Data: `"q"`}, 0, history.OrchestrationContinuedAsNew{Input: "{}"}),
				hist("mailbox", 2, 0, history.OrchestrationStarted{Name: "x", CarryForwardEvents: []history.QueuedEvent{{Name: "i", Data: `"q"`}}},
					0, history.QueueSubscribed{Name: "i"}, 0, history.OrchestrationCompleted{Output: `"p,q"`}),
			}},
		},
		Consumed: []ConsumedMessage{
			{Kind: "StartOrchestration", Instance: "event", Name: "x", Data: `""`, Replica: 1},
			{Kind: "ExternalRaised", Instance: "event", Name: "s", Data: `"a"`, Replica: 1},
			{Kind: "ExternalRaised", Instance: "event", Name: "s", Data: `"b"`, Replica: 2},
			{Kind: "QueueMessage", Instance: "mailbox", Name: "i", Data: `"p"`, Replica: 3},
		},
		ActivityExecutions: map[ActivityRef]int{{Instance: "chain", ExecutionID: 1, ID: 2}: 1},
	}
}

func instance(ev *Evidence, id string) *InstanceRecord {
	for i := range ev.Instances {
		if ev.Instances[i].Instance == id {
			return &ev.Instances[i]
		}
	}
	panic("no instance " + id)
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(ev *Evidence)
		checks  []string // the Check of each finding, sorted as the report sorts them
		inspect func(t *testing.T, r Report)
	}{
		{name: "a clean campaign passes", mutate: func(*Evidence) {}, inspect: func(t *testing.T, r Report) {
			require.Equal(t, 4, r.Expected)
			require.Equal(t, 4, r.Completed)
			require.Equal(t, 5, r.Instances)
			require.Equal(t, 1, r.ScheduledActivities)
			require.Zero(t, r.ReExecutionRate())
		}},
		{name: "wrong output", mutate: func(ev *Evidence) {
			instance(ev, "chain").Output = "4"
		}, checks: []string{CheckWrong}},
		{name: "failed root", mutate: func(ev *Evidence) {
			in := instance(ev, "chain")
			in.Status, in.Output = durable.StatusFailed, "boom"
		}, checks: []string{CheckWrong}},
		{name: "missing root", mutate: func(ev *Evidence) {
			ev.Instances = ev.Instances[1:]
			ev.ActivityExecutions = nil
		}, checks: []string{CheckMissing}},
		{name: "a running child is stuck", mutate: func(ev *Evidence) {
			instance(ev, "parent::sub::2").Status = durable.StatusRunning
		}, checks: []string{CheckStuck}},
		{name: "messages left in a queue", mutate: func(ev *Evidence) {
			ev.QueueDepths.WorkerQueue = 1
		}, checks: []string{CheckStuck}},
		{name: "a raised payload recorded twice", mutate: func(ev *Evidence) {
			in := instance(ev, "event")
			in.Executions[0] = hist("event", 1, 0, history.OrchestrationStarted{}, 0, history.ExternalEvent{Name: "s", Data: `"a"`},
				0, history.ExternalEvent{Name: "s", Data: `"a"`}, 0, history.ExternalEvent{Name: "s", Data: `"b"`},
				0, history.OrchestrationCompleted{Output: `"a,b"`})
		}, checks: []string{CheckDuplicateEvent}, inspect: func(t *testing.T, r Report) {
			require.Equal(t, 1, r.DuplicateEvents)
			require.Contains(t, r.Findings[0].Detail, `"a" recorded 2 times`)
		}},
		{name: "a persistent event delivered again in the next execution", mutate: func(ev *Evidence) {
			in := instance(ev, "mailbox")
			in.Executions[1] = hist("mailbox", 2, 0, history.OrchestrationStarted{}, 0, history.QueueEventDelivered{Name: "i", Data: `"p"`},
				0, history.OrchestrationCompleted{Output: `"p,q"`})
		}, checks: []string{CheckDuplicateEvent}},
		{name: "a raise consumed by two committed turns", mutate: func(ev *Evidence) {
			ev.Consumed = append(ev.Consumed, ConsumedMessage{Kind: "ExternalRaised", Instance: "event", Name: "s", Data: `"b"`, Replica: 3})
		}, checks: []string{CheckDuplicateEvent}, inspect: func(t *testing.T, r Report) {
			require.Contains(t, r.Findings[0].Detail, "replicas 2,3")
		}},
		{name: "a start consumed twice", mutate: func(ev *Evidence) {
			ev.Consumed = append(ev.Consumed, ConsumedMessage{Kind: "StartOrchestration", Instance: "event", Name: "x", Data: `""`, Replica: 2})
		}, checks: []string{CheckDuplicateEvent}},
		{name: "a raised event never recorded", mutate: func(ev *Evidence) {
			in := instance(ev, "event")
			in.Executions[0] = hist("event", 1, 0, history.OrchestrationStarted{}, 0, history.ExternalEvent{Name: "s", Data: `"a"`},
				0, history.OrchestrationCompleted{Output: `"a,b"`})
		}, checks: []string{CheckLostEvent}},
		{name: "an event nobody sent", mutate: func(ev *Evidence) {
			in := instance(ev, "event")
			in.Executions[0] = append(in.Executions[0][:5:5], history.Event{EventID: 6, InstanceID: "event", ExecutionID: 1,
				Kind: history.ExternalEvent{Name: "s", Data: `"z"`}}, history.Event{EventID: 7, InstanceID: "event", ExecutionID: 1,
				Kind: history.OrchestrationCompleted{Output: `"a,b"`}})
		}, checks: []string{CheckDuplicateEvent}},
		{name: "an activity completed twice", mutate: func(ev *Evidence) {
			instance(ev, "chain").Executions[0] = hist("chain", 1, 0, history.OrchestrationStarted{}, 0, history.ActivityScheduled{Name: "step"},
				2, history.ActivityCompleted{Result: "3"}, 2, history.ActivityCompleted{Result: "3"}, 0, history.OrchestrationCompleted{Output: "3"})
		}, checks: []string{CheckDuplicateCompletion}},
		{name: "a sub-orchestration completed twice", mutate: func(ev *Evidence) {
			instance(ev, "parent").Executions[0] = hist("parent", 1, 0, history.OrchestrationStarted{},
				0, history.SubOrchestrationScheduled{Instance: "parent::sub::2"}, 2, history.SubOrchestrationCompleted{Result: "7"},
				2, history.SubOrchestrationFailed{}, 0, history.OrchestrationCompleted{Output: "7"})
		}, checks: []string{CheckDuplicateCompletion}},
		{name: "a timer fired twice", mutate: func(ev *Evidence) {
			instance(ev, "parent::sub::2").Executions[0] = hist("parent::sub::2", 1, 0, history.OrchestrationStarted{},
				0, history.TimerCreated{}, 2, history.TimerFired{}, 2, history.TimerFired{}, 0, history.OrchestrationCompleted{Output: "7"})
		}, checks: []string{CheckDuplicateCompletion}},
		{name: "a terminal execution left an activity without completion", mutate: func(ev *Evidence) {
			instance(ev, "chain").Executions[0] = hist("chain", 1, 0, history.OrchestrationStarted{}, 0, history.ActivityScheduled{Name: "step"},
				0, history.OrchestrationCompleted{Output: "3"})
		}, checks: []string{CheckMissingCompletion}},
		{name: "a repeated event id", mutate: func(ev *Evidence) {
			instance(ev, "chain").Executions[0][2].EventID = 2
		}, checks: []string{CheckEventIDs}},
		{name: "event ids going backwards", mutate: func(ev *Evidence) {
			e := instance(ev, "chain").Executions[0]
			e[1].EventID, e[2].EventID = 3, 2
			e[2].SourceEventID = 3
			ev.ActivityExecutions = map[ActivityRef]int{{Instance: "chain", ExecutionID: 1, ID: 3}: 1}
		}, checks: []string{CheckEventIDs}},
		{name: "events after the terminal event", mutate: func(ev *Evidence) {
			in := instance(ev, "parent::sub::2")
			in.Executions[0] = hist("parent::sub::2", 1, 0, history.OrchestrationStarted{}, 0, history.TimerCreated{},
				0, history.OrchestrationCompleted{Output: "7"}, 2, history.TimerFired{})
		}, checks: []string{CheckHistoryShape}},
		{name: "an earlier execution that did not continue as new", mutate: func(ev *Evidence) {
			in := instance(ev, "mailbox")
			last := len(in.Executions[0]) - 1
			in.Executions[0][last].Kind = history.OrchestrationCompleted{Output: `"p"`}
		}, checks: []string{CheckHistoryShape}},
		{name: "an execution without OrchestrationStarted", mutate: func(ev *Evidence) {
			in := instance(ev, "chain")
			in.Executions[0][0].Kind = history.CustomStatusUpdated{}
		}, checks: []string{CheckHistoryShape}},
		{name: "an activity no history scheduled", mutate: func(ev *Evidence) {
			ev.ActivityExecutions[ActivityRef{Instance: "chain", ExecutionID: 1, ID: 9}] = 1
		}, checks: []string{CheckPhantomActivity}},
		{name: "re-executed activities are counted, not judged", mutate: func(ev *Evidence) {
			ev.ActivityExecutions[ActivityRef{Instance: "chain", ExecutionID: 1, ID: 2}] = 3
		}, inspect: func(t *testing.T, r Report) {
			require.Equal(t, 3, r.ActivityExecutions)
			require.Equal(t, 2, r.ReExecutions)
			require.InDelta(t, 2.0, r.ReExecutionRate(), 1e-9)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := validEvidence()
			tc.mutate(&ev)
			r := Check(ev)
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.Check)
			}
			require.Equal(t, tc.checks, got, "findings: %v", r.Findings)
			require.Equal(t, len(tc.checks) == 0, r.OK())
			if tc.inspect != nil {
				tc.inspect(t, r)
			}
		})
	}
}
