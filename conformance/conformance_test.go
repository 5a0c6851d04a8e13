package conformance_test

import (
	"flag"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/durafeed/durafeed/conformance"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/internal/memprovider"
)

// TestMain runs 16 scenarios at a time unless -parallel says otherwise:
// they mostly wait (absence windows, lock expiry, visibility delays)
// rather than compute, and the default, GOMAXPROCS, would run them nearly
// one after the other on a small machine. The provider package does the
// same for its runs of the suite.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}

// memFactory runs the suite against the in-memory reference provider, which
// is how the suite itself is checked: every scenario must pass on a simple,
// obviously-correct implementation of the contract before it is used to
// judge the Cosmos DB provider. With longPolling it opens long-polling
// handles (memprovider.Store.OpenLongPolling), so that the long-poll
// scenarios are checked too.
type memFactory struct {
	longPolling bool

	mu     sync.Mutex
	stores map[string]*memprovider.Store
}

func newMemFactory(longPolling bool) *memFactory {
	return &memFactory{longPolling: longPolling, stores: map[string]*memprovider.Store{}}
}

func (f *memFactory) store(name string) *memprovider.Store {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.stores[name]
	if !ok {
		s = memprovider.NewStore()
		f.stores[name] = s
	}
	return s
}

func (f *memFactory) Open(_ testing.TB, store string) durable.Provider {
	if f.longPolling {
		return f.store(store).OpenLongPolling()
	}
	return f.store(store).Open()
}

func (f *memFactory) Options() conformance.Options {
	return conformance.Options{LockTimeout: 500 * time.Millisecond, LongPolling: f.longPolling}
}

func (f *memFactory) CorruptInstanceHistory(_ testing.TB, store, instance string) {
	f.store(store).CorruptHistory(instance)
}

func (f *memFactory) MaxAttemptCount(_ testing.TB, store, instance string) uint32 {
	return f.store(store).MaxAttemptCount(instance)
}

func TestConformanceOnReferenceProvider(t *testing.T) {
	conformance.Run(t, newMemFactory(false))
}

// TestConformanceOnLongPollingReference runs the whole suite again against
// long-polling handles: the long-poll scenarios, which skip on a
// short-polling provider, run here, and every other scenario must hold
// whatever the polling mode.
func TestConformanceOnLongPollingReference(t *testing.T) {
	conformance.Run(t, newMemFactory(true))
}

func TestSuiteSize(t *testing.T) {
	// The suite's own promise: at least 200 scenarios, each uniquely named.
	seen := map[string]bool{}
	for _, c := range conformance.Categories() {
		for _, s := range c.Scenarios {
			key := c.Name + "/" + s.Name
			if seen[key] {
				t.Errorf("duplicate scenario %s", key)
			}
			seen[key] = true
		}
	}
	if n := conformance.Count(); n < 200 {
		t.Errorf("suite has %d scenarios, want at least 200", n)
	}
}
