package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/internal/clock"
	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/slots"
)

// Clock is the engine's source of time (Now and timers); tests inject a
// fake one. It is the same interface changefeed and wakeup accept.
type Clock = clock.Clock

// Options configures an Engine, one struct per concern. Zero values take
// the documented defaults; a nil sub-struct means all its defaults.
type Options struct {
	// ReplicaID names this replica in lease documents; it must be unique
	// among running replicas. Default: leasestore.DefaultReplicaID(), new
	// for every Engine.
	ReplicaID string
	// Leases configures slot ownership across replicas.
	Leases *LeaseOptions
	// Feed configures the change-feed readers of the owned slot blocks.
	Feed *FeedOptions
	// SafetySweepInterval is the period of the slow sweep over owned
	// slots, stale outbox intents, unpublished large turns and
	// interrupted deletions (default 60 s, jittered by up to a tenth).
	SafetySweepInterval time.Duration
	// IdleLeave is how long the replica keeps its leases with no
	// orchestration fetch running: then it hands them off (its
	// dispatchers were stopped) and rejoins at the next fetch (default
	// 5 s).
	IdleLeave time.Duration
	// PeerWake, when set, turns the peer wake channel on (see
	// PeerWakeOptions); nil leaves it off, and other processes' writes are
	// seen at the next change-feed read.
	PeerWake *PeerWakeOptions
	// MeterProvider receives the engine's metrics: wake latency, slots
	// owned, the feeds' pending changes and lag (engine.Metric*; default:
	// none).
	MeterProvider metric.MeterProvider
	// SiblingWait, when positive, bounds how long a turn without an await
	// hint (below) waits for its sibling activities (default 0: no turn
	// without a hint is put off). A wakeup for an instance that still has
	// activities which turns committed on this replica scheduled, and
	// which this replica has not seen complete, then puts the instance's
	// turn off: until the completion of the last of them here wakes it,
	// or SiblingWait after the first wakeup put off, whichever comes
	// first. It is for runtimes that send no hints: it cannot tell a Join
	// from a Select, so a Select waits the bound for nothing, and durafeed's
	// runtime sends hints.
	SiblingWait time.Duration
	// AwaitHold bounds how long a turn is held while activities that
	// the instance's last turn said it awaits, every one, are still
	// outstanding (durable.OrchestrationTurn.AwaitingActivities; default
	// DefaultAwaitHold, 1 s; negative: hints are ignored). A hold ends
	// at the completion of the last of them (acked here, shown by the
	// change feed, or announced by a peer wake that names the item it
	// settles), at once when anything else reaches the instance (an
	// event, a cancellation, a child's completion), or at the bound,
	// which only a completion this replica never learns of reaches (its
	// peer wake lost while the feed idles, or sent by a replica that
	// predates the named wake).
	AwaitHold time.Duration
	// DisableEager turns off the rule that a replica runs the work its
	// own writes made visible in slots it does not own (a start, event or
	// cancel its client wrote, the activities, timers and
	// sub-orchestration starts of its turns, the completions of
	// activities its turns scheduled) when a local fetch of that queue is
	// idle at the write; the work is then left to the slot owner's
	// change-feed read, up to MaxIdlePeriod later. The instance lock keeps
	// one turn to one replica, the owner's feed stays the safety net, and
	// a busy replica leaves the work to the owner. A turn's await hold is
	// persisted with its commit, so the owner holds the next turn as the
	// writer does (DESIGN §6a).
	DisableEager bool
	// DisableHeads makes every feed-woken fetch read its turn with the
	// query before the lock batch instead of locking the messages the
	// feed delivered (heads) at once: a diagnostic switch, slower by one
	// round trip per remote wake.
	DisableHeads bool
	// Clock is the source of time (default the system clock).
	Clock Clock
	// Logger receives operational logs (default none).
	Logger *zap.Logger
}

// LeaseOptions configures slot ownership.
type LeaseOptions struct {
	// Blocks is the number of leases the dispatch slots are cut into: a
	// power of two from 1 to slots.Count (default slots.DefaultBlocks).
	// Every replica of a container must use the same value.
	Blocks int
	// Expiry (default 10 s) and HeartbeatInterval (default 0.4 Expiry)
	// govern liveness: a replica that stops heartbeating loses its leases
	// to the others after Expiry.
	Expiry            time.Duration
	HeartbeatInterval time.Duration
	// WatchActiveDelay (default 50 ms) and WatchIdleCeiling (default a
	// fifth of Expiry, 2 s) pace the reads of the lease partition's
	// change feed: the ceiling bounds a graceful hand-off, a join and a
	// backlog hint's pick-up (with the peer wake channel on, replicas
	// also tell each other at once), and costs about 60/ceiling RU a
	// minute per replica (30 at the default). Liveness needs a read well
	// within Expiry, hence the tie.
	WatchActiveDelay time.Duration
	WatchIdleCeiling time.Duration
	// PartitionKeyValue is the logical partition of the lease, heartbeat
	// and hint documents (default leasestore.DefaultPartitionKeyValue);
	// engines with different values on one container are independent
	// lease groups.
	PartitionKeyValue string
}

// FeedOptions configures the change-feed readers.
type FeedOptions struct {
	// EmptyReadBudget is the request units per second this replica may
	// spend on change-feed reads that find nothing (default
	// DefaultFeedEmptyReadBudget, 1.5 RU/s, 90 RU a minute). An idle
	// replica reads each physical partition its leases overlap once per
	// period P·c/EmptyReadBudget (P those partitions, c the measured
	// charge of an empty read, about 1 RU), the partitions' reads spread
	// evenly over the period: with 4 partitions, one read every 0.67 s
	// and each partition every 2.7 s. A write of this replica never
	// waits for it (it signals the local hubs), nor does one announced on
	// the peer wake channel; a write from another process without that
	// channel waits half a period on average and a whole one at most,
	// plus a read. The price of a shorter wait is linear: for a p99 wait
	// W, a budget of about P/W RU/s (4 partitions: 16 RU/s, 960 RU a
	// minute, for 250 ms). Reads that find changes continue every
	// ActiveDelay while they keep finding them. Negative: no budget, the
	// back-off from ActiveDelay to IdleCeiling with WarmHold instead.
	EmptyReadBudget float64
	// MaxIdlePeriod bounds the budget's period
	// (changefeed.Options.MaxIdlePeriod): each physical partition is read
	// at least that often while idle, whatever the budget, so that a
	// write from another process waits at most MaxIdlePeriod plus a read
	// (half of it on average) however many partitions the container has.
	// Default DefaultFeedMaxIdlePeriod (500 ms): at most polling's wait,
	// whose 1 s pause gives about 500 ms on average and 1 s at most, for
	// P·c/MaxIdlePeriod RU/s (4 partitions, 1 RU reads: 8 RU/s, 480 RU a
	// minute, against polling's 1,400 for its queries). The same with the
	// peer wake channel on: a wake lost on it (a firewall, an address
	// that reaches no replica) is invisible until this read, so the
	// channel only ever makes a wait shorter. Negative: none.
	MaxIdlePeriod time.Duration
	// ReadsPerChange raises the budget with the work: each change the
	// feed delivers adds that many reads' worth, decaying over about 2 s
	// (changefeed.Options.ReadsPerChange), so that a busy replica reads
	// its partitions more often, down to ActiveDelay, and a quiet one
	// spends EmptyReadBudget. Default DefaultFeedReadsPerChange (10),
	// with the peer wake channel on too (MaxIdlePeriod says why).
	// Negative: none.
	ReadsPerChange float64
	// ActiveDelay (default 20 ms) is the pause between reads while changes
	// flow. IdleCeiling (default 4 s) is the longest pause of an idle
	// reader when EmptyReadBudget is negative (the back-off doubles from
	// ActiveDelay up to it).
	ActiveDelay time.Duration
	IdleCeiling time.Duration
	// WarmHold keeps every reader at ActiveDelay for that long after the
	// replica last saw work, so a write from another process is read
	// within ActiveDelay while the replica is busy, at one read per
	// partition per ActiveDelay (50 RU/s per partition at 20 ms) that no
	// budget counts. Default: 2 s when EmptyReadBudget is negative and the
	// peer wake channel is off, otherwise none. Negative: no hold.
	WarmHold time.Duration
	// CheckpointInterval is the least time between two checkpoints of a
	// lease (default 5 s): handling a document twice after a hand-over is
	// harmless.
	CheckpointInterval time.Duration
}

// Defaults of Options.
const (
	DefaultLeaseExpiry         = 10 * time.Second
	DefaultWatchActiveDelay    = 50 * time.Millisecond
	DefaultFeedActiveDelay     = 20 * time.Millisecond
	DefaultFeedIdleCeiling     = 4 * time.Second
	DefaultFeedWarmHold        = 2 * time.Second
	DefaultFeedEmptyReadBudget = 1.5
	DefaultFeedMaxIdlePeriod   = 500 * time.Millisecond
	DefaultFeedReadsPerChange  = 10.0
	DefaultCheckpointInterval  = 5 * time.Second
	DefaultSafetySweepInterval = 60 * time.Second
	DefaultIdleLeave           = 5 * time.Second
	DefaultAwaitHold           = time.Second
)

// WithDefaults returns a copy of o with every default filled in (its
// sub-structs copied, never shared with the caller), as New applies
// them (an empty ReplicaID gets a fresh one), or the error New would
// return for o: what a configuration amounts to, for a report or a check.
func (o Options) WithDefaults() (Options, error) {
	var l LeaseOptions
	if o.Leases != nil {
		l = *o.Leases
	}
	var f FeedOptions
	if o.Feed != nil {
		f = *o.Feed
	}
	if l.Blocks == 0 {
		l.Blocks = slots.DefaultBlocks
	}
	if err := slots.CheckBlocks(l.Blocks); err != nil {
		return o, fmt.Errorf("engine: LeaseOptions.Blocks: %w", err)
	}
	if l.Expiry <= 0 {
		l.Expiry = DefaultLeaseExpiry
	}
	if l.HeartbeatInterval <= 0 {
		l.HeartbeatInterval = l.Expiry * 2 / 5
	}
	if l.HeartbeatInterval > l.Expiry/2 {
		return o, errors.New("engine: LeaseOptions.HeartbeatInterval is more than half the Expiry")
	}
	if l.WatchActiveDelay <= 0 {
		l.WatchActiveDelay = DefaultWatchActiveDelay
	}
	if l.WatchIdleCeiling <= 0 {
		l.WatchIdleCeiling = max(l.Expiry/5, l.WatchActiveDelay)
	}
	if l.PartitionKeyValue == "" {
		l.PartitionKeyValue = leasestore.DefaultPartitionKeyValue
	}
	if f.ActiveDelay <= 0 {
		f.ActiveDelay = DefaultFeedActiveDelay
	}
	if f.IdleCeiling <= 0 {
		f.IdleCeiling = DefaultFeedIdleCeiling
	}
	f.IdleCeiling = max(f.IdleCeiling, f.ActiveDelay)
	switch {
	case f.EmptyReadBudget == 0:
		f.EmptyReadBudget = DefaultFeedEmptyReadBudget
	case math.IsNaN(f.EmptyReadBudget) || math.IsInf(f.EmptyReadBudget, 0):
		return o, fmt.Errorf("engine: FeedOptions.EmptyReadBudget %v is not a number of RU per second", f.EmptyReadBudget)
	}
	switch {
	case f.MaxIdlePeriod < 0:
		f.MaxIdlePeriod = 0
	case f.MaxIdlePeriod == 0:
		f.MaxIdlePeriod = DefaultFeedMaxIdlePeriod
	}
	switch {
	case math.IsNaN(f.ReadsPerChange) || math.IsInf(f.ReadsPerChange, 0):
		return o, fmt.Errorf("engine: FeedOptions.ReadsPerChange %v is not a number", f.ReadsPerChange)
	case f.ReadsPerChange < 0:
		f.ReadsPerChange = 0
	case f.ReadsPerChange == 0:
		f.ReadsPerChange = DefaultFeedReadsPerChange
	}
	if f.WarmHold == 0 {
		f.WarmHold = -1
		if f.EmptyReadBudget < 0 && o.PeerWake == nil {
			// The back-off alone: hold readers warm while work flows.
			// (Under a budget, or with peers waking this replica
			// directly, the feed is not how work arrives quickly.)
			f.WarmHold = DefaultFeedWarmHold
		}
	}
	if f.CheckpointInterval <= 0 {
		f.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.SafetySweepInterval <= 0 {
		o.SafetySweepInterval = DefaultSafetySweepInterval
	}
	if o.IdleLeave <= 0 {
		o.IdleLeave = DefaultIdleLeave
	}
	if o.AwaitHold == 0 {
		o.AwaitHold = DefaultAwaitHold
	}
	if o.ReplicaID == "" {
		o.ReplicaID = leasestore.DefaultReplicaID()
	}
	if o.Clock == nil {
		o.Clock = clock.System{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	o.Leases, o.Feed = &l, &f
	if o.PeerWake != nil {
		pw := *o.PeerWake
		pw.withDefaults()
		if err := pw.check(); err != nil {
			return o, err
		}
		o.PeerWake = &pw
	}
	return o, nil
}
