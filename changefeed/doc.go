// Package changefeed is a change-feed processor for Azure Cosmos DB in Go,
// built on the pull model of the official SDK (azcosmos
// ContainerClient.ReadChangeFeed). The .NET and Java SDKs ship a change-feed
// processor; the Go SDK does not. This package is one, usable on its own:
// it depends on nothing of durafeed but the SDK, zap and the EPK ordering
// it re-exports as Range.
//
// # Use
//
// A Processor reads the feed for the leases a LeaseSource hands it and calls
// a Handler with each page of changes:
//
//	lease := changefeed.NewLocalLease("all", changefeed.FullRange, savedContinuation,
//		func(ctx context.Context, continuation string) error {
//			return os.WriteFile("feed.checkpoint", []byte(continuation), 0o600)
//		})
//	p, err := changefeed.New(container, changefeed.StaticSource(lease),
//		func(ctx context.Context, b changefeed.Batch) error {
//			for _, doc := range b.Documents {
//				if err := process(ctx, doc); err != nil { // doc is a json.RawMessage
//					return err // the batch is offered again
//				}
//			}
//			return nil
//		}, changefeed.Options{Logger: logger})
//	go p.Run(ctx)
//	...
//	p.Stop(ctx)
//
// LocalLease and StaticSource serve a single process reading fixed ranges.
// Several processes share a container by implementing Lease and
// LeaseSource over a lease store (durafeed's leasestore keeps lease
// documents in Cosmos DB): the source acquires, renews and balances leases,
// and hands each acquired one to the processor; Lease.Done tells the
// processor it is gone.
//
// # Leases and reading
//
// A lease is an exclusive claim on an EPK range: a whole physical
// partition, part of one, or several. The processor runs one reader
// goroutine per lease. A reader keeps one position per physical partition
// its range overlaps (its continuation lists them; see Lease.Continuation)
// and reads them in turn, one SDK call each.
//
// azcosmos v1.5.0 resolves a FeedRange to whole physical partitions: asked
// for part of a partition, it returns the changes of the whole partition.
// The processor therefore narrows every read of a partial range with the
// x-ms-start-epk / x-ms-end-epk request headers (the way the .NET and Java
// SDKs read EPK sub-ranges), so a lease receives exactly the documents
// whose partition key hashes into its range.
//
// # Guarantees
//
// At least once, in order per partition key: documents arrive in the
// service's LSN order, so the changes to one partition key arrive in the
// order they were made (the feed gives the latest version of each document;
// intermediate versions written between two reads are not seen, and
// deletes are not in the feed). A lease's continuation is checkpointed only
// after the handler returned nil for the batch, and covers exactly that
// batch: a failing batch is retried (with backoff, for as long as the
// lease is held) and nothing after it is read or checkpointed. A new owner
// of a lease resumes from its last checkpoint, so what it may see twice is
// only what was handled after that checkpoint.
//
// Partition splits: a position on a partition that has split answers
// 410/1002; the SDK refreshes its routing map and reads the children, each
// from the parent's continuation (children inherit the parent's LSNs), and
// the position becomes one per child. Nothing is skipped or repeated, and
// a continuation checkpointed before the split resumes correctly after it,
// on this process or another. Merges: a position narrower than its
// (merged) partition is read with the EPK headers, as the .NET SDK does
// after a merge.
//
// Lease sources may split and merge leases: a continuation is clamped to
// the lease's range, so both halves of a split lease can start from the
// parent's continuation; parts of a range that a continuation does not
// cover start as Options.StartFrom says. With StartFromNow, "now" is fixed
// by the reader's first read, which may come well after the lease was
// acquired; Options.OnPositioned reports when it has, so that an
// application can cover what was written before with a query of its own.
//
// # Polling
//
// A reader that finds changes reads again Options.ActiveDelay after its
// previous read began (default 5 ms; at once after a full page). Each
// read that finds nothing multiplies the pause by BackoffFactor (2) up to
// IdleCeiling (default 1 s); the first change snaps it back. An idle lease
// thus costs one 304 read a second, about 1 RU/s, five times the rate of
// the .NET and Java defaults (5 s) for a fifth of their worst-case pick-up
// latency. Processor.Wake cuts the pause short for ranges the process just
// wrote to, so local writes are picked up in one round trip whatever the
// pause.
//
// Budget (Options.EmptyReadBudget): instead of backing off, idle readers
// spend a fixed number of request units per second on reads that find
// nothing. The pause of an idle reader is then P·c/budget (P the physical
// partitions the Processor's leases overlap, c the measured mean charge
// of a read answered 304), partition k of the container's N read at k/N of that
// period, so the reads are evenly spaced: a change on an idle range waits
// half a period on average, a whole one at most, and the Processor's
// idle spend is the budget whatever its number of leases. Reads that find
// changes continue every ActiveDelay while they keep finding some.
// Options.ReadsPerChange raises the budget with the work: each change
// delivered adds that many reads' worth, decaying over about 2 s, so a
// busy Processor reads more often and a quiet one spends the budget.
// Stats.IdlePeriod and Stats.EmptyReadCharge say what the budget buys.
//
// The readers of one Processor pace themselves together:
//
//   - Shared back-off (without a budget): a reader that finds changes after a deep idle spell
//     wakes the other deep idle readers, which read at once and back off
//     afresh, each at most once a second (Options.IndependentBackoff turns
//     this off). Work that resumes in one range so brings every range the
//     process owns back to short pauses, at the price of a few extra reads
//     per reader.
//   - Warm hold (Options.WarmHold, off by default): for that long after
//     any reader found changes or Wake was called, no reader backs off
//     beyond ActiveDelay, so a change anywhere in the process's ranges is
//     read within ActiveDelay while the process is busy. It costs one
//     read per physical partition per ActiveDelay while warm and nothing
//     while idle.
//   - Turns per physical partition: every answer carries its physical
//     partition's latest LSN, so a reader whose continuation is already at
//     that LSN, as seen by another reader's read of the same partition
//     that began since its own previous look, has nothing to read and
//     skips the request (waiting for such a read still in flight rather
//     than duplicating it), then counts its next pause from that read.
//     The leases of one idle partition thus cost one read per pause
//     between them, not one each; a woken reader relies only on reads
//     begun after it was woken. Stats.SkippedReads counts the requests
//     saved.
//   - Phases: while changes flow, the container's physical partitions are
//     read at offsets spread evenly over ActiveDelay (partition k of n at
//     k/n of it), so the reads of different partitions do not start
//     together; pauses count from when a read was due, not from when its
//     timer fired, so timer lateness does not stretch the period.
//   - Shared reads (Options.SeparateReads turns them off): when the
//     partition did change, the reader whose turn it is reads the span of
//     all the Processor's leases that lie side by side in it, starting at
//     its own position, which is the lowest of the span's (a reader never
//     widens its read over a position behind its own, so one stuck on a
//     failing batch holds no one back). It keeps its own documents and
//     leaves the page for the others, which take the documents in their
//     ranges past their own positions and move to the page's end, waking
//     at once if it holds changes for them. A change therefore costs one
//     read however many of the Processor's leases its partition holds: on
//     a container with a single physical partition, the common small
//     case, eight leases cost what one does. Each lease keeps its own
//     position, checkpoint and handler calls; a page's documents are told
//     apart by their EPKs, computed from the container's partition key
//     definition (read once). Stats.SharedPages counts the reads saved.
//
// Options.Filter drops documents the handler ignores before it is called;
// a page of only such documents is neither handed over nor checkpointed
// and does not reset the pause (so a lease store kept in the same
// container does not keep the reader of its range busy with its own
// checkpoints). Options.CheckpointInterval spaces a lease's checkpoints:
// batches acknowledged within it are recorded by a later cycle's single
// write, at the price of redelivering up to that much to a new owner.
//
// Errors: reads are retried with exponential backoff (RetryInitial to
// RetryMax), honouring the service's x-ms-retry-after-ms on 429; 408, 410,
// 449, 5xx and transport errors are retried quietly, and errors retrying
// cannot fix (401, 403, 404, ...) are retried at RetryMax and logged as
// errors, since giving a lease up is the lease source's decision.
//
// # Lag
//
// Processor.Lag estimates, per lease sub-range, the number of writes (LSNs)
// between the oldest unacknowledged change and the partition's latest LSN,
// and the timestamp of that oldest change. The figures come for free from
// the readers' own answers (the session token carries the partition's
// latest LSN); a sub-range whose last answer is older than two idle
// ceilings is probed with a one-document read. See RangeLag.
//
// # Life cycle
//
// Run blocks until its context ends or Stop is called, then stops every
// reader and returns once all its goroutines have ended. Stop waits for
// that. Neither releases leases. A lost lease (Done closed, or Checkpoint
// failing with ErrLeaseLost) stops its reader at once: the handler's
// context is cancelled and nothing more is checkpointed.
//
// The package is tested against cosmosemu, durafeed's in-process emulator,
// which reproduces the change feed's paging, 304s, LSN ordering and splits
// (410/1002, children inheriting LSNs).
package changefeed
