package runtime

import (
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
)

// Version returns this runtime's version: stamped on every event it
// writes, pinned on every execution it starts, and the upper bound of the
// executions it fetches (durable.DefaultCapabilityFilter).
func Version() durable.SemVer { return durable.SemVer{Major: 0, Minor: 1, Patch: 0} }

// Options configures a Runtime. Zero fields take the documented defaults.
type Options struct {
	// OrchestrationConcurrency is the number of orchestration dispatcher
	// goroutines (default 2; negative disables the dispatcher).
	OrchestrationConcurrency int
	// WorkerConcurrency is the number of activity worker goroutines
	// (default 2; negative disables the dispatcher): at most this many
	// activities run at once. Each worker reports an activity's outcome
	// (its ack) while it fetches and runs the next, with at most one
	// report in flight, so a worker may hold a second item's lock while
	// the first's ack is under way.
	WorkerConcurrency int

	// OrchestratorLockTimeout is the instance lock taken per turn (default
	// 5 s); it is renewed at half its length while a turn runs.
	OrchestratorLockTimeout time.Duration
	// WorkerLockTimeout is the lock taken per activity (default 30 s); it is
	// renewed at half its length while the activity runs.
	WorkerLockTimeout time.Duration
	// PollTimeout is passed to long-polling providers (default 5 s).
	PollTimeout time.Duration
	// IdleBackoff is the pause of a dispatcher loop after a fetch failed,
	// and after a fetch that found no work, counted from that fetch's
	// start. Default: the provider's poll interval when it states one
	// (durable.PollPacer; the Cosmos DB provider's polling mode, 1 s by
	// default), otherwise 100 ms. A long-polling fetch (event-driven mode)
	// that found nothing has already waited PollTimeout, so the next one
	// starts at once.
	IdleBackoff time.Duration

	// MaxAttempts is how often a message may be fetched before it is
	// treated as poison (default 10).
	MaxAttempts uint32
	// FailureBackoff delays the retry of a turn whose commit failed
	// (default 1 s). History that cannot be decoded is always retried
	// after 1 s.
	FailureBackoff time.Duration
	// UnregisteredBackoff delays the retry of a turn whose orchestration
	// version is not registered on this node (default 1 s).
	UnregisteredBackoff time.Duration

	// RuntimeVersion overrides Version() (for tests of mixed deployments).
	RuntimeVersion *durable.SemVer

	// WorkerNodeID identifies this runtime as a session owner (default a
	// random UUID).
	WorkerNodeID string
	// TagFilter selects the activities this runtime's workers run
	// (default: untagged only).
	TagFilter durable.TagFilter
	// SessionLockTimeout is how long a claimed session stays owned without
	// renewal (default 30 s); sessions are renewed at half that interval.
	SessionLockTimeout time.Duration
	// SessionIdleTimeout lets sessions without activity expire (default 5 min).
	SessionIdleTimeout time.Duration
	// SessionCleanupInterval is how often orphaned sessions are swept
	// (default 5 min).
	SessionCleanupInterval time.Duration

	// Logger receives the runtime's logs (default: none).
	Logger *zap.Logger

	// TracerProvider receives a span per orchestration turn and per
	// activity execution, in the instance's trace (default: none, at no
	// cost). MeterProvider receives the runtime's metrics: turns and
	// activity executions, counted and timed (default: none).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// LogPayloads includes inputs and outputs in logs (default false).
	LogPayloads bool
	// Clock returns "now" for new events (default time.Now).
	Clock func() time.Time
}

// withDefaults fills the zero fields; p is the provider (for its poll
// interval).
func (o Options) withDefaults(p durable.Provider) Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.OrchestrationConcurrency == 0 {
		o.OrchestrationConcurrency = 2
	}
	if o.WorkerConcurrency == 0 {
		o.WorkerConcurrency = 2
	}
	def(&o.OrchestratorLockTimeout, 5*time.Second)
	def(&o.WorkerLockTimeout, 30*time.Second)
	def(&o.PollTimeout, 5*time.Second)
	if pp, ok := p.(durable.PollPacer); ok && o.IdleBackoff <= 0 {
		o.IdleBackoff = pp.PollInterval()
	}
	def(&o.IdleBackoff, 100*time.Millisecond)
	def(&o.FailureBackoff, time.Second)
	def(&o.UnregisteredBackoff, time.Second)
	def(&o.SessionLockTimeout, 30*time.Second)
	def(&o.SessionIdleTimeout, 5*time.Minute)
	def(&o.SessionCleanupInterval, 5*time.Minute)
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 10
	}
	if o.RuntimeVersion == nil {
		v := Version()
		o.RuntimeVersion = &v
	}
	if o.WorkerNodeID == "" {
		o.WorkerNodeID = uuid.NewString()
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}
