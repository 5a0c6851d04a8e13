// Package chaos is durafeed's chaos campaign (`make chaos`): it runs a
// mixed workload on several runtime replicas over an embedded cosmosemu
// that injects latency and faults, splits a partition and kills a replica
// while the workload runs, and then proves from the histories read back
// that nothing was lost, repeated or left behind.
//
// A campaign (Campaign.Run) sets up one emulator (4 partitions, 2 ms
// latency, and for the whole run 429 with retry-after 5%, 503 1%, dropped
// connections 1% of which half after the write committed, 408 after the
// write committed 0.3%, 410 0.2%: DefaultFaultRates), three runtime
// replicas and a client, each with its own provider, SDK client and
// network, and starts the workload through the client (see Kinds: activity
// chains, fan-out/fan-in, sub-orchestrations, durable timers, external
// events the client raises one at a time with unique payloads, persistent
// events dequeued across continue-as-new). Every client call is made
// under one request id (runtime.WithRequestID) however often the client
// retries it, so each must take effect exactly once. Once a fifth of the roots are
// started it splits a partition key range (POST /_emulator/split); at two
// fifths it kills a replica: the replica's network is cut (answers in
// flight are lost and nothing it sends arrives), its provider crashes
// (provider.Provider.Crash: no lease released) and its runtime is stopped
// with an expired context, so every lock it held must expire (or be
// freed by the replica that takes its leases over); a
// replacement replica joins at once. When every root finished the
// campaign waits, still under faults, for the queues to drain, stops the
// replicas, lifts the faults and reads everything back.
//
// Check, the history checker, is a pure function over that Evidence: the
// expectations, every instance's status and every execution's history (as
// the provider's management surface and Read return them), the client
// messages consumed by committed turns (recorded by a wrapper around each
// replica's provider: a message consumed twice was enqueued twice, even
// when the second copy left no trace in the history because the instance
// had finished), the activity executions counted in the activity function,
// and the queue depths. It reports wrong outputs, stuck instances and
// queues, duplicate and lost client events, scheduled work without exactly
// one completion, repeated event ids and malformed histories, and counts
// activity re-executions (allowed: activities run at least once).
//
// Lock stalls: a lock whose answer was lost and that the provider's
// read-back did not recover leaves its messages invisible until the lock
// expires. The provider wrapper sees every item a runtime receives with
// its attempt count; an attempt count above the item's earlier receptions
// plus one reveals such a lock. A stall on an instance the killed
// replica had a write request in flight to when it was killed is
// attributed to the kill. The provider's lost-answer log lines ("… was lost;
// read back") are captured at any level and reported with what the
// read-back found.
//
// # On an account
//
// With Campaign.Account set the campaign runs on an Azure Cosmos DB
// account, or an emulator over its endpoint (internal/account: a key or
// Microsoft Entra ID, a throwaway database per run, deleted at the end
// unless kept, and a meter of every client's request charges). The service
// cannot be told to fail, so the faults are injected client side, in every
// SDK client's azcore pipeline (a per-retry policy, installed through
// account.Options.PerRetryPolicies after the account's meter, so that the
// meter counts what the clients saw), under the same rule ids, at the same
// rates, with the same draws and the same scope (requests addressing the
// campaign's database) as the server-side rules:
//
//   - 429 with retry-after, 503 and 410 are answered without sending the
//     request, with the service's headers and error body;
//   - a dropped connection fails the attempt with a transport error, half
//     before sending, half after the request ran (its answer discarded:
//     the write committed unseen);
//   - a 408 replaces the answer of a request that ran;
//   - the latency is waited before each attempt, on top of the network's.
//
// The replica kill is process-local and runs as on the emulator; the
// partition split does not run (an account's partitions split when the
// service decides), and the campaign's events say so. Campaign.MaxRU caps
// the spending: a campaign estimated above it (Campaign.EstimateRU) is
// refused before anything is created, one whose clients spend past it is
// stopped, both with an error wrapping account.ErrOverCap. The Result
// reports the account (Result.Account), the charge the clients saw
// (Result.Spent: RU, requests, 429s) and the charge of the answers the
// injected drops discarded (Result.UnseenRU).
//
// cmd/durafeed-chaos runs campaigns from the command line, on an account
// when COSMOS_ENDPOINT is set; the package's tests run one small campaign
// per mode on the embedded emulator and on an emulator over its endpoint
// as an account.
package chaos
