package durable

import (
	"context"
	"time"
)

// Optional capabilities. A Provider may implement any of these interfaces
// besides Provider; a runtime discovers them with a type assertion and
// works without them. A wrapper around a Provider that does not forward
// them only loses what they add (pacing, prompt notifications), never
// correctness.

// PollPacer is implemented by a short-polling provider that states how
// often one dispatcher loop should fetch while it finds no work (the
// seeds' one query a second, for the Cosmos DB provider's polling mode).
// A long-polling provider, whose fetches already wait for work, does not
// implement it or returns 0.
type PollPacer interface {
	// PollInterval is the time from the start of a fetch that found no
	// work to the start of the same loop's next fetch; 0 leaves the
	// runtime's own default.
	PollInterval() time.Duration
}

// InstanceWatcher is implemented by a provider that can tell a waiting
// client that an instance may have changed (its status, output or custom
// status), so that the client reads it again at once instead of at its
// next poll.
type InstanceWatcher interface {
	// WatchInstance starts watching instance. The watch's Changed channel
	// receives after a change to the instance that the provider learns of:
	// spurious receives are allowed, and changes the provider does not
	// learn of are not signalled, so a caller still reads the instance
	// now and then (a notification is a hint; the read is the truth). A
	// change committed before WatchInstance returned may or may not be
	// signalled: read the instance after starting the watch. The caller
	// must Close the watch.
	WatchInstance(ctx context.Context, instance string) (InstanceWatch, error)
}

// InstanceWatch is one watch of an instance (InstanceWatcher).
type InstanceWatch interface {
	// Changed receives (a value of a buffered channel of one) after the
	// instance may have changed; changes that come together are folded
	// into one receive.
	Changed() <-chan struct{}
	// Close ends the watch and releases what it holds; it is idempotent.
	Close()
}

// RunningEnqueuer is implemented by a provider that can enqueue a
// client's call on the condition that its target instance runs, checked
// by the write itself (one round trip instead of a read, then a write).
type RunningEnqueuer interface {
	// EnqueueIfRunning enqueues item, an event or a cancellation, if its
	// target instance runs (has started, not completed or failed) and the
	// provider can tell so in the write. Enqueued false means that nothing
	// was written and nothing is known of the instance: the caller reads
	// its state and enqueues as usual. An error leaves the outcome
	// unknown, as EnqueueForOrchestrator's does.
	EnqueueIfRunning(ctx context.Context, item WorkItem) (enqueued bool, err error)
}

// RequestChecker is implemented by a provider that records client calls
// by their request id (RequestIDOf): it says, without writing, whether a
// call has taken effect already, so that a caller repeating it can give
// the first call's answer instead of reporting a conflict the first call
// caused (an instance that now exists, or has ended since).
type RequestChecker interface {
	// CheckRequest reports what the provider recorded of item's request
	// id on item's target instance: RequestUnknown when nothing (no
	// request id, never used, or its record expired with the retention),
	// RequestSame when the same call (kind and arguments, the trace
	// context aside) took effect, RequestDifferent when another call used
	// the id.
	CheckRequest(ctx context.Context, item WorkItem) (RequestState, error)
}

// RequestState is what a provider recorded of a request id
// (RequestChecker).
type RequestState int

const (
	// RequestUnknown: no call with the id is recorded on the instance.
	RequestUnknown RequestState = iota
	// RequestSame: the same call took effect.
	RequestSame
	// RequestDifferent: another call used the id.
	RequestDifferent
)
