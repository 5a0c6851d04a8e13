// Package bench measures the Cosmos DB provider's event-driven mode
// against the seeds' 1 s polling, on an embedded cosmosemu with the knobs'
// latency and simulated charge model (knobs.DefaultChargeModel: simulated
// RU anchored on Azure's published point-operation costs, not measured on
// Azure), or on an Azure Cosmos DB account (Config.Account, with its own
// charges; docs/BENCHMARKING.md); its stress phase runs both modes under
// the runtime on duroxide's stress workload. cmd/durafeed-bench runs
// everything and prints the tables; the same scenarios are Go benchmarks
// (BenchmarkWakeLatency, BenchmarkTimerLateness, BenchmarkIdleCost).
//
// # Method
//
// Every scenario runs in a container of its own on an emulator with 4
// physical partitions (one emulator per injected latency: 0 and 2 ms per
// request, an in-region round trip), or in a throwaway database of the
// account, so scenarios can run at once; every client the Env hands out is
// metered from its answers' x-ms-request-charge (internal/account), which
// attributes every request to its container. All times are read from one
// process clock.
//
// Latency scenarios are closed loops with one item in flight: pause for a
// random interval (default uniform 20 ms–1.02 s), enqueue one item, wait
// until the fetcher returns it, repeat. The pause's width is one polling
// interval, so each enqueue falls at a uniformly random phase of the
// polling loop; each item lands on a random one of the event-driven
// mode's slot blocks, whose reader has typically been quiet for several
// samples. A sample therefore
// never queues behind another item and is pure wake latency. The fetcher
// is one dispatcher loop on one provider: in polling mode it calls fetch
// and, on nil, sleeps 1 s (the seeds' runtime); in event-driven mode fetch
// long-polls (5 s) and the loop fetches again at once. Each fetched
// instance is completed by an ack in a goroutine of its own, off the loop.
//
//   - wake-remote: StartOrchestration for a new instance, enqueued through
//     a second provider instance in the same mode with its own SDK client
//     and connections (it never fetches, so an event-driven one never joins
//     the lease group: another process's client); latency = fetch return −
//     enqueue return.
//   - wake-remote-busy: wake-remote while the same client enqueues
//     background work for other instances every 50 ms, which the fetcher
//     processes too, so the owner's change feed is active (a loaded
//     system) rather than backing off between samples.
//   - wake-local: the same, enqueued through the fetcher's own provider.
//     In event-driven mode the enqueue locks the turn for the waiting
//     fetch itself (engine LockOnWrite), which can return it before the
//     enqueue has returned: a value can be slightly negative.
//   - timer: TimerFired enqueued through the second instance with a visibility
//     delay d (default uniform 200 ms–1 s); lateness = fetch return −
//     (enqueue return + d). The item is visible from enqueue start + d, so a
//     value can be negative by up to one write round trip.
//
// Percentiles are nearest-rank (Percentile): with fewer than 100 samples
// the p99 is the maximum (hence 100 samples by default). Run schedules the
// polling latency scenarios first, all at once, then the event-driven ones
// one at a time (each capped at 60 s, so a slow one reports fewer
// samples), since millisecond figures suffer from CPU contention on small
// machines, and the idle scenarios afterwards, all at once.
//
// Idle scenarios open 1 or 3 replicas (providers with default settings) on
// one container, each running one orchestration and one worker dispatcher
// loop as above, wait a warm-up (default 15 s: lease acquisition and
// balancing, readers backing off), then count the container's requests and
// simulated request charge over a window (default 30 s, read in 6 slices
// to show that the rate is steady). Rates are per minute and per replica:
// the container's total divided by the replica count, so shared costs
// (lease partition, heartbeats) are spread over the replicas. The
// breakdown labels requests by operation, by resource type when not a
// document, and "[$leases]" for the lease partition.
//
// Before any scenario, StartEnv probes each emulator (Probe): the median
// point read issued back to back, the median point read issued alone after
// a pause of a quarter to one active feed delay (isolated), and the p99 of
// bare wakes: a bare SDK reader of one partition's change feed, reading
// every active feed delay, that commits a two-document batch as soon as it
// sees a document another client wrote (what any feed-woken wake must do,
// without the engine). Every request of a wake is issued by a process that
// has been quiet since its last one, so the isolated read is the round
// trip the targets count; at 0 ms injected it was 1.8 to 3.5 times the
// back-to-back one on 2 shared cores (threads and cores asleep), where
// the p99 target counted in back-to-back round trips lies at or below the
// bare wakes' own p99. Both round trips and the bare wakes' p99 are
// printed with the target.
//
// Targets (reported, never asserted): event-driven p50 wake latency at
// least 20 times lower than polling's; event-driven p99 wake latency at
// most the active feed delay (provider.DefaultFeedActiveDelay) plus five
// isolated round trips; idle simulated charge per replica at most a fifth
// of polling's; and the sweep's targets on every case (p99 at most a
// quarter of polling's, cost per wake at most polling's: a closed loop
// does more work a minute the faster its wakes are). Every target the
// configuration asks for (each configured scenario, comparisons when both
// modes run) is a row of the table: when a side has no result, or one
// without samples, the row is NO and says what is missing, and the table
// ends with the count of targets met.
//
// The sweep (RunSweep, -sweep) is open-loop instead: items from another
// provider's client at Poisson arrival times fixed in advance by the
// seed (so both modes see the same arrivals), or a burst of them at once
// after a quiet minute; every request of the container is charged over
// windows of equal length. Its targets per load: event-driven p50 at
// least 10× below polling's (20× where polling's is above 100 ms) or
// within 2× of the floor where 10× would fall below it, p99 at most a
// quarter of polling's, RU a minute at most polling's. The floor, of a
// Poisson load and of the burst alike, is two isolated round trips of the
// probe's bare point read (SweepFloorRoundTrips: one read that sees the
// item, one write that claims it, the least any wake needs): a bound
// measured without the code under test. FetchFloor (a fetch of work
// already signalled) and BurstFloor (a burst the replica writes itself)
// time durafeed's own code path; in two published runs the burst's lay
// above the p50 it bounded, so the criterion passed on the system's own
// noise. They are printed as information only. Fast loads and the burst
// run one at a time, slow loads beside them.
//
// # Stress
//
// The stress phase (RunStress, -stress) is duroxide's stress test
// parallel_orchestrations on durafeed's runtime rather than bare provider
// calls. The orchestration FanoutOrchestration calls TasksPerInstance
// (default 5) activities ProcessTask in parallel, each sleeping
// ActivityDelay (default 10 ms), and joins them. A pump keeps MaxInFlight
// (default 20) instances in flight, each started and then waited for by
// runtime.Client on a provider of its own in the same mode that never
// fetches (a client in another process; -stress-client replica uses the
// first replica's provider instead), until Orchestrations (default
// 1,000) have been started or MaxDuration (default 3 min) has passed.
// Event-driven replicas join dispatch and settle their leases
// (engine.Engine.Join) before the first start, as a service does before
// it reports ready, so the table is the steady state.
// Each scenario has a fresh container and 1 or 3 replicas, each a
// provider and a runtime with 2 orchestration and 2 worker dispatchers
// (duroxide's stress configuration), other runtime options at their
// defaults. Polling replicas poll every PollInterval (default 100 ms,
// duroxide's dispatcher_min_poll_interval in that configuration: a
// stronger baseline than the seeds' 1 s the other phases use);
// event-driven ones take the environment's engine options (peer wake,
// feed budget) as every other scenario.
//
// Per scenario: instances launched, completed and failed; orchestrations
// a second (completed over the time from the first start to the last
// completion) and activities a second; the latency of completed instances
// (start call to the return of the wait that saw them complete: the
// client hears of completions its provider commits or, with the peer
// wake channel, the owner reports, and otherwise reads the status 5 ms
// doubling to 500 ms apart); turns per
// orchestration and each replica's shares of turns and activities
// (counted by a wrapper around the runtime's provider: successful
// AckOrchestrationItem and AckWorkItem calls); and every request on the
// container from the replicas' opening to their close, per completed
// orchestration, in total and by operation, against the write floor
// (WriteFloor: each document an orchestration leaves written once, each
// message it consumed created and deleted once, read from ten completed
// instances after the counts are taken). Scenarios run one at a time;
// each stops its runtimes, closes its providers and deletes its container
// before the next, so none carries another's documents.
// Its targets, per injected latency and replica count: event-driven
// throughput at least twice polling's with every instance completed in
// both, p99 and turns per orchestration at most polling's, every
// event-driven replica's share of turns at least 20% with 3 replicas (of
// activities too, informational), and one event-driven replica at 0 ms
// at least 28 orchestrations a second (duroxide's published figure for
// this workload on a SQLite file is 27.95).
//
// # Backlog
//
// The backlog phase (RunBacklog, -backlog) asks whether a deep backlog
// costs what a shallow one does. Per depth (default 100 and 100,000) and
// mode, in a fresh container, a client (a provider that never fetches)
// enqueues that many starts of the stress workload (a fan-out of 5
// activities, here sleeping 1 ms so that dispatch sets the pace), 32
// calls at once, while no replica runs; the enqueue is timed and charged
// apart. Then Replicas (default 3) replicas open, each a provider and a
// runtime as in the stress phase, and drain it: the drain runs from the
// replicas' start (event-driven ones join first: lease acquisition and
// the catch-up query that reads the backlog of every slot acquired) to
// the last final turn committed (counted by the ackCounter, so the wait
// adds no request), and is bounded by MaxDrain (default 60 min). Every
// request on the container in that window is charged to it, per
// completed orchestration, against the write floor; orchestrations a
// second are counted from the runtimes' start (after the join, which
// weighs on a drain of 100 that lasts a second or two). The store's own
// count of completed instances is read afterwards.
//
// "No fetch scans the backlog" is read from the emulator itself: an
// innermost middleware (queryScans) reads each document query page's
// examined documents back from the emulator's own charge (2.79 + 0.05 per
// document examined, before the charge model replaces it) and follows a
// query's continuations, so the report has, per operation label, the
// queries, the documents examined and returned, and the most one query
// examined. A fetch that scanned the backlog would examine about the
// depth in one query, and its examined documents per orchestration would
// grow with the depth. The emulator counts the documents it evaluates in
// the query's scope (one logical partition, or the container); its
// secondary indexes are per physical partition, so selecting those
// candidates walks postings of every instance in the physical partition,
// work the count does not show and a deep container makes slow
// (docs/backlog).
//
// Memory: the replicas run in the bench process beside the emulator, so
// the heap the phase reads (runtime.MemStats.HeapInuse and the live heap,
// every MemoryInterval during the drain) is everything: emulator,
// replicas, clients and bench. The heap profile's in-use bytes split it:
// allocations whose stack runs through the emulator's code are the
// emulator's, the rest the replicas' (with the clients, the bench and the
// Go runtime's own), themselves split by the durafeed package nearest the
// allocation. The emulator's memory for the backlog is the live heap's
// growth over the enqueue, each end read after a garbage collection.
// cmd/durafeed-bench samples the heap profile every 64 KiB in a backlog
// run (Go's default is 512 KiB).
//
// Its targets, per mode and injected latency, the deepest backlog against
// the shallowest of the same run, each drained completely: RU per
// orchestration at most 1.05× (TargetBacklogRURatio), orchestrations a
// second at least 0.95× (TargetBacklogPaceRatio) and, on the emulator,
// documents examined per orchestration at most 1.05×
// (TargetBacklogExaminedRatio). A depth without a result is a NO. Polling
// may run other depths (PollingDepths): each of its fetches reads every
// visible queued message of its share, so its drain grows with the square
// of the depth.
package bench
