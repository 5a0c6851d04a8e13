package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/outbox"
	"github.com/durafeed/durafeed/slots"
)

// This file holds the queries and documents dispatchers need to find
// work; none of them waits or signals.

// HeadQuery selects queue documents for QueueHeads.
type HeadQuery struct {
	// Blocks are the slots to read; nil reads no slot, and a single block
	// covering every slot reads them all.
	Blocks []slots.Block
	// Orchestrator and Worker select the queues read.
	Orchestrator, Worker bool
	// DueOnly keeps documents visible and unlocked now; Tags and
	// NoSessions then narrow worker items to those a fetch with these
	// settings may take.
	DueOnly    bool
	Tags       durable.TagFilter
	NoSessions bool
}

// QueueHeads runs one cross-partition query for the queue documents q
// selects, oldest enqueued first (so wakeups signalled from it keep FIFO
// order).
func (p *Store) QueueHeads(ctx context.Context, q HeadQuery) ([]QueueHead, error) {
	clause, params := blocksClause(q.Blocks)
	var types []string
	if q.Orchestrator {
		types = append(types, "c.type = 'orch_queue'")
	}
	if q.Worker {
		types = append(types, "c.type = 'worker_queue'")
	}
	if len(types) == 0 {
		return nil, nil
	}
	sql := "SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt FROM c WHERE (" +
		strings.Join(types, " OR ") + ") AND " + clause
	if q.DueOnly {
		sql += " AND c.visibleAt <= @now AND c.lockedUntil <= @now"
		params = append(params, param("@now", nowMS()))
		if q.Worker && !q.Orchestrator {
			tc, tp := tagClause(q.Tags)
			sql += tc
			params = append(params, tp...)
			if q.NoSessions {
				sql += " AND c.sessionId = ''"
			}
		}
	}
	rows, err := queryAll[QueueHead](ctx, p.s, nil, sql, params...)
	if err != nil {
		return nil, mapErr("fetch", err)
	}
	sortByEnqueued(rows)
	return rows, nil
}

func sortByEnqueued(rows []QueueHead) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].EnqueuedAt < rows[j].EnqueuedAt })
}

// blocksClause renders slot blocks as a query condition over
// c.dispatchSlot: one range per block.
func blocksClause(bs []slots.Block) (string, []azcosmos.QueryParameter) {
	if len(bs) == 0 {
		return "false", nil
	}
	if len(bs) == 1 && bs[0].All() {
		return "true", nil
	}
	parts := make([]string, 0, len(bs))
	params := make([]azcosmos.QueryParameter, 0, 2*len(bs))
	for i, b := range bs {
		n := itoa(i)
		parts = append(parts, "(c.dispatchSlot >= @lo"+n+" AND c.dispatchSlot <= @hi"+n+")")
		params = append(params, param("@lo"+n, b.First), param("@hi"+n, b.Last))
	}
	return "(" + strings.Join(parts, " OR ") + ")", params
}

// StaleQuery selects what a repair pass looks at.
type StaleQuery struct {
	// QueueBlocks are slots whose visible, unlocked queue documents are
	// returned too (the event-driven safety sweep re-signals them); nil
	// for none.
	QueueBlocks []slots.Block
}

// staleRow is one result of the repair query.
type staleRow struct {
	QueueHead
	TargetInstance string `json:"targetInstanceId"`
	Payload        string `json:"payload"`
	IdempotencyKey string `json:"idempotencyKey"`
	CreatedAt      int64  `json:"createdAt"`
}

// Stale runs the repair pass's one cross-partition query: outbox intents
// older than the repair age, instances whose publication is older than
// it or whose deletion mark is older than DeletionTimeout, and the queue
// documents q asks for (oldest enqueued first).
func (p *Store) Stale(ctx context.Context, q StaleQuery) ([]QueueHead, outbox.Findings, error) {
	now := nowMS()
	cut := now - durMS(p.opts.RepairAge)
	dcut := now - p.DeletionTimeout()
	params := []azcosmos.QueryParameter{param("@cut", cut), param("@dcut", dcut)}
	where := "(c.type = 'outbox_intent' AND c.createdAt <= @cut) OR " +
		"(c.type = 'instance' AND ((IS_DEFINED(c.publish) AND c.publish.at <= @cut) OR (IS_DEFINED(c.deleting) AND c.deletingAt <= @dcut)))"
	if q.QueueBlocks != nil {
		clause, cp := blocksClause(q.QueueBlocks)
		params = append(params, cp...)
		params = append(params, param("@now", now))
		where = "((c.type = 'orch_queue' OR c.type = 'worker_queue') AND c.visibleAt <= @now AND c.lockedUntil <= @now AND " + clause + ") OR " + where
	}
	rows, err := queryAll[staleRow](ctx, p.s, nil,
		"SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt, c.targetInstanceId, c.payload, c.idempotencyKey, c.createdAt FROM c WHERE "+where,
		params...)
	if err != nil {
		return nil, outbox.Findings{}, err
	}
	var heads []QueueHead
	var f outbox.Findings
	for _, r := range rows {
		switch r.Type {
		case typeOrchQueue, typeWorkQueue:
			heads = append(heads, r.QueueHead)
		case outbox.Type:
			f.Intents = append(f.Intents, outbox.Intent{ID: r.ID, InstanceID: r.InstanceID, Type: outbox.Type, TargetInstance: r.TargetInstance,
				Payload: r.Payload, IdempotencyKey: r.IdempotencyKey, CreatedAt: r.CreatedAt})
		case typeInstance:
			f.Instances = append(f.Instances, r.InstanceID)
		}
	}
	sortByEnqueued(heads)
	return heads, f, nil
}

// FinishInstance implements outbox.Finisher: it publishes a committed
// large turn, or purges an instance marked for deletion, when its record
// is older than the repair age (the deletion timeout for a mark).
func (p *Store) FinishInstance(ctx context.Context, instance string) error {
	d, err := p.readInstance(ctx, instance)
	if err != nil || d == nil {
		return err
	}
	now := nowMS()
	if d.Deleting != "" {
		if d.DeletingAt <= now-p.DeletionTimeout() {
			_, err := p.purge(ctx, instance, nil)
			return err
		}
		return nil
	}
	if d.Publish != nil && d.Publish.At <= now-durMS(p.opts.RepairAge) {
		return p.publish(ctx, instance, d.Publish, d.ETag)
	}
	return nil
}

// Create implements outbox.Store: a create that may be repeated, whose
// 409 is outbox.ErrExists.
func (p *Store) Create(ctx context.Context, partition string, doc json.RawMessage) error {
	err := p.s.create(ctx, partition, doc, true)
	if isStatus(err, http.StatusConflict) {
		return fmt.Errorf("%w: %w", outbox.ErrExists, err)
	}
	return err
}

// Delete implements outbox.Store; a missing document is not an error.
func (p *Store) Delete(ctx context.Context, partition, id string) error {
	_, err := p.s.remove(ctx, partition, id)
	return err
}

// WriteHint writes one of the event-driven engine's backlog-hint
// documents (one per replica, in the lease partition; the last write
// wins), retried like the store's own writes. The store does not read
// hints: the engine decodes them from the change feed.
func (p *Store) WriteHint(ctx context.Context, partition string, doc json.RawMessage) error {
	return p.s.upsert(ctx, partition, doc)
}

// Status returns the HTTP status code of a Cosmos DB error (0 for
// others), for dispatchers' logs and retry decisions.
func Status(err error) int { return statusOf(err) }

// Retryable reports whether err is worth retrying later: a transient
// status or no status at all (a transport failure).
func Retryable(err error) bool { s := statusOf(err); return s == 0 || retryableStatus(s) }

// LostRace reports a conditional write that lost to a concurrent writer
// (412, 409 or 404).
func LostRace(err error) bool { return lostRace(err) }

// FeedKind is what a changed document is to dispatch.
type FeedKind int

// The kinds of FeedDoc.
const (
	FeedOther        FeedKind = iota // nothing dispatch reacts to
	FeedOrchestrator                 // an orchestrator queue message
	FeedWorker                       // a worker queue item
	FeedInstance                     // an instance document
	FeedIntent                       // an outbox intent
)

// FeedKindOf reads the kind of a changed document from its type alone
// (the change-feed filter: history, KV, execution records and lease
// documents are FeedOther).
func FeedKindOf(raw []byte) FeedKind {
	var h struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return FeedOther
	}
	return kindOf(h.Type)
}

func kindOf(t string) FeedKind {
	switch t {
	case typeOrchQueue:
		return FeedOrchestrator
	case typeWorkQueue:
		return FeedWorker
	case typeInstance:
		return FeedInstance
	case outbox.Type:
		return FeedIntent
	}
	return FeedOther
}

// FeedDoc is what dispatch reads of a changed document.
type FeedDoc struct {
	Kind FeedKind
	// QueueHead is the document's queue head (its instance id for any
	// kind; an intent's is its source).
	QueueHead
	// LockHeld (instance documents) says a lock is held at the time given
	// to DecodeFeedDoc.
	LockHeld bool
	// Awaiting (instance documents whose lock is free) names the worker
	// documents whose activities the last committed turn's orchestration
	// awaits, every one (Commit.Awaiting); empty for none.
	Awaiting []string
	// UpdatedAt (instance documents) is when the version was written
	// (ms, the writer's clock).
	UpdatedAt int64
	// RepairAt (instance documents) is when a pending publication or
	// deletion becomes a repair's to finish (ms; 0 for none).
	RepairAt int64
	// Settles (orchestrator messages) is the id of the worker item, in the
	// same instance, whose ack created this completion: that item is gone
	// (the ack deleted it in the same batch). Empty when unknown.
	Settles string
	// Head (orchestrator messages) is the message as delivered, for a
	// lock from the feed (FromHeads); HasHead is false when the message
	// did not decode whole (it is then only signalled).
	Head    Head
	HasHead bool
	// Intent (outbox intents) is the intent as delivered.
	Intent outbox.Intent
}

// DecodeFeedDoc decodes a changed document for dispatch, at time now
// (ms): its type, then the document once, as its kind.
func (p *Store) DecodeFeedDoc(raw []byte, now int64) (FeedDoc, error) {
	f := FeedDoc{Kind: FeedKindOf(raw)}
	switch f.Kind {
	case FeedOrchestrator, FeedWorker:
		var q queueDoc
		if json.Unmarshal(raw, &q) == nil {
			f.QueueHead, f.Settles = q.head(), q.Settles
			if f.Kind == FeedOrchestrator {
				f.Head, f.HasHead = Head{doc: q}, true
			} else {
				f.Settles = ""
			}
			return f, nil
		}
		// A message the full decoding refuses (a field of another type,
		// written by another program): its head alone, so that a fetch
		// still looks at it.
		var h struct {
			QueueHead
			Settles string `json:"settles"`
		}
		if err := json.Unmarshal(raw, &h); err != nil {
			return FeedDoc{}, err
		}
		f.QueueHead = h.QueueHead
		if f.Kind == FeedOrchestrator {
			f.Settles = h.Settles
		}
		return f, nil
	case FeedIntent:
		if err := json.Unmarshal(raw, &f.Intent); err != nil {
			return FeedDoc{}, err
		}
		f.QueueHead = QueueHead{ID: f.Intent.ID, InstanceID: f.Intent.InstanceID, Type: f.Intent.Type}
		return f, nil
	}
	var d struct {
		QueueHead
		LockToken  string         `json:"lockToken"`
		Publish    *publishRecord `json:"publish"`
		Deleting   string         `json:"deleting"`
		DeletingAt int64          `json:"deletingAt"`
		Awaiting   []string       `json:"awaiting"`
		UpdatedAt  int64          `json:"updatedAt"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return FeedDoc{}, err
	}
	f.QueueHead = d.QueueHead
	if f.Kind == FeedInstance {
		f.LockHeld = d.LockToken != "" && d.LockedUntil > now
		f.UpdatedAt = d.UpdatedAt
		if d.LockToken == "" {
			f.Awaiting = d.Awaiting
		}
		switch {
		case d.Deleting != "":
			f.RepairAt = d.DeletingAt + p.DeletionTimeout()
		case d.Publish != nil:
			f.RepairAt = d.Publish.At + durMS(p.opts.RepairAge)
		}
	}
	return f, nil
}
