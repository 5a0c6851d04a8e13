// Package outbox delivers the effects a committed turn has on other
// instances: a turn cannot write another instance's partition in its own
// transactional batch, so it writes an intent (the document to create,
// and where) into its own partition with the commit, and the intent is
// delivered afterwards by creating the target document under a
// deterministic id and then deleting the intent. Delivery is idempotent: a
// create that finds the document already there (409) means an earlier
// delivery succeeded, so an intent delivered twice, by two replicas or
// after a crash between the two steps, creates one document. That holds
// after the target's turn has consumed the document too, because the
// Store keeps its id for a retention period (the Cosmos DB store leaves a
// tombstone, for its request retention, 24 h by default): a delivery
// later than that could create it again.
//
// Who delivers is the dispatcher's decision (package provider): at once
// after the commit by the committing process, or, in event-driven mode,
// by the owner of the source instance's slot as the intent appears on its
// change feed. A repair pass (Repair) delivers what both missed.
//
// The package does no I/O of its own: it writes through a Store, which
// the Cosmos DB store (package store) implements.
package outbox

import (
	"context"
	"encoding/json"
	"errors"

	"go.uber.org/zap"
)

// Type is the document type of an intent.
const Type = "outbox_intent"

// Intent is an outbox intent as stored in the source instance's
// partition: Payload is the JSON document to create in TargetInstance's
// partition. IdempotencyKey names the effect; the target document's id
// derives from it, so two deliveries of one intent write one document.
type Intent struct {
	ID             string `json:"id"`
	InstanceID     string `json:"instanceId"`
	Type           string `json:"type"`
	TargetInstance string `json:"targetInstanceId"`
	Payload        string `json:"payload"`
	IdempotencyKey string `json:"idempotencyKey"`
	CreatedAt      int64  `json:"createdAt"`
	// StagedBy and FinalType belong to a large turn's staging: such an
	// intent is invisible (type "staged") until the turn is published.
	StagedBy  string `json:"stagedBy,omitempty"`
	FinalType string `json:"finalType,omitempty"`
}

// ErrExists is what Store.Create returns when the document exists
// already (Cosmos DB's 409).
var ErrExists = errors.New("outbox: document exists")

// Store is the I/O delivery needs.
type Store interface {
	// Create creates doc in partition; it returns an error matching
	// ErrExists when a document with its id is there already, or was
	// consumed within the store's retention period. A create whose
	// outcome is unknown may be retried: a repeat is ErrExists.
	Create(ctx context.Context, partition string, doc json.RawMessage) error
	// Delete removes a document; a missing one is not an error.
	Delete(ctx context.Context, partition, id string) error
}

// Outbox delivers intents through a Store. It holds no state of its own
// (intents live in the container) and is safe for concurrent use. It
// calls nothing but its Store: what it delivered comes back to its
// caller as data (the target documents), for the caller to signal.
type Outbox struct {
	store Store
	log   *zap.Logger
}

// New returns an Outbox writing through s. log may be nil.
func New(s Store, log *zap.Logger) *Outbox {
	if log == nil {
		log = zap.NewNop()
	}
	return &Outbox{store: s, log: log}
}

// Deliver creates the intent's target document (once) and deletes the
// intent. target is the target document whenever it exists after the
// call (created now or by an earlier delivery), even when the intent's
// deletion then failed; an error leaves the intent for a later delivery.
func (o *Outbox) Deliver(ctx context.Context, in Intent) (target json.RawMessage, err error) {
	doc := json.RawMessage(in.Payload)
	if err := o.store.Create(ctx, in.TargetInstance, doc); err != nil && !errors.Is(err, ErrExists) {
		return nil, err
	}
	return doc, o.store.Delete(ctx, in.InstanceID, in.ID)
}

// DeliverAll delivers intents best-effort; a failure is logged and left
// to the repair pass. It returns the target documents that exist after
// it (Deliver's target) and how many intents were delivered.
func (o *Outbox) DeliverAll(ctx context.Context, intents []Intent) (targets []json.RawMessage, delivered int) {
	for _, in := range intents {
		target, err := o.Deliver(ctx, in)
		if target != nil {
			targets = append(targets, target)
		}
		if err != nil {
			if ctx.Err() == nil {
				o.log.Info("outbox intent left for the repair pass", zap.String("source", in.InstanceID),
					zap.String("target", in.TargetInstance), zap.Error(err))
			}
			continue
		}
		delivered++
	}
	return targets, delivered
}

// Finisher completes the other interrupted work a repair pass finds: a
// large turn's publication or a deletion whose writer stopped.
type Finisher interface {
	// FinishInstance publishes a committed large turn, or purges an
	// instance marked for deletion, when the record is older than the
	// store's repair age. Intents a publication releases are delivered
	// like any other: from the change feed, or by the next pass.
	FinishInstance(ctx context.Context, instance string) error
}

// Findings is what a repair query found: intents older than the repair
// age, and instances whose publication or deletion is older than it.
type Findings struct {
	Intents   []Intent
	Instances []string
}

// Repaired is what Repair did.
type Repaired struct {
	Delivered int // intents delivered
	Finished  int // instances whose publication or deletion was finished
	// Targets are the target documents of the intents, as DeliverAll's.
	Targets []json.RawMessage
}

// Repair is the repair pass both dispatchers run (the polling mode's
// reconciler and the event-driven engine's safety sweep), after their own
// query for f: it delivers f's intents and finishes f's instances through
// fin. Failures are logged and left for the next pass.
func (o *Outbox) Repair(ctx context.Context, f Findings, fin Finisher) Repaired {
	var r Repaired
	r.Targets, r.Delivered = o.DeliverAll(ctx, f.Intents)
	for _, inst := range f.Instances {
		if err := fin.FinishInstance(ctx, inst); err != nil {
			if ctx.Err() == nil {
				o.log.Warn("repair of an interrupted publication or deletion failed", zap.String("instance", inst), zap.Error(err))
			}
			continue
		}
		r.Finished++
	}
	return r
}
