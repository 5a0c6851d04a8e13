package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// Expectation is what one root orchestration of a campaign must produce,
// and the client calls made for it besides its start.
type Expectation struct {
	// Instance is the root instance id; Kind its workload kind.
	Instance string
	Kind     string
	// Output is the expected output of the instance's last execution, as
	// the runtime stores it (JSON).
	Output string
	// Raised are the payloads (JSON) of the external events the client
	// raised, one RaiseEvent call each; each must be recorded exactly once
	// as an ExternalEvent.
	Raised []string
	// Enqueued are the payloads (JSON) of the persistent events the client
	// enqueued, one EnqueueEvent call each; each must arrive exactly once
	// (QueueEventDelivered).
	Enqueued []string
}

// InstanceRecord is one instance as read back after the run.
type InstanceRecord struct {
	// Instance is the instance id.
	Instance string
	// Status and Output are the instance's (current execution's) status
	// and output as the provider's management surface reports them.
	Status durable.Status
	Output string
	// CompletedAt is when the last execution finished (zero while it
	// runs); the checker does not judge it, the campaign's latencies come
	// from it.
	CompletedAt time.Time
	// Executions holds every execution's history, in execution order.
	Executions [][]history.Event
}

// ConsumedMessage is one client-originated message (a start, a raised
// event, a persistent event) that a committed turn consumed, as the
// campaign's provider wrapper saw it on a successful
// AckOrchestrationItem. A message recorded more than once for one client
// call was delivered twice.
type ConsumedMessage struct {
	// Kind is the work item kind (durable.WorkItem.Kind).
	Kind string
	// Instance is the target instance; Data the input (start) or payload
	// (events), Name the orchestration or event name.
	Instance string
	Name     string
	Data     string
	// Replica is the replica whose ack consumed it.
	Replica int
}

// key identifies the client call the message came from.
func (m ConsumedMessage) key() string {
	return m.Kind + "\x00" + m.Instance + "\x00" + m.Name + "\x00" + m.Data
}

// Evidence is everything the checker judges: what was expected, what was
// read back, what was observed while the campaign ran.
type Evidence struct {
	// Expectations lists the root orchestrations started by the client.
	Expectations []Expectation
	// Instances holds every instance read back (roots and children).
	Instances []InstanceRecord
	// Consumed lists the client-originated messages consumed by committed
	// turns (starts of root instances, raised and persistent events).
	Consumed []ConsumedMessage
	// ActivityExecutions counts the calls of activity functions.
	ActivityExecutions map[ActivityRef]int
	// QueueDepths are the visible queue messages after the run settled.
	QueueDepths durable.QueueDepths
}

// Finding is one correctness violation, with its evidence.
type Finding struct {
	// Check names the violated property (the Check* constants).
	Check string
	// Instance is the instance concerned ("" for global findings).
	Instance string
	// Detail describes the violation and its evidence.
	Detail string
}

// String formats the finding on one line.
func (f Finding) String() string {
	if f.Instance == "" {
		return f.Check + ": " + f.Detail
	}
	return f.Check + " " + f.Instance + ": " + f.Detail
}

// Names of the checked properties (Finding.Check).
const (
	// CheckMissing: an expected root instance was not found.
	CheckMissing = "missing"
	// CheckWrong: a root instance completed with another output, or failed.
	CheckWrong = "wrong-output"
	// CheckStuck: an instance is not terminal, or queues still hold messages.
	CheckStuck = "stuck"
	// CheckDuplicateEvent: one client call was recorded or consumed more
	// than once (an ExternalEvent or QueueEventDelivered payload repeated,
	// a start, raise or enqueue consumed twice).
	CheckDuplicateEvent = "duplicate-event"
	// CheckLostEvent: a client call's event never arrived.
	CheckLostEvent = "lost-event"
	// CheckDuplicateCompletion: a scheduled activity, sub-orchestration or
	// timer has more than one completion event.
	CheckDuplicateCompletion = "duplicate-completion"
	// CheckMissingCompletion: a scheduled activity, sub-orchestration or
	// timer of a terminal execution has no completion event.
	CheckMissingCompletion = "missing-completion"
	// CheckEventIDs: an event id repeats, or ids do not increase, within
	// an execution.
	CheckEventIDs = "event-ids"
	// CheckHistoryShape: an execution does not start with
	// OrchestrationStarted, ends early, or a terminal event is followed by
	// more events.
	CheckHistoryShape = "history-shape"
	// CheckPhantomActivity: an activity ran that no history scheduled.
	CheckPhantomActivity = "phantom-activity"
)

// Report is the checker's verdict.
type Report struct {
	// Expected counts root instances; Completed those completed with the
	// right output; Wrong those completed otherwise or failed; Missing
	// those not found.
	Expected, Completed, Wrong, Missing int
	// Instances counts every instance read back (roots and children);
	// Stuck those not terminal.
	Instances, Stuck int
	// QueueDepths are the queue depths after the run settled.
	QueueDepths durable.QueueDepths
	// DuplicateEvents counts client calls recorded or consumed more than
	// once; LostEvents client events never recorded.
	DuplicateEvents, LostEvents int
	// DuplicateCompletions counts scheduled operations with more than one
	// completion event; MissingCompletions those of terminal executions
	// without one.
	DuplicateCompletions, MissingCompletions int
	// EventIDViolations counts executions whose event ids repeat or do not
	// increase; ShapeViolations malformed executions.
	EventIDViolations, ShapeViolations int
	// ScheduledActivities counts ActivityScheduled events;
	// ActivityExecutions calls of the activity function; ReExecutions the
	// calls beyond the first for one scheduled activity (at-least-once
	// execution, allowed); PhantomActivities executions of activities no
	// history scheduled.
	ScheduledActivities, ActivityExecutions, ReExecutions, PhantomActivities int
	// Findings lists every violation with its evidence, sorted.
	Findings []Finding
}

// OK reports whether every correctness check passed. Activity
// re-executions are reported, not judged: execution is at least once.
func (r Report) OK() bool { return len(r.Findings) == 0 }

// ReExecutionRate is ReExecutions over ScheduledActivities (0 when none
// were scheduled).
func (r Report) ReExecutionRate() float64 {
	if r.ScheduledActivities == 0 {
		return 0
	}
	return float64(r.ReExecutions) / float64(r.ScheduledActivities)
}

// Check judges a campaign's evidence. It proves that every expected root
// completed with its expected output; that within every execution event
// ids are unique and increasing, every scheduled activity,
// sub-orchestration and timer has at most one completion (exactly one
// once the execution is terminal); that nothing is stuck (every instance
// terminal, every queue empty); that no client call took effect twice
// (no repeated ExternalEvent or QueueEventDelivered payload across an
// instance's executions, no start, raise or enqueue consumed twice) and
// none was lost; and that no activity ran without being scheduled. It
// counts activity re-executions (allowed) separately. Check is pure: it
// reads only ev.
func Check(ev Evidence) Report {
	r := Report{Expected: len(ev.Expectations), Instances: len(ev.Instances), QueueDepths: ev.QueueDepths}
	add := func(check, instance, format string, args ...any) {
		r.Findings = append(r.Findings, Finding{Check: check, Instance: instance, Detail: fmt.Sprintf(format, args...)})
	}
	byID := make(map[string]*InstanceRecord, len(ev.Instances))
	for i := range ev.Instances {
		byID[ev.Instances[i].Instance] = &ev.Instances[i]
	}

	// Every instance: terminal, well-formed executions.
	scheduled := map[ActivityRef]bool{}
	for i := range ev.Instances {
		in := &ev.Instances[i]
		if in.Status != durable.StatusCompleted && in.Status != durable.StatusFailed {
			r.Stuck++
			add(CheckStuck, in.Instance, "status %s after the run settled; last events: %s", statusName(in.Status), tail(in, 4))
		}
		for x, events := range in.Executions {
			last := x == len(in.Executions)-1
			r.checkExecution(in.Instance, events, last, scheduled, add)
		}
	}
	if d := ev.QueueDepths; d.OrchestratorQueue != 0 || d.WorkerQueue != 0 || d.TimerQueue != 0 {
		add(CheckStuck, "", "queues not empty after the run settled: orchestrator %d, worker %d, timer %d",
			d.OrchestratorQueue, d.WorkerQueue, d.TimerQueue)
	}

	// Roots: output and client calls.
	consumed := map[string][]ConsumedMessage{}
	for _, m := range ev.Consumed {
		consumed[m.key()] = append(consumed[m.key()], m)
	}
	for _, x := range ev.Expectations {
		in := byID[x.Instance]
		if in == nil {
			r.Missing++
			add(CheckMissing, x.Instance, "%s instance not found after the run", x.Kind)
			continue
		}
		switch {
		case in.Status == durable.StatusCompleted && in.Output == x.Output:
			r.Completed++
		case in.Status == durable.StatusCompleted:
			r.Wrong++
			add(CheckWrong, x.Instance, "%s completed with %s, want %s", x.Kind, in.Output, x.Output)
		case in.Status == durable.StatusFailed:
			r.Wrong++
			add(CheckWrong, x.Instance, "%s failed: %s", x.Kind, in.Output)
		}
		r.checkPayloads(in, x.Raised, func(k history.EventKind) (string, bool) {
			e, ok := k.(history.ExternalEvent)
			return e.Data, ok
		}, "raised event", add)
		r.checkPayloads(in, x.Enqueued, func(k history.EventKind) (string, bool) {
			e, ok := k.(history.QueueEventDelivered)
			return e.Data, ok
		}, "persistent event", add)
		for _, m := range consumedFor(consumed, x) {
			if len(m) > 1 {
				r.DuplicateEvents++
				reps := make([]string, len(m))
				for i, c := range m {
					reps[i] = fmt.Sprint(c.Replica)
				}
				add(CheckDuplicateEvent, x.Instance, "one client call's %s %s %s was consumed by %d committed turns (replicas %s)",
					m[0].Kind, m[0].Name, abbreviate(m[0].Data), len(m), strings.Join(reps, ","))
			}
		}
	}

	// Activities: executions against schedules.
	r.ScheduledActivities = len(scheduled)
	refs := make([]ActivityRef, 0, len(ev.ActivityExecutions))
	for ref := range ev.ActivityExecutions {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	for _, ref := range refs {
		n := ev.ActivityExecutions[ref]
		r.ActivityExecutions += n
		if !scheduled[ref] {
			r.PhantomActivities++
			add(CheckPhantomActivity, ref.Instance, "activity %s ran %d time(s) but no history schedules it", ref, n)
			continue
		}
		if n > 1 {
			r.ReExecutions += n - 1
		}
	}
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Instance < b.Instance
	})
	return r
}

// consumedFor returns, per client call of x (its start, each raise, each
// enqueue), the consumed messages recorded for it.
func consumedFor(consumed map[string][]ConsumedMessage, x Expectation) [][]ConsumedMessage {
	var out [][]ConsumedMessage
	for _, ms := range consumed {
		if ms[0].Instance == x.Instance && isClientKind(ms[0].Kind) {
			out = append(out, ms)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0].key() < out[j][0].key() })
	return out
}

// isClientKind reports whether kind is a work item a client call enqueues.
func isClientKind(kind string) bool {
	switch kind {
	case durable.StartOrchestration{}.Kind(), durable.ExternalRaised{}.Kind(), durable.QueueMessage{}.Kind():
		return true
	}
	return false
}

// checkExecution checks one execution's event ids, shape and completions,
// and collects its scheduled activities.
func (r *Report) checkExecution(instance string, events []history.Event, last bool, scheduled map[ActivityRef]bool,
	add func(check, instance, format string, args ...any)) {
	if len(events) == 0 {
		r.ShapeViolations++
		add(CheckHistoryShape, instance, "an execution has no events")
		return
	}
	exec := events[0].ExecutionID
	if _, ok := events[0].Kind.(history.OrchestrationStarted); !ok {
		r.ShapeViolations++
		add(CheckHistoryShape, instance, "execution %d starts with %s", exec, events[0].Kind.KindName())
	}
	// Event ids: unique and increasing.
	seen := map[uint64]int{}
	var repeated []string
	increasing := true
	for i, e := range events {
		seen[e.EventID]++
		if seen[e.EventID] == 2 {
			repeated = append(repeated, fmt.Sprint(e.EventID))
		}
		if i > 0 && e.EventID <= events[i-1].EventID {
			increasing = false
		}
	}
	if len(repeated) > 0 || !increasing {
		r.EventIDViolations++
		add(CheckEventIDs, instance, "execution %d: repeated ids [%s], increasing=%t", exec, strings.Join(repeated, " "), increasing)
	}
	// Shape: a terminal event only at the end; earlier executions end with
	// ContinuedAsNew.
	terminal := false
	for i, e := range events {
		if e.IsTerminal() && i != len(events)-1 {
			r.ShapeViolations++
			add(CheckHistoryShape, instance, "execution %d: %s (event %d) is followed by %d more events",
				exec, e.Kind.KindName(), e.EventID, len(events)-1-i)
			break
		}
		terminal = e.IsTerminal()
	}
	if !last {
		if _, ok := events[len(events)-1].Kind.(history.OrchestrationContinuedAsNew); !ok {
			r.ShapeViolations++
			add(CheckHistoryShape, instance, "execution %d is not the last but ends with %s", exec, events[len(events)-1].Kind.KindName())
		}
	}
	// Completions: at most one per schedule, exactly one when terminal
	// (a cancelled schedule may have none).
	type sched struct {
		what      string
		id        uint64
		n         int
		cancelled bool
	}
	var order []uint64
	scheds := map[uint64]*sched{}
	for _, e := range events {
		var what string
		switch k := e.Kind.(type) {
		case history.ActivityScheduled:
			what = "activity " + k.Name
			scheduled[ActivityRef{Instance: instance, ExecutionID: exec, ID: e.EventID}] = true
		case history.SubOrchestrationScheduled:
			what = "sub-orchestration " + k.Instance
		case history.TimerCreated:
			what = "timer"
		}
		if what != "" {
			scheds[e.EventID] = &sched{what: what, id: e.EventID}
			order = append(order, e.EventID)
		}
	}
	for _, e := range events {
		s := scheds[e.SourceEventID]
		if s == nil {
			continue
		}
		switch e.Kind.(type) {
		case history.ActivityCompleted, history.ActivityFailed, history.SubOrchestrationCompleted,
			history.SubOrchestrationFailed, history.TimerFired:
			s.n++
		case history.ActivityCancelRequested, history.SubOrchestrationCancelRequested:
			s.cancelled = true
		}
	}
	for _, id := range order {
		s := scheds[id]
		switch {
		case s.n > 1:
			r.DuplicateCompletions++
			add(CheckDuplicateCompletion, instance, "execution %d: %s (event %d) has %d completion events: %s",
				exec, s.what, s.id, s.n, excerpt(events, func(e history.Event) bool { return e.SourceEventID == s.id }))
		case s.n == 0 && terminal && !s.cancelled && !isTimer(s.what):
			r.MissingCompletions++
			add(CheckMissingCompletion, instance, "execution %d ended without a completion of %s (event %d)", exec, s.what, s.id)
		}
	}
}

// isTimer: a terminal execution may leave a timer unfired (one that lost
// a race); activities and sub-orchestrations it waited for must complete.
func isTimer(what string) bool { return what == "timer" }

// checkPayloads checks that each expected client payload is recorded
// exactly once across the instance's executions.
func (r *Report) checkPayloads(in *InstanceRecord, want []string, payload func(history.EventKind) (string, bool), what string,
	add func(check, instance, format string, args ...any)) {
	if len(want) == 0 {
		return
	}
	count := map[string]int{}
	for _, events := range in.Executions {
		for _, e := range events {
			if d, ok := payload(e.Kind); ok {
				count[d]++
			}
		}
	}
	for _, p := range want {
		switch n := count[p]; {
		case n > 1:
			r.DuplicateEvents++
			add(CheckDuplicateEvent, in.Instance, "%s %s recorded %d times: %s", what, p, n, excerptAll(in, func(e history.Event) bool {
				d, ok := payload(e.Kind)
				return ok && d == p
			}))
		case n == 0 && in.Status == durable.StatusCompleted:
			r.LostEvents++
			add(CheckLostEvent, in.Instance, "%s %s never recorded", what, p)
		}
	}
	for p, n := range count {
		if !slices.Contains(want, p) {
			r.DuplicateEvents++
			add(CheckDuplicateEvent, in.Instance, "%s %s recorded %d time(s) but never sent", what, p, n)
		}
	}
}

func statusName(s durable.Status) string {
	if s == "" {
		return "unknown"
	}
	return string(s)
}

// tail describes the last n events of the instance's last execution.
func tail(in *InstanceRecord, n int) string {
	if len(in.Executions) == 0 {
		return "(no history)"
	}
	events := in.Executions[len(in.Executions)-1]
	return describe(events[max(0, len(events)-n):])
}

// excerpt describes the events of one execution that match.
func excerpt(events []history.Event, match func(history.Event) bool) string {
	var sel []history.Event
	for _, e := range events {
		if match(e) {
			sel = append(sel, e)
		}
	}
	return describe(sel)
}

// excerptAll describes the matching events of every execution.
func excerptAll(in *InstanceRecord, match func(history.Event) bool) string {
	var sel []history.Event
	for _, events := range in.Executions {
		for _, e := range events {
			if match(e) {
				sel = append(sel, e)
			}
		}
	}
	return describe(sel)
}

// describe formats events as [exec.id Kind @ts, ...].
func describe(events []history.Event) string {
	parts := make([]string, len(events))
	for i, e := range events {
		parts[i] = fmt.Sprintf("%d.%d %s(src %d) @%d", e.ExecutionID, e.EventID, e.Kind.KindName(), e.SourceEventID, e.TimestampMS)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// abbreviate shortens long payloads in findings.
func abbreviate(s string) string {
	const limit = 120
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
