// Package provider is durafeed's Azure Cosmos DB implementation of
// durable.Provider and durable.ProviderAdmin. Config.Mode selects
// ModeEventDriven (the default: fetches woken by the container's change
// feed, see "Event-driven mode" below) or ModePolling (the seeds'
// algorithm, the benchmark's baseline).
//
//	p, err := provider.New(ctx, provider.Config{Endpoint: ep, Key: key})
//	defer p.Close()
//
// # Data model
//
// One container, partition key /instanceId (hash V2), created when missing
// with a selective indexing policy (payloads never indexed) and composite
// indexes for the queue scan, history reads and status lists. With an Entra
// ID credential creation is skipped unless Config.CreateIfMissing is set
// (data-plane RBAC cannot create resources); a missing container is then an
// error naming database and container. Every document of an instance lives
// in its logical partition, so ids need only be unique there and never
// embed the instance id:
//
//	instance            metadata, lock, custom status, commit records
//	e:<exec>            an execution: status, output, history high-water mark
//	h:<exec>:<event>    one history event (eventData is the wire JSON)
//	kv:<key>            one key of the KV store: the snapshot as the current
//	                    execution started plus that execution's delta;
//	                    "kvclear" marks a clear-all in the current execution
//	                    (fetch returns the snapshot, clients read both; an
//	                    ack that ends the execution merges them)
//	w:<exec>:<activity> a worker-queue item written by ack (random UUID when
//	                    enqueued directly); q:<nonce>:<i> orchestrator items
//	                    written by ack; UUIDs for direct enqueues
//	intent:<key>        an outbox intent; outbox:<key> its delivered document
//	session:<id>        a session, in partition "$session:<id>" (sessions are
//	                    global: one owner per session id across instances)
//
// User strings inside ids (KV keys, session ids, outbox keys) escape
// '/', '\', '?', '#', '%', spaces, control characters and '~' as "~XX";
// '%' is not used because the gateway percent-decodes paths. An id that
// would exceed 1023 bytes becomes prefix "!" sha256-hex, the original kept
// in a field. Instance ids are partition key values: any character, at most
// MaxInstanceIDBytes (1024) UTF-8 bytes; longer is a permanent error that
// writes nothing. A request policy repairs azcosmos v1.5.0's partition key
// header, which is not JSON for characters outside the BMP (emoji).
//
// # Dispatch slots and shares
//
// Every queue document stores dispatchSlot = epk.SlotOf(EPK V2 of the
// instance id, 256): stable across processes and releases, and a block of
// consecutive slots is one EPK range of Cosmos DB's own placement.
// Config.OrchestrationDispatchers / WorkerDispatchers split the slots into
// contiguous shares; each fetch checks out the free share polled least
// recently (behind the slotSource interface) and returns it. With more
// concurrent fetchers than shares an extra fetcher polls the least
// recently polled share instead of waiting. The event-driven mode replaces
// slotSource with slot blocks leased across replicas.
//
// # Fetch (polling mode)
//
// findOrchCandidates: one cross-partition query on the share's slot range
// (no ORDER BY), sorted client-side by enqueuedAt. lockInstance (the entry
// point a wakeup will call directly): point-read the instance document;
// skip it if locked, being deleted, or pinned to a version the capability
// filter refuses (before any history is read); finish or discard a large
// turn's leftovers (below); one single-partition query returns the visible
// unlocked messages, the current execution record and history and the KV
// store; one transactional batch then replaces the instance document
// If-Match its ETag (or creates a "pending" instance document for work
// without an instance; 409 = lost race) with the lock and the locked
// message ids, and patches each message (lock token, lockedUntil,
// attemptCount+1). History read under that ETag is consistent with the
// lock. QueueMessages for an unstarted instance are deleted, not returned;
// undecodable history yields HistoryError with the lock held. A fetch that
// finds nothing returns nil at once (pollTimeout is not waited). A turn
// locks at most 99 messages (the rest stay queued, oldest first).
// Lock tokens carry the instance (and work item) id so that ack, abandon
// and renew need no cross-partition query.
//
// # Ack
//
// Read the instance document (event-driven mode: unless the lock batch's
// own result is remembered); the lock must be ours and unexpired. One
// transactional batch: replace the instance document If-Match (proves the
// lock, releases it, stores metadata, current execution, custom status and
// version from the last CustomStatusUpdated, lastCommit = the lock nonce
// and a per-call suffix), upsert the execution record (mark advanced),
// delete the locked messages, create the
// history documents (a duplicate event id fails the batch: permanent, and
// nothing is applied), create same-partition queue documents (TimerFired
// visible at FireAtMS), create outbox intents, write KV (computed from the
// delta's KV events applied to the current KV documents; in event-driven
// mode, committing from the lock's remembered document, those the fetch
// read: only a commit changes them, and this one is conditional on the
// lock's ETag). Worker items
// also listed in CancelledActivities are never created; other cancelled
// activities are deleted best-effort after the commit (404 ignored). An
// ack never reads existing history. If the batch's answer is lost and the
// retry meets 412, lastCommit tells whether this turn committed; a second
// ack of the same lock meets 412 and a lastCommit not its own.
//
// # Large turns (over 100 operations or ~1.8 MB)
//
// Invariant H: readers and fetch return only events with eventId <= the
// execution record's mark; history is append-only, so events staged
// beyond the mark are invisible. Invariant S: documents of type "staged"
// match no query but publication and cleanup, and each carries stagedBy =
// the turn's lock nonce; such documents exist only while the instance
// document has staging = nonce (uncommitted) or publish.token = nonce
// (committed, unpublished). Protocol:
//
//  1. Staging batches (each <= 99 documents plus a patch of the instance
//     document If-Match the latest ETag setting staging = nonce, which
//     proves the lock at every step): history beyond the old mark upserted
//     (a retried ack overwrites its own attempt; a retry first deletes the
//     previous attempt's staged set), queue documents and intents upserted
//     as type "staged" with their final type recorded, deterministic ids.
//  2. Commit batch: replace the instance document If-Match (releases the
//     lock, clears staging, sets publish = {token, deferred message
//     deletions}), upsert the execution record (mark advanced: all events
//     visible at once), KV writes, events at or below the old mark (created,
//     so duplicates fail) and as many message deletions as fit.
//  3. Publication: patch every staged document of the token to its final
//     type, delete the deferred messages (they stay locked meanwhile, and a
//     fetch recovers before collecting messages), clear publish, deliver
//     the intents. Every step is idempotent.
//
// Recovery: the next fetch of the instance (before anything else) and the
// reconciler's sweep publish any commit record; a fetch on an unlocked
// instance with staging set (never committed) deletes the staged set.
// Hence, whatever batch fails: the turn is either invisible (and retried)
// or committed (and published exactly once). Tested by cutting a 250-event
// turn at each of its five batches.
//
// # Outbox
//
// Items for other instances (sub-orchestration starts and completions,
// detached starts, cancellations) are outbox_intent documents in the
// source batch, key = source instance | execution | lock nonce | position
// (unique per turn, stable across retries of its ack). After the commit
// they are delivered as orch_queue documents with id outbox:<key> in the
// target partition (409 = already delivered), then the intent is deleted.
// In polling mode the reconciler (started by New, stopped by Close, every
// ReconcileInterval, for intents older than ReconcileAge; defaults 2 s)
// delivers what is left. In event-driven mode delivery rides on the change
// feed (below).
//
// # Cascading deletion (DeleteInstancesAtomic)
//
//  1. Mark: each instance document gets deleting = <deletion id> by a patch
//     If-Match its ETag; this invalidates a held lock, so an in-flight ack
//     fails instead of recreating state. Without force a Running instance
//     aborts before anything is marked. A marked instance is invisible to
//     fetch, reads, lists, KV, status and stats: the runtime observes it as
//     deleted. A failure while marking unmarks what was marked.
//  2. Orphan check after marking: a child (by parentInstanceId) outside the
//     set unmarks everything and fails permanently.
//  3. Purge: each partition's documents are deleted in batches of <= 100,
//     the instance document last; sessions used only by the deleted work
//     go too. Counts come from what was deleted.
//  4. A retry adopts already-marked instances and finishes the purge; the
//     reconciler purges marks older than max(10 x ReconcileAge, 30 s).
//
// Pruning deletes the pruned executions' records first (one batch: their
// history becomes invisible at once), then their history documents.
//
// # Event-driven mode
//
// Components, all owned by the Provider (every goroutine stops at Close):
//
//   - wakeup hubs (package wakeup), one for the orchestrator queue (keys:
//     instance, and the instance's lock expiry), one for the worker queue
//     (one key per worker document), one for deferred checks;
//   - a session, while the replica takes part in dispatch: a
//     leasestore.Store in the provider's own container (partition
//     "$leases"; LeaseBlocks leases of 256/LeaseBlocks slots, each lease's
//     range epk.SlotRange of its block; ReplicaID default host name plus
//     random digits), a changefeed.Processor on the leases it holds, and
//     the catch-up, sweep, deferred-check, hint and idle loops.
//
// Joining: a replica joins at its first FetchOrchestrationItem and leaves
// (handing its leases off like Close does) when no orchestration fetch has
// run for 5 s, e.g. after its runtime stopped dispatching; it rejoins at
// the next fetch. A Provider used only as a client never owns slots it
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
//     ReconcileAge (resp. the deletion timeout) that finishes it.
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
// lockInstance directly (no cross-partition query); a worker wakeup point-
// reads the document and locks it If-Match. A Scan wakeup (a slot whose
// pending wakeups overflowed, or a hinted slot) runs the candidate query
// for that slot only and signals what it finds, oldest first. Wakeup
// rules: an instance found locked is re-signalled at its lock's expiry
// (and, when this replica or the feed sees the lock released, at once);
// the expiry wakeup of a lock this process already released is dropped
// without I/O; a turn that left messages queued (over 99) wakes the rest
// at its release; work the fetch cannot take (other tags, a session, a
// pinned version its filter refuses) is parked for a fetch that can, and
// advertised in the backlog hint when no local fetch can (a session owned
// by another node, a version no local dispatcher runs), so that other
// replicas try it; a fetch that loses the lock race for an instance
// signals it again at once (the winner's turn need not hold the message
// its wakeup was for).
//
// Reading for the lock (event-driven mode): the polling mode's point read
// of the instance document is gone. The provider remembers (instCache,
// Config.InstanceCacheSize entries of at most 4 KiB) the unlocked
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
// slots, outbox intents older than ReconcileAge, and instances with a
// stale publication or deletion. There is no polling reconciler.
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
// moved for 10 s. Orchestration turns never move: only activities spread.
//
// # Defaults and cost (event-driven)
//
// Simulated request units (cosmosemu/knobs' DefaultChargeModel: point
// write 5 RU, change-feed 304 1 RU, query 2.3 RU per physical partition
// scanned + 0.1 per item), one idle replica, 4 physical partitions:
//
//	polling baseline:   2 dispatchers x 1 query/s x 4 partitions x 2.3 = 18.4
//	                    reconciler: 3 queries / 2 s x 9.2             = 13.8
//	                    total                                 about 32.2 RU/s
//	event-driven:       heartbeat 5 RU / 4 s                          = 1.25
//	                    lease watch: 1 RU / 0.75 s                    = 1.33
//	                      + own heartbeat page (+1.4 RU / 4 s)        = 0.35
//	                    lease re-read query every 5 heartbeats        = 0.16
//	                    8 lease readers taking turns on 4 physical
//	                      partitions: 1 RU / 4 s per partition, more
//	                      on the one holding $leases                  = 1.25
//	                    safety sweep: 9.2 RU / 60 s                   = 0.15
//	                    total                                 about 4.5 RU/s
//
// that is about 14% of polling (target: at most 20%). Measured with
// BenchmarkIdleReplicaCost (30 s windows, sweep excluded): polling 32.2
// RU/s, event-driven 4.43 RU/s (4.58 with the sweep: 14.2%). The levers, in that order of weight: lease readers
// (physical partitions / FeedIdleCeiling, and LeaseBlocks when blocks
// outnumber partitions: a 1 s ceiling would quadruple that line), the lease watch (WatchIdleCeiling, bounded by
// the hand-off target), the heartbeat (HeartbeatInterval, bounded by
// self-fencing at LeaseExpiry - HeartbeatInterval), the sweep. Activity
// adds checkpoints, at most one write per active lease per 5 s.
//
// Latency: a write by the owning replica (enqueue, an ack's new work, an
// abandon) wakes a blocked fetch in microseconds, so enqueue-to-fetch is
// the lock's own round trips (about 10 ms on cosmosemu under -race,
// TestEventDrivenLocalWakeLatency; the polling mode averages half its 1 s
// poll). A write by another process reaches the owner through its feed:
// within FeedActiveDelay (20 ms) plus a read while the replica is warm
// (it saw work within FeedWarmHold, 2 s), within FeedIdleCeiling (4 s)
// when it was idle. While warm, its readers cost about 50 RU/s per
// physical partition their leases overlap. Liveness:
// LeaseExpiry 10 s (a dead replica's slots move after it, then the new
// owner's catch-up finds its work and its locks' expiries); a graceful
// Close hands off within WatchIdleCeiling (750 ms) plus a write; a joining
// replica gets its share through steals within about two heartbeats.
//
// Conformance: the suite runs in both modes (TestConformance polling,
// TestConformanceEventDriven with long polling). Its scenarios expect any
// replica to fetch any instance, which slot ownership deliberately does
// not give, so the event-driven run gives each provider it opens its own
// lease partition (a complete replica owning every slot); lease sharing
// is covered by the multi-replica tests.
//
// # Errors and retries
//
// 408, 429, 449, 503, 410 (and 500) are retryable, 400, 404, 413 (and
// 401, 403) permanent; 409 and 412 are decided in context (a lost race is
// retryable, a duplicate event id or a lost lock permanent). The Cosmos
// error is kept as the Cause. Individual calls are retried with
// exponential backoff (cenkalti/backoff), honouring x-ms-retry-after-ms,
// at most 5 attempts and bounded by ctx; a write whose outcome is unknown
// is retried only when repeating it is harmless. Logs carry instance ids,
// operations and status codes, never keys or payloads.
//
// Admin queries across partitions use no ORDER BY, TOP, DISTINCT,
// aggregates or GROUP BY (the gateway refuses them): they select a few
// fields and sort or count on the client.
package provider
