package leasestore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/internal/epk"
	"github.com/durafeed/durafeed/slots"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultPartitionKeyValue is the reserved logical partition holding
	// every lease and heartbeat document.
	DefaultPartitionKeyValue = "$leases"
	// DefaultLeaseExpiry is how long a replica's heartbeat may stay
	// unchanged, on an observer's own monotonic clock, before the observer
	// considers the replica dead and takes its leases. A crashed replica's
	// leases are therefore taken after about 10 s.
	DefaultLeaseExpiry = 10 * time.Second
	// DefaultHeartbeatDivisor gives the default HeartbeatInterval as
	// LeaseExpiry / 5 (2 s): one heartbeat write per replica every 2 s,
	// 30 writes a minute (150 RU a minute at 5 RU a small write).
	DefaultHeartbeatDivisor = 5
	// DefaultWatchActiveDelay is the pause between reads of the lease
	// partition's change feed while lease or membership changes flow.
	DefaultWatchActiveDelay = 50 * time.Millisecond
	// DefaultWatchIdleCeiling is the longest pause between reads of the
	// lease partition's change feed when nothing changes: two requests a
	// second, 120 a minute, mostly 304s at 1 RU (a page carrying another
	// replica's heartbeat costs about 2.4 RU). It bounds how long a
	// graceful hand-off, a join or a steal request waits to be seen.
	DefaultWatchIdleCeiling = 500 * time.Millisecond
	// resyncPeriods is how many heartbeat intervals pass between two full
	// re-reads of the lease partition (the watch's safety net).
	resyncPeriods = 5
)

// Options configures a Store. Every field has a documented default except
// that PartitionKey must name the container's partition key path unless the
// container's own definition is to be used.
type Options struct {
	// ReplicaID names this replica in lease documents ("owner") and in its
	// heartbeat document id ("owner:<ReplicaID>"). It must be unique among
	// running processes. When another process's heartbeat under this id
	// is live, Run takes over from it at once if it ran on the same Host
	// (a restart in place, see Host); otherwise it waits until that
	// heartbeat has been unchanged for LeaseExpiry (e.g. after a crash
	// elsewhere), then claims the leases still naming the id, and fails
	// with ErrDuplicateReplica if it keeps changing. After a Release the
	// id is free at once. At most 200 bytes, no '/', '\\', '?', '#' or
	// control characters. Default: DefaultReplicaID.
	ReplicaID string

	// Host names where this process runs: the machine, the pod or the
	// container replica (default the host name, os.Hostname). A
	// registration whose predecessor under the same ReplicaID ran on the
	// same Host is a restart in place (the platform replaced a crashed
	// process: Kubernetes restarting a pod's container, a Container Apps
	// replica restarted under its name), so the predecessor is gone: Run
	// takes over its registration at once instead of waiting LeaseExpiry.
	// Rewriting the heartbeat document fences the predecessor, should it
	// still run (its next heartbeat finds another incarnation and stops
	// with ErrDuplicateReplica); the leases naming the id are claimed at
	// the first balancing round, each claim changing the lease's ETag; and
	// OnExpired gets the predecessor's Holder, so its locks are freed
	// (each conditional write of theirs then fails). Two processes on one
	// Host must therefore not share a ReplicaID. "-": never take over at
	// once.
	Host string

	// PartitionKey is the container's partition key path, e.g. "/instanceId"
	// (durafeed's). Only single, top-level paths are supported. Default: the
	// path of the container's definition (read once at Run); when set it
	// must match that definition.
	PartitionKey string

	// PartitionKeyValue is the logical partition reserved for lease and
	// heartbeat documents. Default "$leases".
	PartitionKeyValue string

	// Ranges are the EPK ranges of the leases: lease i covers Ranges[i].
	// They must be non-empty and must not overlap. Default
	// slots.Ranges(slots.DefaultBlocks), durafeed's lease layout. Every replica must use the
	// same ranges; Run fails with ErrRangesMismatch otherwise.
	Ranges []epk.Range

	// LeaseExpiry is how long an observer waits, on its own monotonic clock,
	// after last seeing another replica's heartbeat change before taking its
	// leases. Default 10 s.
	LeaseExpiry time.Duration

	// HeartbeatInterval is the period of this replica's heartbeat write.
	// Default LeaseExpiry/5; at most LeaseExpiry/2. A replica that has not
	// written its heartbeat successfully for LeaseExpiry - HeartbeatInterval
	// closes Done of all its leases (self-fencing), before anyone else may
	// take them.
	HeartbeatInterval time.Duration

	// WatchActiveDelay is the pause between change-feed reads of the lease
	// partition while changes flow. Default 50 ms.
	WatchActiveDelay time.Duration

	// WatchIdleCeiling is the longest pause between change-feed reads of the
	// lease partition; the pause doubles from WatchActiveDelay after every
	// read without lease or membership changes. Default 500 ms.
	WatchIdleCeiling time.Duration

	// Logger receives operational logs. Default zap.NewNop().
	Logger *zap.Logger

	// OnChange, when set, is called for every ownership change of this
	// replica: a lease acquired (before it is delivered on Acquired) or
	// lost (after its Done is closed). It is called synchronously with the
	// Store's lock held, in the order the changes happen, so it must return
	// quickly and must not call the Store; hand the event to another
	// goroutine (e.g. to start a catch-up scan of a newly acquired slot
	// block).
	OnChange func(Event)

	// OnExpired, when set, is called after this replica's take-over batch
	// has declared another replica's registration dead (its heartbeat
	// document rewritten "expired", its leases taken), with that
	// replica's Holder name (see Store.Holder). From then on the dead
	// registration can no longer write its heartbeat, and every lease it
	// held has moved, so locks it stamped with that name may be freed at
	// once. It is called from the balancing goroutine without the Store's
	// lock; it must return quickly and must not block on the Store.
	OnExpired func(holder string)

	// OnWrote, when set, is called after this replica wrote lease
	// documents that another replica acts on: a hand-off (balancing or a
	// graceful leave), a steal request or its refusal. The others see
	// such a write at their next watch read (within WatchIdleCeiling); an
	// engine uses the call to tell them at once (Store.Kick on their
	// side). It is called without the Store's lock, from the balancing
	// goroutine or Release; it must return quickly.
	OnWrote func()

	// OnDocument, when set, receives every document of the lease partition
	// that is neither a lease nor a heartbeat document (e.g. an
	// application's own coordination documents kept beside the leases), as
	// the watch reads it: from the change feed (latest version, deletions
	// not shown) and again at every full re-read. It is called from the
	// watch goroutine without the Store's lock, in feed order, so it must
	// return quickly and must not block on the Store.
	OnDocument func(raw []byte)

	// WakeAddr and WakeKey, when set, are published in every write of this
	// replica's heartbeat document: the address its peer wake receiver
	// listens on and the key senders authenticate with (package peerwake;
	// the key is readable by whoever may read the container, which the
	// wake channel's threat model allows). Other replicas find them with
	// Store.WakeEndpoint, clients with ReadView.
	WakeAddr, WakeKey string

	// WakeHello, when set, is published beside WakeAddr: the receiver
	// takes hello frames (package peerwake), so senders may name
	// themselves on their connections to it (WakeEndpoint.Hello).
	WakeHello bool

	// WakesSent, when set, is called at every write of the heartbeat
	// document (from the heartbeat goroutine, without the Store's lock;
	// it must return quickly) for the number of peer wake frames this
	// process has written to each replica, by ReplicaID, counted from a
	// start of its own (the engine: its sender's). The heartbeat
	// publishes the non-zero counts of replicas that have a heartbeat
	// document, so that each can compare them with what it received
	// (Store.WakesReported). A count that falls, or a new incarnation,
	// tells an observer the counting started again.
	WakesSent func() map[string]uint64

	// WallClock is the wall-clock source used only for informational
	// timestamps written into documents (checkpointAt, acquiredAt,
	// writtenAt). Liveness never reads it: expiry is measured on the
	// monotonic clock of the observing process. Default time.Now.
	WallClock func() time.Time
}

// reservedProps are document properties the store writes itself; the
// partition key property must not be one of them.
var reservedProps = map[string]bool{
	"id": true, "type": true, "index": true, "range": true, "owner": true,
	"epoch": true, "rev": true, "continuation": true, "checkpointAt": true,
	"acquiredAt": true, "stealBy": true, "replica": true, "incarnation": true,
	"seq": true, "state": true, "expiredBy": true, "writtenAt": true,
	"wakeHello": true, "wakesSent": true, "host": true,
}

func (o Options) withDefaults() (Options, error) {
	if o.ReplicaID == "" {
		o.ReplicaID = DefaultReplicaID()
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if err := checkReplicaID(o.ReplicaID); err != nil {
		return o, err
	}
	if o.PartitionKey != "" {
		if _, err := pkProperty(o.PartitionKey); err != nil {
			return o, err
		}
	}
	if o.PartitionKeyValue == "" {
		o.PartitionKeyValue = DefaultPartitionKeyValue
	}
	if o.Ranges == nil {
		o.Ranges = slots.Ranges(slots.DefaultBlocks)
	}
	if err := checkRanges(o.Ranges); err != nil {
		return o, err
	}
	if o.LeaseExpiry == 0 {
		o.LeaseExpiry = DefaultLeaseExpiry
	}
	if o.LeaseExpiry < 0 {
		return o, fmt.Errorf("leasestore: LeaseExpiry %v is negative", o.LeaseExpiry)
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = o.LeaseExpiry / DefaultHeartbeatDivisor
	}
	if o.HeartbeatInterval <= 0 || o.HeartbeatInterval > o.LeaseExpiry/2 {
		return o, fmt.Errorf("leasestore: HeartbeatInterval %v must be positive and at most LeaseExpiry/2 (%v)", o.HeartbeatInterval, o.LeaseExpiry/2)
	}
	if o.WatchActiveDelay == 0 {
		o.WatchActiveDelay = DefaultWatchActiveDelay
	}
	if o.WatchIdleCeiling == 0 {
		o.WatchIdleCeiling = DefaultWatchIdleCeiling
	}
	if o.WatchActiveDelay < 0 || o.WatchIdleCeiling < o.WatchActiveDelay {
		return o, fmt.Errorf("leasestore: need 0 <= WatchActiveDelay (%v) <= WatchIdleCeiling (%v)", o.WatchActiveDelay, o.WatchIdleCeiling)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.WallClock == nil {
		o.WallClock = time.Now
	}
	return o, nil
}

func checkReplicaID(id string) error {
	if len(id) > 200 {
		return fmt.Errorf("leasestore: ReplicaID is %d bytes, at most 200 allowed", len(id))
	}
	if strings.TrimSpace(id) != id {
		return fmt.Errorf("leasestore: ReplicaID %q has leading or trailing spaces", id)
	}
	for _, r := range id {
		if r == '/' || r == '\\' || r == '?' || r == '#' || unicode.IsControl(r) {
			return fmt.Errorf("leasestore: ReplicaID %q contains %q, which a document id cannot hold", id, r)
		}
	}
	return nil
}

// pkProperty returns the property name of a top-level partition key path.
func pkProperty(path string) (string, error) {
	name, ok := strings.CutPrefix(path, "/")
	if !ok || name == "" || strings.ContainsAny(name, `/"'[]\`) {
		return "", fmt.Errorf("leasestore: partition key path %q is not a single top-level path like \"/instanceId\"", path)
	}
	if reservedProps[name] {
		return "", fmt.Errorf("leasestore: partition key property %q collides with a lease document property", name)
	}
	return name, nil
}

func checkRanges(rs []epk.Range) error {
	if len(rs) == 0 {
		return errors.New("leasestore: no lease ranges (Options.Ranges is empty; slots.Ranges returns nil for invalid arguments)")
	}
	for i, r := range rs {
		if epk.Compare(r.Min, r.Max) >= 0 {
			return fmt.Errorf("leasestore: Ranges[%d] [%q, %q) is empty", i, r.Min, r.Max)
		}
		for j := 0; j < i; j++ {
			q := rs[j]
			if epk.Compare(r.Min, q.Max) < 0 && epk.Compare(q.Min, r.Max) < 0 {
				return fmt.Errorf("leasestore: Ranges[%d] and Ranges[%d] overlap", j, i)
			}
		}
	}
	return nil
}

// DefaultReplicaID returns the replica id a process gets by default:
// the name the platform gives its replica and keeps across a restart in
// place when there is one (Container Apps' CONTAINER_APP_REPLICA_NAME; a
// Kubernetes pod's host name, the pod name, when KUBERNETES_SERVICE_HOST
// is set), so that a restarted replica takes over its predecessor's
// registration at once (Options.Host); otherwise a new id, the host name
// and 8 random hex digits. Characters a document id cannot hold become
// '-', and the name is cut to 100 bytes ("replica" when empty).
func DefaultReplicaID() string {
	return defaultReplicaID(os.Getenv, os.Hostname)
}

// defaultReplicaID is DefaultReplicaID on the given environment.
func defaultReplicaID(getenv func(string) string, hostname func() (string, error)) string {
	host, _ := hostname()
	switch {
	case getenv("CONTAINER_APP_REPLICA_NAME") != "":
		return idSafe(getenv("CONTAINER_APP_REPLICA_NAME"))
	case getenv("KUBERNETES_SERVICE_HOST") != "" && host != "":
		return idSafe(host)
	}
	return idSafe(host) + "-" + randomHex(4)
}

// idSafe makes name usable in a replica id: the characters a document id
// cannot hold replaced by '-', at most 100 bytes, "replica" when empty.
func idSafe(name string) string {
	name = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == '?' || r == '#' || unicode.IsControl(r) || unicode.IsSpace(r) {
			return '-'
		}
		return r
	}, name)
	if len(name) > 100 {
		name = name[:100]
	}
	if name == "" {
		name = "replica"
	}
	return name
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
