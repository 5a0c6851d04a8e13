package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/durable/history"
)

// taskKind says what a Task waits for.
type taskKind int

const (
	taskActivity taskKind = iota + 1
	taskTimer
	taskExternal
	taskQueue
	taskSubOrchestration
	taskRetry
)

func (k taskKind) String() string {
	switch k {
	case taskActivity:
		return "activity"
	case taskTimer:
		return "timer"
	case taskExternal:
		return "external event wait"
	case taskQueue:
		return "queued event dequeue"
	case taskSubOrchestration:
		return "sub-orchestration"
	case taskRetry:
		return "activity with retry"
	}
	return "task"
}

// ErrCancelled is matched (errors.Is) by the error a Task returns when it
// was cancelled because it lost a Select.
var ErrCancelled = errors.New("task cancelled")

// cancelledError is the error of a task that lost a Select.
type cancelledError struct{ kind taskKind }

func (e cancelledError) Error() string { return e.kind.String() + " cancelled: lost a select" }
func (e cancelledError) Is(target error) bool {
	return target == ErrCancelled
}

// Task is a durable operation started by an OrchestrationContext method: an
// activity, a timer, an external-event wait, a queued-event dequeue or a
// sub-orchestration. It completes when its result is in the history. A Task
// belongs to the orchestration invocation that created it and must only be
// used from that orchestration's goroutine.
type Task struct {
	c    *Context
	kind taskKind

	// Specification (what the code asked for).
	name      string
	input     string
	sessionID string
	tag       string
	version   string
	instance  string // child instance id ("" until bound when autoID)
	autoID    bool
	fireAtMS  uint64

	// Binding and outcome.
	eventID   uint64
	done      bool
	seq       uint64 // completion order, for Select
	result    string
	failure   *history.ErrorDetails
	cancelled bool
	// filled marks an external or queue subscription that received its event.
	filled bool

	// retry is set for taskRetry: a composite task run by Await.
	retry *retryState
	// assumed makes the task ready for the engine's test of what the
	// orchestration awaits (engine.awaiting), and only during it.
	assumed bool
}

// EventID is the id of the event that scheduled the task (0 until the
// engine has bound it to history).
func (t *Task) EventID() uint64 { return t.eventID }

// IsDone reports whether the task has completed (successfully or not).
func (t *Task) IsDone() bool { return t.done }

// ChildInstance returns the instance id of a sub-orchestration task once it
// is known ("" before the engine bound it, and for other tasks).
func (t *Task) ChildInstance() string {
	if t.kind != taskSubOrchestration {
		return ""
	}
	return t.instance
}

// ready reports whether Await can return without waiting.
func (t *Task) ready() bool { return t.done || t.cancelled || t.assumed }

// AwaitRaw waits for the task and returns its raw (serialized) result. A
// failed activity or sub-orchestration returns a history.ErrorDetails; a
// task that lost a Select returns an error matching ErrCancelled. Timers
// return "".
func (t *Task) AwaitRaw() (string, error) {
	if t == nil {
		return "", errors.New("await on a nil task")
	}
	if t.kind == taskRetry {
		return t.retry.run(t.c)
	}
	t.c.block(t.ready)
	return t.outcome()
}

// Await waits for the task and decodes its JSON result into out (which may
// be nil to discard it). Errors are as for AwaitRaw; a result that does not
// decode into out is reported as a configuration error of kind bad_input.
func (t *Task) Await(out any) error {
	raw, err := t.AwaitRaw()
	if err != nil {
		return err
	}
	return decodeResult(raw, out)
}

// outcome is the task's result once ready.
func (t *Task) outcome() (string, error) {
	if t.done && !t.cancelled {
		if t.failure != nil {
			return "", *t.failure
		}
		return t.result, nil
	}
	if t.cancelled {
		return "", cancelledError{t.kind}
	}
	return "", errors.New("task is not complete")
}

// decodeResult decodes a JSON payload into out; nil out discards it.
func decodeResult(raw string, out any) error {
	if out == nil {
		return nil
	}
	if s, ok := out.(*string); ok && raw != "" && !json.Valid([]byte(raw)) {
		*s = raw
		return nil
	}
	if raw == "" {
		raw = "null"
	}
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		return history.ConfigurationError(history.ConfigBadInput, fmt.Sprintf("%T", out), "cannot decode result: "+err.Error())
	}
	return nil
}

// BackoffKind selects how the delay between retry attempts grows.
type BackoffKind int

const (
	// BackoffNone retries at once.
	BackoffNone BackoffKind = iota
	// BackoffFixed waits Base between attempts.
	BackoffFixed
	// BackoffLinear waits Base*attempt, capped at Max.
	BackoffLinear
	// BackoffExponential waits Base*Multiplier^(attempt-1), capped at Max.
	BackoffExponential
)

// Backoff computes the delay between retry attempts. The zero value retries
// at once.
type Backoff struct {
	Kind       BackoffKind
	Base       time.Duration
	Max        time.Duration
	Multiplier float64
}

// DefaultBackoff is exponential from 100 ms, doubling, capped at 30 s.
func DefaultBackoff() Backoff {
	return Backoff{Kind: BackoffExponential, Base: 100 * time.Millisecond, Multiplier: 2, Max: 30 * time.Second}
}

// Delay returns the wait after the attempt-th failure (attempt >= 1).
func (b Backoff) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	capAt := func(d time.Duration) time.Duration {
		if b.Max > 0 && d > b.Max {
			return b.Max
		}
		return d
	}
	switch b.Kind {
	case BackoffFixed:
		return b.Base
	case BackoffLinear:
		return capAt(b.Base * time.Duration(attempt))
	case BackoffExponential:
		m := b.Multiplier
		if m <= 0 {
			m = 2
		}
		d := float64(b.Base)
		for i := 1; i < attempt; i++ {
			d *= m
			if b.Max > 0 && d > float64(b.Max) {
				return b.Max
			}
		}
		return capAt(time.Duration(d))
	}
	return 0
}

// RetryPolicy makes an activity call retry on application failures. Each
// wait between attempts is a durable timer, so retries survive restarts.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts, the first included
	// (values below 1 mean 1).
	MaxAttempts int
	// Backoff spaces the attempts.
	Backoff Backoff
	// Timeout, when positive, races each attempt against a durable timer;
	// a timeout fails the call at once (it is not retried).
	Timeout time.Duration
}

// ErrTimeout is matched (errors.Is) by the error of an activity call whose
// RetryPolicy.Timeout elapsed.
var ErrTimeout = errors.New("activity timed out")

type timeoutError struct{ name string }

func (e timeoutError) Error() string        { return "activity " + e.name + " timed out" }
func (e timeoutError) Is(target error) bool { return target == ErrTimeout }

// retryState drives a retried activity call.
type retryState struct {
	policy RetryPolicy
	opts   activityOptions
	first  *Task
	name   string
	input  string
	// finished caches the outcome once run.
	finished bool
	result   string
	err      error
}

func (r *retryState) run(c *Context) (string, error) {
	if r.finished {
		return r.result, r.err
	}
	maxAttempts := max(r.policy.MaxAttempts, 1)
	var lastErr error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		var t *Task
		if attempt == 1 {
			t = r.first
		} else {
			t = c.scheduleActivity(r.name, r.input, r.opts)
		}
		var res string
		var err error
		if r.policy.Timeout > 0 {
			timer := c.CreateTimer(r.policy.Timeout)
			winner, _ := c.Select(t, timer)
			if winner == 1 {
				r.finished, r.err = true, timeoutError{r.name}
				return "", r.err
			}
		}
		res, err = t.AwaitRaw()
		if err == nil {
			r.finished, r.result = true, res
			return res, nil
		}
		lastErr = err
		if attempt < maxAttempts {
			c.Logger().Sugar().Debugf("activity %s attempt %d/%d failed, retrying: %v", r.name, attempt, maxAttempts, err)
			if d := r.policy.Backoff.Delay(attempt); d > 0 {
				_, _ = c.CreateTimer(d).AwaitRaw()
			}
		}
	}
	r.finished, r.err = true, lastErr
	return "", lastErr
}
