// Package leasestore keeps durafeed's change-feed leases as documents in
// Azure Cosmos DB and coordinates their ownership among the replicas of a
// worker service. A lease covers a contiguous block of dispatch slots (an
// EPK range of the container) and carries its owner, an epoch and its
// change-feed continuation. *Store implements changefeed.LeaseSource; the
// leases it delivers implement changefeed.Lease.
//
//	s, err := leasestore.New(container, leasestore.Options{PartitionKey: "/instanceId"})
//	go s.Run(ctx)                 // heartbeat, watch, acquire, balance
//	for l := range s.Acquired() { // each lease once; l.Done() closes when lost
//		...
//	}
//	s.Release(shutdownCtx)        // graceful hand-off
//
// # Storage
//
// Lease documents live in the application's own container, in a reserved
// logical partition (Options.PartitionKeyValue, default "$leases", under the
// container's partition key path, /instanceId for durafeed). Nothing extra
// is provisioned or granted (one container, one RBAC assignment, one Bicep
// resource); every lease operation is a single-partition point operation or
// transactional batch; and every replica watches all lease and heartbeat
// changes through the change feed of that one partition key, which costs a
// 304 (about 1 RU) when nothing changed.
//
// Documents (besides the partition key property):
//
//	lease:<i>   {"type":"lease", "index":i, "range":{"min","max"},
//	             "owner": ReplicaID or "" (free), "epoch", "rev",
//	             "continuation", "checkpointAt", "acquiredAt", "stealBy"}
//	owner:<id>  {"type":"owner", "replica", "incarnation", "seq",
//	             "state": "live"|"leaving"|"expired", "expiredBy", "writtenAt"}
//
// Options.Ranges gives the leases (default slots.Ranges(slots.DefaultBlocks):
// 8 blocks of 32 dispatch slots). Run creates missing lease documents (409 means another
// replica did) and fails with ErrRangesMismatch when stored ranges differ
// from the configuration (changing the layout means deleting the lease
// documents while no replica runs). epoch is incremented on every ownership
// change, rev on every write (it orders versions seen through the feed,
// queries and write answers). Every write is a compare-and-swap (If-Match
// the ETag the decision was made from); a lost one means someone else
// changed the document: it is re-read and decided again. checkpointAt,
// acquiredAt and writtenAt are the writer's wall clock, informational only.
//
// # Liveness
//
// Leases are not renewed individually. Each replica rewrites its own
// heartbeat document every HeartbeatInterval (default LeaseExpiry/5 = 2 s),
// so renewal costs one write per replica per period whatever the number of
// leases. An observer considers another replica dead when that replica's
// heartbeat ETag has not changed for LeaseExpiry (default 10 s) measured on
// the observer's own monotonic clock since it last saw it change (a replica
// first seen gets a full LeaseExpiry); timestamps written by different
// machines are never compared, so clock skew cannot expire anyone.
//
// A lease whose owner is dead (or "") may be acquired: owner = me,
// epoch+1. Taking over leases of a dead owner is one transactional batch
// per owner that also rewrites the owner's heartbeat document as "expired"
// If-Match the version the observer judged dead (or creates it as
// "expired" when it is absent). If the owner wrote a heartbeat in the
// meantime, the batch fails and nothing is taken, so even an observer with
// a stale view cannot take a live replica's leases; a replica finding its
// heartbeat declared expired gives up all its leases at once and registers
// anew.
//
// A replica's identity is its ReplicaID. Run does not take over a heartbeat
// document of its id that another process keeps writing: it waits until
// that heartbeat has been unchanged for LeaseExpiry (a crashed predecessor;
// it then claims the leases still naming the id), and fails with
// ErrDuplicateReplica if it keeps changing. A replica that finds its
// heartbeat rewritten by another incarnation while running stops the same
// way. After Release the id is free at once.
//
// Self-fencing: a replica that has not written its heartbeat successfully
// for LeaseExpiry - HeartbeatInterval, counted from the sending of the last
// successful write, closes Done of all its leases. An observer counts
// LeaseExpiry from the moment it saw that write, which is later, so the old
// owner has let go before anyone may take over (given clocks that advance
// at about the same rate: HeartbeatInterval is the margin). A write answered
// after that deadline is not used.
//
// # Balancing
//
// With L live replicas (their heartbeat live and changing) and N leases,
// each replica acquires free or dead leases, in random order, while it
// holds fewer than ceil(N/L). When none is left, an under-loaded replica
// asks the most loaded live owner for a random lease of its (stealBy) while
// that owner holds at least two more than it does, counting every pending
// request, its own and other live replicas', as granted (so that an owner
// that has just handed leases to a newcomer does not steal from one about
// to hand over the newcomer's others); the owner closes Done of that lease
// and then hands it over (owner = thief, epoch+1), and the thief claims it
// (epoch+1 again). The owner refuses a request from a replica that
// is not live or does not hold at least two leases fewer than it. Because
// a steal needs the owner's consent, no lease is ever believed held by two
// replicas; because every move reduces the spread, balancing converges to
// within one lease of even and never moves a lease back and forth (the
// decision's "steal from owners above ceil" is generalised to "two above
// me", which is what guarantees within-one: 6/6/4 has nobody above ceil = 6).
// After a lost compare-and-swap or a refused request a replica pauses
// acquiring and stealing for a random WatchActiveDelay + [0, HeartbeatInterval/4).
//
// # Watching
//
// Each replica reads the change feed of the lease partition (one request a
// poll): every WatchActiveDelay (default 50 ms) while lease ownership or
// membership changes flow, doubling up to WatchIdleCeiling (default 500 ms)
// otherwise; routine heartbeats and checkpoints do not count as changes. A
// join, a graceful leave, a steal request or a hand-off therefore takes
// effect at the next feed read rather than a lease period later; sooner
// when the writer tells the replicas concerned (Options.OnWrote on its
// side, Store.Kick on theirs: an engine does so over its peer wake
// channel), which lets the idle ceiling be long. Every
// five heartbeat periods one single-partition query re-reads all documents
// as a safety net (and notices deleted heartbeat documents, which the feed
// does not show). Heartbeat documents of replicas dead for LeaseExpiry that
// no lease mentions are deleted.
//
// # Cost at the defaults, per replica
//
// Idle: 30 heartbeat writes a minute (5 RU each), 120 feed polls a minute
// (1 RU for a 304; about 2.4 RU when a page carries another replica's
// heartbeat or a checkpoint), 6 re-read queries a minute (2.3 RU + 0.1 per
// document): 156 requests and about 350 RU a minute per replica with three
// replicas and 16 leases (about 6 RU/s; BenchmarkIdleCost, on cosmosemu's
// simulated charges). Feed polls dominate the request count: raising
// WatchIdleCeiling to 1 s halves them but lengthens hand-offs and joins.
// Checkpoint is one write. An ownership move costs two to three writes.
//
// # Graceful shutdown
//
// Release closes Done of every held lease first, marks the heartbeat
// "leaving", hands each lease to the least loaded live replica (owner =
// target, epoch+1; owner "" when none is live) and deletes the heartbeat
// document. The targets see the hand-off at their next feed read (within
// WatchIdleCeiling) and claim the leases: a graceful stop hands off in well
// under a second at the defaults.
//
// # Checkpoints
//
// Lease.Checkpoint is a compare-and-swap on the lease document requiring
// owner == this replica and the epoch the lease was acquired under; after a
// lost compare-and-swap caused by an unrelated write (a steal request) it
// re-reads and retries. Once Done is closed, or when the document shows
// another owner or epoch, it fails with an error wrapping
// changefeed.ErrLeaseLost and closes Done.
//
// # Documents edited or deleted by hand
//
// A lease document that does not decode as lease i (fields of the wrong
// type, an index that does not match its id, no range) is skipped by the
// watch (logged at Warn) and repaired by the first write that meets it (a
// checkpoint, a claim, a take-over, a steal request, whose compare-and-swap
// fails on it): it is rewritten, If-Match the corrupt version, as a free
// lease over its configured range with the last known continuation, the
// next epoch, and a rev that jumps to the wall clock in milliseconds (revs
// otherwise grow by one per write, so every replica takes the repaired
// version as newer, whatever it saw last). A lease document found missing
// is re-created the same way but without a continuation (it starts as a
// lease never read): the container itself may have been deleted and
// created again, and a continuation from before would skip the new
// container's first changes. A holder that sees the free document loses the
// lease; the next balancing round acquires it. A replica whose heartbeat
// document was deleted gives up its leases at its next heartbeat (as if
// declared dead) and registers anew.
//
// # Hooks
//
// Options.OnChange reports every acquisition and loss synchronously, in
// order (e.g. to start a catch-up scan of a newly acquired slot block);
// Owned and Members give snapshots. Options.OnDocument hands over every
// other document of the lease partition the watch reads (an application's
// own small coordination documents, such as durafeed's backlog hints), so
// they travel on the same feed at no extra request.
package leasestore
