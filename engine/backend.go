package engine

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
	"github.com/durafeed/durafeed/store"
)

// Store is what the engine needs of the orchestration store. Package
// store's *Store implements it; the engine's own tests use a fake. The
// outbox delivers intents through its Create and Delete.
type Store interface {
	outbox.Store

	// LockInstance locks one instance's turn (store.Store.LockInstance).
	LockInstance(ctx context.Context, req store.LockRequest) (store.LockResult, error)
	// LockWorkIn queries the block's worker items and locks the oldest
	// the request may take (a fetch before the replica joined).
	LockWorkIn(ctx context.Context, block slots.Block, req store.WorkLockRequest) (store.WorkLockResult, error)
	// TryLockWork locks one signalled worker item without reading it;
	// ReadWork and LockWork take it when that cannot decide.
	TryLockWork(ctx context.Context, instance, id string, req store.WorkLockRequest) (store.WorkLockResult, error)
	ReadWork(ctx context.Context, instance, id string) (*store.WorkDoc, error)
	LockWork(ctx context.Context, w *store.WorkDoc, req store.WorkLockRequest) (store.WorkLockResult, error)
	// ClaimSession takes or keeps a worker session for the caller.
	ClaimSession(ctx context.Context, sid string, cfg *durable.SessionFetchConfig) (bool, error)

	// QueueHeads runs a catch-up or scan query over slots.
	QueueHeads(ctx context.Context, q store.HeadQuery) ([]store.QueueHead, error)
	// Stale runs the safety sweep's query.
	Stale(ctx context.Context, q store.StaleQuery) ([]store.QueueHead, outbox.Findings, error)
	// FinishInstance publishes a large turn or finishes a deletion the
	// feed showed pending.
	FinishInstance(ctx context.Context, instance string) error
	// ReleaseLocksOf frees the locks of a holder declared dead.
	ReleaseLocksOf(ctx context.Context, holder string) (store.Write, error)
	// WriteHint writes this replica's backlog-hint document.
	WriteHint(ctx context.Context, partition string, doc json.RawMessage) error
	// ContainerGone reports the container's deletion as a permanent error.
	ContainerGone(ctx context.Context, op string) error
	// DecodeFeedDoc reads one change-feed document's type, then decodes
	// it once as that kind, into what dispatch needs of it (a pure
	// function of raw and now).
	DecodeFeedDoc(raw []byte, now int64) (store.FeedDoc, error)
}

// Leases is what a session needs of its lease store (package
// leasestore's *Store).
type Leases interface {
	Run(ctx context.Context) error
	Release(ctx context.Context) error
	Holder() string
	Owned() []leasestore.LeaseInfo
	Leases() []leasestore.LeaseInfo
	Members() []string
	OwnerOf(index int) string
	WakeEndpoint(replica string) (leasestore.WakeEndpoint, bool)
	PeerEndpoints() []leasestore.WakeEndpoint
	// WakesReported is what the live peers' heartbeats report of the
	// peer wake frames they wrote to this replica.
	WakesReported() []leasestore.WakesReport
	Kick()
}

// Feed is what a session needs of its change-feed processor (package
// changefeed's *Processor), which reads the feed of the leases it holds.
type Feed interface {
	Run(ctx context.Context) error
	Stop(ctx context.Context) error
	Wake(r changefeed.Range)
	Lag(ctx context.Context) ([]changefeed.RangeLag, error)
}

// Backend is the engine's I/O: the store, and how a session builds its
// lease store and change-feed processor. OnCosmos wires it to a store on
// Cosmos DB; the engine's tests pass fakes.
type Backend struct {
	// Store is the orchestration store (required).
	Store Store
	// Session builds a session's lease store with lo and the change-feed
	// processor reading, with fo, the leases it holds, delivering to h.
	// Without it the replica cannot join dispatch (Join fails).
	Session func(lo leasestore.Options, h changefeed.Handler, fo changefeed.Options) (Leases, Feed, error)
	// View reads every lease document once: the peer wake channel's view
	// of who owns which block and where it listens. Required with
	// Options.PeerWake.
	View func(ctx context.Context, partition string, blocks int) (leasestore.View, error)
}

// OnCosmos is the Backend of a store on Cosmos DB: the lease documents
// and the change feed are in the store's own container.
func OnCosmos(s *store.Store) Backend {
	c := s.Container()
	return Backend{
		Store: s,
		Session: func(lo leasestore.Options, h changefeed.Handler, fo changefeed.Options) (Leases, Feed, error) {
			ls, err := leasestore.New(c, lo)
			if err != nil {
				return nil, nil, err
			}
			proc, err := changefeed.New(c, ls, h, fo)
			if err != nil {
				return nil, nil, err
			}
			return ls, proc, nil
		},
		View: func(ctx context.Context, partition string, blocks int) (leasestore.View, error) {
			return leasestore.ReadView(ctx, c, partition, blocks)
		},
	}
}

// errNoSession is Join's error on a Backend without Session.
var errNoSession = errors.New("engine: the backend builds no session (Backend.Session is nil)")

// viewTimeout bounds one read of the peer view.
const viewTimeout = 5 * time.Second
