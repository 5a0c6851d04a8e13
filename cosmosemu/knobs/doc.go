// Package knobs provides test and benchmark knobs for the cosmosemu
// emulator: injected latency, fault rules, a simulated request-charge model,
// a provisioned-throughput budget and per-operation counters. Every knob is
// a cosmosemu.Middleware, is configured through Go values, can be changed at
// run time from any goroutine, and can be read in-process or through a small
// JSON-over-HTTP admin handler.
//
//	k, err := knobs.New(knobs.Config{
//		Latency: knobs.LatencyConfig{Default: knobs.LatencySpec{Base: 2 * time.Millisecond, Jitter: time.Millisecond}},
//		Charges: knobs.DefaultChargeModel(),
//		Budget:  knobs.BudgetConfig{DefaultRUPerSecond: 400},
//	})
//	if err != nil {
//		return err
//	}
//	srv, err := cosmosemu.Start(ctx, cosmosemu.Options{
//		Middleware: k.Middleware(),
//		Admin:      k.AdminHandler(), // e.g. GET /_emulator/counters
//	})
//	...
//	snap := k.Counters().Snapshot()
//
// Command-line tools register the knobs' flags with Flags.
//
// # Middleware order
//
// Knobs.Middleware returns, outermost first:
//
//	Counters → Latency → Budget → Faults → Charges → (emulator)
//
// The reasons:
//
//   - Counters is outermost so it sees every answer the client gets:
//     throttles, injected faults, dropped connections and the final request
//     charge.
//   - Latency imitates the network round trip, which every request pays,
//     including those the service throttles or fails; so it wraps the budget
//     and the faults. A cancelled request stops waiting and is not executed.
//   - Budget sits where the service's admission control does: a throttled
//     request never reaches a replica, so it neither consumes a fault rule's
//     "next N" nor runs the handler, and it is charged nothing. Admitted
//     requests are debited with the final charge computed further in.
//   - Faults answer in place of the replica (or, with AfterHandler, replace
//     the answer of a request that did execute).
//   - Charges is innermost so it prices exactly what the emulator executed,
//     and every outer knob (budget, counters) sees the simulated charge.
//
// # Simulated request charges
//
// The charge model is SIMULATED. It does not reproduce the service's RU
// algorithm (which also depends on indexing policy, property count and
// consistency level); it gives plausible, deterministic numbers anchored on
// Azure's published guidance: a point read of a 1 KB item costs 1 RU and of
// a 100 KB item 10 RU; a write of a 1 KB item costs 5 RU and of a 100 KB
// item 50 RU (Microsoft Learn, "Optimize request cost in Azure Cosmos DB",
// and "Request Units in Azure Cosmos DB", default session consistency).
// Between and beyond those points the model is the straight line through
// them. Query and change-feed figures are approximations of commonly
// observed charges (a small query costs a little over 2 RU), not published
// constants. Sizes are in KiB rounded up, minimum 1; k below is that size.
// Charges are rounded to 0.01 RU, the precision of x-ms-request-charge.
// The service doubles read charges under strong and bounded-staleness
// consistency; the model does not (it assumes session consistency, as the
// published figures do). DefaultChargeModel holds these values; every one is
// a ChargeModel field.
//
//	Operation                          Simulated charge (RU)           Default examples
//	---------------------------------  ------------------------------  -----------------------------
//	Point read (200)                   1 + (k-1)·(1/11)                1 KiB → 1.00, 100 KiB → 10.00
//	Point read 304 (If-None-Match)     1                               1.00
//	Create, upsert, replace            5 + (k-1)·(5/11), k = request   1 KiB → 5.00, 100 KiB → 50.00
//	                                   body size
//	Patch                              write cost of the returned      5.00 with Prefer: return=minimal
//	                                   item (1 KiB when not returned)
//	Delete                             5 (the item's size is not       5.00
//	                                   visible to middleware)
//	Transactional batch                sum of its operations: 201 and  3 small creates → 15.00
//	                                   200 writes as writes, reads as
//	                                   point reads, 204 as delete,
//	                                   304 as 1, the failing operation
//	                                   1, 424 as 0
//	Query / read-feed page             2.3 + 0.1·items + (k-1)·(1/11), empty page → 2.30,
//	                                   k = page body size, plus 2.3    10 small items → 3.30,
//	                                   per further physical partition  empty page over 4
//	                                   a cross-partition page scans    partitions → 9.20
//	Change feed page (200)             same as a query page            1 small item → 2.40
//	Change feed 304 (nothing new)      1                               1.00
//	Operation answered with an error   1                               404 read → 1.00
//	  by the emulator (4xx/5xx)
//	Metadata (account, databases,      1                               1.00
//	  containers, offers, pkranges)
//	Throttled (429 from Budget)        0                               0.00
//	Injected fault                     0 (AfterHandler: the executed   0.00
//	                                   request's charge)
//
// A query page's charge depends on what it returns (items, page size) and
// on the physical partitions it is sent to, never on how many documents
// the container holds or the emulator examined: Microsoft's "Optimize
// request cost in Azure Cosmos DB" (Microsoft Learn) names the items
// loaded or returned and the lookups against the index as what a query
// costs, and the service serves filters from its index. Without this model
// the emulator's own charge (2.79 + 0.05 per document examined) counts the
// candidates its secondary indexes select, so it too stays flat as the
// container grows (docs/emulator-index).
//
// In a batch sent with Prefer: return=minimal (the azcosmos default) a 200
// result with a body is a read and one without is a write; when content is
// returned on writes, 200 results are priced as writes. The per-operation
// requestCharge values in the batch body are rewritten to match.
//
// # Faults that drop the connection
//
// Middleware sees neither the http.ResponseWriter nor the connection, and
// the emulator turns handler panics (http.ErrAbortHandler included) into 500
// answers, so a FaultDrop rule ends the serving goroutine with
// runtime.Goexit: net/http then closes an HTTP/1.1 connection without an
// answer (the client reads EOF) or resets an HTTP/2 stream (INTERNAL_ERROR).
// Either way the SDK sees a transport error, not an *azcore.ResponseError.
// Note that net/http's client transparently retries idempotent requests
// (GET, HEAD) whose reused HTTP/1.1 connection closed before any answer, so
// a drop of a read may be retried once below the SDK.
package knobs
