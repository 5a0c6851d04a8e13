package durable

import (
	"context"
	"time"

	"github.com/durafeed/durafeed/durable/history"
)

// ProviderAdmin is the management and observability capability of a
// provider, discovered through Provider.Admin. Methods follow the Provider
// error conventions. Lists are returned in a stable order (instances by
// creation time, newest first; executions ascending).
type ProviderAdmin interface {
	// ListInstances returns every instance id.
	ListInstances(ctx context.Context) ([]string, error)
	// ListInstancesByStatus returns the ids of instances whose current
	// execution has the status.
	ListInstancesByStatus(ctx context.Context, status Status) ([]string, error)
	// ListInstancesFiltered returns the ids of instances matching the
	// filter, in ListInstances' order. The zero ListFilter lists every
	// instance.
	ListInstancesFiltered(ctx context.Context, filter ListFilter) ([]string, error)
	// ListExecutions returns the instance's execution ids, ascending (empty
	// for an unknown instance).
	ListExecutions(ctx context.Context, instance string) ([]uint64, error)
	// ReadHistoryWithExecutionID returns one execution's history ordered by
	// EventID.
	ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]history.Event, error)
	// ReadHistory returns the current execution's history.
	ReadHistory(ctx context.Context, instance string) ([]history.Event, error)
	// LatestExecutionID returns the current execution id; a permanent error
	// for an unknown instance.
	LatestExecutionID(ctx context.Context, instance string) (uint64, error)
	// GetInstanceInfo describes an instance; a permanent error if unknown.
	GetInstanceInfo(ctx context.Context, instance string) (InstanceInfo, error)
	// GetExecutionInfo describes one execution; a permanent error if unknown.
	GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (ExecutionInfo, error)
	// GetSystemMetrics counts instances, executions and events.
	GetSystemMetrics(ctx context.Context) (SystemMetrics, error)
	// GetQueueDepths counts visible, unlocked queue messages.
	GetQueueDepths(ctx context.Context) (QueueDepths, error)
	// ListChildren returns the ids of the instance's direct
	// sub-orchestrations (empty if none or unknown).
	ListChildren(ctx context.Context, instance string) ([]string, error)
	// GetParentID returns the instance's parent id ("" for a root); a
	// permanent error for an unknown instance.
	GetParentID(ctx context.Context, instance string) (string, error)
	// GetInstanceTree returns the instance and all its descendants (see
	// CollectInstanceTree for a ready implementation).
	GetInstanceTree(ctx context.Context, instance string) (InstanceTree, error)
	// DeleteInstance deletes a root instance and all its descendants (see
	// DeleteInstanceTree). It fails permanently for a sub-orchestration
	// (delete its root instead), an unknown instance, or a running tree
	// without force. Force-deleting a running instance makes an in-flight
	// ack of it fail rather than recreate it.
	DeleteInstance(ctx context.Context, instance string, force bool) (DeleteInstanceResult, error)
	// DeleteInstancesAtomic deletes the given instances and everything they
	// own (history, executions, queue messages, sessions, key-value entries,
	// locks) so that no caller ever observes a partial deletion. Without
	// force, any running instance fails the whole call. Any child of a
	// listed instance that is not itself listed fails the whole call (a
	// child spawned after the tree was read would otherwise be orphaned).
	DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error)
	// DeleteInstanceBulk deletes terminal root instances matching the filter
	// (with their descendants); running instances and sub-orchestrations are
	// skipped, not errors.
	DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error)
	// PruneExecutions deletes old executions of one instance. It never
	// deletes the current execution or a running one, and is atomic per
	// instance. Key-value entries are instance-scoped and are not pruned.
	PruneExecutions(ctx context.Context, instance string, options PruneOptions) (PruneResult, error)
	// PruneExecutionsBulk applies PruneExecutions to every instance matching
	// the filter.
	PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, options PruneOptions) (PruneResult, error)
}

// InstanceInfo describes an instance.
type InstanceInfo struct {
	InstanceID           string
	OrchestrationName    string
	OrchestrationVersion string
	CurrentExecutionID   uint64
	// Status is the current execution's status.
	Status Status
	// Output is the terminal output or error; nil while running.
	Output    *string
	CreatedAt time.Time
	UpdatedAt time.Time
	// ParentInstanceID is "" for a root instance.
	ParentInstanceID string
	// CustomStatus is the instance's custom status (the one
	// Provider.GetCustomStatus returns); nil when cleared or never set.
	CustomStatus *string
}

// ListFilter selects instances for ListInstancesFiltered; criteria are
// ANDed and zero values select everything.
type ListFilter struct {
	// Status restricts to instances whose current execution has it.
	Status Status
	// CreatedFrom restricts to instances created at or after it, and
	// CreatedTo to those created before it (InstanceInfo.CreatedAt, at
	// the precision the provider keeps it: a bound between two of its
	// ticks selects as the next tick would).
	CreatedFrom, CreatedTo time.Time
	// Name restricts to instances whose orchestration name
	// (InstanceInfo.OrchestrationName) is exactly it: case-sensitive,
	// byte for byte, no prefix or pattern.
	Name string
}

// Matches reports whether an instance of the orchestration name, of
// status and created at createdAt passes f: the filter as a provider
// that keeps exact times applies it.
func (f ListFilter) Matches(name string, status Status, createdAt time.Time) bool {
	switch {
	case f.Name != "" && name != f.Name:
		return false
	case f.Status != "" && status != f.Status:
		return false
	case !f.CreatedFrom.IsZero() && createdAt.Before(f.CreatedFrom):
		return false
	case !f.CreatedTo.IsZero() && !createdAt.Before(f.CreatedTo):
		return false
	}
	return true
}

// ExecutionInfo describes one execution.
type ExecutionInfo struct {
	ExecutionID uint64
	Status      Status
	// Output is the terminal output, error or next input; nil while running.
	Output    *string
	StartedAt time.Time
	// CompletedAt is zero while running.
	CompletedAt time.Time
	EventCount  int
}

// SystemMetrics summarises the whole store.
type SystemMetrics struct {
	TotalInstances     uint64
	TotalExecutions    uint64
	RunningInstances   uint64
	CompletedInstances uint64
	FailedInstances    uint64
	TotalEvents        uint64
}

// QueueDepths counts visible, unlocked messages per queue. Timers are
// delayed orchestrator messages, so TimerQueue counts orchestrator messages
// not yet visible.
type QueueDepths struct {
	OrchestratorQueue int
	WorkerQueue       int
	TimerQueue        int
}

// InstanceFilter selects instances for bulk operations; criteria are ANDed.
type InstanceFilter struct {
	// InstanceIDs restricts to these ids; nil means all.
	InstanceIDs []string
	// CompletedBefore restricts to instances that reached a terminal status
	// before this time; zero means no restriction.
	CompletedBefore time.Time
	// Limit caps how many instances are processed; 0 means no cap.
	Limit int
}

// PruneOptions selects executions to prune; criteria are ANDed and the
// current execution is always kept.
type PruneOptions struct {
	// KeepLast keeps the N most recent executions (the current one
	// included); 0 and 1 both keep only the current one.
	KeepLast int
	// CompletedBefore prunes only executions completed before this time;
	// zero means no restriction.
	CompletedBefore time.Time
}

// DeleteInstanceResult counts what a deletion removed.
type DeleteInstanceResult struct {
	InstancesDeleted     uint64
	ExecutionsDeleted    uint64
	EventsDeleted        uint64
	QueueMessagesDeleted uint64
}

// Add accumulates o into r.
func (r *DeleteInstanceResult) Add(o DeleteInstanceResult) {
	r.InstancesDeleted += o.InstancesDeleted
	r.ExecutionsDeleted += o.ExecutionsDeleted
	r.EventsDeleted += o.EventsDeleted
	r.QueueMessagesDeleted += o.QueueMessagesDeleted
}

// PruneResult counts what pruning removed.
type PruneResult struct {
	InstancesProcessed uint64
	ExecutionsDeleted  uint64
	EventsDeleted      uint64
}

// Add accumulates o into r.
func (r *PruneResult) Add(o PruneResult) {
	r.InstancesProcessed += o.InstancesProcessed
	r.ExecutionsDeleted += o.ExecutionsDeleted
	r.EventsDeleted += o.EventsDeleted
}

// InstanceTree is an instance and all its descendants.
type InstanceTree struct {
	RootID string
	// AllIDs lists the root first, then descendants breadth-first.
	AllIDs []string
}

// IsRootOnly reports whether the instance has no descendants.
func (t InstanceTree) IsRootOnly() bool { return len(t.AllIDs) == 1 }

// Size is the number of instances in the tree.
func (t InstanceTree) Size() int { return len(t.AllIDs) }

// CollectInstanceTree builds an InstanceTree from ListChildren, breadth
// first. It is a ready implementation of ProviderAdmin.GetInstanceTree.
// A cycle in parent links (corrupt data) is reported as an error.
func CollectInstanceTree(ctx context.Context, a ProviderAdmin, root string) (InstanceTree, error) {
	tree := InstanceTree{RootID: root, AllIDs: []string{root}}
	seen := map[string]bool{root: true}
	for i := 0; i < len(tree.AllIDs); i++ {
		children, err := a.ListChildren(ctx, tree.AllIDs[i])
		if err != nil {
			return InstanceTree{}, err
		}
		for _, c := range children {
			if seen[c] {
				return InstanceTree{}, Permanent("get_instance_tree", nil, "instance %q appears twice under root %q", c, root)
			}
			seen[c] = true
			tree.AllIDs = append(tree.AllIDs, c)
		}
	}
	return tree, nil
}

// DeleteInstanceTree is a ready implementation of
// ProviderAdmin.DeleteInstance: it refuses sub-orchestrations, collects the
// tree and deletes it with DeleteInstancesAtomic.
func DeleteInstanceTree(ctx context.Context, a ProviderAdmin, instance string, force bool) (DeleteInstanceResult, error) {
	parent, err := a.GetParentID(ctx, instance)
	if err != nil {
		return DeleteInstanceResult{}, err
	}
	if parent != "" {
		return DeleteInstanceResult{}, Permanent("delete_instance", nil,
			"cannot delete sub-orchestration %q directly; delete its root instance instead", instance)
	}
	tree, err := a.GetInstanceTree(ctx, instance)
	if err != nil {
		return DeleteInstanceResult{}, err
	}
	return a.DeleteInstancesAtomic(ctx, tree.AllIDs, force)
}
