package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// ErrNoAdmin is returned by management calls when the provider has no
// ProviderAdmin capability.
var ErrNoAdmin = errors.New("provider has no management capability")

// State is an orchestration instance's lifecycle state as a client sees it.
type State string

// Instance states.
const (
	StateNotFound  State = "NotFound"
	StateRunning   State = "Running"
	StateCompleted State = "Completed"
	StateFailed    State = "Failed"
)

// IsTerminal reports whether the instance has finished.
func (s State) IsTerminal() bool { return s == StateCompleted || s == StateFailed }

// Status is an instance's status derived from its current execution.
type Status struct {
	Instance    string
	State       State
	Name        string
	Version     string
	ExecutionID uint64
	// Output is the result when Completed.
	Output string
	// Failure describes the failure when Failed.
	Failure *ErrorDetails
}

// DecodeOutput decodes a completed instance's JSON output into out.
func (s Status) DecodeOutput(out any) error { return decodePayload(s.Output, out) }

// ClientOptions configures a Client.
type ClientOptions struct {
	// PollInitial is the first delay between status polls (default 5 ms);
	// it doubles up to PollMax (default 500 ms).
	PollInitial time.Duration
	PollMax     time.Duration
}

// Client starts and controls orchestration instances and reads their
// status through a durable.Provider. It is safe for concurrent use.
type Client struct {
	p    durable.Provider
	opts ClientOptions
}

// NewClient returns a client with default options.
func NewClient(p durable.Provider) *Client { return NewClientWithOptions(p, ClientOptions{}) }

// NewClientWithOptions returns a client.
func NewClientWithOptions(p durable.Provider, o ClientOptions) *Client {
	if o.PollInitial <= 0 {
		o.PollInitial = 5 * time.Millisecond
	}
	if o.PollMax <= 0 {
		o.PollMax = 500 * time.Millisecond
	}
	return &Client{p: p, opts: o}
}

// Provider returns the client's provider.
func (c *Client) Provider() durable.Provider { return c.p }

// CallOption configures a client call that enqueues work: a start, a
// raised or enqueued event, a cancellation.
type CallOption func(*callOptions)

// StartOption is the CallOption of StartOrchestration (kept for callers
// that name it).
type StartOption = CallOption

type callOptions struct {
	version   string
	requestID string
}

func applyCall(opts []CallOption) callOptions {
	o := callOptionsOf(opts)
	if o.requestID == "" {
		o.requestID = uuid.NewString()
	}
	return o
}

// callOptionsOf applies opts, leaving the request id empty when none is
// given.
func callOptionsOf(opts []CallOption) callOptions {
	var o callOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// checkCall asks the provider what it recorded of item's request id
// (durable.RequestChecker): RequestUnknown without one, or when the
// provider does not record calls.
func (c *Client) checkCall(ctx context.Context, item durable.WorkItem) (durable.RequestState, error) {
	rc, ok := c.p.(durable.RequestChecker)
	if !ok || durable.RequestIDOf(item) == "" {
		return durable.RequestUnknown, nil
	}
	return rc.CheckRequest(ctx, item)
}

// StartRecorded reports, writing nothing, whether the start these
// arguments describe, with the request id opts name (WithRequestID), has
// taken effect already (durable.RequestSame), another call used that id
// on the instance (durable.RequestDifferent), or neither is recorded
// (durable.RequestUnknown: no request id, a provider that does not
// record calls, or a record past its retention). A caller repeating a
// start uses it to answer as the first start did, whatever the instance
// has done since.
func (c *Client) StartRecorded(ctx context.Context, instance, name, input string, opts ...CallOption) (durable.RequestState, error) {
	return c.checkCall(ctx, startItem(ctx, instance, name, input, callOptionsOf(opts)))
}

// EventRecorded is StartRecorded for RaiseEventRaw.
func (c *Client) EventRecorded(ctx context.Context, instance, name, data string, opts ...CallOption) (durable.RequestState, error) {
	return c.checkCall(ctx, raiseItem(instance, name, data, callOptionsOf(opts)))
}

// CancelRecorded is StartRecorded for CancelInstance.
func (c *Client) CancelRecorded(ctx context.Context, instance, reason string, opts ...CallOption) (durable.RequestState, error) {
	return c.checkCall(ctx, cancelItem(instance, reason, callOptionsOf(opts)))
}

func startItem(ctx context.Context, instance, name, input string, o callOptions) durable.StartOrchestration {
	return durable.StartOrchestration{Instance: instance, Orchestration: name, Input: input, ExecutionID: 1,
		Version: o.version, RequestID: o.requestID, TraceParent: traceParent(ctx)}
}

func raiseItem(instance, name, data string, o callOptions) durable.ExternalRaised {
	return durable.ExternalRaised{Instance: instance, Name: name, Data: data, RequestID: o.requestID}
}

func cancelItem(instance, reason string, o callOptions) durable.CancelInstance {
	return durable.CancelInstance{Instance: instance, Reason: reason, RequestID: o.requestID}
}

// WithStartVersion starts an exact version (default: the latest registered
// on the runtime that runs the first turn). Calls other than a start
// ignore it.
func WithStartVersion(v string) CallOption {
	return func(o *callOptions) { o.version = v }
}

// WithRequestID names the call (at most durable.MaxRequestIDBytes bytes of
// UTF-8). The provider records each call's request id for a retention
// period (24 h by default) and a call whose request id it has recorded for
// the same instance takes effect at most once: repeating the call with the
// same id and arguments (for example after a timeout whose outcome is
// unknown) returns nil without a second start, event or cancellation, and
// the same id with other arguments is a permanent error. Without it every
// call gets a fresh id, so the provider's own resends are still made safe
// but a caller's repeat is a new call.
func WithRequestID(id string) CallOption {
	return func(o *callOptions) { o.requestID = id }
}

// StartOrchestration starts instance running orchestration name with input
// encoded as JSON. Starting an instance that already exists is a no-op: the
// runtime ignores the second start.
func (c *Client) StartOrchestration(ctx context.Context, instance, name string, input any, opts ...CallOption) error {
	b, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("encode input: %w", err)
	}
	return c.StartOrchestrationRaw(ctx, instance, name, string(b), opts...)
}

// StartOrchestrationRaw is StartOrchestration with a raw input.
func (c *Client) StartOrchestrationRaw(ctx context.Context, instance, name, input string, opts ...CallOption) error {
	if instance == "" || name == "" {
		return errors.New("start orchestration: empty instance id or name")
	}
	return c.p.EnqueueForOrchestrator(ctx, startItem(ctx, instance, name, input, applyCall(opts)), 0)
}

// RaiseEvent raises external event name with data encoded as JSON.
func (c *Client) RaiseEvent(ctx context.Context, instance, name string, data any, opts ...CallOption) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return c.RaiseEventRaw(ctx, instance, name, string(b), opts...)
}

// RaiseEventRaw raises an external event with raw data. It is delivered to
// a waiting subscription or dropped (see OrchestrationContext.WaitForEvent).
func (c *Client) RaiseEventRaw(ctx context.Context, instance, name, data string, opts ...CallOption) error {
	return c.p.EnqueueForOrchestrator(ctx, raiseItem(instance, name, data, applyCall(opts)), 0)
}

// RaiseEventIfRunning is RaiseEventRaw on the condition that the
// instance runs, checked by the write itself where the provider can
// (durable.RunningEnqueuer: in event-driven mode, while a local fetch
// waits, the write also locks the event's turn for it). Raised false
// means that nothing was written and nothing is known of the instance:
// the caller reads its state and calls RaiseEventRaw.
func (c *Client) RaiseEventIfRunning(ctx context.Context, instance, name, data string, opts ...CallOption) (raised bool, err error) {
	return c.enqueueIfRunning(ctx, raiseItem(instance, name, data, applyCall(opts)))
}

// CancelIfRunning is CancelInstance on the condition that the instance
// runs, as RaiseEventIfRunning is for RaiseEventRaw.
func (c *Client) CancelIfRunning(ctx context.Context, instance, reason string, opts ...CallOption) (cancelled bool, err error) {
	return c.enqueueIfRunning(ctx, cancelItem(instance, reason, applyCall(opts)))
}

// enqueueIfRunning enqueues item if the provider can tell in the write
// that its instance runs.
func (c *Client) enqueueIfRunning(ctx context.Context, item durable.WorkItem) (bool, error) {
	re, ok := c.p.(durable.RunningEnqueuer)
	if !ok || item.TargetInstance() == "" {
		return false, nil
	}
	return re.EnqueueIfRunning(ctx, item)
}

// EnqueueEvent adds a persistent event, encoded as JSON, to the instance's
// mailbox (see OrchestrationContext.DequeueEvent). Events for an instance
// that has not started are dropped.
func (c *Client) EnqueueEvent(ctx context.Context, instance, name string, data any, opts ...CallOption) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return c.EnqueueEventRaw(ctx, instance, name, string(b), opts...)
}

// EnqueueEventRaw is EnqueueEvent with raw data.
func (c *Client) EnqueueEventRaw(ctx context.Context, instance, name, data string, opts ...CallOption) error {
	o := applyCall(opts)
	return c.p.EnqueueForOrchestrator(ctx, durable.QueueMessage{Instance: instance, Name: name, Data: data,
		RequestID: o.requestID}, 0)
}

// CancelInstance requests cancellation: the orchestration fails with a
// cancelled error and its running sub-orchestrations are cancelled too.
func (c *Client) CancelInstance(ctx context.Context, instance, reason string, opts ...CallOption) error {
	return c.p.EnqueueForOrchestrator(ctx, cancelItem(instance, reason, applyCall(opts)), 0)
}

// GetStatus returns the instance's status from its current execution.
func (c *Client) GetStatus(ctx context.Context, instance string) (Status, error) {
	events, err := c.p.Read(ctx, instance)
	if err != nil {
		return Status{}, err
	}
	return statusFromHistory(instance, events), nil
}

func statusFromHistory(instance string, events []history.Event) Status {
	st := Status{Instance: instance, State: StateNotFound}
	if len(events) == 0 {
		return st
	}
	st.State = StateRunning
	st.ExecutionID = events[0].ExecutionID
	if s, ok := events[0].Kind.(history.OrchestrationStarted); ok {
		st.Name, st.Version = s.Name, s.Version
	}
	switch k := events[len(events)-1].Kind.(type) {
	case history.OrchestrationCompleted:
		st.State, st.Output = StateCompleted, k.Output
	case history.OrchestrationFailed:
		d := k.Details
		st.State, st.Failure = StateFailed, &d
	}
	return st
}

// WaitForOrchestration returns the instance's status once it is
// Completed or Failed, or ctx's error when ctx ends first. It reads the
// status, then again whenever the provider says the instance may have
// changed (durable.InstanceWatcher: the Cosmos DB provider tells a
// runtime's own client of the turns its replica commits) and, as the
// safety net for changes the provider does not report, after a delay that
// doubles from PollInitial to PollMax.
//
// The status is made from the history, which grows with the
// orchestration. With the admin capability, a check first reads the
// instance record (ProviderAdmin.GetInstanceInfo; one point read on the
// Cosmos DB provider, whose record changes in the same commit as the
// history, and never after it) and reads the history only when the
// record says the instance no longer runs, or is unknown; once every
// PollMax the history is read anyway.
func (c *Client) WaitForOrchestration(ctx context.Context, instance string) (Status, error) {
	admin, _ := c.p.Admin()
	var st Status
	err := c.waitFor(ctx, instance, func(slow bool) (bool, error) {
		if admin != nil && !slow {
			if info, err := admin.GetInstanceInfo(ctx, instance); err == nil && info.Status == durable.StatusRunning {
				return false, nil
			}
		}
		var err error
		st, err = c.GetStatus(ctx, instance)
		return err == nil && st.State.IsTerminal(), err
	})
	return st, err
}

// GetCustomStatus returns the instance's custom status if it changed after
// lastSeenVersion (nil otherwise).
func (c *Client) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*durable.CustomStatus, error) {
	return c.p.GetCustomStatus(ctx, instance, lastSeenVersion)
}

// WaitForCustomStatus returns the instance's custom status once it changed
// after lastSeenVersion, or ctx's error when ctx ends first. It reads as
// WaitForOrchestration does: on the provider's notifications and on a
// doubling delay.
func (c *Client) WaitForCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*durable.CustomStatus, error) {
	var cs *durable.CustomStatus
	err := c.waitFor(ctx, instance, func(bool) (bool, error) {
		var err error
		cs, err = c.p.GetCustomStatus(ctx, instance, lastSeenVersion)
		return err == nil && cs != nil, err
	})
	return cs, err
}

// waitFor calls check until it reports done or fails permanently: at
// once, then on every notification of the instance's watch (when the
// provider offers one) and after a delay doubling from PollInitial to
// PollMax. A retryable failure is retried on the same schedule. It
// returns ctx's error when ctx ends first. check's argument is true when
// the call is due to a delay of PollMax ending.
func (c *Client) waitFor(ctx context.Context, instance string, check func(slow bool) (bool, error)) error {
	var changed <-chan struct{}
	if w, ok := c.p.(durable.InstanceWatcher); ok {
		// Watch before the first read, so a change between the two is
		// not missed; without a watch the delays still find it.
		if watch, err := w.WatchInstance(ctx, instance); err == nil {
			defer watch.Close()
			changed = watch.Changed()
		}
	}
	delay := c.opts.PollInitial
	slow := false
	for {
		done, err := check(slow)
		if err != nil && !durable.IsRetryable(err) {
			return err
		}
		if done {
			return nil
		}
		t := time.NewTimer(delay)
		slow = false
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-changed:
		case <-t.C:
			slow = delay >= c.opts.PollMax
			delay = min(delay*2, c.opts.PollMax)
		}
		t.Stop()
	}
}

// GetKVValue reads one key of an instance's key-value store.
func (c *Client) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	return c.p.GetKVValue(ctx, instance, key)
}

// GetKVAllValues reads an instance's whole key-value store.
func (c *Client) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	return c.p.GetKVAllValues(ctx, instance)
}

// ReadHistory returns the current execution's history.
func (c *Client) ReadHistory(ctx context.Context, instance string) ([]history.Event, error) {
	return c.p.Read(ctx, instance)
}

// ReadExecutionHistory returns one execution's history.
func (c *Client) ReadExecutionHistory(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
	return c.p.ReadWithExecution(ctx, instance, executionID)
}

func (c *Client) admin() (durable.ProviderAdmin, error) {
	a, ok := c.p.Admin()
	if !ok {
		return nil, ErrNoAdmin
	}
	return a, nil
}

// ListInstances returns every instance id.
func (c *Client) ListInstances(ctx context.Context) ([]string, error) {
	a, err := c.admin()
	if err != nil {
		return nil, err
	}
	return a.ListInstances(ctx)
}

// ListInstancesByStatus returns the ids of instances with the given status.
func (c *Client) ListInstancesByStatus(ctx context.Context, status durable.Status) ([]string, error) {
	a, err := c.admin()
	if err != nil {
		return nil, err
	}
	return a.ListInstancesByStatus(ctx, status)
}

// ListExecutions returns an instance's execution ids, ascending.
func (c *Client) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	a, err := c.admin()
	if err != nil {
		return nil, err
	}
	return a.ListExecutions(ctx, instance)
}

// GetInstanceInfo describes an instance.
func (c *Client) GetInstanceInfo(ctx context.Context, instance string) (durable.InstanceInfo, error) {
	a, err := c.admin()
	if err != nil {
		return durable.InstanceInfo{}, err
	}
	return a.GetInstanceInfo(ctx, instance)
}

// GetExecutionInfo describes one execution.
func (c *Client) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (durable.ExecutionInfo, error) {
	a, err := c.admin()
	if err != nil {
		return durable.ExecutionInfo{}, err
	}
	return a.GetExecutionInfo(ctx, instance, executionID)
}

// GetSystemMetrics counts instances, executions and events.
func (c *Client) GetSystemMetrics(ctx context.Context) (durable.SystemMetrics, error) {
	a, err := c.admin()
	if err != nil {
		return durable.SystemMetrics{}, err
	}
	return a.GetSystemMetrics(ctx)
}

// GetQueueDepths counts visible queue messages.
func (c *Client) GetQueueDepths(ctx context.Context) (durable.QueueDepths, error) {
	a, err := c.admin()
	if err != nil {
		return durable.QueueDepths{}, err
	}
	return a.GetQueueDepths(ctx)
}

// DeleteInstance deletes a root instance and its descendants (force also
// deletes running ones).
func (c *Client) DeleteInstance(ctx context.Context, instance string, force bool) (durable.DeleteInstanceResult, error) {
	a, err := c.admin()
	if err != nil {
		return durable.DeleteInstanceResult{}, err
	}
	return a.DeleteInstance(ctx, instance, force)
}

// DeleteInstanceBulk deletes terminal root instances matching filter.
func (c *Client) DeleteInstanceBulk(ctx context.Context, filter durable.InstanceFilter) (durable.DeleteInstanceResult, error) {
	a, err := c.admin()
	if err != nil {
		return durable.DeleteInstanceResult{}, err
	}
	return a.DeleteInstanceBulk(ctx, filter)
}

// PruneExecutions deletes old executions of an instance (never the current one).
func (c *Client) PruneExecutions(ctx context.Context, instance string, options durable.PruneOptions) (durable.PruneResult, error) {
	a, err := c.admin()
	if err != nil {
		return durable.PruneResult{}, err
	}
	return a.PruneExecutions(ctx, instance, options)
}

// PruneExecutionsBulk prunes every instance matching filter.
func (c *Client) PruneExecutionsBulk(ctx context.Context, filter durable.InstanceFilter, options durable.PruneOptions) (durable.PruneResult, error) {
	a, err := c.admin()
	if err != nil {
		return durable.PruneResult{}, err
	}
	return a.PruneExecutionsBulk(ctx, filter, options)
}
