// Package httpapi serves a durafeed runtime's client as a JSON HTTP API:
// start, query, raise events to, cancel, list and delete orchestration
// instances, plus liveness and readiness endpoints. It uses the runtime's
// public API only (runtime.Client, and durable.ProviderAdmin for lists
// and deletes), so it runs on any provider.
//
//	POST   /v1/instances                        start: {"name", "input", "instanceId"?}
//	GET    /v1/instances/{id}[?wait=30s]        status (wait: until it ends, at most MaxWait)
//	POST   /v1/instances/{id}/events/{name}     raise an event; the body is its JSON data
//	POST   /v1/instances/{id}/cancel            cancel: {"reason"?}
//	GET    /v1/instances[?status=&pageSize=&continuationToken=]
//	DELETE /v1/instances/{id}[?force=true]      delete a terminal root instance (force: running too)
//	GET    /healthz                             liveness: 200 while the process serves
//	GET    /readyz                              readiness: 200 while Options.Ready says so, else 503
//
// Every error is a JSON body {"error": {"code", "message"}} (plus "limit"
// for a size limit) with a status that says whose fault it is: 400 for
// bad input (malformed JSON, an unknown orchestration, an invalid instance
// id, an input over MaxInputBytes), 404 for an unknown instance, 409 for
// a conflict (the instance exists, has ended, or is running and not
// forced), 413 for a body over MaxInputBytes plus 64 KiB, 422 for an
// Idempotency-Key reused with another request, 503 for a retryable
// provider failure (with Retry-After), 500 otherwise. A refused request
// changes nothing.
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
// status, duration).
package httpapi
