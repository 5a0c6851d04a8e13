package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/slots"
)

// Store is the Cosmos DB store of durafeed: every document, every
// protocol that writes them (locks, batch commits, large turns, acks, KV,
// sessions, deletion) and every query dispatch needs, with no notion of how
// work is found. It implements durable.Provider's and
// durable.ProviderAdmin's storage methods; the methods that a dispatcher
// must follow (enqueue, lock, ack, abandon) return what they wrote (Write,
// Commit, LockResult) instead of calling back. Create it with New. A
// Store has no background work: Close is not needed.
type Store struct {
	opts Options
	log  *zap.Logger
	s    *client
	ic   *instCache // nil when Options.InstanceCacheSize is negative
	wl   workLocks
	st   stats
	// missing is set while the latest answer about the container's
	// documents said it does not exist (ownerWatch).
	missing *atomic.Bool
}

// Options configures a Store. Zero values take the documented defaults.
type Options struct {
	// Endpoint is the account endpoint, e.g. https://acct.documents.azure.com:443/.
	Endpoint string
	// Key is the account key. When empty, Credential is used.
	Key string
	// Credential authenticates with Entra ID when Key is empty.
	Credential azcore.TokenCredential
	// Database and Container name the store (default "durafeed" each).
	Database  string
	Container string
	// CreateIfMissing creates the database and container when missing. Nil
	// means true with a key and false with a credential: data-plane RBAC
	// cannot create resources, so with Entra ID the container is expected
	// to exist (deployed by infrastructure code) and a missing one is an
	// error.
	CreateIfMissing *bool
	// MeterProvider receives the metrics of every HTTP attempt of the
	// store's client, the dispatchers' and lease documents' included:
	// requests by operation and status, request units, durations, 429s
	// and retries (store.Metric*; default: none).
	MeterProvider metric.MeterProvider
	// ClientOptions are passed to the SDK (transport, retries, telemetry).
	// The store replaces Retry.ShouldRetry: the SDK's generic retries
	// resend only requests the service refused before acting on them and
	// reads, so that no write whose outcome is unknown is resent behind
	// the store's back (see the package documentation).
	ClientOptions *azcosmos.ClientOptions
	// RepairAge is how old an outbox intent, a large turn's publication
	// record or a deletion mark must be before a repair pass takes it over
	// from the call that wrote it (default 2 s; a deletion waits ten times
	// as long).
	RepairAge time.Duration
	// InstanceCacheSize bounds the instance documents the store remembers
	// from its own writes (default 4096 unlocked ones, from acks and
	// abandons, and as many locked ones, from lock batches and renewals;
	// at most 4 KiB each; negative: none). A lock of a remembered instance
	// skips the read of its instance document, and so does the ack of a
	// remembered lock: each write is conditional on the remembered ETag,
	// and a stale entry costs one failed batch before the read.
	InstanceCacheSize int
	// RequestRetention is how long the store remembers a client call's
	// request id (durable.RequestIDOf), so that a resend of the call within
	// it takes effect once (default 24 h), and the tombstone of an outbox
	// delivery's target message a turn consumed, so that a later delivery
	// of the same intent does not create it again. Both expire through the
	// container's time to live: a container created by the store has it on
	// (default -1, items expire only when they say so); a deployed
	// container needs defaultTtl -1 too, or records are kept until their
	// instance is deleted.
	RequestRetention time.Duration
	// Logger receives operational logs: instance ids, operations and status
	// codes, never keys or payloads. Default: no logging.
	Logger *zap.Logger
}

// Defaults of Options.
const (
	DefaultDatabase          = "durafeed"
	DefaultContainer         = "durafeed"
	DefaultRepairAge         = 2 * time.Second
	DefaultInstanceCacheSize = 4096
	DefaultRequestRetention  = 24 * time.Hour
)

func (o Options) withDefaults() Options {
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if o.Container == "" {
		o.Container = DefaultContainer
	}
	if o.RepairAge <= 0 {
		o.RepairAge = DefaultRepairAge
	}
	if o.RequestRetention <= 0 {
		o.RequestRetention = DefaultRequestRetention
	}
	if o.InstanceCacheSize == 0 {
		o.InstanceCacheSize = DefaultInstanceCacheSize
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.CreateIfMissing == nil {
		v := o.Key != ""
		o.CreateIfMissing = &v
	}
	return o
}

// New connects to the account and checks (or creates) the container.
func New(ctx context.Context, o Options) (*Store, error) {
	o = o.withDefaults()
	if o.Endpoint == "" {
		return nil, errors.New("store: Options.Endpoint is empty")
	}
	// Our own copy of the client options, with the header repair policy.
	opts := azcosmos.ClientOptions{}
	if o.ClientOptions != nil {
		opts = *o.ClientOptions
	}
	missing := new(atomic.Bool)
	opts.PerCallPolicies = append(append([]policy.Policy{}, opts.PerCallPolicies...), pkHeaderPolicy{}, ownerWatch{missing}, perCall{})
	opts.PerRetryPolicies = append(append([]policy.Policy{}, opts.PerRetryPolicies...), perRetry{newRequestMeter(o.MeterProvider)})
	opts.Retry.ShouldRetry = sdkShouldRetry
	var cl *azcosmos.Client
	var err error
	switch {
	case o.Key != "":
		cred, kerr := azcosmos.NewKeyCredential(o.Key)
		if kerr != nil {
			return nil, fmt.Errorf("store: key credential: %w", kerr)
		}
		cl, err = azcosmos.NewClientWithKey(o.Endpoint, cred, &opts)
	case o.Credential != nil:
		cl, err = azcosmos.NewClient(o.Endpoint, o.Credential, &opts)
	default:
		return nil, errors.New("store: neither Options.Key nor Options.Credential is set")
	}
	if err != nil {
		return nil, fmt.Errorf("store: client: %w", err)
	}
	if err := ensureContainer(ctx, cl, o.Database, o.Container, *o.CreateIfMissing, o.Logger); err != nil {
		return nil, err
	}
	cc, err := cl.NewContainer(o.Database, o.Container)
	if err != nil {
		return nil, fmt.Errorf("store: container client: %w", err)
	}
	return &Store{opts: o, log: o.Logger, s: &client{c: cc, retry: defaultRetry}, ic: newInstCache(o.InstanceCacheSize), missing: missing}, nil
}

// ContainerGone returns a permanent error for op when the container, or
// its database, does not exist (deleted under the running provider), and
// nil otherwise. It costs nothing while the latest answer to a request on
// the container's documents (the store's own, or those of the packages
// sharing its client: lease store, change feed) was not a 404 with
// sub-status 1003; after such an answer it checks with a point read, so
// a re-created container is noticed at once. A dispatcher whose waits do
// no request of their own (the event-driven engine) calls it so that a
// fetch reports the deleted container instead of "no work".
func (p *Store) ContainerGone(ctx context.Context, op string) error {
	if !p.missing.Load() {
		return nil
	}
	_, err := p.s.c.ReadItem(ctx, pk("$probe"), "probe", nil)
	if !ownerMissing(err) {
		return nil
	}
	return durable.Permanent(op, err, "container %q of database %q does not exist: deleted, or not deployed", p.opts.Container, p.opts.Database)
}

// Container is the SDK client of the store's container, for the packages
// that share it (leasestore, changefeed).
func (p *Store) Container() *azcosmos.ContainerClient { return p.s.c }

// RepairAge is Options.RepairAge after defaults.
func (p *Store) RepairAge() time.Duration { return p.opts.RepairAge }

// readInstance point-reads the instance document (nil when absent).
func (p *Store) readInstance(ctx context.Context, instance string) (*instanceDoc, error) {
	var d instanceDoc
	found, err := p.s.read(ctx, instance, idInstance, &d)
	if err != nil || !found {
		return nil, err
	}
	return &d, nil
}

// visibleInstance returns the instance document when the instance exists
// for readers (not pending, not being deleted). The document read is
// remembered as a write of this process would be (instCache): a client
// that reads an instance's state before writing to it (an event, a
// cancel) lets the turn its write wakes here lock it without reading it
// again.
func (p *Store) visibleInstance(ctx context.Context, op, instance string) (*instanceDoc, error) {
	if len(instance) == 0 || len(instance) > MaxInstanceIDBytes {
		return nil, nil
	}
	var d instanceDoc
	found, session, size, err := p.s.readSession(ctx, instance, idInstance, &d)
	if err != nil {
		return nil, mapErr(op, err)
	}
	if !found {
		return nil, nil
	}
	p.ic.put(instance, d, d.ETag, session, size)
	if !d.visible() {
		return nil, nil
	}
	return &d, nil
}

// newQueueDoc builds a queue document for item. It fails for an item with
// a string that is not valid UTF-8 and for a document over
// MaxDocumentBytes (see checkPayload, checkSize).
func newQueueDoc(id string, item durable.WorkItem, visibleAt int64) (queueDoc, error) {
	what := fmt.Sprintf("%s work item", item.Kind())
	if err := checkPayload(what, item); err != nil {
		return queueDoc{}, err
	}
	b, err := durable.MarshalWorkItem(item)
	if err != nil {
		return queueDoc{}, err
	}
	inst := item.TargetInstance()
	d := queueDoc{ID: id, InstanceID: inst, WorkItem: string(b), DispatchSlot: slots.Of(inst),
		VisibleAt: visibleAt, EnqueuedAt: enqueueStamp()}
	if err := checkSize(what, len(b), d); err != nil {
		return queueDoc{}, err
	}
	if item.Queue() == durable.WorkerQueue {
		d.Type = typeWorkQueue
		if a, ok := item.(durable.ActivityExecute); ok {
			d.ExecutionID, d.ActivityID, d.SessionID, d.Tag = a.ExecutionID, a.ID, a.SessionID, a.Tag
		}
	} else {
		d.Type = typeOrchQueue
	}
	return d, nil
}

func validateItem(op string, item durable.WorkItem, q durable.Queue) error {
	if err := durable.ValidateWorkItem(item); err != nil {
		return durable.Permanent(op, err, "invalid work item")
	}
	if item.Queue() != q {
		return durable.Permanent(op, nil, "%s belongs on the %s queue", item.Kind(), item.Queue())
	}
	return checkInstanceID(op, item.TargetInstance())
}

// EnqueueForWorker is durable.Provider's EnqueueForWorker; it returns the
// queue document written.
func (p *Store) EnqueueForWorker(ctx context.Context, item durable.WorkItem) (Write, error) {
	const op = "enqueue_for_worker"
	if err := validateItem(op, item, durable.WorkerQueue); err != nil {
		return Write{}, err
	}
	d, err := newQueueDoc(uuid.NewString(), item, nowMS())
	if err != nil {
		return Write{}, durable.Permanent(op, err, "encode work item")
	}
	if err := p.createMessage(ctx, op, d); err != nil {
		return Write{}, err
	}
	return Write{Visible: []QueueHead{d.head()}}, nil
}

// EnqueueForOrchestrator is durable.Provider's EnqueueForOrchestrator; it
// returns the queue document written.
func (p *Store) EnqueueForOrchestrator(ctx context.Context, item durable.WorkItem, delay time.Duration) (Write, error) {
	const op = "enqueue_for_orchestrator"
	if err := validateItem(op, item, durable.OrchestratorQueue); err != nil {
		return Write{}, err
	}
	if delay < 0 {
		delay = 0
	}
	d, err := newQueueDoc(uuid.NewString(), item, nowMS()+durMS(delay))
	if err != nil {
		return Write{}, durable.Permanent(op, err, "encode work item")
	}
	if rid := durable.RequestIDOf(item); rid != "" {
		dup, etag, err := p.enqueueOnce(ctx, op, rid, item.Kind(), d)
		if err != nil || dup {
			return Write{}, err
		}
		d.ETag = etag
	} else {
		etag, err := p.createMessageETag(ctx, op, d)
		if err != nil {
			return Write{}, err
		}
		d.ETag = etag
	}
	w := Write{Visible: []QueueHead{d.head()}}
	if d.ETag != "" {
		w.Heads = []Head{{doc: d}}
	}
	return w, nil
}

// freshWrite is an enqueue that goes in a lock batch (EnqueueLocked): its
// message, not written yet, and its call's request record, if any.
type freshWrite struct {
	msg  queueDoc
	item durable.WorkItem
	rec  *requestDoc
}

// EnqueueLocked is EnqueueForOrchestrator (without a delay) for a process
// that runs the item's turn itself at once: the transactional batch that
// creates the message (locked) and the call's request record also locks
// the instance's turn, and the turn's inputs are read at the same time,
// as a lock from feed heads reads them (lockFromHeads). The enqueue and
// the lock of its turn cost one round trip instead of three.
//
// The lock is conditional on the instance document this process
// remembers (instCache: its last write, or a status read) or, with none,
// on a running first execution (blindLock); a start of a new instance
// creates the document. With running, the enqueue also requires that the
// instance runs (a remembered document says so; a blind lock checks it):
// an API call that must not write to an instance that has ended or does
// not exist learns that it runs from the write itself.
//
// Enqueued false means that nothing was written (a version the filter
// refuses, the document changed or locked since, a condition not met, a
// resent call whose record exists): the caller enqueues as usual, or
// reads the instance first. Enqueued true with no Item means the lock
// was given up (r.Wrote, for the caller to follow, makes the message
// visible). An error leaves the outcome unknown, as
// EnqueueForOrchestrator's does.
func (p *Store) EnqueueLocked(ctx context.Context, item durable.WorkItem, req LockRequest, running bool) (r LockResult, enqueued bool, err error) {
	const op = "enqueue_for_orchestrator"
	if err := validateItem(op, item, durable.OrchestratorQueue); err != nil {
		return LockResult{}, false, err
	}
	if _, start := item.(durable.StartOrchestration); start && running {
		return LockResult{}, false, nil // a start's target does not run yet
	}
	instance := item.TargetInstance()
	d, err := newQueueDoc(uuid.NewString(), item, nowMS())
	if err != nil {
		return LockResult{}, false, durable.Permanent(op, err, "encode work item")
	}
	fresh := &freshWrite{msg: d, item: item}
	if rid := durable.RequestIDOf(item); rid != "" {
		rec := p.requestRecord(rid, item.Kind(), d)
		fresh.rec = &rec
	}
	var c *cachedInst
	if e, ok := p.ic.take(instance); ok {
		c = &e
		if running && !runs(&e.doc) {
			p.ic.restore(instance, e)
			return LockResult{}, false, nil
		}
	}
	got, st, _, staleDoc, err := p.lockFromHeads(ctx, instance, c, nil, false, req.LockTimeout, req.Filter, req.Owner, fresh)
	if !st.landed {
		switch {
		case staleDoc:
			p.st.staleCache.Add(1)
		case c != nil:
			p.ic.restore(instance, *c)
		}
		return LockResult{}, false, err
	}
	if err != nil {
		// The enqueue took effect; the turn was given up.
		p.log.Info("a lock taken with an enqueue was given up", zap.String("instance", instance), zap.Error(err))
	}
	if got != nil {
		p.st.writeLocks.Add(1)
	}
	return st.result(instance, got), true, nil
}

// runs reports whether the instance of committed document d runs (has not
// completed or failed).
func runs(d *instanceDoc) bool {
	return d.Status == string(durable.StatusRunning) || d.Status == string(durable.StatusContinuedAsNew)
}

// createMessage creates a queue message. It is not resent after a lost
// answer (a resend could land after the first copy was consumed, as a
// second message); the message is read back instead, and found means the
// create committed. Not found is reported as a retryable error: the
// create did not commit, or its message was consumed already.
func (p *Store) createMessage(ctx context.Context, op string, d queueDoc) error {
	_, err := p.createMessageETag(ctx, op, d)
	return err
}

// createMessageETag is createMessage, returning the message's ETag ("" when
// the create's answer was lost and the message read back instead).
func (p *Store) createMessageETag(ctx context.Context, op string, d queueDoc) (string, error) {
	etag, err := p.s.createETag(ctx, d.InstanceID, d, false)
	if err == nil || !unknownOutcome(err) {
		return etag, mapErr(op, err)
	}
	var back queueDoc
	found, rerr := p.s.read(ctx, d.InstanceID, d.ID, &back)
	p.log.Info("the answer to an enqueue was lost; read back", zap.String("instance", d.InstanceID),
		zap.Bool("found", rerr == nil && found), zap.Error(err))
	if rerr == nil && found {
		return "", nil
	}
	return "", mapErr(op, err)
}

// partitionView is what one query over an instance's partition returns for
// an execution: its record, its committed history and the KV store.
type partitionView struct {
	exec    *executionDoc
	history []historyDoc
	kv      []kvDoc
}

// add decodes one document of the instance's partition into the view when
// it is an execution record, a history event or a KV entry, and returns its
// type either way.
func (v *partitionView) add(raw json.RawMessage) (string, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", err
	}
	var err error
	switch head.Type {
	case typeHistory:
		var h historyDoc
		if derr := json.Unmarshal(raw, &h); derr != nil {
			// Edited by hand or by another program: kept, as an event
			// that cannot be decoded (decodeHistory reports it), instead
			// of failing the query that read it on every fetch.
			h = undecodableHistoryDoc(raw, derr)
		}
		v.history = append(v.history, h)
	case typeExecution:
		var e executionDoc
		if err = json.Unmarshal(raw, &e); err == nil {
			v.exec = &e
		}
	case typeKV:
		var k kvDoc
		if err = json.Unmarshal(raw, &k); err == nil {
			v.kv = append(v.kv, k)
		}
	}
	return head.Type, err
}

// readExecution reads an execution's record and committed history (and the
// KV store when withKV) with one single-partition query.
func (p *Store) readExecution(ctx context.Context, instance string, exec uint64, withKV bool) (partitionView, error) {
	sql := "SELECT * FROM c WHERE c.executionId = @e AND (c.type = 'history' OR c.type = 'execution')"
	if withKV {
		sql = "SELECT * FROM c WHERE (c.executionId = @e AND (c.type = 'history' OR c.type = 'execution')) OR c.type = 'kv'"
	}
	var v partitionView
	err := p.s.query(ctx, strp(instance), sql, []azcosmos.QueryParameter{param("@e", exec)}, func(raw json.RawMessage) error {
		_, err := v.add(raw)
		return err
	})
	if err != nil {
		return v, err
	}
	v.keepCommitted()
	return v, nil
}

// keepCommitted drops the history the query read beyond the execution's
// mark (a large turn's staged events, invisible until its commit) and
// sorts the rest by event id.
func (v *partitionView) keepCommitted() {
	mark := uint64(0)
	if v.exec != nil {
		mark = v.exec.Mark
	}
	kept := v.history[:0]
	for _, h := range v.history {
		if h.EventID <= mark {
			kept = append(kept, h)
		}
	}
	v.history = kept
	sort.Slice(v.history, func(i, j int) bool { return v.history[i].EventID < v.history[j].EventID })
}

// decodeHistory decodes committed events; any undecodable event is an
// error, and so is an event whose own id is not its document's (an event
// copied or edited into the wrong place: replaying it would go wrong).
func decodeHistory(docs []historyDoc) ([]history.Event, error) {
	out := make([]history.Event, 0, len(docs))
	for _, d := range docs {
		if d.decodeErr != nil {
			return nil, fmt.Errorf("history document %q: %w", d.ID, d.decodeErr)
		}
		e, err := history.Unmarshal([]byte(d.EventData))
		if err != nil {
			return nil, fmt.Errorf("event %d of execution %d: %w", d.EventID, d.ExecutionID, err)
		}
		if e.EventID != d.EventID {
			return nil, fmt.Errorf("event %d of execution %d: the stored event says it is event %d", d.EventID, d.ExecutionID, e.EventID)
		}
		out = append(out, e)
	}
	return out, nil
}

// undecodableHistoryDoc is a history document whose fields do not decode:
// what can be read of its identity (for ordering and the mark), and the
// decoding error.
func undecodableHistoryDoc(raw json.RawMessage, derr error) historyDoc {
	var id struct {
		ID          string `json:"id"`
		InstanceID  string `json:"instanceId"`
		ExecutionID any    `json:"executionId"`
		EventID     any    `json:"eventId"`
	}
	_ = json.Unmarshal(raw, &id)
	h := historyDoc{ID: id.ID, InstanceID: id.InstanceID, Type: typeHistory, decodeErr: derr}
	if f, ok := id.ExecutionID.(float64); ok && f >= 0 {
		h.ExecutionID = uint64(f)
	}
	if f, ok := id.EventID.(float64); ok && f >= 0 {
		h.EventID = uint64(f)
	}
	return h
}

// currentExecution returns the instance's current execution id, 0 if none.
func (p *Store) currentExecution(ctx context.Context, op, instance string) (uint64, error) {
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil || d == nil {
		return 0, err
	}
	return d.CurrentExecutionID, nil
}

// Read implements durable.Provider.
func (p *Store) Read(ctx context.Context, instance string) ([]history.Event, error) {
	const op = "read"
	exec, err := p.currentExecution(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	if exec == 0 {
		return []history.Event{}, nil
	}
	return p.readHistory(ctx, op, instance, exec)
}

// ReadWithExecution implements durable.Provider.
func (p *Store) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
	const op = "read_with_execution"
	d, err := p.readInstance(ctx, instance)
	if err != nil {
		return nil, mapErr(op, err)
	}
	if d != nil && d.Deleting != "" {
		return []history.Event{}, nil
	}
	return p.readHistory(ctx, op, instance, executionID)
}

func (p *Store) readHistory(ctx context.Context, op, instance string, exec uint64) ([]history.Event, error) {
	if len(instance) == 0 || len(instance) > MaxInstanceIDBytes {
		return []history.Event{}, nil
	}
	v, err := p.readExecution(ctx, instance, exec, false)
	if err != nil {
		return nil, mapErr(op, err)
	}
	evs, err := decodeHistory(v.history)
	if err != nil {
		return nil, durable.Permanent(op, err, "stored history of %q cannot be decoded", instance)
	}
	return evs, nil
}

// AppendWithExecution implements durable.Provider: the events and the
// execution's advanced mark are written in one batch; a duplicate event id
// fails the batch (409) and nothing is written.
func (p *Store) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []history.Event) error {
	const op = "append_with_execution"
	if err := checkInstanceID(op, instance); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	docs, err := historyDocs(op, instance, executionID, events, "")
	if err != nil {
		return err
	}
	var ex executionDoc
	found, err := p.s.read(ctx, instance, execDocID(executionID), &ex)
	if err != nil {
		return mapErr(op, err)
	}
	if !found {
		ex = executionDoc{ID: execDocID(executionID), InstanceID: instance, Type: typeExecution, ExecutionID: executionID,
			Status: string(durable.StatusRunning), StartedAt: nowMS()}
	}
	advanceExecution(&ex, docs)
	ops := make([]batchOp, 0, len(docs)+1)
	for _, d := range docs {
		ops = append(ops, opCreate(d))
	}
	ops = append(ops, opUpsert(ex))
	if len(ops) > maxBatchOps {
		return durable.Permanent(op, nil, "at most %d events can be appended at once", maxBatchOps-1)
	}
	if _, err := p.s.execBatch(ctx, instance, ops, false); err != nil {
		if isStatus(err, 409) {
			return durable.Permanent(op, err, "duplicate event id in execution %d of %q", executionID, instance)
		}
		return mapErr(op, err)
	}
	return nil
}

// historyDocs encodes events; duplicate ids within the slice are refused.
func historyDocs(op, instance string, exec uint64, events []history.Event, stagedBy string) ([]historyDoc, error) {
	seen := make(map[uint64]bool, len(events))
	out := make([]historyDoc, 0, len(events))
	for _, e := range events {
		if e.EventID == 0 {
			return nil, durable.Permanent(op, nil, "event id 0 is invalid")
		}
		if seen[e.EventID] {
			return nil, durable.Permanent(op, nil, "duplicate event id %d in execution %d", e.EventID, exec)
		}
		seen[e.EventID] = true
		if err := checkPayload("event", e); err != nil {
			return nil, durable.Permanent(op, err, "encode event %d", e.EventID)
		}
		b, err := history.Marshal(e)
		if err != nil {
			return nil, durable.Permanent(op, err, "encode event %d", e.EventID)
		}
		h := historyDoc{ID: historyID(exec, e.EventID), InstanceID: instance, Type: typeHistory,
			ExecutionID: exec, EventID: e.EventID, EventData: string(b), StagedBy: stagedBy}
		if err := checkSize("event", len(b), h); err != nil {
			return nil, durable.Permanent(op, err, "encode event %d", e.EventID)
		}
		out = append(out, h)
	}
	return out, nil
}

// advanceExecution raises the mark over new events and counts them.
func advanceExecution(ex *executionDoc, docs []historyDoc) {
	for _, d := range docs {
		if d.EventID > ex.Mark {
			ex.Mark = d.EventID
		}
		ex.EventCount++
		ex.HistoryBytes += uint64(len(d.EventData))
	}
}

// GetCustomStatus implements durable.Provider (one point read).
func (p *Store) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*durable.CustomStatus, error) {
	d, err := p.visibleInstance(ctx, "get_custom_status", instance)
	if err != nil || d == nil {
		return nil, err
	}
	if d.CustomStatusVersion <= lastSeenVersion {
		return nil, nil
	}
	return &durable.CustomStatus{Status: d.CustomStatus, Version: d.CustomStatusVersion}, nil
}

// GetKVValue implements durable.Provider.
func (p *Store) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	const op = "get_kv_value"
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil || d == nil {
		return "", false, err
	}
	all, err := p.clientKV(ctx, instance)
	if err != nil {
		return "", false, mapErr(op, err)
	}
	e, ok := all[key]
	return e.Value, ok, nil
}

// GetKVAllValues implements durable.Provider.
func (p *Store) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	const op = "get_kv_all_values"
	out := map[string]string{}
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil || d == nil {
		return out, err
	}
	all, err := p.clientKV(ctx, instance)
	if err != nil {
		return nil, mapErr(op, err)
	}
	for k, e := range all {
		out[k] = e.Value
	}
	return out, nil
}

func (p *Store) readKV(ctx context.Context, instance string) ([]kvDoc, error) {
	return queryAll[kvDoc](ctx, p.s, strp(instance), "SELECT * FROM c WHERE c.type = 'kv'")
}

// GetInstanceStats implements durable.Provider.
func (p *Store) GetInstanceStats(ctx context.Context, instance string) (*durable.InstanceStats, error) {
	const op = "get_instance_stats"
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil || d == nil {
		return nil, err
	}
	type row struct {
		Type         string `json:"type"`
		ExecutionID  uint64 `json:"executionId"`
		Mark         uint64 `json:"mark"`
		EventCount   uint64 `json:"eventCount"`
		HistoryBytes uint64 `json:"historyBytes"`
	}
	rows, err := queryAll[row](ctx, p.s, strp(instance),
		"SELECT c.type, c.executionId, c.mark, c.eventCount, c.historyBytes FROM c WHERE (c.type = 'execution' AND c.executionId = @e) OR c.type = 'orch_queue'",
		param("@e", d.CurrentExecutionID))
	if err != nil {
		return nil, mapErr(op, err)
	}
	st := &durable.InstanceStats{ExecutionID: d.CurrentExecutionID}
	kv, err := p.clientKV(ctx, instance)
	if err != nil {
		return nil, mapErr(op, err)
	}
	for k, e := range kv {
		st.KVKeyCount++
		st.KVSizeBytes += uint64(len(k) + len(e.Value))
	}
	for _, r := range rows {
		switch r.Type {
		case typeExecution:
			st.HistoryEventCount, st.HistorySizeBytes = r.EventCount, r.HistoryBytes
		case typeOrchQueue:
			st.PendingMessageCount++
		}
	}
	return st, nil
}
