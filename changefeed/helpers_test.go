package changefeed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/durafeed/durafeed/changefeed"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
	"github.com/durafeed/durafeed/internal/epk"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// liveness bounds how long a test waits for something that must happen;
// it only turns a hang into a failure and is never a performance bound.
const liveness = 2 * time.Minute

// env is one emulator (4 physical partitions, knobs middleware, a 410/1002
// counter), a client and container "db"/"c" partitioned on /pk (hash V2).
type env struct {
	k      *knobs.Knobs
	srv    *cosmosemu.Server
	client *azcosmos.Client
	c      *azcosmos.ContainerClient
	hc     *http.Client
	gone   atomic.Int64
}

type envOptions struct {
	cfg knobs.Config
	// noSDKRetries makes the client try each request once, so injected
	// faults reach the processor.
	noSDKRetries bool
}

func newEnv(tb testing.TB, o envOptions) *env {
	tb.Helper()
	e := &env{}
	k, err := knobs.New(o.cfg)
	require.NoError(tb, err)
	e.k = k
	mws := append(k.Middleware(), e.goneCounter)
	srv, err := cosmosemu.Start(context.Background(), cosmosemu.Options{PlainHTTP: true, Middleware: mws})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, srv.Close()) })
	e.srv = srv

	opts := srv.ClientOptions()
	opts.Retry = policy.RetryOptions{RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}
	if o.noSDKRetries {
		opts.Retry = policy.RetryOptions{MaxRetries: -1}
	}
	hc, ok := opts.Transport.(*http.Client)
	require.True(tb, ok)
	e.hc = hc
	tb.Cleanup(hc.CloseIdleConnections)
	cred, err := azcosmos.NewKeyCredential(srv.Key())
	require.NoError(tb, err)
	client, err := azcosmos.NewClientWithKey(srv.Endpoint(), cred, opts)
	require.NoError(tb, err)
	tb.Cleanup(client.Close)
	e.client = client
	ctx := context.Background()
	_, err = client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "db"}, nil)
	require.NoError(tb, err)
	db, err := client.NewDatabase("db")
	require.NoError(tb, err)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{ID: "c",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/pk"}, Version: 2}}, nil)
	require.NoError(tb, err)
	e.c, err = db.NewContainer("c")
	require.NoError(tb, err)
	return e
}

// freshContainer returns container "db"/"c" through a client whose SDK
// caches (container properties, routing map) are its own: azcosmos shares
// them per endpoint, so it addresses the emulator as localhost.
func (e *env) freshContainer(tb testing.TB) *azcosmos.ContainerClient {
	tb.Helper()
	ep := strings.Replace(e.srv.Endpoint(), "127.0.0.1", "localhost", 1)
	cred, err := azcosmos.NewKeyCredential(e.srv.Key())
	require.NoError(tb, err)
	client, err := azcosmos.NewClientWithKey(ep, cred, e.srv.ClientOptions())
	require.NoError(tb, err)
	tb.Cleanup(client.Close)
	c, err := client.NewContainer("db", "c")
	require.NoError(tb, err)
	return c
}

func (e *env) goneCounter(next cosmosemu.Handler) cosmosemu.Handler {
	return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
		resp := next(ctx, req)
		if resp != nil && resp.Status == http.StatusGone && resp.SubStatus == 1002 {
			e.gone.Add(1)
		}
		return resp
	}
}

// feedRequests is the number of change-feed requests the emulator answered.
func (e *env) feedRequests() int64 {
	return e.k.Counters().Snapshot().ByOperation[cosmosemu.OpChangeFeed].Requests
}

// physical returns the container's current physical partitions.
func (e *env) physical(tb testing.TB) []cosmosemu.PartitionKeyRange {
	tb.Helper()
	rs, err := e.srv.PartitionKeyRanges("db", "c")
	require.NoError(tb, err)
	return rs
}

func pkRange(r cosmosemu.PartitionKeyRange) epk.Range {
	return epk.Range{Min: r.MinInclusive, Max: r.MaxExclusive}
}

// doc is what tests write: one new document per change.
type doc struct {
	ID  string `json:"id"`
	PK  string `json:"pk"`
	Seq int    `json:"seq"`
	LSN int64  `json:"_lsn,omitempty"`
}

func keyEPK(tb testing.TB, key string) string {
	tb.Helper()
	e, err := epk.Compute(epk.Hash, 2, []any{key})
	require.NoError(tb, err)
	return e
}

// keysIn returns n keys "<prefix><i>" whose EPKs lie in r.
func keysIn(tb testing.TB, prefix string, r epk.Range, n int) []string {
	tb.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		require.Less(tb, i, 1_000_000)
		k := fmt.Sprintf("%s%d", prefix, i)
		if r.Contains(keyEPK(tb, k)) {
			out = append(out, k)
		}
	}
	return out
}

func (e *env) write(ctx context.Context, key string, seq int) error {
	b, err := json.Marshal(doc{ID: fmt.Sprintf("%s-%05d", key, seq), PK: key, Seq: seq})
	if err != nil {
		return err
	}
	_, err = e.c.CreateItem(ctx, azcosmos.NewPartitionKeyString(key), b, nil)
	return err
}

// writeAll writes seq from..to-1 of every key, one goroutine per key, each
// key's documents in order.
func (e *env) writeAll(tb testing.TB, keys []string, from, to int) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := from; s < to; s++ {
				if err := e.write(context.Background(), k, s); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(tb, err)
	}
}

// memStore keeps the checkpoints of in-memory leases, surviving the lease
// objects as a lease store would.
type memStore struct {
	mu      sync.Mutex
	cont    map[string]string
	history map[string][]string
}

func newMemStore() *memStore {
	return &memStore{cont: map[string]string{}, history: map[string][]string{}}
}

func (s *memStore) get(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cont[id]
}

func (s *memStore) checkpoints(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.history[id]...)
}

// memLease is an in-memory lease backed by a memStore.
type memLease struct {
	id    string
	rng   epk.Range
	cont  string
	store *memStore
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	lost  bool
	// checkpointHook, if set, runs before each checkpoint is recorded; an
	// error fails the checkpoint.
	checkpointHook func() error
}

func (s *memStore) lease(id string, r epk.Range) *memLease {
	return &memLease{id: id, rng: r, cont: s.get(id), store: s, done: make(chan struct{})}
}

func (l *memLease) ID() string            { return l.id }
func (l *memLease) Range() epk.Range      { return l.rng }
func (l *memLease) Continuation() string  { return l.cont }
func (l *memLease) Done() <-chan struct{} { return l.done }

func (l *memLease) Checkpoint(ctx context.Context, c string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return fmt.Errorf("lease %s: %w", l.id, changefeed.ErrLeaseLost)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.checkpointHook != nil {
		if err := l.checkpointHook(); err != nil {
			return err
		}
	}
	l.store.mu.Lock()
	l.store.cont[l.id] = c
	l.store.history[l.id] = append(l.store.history[l.id], c)
	l.store.mu.Unlock()
	return nil
}

// lose makes the lease lost: checkpoints fail from now on and Done closes.
func (l *memLease) lose() {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	l.once.Do(func() { close(l.done) })
}

// memSource hands out leases pushed into it.
type memSource struct{ ch chan changefeed.Lease }

func newMemSource(leases ...changefeed.Lease) *memSource {
	s := &memSource{ch: make(chan changefeed.Lease, 64)}
	for _, l := range leases {
		s.ch <- l
	}
	return s
}

func (s *memSource) Acquired() <-chan changefeed.Lease { return s.ch }

// delivery is one document as a handler saw it.
type delivery struct {
	doc
	lease string
	batch int // index of the batch in the recorder's order
}

// recorder is a handler that records every document of every successful
// batch and lets tests wait on what it has seen.
type recorder struct {
	mu      sync.Mutex
	all     []delivery
	batches []changefeed.Batch
	seen    map[string]int // doc id -> deliveries
	changed chan struct{}
	// fail, if set, decides whether a call fails (before recording).
	fail func(b changefeed.Batch) error
}

func newRecorder() *recorder {
	return &recorder{seen: map[string]int{}, changed: make(chan struct{})}
}

func (r *recorder) handle(ctx context.Context, b changefeed.Batch) error {
	if r.fail != nil {
		if err := r.fail(b); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	idx := len(r.batches)
	r.batches = append(r.batches, b)
	for _, raw := range b.Documents {
		var d doc
		if err := json.Unmarshal(raw, &d); err != nil {
			return err
		}
		r.all = append(r.all, delivery{doc: d, lease: b.LeaseID, batch: idx})
		r.seen[d.ID]++
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// waitUntil blocks until pred (called under the recorder's lock) holds.
func (r *recorder) waitUntil(tb testing.TB, what string, pred func() bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	for {
		r.mu.Lock()
		ok := pred()
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			tb.Fatalf("gave up waiting for %s", what)
		}
	}
}

// waitAll waits until every seq in [0, n) of every key was delivered.
func (r *recorder) waitAll(tb testing.TB, keys []string, n int) {
	tb.Helper()
	r.waitUntil(tb, "every document", func() bool {
		for _, k := range keys {
			for s := 0; s < n; s++ {
				if r.seen[fmt.Sprintf("%s-%05d", k, s)] == 0 {
					return false
				}
			}
		}
		return true
	})
}

func (r *recorder) snapshot() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.all...)
}

func (r *recorder) batchCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

// byKey groups deliveries by partition key, in delivery order.
func byKey(ds []delivery) map[string][]delivery {
	out := map[string][]delivery{}
	for _, d := range ds {
		out[d.PK] = append(out[d.PK], d)
	}
	return out
}

// requireOrderedNoGap checks, per key, that deliveries never skip ahead: each
// seq is at most one past the highest seen so far (a redelivery may go back,
// a gap may not), and LSNs within a run of increasing seqs increase.
func requireOrderedNoGap(tb testing.TB, ds []delivery) {
	tb.Helper()
	for k, list := range byKey(ds) {
		high := -1
		for i, d := range list {
			require.LessOrEqualf(tb, d.Seq, high+1, "key %s: seq %d delivered after at most %d: a gap", k, d.Seq, high)
			if i > 0 && d.Seq == list[i-1].Seq+1 {
				require.Greaterf(tb, d.LSN, list[i-1].LSN, "key %s: LSN order", k)
			}
			high = max(high, d.Seq)
		}
	}
}

// requireExactlyInOrder checks, per key, that seq 0..n-1 were delivered
// exactly once each, in order, with increasing LSNs.
func requireExactlyInOrder(tb testing.TB, ds []delivery, keys []string, n int) {
	tb.Helper()
	groups := byKey(ds)
	for _, k := range keys {
		list := groups[k]
		require.Lenf(tb, list, n, "key %s", k)
		for i, d := range list {
			require.Equalf(tb, i, d.Seq, "key %s", k)
			if i > 0 {
				require.Greaterf(tb, d.LSN, list[i-1].LSN, "key %s", k)
			}
		}
	}
}

// run starts p.Run in a goroutine and stops it on cleanup, requiring a clean
// stop.
func run(tb testing.TB, p *changefeed.Processor) (stop func()) {
	tb.Helper()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(context.Background()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), liveness)
			defer cancel()
			require.NoError(tb, p.Stop(ctx))
			require.NoError(tb, <-errc)
		})
	}
	tb.Cleanup(stop)
	return stop
}

// logWatch is a logger whose entries tests can wait for: the processor's
// logs are its signals ("changefeed: reader stopped", ...).
type logWatch struct {
	mu      sync.Mutex
	msgs    []string
	changed chan struct{}
}

func newLogWatch() (*logWatch, *zap.Logger) {
	w := &logWatch{changed: make(chan struct{})}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(io.Discard), zap.DebugLevel)
	core = zapcore.RegisterHooks(core, func(en zapcore.Entry) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.msgs = append(w.msgs, en.Message)
		close(w.changed)
		w.changed = make(chan struct{})
		return nil
	})
	return w, zap.New(core)
}

// count returns how many entries start with prefix.
func (w *logWatch) count(prefix string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// wait blocks until n entries start with prefix.
func (w *logWatch) wait(tb testing.TB, prefix string, n int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if w.count(prefix) >= n {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			tb.Fatalf("gave up waiting for %d log entries %q", n, prefix)
		}
	}
}

const readerStopped = "changefeed: reader stopped"

// testLogger logs to the test's output.
func testLogger(tb testing.TB) *zap.Logger { return zaptest.NewLogger(tb) }
