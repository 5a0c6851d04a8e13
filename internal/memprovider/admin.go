package memprovider

import (
	"context"
	"slices"
	"sort"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// ListInstances implements durable.ProviderAdmin: newest first.
func (p *handle) ListInstances(ctx context.Context) ([]string, error) {
	unlock, err := p.begin(ctx, "list_instances")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []string{}
	for _, rec := range p.s.instancesByCreation() {
		out = append(out, rec.id)
	}
	return out, nil
}

// ListInstancesByStatus implements durable.ProviderAdmin: newest first.
func (p *handle) ListInstancesByStatus(ctx context.Context, status durable.Status) ([]string, error) {
	unlock, err := p.begin(ctx, "list_instances_by_status")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []string{}
	for _, rec := range p.s.instancesByCreation() {
		if rec.currentStatus() == status {
			out = append(out, rec.id)
		}
	}
	return out, nil
}

// ListInstancesFiltered implements durable.ProviderAdmin: newest first.
func (p *handle) ListInstancesFiltered(ctx context.Context, f durable.ListFilter) ([]string, error) {
	unlock, err := p.begin(ctx, "list_instances_filtered")
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []string{}
	for _, rec := range p.s.instancesByCreation() {
		if f.Matches(rec.name, rec.currentStatus(), rec.createdAt) {
			out = append(out, rec.id)
		}
	}
	return out, nil
}

// ListExecutions implements durable.ProviderAdmin.
func (p *handle) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	const op = "list_executions"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []uint64{}
	if rec := p.s.instances[instance]; rec != nil {
		for id := range rec.execs {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ReadHistoryWithExecutionID implements durable.ProviderAdmin.
func (p *handle) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
	const op = "read_history_with_execution_id"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return p.s.readExecution(op, instance, executionID)
}

// ReadHistory implements durable.ProviderAdmin: the current execution's
// history (empty for an unknown instance, as Read).
func (p *handle) ReadHistory(ctx context.Context, instance string) ([]history.Event, error) {
	const op = "read_history"
	unlock, err := p.beginInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return p.s.readExecution(op, instance, p.s.currentExecution(instance))
}

// LatestExecutionID implements durable.ProviderAdmin.
func (p *handle) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	const op = "latest_execution_id"
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return 0, err
	}
	defer unlock()
	rec := p.s.instances[instance]
	if rec == nil {
		return 0, durable.Permanent(op, nil, "instance %q not found", instance)
	}
	return rec.currentExec, nil
}

// GetInstanceInfo implements durable.ProviderAdmin.
func (p *handle) GetInstanceInfo(ctx context.Context, instance string) (durable.InstanceInfo, error) {
	const op = "get_instance_info"
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.InstanceInfo{}, err
	}
	defer unlock()
	rec := p.s.instances[instance]
	if rec == nil {
		return durable.InstanceInfo{}, durable.Permanent(op, nil, "instance %q not found", instance)
	}
	info := durable.InstanceInfo{
		InstanceID: rec.id, OrchestrationName: rec.name, OrchestrationVersion: rec.version,
		CurrentExecutionID: rec.currentExec, Status: rec.currentStatus(),
		CreatedAt: rec.createdAt, UpdatedAt: rec.updatedAt, ParentInstanceID: rec.parent,
		CustomStatus: cloneStr(rec.customStatus),
	}
	if e := rec.execs[rec.currentExec]; e != nil {
		info.Output = cloneStr(e.output)
	}
	return info, nil
}

// GetExecutionInfo implements durable.ProviderAdmin.
func (p *handle) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (durable.ExecutionInfo, error) {
	const op = "get_execution_info"
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.ExecutionInfo{}, err
	}
	defer unlock()
	rec := p.s.instances[instance]
	if rec == nil {
		return durable.ExecutionInfo{}, durable.Permanent(op, nil, "instance %q not found", instance)
	}
	e := rec.execs[executionID]
	if e == nil {
		return durable.ExecutionInfo{}, durable.Permanent(op, nil, "execution %d of instance %q not found", executionID, instance)
	}
	return durable.ExecutionInfo{
		ExecutionID: e.id, Status: e.status, Output: cloneStr(e.output),
		StartedAt: e.startedAt, CompletedAt: e.completedAt,
		EventCount: len(p.s.history[instance][executionID]),
	}, nil
}

// GetSystemMetrics implements durable.ProviderAdmin.
func (p *handle) GetSystemMetrics(ctx context.Context) (durable.SystemMetrics, error) {
	unlock, err := p.begin(ctx, "get_system_metrics")
	if err != nil {
		return durable.SystemMetrics{}, err
	}
	defer unlock()
	var m durable.SystemMetrics
	for _, rec := range p.s.instances {
		m.TotalInstances++
		m.TotalExecutions += uint64(len(rec.execs))
		switch rec.currentStatus() {
		case durable.StatusRunning:
			m.RunningInstances++
		case durable.StatusCompleted:
			m.CompletedInstances++
		case durable.StatusFailed:
			m.FailedInstances++
		}
	}
	for _, execs := range p.s.history {
		for _, events := range execs {
			m.TotalEvents += uint64(len(events))
		}
	}
	return m, nil
}

// GetQueueDepths implements durable.ProviderAdmin.
func (p *handle) GetQueueDepths(ctx context.Context) (durable.QueueDepths, error) {
	unlock, err := p.begin(ctx, "get_queue_depths")
	if err != nil {
		return durable.QueueDepths{}, err
	}
	defer unlock()
	s := p.s
	now := s.now()
	var d durable.QueueDepths
	for _, m := range s.orchQ {
		switch {
		case m.visibleAt.After(now):
			d.TimerQueue++
		case !s.orchLocked(m, now):
			d.OrchestratorQueue++
		}
	}
	for _, w := range s.workQ {
		if !w.visibleAt.After(now) && !workLocked(w, now) {
			d.WorkerQueue++
		}
	}
	return d, nil
}

// ListChildren implements durable.ProviderAdmin: children in creation order.
func (p *handle) ListChildren(ctx context.Context, instance string) ([]string, error) {
	unlock, err := p.begin(ctx, "list_children")
	if err != nil {
		return nil, err
	}
	defer unlock()
	return p.s.children(instance), nil
}

// children returns the direct children of instance, oldest first.
func (s *Store) children(instance string) []string {
	var recs []*instanceRec
	for _, rec := range s.instances {
		if rec.parent == instance && instance != "" {
			recs = append(recs, rec)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].createdSeq < recs[j].createdSeq })
	out := []string{}
	for _, rec := range recs {
		out = append(out, rec.id)
	}
	return out
}

// GetParentID implements durable.ProviderAdmin.
func (p *handle) GetParentID(ctx context.Context, instance string) (string, error) {
	const op = "get_parent_id"
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return "", err
	}
	defer unlock()
	rec := p.s.instances[instance]
	if rec == nil {
		return "", durable.Permanent(op, nil, "instance %q not found", instance)
	}
	return rec.parent, nil
}

// GetInstanceTree implements durable.ProviderAdmin.
func (p *handle) GetInstanceTree(ctx context.Context, instance string) (durable.InstanceTree, error) {
	return durable.CollectInstanceTree(ctx, p, instance)
}

// DeleteInstance implements durable.ProviderAdmin.
func (p *handle) DeleteInstance(ctx context.Context, instance string, force bool) (durable.DeleteInstanceResult, error) {
	return durable.DeleteInstanceTree(ctx, p, instance, force)
}

// DeleteInstancesAtomic implements durable.ProviderAdmin.
func (p *handle) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (durable.DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	for _, id := range ids {
		if id == "" {
			return durable.DeleteInstanceResult{}, durable.Permanent(op, nil, "empty instance id")
		}
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.DeleteInstanceResult{}, err
	}
	defer unlock()
	return p.s.deleteInstances(op, ids, force)
}

// deleteInstances checks and then deletes the instances and everything
// they own. Callers hold s.mu.
func (s *Store) deleteInstances(op string, ids []string, force bool) (durable.DeleteInstanceResult, error) {
	var res durable.DeleteInstanceResult
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	if len(set) == 0 {
		return res, nil
	}
	if !force {
		for _, id := range ids {
			if rec := s.instances[id]; rec != nil && rec.currentStatus() == durable.StatusRunning {
				return res, durable.Permanent(op, nil, "instance %q is still running; cancel it first or delete with force", id)
			}
		}
	}
	for _, rec := range s.instancesByCreation() {
		if set[rec.parent] && !set[rec.id] {
			return res, durable.Permanent(op, nil,
				"instance %q has child %q that is not in the deletion set (it would be orphaned); re-read the tree and retry", rec.parent, rec.id)
		}
	}

	sessions := map[string]bool{}
	for id := range set {
		if rec := s.instances[id]; rec != nil {
			res.InstancesDeleted++
			res.ExecutionsDeleted += uint64(len(rec.execs))
			delete(s.instances, id)
		}
		for _, events := range s.history[id] {
			res.EventsDeleted += uint64(len(events))
		}
		delete(s.history, id)
		delete(s.requests, id)
		delete(s.kv, id)
		delete(s.locks, id)
	}
	before := len(s.orchQ)
	s.orchQ = slices.DeleteFunc(s.orchQ, func(m *orchMsg) bool { return set[m.instance] })
	res.QueueMessagesDeleted += uint64(before - len(s.orchQ))
	before = len(s.workQ)
	s.workQ = slices.DeleteFunc(s.workQ, func(w *workMsg) bool {
		if set[w.instance] {
			if w.sessionID != "" {
				sessions[w.sessionID] = true
			}
			return true
		}
		return false
	})
	res.QueueMessagesDeleted += uint64(before - len(s.workQ))
	// Sessions used only by the deleted instances' work go with them.
	for _, w := range s.workQ {
		delete(sessions, w.sessionID)
	}
	for id := range sessions {
		delete(s.sessions, id)
	}
	return res, nil
}

// tree returns root and its descendants, breadth first. Callers hold s.mu.
func (s *Store) tree(root string) []string {
	all := []string{root}
	seen := map[string]bool{root: true}
	for i := 0; i < len(all); i++ {
		for _, c := range s.children(all[i]) {
			if !seen[c] {
				seen[c] = true
				all = append(all, c)
			}
		}
	}
	return all
}

// matchInstances returns the instances selected by filter, oldest first.
// terminalRootsOnly restricts to root instances whose current execution is
// terminal. Callers hold s.mu.
func (s *Store) matchInstances(filter durable.InstanceFilter, terminalRootsOnly bool) []*instanceRec {
	var only map[string]bool
	if filter.InstanceIDs != nil {
		only = map[string]bool{}
		for _, id := range filter.InstanceIDs {
			only[id] = true
		}
	}
	recs := s.instancesByCreation()
	slices.Reverse(recs)
	var out []*instanceRec
	for _, rec := range recs {
		if only != nil && !only[rec.id] {
			continue
		}
		status := rec.currentStatus()
		if terminalRootsOnly && (rec.parent != "" || !status.IsTerminal()) {
			continue
		}
		if !filter.CompletedBefore.IsZero() {
			e := rec.execs[rec.currentExec]
			if e == nil || !e.status.IsTerminal() || e.completedAt.IsZero() || !e.completedAt.Before(filter.CompletedBefore) {
				continue
			}
		}
		out = append(out, rec)
		if filter.Limit > 0 && len(out) == filter.Limit {
			break
		}
	}
	return out
}

// DeleteInstanceBulk implements durable.ProviderAdmin: terminal root
// instances matching the filter (oldest first when Limit applies) are
// deleted with their descendants.
func (p *handle) DeleteInstanceBulk(ctx context.Context, filter durable.InstanceFilter) (durable.DeleteInstanceResult, error) {
	const op = "delete_instance_bulk"
	if filter.Limit < 0 {
		return durable.DeleteInstanceResult{}, durable.Permanent(op, nil, "negative limit %d", filter.Limit)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.DeleteInstanceResult{}, err
	}
	defer unlock()
	s := p.s
	var res durable.DeleteInstanceResult
	for _, rec := range s.matchInstances(filter, true) {
		r, err := s.deleteInstances(op, s.tree(rec.id), true)
		if err != nil {
			return res, err
		}
		res.Add(r)
	}
	return res, nil
}

// PruneExecutions implements durable.ProviderAdmin.
func (p *handle) PruneExecutions(ctx context.Context, instance string, options durable.PruneOptions) (durable.PruneResult, error) {
	const op = "prune_executions"
	if options.KeepLast < 0 {
		return durable.PruneResult{}, durable.Permanent(op, nil, "negative KeepLast %d", options.KeepLast)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.PruneResult{}, err
	}
	defer unlock()
	rec := p.s.instances[instance]
	if rec == nil {
		return durable.PruneResult{}, durable.Permanent(op, nil, "instance %q not found", instance)
	}
	return p.s.prune(rec, options), nil
}

// prune deletes the instance's prunable executions. Callers hold s.mu.
func (s *Store) prune(rec *instanceRec, options durable.PruneOptions) durable.PruneResult {
	res := durable.PruneResult{InstancesProcessed: 1}
	ids := make([]uint64, 0, len(rec.execs))
	for id := range rec.execs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Reverse(ids) // newest first
	for i, id := range ids {
		e := rec.execs[id]
		switch {
		case id == rec.currentExec, e.status == durable.StatusRunning:
			continue
		case options.KeepLast > 0 && i < options.KeepLast:
			continue
		case !options.CompletedBefore.IsZero() && (e.completedAt.IsZero() || !e.completedAt.Before(options.CompletedBefore)):
			continue
		}
		res.ExecutionsDeleted++
		res.EventsDeleted += uint64(len(s.history[rec.id][id]))
		delete(rec.execs, id)
		delete(s.history[rec.id], id)
	}
	return res
}

// PruneExecutionsBulk implements durable.ProviderAdmin: every instance
// matching the filter, running ones included, is pruned.
func (p *handle) PruneExecutionsBulk(ctx context.Context, filter durable.InstanceFilter, options durable.PruneOptions) (durable.PruneResult, error) {
	const op = "prune_executions_bulk"
	if options.KeepLast < 0 {
		return durable.PruneResult{}, durable.Permanent(op, nil, "negative KeepLast %d", options.KeepLast)
	}
	if filter.Limit < 0 {
		return durable.PruneResult{}, durable.Permanent(op, nil, "negative limit %d", filter.Limit)
	}
	unlock, err := p.begin(ctx, op)
	if err != nil {
		return durable.PruneResult{}, err
	}
	defer unlock()
	var res durable.PruneResult
	for _, rec := range p.s.matchInstances(filter, false) {
		res.Add(p.s.prune(rec, options))
	}
	return res, nil
}
