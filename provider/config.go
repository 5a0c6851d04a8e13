package provider

import (
	"errors"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/slots"
)

// Mode selects how fetches find work.
type Mode int

const (
	// ModeEventDriven (the default) reads the container's change feed on
	// slot blocks leased across replicas and wakes long-polling fetches
	// from it; see the package documentation.
	ModeEventDriven Mode = iota
	// ModePolling is the seeds' algorithm: every fetch runs a
	// cross-partition candidate query and returns at once, and a
	// reconciler sweeps every ReconcileInterval. It is kept as the
	// benchmark's baseline and for deployments that cannot read the
	// change feed.
	ModePolling
)

// String returns "event-driven" or "polling".
func (m Mode) String() string {
	switch m {
	case ModeEventDriven:
		return "event-driven"
	case ModePolling:
		return "polling"
	}
	return "Mode(" + itoa(int(m)) + ")"
}

// Defaults applied by New to zero-valued Config fields. The event-driven
// defaults and the request-unit arithmetic behind them are in the package
// documentation ("Defaults and cost").
const (
	DefaultDatabase          = "durafeed"
	DefaultContainer         = "durafeed"
	DefaultReconcileInterval = 2 * time.Second
	DefaultReconcileAge      = 2 * time.Second

	// DefaultLeaseExpiry is how long a replica's heartbeat may stay
	// unchanged before others take its leases.
	DefaultLeaseExpiry = 10 * time.Second
	// DefaultHeartbeatInterval is the period of a replica's heartbeat
	// write (0.4 LeaseExpiry: a failed write is retried after a quarter
	// of it, well before the replica fences itself at LeaseExpiry -
	// HeartbeatInterval = 6 s).
	DefaultHeartbeatInterval = 4 * time.Second
	// DefaultWatchActiveDelay is the pause between reads of the lease
	// partition's change feed while ownership changes flow.
	DefaultWatchActiveDelay = 50 * time.Millisecond
	// DefaultWatchIdleCeiling is the longest pause between reads of the
	// lease partition's change feed: it bounds a graceful hand-off, a join
	// or a backlog hint's pick-up.
	DefaultWatchIdleCeiling = 750 * time.Millisecond
	// DefaultFeedActiveDelay is the pause between change-feed reads of a
	// lease while changes flow.
	DefaultFeedActiveDelay = 20 * time.Millisecond
	// DefaultFeedIdleCeiling is the longest pause between change-feed
	// reads of an idle lease. Writes of this replica never wait for it
	// (they signal the local wakeup hubs directly); it bounds the pick-up
	// of another process's write to an idle slot block.
	DefaultFeedIdleCeiling = 4 * time.Second
	// DefaultFeedWarmHold is how long a replica's change-feed readers keep
	// reading every FeedActiveDelay after the replica last saw work (a
	// change in its slots or a write of its own) before they back off.
	DefaultFeedWarmHold = 2 * time.Second
	// DefaultInstanceCacheSize is how many instance documents an
	// event-driven provider remembers from its own writes (at most 4 KiB
	// each), so that the next fetch of those instances reads no instance
	// document.
	DefaultInstanceCacheSize = 4096
	// DefaultSafetySweepInterval is the period of the slow sweep that
	// catches anything the feed and the local signals missed.
	DefaultSafetySweepInterval = 60 * time.Second
)

// Config configures a Provider.
type Config struct {
	// Endpoint is the account endpoint, e.g. https://acct.documents.azure.com:443/.
	Endpoint string
	// Key is the account key. When empty, Credential is used.
	Key string
	// Credential authenticates with Entra ID when Key is empty.
	Credential azcore.TokenCredential
	// Database and Container name the store (defaults "durafeed").
	Database  string
	Container string
	// CreateIfMissing creates the database and container when missing. Nil
	// means true with a key and false with a credential: data-plane RBAC
	// cannot create resources, so with Entra ID the container is expected to
	// exist (deployed by infrastructure code) and a missing one is an error.
	CreateIfMissing *bool
	// OrchestrationDispatchers and WorkerDispatchers split the 256 dispatch
	// slots into that many contiguous shares per queue, so that concurrent
	// fetchers scan disjoint slots (default 1: every fetch scans all slots).
	OrchestrationDispatchers int
	WorkerDispatchers        int
	// ReconcileInterval is how often the background reconciler sweeps
	// undelivered outbox intents, unpublished large turns and interrupted
	// deletions (default 2 s); ReconcileAge is how old such a record must be
	// before the sweep takes it over from the call that wrote it (default 2 s).
	ReconcileInterval time.Duration
	ReconcileAge      time.Duration
	// Mode selects event-driven (default) or polling dispatch.
	Mode Mode

	// The fields below apply to ModeEventDriven only.

	// ReplicaID names this replica in lease documents; it must be unique
	// among running replicas. Default: the host name and 8 random hex
	// digits, new for every Provider.
	ReplicaID string
	// LeaseBlocks is the number of leases the 256 dispatch slots are split
	// into: a power of two from 1 to 256 (default 8). Every replica of a
	// container must use the same value.
	LeaseBlocks int
	// LeaseExpiry (default 10 s) and HeartbeatInterval (default
	// 0.4 LeaseExpiry, at most LeaseExpiry/2) govern liveness: a replica that
	// stops heartbeating loses its leases to the others after LeaseExpiry.
	LeaseExpiry       time.Duration
	HeartbeatInterval time.Duration
	// WatchActiveDelay (default 50 ms) and WatchIdleCeiling (default
	// 750 ms) pace the reads of the lease partition's change feed.
	WatchActiveDelay time.Duration
	WatchIdleCeiling time.Duration
	// FeedActiveDelay (default 20 ms) and FeedIdleCeiling (default 4 s) pace
	// each lease's change-feed reader: ActiveDelay while changes flow,
	// doubling up to IdleCeiling while none come.
	FeedActiveDelay time.Duration
	FeedIdleCeiling time.Duration
	// FeedWarmHold (default 2 s) keeps every lease reader of the replica at
	// FeedActiveDelay for that long after the replica last saw work, so a
	// write from another process (a client's start or event, an activity
	// result from another replica) is read within FeedActiveDelay while
	// the replica is busy, at the price of one read per lease reader per
	// FeedActiveDelay during the hold. Negative: no hold (readers back off
	// as soon as their own range goes quiet).
	FeedWarmHold time.Duration
	// SafetySweepInterval is the period of the slow sweep over owned slots,
	// stale outbox intents, unpublished large turns and interrupted
	// deletions (default 60 s).
	SafetySweepInterval time.Duration
	// InstanceCacheSize bounds the instance documents an event-driven
	// provider remembers from its own writes (default 4096 unlocked ones,
	// from acks and abandons, and as many locked ones, from lock batches
	// and renewals; at most 4 KiB each; negative: none). A fetch of a
	// remembered instance skips the read of its instance document, and so
	// does the ack of a remembered lock: each write is conditional on the
	// remembered ETag, and a stale entry costs one failed batch before the
	// read.
	InstanceCacheSize int

	// leasePartition overrides the lease partition key value (tests:
	// independent lease namespaces on one container).
	leasePartition string
	// joinEagerly makes New join dispatch at once instead of at the first
	// FetchOrchestrationItem, and wait until the replica owns its share
	// and has caught up on it (tests).
	joinEagerly bool
	// noHeads turns lockFromHeads off (tests of the other fetch paths).
	noHeads bool
	// idleLeave, when positive, replaces the time without an
	// orchestration fetch after which the replica leaves dispatch (tests
	// whose replica holds leases without fetching).
	idleLeave time.Duration

	// ClientOptions are passed to the SDK (transport, retries, telemetry).
	ClientOptions *azcosmos.ClientOptions
	// Logger receives operational logs: instance ids, operations and status
	// codes, never keys or payloads. Default: no logging.
	Logger *zap.Logger
}

// ConfigFromEnv reads COSMOS_ENDPOINT, COSMOS_KEY, COSMOS_DATABASE and
// COSMOS_CONTAINER. Without a key it authenticates with
// azidentity.NewDefaultAzureCredential.
func ConfigFromEnv() (Config, error) {
	cfg := Config{
		Endpoint:  os.Getenv("COSMOS_ENDPOINT"),
		Key:       os.Getenv("COSMOS_KEY"),
		Database:  os.Getenv("COSMOS_DATABASE"),
		Container: os.Getenv("COSMOS_CONTAINER"),
	}
	if cfg.Endpoint == "" {
		return Config{}, errors.New("provider: COSMOS_ENDPOINT is not set")
	}
	if cfg.Key == "" {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return Config{}, err
		}
		cfg.Credential = cred
	}
	return cfg, nil
}

func (c Config) withDefaults() Config {
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.Container == "" {
		c.Container = DefaultContainer
	}
	if c.OrchestrationDispatchers <= 0 {
		c.OrchestrationDispatchers = 1
	}
	if c.WorkerDispatchers <= 0 {
		c.WorkerDispatchers = 1
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.ReconcileAge <= 0 {
		c.ReconcileAge = DefaultReconcileAge
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.idleLeave <= 0 {
		c.idleLeave = idleLeave
	}
	if c.LeaseBlocks <= 0 {
		c.LeaseBlocks = slots.DefaultBlocks
	}
	if c.LeaseExpiry <= 0 {
		c.LeaseExpiry = DefaultLeaseExpiry
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.LeaseExpiry * 2 / 5
	}
	if c.WatchActiveDelay <= 0 {
		c.WatchActiveDelay = DefaultWatchActiveDelay
	}
	if c.WatchIdleCeiling <= 0 {
		c.WatchIdleCeiling = DefaultWatchIdleCeiling
	}
	if c.FeedActiveDelay <= 0 {
		c.FeedActiveDelay = DefaultFeedActiveDelay
	}
	if c.FeedIdleCeiling <= 0 {
		c.FeedIdleCeiling = DefaultFeedIdleCeiling
	}
	if c.FeedWarmHold == 0 {
		c.FeedWarmHold = DefaultFeedWarmHold
	}
	if c.SafetySweepInterval <= 0 {
		c.SafetySweepInterval = DefaultSafetySweepInterval
	}
	if c.InstanceCacheSize == 0 {
		c.InstanceCacheSize = DefaultInstanceCacheSize
	}
	if c.CreateIfMissing == nil {
		v := c.Key != ""
		c.CreateIfMissing = &v
	}
	return c
}
