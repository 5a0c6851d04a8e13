// Package httpapi serves a durafeed runtime's client as a JSON HTTP API:
// start, query, raise events to, cancel, list and delete orchestration
// instances, read their histories and the replica's view of dispatch,
// plus liveness and readiness endpoints. It uses the runtime's public API
// only (runtime.Client, durable.ProviderAdmin for lists, histories and
// deletes, durable.ClusterInspector for the dispatch view), so it runs on
// any provider.
//
//	POST   /v1/instances                        start: {"name", "input", "instanceId"?}
//	GET    /v1/instances/{id}[?wait=30s]        status (wait: until it ends, at most MaxWait)
//	POST   /v1/instances/{id}/events/{name}     raise an event; the body is its JSON data
//	POST   /v1/instances/{id}/cancel            cancel: {"reason"?}
//	GET    /v1/instances[?status=&name=&createdFrom=&createdTo=&pageSize=&continuationToken=]
//	                                            newest first; name is the exact orchestration name;
//	                                            createdFrom (inclusive) and createdTo (exclusive) are
//	                                            RFC 3339 times; rows carry customStatus
//	DELETE /v1/instances/{id}[?force=true]      delete a terminal root instance (force: running too)
//	GET    /v1/instances/{id}/history[?limit=&executionId=]
//	                                            events and timeline per execution (HistoryResponse, Spans)
//	GET    /v1/engine                           this replica's view of dispatch (EngineView)
//	GET    /v1/me                               the caller and its effective roles (MeResponse)
//	GET    /healthz                             liveness: 200 while the process serves
//	GET    /readyz                              readiness: 200 while Options.Ready says so, else 503
//
// A history answer holds each execution's events (HistoryEvent: the kind's
// own fields, camelCase; payloads as JSON values, shown to readers as the
// status shows an output) and its spans (Spans: activities, timers,
// sub-orchestrations, events, continue-as-new and turns). It is bounded:
// at most limit events (default 1,000, at most 10,000) and as many spans,
// and MaxHistoryBytes of events; executions are taken newest first, so
// what is left out is the oldest, and truncated says so. The list's
// filters (status, name, creation time) are ANDed and passed to the
// provider (durable.ListFilter; the Cosmos DB store serves them from
// indexed paths); the name matches exactly (case-sensitive, no pattern).
//
// GET /v1/engine answers 501 no_engine_view on a provider that is not a
// durable.ClusterInspector; the service adds request rates, wake latency
// and feed lag from its own metrics (Options.EngineFigures).
//
// With Options.Authenticator set, every request but the probes needs a
// bearer token (Authorization: Bearer <token>) that the Authenticator
// accepts, whose caller holds the route's app role (the token's roles
// claim; each role includes the ones above it):
//
//	Durafeed.Reader    GET /v1/instances/{id}, GET /v1/instances, GET /v1/instances/{id}/history,
//	                   GET /v1/engine, any other path (404 or 405)
//	Durafeed.Operator  POST /v1/instances, .../events/{name}, .../cancel
//	Durafeed.Admin     DELETE /v1/instances/{id}, and any request asking to force (force=true)
//	any valid token    GET /v1/me (a caller without a Durafeed role gets "roles": [])
//	none               GET /healthz, GET /readyz
//
// The check runs before the body is read or the provider called: a
// refused request writes nothing. Without an Authenticator every caller
// may do everything.
//
// Every error is a JSON body {"error": {"code", "message"}} (plus "limit"
// for a size limit) with a status that says whose fault it is, and a
// refused request changes nothing:
//
//	400 bad_json                malformed JSON, not one value, an unknown field
//	400 invalid_name            a name that is empty, over 1,024 bytes or not UTF-8 (a start's,
//	                            an event's, or the list's name filter)
//	400 unknown_orchestration   a name (or version) the registry does not know
//	400 invalid_instance_id     an id that is empty, over 1,024 bytes, not UTF-8, or holds control characters
//	400 input_too_large         an input or event payload whose stored size is over MaxInputBytes
//	                            (default 819,200): the size as the store embeds it, escaped twice
//	                            (StoredSize): letters and digits count one byte each, so about
//	                            800 KiB of them; a quote or backslash inside a JSON string counts
//	                            eight, so about 100,000 of them; <, > and & count seven
//	400 invalid_idempotency_key a key over 256 bytes or not UTF-8
//	400 invalid_<parameter>     a query parameter out of its range: invalid_status, invalid_page_size,
//	                            invalid_continuation_token, invalid_created_range, invalid_limit,
//	                            invalid_execution_id, invalid_wait, invalid_force
//	401 unauthenticated         no bearer token, or one that is not valid (WWW-Authenticate: Bearer,
//	                            with error="invalid_token" for an invalid one; RFC 6750)
//	403 forbidden               a valid token whose caller lacks the route's role
//	                            (WWW-Authenticate: Bearer, error="insufficient_scope")
//	404 instance_not_found      an unknown instance (or one whose first turn has not run)
//	404 execution_not_found     a history's executionId the instance does not have
//	409 instance_exists         a start for an existing instance (not a resend of its start)
//	409 instance_ended          an event or cancel for an ended instance (not a resend)
//	409 instance_running        a delete of a running instance without force=true
//	413 body_too_large          a body over MaxInputBytes plus 64 KiB (884,736 bytes by default)
//	422 idempotency_key_reused  an Idempotency-Key resent with another request on its instance
//	501 no_admin                a provider without the admin capability (lists, deletes)
//	501 no_engine_view          a provider that is no durable.ClusterInspector (GET /v1/engine)
//	503 unavailable             a retryable provider failure, or tokens that cannot be verified yet
//	                            (the issuer's keys are not loaded); with Retry-After
//	500 internal                anything else
//
// MaxInputBytes' default is derived from what the Cosmos DB provider
// writes, so that every accepted input can finish (DefaultMaxInputBytes):
// a turn whose output has grown far past its input and cannot be written
// fails its orchestration at once, with the store's limit in its error.
//
// Starts, events and cancellations accept an Idempotency-Key header (at
// most 256 bytes of UTF-8), the runtime's request id
// (runtime.WithRequestID). The same key with the same request takes
// effect once and gets the first request's answer (201 and the instance
// id; 202), however far the instance has gone since: completed, failed,
// cancelled by that very request, or continued as new. A start without
// instanceId takes its id from the key (KeyInstanceID). The same key
// with another request (another body, another call on the instance)
// gets 422 idempotency_key_reused and writes nothing. A key is scoped to
// its instance (its record lives in the instance's partition) and kept
// for the provider's request retention (24 h by default on the Cosmos DB
// provider); deleting the instance forgets it. Without a key, two starts
// racing for a new instance id both answer 201 and the runtime keeps the
// first (the existence check is a read before the start).
//
// Payloads are never logged; requests are logged at Debug (method, route,
// status, duration, and the caller's object and app ids with an
// Authenticator).
package httpapi
