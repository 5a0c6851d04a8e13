package memprovider

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// ProviderName and ProviderVersion are what Name and Version report.
const (
	ProviderName    = "memory"
	ProviderVersion = "0.1.0"
)

// handle is one provider on a Store. It implements durable.Provider and
// durable.ProviderAdmin.
type handle struct {
	s *Store
	// longPolling makes fetches wait up to their poll timeout for work.
	longPolling bool
}

var (
	_ durable.Provider       = (*handle)(nil)
	_ durable.ProviderAdmin  = (*handle)(nil)
	_ durable.RequestChecker = (*handle)(nil)
)

// begin checks the context and takes the store's mutex; the caller must
// call the returned unlock.
func (p *handle) begin(ctx context.Context, op string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, durable.Retryable(op, err, "context done")
	}
	p.s.mu.Lock()
	return p.s.mu.Unlock, nil
}

// beginInstance is begin for an operation on one instance: an empty
// instance id is a permanent error and takes no lock.
func (p *handle) beginInstance(ctx context.Context, op, instance string) (unlock func(), err error) {
	if instance == "" {
		return nil, durable.Permanent(op, nil, "empty instance id")
	}
	return p.begin(ctx, op)
}

func newToken() string { return uuid.NewString() }

// Name implements durable.Provider.
func (p *handle) Name() string { return ProviderName }

// Version implements durable.Provider.
func (p *handle) Version() string { return ProviderVersion }

// Admin implements durable.Provider: the handle is its own ProviderAdmin.
func (p *handle) Admin() (durable.ProviderAdmin, bool) { return p, true }

// ---------------------------------------------------------------------------
// Orchestrator queue
// ---------------------------------------------------------------------------

// FetchOrchestrationItem implements durable.Provider.
// A short-polling handle ignores pollTimeout; a long-polling one waits up to
// pollTimeout for work (see longpoll.go).
func (p *handle) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	if lockTimeout <= 0 {
		return nil, durable.Permanent(op, nil, "lock timeout must be positive, got %s", lockTimeout)
	}
	return fetchLoop(ctx, p, op, pollTimeout, func(now time.Time) (*durable.OrchestrationItem, time.Time, error) {
		item, err := p.s.fetchOrch(now, lockTimeout, filter)
		if item != nil || err != nil {
			return item, time.Time{}, err
		}
		return nil, p.s.nextOrchDue(now), nil
	})
}

// fetchOrch is one attempt of FetchOrchestrationItem. Callers hold s.mu.
func (s *Store) fetchOrch(now time.Time, lockTimeout time.Duration, filter *durable.DispatcherCapabilityFilter) (*durable.OrchestrationItem, error) {
	// Candidate instances, in the order of their oldest visible message.
	var candidates []string
	seen := map[string]bool{}
	for _, m := range s.orchQ {
		if m.visibleAt.After(now) || seen[m.instance] {
			continue
		}
		seen[m.instance] = true
		candidates = append(candidates, m.instance)
	}
	for _, inst := range candidates {
		if s.lockAlive(inst, now) != nil {
			continue
		}
		// Capability filter: before locking and before reading history.
		if filter != nil && !s.compatible(inst, filter) {
			continue
		}
		item, err := s.lockInstance(inst, now, lockTimeout)
		if err != nil {
			return nil, err
		}
		if item != nil {
			return item, nil
		}
	}
	return nil, nil
}

// compatible reports whether the instance's current execution may be
// fetched under filter: an unknown instance or an execution without a pinned
// version is always compatible.
func (s *Store) compatible(instance string, filter *durable.DispatcherCapabilityFilter) bool {
	rec := s.instances[instance]
	if rec == nil {
		return true
	}
	e := rec.execs[rec.currentExec]
	if e == nil || e.pinned == nil {
		return true
	}
	return filter.IsCompatible(*e.pinned)
}

// lockInstance locks an unlocked instance and its visible messages. It
// returns nil, nil when the instance turns out to have nothing to deliver
// (only orphan QueueMessages, which it deletes).
func (s *Store) lockInstance(inst string, now time.Time, lockTimeout time.Duration) (*durable.OrchestrationItem, error) {
	const op = "fetch_orchestration_item"
	var batch []*orchMsg
	var items []durable.WorkItem
	for _, m := range s.orchQ {
		if m.instance != inst || m.visibleAt.After(now) {
			continue
		}
		w, err := durable.UnmarshalWorkItem(m.data)
		if err != nil {
			return nil, durable.Permanent(op, err, "stored message %d of instance %q is undecodable", m.seq, inst)
		}
		batch = append(batch, m)
		items = append(items, w)
	}
	if len(batch) == 0 {
		return nil, nil
	}

	rec := s.instances[inst]
	var start *durable.StartOrchestration
	for _, w := range items {
		if so, ok := w.(durable.StartOrchestration); ok {
			start = &so
			break
		}
	}
	if rec == nil && !s.hasHistory(inst) && start == nil {
		// Not started: QueueMessages are dropped; other messages stay.
		// While a message is withheld (a start abandoned with a delay
		// may yet start the instance) they stay too, unlocked.
		withheld := slices.ContainsFunc(s.orchQ, func(m *orchMsg) bool { return m.instance == inst && m.visibleAt.After(now) })
		drop := map[*orchMsg]bool{}
		keptBatch, keptItems := batch[:0:0], items[:0:0]
		for i, m := range batch {
			if m.kind == (durable.QueueMessage{}).Kind() {
				drop[m] = true
				continue
			}
			keptBatch = append(keptBatch, m)
			keptItems = append(keptItems, items[i])
		}
		if len(drop) > 0 && !withheld {
			s.orchQ = slices.DeleteFunc(s.orchQ, func(m *orchMsg) bool { return drop[m] })
		}
		batch, items = keptBatch, keptItems
		if len(batch) == 0 {
			return nil, nil
		}
	}

	if rec != nil && rec.execs[rec.currentExec] != nil && rec.execs[rec.currentExec].status == durable.StatusContinuedAsNew &&
		!slices.ContainsFunc(items, func(w durable.WorkItem) bool { _, ok := w.(durable.ContinueAsNew); return ok }) {
		// The execution continued as new and its ContinueAsNew message is
		// not visible yet (abandoned with a delay): the messages belong to
		// the next execution, which only that message starts. They wait.
		return nil, nil
	}

	token := newToken()
	lock := &instLock{instance: inst, token: token, until: now.Add(lockTimeout)}
	var maxAttempts uint32
	for _, m := range batch {
		m.token = token
		m.attempts++
		maxAttempts = max(maxAttempts, m.attempts)
	}

	item := &durable.OrchestrationItem{
		Instance:     inst,
		Messages:     items,
		LockToken:    token,
		AttemptCount: maxAttempts,
		History:      []history.Event{},
		KVSnapshot:   map[string]durable.KVEntry{},
	}
	if rec != nil {
		item.OrchestrationName, item.Version, item.ExecutionID = rec.name, rec.version, rec.currentExec
	} else {
		item.ExecutionID = max(s.currentExecution(inst), 1)
		if start != nil {
			item.OrchestrationName, item.Version = start.Orchestration, start.Version
		}
	}

	events, herr := decodeEvents(s.sortedEvents(inst, item.ExecutionID))
	if herr != nil {
		item.HistoryError = fmt.Sprintf("history of instance %q execution %d cannot be decoded: %v", inst, item.ExecutionID, herr)
	} else {
		item.History = events
		if rec == nil && start == nil {
			for _, e := range events {
				if st, ok := e.Kind.(history.OrchestrationStarted); ok {
					item.OrchestrationName, item.Version = st.Name, st.Version
					break
				}
			}
		}
	}
	// The state as the current execution started: its own writes are in
	// History and stay out of the snapshot.
	item.KVSnapshot = s.kv[inst].snapshot()
	lock.name, lock.version = item.OrchestrationName, item.Version
	s.locks[inst] = lock
	return item, nil
}

// decodeEvents decodes encoded events, failing on the first bad one.
func decodeEvents(raw [][]byte) ([]history.Event, error) {
	out := make([]history.Event, 0, len(raw))
	for i, b := range raw {
		e, err := history.Unmarshal(b)
		if err != nil {
			return nil, fmt.Errorf("event at position %d: %w", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// encodeEvents validates and encodes events for appending to an execution:
// every event needs a kind and a non-zero id, and ids must be unique within
// the batch and absent from existing.
func encodeEvents(op string, events []history.Event, existing map[uint64][]byte) (map[uint64][]byte, error) {
	out := make(map[uint64][]byte, len(events))
	for _, e := range events {
		if e.EventID == 0 {
			return nil, durable.Permanent(op, nil, "event id must be set by the runtime (got 0)")
		}
		if _, dup := existing[e.EventID]; dup {
			return nil, durable.Permanent(op, nil, "duplicate event id %d", e.EventID)
		}
		if _, dup := out[e.EventID]; dup {
			return nil, durable.Permanent(op, nil, "duplicate event id %d in the appended events", e.EventID)
		}
		b, err := history.Marshal(e)
		if err != nil {
			return nil, durable.Permanent(op, err, "cannot encode event %d", e.EventID)
		}
		out[e.EventID] = b
	}
	return out, nil
}

// encodedItem is a validated, encoded work item ready to enqueue.
type encodedItem struct {
	item durable.WorkItem
	data []byte
}

// encodeItem validates a work item for queue q and encodes it.
func encodeItem(op string, w durable.WorkItem, q durable.Queue) (encodedItem, error) {
	if err := durable.ValidateWorkItem(w); err != nil {
		return encodedItem{}, durable.Permanent(op, err, "invalid work item")
	}
	if w.Queue() != q {
		return encodedItem{}, durable.Permanent(op, nil, "%s belongs on the %s queue, not the %s queue", w.Kind(), w.Queue(), q)
	}
	b, err := durable.MarshalWorkItem(w)
	if err != nil {
		return encodedItem{}, durable.Permanent(op, err, "cannot encode %s", w.Kind())
	}
	return encodedItem{item: w, data: b}, nil
}

// pushOrch appends an encoded item to the orchestrator queue and wakes
// waiting fetches.
func (s *Store) pushOrch(e encodedItem, visibleAt time.Time) {
	defer s.notify()
	s.orchQ = append(s.orchQ, &orchMsg{
		seq: s.nextSeq(), instance: e.item.TargetInstance(), kind: e.item.Kind(), data: e.data, visibleAt: visibleAt,
	})
}

// pushWork appends an encoded ActivityExecute to the worker queue and wakes
// waiting fetches.
func (s *Store) pushWork(e encodedItem, visibleAt time.Time) {
	defer s.notify()
	a := e.item.(durable.ActivityExecute)
	s.workQ = append(s.workQ, &workMsg{
		seq: s.nextSeq(), instance: a.Instance, execID: a.ExecutionID, activityID: a.ID,
		sessionID: a.SessionID, tag: a.Tag, data: e.data, visibleAt: visibleAt,
	})
}

func validStatus(st durable.Status) bool {
	switch st {
	case "", durable.StatusRunning, durable.StatusCompleted, durable.StatusFailed, durable.StatusContinuedAsNew:
		return true
	}
	return false
}

// AckOrchestrationItem implements durable.Provider. It validates everything
// first and then applies every effect, so it is all or nothing.
func (p *handle) AckOrchestrationItem(ctx context.Context, lockToken string, turn durable.OrchestrationTurn) error {
	const op = "ack_orchestration_item"
	if lockToken == "" {
		return durable.Permanent(op, nil, "empty lock token")
	}
	if turn.ExecutionID == 0 {
		return durable.Permanent(op, nil, "execution id must be at least 1")
	}
	md := turn.Metadata
	if !validStatus(md.Status) {
		return durable.Permanent(op, nil, "unknown status %q", md.Status)
	}
	workers := make([]encodedItem, 0, len(turn.WorkerItems))
	for _, w := range turn.WorkerItems {
		e, err := encodeItem(op, w, durable.WorkerQueue)
		if err != nil {
			return err
		}
		workers = append(workers, e)
	}
	orchs := make([]encodedItem, 0, len(turn.OrchestratorItems))
	for _, w := range turn.OrchestratorItems {
		e, err := encodeItem(op, w, durable.OrchestratorQueue)
		if err != nil {
			return err
		}
		orchs = append(orchs, e)
	}

	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := p.s
	now := s.now()

	lock := s.lockByToken(lockToken)
	if lock == nil {
		return durable.Permanent(op, nil, "lock token is unknown (never issued, released, or taken over)")
	}
	if !lock.until.After(now) {
		return durable.Permanent(op, nil, "lock on instance %q has expired", lock.instance)
	}
	inst := lock.instance
	encoded, err := encodeEvents(op, turn.HistoryDelta, s.history[inst][turn.ExecutionID])
	if err != nil {
		return err
	}

	// --- validated: apply everything ---

	// History (append-only: existing events are never read).
	if len(encoded) > 0 {
		if s.history[inst] == nil {
			s.history[inst] = map[uint64]map[uint64][]byte{}
		}
		if s.history[inst][turn.ExecutionID] == nil {
			s.history[inst][turn.ExecutionID] = map[uint64][]byte{}
		}
		for id, b := range encoded {
			s.history[inst][turn.ExecutionID][id] = b
		}
	}

	// Instance and execution metadata.
	rec := s.instances[inst]
	if rec == nil && (md.OrchestrationName != "" || len(turn.HistoryDelta) > 0) {
		rec = &instanceRec{
			id: inst, name: lock.name, version: lock.version, currentExec: turn.ExecutionID,
			createdAt: now, createdSeq: s.nextSeq(), execs: map[uint64]*execRec{},
		}
		s.instances[inst] = rec
	}
	if rec != nil {
		if md.OrchestrationName != "" {
			rec.name = md.OrchestrationName
		}
		if md.OrchestrationVersion != "" {
			rec.version = md.OrchestrationVersion
		}
		if md.ParentInstanceID != "" {
			rec.parent = md.ParentInstanceID
		}
		rec.currentExec = max(rec.currentExec, turn.ExecutionID)
		rec.updatedAt = now
		ex := rec.execs[turn.ExecutionID]
		if ex == nil {
			ex = &execRec{id: turn.ExecutionID, status: durable.StatusRunning, startedAt: now}
			rec.execs[turn.ExecutionID] = ex
		}
		if md.Status != "" {
			ex.status = md.Status
			ex.output = cloneStr(md.Output)
			if md.Status.IsTerminal() {
				ex.completedAt = now
			} else {
				ex.completedAt = time.Time{}
			}
		} else if md.Output != nil {
			ex.output = cloneStr(md.Output)
		}
		if md.PinnedVersion != nil {
			v := *md.PinnedVersion
			ex.pinned = &v
		}
		// Custom status: the last CustomStatusUpdated of the delta wins.
		for i := len(turn.HistoryDelta) - 1; i >= 0; i-- {
			if cs, ok := turn.HistoryDelta[i].Kind.(history.CustomStatusUpdated); ok {
				rec.customStatus = cloneStr(cs.Status)
				rec.customStatusVersion++
				break
			}
		}
	}

	// Key-value events, in order, into the current execution's delta; an
	// ack that ends the execution then merges the delta into the store.
	for _, e := range turn.HistoryDelta {
		switch e.Kind.(type) {
		case history.KeyValueSet, history.KeyValueCleared, history.KeyValuesCleared:
			s.kvOf(inst).record(e)
		}
	}
	if md.Status.IsTerminal() {
		if k := s.kv[inst]; k != nil {
			k.merge()
		}
	}

	// Enqueue worker items, then orchestrator items.
	for _, e := range workers {
		s.pushWork(e, now)
	}
	for _, e := range orchs {
		visible := now
		if tf, ok := e.item.(durable.TimerFired); ok {
			visible = time.UnixMilli(int64(tf.FireAtMS))
		}
		s.pushOrch(e, visible)
	}

	// Cancel activities (after enqueueing, so same-turn schedule+cancel nets out).
	if len(turn.CancelledActivities) > 0 {
		type key struct {
			inst      string
			exec, act uint64
		}
		cancel := map[key]bool{}
		for _, c := range turn.CancelledActivities {
			cancel[key{c.Instance, c.ExecutionID, c.ActivityID}] = true
		}
		s.workQ = slices.DeleteFunc(s.workQ, func(w *workMsg) bool {
			return cancel[key{w.instance, w.execID, w.activityID}]
		})
	}

	// Delete the locked messages and release the lock.
	s.orchQ = slices.DeleteFunc(s.orchQ, func(m *orchMsg) bool { return m.token == lockToken })
	delete(s.locks, inst)
	s.notify() // new messages, a released instance, a changed pinned version
	return nil
}

// AbandonOrchestrationItem implements durable.Provider.
func (p *handle) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_orchestration_item"
	if lockToken == "" {
		return durable.Permanent(op, nil, "empty lock token")
	}
	if delay < 0 {
		return durable.Permanent(op, nil, "negative delay %s", delay)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := p.s
	now := s.now()
	lock := s.lockByToken(lockToken)
	if lock == nil {
		return durable.Permanent(op, nil, "lock token is unknown (never issued, released, or taken over)")
	}
	if !lock.until.After(now) {
		return durable.Permanent(op, nil, "lock on instance %q has expired", lock.instance)
	}
	for _, m := range s.orchQ {
		if m.token != lockToken {
			continue
		}
		m.token = ""
		if delay > 0 {
			m.visibleAt = now.Add(delay)
		}
		if ignoreAttempt && m.attempts > 0 {
			m.attempts--
		}
	}
	delete(s.locks, lock.instance)
	s.notify()
	return nil
}

// RenewOrchestrationItemLock implements durable.Provider.
func (p *handle) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_orchestration_item_lock"
	if lockToken == "" {
		return durable.Permanent(op, nil, "empty lock token")
	}
	if extendFor <= 0 {
		return durable.Permanent(op, nil, "extension must be positive, got %s", extendFor)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	now := p.s.now()
	lock := p.s.lockByToken(lockToken)
	if lock == nil {
		return durable.Permanent(op, nil, "lock token is unknown (never issued, released, or taken over)")
	}
	if !lock.until.After(now) {
		return durable.Permanent(op, nil, "lock on instance %q has expired", lock.instance)
	}
	lock.until = now.Add(extendFor)
	p.s.notify() // the lock may now expire sooner
	return nil
}

// CheckRequest implements durable.RequestChecker.
func (p *handle) CheckRequest(ctx context.Context, item durable.WorkItem) (durable.RequestState, error) {
	const op = "check_request"
	e, err := encodeItem(op, item, item.Queue())
	if err != nil {
		return durable.RequestUnknown, err
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.RequestUnknown, err
	}
	defer unlock()
	return p.s.checkRequest(e), nil
}

// EnqueueForOrchestrator implements durable.Provider.
func (p *handle) EnqueueForOrchestrator(ctx context.Context, item durable.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	if delay < 0 {
		return durable.Permanent(op, nil, "negative delay %s", delay)
	}
	e, err := encodeItem(op, item, durable.OrchestratorQueue)
	if err != nil {
		return err
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	if dup, err := p.s.recordRequest(op, e); err != nil || dup {
		return err
	}
	p.s.pushOrch(e, p.s.now().Add(delay))
	return nil
}

// ---------------------------------------------------------------------------
// History
// ---------------------------------------------------------------------------

// Read implements durable.Provider.
func (p *handle) Read(ctx context.Context, instance string) ([]history.Event, error) {
	const op = "read"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return p.s.readExecution(op, instance, p.s.currentExecution(instance))
}

// ReadWithExecution implements durable.Provider.
func (p *handle) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
	const op = "read_with_execution"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return p.s.readExecution(op, instance, executionID)
}

// readExecution decodes one execution's history; an undecodable event is a
// permanent error.
func (s *Store) readExecution(op, instance string, exec uint64) ([]history.Event, error) {
	events, err := decodeEvents(s.sortedEvents(instance, exec))
	if err != nil {
		return nil, durable.Permanent(op, err, "history of instance %q execution %d cannot be decoded", instance, exec)
	}
	return events, nil
}

// AppendWithExecution implements durable.Provider.
func (p *handle) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []history.Event) error {
	const op = "append_with_execution"
	if instance == "" {
		return durable.Permanent(op, nil, "empty instance id")
	}
	if executionID == 0 {
		return durable.Permanent(op, nil, "execution id must be at least 1")
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := p.s
	encoded, err := encodeEvents(op, events, s.history[instance][executionID])
	if err != nil {
		return err
	}
	if len(encoded) == 0 {
		return nil
	}
	if s.history[instance] == nil {
		s.history[instance] = map[uint64]map[uint64][]byte{}
	}
	if s.history[instance][executionID] == nil {
		s.history[instance][executionID] = map[uint64][]byte{}
	}
	for id, b := range encoded {
		s.history[instance][executionID][id] = b
	}
	return nil
}

// ---------------------------------------------------------------------------
// Worker queue and sessions
// ---------------------------------------------------------------------------

// EnqueueForWorker implements durable.Provider.
func (p *handle) EnqueueForWorker(ctx context.Context, item durable.WorkItem) error {
	const op = "enqueue_for_worker"
	e, err := encodeItem(op, item, durable.WorkerQueue)
	if err != nil {
		return err
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	p.s.pushWork(e, p.s.now())
	return nil
}

// FetchWorkItem implements durable.Provider.
// A short-polling handle ignores pollTimeout; a long-polling one waits up to
// pollTimeout for work (see longpoll.go).
func (p *handle) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	if lockTimeout <= 0 {
		return nil, durable.Permanent(op, nil, "lock timeout must be positive, got %s", lockTimeout)
	}
	if session != nil {
		if session.OwnerID == "" {
			return nil, durable.Permanent(op, nil, "session owner id is empty")
		}
		if session.LockTimeout <= 0 {
			return nil, durable.Permanent(op, nil, "session lock timeout must be positive, got %s", session.LockTimeout)
		}
	}
	return fetchLoop(ctx, p, op, pollTimeout, func(now time.Time) (*durable.LockedWorkItem, time.Time, error) {
		item, err := p.s.fetchWork(now, lockTimeout, session, tags)
		if item != nil || err != nil {
			return item, time.Time{}, err
		}
		return nil, p.s.nextWorkDue(now, session, tags), nil
	})
}

// fetchWork is one attempt of FetchWorkItem. Callers hold s.mu.
func (s *Store) fetchWork(now time.Time, lockTimeout time.Duration, session *durable.SessionFetchConfig, tags durable.TagFilter) (*durable.LockedWorkItem, error) {
	const op = "fetch_work_item"
	for _, w := range s.workQ {
		if w.visibleAt.After(now) || workLocked(w, now) || !tags.Matches(w.tag) {
			continue
		}
		if w.sessionID != "" {
			if session == nil {
				continue
			}
			if sr := s.sessions[w.sessionID]; sr != nil && sr.lockedUntil.After(now) && sr.owner != session.OwnerID {
				continue
			}
		}
		item, err := durable.UnmarshalWorkItem(w.data)
		if err != nil {
			return nil, durable.Permanent(op, err, "stored work item %d is undecodable", w.seq)
		}
		w.token = newToken()
		w.lockedUntil = now.Add(lockTimeout)
		w.attempts++
		if w.sessionID != "" {
			s.sessions[w.sessionID] = &sessionRec{owner: session.OwnerID, lockedUntil: now.Add(session.LockTimeout), lastActivity: now}
		}
		return &durable.LockedWorkItem{Item: item, LockToken: w.token, AttemptCount: w.attempts}, nil
	}
	return nil, nil
}

// workByToken returns the worker message locked with token, or nil.
func (s *Store) workByToken(token string) *workMsg {
	for _, w := range s.workQ {
		if w.token == token {
			return w
		}
	}
	return nil
}

// touchSession records activity on a session whose lock is still held.
func (s *Store) touchSession(sessionID string, now time.Time) {
	if sessionID == "" {
		return
	}
	if sr := s.sessions[sessionID]; sr != nil && sr.lockedUntil.After(now) {
		sr.lastActivity = now
	}
}

// AckWorkItem implements durable.Provider.
func (p *handle) AckWorkItem(ctx context.Context, lockToken string, completion durable.WorkItem) error {
	const op = "ack_work_item"
	if lockToken == "" {
		return durable.Permanent(op, nil, "empty lock token")
	}
	var enc *encodedItem
	if completion != nil {
		e, err := encodeItem(op, completion, durable.OrchestratorQueue)
		if err != nil {
			return err
		}
		enc = &e
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := p.s
	now := s.now()
	w := s.workByToken(lockToken)
	if w == nil {
		return durable.Permanent(op, nil, "work item is gone or its lock was taken over (cancelled, or lock expired)")
	}
	if !w.lockedUntil.After(now) {
		return durable.Permanent(op, nil, "work item lock has expired")
	}
	s.workQ = slices.DeleteFunc(s.workQ, func(x *workMsg) bool { return x == w })
	s.touchSession(w.sessionID, now)
	if enc != nil {
		s.pushOrch(*enc, now)
	}
	s.notify()
	return nil
}

// AbandonWorkItem implements durable.Provider. Abandoning an unknown token,
// or a lock that has already expired, succeeds without effect.
func (p *handle) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "abandon_work_item"
	if delay < 0 {
		return durable.Permanent(op, nil, "negative delay %s", delay)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := p.s
	now := s.now()
	if lockToken == "" {
		return nil
	}
	w := s.workByToken(lockToken)
	if w == nil || !w.lockedUntil.After(now) {
		return nil
	}
	w.token = ""
	w.lockedUntil = time.Time{}
	w.visibleAt = now.Add(delay)
	if ignoreAttempt && w.attempts > 0 {
		w.attempts--
	}
	s.notify()
	return nil
}

// RenewWorkItemLock implements durable.Provider.
func (p *handle) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "renew_work_item_lock"
	if lockToken == "" {
		return durable.Permanent(op, nil, "empty lock token")
	}
	if extendFor <= 0 {
		return durable.Permanent(op, nil, "extension must be positive, got %s", extendFor)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return err
	}
	defer unlock()
	s := p.s
	now := s.now()
	w := s.workByToken(lockToken)
	if w == nil {
		return durable.Permanent(op, nil, "work item is gone or its lock was taken over (cancelled, or lock expired)")
	}
	if !w.lockedUntil.After(now) {
		return durable.Permanent(op, nil, "work item lock has expired")
	}
	w.lockedUntil = now.Add(extendFor)
	s.touchSession(w.sessionID, now)
	s.notify() // the lock may now expire sooner
	return nil
}

// RenewSessionLock implements durable.Provider.
func (p *handle) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "renew_session_lock"
	if extendFor <= 0 {
		return 0, durable.Permanent(op, nil, "extension must be positive, got %s", extendFor)
	}
	if idleTimeout < 0 {
		return 0, durable.Permanent(op, nil, "negative idle timeout %s", idleTimeout)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer unlock()
	s := p.s
	now := s.now()
	n := 0
	for _, sr := range s.sessions {
		if !slices.Contains(ownerIDs, sr.owner) || !sr.lockedUntil.After(now) || !sr.lastActivity.Add(idleTimeout).After(now) {
			continue
		}
		sr.lockedUntil = now.Add(extendFor)
		n++
	}
	if n > 0 {
		s.notify() // a session lock may now expire sooner
	}
	return n, nil
}

// CleanupOrphanedSessions implements durable.Provider.
func (p *handle) CleanupOrphanedSessions(ctx context.Context, _ time.Duration) (int, error) {
	const op = "cleanup_orphaned_sessions"
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer unlock()
	s := p.s
	now := s.now()
	referenced := map[string]bool{}
	for _, w := range s.workQ {
		if w.sessionID != "" {
			referenced[w.sessionID] = true
		}
	}
	n := 0
	for id, sr := range s.sessions {
		if !sr.lockedUntil.After(now) && !referenced[id] {
			delete(s.sessions, id)
			n++
		}
	}
	return n, nil
}

// ---------------------------------------------------------------------------
// Custom status, key-value store, stats
// ---------------------------------------------------------------------------

// GetCustomStatus implements durable.Provider.
func (p *handle) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*durable.CustomStatus, error) {
	const op = "get_custom_status"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec := p.s.instances[instance]
	if rec == nil || rec.customStatusVersion <= lastSeenVersion {
		return nil, nil
	}
	return &durable.CustomStatus{Status: cloneStr(rec.customStatus), Version: rec.customStatusVersion}, nil
}

// GetKVValue implements durable.Provider.
func (p *handle) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	const op = "get_kv_value"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return "", false, err
	}
	defer unlock()
	e, ok := p.s.kv[instance].get(key)
	return e.Value, ok, nil
}

// GetKVAllValues implements durable.Provider.
func (p *handle) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	const op = "get_kv_all_values"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := map[string]string{}
	for k, e := range p.s.kv[instance].view() {
		out[k] = e.Value
	}
	return out, nil
}

// GetInstanceStats implements durable.Provider.
func (p *handle) GetInstanceStats(ctx context.Context, instance string) (*durable.InstanceStats, error) {
	const op = "get_instance_stats"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := p.s
	rec := s.instances[instance]
	if rec == nil {
		return nil, nil
	}
	st := &durable.InstanceStats{ExecutionID: rec.currentExec}
	for _, b := range s.history[instance][rec.currentExec] {
		st.HistoryEventCount++
		st.HistorySizeBytes += uint64(len(b))
	}
	// KV counts follow what clients see (store overlaid with the delta).
	for k, e := range s.kv[instance].view() {
		st.KVKeyCount++
		st.KVSizeBytes += uint64(len(k) + len(e.Value))
	}
	for _, m := range s.orchQ {
		if m.instance == instance {
			st.PendingMessageCount++
		}
	}
	return st, nil
}
