package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/slots"
)

// Name and Version identify the implementation.
const (
	Name    = "cosmosdb"
	Version = "0.1.0"
)

// Provider is the Cosmos DB implementation of durable.Provider and
// durable.ProviderAdmin. Create it with New and release it with Close.
type Provider struct {
	cfg    Config
	log    *zap.Logger
	s      *store
	orch   slotSource
	work   slotSource
	outbox *outbox
	ev     *engine    // event-driven mode; nil when polling
	ic     *instCache // event-driven mode; nil when polling or disabled

	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
}

var (
	_ durable.Provider      = (*Provider)(nil)
	_ durable.ProviderAdmin = (*Provider)(nil)
)

// New connects to the account, checks (or creates) the container and
// starts the background reconciler.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("provider: Config.Endpoint is empty")
	}
	// Our own copy of the client options, with the header repair policy.
	opts := azcosmos.ClientOptions{}
	if cfg.ClientOptions != nil {
		opts = *cfg.ClientOptions
	}
	opts.PerCallPolicies = append(append([]policy.Policy{}, opts.PerCallPolicies...), pkHeaderPolicy{})
	var client *azcosmos.Client
	var err error
	switch {
	case cfg.Key != "":
		cred, kerr := azcosmos.NewKeyCredential(cfg.Key)
		if kerr != nil {
			return nil, fmt.Errorf("provider: key credential: %w", kerr)
		}
		client, err = azcosmos.NewClientWithKey(cfg.Endpoint, cred, &opts)
	case cfg.Credential != nil:
		client, err = azcosmos.NewClient(cfg.Endpoint, cfg.Credential, &opts)
	default:
		return nil, fmt.Errorf("provider: neither Config.Key nor Config.Credential is set")
	}
	if err != nil {
		return nil, fmt.Errorf("provider: client: %w", err)
	}
	if err := ensureContainer(ctx, client, cfg.Database, cfg.Container, *cfg.CreateIfMissing); err != nil {
		return nil, err
	}
	cc, err := client.NewContainer(cfg.Database, cfg.Container)
	if err != nil {
		return nil, fmt.Errorf("provider: container client: %w", err)
	}
	p := &Provider{
		cfg:  cfg,
		log:  cfg.Logger,
		s:    &store{c: cc, retry: defaultRetry},
		orch: newLocalShares(cfg.OrchestrationDispatchers),
		work: newLocalShares(cfg.WorkerDispatchers),
	}
	p.outbox = &outbox{s: p.s, log: p.log}
	bg, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	switch cfg.Mode {
	case ModePolling:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.reconcileLoop(bg)
		}()
	case ModeEventDriven:
		ev, err := newEngine(p, cfg)
		if err != nil {
			cancel()
			return nil, err
		}
		p.ev = ev
		p.ic = newInstCache(cfg.InstanceCacheSize)
		p.outbox.delivered = func(q queueDoc) { p.noteQueueDocs(q) }
		if cfg.joinEagerly {
			if s := ev.join(); s != nil {
				// Tests expect the share at once, however loaded the
				// machine: bounded by shareWait, not readyWait.
				s.awaitShare(ctx)
			}
		}
	default:
		cancel()
		return nil, fmt.Errorf("provider: unknown Config.Mode %d", int(cfg.Mode))
	}
	return p, nil
}

// Close stops the background work and waits for it. In event-driven mode
// it first hands this replica's leases to the others (graceful hand-off).
// Undelivered intents stay in the container for the next provider. It is
// idempotent.
func (p *Provider) Close() error {
	p.closed.Do(func() {
		if p.ev != nil {
			p.ev.close()
		}
		p.stop()
		p.wg.Wait()
	})
	return nil
}

// Mode returns the provider's dispatch mode.
func (p *Provider) Mode() Mode { return p.cfg.Mode }

// Name implements durable.Provider.
func (p *Provider) Name() string { return Name }

// Version implements durable.Provider.
func (p *Provider) Version() string { return Version }

// Admin implements durable.Provider.
func (p *Provider) Admin() (durable.ProviderAdmin, bool) { return p, true }

// readInstance point-reads the instance document (nil when absent).
func (p *Provider) readInstance(ctx context.Context, instance string) (*instanceDoc, error) {
	var d instanceDoc
	found, err := p.s.read(ctx, instance, idInstance, &d)
	if err != nil || !found {
		return nil, err
	}
	return &d, nil
}

// visibleInstance returns the instance document when the instance exists
// for readers (not pending, not being deleted).
func (p *Provider) visibleInstance(ctx context.Context, op, instance string) (*instanceDoc, error) {
	if len(instance) == 0 || len(instance) > MaxInstanceIDBytes {
		return nil, nil
	}
	d, err := p.readInstance(ctx, instance)
	if err != nil {
		return nil, mapErr(op, err)
	}
	if !d.visible() {
		return nil, nil
	}
	return d, nil
}

// newQueueDoc builds a queue document for item.
func newQueueDoc(id string, item durable.WorkItem, visibleAt int64) (queueDoc, error) {
	b, err := durable.MarshalWorkItem(item)
	if err != nil {
		return queueDoc{}, err
	}
	inst := item.TargetInstance()
	d := queueDoc{ID: id, InstanceID: inst, WorkItem: string(b), DispatchSlot: slots.Of(inst),
		VisibleAt: visibleAt, EnqueuedAt: enqueueStamp()}
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

// EnqueueForWorker implements durable.Provider.
func (p *Provider) EnqueueForWorker(ctx context.Context, item durable.WorkItem) error {
	const op = "enqueue_for_worker"
	if err := validateItem(op, item, durable.WorkerQueue); err != nil {
		return err
	}
	d, err := newQueueDoc(uuid.NewString(), item, nowMS())
	if err != nil {
		return durable.Permanent(op, err, "encode work item")
	}
	if err := p.s.create(ctx, d.InstanceID, d, false); err != nil {
		return mapErr(op, err)
	}
	p.noteQueueDocs(d)
	return nil
}

// EnqueueForOrchestrator implements durable.Provider.
func (p *Provider) EnqueueForOrchestrator(ctx context.Context, item durable.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	if err := validateItem(op, item, durable.OrchestratorQueue); err != nil {
		return err
	}
	if delay < 0 {
		delay = 0
	}
	d, err := newQueueDoc(uuid.NewString(), item, nowMS()+durMS(delay))
	if err != nil {
		return durable.Permanent(op, err, "encode work item")
	}
	if err := p.s.create(ctx, d.InstanceID, d, false); err != nil {
		return mapErr(op, err)
	}
	p.noteQueueDocs(d)
	return nil
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
		if err = json.Unmarshal(raw, &h); err == nil {
			v.history = append(v.history, h)
		}
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
func (p *Provider) readExecution(ctx context.Context, instance string, exec uint64, withKV bool) (partitionView, error) {
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
	// Only events at or below the execution's mark are committed.
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
	return v, nil
}

// decodeHistory decodes committed events; any undecodable event is an error.
func decodeHistory(docs []historyDoc) ([]history.Event, error) {
	out := make([]history.Event, 0, len(docs))
	for _, d := range docs {
		e, err := history.Unmarshal([]byte(d.EventData))
		if err != nil {
			return nil, fmt.Errorf("event %d of execution %d: %w", d.EventID, d.ExecutionID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// currentExecution returns the instance's current execution id, 0 if none.
func (p *Provider) currentExecution(ctx context.Context, op, instance string) (uint64, error) {
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil || d == nil {
		return 0, err
	}
	return d.CurrentExecutionID, nil
}

// Read implements durable.Provider.
func (p *Provider) Read(ctx context.Context, instance string) ([]history.Event, error) {
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
func (p *Provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
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

func (p *Provider) readHistory(ctx context.Context, op, instance string, exec uint64) ([]history.Event, error) {
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
func (p *Provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []history.Event) error {
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
		b, err := history.Marshal(e)
		if err != nil {
			return nil, durable.Permanent(op, err, "encode event %d", e.EventID)
		}
		out = append(out, historyDoc{ID: historyID(exec, e.EventID), InstanceID: instance, Type: typeHistory,
			ExecutionID: exec, EventID: e.EventID, EventData: string(b), StagedBy: stagedBy})
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
func (p *Provider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*durable.CustomStatus, error) {
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
func (p *Provider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
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
func (p *Provider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
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

func (p *Provider) readKV(ctx context.Context, instance string) ([]kvDoc, error) {
	return queryAll[kvDoc](ctx, p.s, strp(instance), "SELECT * FROM c WHERE c.type = 'kv'")
}

// GetInstanceStats implements durable.Provider.
func (p *Provider) GetInstanceStats(ctx context.Context, instance string) (*durable.InstanceStats, error) {
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
