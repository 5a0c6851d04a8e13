// Package engine is durafeed's event-driven dispatcher: change-feed
// processors on slot blocks leased across replicas push wakeups into
// per-slot hubs, so fetches long-poll until work lands, and outbox
// delivery and multi-replica slot ownership both ride on the feed. It
// dispatches over a store (package store) and delivers intents through
// package outbox; package provider composes it.
//
// # Event-driven mode
//
// Components, all owned by the Engine (every goroutine stops at Close):
//
//   - wakeup hubs (package wakeup), one for the orchestrator queue (keys:
//     instance, and the instance's lock expiry), one for the worker queue
//     (one key per worker document), one for deferred checks;
//   - a session, while the replica takes part in dispatch: a
//     leasestore.Store in the store's own container (partition
//     "$leases"; LeaseOptions.Blocks leases of slots.Count/Blocks slots,
//     each lease's range that of its block, slots.Ranges; ReplicaID default
//     leasestore.DefaultReplicaID), a changefeed.Processor on the leases it holds, and
//     the catch-up, sweep, deferred-check, hint and idle loops.
//
// Joining: a replica joins at its first FetchOrchestrationItem and leaves
// (handing its leases off like Close does) when no orchestration fetch has
// run for Options.IdleLeave (5 s), e.g. after its runtime stopped
// dispatching; it rejoins at the next fetch (Join joins at once, Leave
// leaves at once). A replica used only as a client never owns slots it
// would not serve. Lease ownership means orchestration responsibility:
// every turn of an instance runs on the owner of its slot. A replica that
// never fetches orchestrations (a worker-only node) or has not joined yet
// serves FetchWorkItem by polling the worker queue across all slots (at
// the start of the fetch, then at most once a second until pollTimeout).
//
// What flows: the processor reads the feed of each held lease (StartFrom
// now, then from the lease's checkpoint; checkpoints at most every 5 s per
// lease, and never for pages holding only documents the handler ignores:
// history, KV, execution records and the lease partition's own documents,
// whose writes would otherwise keep the reader of their range busy). The
// handler turns each changed document into work:
//
//   - orch_queue: Signal(slot, instance, visibleAt) on the orchestration
//     hub, or SignalAt(lockedUntil) on the lock-expiry key when locked;
//   - worker_queue: Signal(slot, document, max(visibleAt, lockedUntil));
//   - outbox_intent: delivered by the owner of the source slot (409 means
//     delivered; a retryable failure fails the batch, which the processor
//     offers again; a permanent one is left for the safety sweep);
//   - instance: a release of a lock that held back signalled work wakes
//     it; a pending publication or deletion gets a deferred check at
//     the store's RepairAge (resp. its DeletionTimeout) that finishes it.
//
// Local writes signal the local hubs directly when the slot is owned here,
// so a replica's own effects never wait for the feed: enqueues, an ack's
// new queue documents (after publication for a large turn), a work ack's
// completion, abandon with its delay, the expiry of every lock this
// process takes, and deliveries of outbox targets. An ack whose source
// slot is owned here only wakes its feed reader for the intents.
//
// Fetch long-polls: it waits on its hub until pollTimeout (honouring ctx)
// and returns nil after it. Every fetch waits on all slots: only owned
// (and hinted) slots are ever signalled, each wakeup goes to exactly one
// waiter (oldest first), so the hub does what the polling mode's shares
// do, without idle fetchers on empty shares. An Instance wakeup calls
// lockInstance directly (no cross-partition query); a worker wakeup locks
// its document with one patch whose condition holds only for a visible,
// unlocked item without a session and of a tag the fetch takes
// (store.Store.TryLockWork), and point-reads the document only when that
// condition fails, to learn why. The store remembers the version its lock
// left, so that the ack is one batch If-Match that version, with no read
// first (a read only when the batch is refused on the version). A Scan wakeup (a slot whose
// pending wakeups overflowed, or a hinted slot) runs the candidate query
// for that slot only and signals what it finds, oldest first. Wakeup
// rules: an instance found locked is re-signalled at its lock's expiry
// (and, when this replica or the feed sees the lock released, at once);
// the expiry wakeup of a lock this process already released, or that the
// feed showed released, is dropped without I/O; a turn that left messages queued (over 99) wakes the rest
// at its release; work the fetch cannot take (other tags, a session, a
// pinned version its filter refuses) is parked for a fetch that can, and
// advertised in the backlog hint when no local fetch can (a session owned
// by another node, a version no local dispatcher runs), so that other
// replicas try it; a fetch that loses the lock race for an instance
// signals it again at once (the winner's turn need not hold the message
// its wakeup was for). A replica runs one lock attempt per instance at a
// time: a wakeup taken while another fetch of the replica is locking the
// same instance is set aside, and the attempt in flight signals the
// instance again if it did not take the lock, or marks it so that its
// release does (lockOnce; without it, the completions of a large fan-out
// sent every fetch of the owner into the same losing race, each reading
// the instance's messages and history).
//
// Reading for the lock (event-driven mode): the polling mode's point read
// of the instance document is gone. The store remembers (its instance
// cache, store.Options.InstanceCacheSize entries of at most 4 KiB) the unlocked
// instance document each of its acks and abandons wrote, and the locked
// document each of its lock batches and renewals wrote, each with the
// write's ETag and session token. A fetch of a remembered instance runs
// the turn-input query alone, carrying that session token (on an account
// with session consistency it then reads at least what the write left),
// and its lock batch replaces the instance document If-Match the
// remembered ETag; an ack commits from its lock's remembered document,
// If-Match likewise. Otherwise the first query also returns the instance
// document: with no committed turn (a new instance) nothing else is read;
// with one, the turn-input query follows with the first query's session
// token, so history and KV are read after the document the lock is
// conditional on. A stale remembered document fails its batch (412) and
// the read path runs at once: a turn is 3 requests (query, lock, commit)
// where the polling mode needs 5 beside its candidate query.
//
// Locking from the feed's heads (event-driven mode): the change-feed
// handler keeps each unlocked orchestrator message it delivers (its ETag
// and work item; at most 16 per instance, 4 KiB each, 4 MiB and 4096
// instances in all). A fetch for an instance with heads sends its lock
// batch at the same time as the turn-input query instead of after it, so
// a feed-woken turn waits one round trip after the feed read, not two.
// The batch replaces the remembered instance document If-Match (or, for a
// first execution's start with nothing remembered, creates it) and locks
// each head If-Match its ETag: it succeeds only if the heads still wait
// and the document, hence the history and KV the query reads, is the one
// remembered. Messages the heads miss (not yet delivered, delivered
// before this replica owned the slot, or evicted) are in the query's
// answer and join the turn, in enqueue order, in a second batch under the
// lock. A stale head or document fails the batch (412, 404 or 409) and
// the read path goes on with the query already made; a lock that cannot
// become a coherent turn (a message that must be dropped, more than a
// turn takes) is abandoned without counting the attempt. Messages a turn
// of this process locked are kept out of the heads, so a feed page read
// before the lock but handled after it brings no stale head back; the
// heads of a lease's slots are dropped when the lease goes to another
// replica, and all of them when the replica leaves dispatch.
//
// The first fetch of a session waits (at most 3 s) until the replica owns
// its share (the smallest a balanced group leaves a replica:
// floor(leases/replicas)) and has run the catch-up, so a zero poll timeout
// still sees queued work.
//
// Newly owned slots: on a lease acquired, one catch-up query (all blocks
// acquired together, one cross-partition query) signals every queue
// document of those slots, including future and locked ones (the
// SignalScan of each slot, coalesced into one query); a lease never read
// before is caught up again once its reader's first read has fixed the
// feed's starting point (changefeed Options.OnPositioned), covering the
// writes in between however late that read comes (a fixed one-second
// timer did this before and, under load, left such writes to the safety
// sweep: TestLateFirstFeedReadLosesNothing). On a lease lost, its slots
// are dropped from the hubs.
//
// Safety sweep (every SafetySweepInterval, default 60 s, jittered): one
// cross-partition query for visible unlocked queue documents of owned
// slots, outbox intents older than the store's RepairAge, and instances
// with a stale publication or deletion (store.Stale, then outbox.Repair:
// the pass polling's reconciler runs too).
//
// Backlog hints: worker documents live in the instance's partition, seen
// only by the slot owner's feed. When the owner's due worker backlog
// exceeds the number of its worker fetchers (the peak of concurrent
// FetchWorkItem calls), or holds items none of them may take, for two
// checks 100 ms apart, it upserts a hint document "hint:<replica>" in the
// lease partition (slots with backlog, count, sequence number), refreshed
// every 2 s while it lasts and rewritten with no slots once drained
// (deleted at Close). Other replicas see it through their lease watch
// (leasestore Options.OnDocument) and answer with Scan wakeups on their
// worker hub for the hinted slots, run with their own tag and session
// conditions; they scan again while the hint lasts, once the last scan's
// findings are taken, and forget a hint whose sequence number has not
// moved for 10 s. A hint of items only other replicas may take (its
// owner parked them: tags, sessions; hintDoc.Parked) is followed at once;
// an overflow hint, whose items the owner could take itself, only while
// the helper has no due work of its own (wakeup.Hub.HasDue): under load
// on every replica, scans for one another took the fetches from each
// one's own backlog and moved nothing (duroxide's stress workload on 3
// replicas: 4,479 scans for 5,000 activities, and throughput no better
// than one replica's). Orchestration turns never move: only activities spread.
// A helper signals its scan's due items from a random place in the list
// (the owner goes oldest first), so that the replicas do not race for the
// same item at every step. The owner, which holds a wakeup for every item
// of its slots, drops without a read the wakeups of items its feed showed
// taken: acked (a completion created by a worker's ack names the item the
// ack deleted, store.FeedDoc.Settles) or locked (wakeups from before the
// lock's expiry; a version without a lock clears the mark). Stats counts
// both (WorkSettled, WorkSkipped).
//
// # Defaults and cost (event-driven)
//
// Simulated request units (cosmosemu/knobs' DefaultChargeModel: point
// write 5 RU, change-feed 304 1 RU, query 2.3 RU per physical partition
// scanned + 0.1 per item), one idle replica, 4 physical partitions:
//
//	polling baseline:   2 dispatchers x 1 query/s x 4 partitions x 2.3 = 18.4
//	                    reconciler: 1 query / 2 s x 9.2               =  4.6
//	                    total                                 about 23 RU/s
//	                    (before the split: 3 reconciler queries, 32.2)
//	event-driven:       heartbeat 5 RU / 4 s                          = 1.25
//	                    lease watch: 1 RU / 2 s (Expiry / 5)          = 0.5
//	                      + own heartbeat page (+1.4 RU / 4 s)        = 0.35
//	                    lease re-read query every 5 heartbeats        = 0.16
//	                    change-feed reads, bounded by MaxIdlePeriod
//	                      (FeedOptions): each of 4 partitions
//	                      every 500 ms                                = 8
//	                    safety sweep: 9.2 RU / 60 s                   = 0.15
//	                    total                                about 10.4 RU/s
//
// that is about 45% of polling. The earlier target of a fifth (reads
// paced by the 1.5 RU/s budget alone, each partition every 2.7 s: 3.9
// RU/s, measured 16.5–18.9%, docs/measurements/idle-cost.md) left
// another process's write waiting up to 2.7 s, longer than polling's
// 1 s; the bound buys a wait no longer than polling's, and with the peer
// wake channel on (no bound by default) the fifth holds again. The
// levers, in that order of weight: the bound and the budget (linear:
// they buy the pick-up latency of other processes' writes when the peer
// wake channel is off), the heartbeat (HeartbeatInterval,
// bounded by self-fencing at LeaseExpiry - HeartbeatInterval; a patch
// would cost what a replace does, a write's charge following its size
// and indexed terms, and a heartbeat document is under 1 KiB with two
// indexed terms), the lease watch (WatchIdleCeiling, which bounds a
// hand-off and a join when the peer wake channel is off), the sweep.
// Activity adds checkpoints, at most one write per active lease per 5 s.
//
// Latency: a write by the owning replica (enqueue, an ack's new work, an
// abandon) wakes a blocked fetch in microseconds, so enqueue-to-fetch is
// the lock's own round trips (about 10 ms on cosmosemu under -race,
// TestEventDrivenLocalWakeLatency; the polling mode averages half its 1 s
// poll). A write by another process reaches the owner through the peer
// wake channel when it is on (the fetch's own round trips after it), and
// otherwise through the owner's feed: within MaxIdlePeriod (500 ms; half
// that on average) plus a read, then every ActiveDelay (20 ms) while
// reads keep finding changes. A write by a replica that takes part in
// dispatch, in a slot another owns, runs on the writer when one of its
// fetches is idle (unless Options.DisableEager); a client's enqueue then
// locks its turn in the same write (LockOnWrite, HandOver), so the fetch
// returns it with no request of its own.
// Liveness: LeaseExpiry 10 s (a dead replica's slots move after it, then
// the new owner's catch-up finds its work, and the take-over frees the
// dead replica's locks); a graceful Close hands off within a write and a
// lease kick over the peer channel, or within WatchIdleCeiling (2 s)
// without it; a joining replica gets its share through steals within
// about two heartbeats.
//
// Conformance: the suite runs in both modes (TestConformance polling,
// TestConformanceEventDriven with long polling). Its scenarios expect any
// replica to fetch any instance, which slot ownership deliberately does
// not give, so the event-driven run gives each provider it opens its own
// lease partition (a complete replica owning every slot); lease sharing
// is covered by the multi-replica tests.
//
// # Files
//
// engine.go: the Engine, its session (start, leave, Close) and lease
// events; feed.go: the change-feed handler, catch-up and readiness;
// signals.go: what writes and feed documents signal on the hubs (locks,
// settled and locked work); keys.go: the hub and peer wake keys;
// siblings.go: the sibling wait and the await hold; fetch.go: the two
// fetches; heads.go: the feed heads; hints.go: backlog hints; sweep.go:
// the safety sweep and the deferred checks; peerwake.go and watch.go: the
// peer wake channel and instance watches over it; silent.go: finding a
// channel that swallows the wakes sent on it.
package engine
