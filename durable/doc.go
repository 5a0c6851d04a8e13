// Package durable is durafeed's storage contract for durable orchestrations:
// the Provider and ProviderAdmin interfaces, the work items that travel on
// the provider's two queues, and the types exchanged between the runtime and
// a provider. It is a Go translation of the provider contract of duroxide
// (the Rust durable task framework), adapted to Go: every method takes a
// context, optional values are nil pointers or documented zero values, and
// errors are *ProviderError values usable with errors.Is and errors.As.
//
// The runtime (package runtime) drives a Provider; providers (package
// provider for Azure Cosmos DB) implement it; package conformance checks an
// implementation against the contract. Events of the durable history live in
// the sub-package history.
//
// Wire format. Work items and events are stored as JSON tagged unions: an
// object with a "type" member naming the variant and the variant's fields
// in snake_case. Decoding is strict (unknown variants or members, missing
// required members and wrong types are errors wrapping ErrMalformed) so that
// corrupt or newer data is reported, never misread. Optional fields are
// omitted when empty, so adding one is backwards compatible.
package durable
