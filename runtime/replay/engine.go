package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// OrchestratorFunc is orchestration code in raw form: it receives the
// serialized input and returns the serialized output. Returning an error
// fails the orchestration (a history.ErrorDetails of a non-application
// category is recorded as is; any other error becomes an application
// failure with its message).
type OrchestratorFunc func(ctx *Context, input string) (string, error)

// Resolver finds orchestration code.
type Resolver interface {
	// ResolveOrchestration returns the code registered under name and
	// version; an empty version asks for the latest registered one. It
	// returns the resolved version, and ok == false when nothing matches.
	ResolveOrchestration(name, version string) (fn OrchestratorFunc, resolved string, ok bool)
}

// Input is everything one turn depends on.
type Input struct {
	// Item is the fetched work (its history, messages and key-value snapshot).
	Item *durable.OrchestrationItem
	// Now is the turn's time, used to stamp new events.
	Now time.Time
	// RuntimeVersion is stamped on new events and pinned on the first turn
	// of every execution.
	RuntimeVersion durable.SemVer
	// Resolver finds the orchestration code.
	Resolver Resolver
	// Logger receives engine diagnostics and backs Context.Logger; nil
	// discards them.
	Logger *zap.Logger
	// TraceParent is stamped on a new execution's OrchestrationStarted
	// when its start message carries none (the runtime passes its turn
	// span's W3C traceparent, which then heads the instance's trace).
	TraceParent string
}

// Outcome is how a turn ended.
type Outcome int

const (
	// OutcomeNone: nothing to run (terminal instance, unknown instance,
	// stale messages); ack the turn to delete the messages.
	OutcomeNone Outcome = iota
	// OutcomeContinue: the orchestration waits for more work.
	OutcomeContinue
	// OutcomeCompleted: the execution completed.
	OutcomeCompleted
	// OutcomeFailed: the execution failed (Result.Failure says why).
	OutcomeFailed
	// OutcomeContinuedAsNew: the execution ended and the next one was requested.
	OutcomeContinuedAsNew
	// OutcomeAbandon: this node cannot run the turn (the execution's
	// orchestration version is not registered here); abandon the item so a
	// capable node can take it.
	OutcomeAbandon
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OutcomeNone:
		return "none"
	case OutcomeContinue:
		return "continue"
	case OutcomeCompleted:
		return "completed"
	case OutcomeFailed:
		return "failed"
	case OutcomeContinuedAsNew:
		return "continued_as_new"
	case OutcomeAbandon:
		return "abandon"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is what a turn produced.
type Result struct {
	// Turn is what to commit with AckOrchestrationItem. Completions sent to
	// a parent (SubOrchCompleted, SubOrchFailed) carry the ParentExecutionID
	// recorded in the child's OrchestrationStarted event: the parent
	// execution that scheduled the child. It is 0 only for children started
	// before that field existed; the caller must then fill it in (the
	// parent's current execution) before acking.
	Turn    durable.OrchestrationTurn
	Outcome Outcome
	// Output is the result for OutcomeCompleted, the next input for
	// OutcomeContinuedAsNew.
	Output string
	// Failure is set for OutcomeFailed.
	Failure *history.ErrorDetails
	// Reason explains OutcomeAbandon and OutcomeNone.
	Reason string
}

// ErrAbandoned is returned (wrapped) by Execute when the context ended
// before the orchestration code reached a wait point.
var ErrAbandoned = errors.New("turn abandoned")

// engine is the state of one Execute call.
type engine struct {
	in     Input
	item   *durable.OrchestrationItem
	log    *zap.Logger
	nowMS  uint64
	execID uint64
	rv     string

	events    []history.Event // working history: persisted, then new
	persisted int
	nextID    uint64
	cursor    int
	newExec   bool
	started   history.OrchestrationStarted
	// rules are the version-dependent replay decisions of the execution,
	// chosen from its OrchestrationStarted stamp (rules.go).
	rules rules

	turn      durable.OrchestrationTurn
	abortErr  *history.ErrorDetails
	cancelReq *string
	// cancelRecorded holds sources whose *CancelRequested/Cancelled event exists.
	cancelRecorded map[uint64]bool
	// completed holds sources whose completion event exists.
	completed map[uint64]bool

	c        *Context
	fnDone   bool
	fnSignal signal
	running  bool // goroutine started and not finished
}

// Execute runs one turn. It returns an error only when goctx ends while
// orchestration code is running (the turn should then be abandoned); every
// problem of the orchestration itself (nondeterminism, panics, bad input,
// unregistered code) is a Result with OutcomeFailed.
func Execute(goctx context.Context, in Input) (Result, error) {
	e := &engine{
		in: in, item: in.Item, log: in.Logger,
		nowMS:          uint64(in.Now.UnixMilli()),
		rv:             in.RuntimeVersion.String(),
		cancelRecorded: map[uint64]bool{},
		completed:      map[uint64]bool{},
	}
	if e.log == nil {
		e.log = zap.NewNop()
	}
	e.log = e.log.With(zap.String("instance", in.Item.Instance))
	return e.run(goctx)
}

func (e *engine) run(goctx context.Context) (Result, error) {
	item := e.item
	hist := item.History
	e.execID = max(item.ExecutionID, 1)

	var startMsg *durable.StartOrchestration
	var canMsg *durable.ContinueAsNew
	for _, m := range item.Messages {
		switch w := m.(type) {
		case durable.StartOrchestration:
			if startMsg == nil {
				startMsg = &w
			}
		case durable.ContinueAsNew:
			if canMsg == nil {
				canMsg = &w
			}
		}
	}

	var requestedVersion string
	switch {
	case len(hist) == 0:
		if startMsg == nil {
			return e.none("instance has not started"), nil
		}
		e.newExec = true
		e.started = history.OrchestrationStarted{
			Name: startMsg.Orchestration, Input: startMsg.Input,
			ParentInstance: startMsg.ParentInstance, ParentExecutionID: startMsg.ParentExecutionID, ParentID: startMsg.ParentID,
			TraceParent: startMsg.TraceParent,
		}
		if e.started.TraceParent == "" {
			e.started.TraceParent = e.in.TraceParent
		}
		requestedVersion = startMsg.Version
	case hist[len(hist)-1].IsTerminal():
		if _, ok := hist[len(hist)-1].Kind.(history.OrchestrationContinuedAsNew); !ok || canMsg == nil {
			return e.none("execution is terminal"), nil
		}
		e.newExec = true
		e.execID++
		hist = nil
		e.started = history.OrchestrationStarted{
			Name: canMsg.Orchestration, Input: canMsg.Input,
			CarryForwardEvents:  canMsg.CarryForwardEvents,
			InitialCustomStatus: canMsg.InitialCustomStatus,
		}
		// Keep the parent link and the trace across executions.
		if st, ok := item.History[0].Kind.(history.OrchestrationStarted); ok {
			e.started.ParentInstance, e.started.ParentExecutionID, e.started.ParentID = st.ParentInstance, st.ParentExecutionID, st.ParentID
			e.started.TraceParent = st.TraceParent
		}
		if e.started.TraceParent == "" {
			e.started.TraceParent = e.in.TraceParent
		}
		requestedVersion = canMsg.Version
	default:
		st, ok := hist[0].Kind.(history.OrchestrationStarted)
		if !ok {
			e.events = append(e.events, hist...)
			e.persisted = len(hist)
			e.nextID = hist[len(hist)-1].EventID + 1
			d := nondeterminism(item.OrchestrationName, "corrupted history: the first event is %s, not OrchestrationStarted", hist[0].Kind.KindName())
			return e.finish(OutcomeFailed, "", &d), nil
		}
		e.started = st
	}
	if e.newExec {
		// This turn stamps OrchestrationStarted with this runtime's version.
		e.rules = rulesFor(e.rv)
	} else {
		e.rules = rulesFor(hist[0].RuntimeVersion)
	}
	e.turn.ExecutionID = e.execID

	// Resolve the code.
	var fn OrchestratorFunc
	var ok bool
	version := e.started.Version
	if e.newExec {
		fn, version, ok = e.in.Resolver.ResolveOrchestration(e.started.Name, requestedVersion)
		if !ok {
			version = requestedVersion
		}
		e.started.Version = version
	} else {
		fn, _, ok = e.in.Resolver.ResolveOrchestration(e.started.Name, e.started.Version)
		if !ok {
			return Result{Outcome: OutcomeAbandon, Turn: durable.OrchestrationTurn{ExecutionID: e.execID},
				Reason: fmt.Sprintf("orchestration %s version %s is not registered on this node", e.started.Name, e.started.Version)}, nil
		}
	}

	// Working history.
	e.events = append(e.events, hist...)
	e.persisted = len(hist)
	if len(hist) > 0 {
		e.nextID = hist[len(hist)-1].EventID + 1
	} else {
		e.nextID = 1
	}
	for _, ev := range hist {
		e.noteRecorded(ev)
	}
	if e.newExec {
		e.appendNew(0, e.started)
		e.turn.Metadata = durable.ExecutionMetadata{
			Status:               durable.StatusRunning,
			OrchestrationName:    e.started.Name,
			OrchestrationVersion: version,
			ParentInstanceID:     e.started.ParentInstance,
		}
		pv := e.in.RuntimeVersion
		e.turn.Metadata.PinnedVersion = &pv
		if !ok {
			d := history.ConfigurationError(history.ConfigUnregistered, orchResource(e.started.Name, requestedVersion),
				fmt.Sprintf("orchestration %s is not registered", orchResource(e.started.Name, requestedVersion)))
			e.convertMessages()
			return e.finish(OutcomeFailed, "", &d), nil
		}
	}

	e.convertMessages()
	if e.abortErr != nil {
		return e.finish(OutcomeFailed, "", e.abortErr), nil
	}
	return e.execute(goctx, fn, version)
}

func orchResource(name, version string) string {
	if version == "" {
		return name
	}
	return name + "@" + version
}

func nondeterminism(resource, format string, args ...any) history.ErrorDetails {
	return history.ConfigurationError(history.ConfigNondeterminism, resource, fmt.Sprintf(format, args...))
}

// none is a turn with nothing to run.
func (e *engine) none(reason string) Result {
	e.log.Debug("turn has nothing to run", zap.String("reason", reason))
	return Result{Outcome: OutcomeNone, Reason: reason, Turn: durable.OrchestrationTurn{ExecutionID: e.execID}}
}

// noteRecorded tracks completions and cancellations present in history.
func (e *engine) noteRecorded(ev history.Event) {
	switch ev.Kind.(type) {
	case history.ActivityCompleted, history.ActivityFailed, history.TimerFired,
		history.SubOrchestrationCompleted, history.SubOrchestrationFailed:
		e.completed[ev.SourceEventID] = true
	case history.ActivityCancelRequested, history.SubOrchestrationCancelRequested,
		history.ExternalSubscribedCancelled, history.QueueSubscriptionCancelled:
		e.cancelRecorded[ev.SourceEventID] = true
	case history.OrchestrationCancelRequested:
		r := ev.Kind.(history.OrchestrationCancelRequested).Reason
		e.cancelReq = &r
	}
}

// appendNew appends a new event to the working history.
func (e *engine) appendNew(source uint64, kind history.EventKind) history.Event {
	ev := history.Event{
		EventID: e.nextID, SourceEventID: source, InstanceID: e.item.Instance, ExecutionID: e.execID,
		TimestampMS: e.nowMS, RuntimeVersion: e.rv, Kind: kind,
	}
	e.nextID++
	e.events = append(e.events, ev)
	return ev
}

// scheduleKind returns the kind of the event with id in the working history.
func (e *engine) scheduleKind(id uint64) history.EventKind {
	for i := range e.events {
		if e.events[i].EventID == id {
			return e.events[i].Kind
		}
	}
	return nil
}

// convertMessages turns the fetched messages into new history events,
// dropping duplicates and messages of other executions.
func (e *engine) convertMessages() {
	cancelSeen := e.cancelReq != nil
	for _, m := range e.item.Messages {
		switch w := m.(type) {
		case durable.ActivityCompleted:
			if e.acceptCompletion(w.ExecutionID, w.ID, "activity", isActivitySchedule) {
				e.appendNew(w.ID, history.ActivityCompleted{Result: w.Result})
			}
		case durable.ActivityFailed:
			if e.acceptCompletion(w.ExecutionID, w.ID, "activity", isActivitySchedule) {
				e.appendNew(w.ID, history.ActivityFailed{Details: w.Details})
				if w.Details.Category != history.CategoryApplication && e.abortErr == nil {
					d := w.Details
					e.abortErr = &d
				}
			}
		case durable.TimerFired:
			if e.acceptCompletion(w.ExecutionID, w.ID, "timer", isTimerSchedule) {
				e.appendNew(w.ID, history.TimerFired{FireAtMS: w.FireAtMS})
			}
		case durable.SubOrchCompleted:
			if e.acceptSubCompletion(w.ParentExecutionID, w.ParentID) {
				e.appendNew(w.ParentID, history.SubOrchestrationCompleted{Result: w.Result})
			}
		case durable.SubOrchFailed:
			if e.acceptSubCompletion(w.ParentExecutionID, w.ParentID) {
				e.appendNew(w.ParentID, history.SubOrchestrationFailed{Details: w.Details})
			}
		case durable.ExternalRaised:
			e.appendNew(0, history.ExternalEvent{Name: w.Name, Data: w.Data})
		case durable.QueueMessage:
			e.appendNew(0, history.QueueEventDelivered{Name: w.Name, Data: w.Data})
		case durable.CancelInstance:
			if !cancelSeen {
				cancelSeen = true
				e.appendNew(0, history.OrchestrationCancelRequested{Reason: w.Reason})
			}
		case durable.StartOrchestration, durable.ContinueAsNew:
			// The first one started this execution; others are duplicates.
		default:
			e.log.Warn("ignoring unexpected message on the orchestrator queue", zap.String("kind", m.Kind()))
		}
	}
}

func isActivitySchedule(k history.EventKind) bool {
	_, ok := k.(history.ActivityScheduled)
	return ok
}

func isTimerSchedule(k history.EventKind) bool {
	_, ok := k.(history.TimerCreated)
	return ok
}

// acceptCompletion filters an activity or timer completion: other
// executions and duplicates are dropped; a completion whose id is not a
// matching schedule is nondeterminism.
func (e *engine) acceptCompletion(execID, id uint64, what string, isSchedule func(history.EventKind) bool) bool {
	if execID != e.execID {
		e.log.Debug("dropping completion of another execution", zap.Uint64("execution_id", execID), zap.Uint64("id", id))
		return false
	}
	if e.completed[id] {
		e.log.Debug("dropping duplicate completion", zap.Uint64("id", id))
		return false
	}
	k := e.scheduleKind(id)
	if k == nil || !isSchedule(k) {
		if e.abortErr == nil {
			got := "nothing"
			if k != nil {
				got = k.KindName()
			}
			d := nondeterminism(e.started.Name, "%s completion for event %d, which is %s", what, id, got)
			e.abortErr = &d
		}
		return false
	}
	e.completed[id] = true
	return true
}

// acceptSubCompletion filters a child's completion. A completion names the
// parent execution that scheduled the child (ParentExecutionID), so a late
// child of an earlier execution (one that continued as new) is dropped: its
// ParentID would otherwise match an unrelated schedule of this execution.
// Completions of children started before ParentExecutionID existed carry the
// parent's execution as the dispatcher looked it up when the child
// completed; 0 (not filled in) is accepted. Mismatches are dropped, not
// failures.
func (e *engine) acceptSubCompletion(execID, id uint64) bool {
	if execID != 0 && execID != e.execID {
		e.log.Debug("dropping sub-orchestration completion of another execution",
			zap.Uint64("parent_execution_id", execID), zap.Uint64("id", id))
		return false
	}
	if e.completed[id] {
		return false
	}
	if _, ok := e.scheduleKind(id).(history.SubOrchestrationScheduled); !ok {
		e.log.Warn("dropping sub-orchestration completion without a matching schedule", zap.Uint64("id", id))
		return false
	}
	e.completed[id] = true
	return true
}

// ---------------------------------------------------------------------------
// Running the code
// ---------------------------------------------------------------------------

func (e *engine) execute(goctx context.Context, fn OrchestratorFunc, version string) (Result, error) {
	kv := make(map[string]durable.KVEntry, len(e.item.KVSnapshot))
	maps.Copy(kv, e.item.KVSnapshot)
	c := &Context{
		instance: e.item.Instance, name: e.started.Name, version: version, executionID: e.execID,
		input: e.started.Input, parentInstance: e.started.ParentInstance, parentID: e.started.ParentID,
		kv: kv, tasks: map[uint64]*Task{}, extSubs: map[string][]*Task{}, queueSubs: map[string][]*Task{},
		toEngine: make(chan signal), fromEngine: make(chan bool), abandoned: make(chan struct{}),
	}
	base := e.in.Logger
	if base == nil {
		base = zap.NewNop()
	}
	c.logger = zap.New(replayCore{Core: base.Core(), c: c}).With(
		zap.String("instance", c.instance), zap.String("orchestration", c.name), zap.Uint64("execution_id", c.executionID))
	e.c = c
	if e.started.InitialCustomStatus != nil {
		s := *e.started.InitialCustomStatus
		c.customStatus = &s
	}
	for _, q := range e.started.CarryForwardEvents {
		c.mailbox = append(c.mailbox, &queuedArrival{name: q.Name, data: q.Data})
	}

	// The first event is OrchestrationStarted; the code starts after it.
	c.nowMS = e.events[0].TimestampMS
	c.replaying = e.persisted >= 1
	e.cursor = 1
	e.running = true
	go c.body(fn)
	if err := e.wait(goctx); err != nil {
		return Result{}, err
	}

	var failure *history.ErrorDetails
loop:
	for e.cancelReq == nil || e.cursor <= e.persisted {
		if e.fnDone && e.fnSignal.kind == sigPanicked {
			break
		}
		if e.cursor == len(e.events) {
			if len(c.pending) == 0 {
				break
			}
			e.materialize(c.pending[0])
		}
		ev := e.events[e.cursor]
		e.cursor++
		c.replaying = e.cursor <= e.persisted
		c.nowMS = ev.TimestampMS
		if d := e.apply(ev); d != nil {
			failure = d
			break loop
		}
		if e.cancelReq != nil && e.cursor > e.persisted {
			break
		}
		if e.running && c.waiting != nil && c.waiting() {
			c.waiting = nil
			c.fromEngine <- true
			if err := e.wait(goctx); err != nil {
				return Result{}, err
			}
		}
	}
	c.replaying = false
	awaiting := e.awaiting()
	e.unwind()

	switch {
	case failure != nil:
		return e.finish(OutcomeFailed, "", failure), nil
	case e.fnDone && e.fnSignal.kind == sigPanicked:
		d := history.ApplicationError(history.AppPanicked, e.fnSignal.panic, false)
		return e.finish(OutcomeFailed, "", &d), nil
	case e.cancelReq != nil:
		d := history.CancelledError(*e.cancelReq)
		return e.finish(OutcomeFailed, "", &d), nil
	case c.can != nil:
		return e.finish(OutcomeContinuedAsNew, c.can.input, nil), nil
	case e.fnDone && e.fnSignal.kind == sigDone:
		if err := e.fnSignal.err; err != nil {
			d := failureFromError(err)
			return e.finish(OutcomeFailed, "", &d), nil
		}
		return e.finish(OutcomeCompleted, e.fnSignal.output, nil), nil
	}
	res := e.finish(OutcomeContinue, "", nil)
	res.Turn.AwaitingActivities = awaiting
	return res, nil
}

// awaiting is the turn's dispatch hint
// (durable.OrchestrationTurn.AwaitingActivities): when the orchestration
// is blocked at the end of the turn, the scheduling ids of the
// outstanding activities of which it needs every one before it can go on.
// It tests the blocking condition with outstanding activities assumed
// complete: if all of them do not unblock it, it waits for something else
// too (nil); an activity is needed when all the others do not. None
// needed (a Select: any one will do) is nil as well.
func (e *engine) awaiting() []uint64 {
	c := e.c
	if !e.running || c.waiting == nil {
		return nil
	}
	var open []*Task
	for _, t := range c.tasks {
		if t.kind == taskActivity && t.eventID != 0 && !t.ready() {
			open = append(open, t)
		}
	}
	if len(open) == 0 {
		return nil
	}
	unblockedWithout := func(skip *Task) bool {
		for _, t := range open {
			t.assumed = t != skip
		}
		ok := c.waiting()
		for _, t := range open {
			t.assumed = false
		}
		return ok
	}
	if !unblockedWithout(nil) {
		return nil
	}
	var need []uint64
	for _, t := range open {
		if !unblockedWithout(t) {
			need = append(need, t.eventID)
		}
	}
	slices.Sort(need)
	return need
}

// failureFromError maps an error returned by orchestration code.
func failureFromError(err error) history.ErrorDetails {
	var d history.ErrorDetails
	if errors.As(err, &d) && d.Category != history.CategoryApplication && d.Validate() == nil {
		return d
	}
	return history.ApplicationError(history.AppOrchestrationFailed, err.Error(), false)
}

// body runs the orchestration function on its goroutine.
func (c *Context) body(fn OrchestratorFunc) {
	var sig signal
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(unwind); ok {
				sig = signal{kind: sigUnwound}
			} else {
				sig = signal{kind: sigPanicked, panic: fmt.Sprintf("%v\n%s", r, debug.Stack())}
			}
		}
		select {
		case c.toEngine <- sig:
		case <-c.abandoned:
		}
	}()
	out, err := fn(c, c.input)
	sig = signal{kind: sigDone, output: out, err: err}
}

// wait receives the goroutine's next signal.
func (e *engine) wait(goctx context.Context) error {
	select {
	case s := <-e.c.toEngine:
		switch s.kind {
		case sigBlocked:
		default:
			e.fnDone, e.fnSignal, e.running = true, s, false
		}
		return nil
	case <-goctx.Done():
		close(e.c.abandoned)
		e.running = false
		return fmt.Errorf("%w: %w", ErrAbandoned, goctx.Err())
	}
}

// unwind ends a goroutine still waiting at the end of the turn.
func (e *engine) unwind() {
	for e.running {
		e.c.waiting = nil
		e.c.fromEngine <- false
		s := <-e.c.toEngine
		if s.kind != sigBlocked {
			e.running = false
		}
	}
}

// apply processes one event of the working history.
func (e *engine) apply(ev history.Event) *history.ErrorDetails {
	c := e.c
	switch k := ev.Kind.(type) {
	case history.OrchestrationStarted:
		d := nondeterminism(c.name, "event %d: OrchestrationStarted in the middle of the history", ev.EventID)
		return &d
	case history.ActivityScheduled, history.TimerCreated, history.ExternalSubscribed, history.QueueSubscribed,
		history.SubOrchestrationScheduled, history.OrchestrationChained, history.KeyValueSet,
		history.KeyValueCleared, history.KeyValuesCleared, history.CustomStatusUpdated:
		if len(c.pending) == 0 {
			d := nondeterminism(c.name, "history has %s (event %d) but the orchestration did not schedule it", k.KindName(), ev.EventID)
			return &d
		}
		a := c.pending[0]
		c.pending = c.pending[1:]
		if why := matches(a, ev, c.instance); why != "" {
			d := nondeterminism(c.name, "history has %s (event %d) but the orchestration scheduled %s: %s", k.KindName(), ev.EventID, a.describe(), why)
			return &d
		}
		e.bind(a, ev)
	case history.ActivityCompleted:
		return e.complete(ev, taskActivity, k.Result, nil)
	case history.ActivityFailed:
		return e.complete(ev, taskActivity, "", &k.Details)
	case history.TimerFired:
		return e.complete(ev, taskTimer, "", nil)
	case history.SubOrchestrationCompleted:
		return e.complete(ev, taskSubOrchestration, k.Result, nil)
	case history.SubOrchestrationFailed:
		return e.complete(ev, taskSubOrchestration, "", &k.Details)
	case history.ExternalEvent:
		for _, t := range c.extSubs[k.Name] {
			if !t.filled && !t.cancelled {
				t.filled = true
				e.finishTask(t, k.Data, nil)
				return nil
			}
		}
		e.log.Debug("external event has no waiting subscription; dropped", zap.String("name", k.Name))
	case history.QueueEventDelivered:
		c.mailbox = append(c.mailbox, &queuedArrival{name: k.Name, data: k.Data})
		e.matchQueue(k.Name)
	case history.ActivityCancelRequested, history.SubOrchestrationCancelRequested,
		history.ExternalSubscribedCancelled, history.QueueSubscriptionCancelled:
		// Recorded effects of an earlier Select; the in-memory state already
		// reflects them (the Select ran again during replay).
	case history.OrchestrationCancelRequested:
		r := k.Reason
		e.cancelReq = &r
	case history.OrchestrationCompleted, history.OrchestrationFailed, history.OrchestrationContinuedAsNew:
		d := nondeterminism(c.name, "event %d: terminal event in a running execution", ev.EventID)
		return &d
	}
	return nil
}

// complete delivers a completion event to its task.
func (e *engine) complete(ev history.Event, want taskKind, result string, failure *history.ErrorDetails) *history.ErrorDetails {
	t := e.c.tasks[ev.SourceEventID]
	if t == nil {
		d := nondeterminism(e.c.name, "%s (event %d) completes event %d, which the orchestration did not schedule", ev.Kind.KindName(), ev.EventID, ev.SourceEventID)
		return &d
	}
	if t.kind != want {
		d := nondeterminism(e.c.name, "%s (event %d) completes a %s", ev.Kind.KindName(), ev.EventID, t.kind)
		return &d
	}
	if t.done {
		return nil
	}
	var f *history.ErrorDetails
	if failure != nil {
		d := *failure
		f = &d
	}
	e.finishTask(t, result, f)
	return nil
}

func (e *engine) finishTask(t *Task, result string, failure *history.ErrorDetails) {
	e.c.completionSeq++
	t.done, t.seq, t.result, t.failure = true, e.c.completionSeq, result, failure
}

// matchQueue pairs waiting dequeues with mailbox arrivals of name, FIFO.
// Under the current rules a dequeue that lost a Select is skipped; under
// the earlier ones (rulesFor) it still takes the arrival its position pairs
// it with, which is thereby lost to the orchestration.
func (e *engine) matchQueue(name string) {
	c := e.c
	for _, t := range c.queueSubs[name] {
		if t.filled || (t.cancelled && e.rules.dequeueLosersSkipArrivals) {
			continue
		}
		var arrival *queuedArrival
		for _, q := range c.mailbox {
			if !q.consumed && q.name == name {
				arrival = q
				break
			}
		}
		if arrival == nil {
			return
		}
		arrival.consumed = true
		t.filled = true
		if t.cancelled {
			// Swallowed by a loser: the task stays cancelled, not done.
			continue
		}
		e.finishTask(t, arrival.data, nil)
	}
}

// bind attaches a matched schedule event to the action's task.
func (e *engine) bind(a *action, ev history.Event) {
	c := e.c
	t := a.task
	if t == nil {
		return
	}
	t.eventID = ev.EventID
	c.tasks[ev.EventID] = t
	switch k := ev.Kind.(type) {
	case history.TimerCreated:
		t.fireAtMS = k.FireAtMS
	case history.SubOrchestrationScheduled:
		t.instance = k.Instance
	case history.ExternalSubscribed:
		c.extSubs[k.Name] = append(c.extSubs[k.Name], t)
	case history.QueueSubscribed:
		c.queueSubs[k.Name] = append(c.queueSubs[k.Name], t)
		e.matchQueue(k.Name)
	}
}

// autoChildID is the instance id of an auto-named child scheduled by event
// id of execution execID: "<parent>::sub::<id>" (or "::detached::") in the
// first execution, "<parent>::exec<execID>::sub::<id>" in later ones, so a
// child of an execution that continued as new never shares its id with a
// child of the next execution (event ids restart at 1 in every execution).
func autoChildID(parent string, execID, id uint64, detached bool) string {
	kind := "sub"
	if detached {
		kind = "detached"
	}
	if execID <= 1 {
		return fmt.Sprintf("%s::%s::%d", parent, kind, id)
	}
	return fmt.Sprintf("%s::exec%d::%s::%d", parent, execID, kind, id)
}

// autoChildMatches reports whether recorded is the auto id of the child
// scheduled by ev: the current form, or the first-execution form that
// histories written before execution-qualified ids used in every execution.
func autoChildMatches(recorded, parent string, ev history.Event, detached bool) (bool, string) {
	want := autoChildID(parent, ev.ExecutionID, ev.EventID, detached)
	return recorded == want || recorded == autoChildID(parent, 1, ev.EventID, detached), want
}

// matches reports why an emitted action does not match a history event ("" if it does).
func matches(a *action, ev history.Event, instance string) string {
	diff := func(what, want, got string) string {
		return fmt.Sprintf("%s %q in history, %q now", what, want, got)
	}
	switch k := ev.Kind.(type) {
	case history.ActivityScheduled:
		if a.kind != actActivity {
			return "different kind"
		}
		t := a.task
		switch {
		case k.Name != t.name:
			return diff("name", k.Name, t.name)
		case k.Input != t.input:
			return diff("input", k.Input, t.input)
		case k.SessionID != t.sessionID:
			return diff("session", k.SessionID, t.sessionID)
		case k.Tag != t.tag:
			return diff("tag", k.Tag, t.tag)
		}
	case history.TimerCreated:
		if a.kind != actTimer {
			return "different kind"
		}
	case history.ExternalSubscribed:
		if a.kind != actExternal {
			return "different kind"
		}
		if k.Name != a.task.name {
			return diff("event name", k.Name, a.task.name)
		}
	case history.QueueSubscribed:
		if a.kind != actQueue {
			return "different kind"
		}
		if k.Name != a.task.name {
			return diff("queue name", k.Name, a.task.name)
		}
	case history.SubOrchestrationScheduled:
		if a.kind != actSubOrch {
			return "different kind"
		}
		t := a.task
		want := t.instance
		if t.autoID {
			if ok, w := autoChildMatches(k.Instance, instance, ev, false); ok {
				want = k.Instance
			} else {
				want = w
			}
		}
		switch {
		case k.Name != t.name:
			return diff("name", k.Name, t.name)
		case k.Instance != want:
			return diff("child instance", k.Instance, want)
		case k.Input != t.input:
			return diff("input", k.Input, t.input)
		case k.Version != t.version:
			return diff("version", k.Version, t.version)
		}
	case history.OrchestrationChained:
		if a.kind != actChained {
			return "different kind"
		}
		want := a.instance
		if want == "" {
			if ok, w := autoChildMatches(k.Instance, instance, ev, true); ok {
				want = k.Instance
			} else {
				want = w
			}
		}
		switch {
		case k.Name != a.name:
			return diff("name", k.Name, a.name)
		case k.Instance != want:
			return diff("instance", k.Instance, want)
		case k.Input != a.input:
			return diff("input", k.Input, a.input)
		case k.Version != a.version:
			return diff("version", k.Version, a.version)
		}
	case history.KeyValueSet:
		if a.kind != actKVSet {
			return "different kind"
		}
		if k.Key != a.key || k.Value != a.value {
			return diff("key=value", k.Key+"="+k.Value, a.key+"="+a.value)
		}
	case history.KeyValueCleared:
		if a.kind != actKVClear {
			return "different kind"
		}
		if k.Key != a.key {
			return diff("key", k.Key, a.key)
		}
	case history.KeyValuesCleared:
		if a.kind != actKVClearAll {
			return "different kind"
		}
	case history.CustomStatusUpdated:
		if a.kind != actCustomStatus {
			return "different kind"
		}
		if (k.Status == nil) != (a.status == nil) || (k.Status != nil && *k.Status != *a.status) {
			return "different custom status"
		}
	default:
		return "not a scheduling event"
	}
	return ""
}

// materialize turns the oldest unmatched action into a new event (and its
// work item); the main loop then processes the event like history.
func (e *engine) materialize(a *action) {
	id := e.nextID
	inst := e.item.Instance
	var kind history.EventKind
	switch a.kind {
	case actActivity:
		t := a.task
		kind = history.ActivityScheduled{Name: t.name, Input: t.input, SessionID: t.sessionID, Tag: t.tag}
		e.turn.WorkerItems = append(e.turn.WorkerItems, durable.ActivityExecute{
			Instance: inst, ExecutionID: e.execID, ID: id, Name: t.name, Input: t.input, SessionID: t.sessionID, Tag: t.tag,
		})
	case actTimer:
		kind = history.TimerCreated{FireAtMS: a.task.fireAtMS}
		e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.TimerFired{
			Instance: inst, ExecutionID: e.execID, ID: id, FireAtMS: a.task.fireAtMS,
		})
	case actExternal:
		kind = history.ExternalSubscribed{Name: a.task.name}
	case actQueue:
		kind = history.QueueSubscribed{Name: a.task.name}
	case actSubOrch:
		t := a.task
		child := t.instance
		if t.autoID {
			child = autoChildID(inst, e.execID, id, false)
		}
		kind = history.SubOrchestrationScheduled{Name: t.name, Instance: child, Input: t.input, Version: t.version}
		e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.StartOrchestration{
			Instance: child, Orchestration: t.name, Input: t.input, Version: t.version,
			ParentInstance: inst, ParentExecutionID: e.execID, ParentID: id, ExecutionID: 1,
		})
	case actChained:
		child := a.instance
		if child == "" {
			child = autoChildID(inst, e.execID, id, true)
		}
		kind = history.OrchestrationChained{Name: a.name, Instance: child, Input: a.input, Version: a.version}
		e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.StartOrchestration{
			Instance: child, Orchestration: a.name, Input: a.input, Version: a.version, ExecutionID: 1,
		})
	case actKVSet:
		kind = history.KeyValueSet{Key: a.key, Value: a.value, LastUpdatedAtMS: a.atMS}
	case actKVClear:
		kind = history.KeyValueCleared{Key: a.key}
	case actKVClearAll:
		kind = history.KeyValuesCleared{}
	case actCustomStatus:
		kind = history.CustomStatusUpdated{Status: a.status}
	}
	e.appendNew(0, kind)
}

// finish records the outcome and builds the result.
func (e *engine) finish(outcome Outcome, output string, failure *history.ErrorDetails) Result {
	inst := e.item.Instance
	res := Result{Outcome: outcome, Output: output, Failure: failure}

	// Cancellations of Select losers.
	if e.c != nil {
		for _, t := range e.c.cancelledTasks {
			if t.eventID == 0 || e.cancelRecorded[t.eventID] || t.done {
				continue
			}
			e.cancelRecorded[t.eventID] = true
			switch t.kind {
			case taskActivity:
				e.appendNew(t.eventID, history.ActivityCancelRequested{Reason: "select loser"})
				e.turn.CancelledActivities = append(e.turn.CancelledActivities, durable.ScheduledActivityIdentifier{
					Instance: inst, ExecutionID: e.execID, ActivityID: t.eventID})
			case taskSubOrchestration:
				e.appendNew(t.eventID, history.SubOrchestrationCancelRequested{Reason: "select loser"})
				e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.CancelInstance{Instance: t.instance, Reason: "parent select loser"})
			case taskExternal:
				e.appendNew(t.eventID, history.ExternalSubscribedCancelled{Reason: "select loser"})
			case taskQueue:
				e.appendNew(t.eventID, history.QueueSubscriptionCancelled{Reason: "select loser"})
			}
		}
	}

	switch outcome {
	case OutcomeCompleted:
		e.appendNew(0, history.OrchestrationCompleted{Output: output})
		e.turn.Metadata.Status = durable.StatusCompleted
		e.turn.Metadata.Output = &output
		if e.started.ParentInstance != "" {
			e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.SubOrchCompleted{
				ParentInstance: e.started.ParentInstance, ParentExecutionID: e.started.ParentExecutionID,
				ParentID: e.started.ParentID, Result: output})
		}
		e.cancelOutstanding(false, "")
	case OutcomeFailed:
		e.appendNew(0, history.OrchestrationFailed{Details: *failure})
		msg := failure.DisplayMessage()
		e.turn.Metadata.Status = durable.StatusFailed
		e.turn.Metadata.Output = &msg
		if e.started.ParentInstance != "" {
			e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.SubOrchFailed{
				ParentInstance: e.started.ParentInstance, ParentExecutionID: e.started.ParentExecutionID,
				ParentID: e.started.ParentID, Details: *failure})
		}
		e.cancelOutstanding(true, msg)
	case OutcomeContinuedAsNew:
		can := e.c.can
		e.appendNew(0, history.OrchestrationContinuedAsNew{Input: can.input, Version: can.version})
		e.turn.Metadata.Status = durable.StatusContinuedAsNew
		e.turn.Metadata.Output = &can.input
		var carry []history.QueuedEvent
		for _, q := range e.c.mailbox {
			if !q.consumed {
				carry = append(carry, history.QueuedEvent{Name: q.name, Data: q.data})
			}
		}
		var cs *string
		if e.c.customStatus != nil {
			s := *e.c.customStatus
			cs = &s
		}
		e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.ContinueAsNew{
			Instance: inst, Orchestration: e.started.Name, Input: can.input, Version: can.version,
			CarryForwardEvents: carry, InitialCustomStatus: cs,
		})
		e.cancelOutstanding(false, "")
	}
	e.turn.ExecutionID = e.execID
	e.turn.HistoryDelta = append([]history.Event(nil), e.events[e.persisted:]...)
	res.Turn = e.turn
	return res
}

// cancelOutstanding cancels the activities still in flight when the
// execution ends and, with children, requests cancellation of running
// sub-orchestrations.
func (e *engine) cancelOutstanding(children bool, reason string) {
	scheduled := map[uint64]history.EventKind{}
	for _, ev := range e.events {
		switch ev.Kind.(type) {
		case history.ActivityScheduled, history.SubOrchestrationScheduled:
			scheduled[ev.EventID] = ev.Kind
		}
	}
	for _, ev := range e.events {
		k, ok := scheduled[ev.EventID]
		if !ok || e.completed[ev.EventID] || e.cancelRecorded[ev.EventID] {
			continue
		}
		if e.c != nil {
			if t := e.c.tasks[ev.EventID]; t != nil && t.done {
				continue
			}
		}
		switch k := k.(type) {
		case history.ActivityScheduled:
			e.turn.CancelledActivities = append(e.turn.CancelledActivities, durable.ScheduledActivityIdentifier{
				Instance: e.item.Instance, ExecutionID: e.execID, ActivityID: ev.EventID})
		case history.SubOrchestrationScheduled:
			if children {
				e.turn.OrchestratorItems = append(e.turn.OrchestratorItems, durable.CancelInstance{
					Instance: k.Instance, Reason: "parent ended: " + reason})
			}
		}
	}
}
