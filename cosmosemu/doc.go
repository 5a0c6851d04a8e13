// Package cosmosemu is an embedded, in-process emulator of Azure Cosmos DB
// for NoSQL, wire-compatible with the official azcosmos Go SDK. It starts in
// milliseconds, needs neither Docker nor Azure, and keeps everything in
// memory.
//
//	srv, err := cosmosemu.Start(ctx, cosmosemu.Options{})
//	defer srv.Close()
//	client, err := srv.NewClient() // *azcosmos.Client trusting srv's certificate
//
// # What is imitated
//
//   - Transport: HTTPS (self-signed certificate made at start, valid for
//     localhost/127.0.0.1/::1; see Server.HTTPClient and CertificatePEM) or
//     plain HTTP; HTTP/1.1 and HTTP/2.
//   - Auth: master-key HMAC-SHA256 signatures exactly as the service checks
//     them (verb, resource type, resource link, x-ms-date; offer links
//     lowercased; 15-minute clock skew), Entra ID tokens checked for
//     structure and expiry only (like Microsoft's emulator). 401 otherwise.
//   - Routing-gateway path handling: percent-decoding (twice when needed),
//     '\' as separator, '#' ending the path, trailing whitespace trimmed and
//     control characters rejected, so ids the service accepts on create but
//     cannot address answer 401/400 as on the service.
//   - Database account (single region, endpoint 127.0.0.1), databases,
//     containers (Hash v1/v2 and MultiHash keys, indexing policy stored and
//     returned), offers (manual and autoscale, read/replace through the
//     offers feed as the SDK does), partition key ranges (incremental
//     If-None-Match/A-IM feed; PartitionCount ranges per container, default
//     4, split evenly over the EPK space).
//   - Items: create, read (If-None-Match → 304), replace, upsert, delete,
//     patch (add, set, replace, remove, incr, move; conditional patch → 412)
//     with If-Match (412), 409 on duplicates, 404, partition key header
//     checks, the "none" and null partition keys, 2 MB limit (413), id
//     rules, Prefer: return=minimal, session tokens "<range>:-1#<lsn>".
//   - Transactional batch: at most 100 operations, all-or-nothing under the
//     partition lock, per-operation If-Match, 207 with the failing
//     operation's status and 424 for the others.
//   - Queries through internal/query: single partition (header, hierarchical
//     prefixes, or a partition key pinned by the WHERE clause), one range
//     (x-ms-documentdb-partitionkeyrangeid, used by ReadMany), cross-partition
//     fan-out for queries the gateway can serve (others answer 400/1004),
//     paging with opaque continuations that are stable under concurrent
//     writes, query and index metrics headers.
//   - Change feed, latest-version mode: per range, per partition key or per
//     EPK sub-range; continuation by LSN ETag / If-None-Match, from the
//     beginning, from now ("*") or from a time (If-Modified-Since); ordered
//     by LSN; collapsed to the latest version; deletes absent; 304 when
//     nothing is new; batches never split across pages.
//   - Errors: service status, x-ms-substatus where the service sends one,
//     x-ms-activity-id, {"code","message"} bodies; panics become 500s.
//
// # What is not imitated
//
// Stored procedures, triggers, UDFs, users and permissions (resource
// tokens), conflicts, TTL expiry, unique keys, analytical store, vector and
// full-text search, all-versions-and-deletes change feed, partition splits
// (the structure is ready: ranges carry ids, LSNs and a parents list),
// request-unit throttling (429), multi-region behaviour and consistency
// levels weaker than what a single replica gives. Request charges are
// plausible constants, not the service's RU model. Property order of stored
// documents is not preserved (keys are serialized sorted) and numbers are
// IEEE-754 doubles. Cross-partition results without ORDER BY come in
// creation order across the whole container (as a single-partition account
// returns them); a multi-partition account returns them range by range.
//
// # Extension seam
//
// Every request, once authenticated and routed, passes through
// Options.Middleware with its OperationType, ResourceType, resource link and
// the physical partition key range ids it touches (Request); middleware may
// delay it, answer it (ErrorResponse for injected faults), adjust the
// Response (RequestCharge) or count it.
package cosmosemu
