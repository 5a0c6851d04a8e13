package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/runtime/replay"
)

// OrchestrationContext is the orchestration's handle on its durable
// execution; see replay.Context for the full method set.
type OrchestrationContext = replay.Context

// Task is a durable operation started by an OrchestrationContext.
type Task = replay.Task

// RetryPolicy retries an activity on application failures with durable
// timers between attempts.
type RetryPolicy = replay.RetryPolicy

// Backoff spaces retry attempts.
type Backoff = replay.Backoff

// ActivityOption configures OrchestrationContext.CallActivity.
type ActivityOption = replay.ActivityOption

// SubOrchestrationOption configures sub-orchestration and detached starts.
type SubOrchestrationOption = replay.SubOrchestrationOption

// ContinueAsNewOption configures OrchestrationContext.ContinueAsNew.
type ContinueAsNewOption = replay.ContinueAsNewOption

// ErrorDetails is the structured failure of an activity, sub-orchestration
// or orchestration; Task.Await returns it for failures.
type ErrorDetails = history.ErrorDetails

// Backoff kinds.
const (
	BackoffNone        = replay.BackoffNone
	BackoffFixed       = replay.BackoffFixed
	BackoffLinear      = replay.BackoffLinear
	BackoffExponential = replay.BackoffExponential
)

// Sentinel errors of the orchestration API.
var (
	// ErrCancelled matches the error of a task that lost a Select.
	ErrCancelled = replay.ErrCancelled
	// ErrTimeout matches the error of an activity whose RetryPolicy.Timeout elapsed.
	ErrTimeout = replay.ErrTimeout
	// ErrContinuedAsNew is what OrchestrationContext.ContinueAsNew returns.
	ErrContinuedAsNew = replay.ErrContinuedAsNew
)

// WithSession routes an activity to the worker that owns session id.
func WithSession(id string) ActivityOption { return replay.WithSession(id) }

// WithTag routes an activity to workers whose tag filter accepts tag.
func WithTag(tag string) ActivityOption { return replay.WithTag(tag) }

// WithRetry retries an activity on application failures according to p.
func WithRetry(p RetryPolicy) ActivityOption { return replay.WithRetry(p) }

// WithInstanceID gives a sub-orchestration or detached orchestration an
// explicit instance id.
func WithInstanceID(id string) SubOrchestrationOption { return replay.WithInstanceID(id) }

// WithChildVersion requests an exact version of a sub-orchestration or
// detached orchestration.
func WithChildVersion(v string) SubOrchestrationOption { return replay.WithChildVersion(v) }

// WithNextVersion runs the next execution of a continue-as-new on version v.
func WithNextVersion(v string) ContinueAsNewOption { return replay.WithNextVersion(v) }

// DefaultBackoff is exponential from 100 ms, doubling, capped at 30 s.
func DefaultBackoff() Backoff { return replay.DefaultBackoff() }

// AwaitAs waits for t and decodes its JSON result as T.
func AwaitAs[T any](t *Task) (T, error) {
	var out T
	err := t.Await(&out)
	return out, err
}

// JoinAs waits until every task is complete (OrchestrationContext.Join)
// and decodes their results as T, in the tasks' order. Its error is the
// first failed task's in argument order, or the first result that does
// not decode.
func JoinAs[T any](ctx *OrchestrationContext, tasks ...*Task) ([]T, error) {
	if err := ctx.Join(tasks...); err != nil {
		return nil, err
	}
	out := make([]T, len(tasks))
	for i, t := range tasks {
		if err := t.Await(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// GetKVAs decodes the JSON value of key from the orchestration's key-value
// store; ok is false when the key is absent.
func GetKVAs[T any](ctx *OrchestrationContext, key string) (v T, ok bool, err error) {
	raw, ok := ctx.GetKV(key)
	if !ok {
		return v, false, nil
	}
	if err := decodePayload(raw, &v); err != nil {
		return v, true, err
	}
	return v, true, nil
}

// SetKVAs writes value encoded as JSON under key.
func SetKVAs[T any](ctx *OrchestrationContext, key string, value T) error {
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	ctx.SetKV(key, string(b))
	return nil
}

// DefaultVersion is the version of orchestrations registered without WithVersion.
const DefaultVersion = "1.0.0"

// ActivityFunc is an activity in raw form. Returning a history.ErrorDetails
// of a non-application category records it as is; any other error becomes
// an application failure with the error's message.
type ActivityFunc func(ctx context.Context, input string) (string, error)

// RegisterOption configures a registration.
type RegisterOption func(*registerOptions)

type registerOptions struct{ version string }

// WithVersion registers an orchestration under a semantic version
// ("major.minor.patch"); the default is DefaultVersion.
func WithVersion(v string) RegisterOption { return func(o *registerOptions) { o.version = v } }

// Registry holds orchestration and activity code by name (and, for
// orchestrations, by version). It is safe for concurrent use; registering
// while a Runtime runs is allowed.
type Registry struct {
	mu    sync.RWMutex
	orchs map[string]map[string]orchEntry
	acts  map[string]ActivityFunc
}

type orchEntry struct {
	version durable.SemVer
	fn      replay.OrchestratorFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{orchs: map[string]map[string]orchEntry{}, acts: map[string]ActivityFunc{}}
}

// AddOrchestration registers raw orchestration code. It fails for an empty
// name, an invalid version, or a name and version already registered.
func (r *Registry) AddOrchestration(name string, fn replay.OrchestratorFunc, opts ...RegisterOption) error {
	o := registerOptions{version: DefaultVersion}
	for _, f := range opts {
		f(&o)
	}
	if name == "" || fn == nil {
		return fmt.Errorf("register orchestration: empty name or nil function")
	}
	v, err := durable.ParseSemVer(o.version)
	if err != nil {
		return fmt.Errorf("register orchestration %s: %w", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.orchs[name] == nil {
		r.orchs[name] = map[string]orchEntry{}
	}
	if _, dup := r.orchs[name][v.String()]; dup {
		return fmt.Errorf("register orchestration %s: version %s already registered", name, v)
	}
	r.orchs[name][v.String()] = orchEntry{version: v, fn: fn}
	return nil
}

// AddActivity registers raw activity code. It fails for an empty name, a
// reserved name, or a name already registered.
func (r *Registry) AddActivity(name string, fn ActivityFunc) error {
	if name == "" || fn == nil {
		return fmt.Errorf("register activity: empty name or nil function")
	}
	if name == replay.SystemActivityGetKV {
		return fmt.Errorf("register activity: %s is reserved", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.acts[name]; dup {
		return fmt.Errorf("register activity %s: already registered", name)
	}
	r.acts[name] = fn
	return nil
}

// ResolveOrchestration implements replay.Resolver: an empty version
// selects the highest registered semantic version.
func (r *Registry) ResolveOrchestration(name, version string) (replay.OrchestratorFunc, string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	vs := r.orchs[name]
	if version != "" {
		v, err := durable.ParseSemVer(version)
		if err != nil {
			return nil, "", false
		}
		e, ok := vs[v.String()]
		return e.fn, v.String(), ok
	}
	var best *orchEntry
	for _, e := range vs {
		if best == nil || e.version.Compare(best.version) > 0 {
			e := e
			best = &e
		}
	}
	if best == nil {
		return nil, "", false
	}
	return best.fn, best.version.String(), true
}

// activity returns the activity registered under name.
func (r *Registry) activity(name string) (ActivityFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn, ok := r.acts[name]
	return fn, ok
}

// RegisterOrchestration registers typed orchestration code: the input is
// decoded from JSON into In (an undecodable input fails the orchestration
// with a bad_input configuration error) and the output encoded as JSON.
// It panics on a registration error (see Registry.AddOrchestration).
func RegisterOrchestration[In, Out any](r *Registry, name string, fn func(ctx *OrchestrationContext, in In) (Out, error), opts ...RegisterOption) {
	raw := func(ctx *OrchestrationContext, input string) (string, error) {
		var in In
		if err := decodePayload(input, &in); err != nil {
			return "", history.ConfigurationError(history.ConfigBadInput, name, "cannot decode orchestration input: "+err.Error())
		}
		out, err := fn(ctx, in)
		if err != nil {
			return "", err
		}
		return encodePayload(name, out)
	}
	if err := r.AddOrchestration(name, raw, opts...); err != nil {
		panic(err)
	}
}

// RegisterOrchestrationRaw registers orchestration code that works on raw
// (serialized) input and output. It panics on a registration error.
func RegisterOrchestrationRaw(r *Registry, name string, fn func(ctx *OrchestrationContext, input string) (string, error), opts ...RegisterOption) {
	if err := r.AddOrchestration(name, fn, opts...); err != nil {
		panic(err)
	}
}

// RegisterActivity registers typed activity code: the input is decoded from
// JSON into In (an undecodable input fails the activity with a bad_input
// configuration error) and the output encoded as JSON. It panics on a
// registration error.
func RegisterActivity[In, Out any](r *Registry, name string, fn func(ctx context.Context, in In) (Out, error)) {
	raw := func(ctx context.Context, input string) (string, error) {
		var in In
		if err := decodePayload(input, &in); err != nil {
			return "", history.ConfigurationError(history.ConfigBadInput, name, "cannot decode activity input: "+err.Error())
		}
		out, err := fn(ctx, in)
		if err != nil {
			return "", err
		}
		return encodePayload(name, out)
	}
	if err := r.AddActivity(name, raw); err != nil {
		panic(err)
	}
}

// RegisterActivityRaw registers activity code that works on raw input and
// output. It panics on a registration error.
func RegisterActivityRaw(r *Registry, name string, fn ActivityFunc) {
	if err := r.AddActivity(name, fn); err != nil {
		panic(err)
	}
}

// decodePayload decodes JSON into out; an empty payload leaves the zero
// value, and a non-JSON payload is accepted as is by a *string.
func decodePayload(raw string, out any) error {
	if raw == "" {
		return nil
	}
	if s, ok := out.(*string); ok && !json.Valid([]byte(raw)) {
		*s = raw
		return nil
	}
	return json.Unmarshal([]byte(raw), out)
}

func encodePayload(name string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", history.ConfigurationError(history.ConfigBadInput, name, "cannot encode output: "+err.Error())
	}
	return string(b), nil
}
