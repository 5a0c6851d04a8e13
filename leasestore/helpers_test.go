package leasestore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/slots"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// Short settings for tests: a crashed replica's leases move after ~0.6 s.
const (
	testExpiry    = 600 * time.Millisecond
	testHeartbeat = 120 * time.Millisecond
	testActive    = 10 * time.Millisecond
	testCeiling   = 50 * time.Millisecond
)

// relaxed is for tests about anything but timing: a longer expiry keeps a
// heavily loaded machine from fencing replicas (watch settings stay short).
func relaxed(o *Options) { o.LeaseExpiry, o.HeartbeatInterval = 3*time.Second, 300*time.Millisecond }

func testOptions(id string) Options {
	return Options{
		ReplicaID:         id,
		Host:              "host-of-" + id, // a restart under the same id is in place unless a test says otherwise
		PartitionKey:      "/instanceId",
		Ranges:            slots.Ranges(16),
		LeaseExpiry:       testExpiry,
		HeartbeatInterval: testHeartbeat,
		WatchActiveDelay:  testActive,
		WatchIdleCeiling:  testCeiling,
	}
}

// write is a document write seen by the emulator.
type write struct {
	at     time.Time // arrival, before the handler ran
	op     cosmosemu.OperationType
	doc    string // document id ("" for batches)
	status int
}

// recorder is emulator middleware recording document writes.
type recorder struct {
	mu     sync.Mutex
	writes []write
}

func (r *recorder) middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			at := time.Now()
			resp := next(ctx, req)
			switch req.Operation {
			case cosmosemu.OpCreate, cosmosemu.OpReplace, cosmosemu.OpUpsert, cosmosemu.OpPatch, cosmosemu.OpDelete, cosmosemu.OpBatch:
				doc := ""
				if i := strings.LastIndex(req.ResourceLink, "/docs/"); i >= 0 {
					doc = req.ResourceLink[i+len("/docs/"):]
				}
				status := 0
				if resp != nil {
					status = resp.Status
				}
				r.mu.Lock()
				r.writes = append(r.writes, write{at: at, op: req.Operation, doc: doc, status: status})
				r.mu.Unlock()
			}
			return resp
		}
	}
}

func (r *recorder) snapshot() []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]write(nil), r.writes...)
}

// env is one emulator with one container, for one test.
type env struct {
	t   testing.TB
	srv *cosmosemu.Server
	k   *knobs.Knobs
	rec *recorder
	log *eventLog
}

func newEnv(t testing.TB) *env { return newEnvWith(t) }

// newEnvWith is newEnv with more emulator middleware, outermost first,
// placed before the recorder.
func newEnvWith(t testing.TB, mw ...cosmosemu.Middleware) *env {
	t.Helper()
	k := knobs.MustNew(knobs.Config{Charges: knobs.DefaultChargeModel()})
	rec := &recorder{}
	chain := append(append(append([]cosmosemu.Middleware(nil), mw...), rec.middleware()), k.Middleware()...)
	srv, err := cosmosemu.Start(context.Background(), cosmosemu.Options{Middleware: chain})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	e := &env{t: t, srv: srv, k: k, rec: rec, log: newEventLog()}
	c := e.container(nil)
	_, err = c.Read(context.Background(), nil)
	if err != nil {
		cl := e.client(nil)
		ctx := context.Background()
		_, err = cl.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
		require.NoError(t, err)
		db, err := cl.NewDatabase("db")
		require.NoError(t, err)
		_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "c", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/instanceId"}, Version: 2}}, nil)
		require.NoError(t, err)
	}
	return e
}

// cutTransport fails every request while cut is set: a network partition
// of one client.
type cutTransport struct {
	inner *http.Client
	cut   *atomic.Bool
}

func (c cutTransport) Do(req *http.Request) (*http.Response, error) {
	if c.cut != nil && c.cut.Load() {
		return nil, errors.New("test: network partition")
	}
	return c.inner.Do(req)
}

func (e *env) client(cut *atomic.Bool) *azcosmos.Client {
	cred, err := azcosmos.NewKeyCredential(e.srv.Key())
	require.NoError(e.t, err)
	opts := e.srv.ClientOptions()
	opts.Transport = cutTransport{inner: e.srv.HTTPClient(), cut: cut}
	opts.Retry.MaxRetries = -1
	cl, err := azcosmos.NewClientWithKey(e.srv.Endpoint(), cred, opts)
	require.NoError(e.t, err)
	return cl
}

func (e *env) container(cut *atomic.Bool) *azcosmos.ContainerClient {
	c, err := e.client(cut).NewContainer("db", "c")
	require.NoError(e.t, err)
	return c
}

// node is one running Store with its own client.
type node struct {
	name   string // instance name in the event log: ReplicaID#n
	s      *Store
	cut    atomic.Bool
	cancel context.CancelFunc
	done   chan error
	leases chan changefeed.Lease // everything delivered on Acquired
}

var instances atomic.Int64

// start runs a store; mod adjusts the options.
func (e *env) start(id string, mod func(*Options)) *node {
	e.t.Helper()
	n := &node{name: fmt.Sprintf("%s#%d", id, instances.Add(1)), done: make(chan error, 1), leases: make(chan changefeed.Lease, 1024)}
	o := testOptions(id)
	o.Logger = zaptest.NewLogger(e.t, zaptest.Level(zap.WarnLevel))
	if mod != nil {
		mod(&o)
	}
	user := o.OnChange
	o.OnChange = func(ev Event) {
		e.log.add(n.name, ev)
		if user != nil {
			user(ev)
		}
	}
	s, err := New(e.container(&n.cut), o)
	require.NoError(e.t, err)
	n.s = s
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- s.Run(ctx) }()
	go func() {
		for l := range s.Acquired() {
			n.leases <- l
		}
		close(n.leases)
	}()
	e.t.Cleanup(func() { n.stop() })
	return n
}

// stop cancels Run without releasing (a crash, as far as others can tell).
func (n *node) stop() {
	n.cancel()
	<-n.done
	n.done <- nil
}

// entry is one ownership change in the shared log.
type entry struct {
	seq      int64
	at       time.Time
	instance string
	ev       Event
}

// eventLog is the shared, totally ordered log of Acquired/Done
// transitions of every store of a test (the sequence number is the logical
// clock).
type eventLog struct {
	mu      sync.Mutex
	entries []entry
	changed chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(instance string, ev Event) {
	l.mu.Lock()
	l.entries = append(l.entries, entry{seq: int64(len(l.entries)), at: time.Now(), instance: instance, ev: ev})
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

func (l *eventLog) snapshot() []entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]entry(nil), l.entries...)
}

// holders replays the log: who believes it holds each lease.
func holders(entries []entry) map[int]string {
	h := map[int]string{}
	for _, e := range entries {
		switch e.ev.Kind {
		case EventAcquired:
			h[e.ev.Lease.Index] = e.instance
		case EventLost:
			if h[e.ev.Lease.Index] == e.instance {
				delete(h, e.ev.Lease.Index)
			}
		}
	}
	return h
}

func counts(h map[int]string) map[string]int {
	c := map[string]int{}
	for _, who := range h {
		c[who]++
	}
	return c
}

// waitFor re-evaluates cond after every logged change until it holds or
// timeout passes (the timeout only guards against hanging).
func (l *eventLog) waitFor(t testing.TB, timeout time.Duration, what string, cond func(h map[int]string) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ch := l.changed
		entries := append([]entry(nil), l.entries...)
		l.mu.Unlock()
		if cond(holders(entries)) {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; holders %v", what, counts(holders(l.snapshot())))
		}
	}
}

// balanced reports whether all n leases are held by exactly the given
// instances, within one lease of each other.
func balanced(n int, instances ...string) func(map[int]string) bool {
	return func(h map[int]string) bool {
		if len(h) != n {
			return false
		}
		c := counts(h)
		if len(c) != len(instances) {
			return false
		}
		lo, hi := n, 0
		for _, in := range instances {
			v, ok := c[in]
			if !ok {
				return false
			}
			lo, hi = min(lo, v), max(hi, v)
		}
		return hi-lo <= 1
	}
}

// checkNoOverlap verifies that no lease ever had two instances believing
// they held it, and that epochs grow with every acquisition.
func checkNoOverlap(t testing.TB, entries []entry) {
	t.Helper()
	holder := map[int]string{}
	epoch := map[int]int64{}
	for _, e := range entries {
		i := e.ev.Lease.Index
		switch e.ev.Kind {
		case EventAcquired:
			require.Empty(t, holder[i], "lease %d acquired by %s at #%d while %s holds it", i, e.instance, e.seq, holder[i])
			require.Greater(t, e.ev.Lease.Epoch, epoch[i], "lease %d epoch must grow", i)
			holder[i], epoch[i] = e.instance, e.ev.Lease.Epoch
		case EventLost:
			if holder[i] == e.instance {
				delete(holder, i)
			}
		}
	}
}

func readLease(t testing.TB, c *azcosmos.ContainerClient, i int) (leaseDoc, azcore.ETag) {
	t.Helper()
	resp, err := c.ReadItem(context.Background(), azcosmos.NewPartitionKeyString(DefaultPartitionKeyValue), leaseID(i), nil)
	require.NoError(t, err)
	d, err := decodeDoc(resp.Value)
	require.NoError(t, err)
	require.NotNil(t, d.lease)
	return *d.lease, resp.ETag
}

func names(ns ...*node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.name
	}
	sort.Strings(out)
	return out
}
