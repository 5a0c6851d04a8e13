// Package store is durafeed's Cosmos DB store: the documents of the
// provider's one container and every protocol that writes them (locks,
// batch commits, large turns, acks, KV, sessions, deletion), with the
// queries dispatchers run to find work. It knows no dispatch mode: the
// writes a dispatcher must follow return what they wrote (Write, Commit,
// LockResult) instead of calling back, and the store never waits for work.
// Package provider composes it with a dispatcher (package polling or
// engine); package outbox delivers the intents its commits write.
//
// # Data model
//
// One container, partition key /instanceId (hash V2), created when missing
// with a selective indexing policy (payloads never indexed) and composite
// indexes for the queue scan, history reads and status lists. With an Entra
// ID credential creation is skipped unless Options.CreateIfMissing is set
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
// '/', '\', '?', '#', '%', spaces, control characters, '"' and '~' as
// "~XX"; '%' is not used because the gateway percent-decodes paths, and
// '"' because azcosmos v1.5.0 writes the ids of a batch's delete, replace
// and patch operations into the request unescaped. An id that
// would exceed 1023 bytes becomes prefix "!" sha256-hex, the original kept
// in a field. Instance ids are partition key values: any character, at most
// MaxInstanceIDBytes (1024) UTF-8 bytes; longer is a permanent error that
// writes nothing. A request policy repairs azcosmos v1.5.0's partition key
// header, which is not JSON for characters outside the BMP (emoji).
//
// # Lock (LockInstance)
//
// OrchCandidates: one cross-partition query on the share's slot range
// (no ORDER BY), sorted client-side by enqueuedAt. LockInstance (with the SeedsOrder read strategy, the polling
// dispatcher's; the event-driven engine reads the instance document with
// the query instead): point-read the instance document;
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
// # Bad data
//
// Nothing the store reads back wedges an instance or fails fetches
// forever, and nothing it is given is stored altered:
//
//   - An orchestrator message whose workItem does not decode (garbage
//     text, or not a JSON string at all: written by hand or by another
//     program) is deleted by the fetch that meets it, logged at Error
//     with the instance and message id; the instance's other messages are
//     returned.
//   - A worker item whose workItem does not decode is settled by the
//     fetch that locks it: acked with an ActivityFailed completion for the
//     activity its document names (a non-retryable infrastructure failure
//     carrying the decoding error; deleted when it names none), logged at
//     Error; the fetch goes on to the next item.
//   - A history document edited in place (eventData garbage or not a
//     string, fields of the wrong type, an event whose own event id is not
//     its document's) makes the fetch return HistoryError with the lock
//     held and reads fail permanently; an event replaced by a well-formed
//     one of another kind under the same id is the replay's to catch
//     (nondeterminism).
//   - A work item or event with a string that is not valid UTF-8 (JSON
//     would replace the bytes with U+FFFD), or whose document would exceed
//     MaxDocumentBytes (2 MB), is refused with a permanent error before
//     anything is written; a refused ack keeps its lock.
//   - A deleted container (or database) answers 404 with sub-status 1003:
//     every call then fails permanently, saying the container does not
//     exist, instead of reading as "not found"; ContainerGone lets a
//     dispatcher that waits without requests say so too. Calls work again
//     once the container is created again.
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
// repair pass publish any commit record; a fetch on an unlocked
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
// Delivery is package outbox's; the repair pass (Stale, then
// outbox.Repair: polling's reconciler every 2 s, the engine's safety sweep
// every 60 s) delivers what is left once it is older than RepairAge
// (default 2 s). In event-driven mode delivery rides on the change feed
// (package engine).
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
//     repair pass purges marks older than DeletionTimeout,
//     max(10 x RepairAge, 30 s).
//
// Pruning deletes the pruned executions' records first (one batch: their
// history becomes invisible at once), then their history documents.
//
// # Errors and retries
//
// 408, 429, 449, 503, 410 (and 500) are retryable, 400, 404, 413 (and
// 401, 403) permanent (404 with sub-status 1003, a missing container, is
// never read as a missing document); 409 and 412 are decided in context (a lost race is
// retryable, a duplicate event id or a lost lock permanent). The Cosmos
// error is kept as the Cause. Individual calls are retried with
// exponential backoff (cenkalti/backoff), honouring x-ms-retry-after-ms,
// at most 5 attempts and bounded by ctx.
//
// A request the service refused before acting on it (429, 449, 410) is
// resent. A write whose outcome is unknown (a transport failure, 408,
// 500, 502, 503, 504: it may have committed) is resent only when
// repeating it is harmless (reads, upserts, deletes, creates with
// deterministic ids); the SDK's generic retry layer is limited to refused
// requests and reads so that it cannot resend one either. The other writes read back
// what committed instead:
//
//   - an enqueue reads its message back (found: done);
//   - a lock (work item patch, orchestration lock batch) reads its token
//     back, and a lock that landed is returned to its fetch instead of
//     expiring unused;
//   - a turn's ack reads the instance's commit record, a work item's ack
//     the item it deletes, an abandon the item's lock.
//
// Each read-back is logged at Info with what it found. Logs carry
// instance ids, operations and status codes, never keys or payloads.
//
// Admin queries across partitions use no ORDER BY, TOP, DISTINCT,
// aggregates or GROUP BY (the gateway refuses them): they select a few
// fields and sort or count on the client.
package store
