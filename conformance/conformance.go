// Package conformance is durafeed's provider validation suite: scenarios,
// ported in meaning from duroxide's provider validation suite and the
// provider guide's checklist, that any durable.Provider must pass.
//
// A provider's tests call Run with a Factory:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, myFactory{...}) }
//
// Every scenario runs as a subtest named category/scenario, in parallel with
// the others. Each scenario opens its own store (for the Cosmos provider, its
// own container), and uses unique instance ids, so scenarios never see each
// other's work: fetches are not instance-scoped, so id isolation alone would
// let one scenario lock another's instance.
package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/durafeed/durafeed/durable"
)

// Options describe the provider under test.
type Options struct {
	// LockTimeout is the short lock timeout used by scenarios that wait for a
	// lock to expire; keep it small (about a second) so the suite is fast,
	// yet well above one storage round trip.
	LockTimeout time.Duration
	// ShortPollThreshold is no longer read: the long-polling scenarios
	// check that a short poller (or a fetch with a zero poll timeout)
	// returns without waiting for an hour-long poll timeout, instead of
	// bounding its time, which a loaded machine can exceed. Kept so that
	// existing factories compile.
	//
	// Deprecated: unused.
	ShortPollThreshold time.Duration
	// LongPolling reports that fetches wait up to their poll timeout for work.
	LongPolling bool
}

// Factory opens providers for the suite.
type Factory interface {
	// Open returns a new provider on the named store, creating the store on
	// first use. Providers opened on the same name share all data, as
	// replicas of one deployment do (each with its own client and caches);
	// different names are fully isolated. Providers are closed through
	// t.Cleanup by the factory if they need closing.
	Open(t testing.TB, store string) durable.Provider
	// Options describes the provider.
	Options() Options
	// CorruptInstanceHistory overwrites every stored history event of the
	// instance with data that cannot be decoded (for the deserialization
	// contract scenarios).
	CorruptInstanceHistory(t testing.TB, store, instance string)
	// MaxAttemptCount returns the highest attempt count among the
	// orchestrator-queue messages stored for the instance.
	MaxAttemptCount(t testing.TB, store, instance string) uint32
}

// Scenario is one named guarantee check.
type Scenario struct {
	// Name says the guarantee checked, in snake_case.
	Name string
	// Run checks it; it fails the test through h.T.
	Run func(h *H)
}

// Category groups scenarios.
type Category struct {
	Name      string
	Scenarios []Scenario
}

// Categories returns every category of the suite, in a stable order.
func Categories() []Category {
	return []Category{
		{"instance_creation", instanceCreationScenarios()},
		{"atomicity", atomicityScenarios()},
		{"error_handling", errorHandlingScenarios()},
		{"instance_locking", instanceLockingScenarios()},
		{"lock_expiration", lockExpirationScenarios()},
		{"queue_semantics", queueSemanticsScenarios()},
		{"poison_message", poisonMessageScenarios()},
		{"multi_execution", multiExecutionScenarios()},
		{"cancellation", cancellationScenarios()},
		{"capability_filtering", capabilityFilteringScenarios()},
		{"custom_status", customStatusScenarios()},
		{"kv_store", kvStoreScenarios()},
		{"sessions", sessionScenarios()},
		{"tag_filtering", tagFilteringScenarios()},
		{"long_polling", longPollingScenarios()},
		{"management", managementScenarios()},
		{"deletion", deletionScenarios()},
		{"bulk_deletion", bulkDeletionScenarios()},
		{"prune", pruneScenarios()},
	}
}

// Count returns the number of scenarios in the suite.
func Count() int {
	n := 0
	for _, c := range Categories() {
		n += len(c.Scenarios)
	}
	return n
}

// Run runs every scenario against providers from f, each as a parallel
// subtest category/name.
func Run(t *testing.T, f Factory) {
	for _, c := range Categories() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			for _, s := range c.Scenarios {
				t.Run(s.Name, func(t *testing.T) {
					t.Parallel()
					s.Run(newH(t, f, c.Name+"_"+s.Name))
				})
			}
		})
	}
}

// RunOne runs the scenarios whose category/name matches, for debugging a
// single guarantee: Run with -run does the same through the test runner.
func RunOne(t *testing.T, f Factory, category, name string) {
	for _, c := range Categories() {
		for _, s := range c.Scenarios {
			if c.Name == category && s.Name == name {
				s.Run(newH(t, f, c.Name+"_"+s.Name))
				return
			}
		}
	}
	t.Fatalf("no scenario %s/%s", category, name)
}

// ctxFor returns the test's context, cancelled when the test ends.
func ctxFor(t testing.TB) context.Context { return t.Context() }
