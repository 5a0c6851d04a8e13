package store

import (
	"context"
	"encoding/json"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
)

// DeleteInstancesAtomic implements durable.ProviderAdmin with the
// mark/check/purge protocol described in the package documentation.
func (p *Store) DeleteInstancesAtomic(ctx context.Context, idsIn []string, force bool) (durable.DeleteInstanceResult, error) {
	const op = "delete_instances_atomic"
	var res durable.DeleteInstanceResult
	set := map[string]bool{}
	var list []string
	for _, id := range idsIn {
		if !set[id] && id != "" && len(id) <= MaxInstanceIDBytes {
			set[id] = true
			list = append(list, id)
		}
	}
	docs := map[string]*instanceDoc{}
	for _, id := range list {
		d, err := p.readInstance(ctx, id)
		if err != nil {
			return res, mapErr(op, err)
		}
		if d == nil {
			continue
		}
		if !force && d.Deleting == "" && !d.Pending && d.Status == string(durable.StatusRunning) {
			return res, durable.Permanent(op, nil, "instance %q is running; use force to delete it", id)
		}
		docs[id] = d
	}

	// (a) Mark. Every instance document gets the deletion id, If-Match its
	// ETag: a held lock is thereby invalidated, so an in-flight ack fails.
	deletion := uuid.NewString()
	var marked []string
	wasVisible := map[string]bool{}
	for _, id := range list {
		d := docs[id]
		if d == nil {
			continue
		}
		if d.Deleting != "" {
			marked = append(marked, id) // an interrupted deletion: adopt it
			wasVisible[id] = !d.Pending
			continue
		}
		wasVisible[id] = !d.Pending
		if err := p.mark(ctx, id, d, deletion, force); err != nil {
			p.unmark(ctx, marked, deletion)
			return res, err
		}
		marked = append(marked, id)
	}

	// (b) Orphan check: a child created after the caller read the tree
	// would be left without its parent.
	if len(list) > 0 {
		children, err := queryAll[instanceRow](ctx, p.s, nil,
			"SELECT c.instanceId, c.pending, c.deleting FROM c WHERE c.type = 'instance' AND ARRAY_CONTAINS(@ids, c.parentInstanceId)",
			param("@ids", list))
		if err != nil {
			p.unmark(ctx, marked, deletion)
			return res, mapErr(op, err)
		}
		for _, c := range children {
			if !set[c.InstanceID] && !c.Pending {
				p.unmark(ctx, marked, deletion)
				return res, durable.Permanent(op, nil, "instance %q would be orphaned: its parent is being deleted but it is not in the deletion set", c.InstanceID)
			}
		}
	}

	// (c) Purge each partition, the instance document last.
	sessions := map[string]bool{}
	for _, id := range marked {
		r, err := p.purge(ctx, id, sessions)
		if !wasVisible[id] {
			r.InstancesDeleted = 0
		}
		res.Add(r)
		if err != nil {
			return res, mapErr(op, err)
		}
	}
	// Sessions that only the deleted instances' work used go with them.
	for sid := range sessions {
		if err := p.dropSessionIfUnused(ctx, sid); err != nil {
			return res, mapErr(op, err)
		}
	}
	return res, nil
}

// dropSessionIfUnused deletes a session no worker-queue item references.
func (p *Store) dropSessionIfUnused(ctx context.Context, sid string) error {
	type row struct {
		ID string `json:"id"`
	}
	used, err := queryAll[row](ctx, p.s, nil, "SELECT c.id FROM c WHERE c.type = 'worker_queue' AND c.sessionId = @s", param("@s", sid))
	if err != nil || len(used) > 0 {
		return err
	}
	_, err = p.s.remove(ctx, sessionPartition(sid), sessionDocID(sid))
	return err
}

// mark sets the deletion id on an instance document, retrying lost races.
func (p *Store) mark(ctx context.Context, id string, d *instanceDoc, deletion string, force bool) error {
	const op = "delete_instances_atomic"
	for attempt := 0; ; attempt++ {
		var pt azcosmos.PatchOperations
		pt.AppendSet("/deleting", deletion)
		pt.AppendSet("/deletingAt", nowMS())
		_, err := p.s.patch(ctx, id, idInstance, pt, d.ETag, nil)
		if err == nil {
			return nil
		}
		if !lostRace(err) || attempt >= 3 {
			return mapErr(op, err)
		}
		nd, rerr := p.readInstance(ctx, id)
		if rerr != nil {
			return mapErr(op, rerr)
		}
		if nd == nil {
			return durable.Retryable(op, nil, "instance %q vanished during deletion", id)
		}
		if !force && !nd.Pending && nd.Status == string(durable.StatusRunning) {
			return durable.Permanent(op, nil, "instance %q is running; use force to delete it", id)
		}
		d = nd
	}
}

// unmark removes this deletion's mark (best effort: a leftover mark is
// finished by the sweep, which is also a valid outcome of a deletion that
// failed after marking).
func (p *Store) unmark(ctx context.Context, ids []string, deletion string) {
	for _, id := range ids {
		var pt azcosmos.PatchOperations
		pt.AppendRemove("/deleting")
		pt.AppendRemove("/deletingAt")
		pt.SetCondition("FROM c WHERE c.deleting = '" + sqlQuote(deletion) + "'")
		if _, err := p.s.patch(ctx, id, idInstance, pt, "", nil); err != nil && !lostRace(err) {
			p.log.Warn("deletion mark not removed", zap.String("instance", id), zap.Error(err))
		}
	}
}

// purge deletes every document of a marked instance's partition, in
// batches, the instance document last, and counts what it deleted.
func (p *Store) purge(ctx context.Context, instance string, sessions map[string]bool) (durable.DeleteInstanceResult, error) {
	var res durable.DeleteInstanceResult
	type row struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		SessionID string `json:"sessionId"`
	}
	var rows []row
	err := p.s.query(ctx, strp(instance), "SELECT c.id, c.type, c.sessionId FROM c", nil, func(raw json.RawMessage) error {
		var r row
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return res, err
	}
	var ops []batchOp
	var kinds []string
	hasInstance := false
	for _, r := range rows {
		if r.ID == idInstance {
			hasInstance = true
			continue
		}
		ops = append(ops, opDelete(r.ID))
		kinds = append(kinds, r.Type)
		if r.Type == typeWorkQueue && r.SessionID != "" && sessions != nil {
			sessions[r.SessionID] = true
		}
	}
	count := func(kind string) {
		switch kind {
		case typeExecution:
			res.ExecutionsDeleted++
		case typeHistory:
			res.EventsDeleted++
		case typeOrchQueue, typeWorkQueue:
			res.QueueMessagesDeleted++
		}
	}
	i := 0
	for _, chunk := range planBatches(ops, maxBatchOps, maxBatchBytes) {
		if _, err := p.s.execBatch(ctx, instance, chunk, true); err != nil {
			if !lostRace(err) {
				return res, err
			}
			// Something in the chunk is already gone: delete one by one.
			for j, o := range chunk {
				found, err := p.s.remove(ctx, instance, o.id)
				if err != nil {
					return res, err
				}
				if found {
					count(kinds[i+j])
				}
			}
		} else {
			for j := range chunk {
				count(kinds[i+j])
			}
		}
		i += len(chunk)
	}
	if hasInstance {
		found, err := p.s.remove(ctx, instance, idInstance)
		if err != nil {
			return res, err
		}
		if found {
			res.InstancesDeleted++
		}
	}
	return res, nil
}

// deleteWhere deletes the documents a single-partition id query returns.
func (p *Store) deleteWhere(ctx context.Context, instance, sql string, params ...azcosmos.QueryParameter) (int, error) {
	type row struct {
		ID string `json:"id"`
	}
	rows, err := queryAll[row](ctx, p.s, strp(instance), sql, params...)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rows {
		found, err := p.s.remove(ctx, instance, r.ID)
		if err != nil {
			return n, err
		}
		if found {
			n++
		}
	}
	return n, nil
}

// DeletionTimeout is how long (ms) a deletion mark must be old before a
// repair pass treats its deletion as abandoned and purges on its behalf:
// ten times the repair age, at least 30 s.
func (p *Store) DeletionTimeout() int64 {
	t := 10 * durMS(p.opts.RepairAge)
	if t < 30_000 {
		t = 30_000
	}
	return t
}
