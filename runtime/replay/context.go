package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// SystemActivityGetKV is the reserved activity name under which
// Context.ReadKVFromInstance reads another instance's key-value store; the
// worker dispatcher implements it with Provider.GetKVValue.
const SystemActivityGetKV = "__durafeed:get_kv_value"

// KVReadRequest is the input of the SystemActivityGetKV activity.
type KVReadRequest struct {
	Instance string `json:"instance"`
	Key      string `json:"key"`
}

// KVReadResponse is the result of the SystemActivityGetKV activity.
type KVReadResponse struct {
	Found bool   `json:"found"`
	Value string `json:"value,omitempty"`
}

// ErrContinuedAsNew is returned by ContinueAsNew; the orchestration should
// return it (it may be wrapped) so that the execution ends there.
var ErrContinuedAsNew = errors.New("orchestration continued as new")

// guidNamespace seeds deterministic GUIDs.
var guidNamespace = uuid.MustParse("6f1f3b52-8a0e-4f7c-9a57-0b0c3c0ad0fe")

// actionKind is what an emitted action records.
type actionKind int

const (
	actActivity actionKind = iota + 1
	actTimer
	actExternal
	actQueue
	actSubOrch
	actChained
	actKVSet
	actKVClear
	actKVClearAll
	actCustomStatus
)

// action is something the code did that history must record, in order.
type action struct {
	kind actionKind
	task *Task // for task-backed actions
	// Detached start, KV and custom-status fields.
	name, instance, input, version string
	key, value                     string
	status                         *string
	atMS                           uint64
}

func (a *action) describe() string {
	switch a.kind {
	case actActivity:
		return fmt.Sprintf("activity %q", a.task.name)
	case actTimer:
		return "timer"
	case actExternal:
		return fmt.Sprintf("wait for external event %q", a.task.name)
	case actQueue:
		return fmt.Sprintf("dequeue of queued event %q", a.task.name)
	case actSubOrch:
		return fmt.Sprintf("sub-orchestration %q", a.task.name)
	case actChained:
		return fmt.Sprintf("detached orchestration %q (instance %q)", a.name, a.instance)
	case actKVSet:
		return fmt.Sprintf("key-value set of %q", a.key)
	case actKVClear:
		return fmt.Sprintf("key-value clear of %q", a.key)
	case actKVClearAll:
		return "key-value clear-all"
	case actCustomStatus:
		return "custom status update"
	}
	return "action"
}

// queuedArrival is one persistent event in the instance mailbox.
type queuedArrival struct {
	name, data string
	consumed   bool
}

// Context is the orchestration's view of its durable execution. Every
// method is deterministic under replay. A Context is used by exactly one
// goroutine, the one running the orchestration function; it must not be
// retained after the function returns.
type Context struct {
	// Identity.
	instance       string
	name           string
	version        string
	executionID    uint64
	input          string
	parentInstance string
	parentID       uint64

	// Deterministic state.
	nowMS        uint64
	replaying    bool
	guidCounter  uint64
	kv           map[string]durable.KVEntry
	customStatus *string
	logger       *zap.Logger

	// Engine bookkeeping.
	pending        []*action
	tasks          map[uint64]*Task
	extSubs        map[string][]*Task
	queueSubs      map[string][]*Task
	mailbox        []*queuedArrival
	completionSeq  uint64
	cancelledTasks []*Task
	can            *continueAsNew

	// Goroutine hand-off.
	toEngine   chan signal
	fromEngine chan bool
	abandoned  chan struct{}
	waiting    func() bool
	aborted    bool
}

type continueAsNew struct {
	input, version string
}

// signalKind is what the orchestration goroutine reports to the engine.
type signalKind int

const (
	sigBlocked signalKind = iota + 1
	sigDone
	sigPanicked
	sigUnwound
)

type signal struct {
	kind   signalKind
	output string
	err    error
	panic  string
}

// unwind is the private panic value that ends a waiting goroutine.
type unwind struct{}

// ---------------------------------------------------------------------------
// Identity and deterministic values
// ---------------------------------------------------------------------------

// InstanceID is the orchestration instance id.
func (c *Context) InstanceID() string { return c.instance }

// ExecutionID is the current execution (1, then +1 per continue-as-new).
func (c *Context) ExecutionID() uint64 { return c.executionID }

// OrchestrationName is the running orchestration's registered name.
func (c *Context) OrchestrationName() string { return c.name }

// OrchestrationVersion is the running orchestration's resolved version.
func (c *Context) OrchestrationVersion() string { return c.version }

// ParentInstanceID is the parent's instance id for a sub-orchestration, "" otherwise.
func (c *Context) ParentInstanceID() string { return c.parentInstance }

// IsReplaying reports whether the code is re-executing a part of the
// history that was already recorded (side effects should be skipped).
func (c *Context) IsReplaying() bool { return c.replaying }

// Now returns the deterministic current time: the timestamp of the history
// event that the orchestration most recently observed. It is the same on
// every replay.
func (c *Context) Now() time.Time { return time.UnixMilli(int64(c.nowMS)).UTC() }

// NewGUID returns a deterministic UUID: the same sequence of values on
// every replay of the execution.
func (c *Context) NewGUID() uuid.UUID {
	c.guard()
	c.guidCounter++
	return uuid.NewSHA1(guidNamespace, fmt.Appendf(nil, "%s\x00%d\x00%d", c.instance, c.executionID, c.guidCounter))
}

// Logger returns a logger that discards output while the orchestration is
// replaying, so every line is written once.
func (c *Context) Logger() *zap.Logger { return c.logger }

// replayCore drops log entries while the context is replaying.
type replayCore struct {
	zapcore.Core
	c *Context
}

func (r replayCore) Enabled(l zapcore.Level) bool { return !r.c.replaying && r.Core.Enabled(l) }

func (r replayCore) With(f []zapcore.Field) zapcore.Core {
	return replayCore{Core: r.Core.With(f), c: r.c}
}

func (r replayCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if r.c.replaying {
		return ce
	}
	return r.Core.Check(e, ce)
}

// ---------------------------------------------------------------------------
// Scheduling
// ---------------------------------------------------------------------------

// ActivityOption configures CallActivity.
type ActivityOption func(*activityOptions)

type activityOptions struct {
	sessionID string
	tag       string
	retry     *RetryPolicy
}

// WithSession routes the activity to the worker that owns session id.
func WithSession(id string) ActivityOption { return func(o *activityOptions) { o.sessionID = id } }

// WithTag routes the activity to workers that accept tag.
func WithTag(tag string) ActivityOption { return func(o *activityOptions) { o.tag = tag } }

// WithRetry retries the activity on application failures according to p.
func WithRetry(p RetryPolicy) ActivityOption {
	return func(o *activityOptions) { o.retry = &p }
}

// CallActivity schedules activity name with input encoded as JSON.
func (c *Context) CallActivity(name string, input any, opts ...ActivityOption) *Task {
	raw, err := encodeInput(input)
	if err != nil {
		return c.failedTask(taskActivity, err)
	}
	return c.CallActivityRaw(name, raw, opts...)
}

// CallActivityRaw schedules activity name with a raw (already serialized)
// input. With WithRetry the returned task runs the retries when awaited; it
// can be awaited or joined but not selected.
func (c *Context) CallActivityRaw(name, input string, opts ...ActivityOption) *Task {
	c.guard()
	var o activityOptions
	for _, f := range opts {
		f(&o)
	}
	first := c.scheduleActivity(name, input, o)
	if o.retry == nil {
		return first
	}
	return &Task{c: c, kind: taskRetry, name: name, retry: &retryState{policy: *o.retry, opts: o, first: first, name: name, input: input}}
}

func (c *Context) scheduleActivity(name, input string, o activityOptions) *Task {
	t := &Task{c: c, kind: taskActivity, name: name, input: input, sessionID: o.sessionID, tag: o.tag}
	c.emit(&action{kind: actActivity, task: t})
	return t
}

// CreateTimer schedules a durable timer that fires after d (from Now).
func (c *Context) CreateTimer(d time.Duration) *Task {
	c.guard()
	d = max(d, 0)
	t := &Task{c: c, kind: taskTimer, fireAtMS: c.nowMS + uint64(d.Milliseconds())}
	c.emit(&action{kind: actTimer, task: t})
	return t
}

// WaitForEvent subscribes to the next external event raised with name
// (Client.RaiseEvent). Matching is positional: the n-th active subscription
// for a name receives the n-th event raised after it was recorded; an event
// raised while no subscription is waiting is dropped (use DequeueEvent for
// buffering).
func (c *Context) WaitForEvent(name string) *Task {
	c.guard()
	t := &Task{c: c, kind: taskExternal, name: name}
	c.emit(&action{kind: actExternal, task: t})
	return t
}

// DequeueEvent takes the oldest unconsumed persistent event named name from
// the instance's mailbox (Client.EnqueueEvent), waiting for one if none is
// there. Unconsumed events survive continue-as-new.
func (c *Context) DequeueEvent(name string) *Task {
	c.guard()
	t := &Task{c: c, kind: taskQueue, name: name}
	c.emit(&action{kind: actQueue, task: t})
	return t
}

// SubOrchestrationOption configures CallSubOrchestration and StartOrchestration.
type SubOrchestrationOption func(*subOptions)

type subOptions struct {
	instance string
	version  string
}

// WithInstanceID gives the child an explicit instance id (default:
// "<parent>::sub::<eventId>" for sub-orchestrations of the first execution,
// "<parent>::exec<executionId>::sub::<eventId>" after a continue-as-new).
func WithInstanceID(id string) SubOrchestrationOption {
	return func(o *subOptions) { o.instance = id }
}

// WithChildVersion requests an exact version of the child (default: the
// latest registered).
func WithChildVersion(v string) SubOrchestrationOption {
	return func(o *subOptions) { o.version = v }
}

// CallSubOrchestration starts child orchestration name with input encoded
// as JSON and returns a task that completes with the child's output.
func (c *Context) CallSubOrchestration(name string, input any, opts ...SubOrchestrationOption) *Task {
	raw, err := encodeInput(input)
	if err != nil {
		return c.failedTask(taskSubOrchestration, err)
	}
	return c.CallSubOrchestrationRaw(name, raw, opts...)
}

// CallSubOrchestrationRaw is CallSubOrchestration with a raw input.
func (c *Context) CallSubOrchestrationRaw(name, input string, opts ...SubOrchestrationOption) *Task {
	c.guard()
	var o subOptions
	for _, f := range opts {
		f(&o)
	}
	t := &Task{c: c, kind: taskSubOrchestration, name: name, input: input, version: o.version, instance: o.instance, autoID: o.instance == ""}
	c.emit(&action{kind: actSubOrch, task: t})
	return t
}

// StartOrchestration starts a detached (fire-and-forget) orchestration
// with input encoded as JSON; it has no parent and its outcome is not
// reported back. Without WithInstanceID its instance id is
// "<parent>::detached::<eventId>" ("<parent>::exec<executionId>::detached::<eventId>"
// after a continue-as-new), so callers that need the id should pass one.
func (c *Context) StartOrchestration(name string, input any, opts ...SubOrchestrationOption) error {
	raw, err := encodeInput(input)
	if err != nil {
		return err
	}
	c.StartOrchestrationRaw(name, raw, opts...)
	return nil
}

// StartOrchestrationRaw is StartOrchestration with a raw input.
func (c *Context) StartOrchestrationRaw(name, input string, opts ...SubOrchestrationOption) {
	c.guard()
	var o subOptions
	for _, f := range opts {
		f(&o)
	}
	c.emit(&action{kind: actChained, name: name, instance: o.instance, input: input, version: o.version})
}

// ContinueAsNewOption configures ContinueAsNew.
type ContinueAsNewOption func(*continueAsNew)

// WithNextVersion runs the next execution on version v (default: the
// latest registered).
func WithNextVersion(v string) ContinueAsNewOption {
	return func(o *continueAsNew) { o.version = v }
}

// ContinueAsNew ends the execution and starts the next one with input
// encoded as JSON; unconsumed queued events and the custom status carry
// over. It returns ErrContinuedAsNew, which the orchestration should return.
func (c *Context) ContinueAsNew(input any, opts ...ContinueAsNewOption) error {
	raw, err := encodeInput(input)
	if err != nil {
		return err
	}
	return c.ContinueAsNewRaw(raw, opts...)
}

// ContinueAsNewRaw is ContinueAsNew with a raw input.
func (c *Context) ContinueAsNewRaw(input string, opts ...ContinueAsNewOption) error {
	c.guard()
	can := &continueAsNew{input: input}
	for _, f := range opts {
		f(can)
	}
	c.can = can
	return ErrContinuedAsNew
}

// ---------------------------------------------------------------------------
// Composition
// ---------------------------------------------------------------------------

// Select waits until at least one of tasks completes and returns the index
// of the winner: the task whose completion comes first in the history.
// Every other task that is not complete is cancelled: activities by lock
// stealing, sub-orchestrations with a cancellation request, event waits
// and dequeues by withdrawing the subscription; timers are left to fire
// unobserved. Retried activities (WithRetry) cannot be selected.
func (c *Context) Select(tasks ...*Task) (int, error) {
	c.guard()
	if len(tasks) == 0 {
		return -1, errors.New("select needs at least one task")
	}
	for i, t := range tasks {
		if t == nil {
			return -1, fmt.Errorf("select: task %d is nil", i)
		}
		if t.kind == taskRetry {
			return -1, fmt.Errorf("select: task %d is an activity with retry, which cannot be selected", i)
		}
	}
	c.block(func() bool {
		for _, t := range tasks {
			if t.ready() {
				return true
			}
		}
		return false
	})
	winner := -1
	for i, t := range tasks {
		if !t.ready() {
			continue
		}
		if winner < 0 || better(t, tasks[winner]) {
			winner = i
		}
	}
	for i, t := range tasks {
		if i != winner && !t.ready() {
			c.cancelTask(t)
		}
	}
	return winner, nil
}

// better orders ready tasks for Select: completed before cancelled, then by
// completion order.
func better(a, b *Task) bool {
	ad, bd := a.done && !a.cancelled, b.done && !b.cancelled
	if ad != bd {
		return ad
	}
	return a.seq < b.seq
}

// Join waits until every task is complete and returns the error of the
// first failed task in argument order (nil if all succeeded). Results are
// read with each task's Await.
func (c *Context) Join(tasks ...*Task) error {
	c.guard()
	var simple []*Task
	for _, t := range tasks {
		if t != nil && t.kind != taskRetry {
			simple = append(simple, t)
		}
	}
	c.block(func() bool {
		for _, t := range simple {
			if !t.ready() {
				return false
			}
		}
		return true
	})
	var first error
	for _, t := range tasks {
		if t == nil {
			continue
		}
		if _, err := t.AwaitRaw(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ---------------------------------------------------------------------------
// Custom status and key-value store
// ---------------------------------------------------------------------------

// SetCustomStatus sets the instance's custom status, visible to clients
// when the turn commits.
func (c *Context) SetCustomStatus(status string) {
	c.guard()
	s := status
	c.customStatus = &s
	c.emit(&action{kind: actCustomStatus, status: &s})
}

// ResetCustomStatus clears the instance's custom status.
func (c *Context) ResetCustomStatus() {
	c.guard()
	c.customStatus = nil
	c.emit(&action{kind: actCustomStatus})
}

// CustomStatus returns the current custom status and whether one is set.
func (c *Context) CustomStatus() (string, bool) {
	if c.customStatus == nil {
		return "", false
	}
	return *c.customStatus, true
}

// GetKV returns the value of key in the instance's key-value store as the
// orchestration sees it at this point.
func (c *Context) GetKV(key string) (string, bool) {
	e, ok := c.kv[key]
	return e.Value, ok
}

// GetKVAll returns a copy of the instance's key-value store.
func (c *Context) GetKVAll() map[string]string {
	out := make(map[string]string, len(c.kv))
	for k, e := range c.kv {
		out[k] = e.Value
	}
	return out
}

// KVKeys returns the store's keys, sorted.
func (c *Context) KVKeys() []string {
	keys := make([]string, 0, len(c.kv))
	for k := range c.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// SetKV writes key in the instance's key-value store.
func (c *Context) SetKV(key, value string) {
	c.guard()
	c.kv[key] = durable.KVEntry{Value: value, LastUpdatedAtMS: c.nowMS}
	c.emit(&action{kind: actKVSet, key: key, value: value, atMS: c.nowMS})
}

// ClearKV removes key from the instance's key-value store.
func (c *Context) ClearKV(key string) {
	c.guard()
	delete(c.kv, key)
	c.emit(&action{kind: actKVClear, key: key})
}

// ClearAllKV removes every key of the instance's key-value store.
func (c *Context) ClearAllKV() {
	c.guard()
	clear(c.kv)
	c.emit(&action{kind: actKVClearAll})
}

// ReadKVFromInstance reads key from another instance's key-value store (as
// Provider.GetKVValue sees it) through a system activity, so the value is
// recorded and replays identically.
func (c *Context) ReadKVFromInstance(instance, key string) (string, bool, error) {
	in, _ := json.Marshal(KVReadRequest{Instance: instance, Key: key})
	raw, err := c.CallActivityRaw(SystemActivityGetKV, string(in)).AwaitRaw()
	if err != nil {
		return "", false, err
	}
	var resp KVReadResponse
	if err := json.Unmarshal([]byte(raw), &resp); err != nil {
		return "", false, history.ConfigurationError(history.ConfigBadInput, SystemActivityGetKV, err.Error())
	}
	return resp.Value, resp.Found, nil
}

// ---------------------------------------------------------------------------
// Internals used by the API
// ---------------------------------------------------------------------------

func encodeInput(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", history.ConfigurationError(history.ConfigBadInput, fmt.Sprintf("%T", v), "cannot encode input: "+err.Error())
	}
	return string(b), nil
}

// failedTask is a task that failed before being scheduled (bad input).
func (c *Context) failedTask(kind taskKind, err error) *Task {
	d, ok := err.(history.ErrorDetails)
	if !ok {
		d = history.ApplicationError(history.AppOrchestrationFailed, err.Error(), false)
	}
	return &Task{c: c, kind: kind, done: true, failure: &d}
}

// emit records an action for the engine to match or materialize.
func (c *Context) emit(a *action) { c.pending = append(c.pending, a) }

// cancelTask withdraws a task that lost a Select.
func (c *Context) cancelTask(t *Task) {
	if t.cancelled || t.done {
		return
	}
	t.cancelled = true
	c.cancelledTasks = append(c.cancelledTasks, t)
}

// guard stops code that keeps running after the engine unwound it.
func (c *Context) guard() {
	if c.aborted {
		panic(unwind{})
	}
}

// block parks the orchestration goroutine until cond holds. It must only
// be called from the orchestration goroutine.
func (c *Context) block(cond func() bool) {
	c.guard()
	if cond() {
		return
	}
	c.waiting = cond
	select {
	case c.toEngine <- signal{kind: sigBlocked}:
	case <-c.abandoned:
		c.aborted = true
		panic(unwind{})
	}
	select {
	case ok := <-c.fromEngine:
		if !ok {
			c.aborted = true
			panic(unwind{})
		}
	case <-c.abandoned:
		c.aborted = true
		panic(unwind{})
	}
}
