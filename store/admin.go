package store

import (
	"context"
	"sort"
	"time"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// Admin queries that span instances are cross-partition queries without
// ORDER BY, TOP, DISTINCT, aggregates or GROUP BY (the gateway refuses
// them across partitions): they select a few fields and sort or count on
// the client. Pending and deleting instances are invisible to all of them.

type instanceRow struct {
	InstanceID       string `json:"instanceId"`
	Status           string `json:"status"`
	ParentInstanceID string `json:"parentInstanceId"`
	CreatedAt        int64  `json:"createdAt"`
	CompletedAt      int64  `json:"completedAt"`
	Pending          bool   `json:"pending"`
	Deleting         string `json:"deleting"`
}

const instanceRowFields = "SELECT c.instanceId, c.status, c.parentInstanceId, c.createdAt, c.completedAt, c.pending, c.deleting FROM c WHERE c.type = 'instance'"

func (p *Store) instanceRows(ctx context.Context, extra string, params ...any) ([]instanceRow, error) {
	var qp = make([]queryParam, 0, len(params)/2)
	for i := 0; i+1 < len(params); i += 2 {
		qp = append(qp, queryParam{params[i].(string), params[i+1]})
	}
	rows, err := queryAll[instanceRow](ctx, p.s, nil, instanceRowFields+extra, toParams(qp)...)
	if err != nil {
		return nil, err
	}
	out := rows[:0]
	for _, r := range rows {
		if !r.Pending && r.Deleting == "" {
			out = append(out, r)
		}
	}
	// Newest first, id as a tiebreak.
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt > out[j].CreatedAt
		}
		return out[i].InstanceID < out[j].InstanceID
	})
	return out, nil
}

func ids(rows []instanceRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.InstanceID
	}
	return out
}

// ListInstances implements durable.ProviderAdmin.
func (p *Store) ListInstances(ctx context.Context) ([]string, error) {
	rows, err := p.instanceRows(ctx, "")
	if err != nil {
		return nil, mapErr("list_instances", err)
	}
	return ids(rows), nil
}

// ListInstancesByStatus implements durable.ProviderAdmin.
func (p *Store) ListInstancesByStatus(ctx context.Context, status durable.Status) ([]string, error) {
	rows, err := p.instanceRows(ctx, " AND c.status = @s", "@s", string(status))
	if err != nil {
		return nil, mapErr("list_instances_by_status", err)
	}
	return ids(rows), nil
}

// ListInstancesFiltered implements durable.ProviderAdmin: the list's
// query with the filter's criteria added, on indexed paths (status,
// createdAt, orchestrationName), so it costs what the unfiltered list
// does at most. Bounds are rounded up to the millisecond createdAt keeps;
// the name is compared exactly (case-sensitive).
func (p *Store) ListInstancesFiltered(ctx context.Context, f durable.ListFilter) ([]string, error) {
	var (
		where  string
		params []any
	)
	if f.Status != "" {
		where += " AND c.status = @s"
		params = append(params, "@s", string(f.Status))
	}
	if f.Name != "" {
		where += " AND c.orchestrationName = @name"
		params = append(params, "@name", f.Name)
	}
	if !f.CreatedFrom.IsZero() {
		where += " AND c.createdAt >= @from"
		params = append(params, "@from", ceilMS(f.CreatedFrom))
	}
	if !f.CreatedTo.IsZero() {
		where += " AND c.createdAt < @to"
		params = append(params, "@to", ceilMS(f.CreatedTo))
	}
	rows, err := p.instanceRows(ctx, where, params...)
	if err != nil {
		return nil, mapErr("list_instances_filtered", err)
	}
	return ids(rows), nil
}

// ceilMS is t in Unix milliseconds, rounded up.
func ceilMS(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// ListExecutions implements durable.ProviderAdmin.
func (p *Store) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	const op = "list_executions"
	out := []uint64{}
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil || d == nil {
		return out, err
	}
	execs, err := queryAll[executionDoc](ctx, p.s, strp(instance), "SELECT c.executionId FROM c WHERE c.type = 'execution'")
	if err != nil {
		return nil, mapErr(op, err)
	}
	for _, e := range execs {
		out = append(out, e.ExecutionID)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// ReadHistoryWithExecutionID implements durable.ProviderAdmin.
func (p *Store) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]history.Event, error) {
	return p.ReadWithExecution(ctx, instance, executionID)
}

// ReadHistory implements durable.ProviderAdmin.
func (p *Store) ReadHistory(ctx context.Context, instance string) ([]history.Event, error) {
	return p.Read(ctx, instance)
}

func (p *Store) mustInstance(ctx context.Context, op, instance string) (*instanceDoc, error) {
	d, err := p.visibleInstance(ctx, op, instance)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, durable.Permanent(op, nil, "instance %q not found", instance)
	}
	return d, nil
}

// LatestExecutionID implements durable.ProviderAdmin.
func (p *Store) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	d, err := p.mustInstance(ctx, "latest_execution_id", instance)
	if err != nil {
		return 0, err
	}
	return d.CurrentExecutionID, nil
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// GetInstanceInfo implements durable.ProviderAdmin.
func (p *Store) GetInstanceInfo(ctx context.Context, instance string) (durable.InstanceInfo, error) {
	d, err := p.mustInstance(ctx, "get_instance_info", instance)
	if err != nil {
		return durable.InstanceInfo{}, err
	}
	info := durable.InstanceInfo{InstanceID: instance, OrchestrationName: d.OrchestrationName,
		OrchestrationVersion: d.OrchestrationVersion, CurrentExecutionID: d.CurrentExecutionID,
		Status: durable.Status(d.Status), CreatedAt: msTime(d.CreatedAt), UpdatedAt: msTime(d.UpdatedAt),
		ParentInstanceID: d.ParentInstanceID, CustomStatus: d.CustomStatus}
	if info.Status != durable.StatusRunning {
		info.Output = d.Output
	}
	return info, nil
}

// GetExecutionInfo implements durable.ProviderAdmin.
func (p *Store) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (durable.ExecutionInfo, error) {
	const op = "get_execution_info"
	if _, err := p.mustInstance(ctx, op, instance); err != nil {
		return durable.ExecutionInfo{}, err
	}
	var ex executionDoc
	found, err := p.s.read(ctx, instance, execDocID(executionID), &ex)
	if err != nil {
		return durable.ExecutionInfo{}, mapErr(op, err)
	}
	if !found {
		return durable.ExecutionInfo{}, durable.Permanent(op, nil, "execution %d of %q not found", executionID, instance)
	}
	info := durable.ExecutionInfo{ExecutionID: executionID, Status: durable.Status(ex.Status),
		StartedAt: msTime(ex.StartedAt), CompletedAt: msTime(ex.CompletedAt), EventCount: int(ex.EventCount)}
	if info.Status != durable.StatusRunning {
		info.Output = ex.Output
	}
	return info, nil
}

// GetSystemMetrics implements durable.ProviderAdmin.
func (p *Store) GetSystemMetrics(ctx context.Context) (durable.SystemMetrics, error) {
	const op = "get_system_metrics"
	rows, err := p.instanceRows(ctx, "")
	if err != nil {
		return durable.SystemMetrics{}, mapErr(op, err)
	}
	live := map[string]bool{}
	var m durable.SystemMetrics
	for _, r := range rows {
		live[r.InstanceID] = true
		m.TotalInstances++
		switch durable.Status(r.Status) {
		case durable.StatusRunning:
			m.RunningInstances++
		case durable.StatusCompleted:
			m.CompletedInstances++
		case durable.StatusFailed:
			m.FailedInstances++
		}
	}
	execs, err := queryAll[executionDoc](ctx, p.s, nil, "SELECT c.instanceId, c.eventCount FROM c WHERE c.type = 'execution'")
	if err != nil {
		return durable.SystemMetrics{}, mapErr(op, err)
	}
	for _, e := range execs {
		if live[e.InstanceID] {
			m.TotalExecutions++
			m.TotalEvents += e.EventCount
		}
	}
	return m, nil
}

// GetQueueDepths implements durable.ProviderAdmin.
func (p *Store) GetQueueDepths(ctx context.Context) (durable.QueueDepths, error) {
	rows, err := queryAll[queueDoc](ctx, p.s, nil,
		"SELECT c.type, c.visibleAt, c.lockedUntil FROM c WHERE c.type = 'orch_queue' OR c.type = 'worker_queue'")
	if err != nil {
		return durable.QueueDepths{}, mapErr("get_queue_depths", err)
	}
	now := nowMS()
	var q durable.QueueDepths
	for _, r := range rows {
		if r.LockedUntil > now {
			continue
		}
		switch {
		case r.Type == typeOrchQueue && r.VisibleAt <= now:
			q.OrchestratorQueue++
		case r.Type == typeOrchQueue:
			q.TimerQueue++
		case r.Type == typeWorkQueue && r.VisibleAt <= now:
			q.WorkerQueue++
		}
	}
	return q, nil
}

// ListChildren implements durable.ProviderAdmin.
func (p *Store) ListChildren(ctx context.Context, instance string) ([]string, error) {
	rows, err := p.instanceRows(ctx, " AND c.parentInstanceId = @p", "@p", instance)
	if err != nil {
		return nil, mapErr("list_children", err)
	}
	out := ids(rows)
	sort.Strings(out)
	return out, nil
}

// GetParentID implements durable.ProviderAdmin.
func (p *Store) GetParentID(ctx context.Context, instance string) (string, error) {
	d, err := p.mustInstance(ctx, "get_parent_id", instance)
	if err != nil {
		return "", err
	}
	return d.ParentInstanceID, nil
}

// GetInstanceTree implements durable.ProviderAdmin.
func (p *Store) GetInstanceTree(ctx context.Context, instance string) (durable.InstanceTree, error) {
	if _, err := p.mustInstance(ctx, "get_instance_tree", instance); err != nil {
		return durable.InstanceTree{}, err
	}
	return durable.CollectInstanceTree(ctx, p, instance)
}

// DeleteInstance implements durable.ProviderAdmin.
func (p *Store) DeleteInstance(ctx context.Context, instance string, force bool) (durable.DeleteInstanceResult, error) {
	return durable.DeleteInstanceTree(ctx, p, instance, force)
}

// filterInstances returns the visible instances matching the filter.
func (p *Store) filterInstances(ctx context.Context, f durable.InstanceFilter) ([]instanceRow, error) {
	rows, err := p.instanceRows(ctx, "")
	if err != nil {
		return nil, err
	}
	var want map[string]bool
	if f.InstanceIDs != nil {
		want = map[string]bool{}
		for _, id := range f.InstanceIDs {
			want[id] = true
		}
	}
	var out []instanceRow
	for _, r := range rows {
		if want != nil && !want[r.InstanceID] {
			continue
		}
		if !f.CompletedBefore.IsZero() {
			if !durable.Status(r.Status).IsTerminal() || r.CompletedAt == 0 || !msTime(r.CompletedAt).Before(f.CompletedBefore) {
				continue
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// DeleteInstanceBulk implements durable.ProviderAdmin.
func (p *Store) DeleteInstanceBulk(ctx context.Context, f durable.InstanceFilter) (durable.DeleteInstanceResult, error) {
	const op = "delete_instance_bulk"
	var total durable.DeleteInstanceResult
	rows, err := p.filterInstances(ctx, f)
	if err != nil {
		return total, mapErr(op, err)
	}
	done := 0
	for _, r := range rows {
		if f.Limit > 0 && done >= f.Limit {
			break
		}
		if r.ParentInstanceID != "" || !durable.Status(r.Status).IsTerminal() {
			continue
		}
		tree, err := durable.CollectInstanceTree(ctx, p, r.InstanceID)
		if err != nil {
			return total, err
		}
		res, err := p.DeleteInstancesAtomic(ctx, tree.AllIDs, false)
		if err != nil {
			if durable.IsRetryable(err) {
				return total, err
			}
			continue // a running descendant: skipped, not an error
		}
		total.Add(res)
		done++
	}
	return total, nil
}

// PruneExecutions implements durable.ProviderAdmin. The pruned executions'
// records go first, in one batch: without its record an execution's
// history is invisible, so readers never see a half-pruned execution; the
// history documents follow.
func (p *Store) PruneExecutions(ctx context.Context, instance string, o durable.PruneOptions) (durable.PruneResult, error) {
	const op = "prune_executions"
	var res durable.PruneResult
	d, err := p.mustInstance(ctx, op, instance)
	if err != nil {
		return res, err
	}
	execs, err := queryAll[executionDoc](ctx, p.s, strp(instance), "SELECT c.id, c.executionId, c.status, c.completedAt FROM c WHERE c.type = 'execution'")
	if err != nil {
		return res, mapErr(op, err)
	}
	sort.Slice(execs, func(i, j int) bool { return execs[i].ExecutionID > execs[j].ExecutionID })
	keep := o.KeepLast
	if keep < 1 {
		keep = 1
	}
	var prune []executionDoc
	for i, e := range execs {
		switch {
		case e.ExecutionID == d.CurrentExecutionID, e.Status == string(durable.StatusRunning), i < keep:
			continue
		case !o.CompletedBefore.IsZero() && (e.CompletedAt == 0 || !msTime(e.CompletedAt).Before(o.CompletedBefore)):
			continue
		}
		prune = append(prune, e)
	}
	res.InstancesProcessed = 1
	if len(prune) == 0 {
		return res, nil
	}
	var recs []batchOp
	for _, e := range prune {
		recs = append(recs, opDelete(e.ID))
	}
	for _, chunk := range planBatches(recs, maxBatchOps, maxBatchBytes) {
		if _, err := p.s.execBatch(ctx, instance, chunk, true); err != nil && !lostRace(err) {
			return res, mapErr(op, err)
		}
	}
	res.ExecutionsDeleted = uint64(len(prune))
	for _, e := range prune {
		n, err := p.deleteWhere(ctx, instance, "SELECT c.id FROM c WHERE c.type = 'history' AND c.executionId = @e", param("@e", e.ExecutionID))
		res.EventsDeleted += uint64(n)
		if err != nil {
			return res, mapErr(op, err)
		}
	}
	return res, nil
}

// PruneExecutionsBulk implements durable.ProviderAdmin.
func (p *Store) PruneExecutionsBulk(ctx context.Context, f durable.InstanceFilter, o durable.PruneOptions) (durable.PruneResult, error) {
	const op = "prune_executions_bulk"
	var total durable.PruneResult
	rows, err := p.filterInstances(ctx, f)
	if err != nil {
		return total, mapErr(op, err)
	}
	for i, r := range rows {
		if f.Limit > 0 && i >= f.Limit {
			break
		}
		res, err := p.PruneExecutions(ctx, r.InstanceID, o)
		if err != nil {
			return total, err
		}
		total.Add(res)
	}
	return total, nil
}
