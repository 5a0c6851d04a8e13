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
//	defer p.Close()
package provider
