package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/conformance"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/store"
)

const testDatabase = "conformance"

// emu is the emulator shared by the package's tests, with 4 physical
// partitions per container.
var (
	emu        *cosmosemu.Server
	middleware = &faultInjector{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The suite's scenarios mostly wait on round trips and lock expiry, not
	// CPU: run more of them at once than the default GOMAXPROCS.
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "16")
	}
	// The fault injector is outermost so that its counts see the simulated
	// request charges the knobs' charge model sets.
	charges := knobs.NewCharges(knobs.DefaultChargeModel())
	srv, err := cosmosemu.Start(context.Background(), cosmosemu.Options{PartitionCount: 4,
		Middleware: []cosmosemu.Middleware{middleware.middleware, charges.Middleware()}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "cosmosemu:", err)
		os.Exit(1)
	}
	emu = srv
	code := m.Run()
	_ = srv.Close()
	os.Exit(code)
}

// containerSeq numbers the containers the tests of this process create.
var containerSeq atomic.Int64

// freshContainer returns a container name no other test of this process
// uses, so that a test run again (-count) starts from an empty container.
func freshContainer(name string) string {
	return fmt.Sprintf("%s-%d", name, containerSeq.Add(1))
}

// testCfg is a provider configuration of the tests, flat: the fields of
// every concern, and the test's own switches. config maps it onto Config.
type testCfg struct {
	Container                                   string
	Mode                                        Mode
	ReconcileInterval, ReconcileAge             time.Duration
	PollInterval                                time.Duration
	InstanceCacheSize                           int
	RequestRetention                            time.Duration
	ReplicaID                                   string
	LeaseBlocks                                 int
	LeaseExpiry, HeartbeatInterval              time.Duration
	WatchActiveDelay, WatchIdleCeiling          time.Duration
	FeedActiveDelay, FeedIdleCeiling            time.Duration
	FeedEmptyReadBudget                         float64
	SafetySweepInterval                         time.Duration
	OrchestrationDispatchers, WorkerDispatchers int
	Logger                                      *zap.Logger

	leasePartition string
	// joinEagerly joins dispatch at once and waits for the replica's share
	// (engine.Join) instead of joining at the first orchestration fetch.
	joinEagerly bool
	noHeads     bool
	idleLeave   time.Duration
	feedHold    time.Duration
	peerWake    *engine.PeerWakeOptions
	siblingWait time.Duration
	awaitHold   time.Duration
	// noEager is engine.Options.DisableEager.
	noEager bool
	// meterProvider is Config.MeterProvider.
	meterProvider metric.MeterProvider
}

// config is the Config of c.
func (c testCfg) config() Config {
	return Config{
		Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), Database: testDatabase, Container: c.Container,
			ClientOptions: emu.ClientOptions(), RepairAge: c.ReconcileAge, InstanceCacheSize: c.InstanceCacheSize,
			RequestRetention: c.RequestRetention},
		Mode: c.Mode,
		Polling: &polling.Options{ReconcileInterval: c.ReconcileInterval, PollInterval: c.PollInterval,
			OrchestrationDispatchers: c.OrchestrationDispatchers, WorkerDispatchers: c.WorkerDispatchers},
		EventDriven: &engine.Options{
			ReplicaID: c.ReplicaID,
			Leases: &engine.LeaseOptions{Blocks: c.LeaseBlocks, Expiry: c.LeaseExpiry, HeartbeatInterval: c.HeartbeatInterval,
				WatchActiveDelay: c.WatchActiveDelay, WatchIdleCeiling: c.WatchIdleCeiling, PartitionKeyValue: c.leasePartition},
			Feed: &engine.FeedOptions{ActiveDelay: c.FeedActiveDelay, IdleCeiling: c.FeedIdleCeiling, WarmHold: c.feedHold,
				EmptyReadBudget: c.FeedEmptyReadBudget},
			SafetySweepInterval: c.SafetySweepInterval,
			IdleLeave:           c.idleLeave,
			DisableHeads:        c.noHeads,
			PeerWake:            c.peerWake,
			SiblingWait:         c.siblingWait,
			AwaitHold:           c.awaitHold,
			DisableEager:        c.noEager,
		},
		Logger:        c.Logger,
		MeterProvider: c.meterProvider,
	}
}

// testConfig is a polling provider configuration on the emulator.
func testConfig(container string) testCfg {
	return testCfg{Container: container, ReconcileInterval: 250 * time.Millisecond, ReconcileAge: 250 * time.Millisecond,
		Mode: ModePolling}
}

// eventConfig is an event-driven provider configuration on the emulator
// with short lease and feed settings.
func eventConfig(container string) testCfg {
	c := testConfig(container)
	c.Mode = ModeEventDriven
	// Short, yet long enough that a replica of a loaded -race run (two
	// packages on 2 cores) keeps heartbeating in time.
	c.LeaseExpiry, c.HeartbeatInterval = 3*time.Second, 600*time.Millisecond
	c.WatchActiveDelay, c.WatchIdleCeiling = 10*time.Millisecond, 100*time.Millisecond
	// 16 RU/s of 1 RU empty reads: each of the emulator's 4 physical
	// partitions read every 250 ms while idle.
	c.FeedActiveDelay, c.FeedEmptyReadBudget = 10*time.Millisecond, 16
	c.SafetySweepInterval = 5 * time.Second
	if os.Getenv("DURAFEED_TEST_PEER_WAKE") != "" {
		// Every event-driven test with the peer wake channel on.
		c.peerWake = &engine.PeerWakeOptions{}
	}
	return c
}

// newProvider opens a provider of c; with joinEagerly it joins dispatch
// and waits (bounded, for a loaded machine) for its share, and keeps it
// however long the test goes without an orchestration fetch (unless
// idleLeave says otherwise): on a loaded machine a test's gaps between
// fetches can exceed the default 5 s, and a replica that left would stop
// reading the feed the test waits on.
func newProvider(ctx context.Context, c testCfg) (*Provider, error) {
	if c.joinEagerly && c.idleLeave == 0 {
		c.idleLeave = time.Hour
	}
	p, err := New(ctx, c.config())
	if err != nil {
		return nil, err
	}
	if c.joinEagerly && p.ev() != nil {
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = p.ev().Join(jctx) // a share reached only by others leaving is not noticed: the bound
		cancel()
	}
	return p, nil
}

func openProvider(t testing.TB, cfg testCfg) *Provider {
	t.Helper()
	p, err := newProvider(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func rawContainer(t testing.TB, container string) *azcosmos.ContainerClient {
	t.Helper()
	c, err := emu.NewClient()
	require.NoError(t, err)
	cc, err := c.NewContainer(testDatabase, container)
	require.NoError(t, err)
	return cc
}

// cosmosFactory opens providers for the conformance suite: one container
// per store in one shared database.
type cosmosFactory struct{}

func (f *cosmosFactory) Open(t testing.TB, name string) durable.Provider {
	return openProvider(t, testConfig(name))
}

func (f *cosmosFactory) Options() conformance.Options {
	return conformance.Options{LockTimeout: 1500 * time.Millisecond}
}

func (f *cosmosFactory) CorruptInstanceHistory(t testing.TB, store, instance string) {
	cc := rawContainer(t, store)
	ctx := context.Background()
	pager := cc.NewQueryItemsPager("SELECT * FROM c WHERE c.type = 'history'", azcosmos.NewPartitionKeyString(instance), nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		require.NoError(t, err)
		for _, raw := range page.Items {
			var doc map[string]any
			require.NoError(t, json.Unmarshal(raw, &doc))
			doc["eventData"] = `{"type":"NoSuchEvent","corrupt":`
			b, _ := json.Marshal(doc)
			_, err := cc.ReplaceItem(ctx, azcosmos.NewPartitionKeyString(instance), doc["id"].(string), b, nil)
			require.NoError(t, err)
		}
	}
}

func (f *cosmosFactory) MaxAttemptCount(t testing.TB, store, instance string) uint32 {
	var most uint32
	for _, r := range queryRows[struct {
		AttemptCount uint32 `json:"attemptCount"`
	}](t, store, instance, "SELECT c.attemptCount FROM c WHERE c.type = 'orch_queue'") {
		most = max(most, r.AttemptCount)
	}
	return most
}

// queryRows runs a query in one partition of a test container and decodes
// every row.
func queryRows[T any](t testing.TB, container, partition, sql string) []T {
	t.Helper()
	pager := rawContainer(t, container).NewQueryItemsPager(sql, azcosmos.NewPartitionKeyString(partition), nil)
	var rows []T
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		require.NoError(t, err)
		for _, raw := range page.Items {
			var r T
			require.NoError(t, json.Unmarshal(raw, &r))
			rows = append(rows, r)
		}
	}
	return rows
}

func TestConformance(t *testing.T) {
	conformance.Run(t, &cosmosFactory{})
}

// eventFactory opens event-driven providers for the conformance suite.
// The suite's replicas expect any of them to fetch any instance, which
// slot ownership deliberately does not give (a slot's orchestrations run
// on its owner), so every provider it opens is a complete event-driven
// replica of its own: its own lease partition, owning every slot, reading
// the whole feed. Correctness between them rests, as it must, on the
// ETag-conditional locks; lease sharing is tested by the multi-replica
// tests.
type eventFactory struct{}

func (f *eventFactory) Open(t testing.TB, store string) durable.Provider {
	cfg := eventConfig(store)
	cfg.LeaseBlocks = 1
	cfg.leasePartition = "$leases-" + randomID()
	cfg.joinEagerly = true
	return openProvider(t, cfg)
}

func (f *eventFactory) Options() conformance.Options {
	o := (&cosmosFactory{}).Options()
	o.LongPolling = true
	return o
}

func (f *eventFactory) CorruptInstanceHistory(t testing.TB, store, instance string) {
	(&cosmosFactory{}).CorruptInstanceHistory(t, store, instance)
}

func (f *eventFactory) MaxAttemptCount(t testing.TB, store, instance string) uint32 {
	return (&cosmosFactory{}).MaxAttemptCount(t, store, instance)
}

func TestConformanceEventDriven(t *testing.T) {
	conformance.Run(t, &eventFactory{})
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
