// Package provider is durafeed's Azure Cosmos DB implementation of
// durable.Provider and durable.ProviderAdmin. It composes three parts,
// each a package of its own:
//
//   - package store: the documents and every protocol that writes them,
//     mode-free;
//   - the dispatcher of Config.Mode: package engine (ModeEventDriven, the
//     default: fetches woken by the container's change feed) or package
//     polling (ModePolling: the seeds' algorithm, the benchmark's
//     baseline);
//   - package outbox: delivery of the intents a commit writes, by the
//     dispatcher's rule of who delivers.
//
// A call that writes goes to the store, which returns what it wrote; the
// Provider hands that to the dispatcher (signals, intent delivery) before
// the call returns. Fetches are the dispatcher's.
//
//	p, err := provider.New(ctx, provider.Config{Store: store.Options{Endpoint: ep, Key: key}})
//	if err != nil {
//		return err
//	}
//	defer p.Close()
//
// # Which settings apply to which mode
//
// Config.Store (store.Options) applies in both modes. Config.EventDriven
// (engine.Options: leases, the change feed and its budget, the sibling
// wait and the await hold, the peer wake channel) applies only in
// ModeEventDriven, and Config.Polling (polling.Options: the poll
// interval, the concurrent fetches' slot shares, the reconciler) only in
// ModePolling; the other mode's struct is ignored. Of a runtime's
// options (package runtime), OrchestrationConcurrency and
// WorkerConcurrency are the fetch loops in both modes (give
// polling.Options the same counts, so each loop scans a share of the
// slots first); PollTimeout is how long an event-driven
// fetch waits for work (polling fetches never wait); IdleBackoff, the
// pause after an empty fetch, defaults to polling mode's PollInterval (the
// seeds' 1 s, stated through durable.PollPacer) and matters little in
// event-driven mode, whose empty fetches have already waited.
//
// # What a waiting client hears
//
// A client's WaitForOrchestration (package runtime) is told of changes
// through durable.InstanceWatcher: of the turns its own provider commits
// in both modes (a runtime's own client hears of its replica's
// completions at once), and in event-driven mode with the peer wake
// channel on, of the turns any replica commits (the slot's owner reports
// them). Otherwise it reads the status on a back-off up to 500 ms.
package provider
