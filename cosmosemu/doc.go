// Package cosmosemu is an embedded, in-process emulator of Azure Cosmos DB
// for NoSQL, wire-compatible with the official azcosmos Go SDK. It starts in
// milliseconds, needs neither Docker nor Azure, and keeps everything in
// memory.
//
//	srv, err := cosmosemu.Start(ctx, cosmosemu.Options{})
//	if err != nil {
//		return err
//	}
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
//     With Options.Auth, what an account with Microsoft Entra ID enforces:
//     local auth disabled (401/5202), token audience, tenant and expiry,
//     built-in data-plane roles (403/5301) and no database or container
//     management by token on the data plane (403/5300).
//   - Control plane: a minimal Azure Resource Manager surface under
//     ARMPathPrefix ("/_arm"): the account, and PUT/GET/DELETE of its SQL
//     databases and containers (Microsoft.DocumentDB, ARMAPIVersion), with
//     bearer tokens of an ARM audience and AuthOptions.ManagementPrincipals
//     for authorization. It creates and deletes through the data plane's
//     own paths, so both planes see one state; it is how a token-only
//     client manages its databases and containers.
//   - Serverless accounts (Options.Serverless): dedicated throughput
//     refused on either plane, offers neither read nor replaced (400, the
//     service's messages).
//   - Managed identity: a token endpoint shaped as App Service's and
//     Container Apps' (Options.Identity, IdentityOptions), so that
//     azidentity's DefaultAzureCredential in any process, given
//     IDENTITY_ENDPOINT and IDENTITY_HEADER, gets tokens both planes accept.
//   - Routing-gateway path handling: percent-decoding (twice when needed),
//     '\' as separator, '#' ending the path, trailing whitespace trimmed and
//     control characters rejected, so ids the service accepts on create but
//     cannot address answer 401/400 as on the service.
//   - Database account (single region, endpoint 127.0.0.1), databases,
//     containers (Hash v1/v2 and MultiHash keys, indexing policy stored,
//     returned and enforced on queries, see below), offers (manual and autoscale, read/replace through the
//     offers feed as the SDK does), partition key ranges (incremental
//     If-None-Match/A-IM feed; PartitionCount ranges per container, default
//     4, split evenly over the EPK space).
//   - Partition splits, on demand (Server.SplitPartition or the admin
//     surface): a range becomes two children cut at its EPK midpoint, with
//     new ids and "parents", and leaves the pkranges feed under a new
//     version so the SDK's incremental routing-map refresh sees it.
//     Documents and their change-feed history move to the child owning
//     their key, keeping their LSNs; children continue from the parent's
//     LSN, so a change-feed continuation taken on the parent resumes on each
//     child without gap or duplicate. Requests naming the parent range
//     (x-ms-documentdb-partitionkeyrangeid: change feed, ReadMany, range
//     queries) answer 410/1002 PartitionKeyRangeGone, making the SDK
//     refresh and retry; requests routed by partition key, and
//     cross-partition query continuations, follow the split.
//   - Items: create, read (If-None-Match → 304), replace, upsert, delete,
//     patch (add, set, replace, remove, incr, move; conditional patch → 412)
//     with If-Match (412), 409 on duplicates, 404, partition key header
//     checks, the "none" and null partition keys, 2 MB limit (413), id
//     rules, Prefer: return=minimal, session tokens "<range>:-1#<lsn>".
//   - Transactional batch: at most 100 operations, all-or-nothing under the
//     partition lock, per-operation If-Match, 207 with the failing
//     operation's status and 424 for the others. Operation partition keys
//     are read as JSON text in a string (Java, .NET) or as an array.
//   - Bulk, as the .NET, Java and JavaScript bulk executors send it: a batch
//     with x-ms-cosmos-batch-atomic: False addressed by
//     x-ms-documentdb-partitionkeyrangeid, each operation carrying its own
//     partitionKey. Each operation commits on its own (own LSN, no
//     rollback); the answer is the array of per-operation results
//     (statusCode, subStatusCode, requestCharge, eTag, resourceBody), 200
//     when all succeeded, 207 otherwise; without
//     x-ms-cosmos-batch-continue-on-error: True the operations after the
//     first failure answer 424 unattempted. An operation whose key is not
//     in the addressed range answers 410/1002 (the SDKs then re-route it; the
//     service's exact answer there was not observed); a range that is gone
//     answers 410/1002 as a whole. 100 operations and the 2 MB request limit,
//     charge the operations' sum. The Go SDK has no bulk API.
//   - Query plans (x-ms-cosmos-is-query-plan-request: True), as the Python,
//     JavaScript and Java (gateway) SDKs and .NET without ServiceInterop ask
//     for them: a PartitionedQueryExecutionInfo (version 2) from
//     internal/query's Plan, with queryInfo (distinctType, top, offset,
//     limit, orderBy, orderByExpressions, groupByExpressions,
//     groupByAliases, groupByAliasToAggregateType, aggregates,
//     rewrittenQuery, hasSelectValue) and queryRanges (the whole EPK space,
//     the key's EPK point, or a hierarchical prefix's interval, from the
//     x-ms-documentdb-partitionkey header or a key pinned by the WHERE
//     clause). Rewrites follow the service's baselines: ORDER BY selects
//     _rid, orderByItems and payload with the
//     {documentdb-formattableorderbyquery-filter} placeholder; aggregates
//     return {"item": ...} partials (AVG as sum and count, MIN/MAX with
//     item2); GROUP BY selects groupByItems and payload; OFFSET n LIMIT m
//     becomes OFFSET 0 LIMIT n+m; TOP and DISTINCT send the original query.
//     Every rewrite is a query cosmosemu serves on one range (tests merge
//     them as an SDK does and compare). A feature missing from
//     x-ms-cosmos-supported-query-features answers 400 "Query contains 1 or
//     more unsupported features ..."; shapes the emulator cannot plan (an
//     aggregate inside a larger expression, ORDER BY with GROUP BY or
//     aggregates, FROM not rooted at the container, no FROM) answer 400.
//     Not modelled: DCOUNT, CountIf, vector/full-text/hybrid plans, the plan
//     in a 400/1004's additionalErrorInfo, the service's dropping of
//     OFFSET/LIMIT for single-key queries. The Go SDK (azcosmos v1.5.0)
//     defines the plan headers but never sends a plan request.
//   - Queries through internal/query: single partition (header, hierarchical
//     prefixes, or a partition key pinned by the WHERE clause), one range
//     (x-ms-documentdb-partitionkeyrangeid, used by ReadMany), cross-partition
//     fan-out for queries the gateway can serve (others answer 400/1004),
//     range by range in EPK order and in creation (_rid) order within a
//     range, as the gateway returns them; paging with opaque continuations
//     (the EPK spans left and the position in the current one) that are
//     stable under concurrent writes and across splits; query and index
//     metrics headers.
//   - Indexing policy enforcement on document queries, as the service
//     serves them from the index (replacing a container's policy takes
//     effect at once, with no index transformation period). With
//     consistent (or lazy) indexing, a query whose WHERE clause reads a
//     path the policy does not index answers 400 "An invalid query has been
//     specified with filters against path(s) excluded from indexing.
//     Consider adding allow scan header in the request." unless the request
//     allows a scan (x-ms-documentdb-query-enable-scan: true, or
//     x-ms-documentdb-force-query-scan: true, which the Go SDK sends for
//     QueryOptions.EnableScanInQuery). The paths read are every property
//     path in the WHERE expression: comparison, IN, BETWEEN and LIKE
//     operands, function arguments (IS_DEFINED(c.a), STARTSWITH(c.a, ...),
//     LOWER(c.a) = ...), bare booleans; ARRAY_CONTAINS(c.arr, x) reads the
//     elements (/arr/[]); JOIN aliases resolve to their array (/tags/[]);
//     SELECT paths never count. /id and /_ts are always indexed; the
//     partition key path is not (the service documents that it must be
//     included when "/*" is excluded). A path is indexed when the most
//     precise matching policy path is an included one: "/a/?" matches /a
//     exactly, "/a/*" matches /a and below, "/*" everything, "[]" any array
//     element; deeper paths are more precise and, at equal depth, "/?"
//     beats "/*"; a path in both lists counts as excluded. ORDER BY is
//     checked whatever the scan headers say: one key must be indexed (400
//     "The index path corresponding to the specified order-by item is
//     excluded."); two or more need a composite index with the same paths
//     in the same sequence and the same direction on every path or the
//     opposite one on every path (400 "The order by query does not have a
//     corresponding composite index that it can be served from."), so the
//     default policy, which has none, refuses them too. With indexing mode
//     none, a query with a WHERE clause (even on id) needs a scan and one
//     with ORDER BY is refused. Sub-status 0 throughout. Point reads, the
//     change feed, read feeds and ReadMany under policies that index the
//     partition key are unaffected. The per-document
//     x-ms-indexing-directive, automatic:false, spatial, vector, full-text
//     and tuple indexes and composite indexes for filters are not modelled.
//     The service's documentation also shows filters on excluded paths
//     served by a costly scan; refusing them is the stricter reading.
//   - Secondary indexes (index.go): per physical partition, for every
//     document path a query has filtered on, the scalar values at that path
//     (null, booleans, numbers, strings; hashed for equality, ordered for
//     ranges) referencing the current versions, built on a partition the
//     first time a query needs the path there and then maintained by every
//     write (create, replace, upsert, patch, delete, batch, bulk, TTL
//     purge; a split's children rebuild on demand). A query's WHERE clause
//     yields candidates through them when it has, at the top level or in
//     every branch of an OR, an equality, comparison, BETWEEN, IN or
//     ARRAY_CONTAINS(list, path) between a property path of the root alias
//     and literals or parameters, on a path the indexing policy indexes;
//     an AND reads its most selective side and checks the others on index
//     values. The full query is then evaluated on the candidates only, in
//     the scan's order, so results, page breaks and continuations are the
//     scan's. Every other query (no WHERE, NOT, functions, JOIN aliases,
//     excluded paths, indexing mode none, read feeds) scans the partitions
//     it targets, as does every query under Options.DisableQueryIndex.
//     ORDER BY is still evaluated by sorting the candidates, not read in
//     index order.
//   - Change feed, latest-version mode: per range, per partition key or per
//     EPK sub-range; continuation by LSN ETag / If-None-Match, from the
//     beginning, from now ("*") or from a time (If-Modified-Since); ordered
//     by LSN; collapsed to the latest version; deletes absent; 304 when
//     nothing is new; batches never split across pages.
//   - Time to live: container defaultTtl and item ttl with the service's
//     rules and 400s; an item past _ts + its ttl (by Options.Clock) is
//     invisible everywhere, its id free again, and is purged by the next
//     write to its partition (see ttl.go).
//   - Errors: service status, x-ms-substatus where the service sends one
//     (1003 on a 404 for documents of a container or database that does
//     not exist), x-ms-activity-id, {"code","message"} bodies; panics
//     become 500s.
//
// # What is not imitated
//
// Stored procedures, triggers, UDFs, users and permissions (resource
// tokens), conflicts, unique keys, analytical store (and its TTL), vector and
// full-text search, all-versions-and-deletes change feed, automatic splits
// (by storage or throughput) and merges, the transient 410/1007
// (CompletingSplit) window of a split in progress (a split here is atomic),
// request-unit throttling (429), multi-region behaviour and consistency
// levels weaker than what a single replica gives. Request charges are
// plausible constants, not the service's RU model. Property order of stored
// documents is not preserved (keys are serialized sorted) and numbers are
// IEEE-754 doubles. Containers get PartitionCount ranges whatever their
// throughput (the service and Microsoft's emulator give small containers
// one), so cross-partition results without ORDER BY are ordered range by
// range where a single-partition container would return creation order.
//
// # Extension seams
//
// Every Cosmos DB request (not those of the ARM and admin surfaces), once
// authenticated and routed, passes through Options.Middleware with its OperationType, ResourceType, resource link and
// the physical partition key range ids it touches (Request); middleware may
// delay it, answer it (ErrorResponse for injected faults), adjust the
// Response (RequestCharge) or count it.
//
// Test tooling reaches emulator-level operations through the admin surface
// under AdminPathPrefix ("/_emulator/"), served without Cosmos DB auth: the
// emulator's own POST /_emulator/split {"database","container","range"},
// GET /_emulator/ranges?database=&container= and, with Options.Identity,
// GET /_emulator/identity/token (IdentityPath, which wants its
// X-IDENTITY-HEADER secret), and whatever handler
// Options.Admin provides for every other path (mounted with the prefix
// stripped, e.g. a knobs admin handler).
package cosmosemu
