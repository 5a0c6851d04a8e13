package changefeed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/durafeed/durafeed/internal/epk"
)

// Lease is an exclusive, durable claim on an EPK range of a container's
// change feed. A LeaseSource implements it (durafeed's leasestore keeps
// leases as documents in Cosmos DB; tests use in-memory ones).
//
// The Processor runs one reader per Lease it receives and calls Checkpoint
// only after the handler has succeeded for everything up to the
// continuation it passes, so a new owner that starts from Continuation
// loses nothing (it may see again what was handled after the last
// checkpoint).
type Lease interface {
	// ID identifies the lease. A new Lease value with the ID of one whose
	// reader is still stopping is read only once that reader has stopped.
	ID() string
	// Range is the half-open EPK interval [Min, Max) the lease covers. It
	// may cover part of a physical partition or span several.
	Range() epk.Range
	// Continuation is the last checkpointed continuation: an azcosmos
	// composite change-feed token. "" means the lease was never
	// checkpointed: reading starts as Options.StartFrom says. The
	// processor clamps the token's ranges to Range, so a lease source that
	// splits a lease may give both halves their parent's continuation.
	Continuation() string
	// Checkpoint durably records continuation as the lease's position. It
	// fails with an error wrapping ErrLeaseLost when the lease is no longer
	// held; any other error is taken as transient and retried.
	Checkpoint(ctx context.Context, continuation string) error
	// Done is closed when the lease is lost or released. Its reader stops
	// promptly: the handler's context is cancelled and nothing more is
	// checkpointed.
	Done() <-chan struct{}
}

// LeaseSource hands this process the leases it acquires. It owns
// acquisition, renewal, balancing and release; the Processor only reads
// the leases it is given and checkpoints them.
type LeaseSource interface {
	// Acquired delivers each newly acquired lease once. Closing the channel
	// means no more leases will come; readers of leases already delivered
	// keep running until their lease is done or the processor stops.
	Acquired() <-chan Lease
}

// ErrLeaseLost reports that a lease is no longer held by this process.
// Lease.Checkpoint returns an error wrapping it once another owner may have
// taken the lease over.
var ErrLeaseLost = errors.New("changefeed: lease lost")

// LocalLease is a Lease held by this process alone, for using the Processor
// without a lease store: a single process reading a whole container (or
// fixed ranges of it), with checkpoints kept wherever save puts them (a
// file, a document, a database row). It is held until Release.
type LocalLease struct {
	id   string
	rng  Range
	save func(ctx context.Context, continuation string) error
	done chan struct{}

	mu       sync.Mutex
	cont     string
	released bool
}

// NewLocalLease returns a lease on r starting from continuation ("" for
// Options.StartFrom). Each checkpoint calls save (nil keeps checkpoints in
// memory only); a save error fails the checkpoint, which the processor
// retries.
func NewLocalLease(id string, r Range, continuation string, save func(ctx context.Context, continuation string) error) *LocalLease {
	return &LocalLease{id: id, rng: r, save: save, cont: continuation, done: make(chan struct{})}
}

// ID returns the lease's id.
func (l *LocalLease) ID() string { return l.id }

// Range returns the lease's EPK range.
func (l *LocalLease) Range() Range { return l.rng }

// Continuation returns the latest checkpointed continuation.
func (l *LocalLease) Continuation() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cont
}

// Checkpoint saves continuation; after Release it fails with ErrLeaseLost.
func (l *LocalLease) Checkpoint(ctx context.Context, continuation string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("changefeed: local lease %q released: %w", l.id, ErrLeaseLost)
	}
	if l.save != nil {
		if err := l.save(ctx, continuation); err != nil {
			return err
		}
	}
	l.cont = continuation
	return nil
}

// Done is closed by Release.
func (l *LocalLease) Done() <-chan struct{} { return l.done }

// Release gives the lease up: its reader stops and later checkpoints fail.
// It is idempotent.
func (l *LocalLease) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.released {
		l.released = true
		close(l.done)
	}
}

// StaticSource returns a LeaseSource that delivers leases once, then closes
// its channel: for a fixed set of leases, such as LocalLeases.
func StaticSource(leases ...Lease) LeaseSource {
	ch := make(chan Lease, len(leases))
	for _, l := range leases {
		ch <- l
	}
	close(ch)
	return staticSource(ch)
}

type staticSource chan Lease

func (s staticSource) Acquired() <-chan Lease { return s }
