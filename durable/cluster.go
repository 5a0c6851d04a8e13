package durable

import (
	"context"
	"time"
)

// ClusterInspector is an optional capability (see PollPacer) of a
// provider whose replicas share dispatch: it describes how, as this
// replica sees it now, for dashboards and diagnostics. The view is the
// replica's own (its lease and membership state, its counters), at most a
// lease-watch period behind the store; a call costs at most one read of
// the provider's coordination data, and answers within a second of each
// other may share it. Nothing in it is a payload.
type ClusterInspector interface {
	// InspectCluster returns the replica's current view of dispatch.
	InspectCluster(ctx context.Context) (ClusterView, error)
}

// The dispatch modes of ClusterView.Mode.
const (
	// DispatchEventDriven: replicas lease blocks of dispatch slots and
	// wake their fetches from the change feed.
	DispatchEventDriven = "event-driven"
	// DispatchPolling: every replica queries for work; there are no
	// leases or members.
	DispatchPolling = "polling"
)

// ClusterView is a replica's view of dispatch (ClusterInspector).
type ClusterView struct {
	// Mode is DispatchEventDriven or DispatchPolling.
	Mode string
	// Replica is this replica's id ("" when the mode names none).
	Replica string
	// Replicas are the replicas known from their heartbeats or as lease
	// owners, sorted by id (empty in polling mode).
	Replicas []ClusterReplica
	// Leases are the lease blocks of dispatch slots, by first slot
	// (empty in polling mode, or while this replica has not joined).
	Leases []ClusterLease
	// Feed holds the dispatcher's feed figures; nil when it has none.
	Feed *ClusterFeed
	// Note says what the view lacks and why, for a person ("" when
	// nothing).
	Note string
	// ObservedAt is when the view was made.
	ObservedAt time.Time
}

// ClusterReplica is one replica of a ClusterView.
type ClusterReplica struct {
	ID string
	// Host is where the replica runs, as its heartbeat says ("" unknown).
	Host string
	// LastHeartbeat is when the replica last wrote its heartbeat, by its
	// own clock (informational; zero when unknown).
	LastHeartbeat time.Time
	// State is its heartbeat's state: "live", "leaving" or "expired"
	// ("" when no heartbeat was read).
	State string
	// Live reports whether this replica counts it live now.
	Live bool
	// Leases is how many lease blocks it holds.
	Leases int
	// Self marks this replica.
	Self bool
}

// ClusterLease is one lease block of dispatch slots.
type ClusterLease struct {
	// FirstSlot and LastSlot bound the block (inclusive).
	FirstSlot, LastSlot int
	// Owner is the holder's replica id; "" for a free block.
	Owner string
	// Since is when the block passed to Owner, by the clock of the
	// replica that wrote the change (zero when unknown).
	Since time.Time
	// Epoch counts the block's ownership changes.
	Epoch int64
}

// ClusterFeed holds what the dispatcher knows of its feed, from its own
// state and counters.
type ClusterFeed struct {
	// Heads is how many waiting messages the feed has shown and no fetch
	// has taken yet.
	Heads int
	// DueOrchestrator and DueWorker count the wakeups fetches may take
	// now; Later counts those due later (timers, lock expiries).
	DueOrchestrator, DueWorker, Later int
	// FeedDelivered and SweepDelivered count the outbox intents delivered
	// by the feed handler and by the safety sweep; Catchups the catch-up
	// queries run (since the provider started).
	FeedDelivered, SweepDelivered, Catchups int64
}
