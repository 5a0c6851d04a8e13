package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/durable"
)

// LockStall is a fetched item whose attempt count shows a lock that no
// runtime received: a lock batch or patch that committed while its answer
// was lost, and that the provider's read-back did not recover. The item
// stayed invisible until that lock expired (the lock timeout).
type LockStall struct {
	// At is when the item was fetched again; Replica the fetching replica.
	At      time.Time
	Replica int
	// Queue is "orchestrator" or "worker"; Instance the item's instance;
	// Item describes its messages.
	Queue    string
	Instance string
	Item     string
	// Attempt is the fetched attempt count; Received how often runtimes
	// had received the item's messages before (Attempt > Received+1
	// reveals Attempt-Received-1 unreceived locks).
	Attempt  uint32
	Received int
	// Waited is how long the item waited: the time since its messages
	// were last available, the latest of their enqueue (seen by the
	// wrapper on the ack or client call that wrote them), their
	// visibility (timers) and their last reception; 0 when unknown. A
	// stall waits at least the lock timeout.
	Waited time.Duration
	// Kill is true when the stall is attributed to the killed replica: a
	// write request of it to the item's instance was in flight when it
	// was killed.
	Kill bool
}

// String formats the stall on one line.
func (s LockStall) String() string {
	cause := "lost answer"
	if s.Kill {
		cause = "killed replica"
	}
	return fmt.Sprintf("%s lock stall (%s) of %s on replica %d at %s: attempt %d after %d receptions, waited %v: %s",
		s.Queue, cause, s.Instance, s.Replica, s.At.Format("15:04:05.000"), s.Attempt, s.Received, s.Waited.Round(time.Millisecond), s.Item)
}

// ReadBack is one of the provider's Info log lines about a lost answer
// ("the answer to … was lost; read back", "a work item lock whose answer
// was lost …"), captured with its fields.
type ReadBack struct {
	At      time.Time
	Replica int
	Message string
	// Fields holds the entry's fields: instance, and found, landed or
	// committed (what the read-back showed), error (the fault).
	Fields map[string]any
}

// String formats the line.
func (b ReadBack) String() string {
	keys := make([]string, 0, len(b.Fields))
	for k := range b.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, b.Fields[k]))
	}
	return fmt.Sprintf("%s replica %d %q %s", b.At.Format("15:04:05.000"), b.Replica, b.Message, strings.Join(parts, " "))
}

// observer records what the replicas' runtimes fetch and commit, through
// a wrapper around each replica's provider, and the provider's read-back
// log lines. It is safe for concurrent use.
type observer struct {
	mu        sync.Mutex
	seen      map[string]int       // message identity → receptions
	available map[string]time.Time // message identity → enqueued, visible or last received
	held      map[string]heldItem  // orchestration lock token → its messages
	consumed  []ConsumedMessage
	stalls    []LockStall
	readBacks []ReadBack
	// killed holds the instances (partition keys) the killed replica had
	// write requests in flight to when it was killed: an unreceived lock
	// on one of them may be the kill's.
	killed map[string]bool
}

type heldItem struct {
	replica  int
	messages []durable.WorkItem
}

func newObserver() *observer {
	return &observer{seen: map[string]int{}, available: map[string]time.Time{}, held: map[string]heldItem{}}
}

// identity is a message's identity for reception counts.
func identity(queue string, w durable.WorkItem) string {
	b, err := durable.MarshalWorkItem(w)
	if err != nil {
		return queue + ":" + w.Kind() + ":" + w.TargetInstance()
	}
	return queue + ":" + string(b)
}

// received records a fetch that returned messages with attempt count
// attempt, and a stall when the count reveals a lock nobody received.
func (o *observer) received(replica int, queue, instance string, msgs []durable.WorkItem, attempt uint32) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	received, last := 0, time.Time{}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = identity(queue, m)
		received = max(received, o.seen[ids[i]])
		if t := o.available[ids[i]]; t.After(last) {
			last = t
		}
	}
	for _, id := range ids {
		o.seen[id]++
		o.available[id] = now
	}
	if int(attempt) <= received+1 {
		return
	}
	s := LockStall{At: now, Replica: replica, Queue: queue, Instance: instance, Item: describeItems(msgs), Attempt: attempt, Received: received}
	if !last.IsZero() {
		s.Waited = max(now.Sub(last), 0)
	}
	s.Kill = o.killed[instance]
	o.stalls = append(o.stalls, s)
}

// enqueued records messages a committed write created, visible at at
// (a TimerFired at its fire time).
func (o *observer) enqueued(queue string, items []durable.WorkItem, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range items {
		v := at
		if t, ok := w.(durable.TimerFired); ok {
			if fire := time.UnixMilli(int64(t.FireAtMS)); fire.After(v) {
				v = fire
			}
		}
		o.available[identity(queue, w)] = v
	}
}

// describeItems lists the kinds of msgs.
func describeItems(msgs []durable.WorkItem) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = m.Kind()
	}
	return strings.Join(parts, "+")
}

// killedWith records the kill of a replica that had write requests in
// flight, whose answers it never saw, to instances.
func (o *observer) killedWith(instances []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.killed == nil {
		o.killed = map[string]bool{}
	}
	for _, in := range instances {
		o.killed[in] = true
	}
}

// locked remembers the messages of an orchestration lock.
func (o *observer) locked(token string, replica int, msgs []durable.WorkItem) {
	o.mu.Lock()
	o.held[token] = heldItem{replica: replica, messages: msgs}
	o.mu.Unlock()
}

// acked records the client-originated messages of a committed lock.
func (o *observer) acked(token string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.held[token]
	if !ok {
		return
	}
	delete(o.held, token)
	for _, m := range h.messages {
		c := ConsumedMessage{Kind: m.Kind(), Instance: m.TargetInstance(), Replica: h.replica}
		switch w := m.(type) {
		case durable.StartOrchestration:
			if w.ParentInstance != "" {
				continue // a sub-orchestration's start, not a client call
			}
			c.Name, c.Data = w.Orchestration, w.Input
		case durable.ExternalRaised:
			c.Name, c.Data = w.Name, w.Data
		case durable.QueueMessage:
			c.Name, c.Data = w.Name, w.Data
		default:
			continue
		}
		o.consumed = append(o.consumed, c)
	}
}

// released forgets a lock that was abandoned or lost.
func (o *observer) released(token string) {
	o.mu.Lock()
	delete(o.held, token)
	o.mu.Unlock()
}

// readBack records a captured log line.
func (o *observer) readBack(b ReadBack) {
	o.mu.Lock()
	o.readBacks = append(o.readBacks, b)
	o.mu.Unlock()
}

// results returns copies of what was recorded.
func (o *observer) results() (consumed []ConsumedMessage, stalls []LockStall, readBacks []ReadBack) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ConsumedMessage(nil), o.consumed...), append([]LockStall(nil), o.stalls...), append([]ReadBack(nil), o.readBacks...)
}

// observedProvider is a replica's provider as its runtime sees it: every
// call passes through, fetches and acks are recorded.
type observedProvider struct {
	durable.Provider
	obs     *observer
	replica int
}

// FetchOrchestrationItem implements durable.Provider.
func (p *observedProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	item, err := p.Provider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
	if err == nil && item != nil {
		p.obs.received(p.replica, "orchestrator", item.Instance, item.Messages, item.AttemptCount)
		p.obs.locked(item.LockToken, p.replica, item.Messages)
	}
	return item, err
}

// AckOrchestrationItem implements durable.Provider.
func (p *observedProvider) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) error {
	err := p.Provider.AckOrchestrationItem(ctx, lockToken, turn)
	switch {
	case err == nil:
		p.obs.acked(lockToken)
		now := time.Now()
		p.obs.enqueued("worker", turn.WorkerItems, now)
		p.obs.enqueued("orchestrator", turn.OrchestratorItems, now)
	case !durable.IsRetryable(err):
		p.obs.released(lockToken)
	}
	return err
}

// AbandonOrchestrationItem implements durable.Provider.
func (p *observedProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	p.obs.released(lockToken)
	return p.Provider.AbandonOrchestrationItem(ctx, lockToken, delay, ignoreAttempt)
}

// AckWorkItem implements durable.Provider.
func (p *observedProvider) AckWorkItem(ctx context.Context, lockToken string, completion durable.WorkItem) error {
	err := p.Provider.AckWorkItem(ctx, lockToken, completion)
	if err == nil {
		p.obs.enqueued("orchestrator", []durable.WorkItem{completion}, time.Now())
	}
	return err
}

// EnqueueForOrchestrator implements durable.Provider (the client's calls).
func (p *observedProvider) EnqueueForOrchestrator(ctx context.Context, item durable.WorkItem, delay time.Duration) error {
	err := p.Provider.EnqueueForOrchestrator(ctx, item, delay)
	if err == nil {
		p.obs.enqueued("orchestrator", []durable.WorkItem{item}, time.Now().Add(delay))
	}
	return err
}

// FetchWorkItem implements durable.Provider.
func (p *observedProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	lw, err := p.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
	if err == nil && lw != nil {
		p.obs.received(p.replica, "worker", lw.Item.TargetInstance(), []durable.WorkItem{lw.Item}, lw.AttemptCount)
	}
	return lw, err
}

// captureCore is a zapcore.Core that hands the provider's lost-answer log
// lines (any level) to the observer.
type captureCore struct {
	obs     *observer
	replica int
	fields  []zapcore.Field
}

// Enabled implements zapcore.LevelEnabler: every level.
func (c *captureCore) Enabled(zapcore.Level) bool { return true }

// With implements zapcore.Core.
func (c *captureCore) With(fields []zapcore.Field) zapcore.Core {
	return &captureCore{obs: c.obs, replica: c.replica, fields: append(append([]zapcore.Field(nil), c.fields...), fields...)}
}

// Check implements zapcore.Core: only lost-answer lines are written.
func (c *captureCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if isReadBack(e.Message) {
		return ce.AddCore(e, c)
	}
	return ce
}

// isReadBack matches the store's lost-answer log lines.
func isReadBack(msg string) bool {
	return strings.Contains(msg, "answer") && strings.Contains(msg, "lost")
}

// Write implements zapcore.Core.
func (c *captureCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	c.obs.readBack(ReadBack{At: e.Time, Replica: c.replica, Message: e.Message, Fields: enc.Fields})
	return nil
}

// Sync implements zapcore.Core.
func (c *captureCore) Sync() error { return nil }

// providerLogger is log with the observer's capture core teed in. Its
// lines name the campaign's replica index as "node": the engine names
// the replica by its id as "replica".
func (o *observer) providerLogger(log *zap.Logger, replica int) *zap.Logger {
	return zap.New(zapcore.NewTee(log.Core(), &captureCore{obs: o, replica: replica})).
		Named("provider").With(zap.Int("node", replica))
}

// errKilled is what every request of a killed replica fails with.
var errKilled = errors.New("chaos: replica killed (connection refused)")

// killableTransport is a replica's network: an HTTP client that can be
// cut. After the cut every request fails at once and answers in flight
// are discarded, as when a process dies.
type killableTransport struct {
	inner policy.Transporter
	cut   atomic.Bool
	mu    sync.Mutex
	// writes holds the write requests (not queries) in flight, with the
	// partition key (the instance) they address.
	writes map[*http.Request]string
}

// partitionKeyHeader carries a request's partition key, a JSON array.
const partitionKeyHeader = "x-ms-documentdb-partitionkey"

// Do implements policy.Transporter.
func (t *killableTransport) Do(req *http.Request) (*http.Response, error) {
	if t.cut.Load() {
		return nil, errKilled
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead && req.Header.Get("x-ms-documentdb-isquery") == "" {
		var pk []any
		_ = json.Unmarshal([]byte(req.Header.Get(partitionKeyHeader)), &pk)
		key := ""
		if len(pk) > 0 {
			key, _ = pk[0].(string)
		}
		t.mu.Lock()
		if t.writes == nil {
			t.writes = map[*http.Request]string{}
		}
		t.writes[req] = key
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			delete(t.writes, req)
			t.mu.Unlock()
		}()
	}
	resp, err := t.inner.Do(req)
	if t.cut.Load() {
		if resp != nil {
			_ = resp.Body.Close()
		}
		return nil, errKilled
	}
	return resp, err
}

// kill cuts the network and returns the partition keys of the write
// requests in flight (their answers will never be seen), sorted.
func (t *killableTransport) kill() []string {
	t.cut.Store(true)
	t.mu.Lock()
	keys := make([]string, 0, len(t.writes))
	for _, k := range t.writes {
		keys = append(keys, k)
	}
	t.mu.Unlock()
	if c, ok := t.inner.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	sort.Strings(keys)
	return keys
}
