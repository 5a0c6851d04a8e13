package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// outbox delivers intents: documents that a committed turn must create in
// another instance's partition. Delivery creates the target document under
// a deterministic id (409 means an earlier delivery succeeded) and then
// deletes the intent. It is its own type because the event-driven mode
// moves delivery onto the change feed.
type outbox struct {
	s   *store
	log *zap.Logger
	// delivered, when set, is told of every target document that exists
	// after a delivery (created now or earlier).
	delivered func(target queueDoc)
}

// deliverAll delivers intents best-effort; failures are left to the
// reconciler.
func (o *outbox) deliverAll(ctx context.Context, intents []intentDoc) {
	for _, in := range intents {
		if err := o.deliver(ctx, in); err != nil {
			o.log.Info("outbox intent left for the reconciler", zap.String("source", in.InstanceID),
				zap.String("target", in.TargetInstance), zap.Int("status", statusOf(err)))
		}
	}
}

// deliver creates the target document (once) and deletes the intent.
func (o *outbox) deliver(ctx context.Context, in intentDoc) error {
	var target json.RawMessage = json.RawMessage(in.Payload)
	err := o.s.create(ctx, in.TargetInstance, target, true)
	if err != nil && !isStatus(err, http.StatusConflict) {
		return err
	}
	if o.delivered != nil {
		var q queueDoc
		if json.Unmarshal(target, &q) == nil {
			o.delivered(q)
		}
	}
	_, err = o.s.remove(ctx, in.InstanceID, in.ID)
	return err
}

// pendingIntents lists intents created before cutoff, across partitions.
func (o *outbox) pendingIntents(ctx context.Context, cutoff int64) ([]intentDoc, error) {
	return queryAll[intentDoc](ctx, o.s, nil,
		"SELECT * FROM c WHERE c.type = 'outbox_intent' AND c.createdAt <= @cut", param("@cut", cutoff))
}

// reconcileLoop runs the slow paths every ReconcileInterval until ctx ends.
func (p *Provider) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.reconcileOnce(ctx)
	}
}

// reconcileOnce delivers stale outbox intents, publishes large turns whose
// publication was interrupted, and finishes interrupted deletions.
func (p *Provider) reconcileOnce(ctx context.Context) {
	cutoff := nowMS() - durMS(p.cfg.ReconcileAge)
	intents, err := p.outbox.pendingIntents(ctx, cutoff)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("outbox sweep failed", zap.Int("status", statusOf(err)), zap.Error(err))
		}
		return
	}
	p.outbox.deliverAll(ctx, intents)

	type row struct {
		InstanceID string `json:"instanceId"`
	}
	rows, err := queryAll[row](ctx, p.s, nil,
		"SELECT c.instanceId FROM c WHERE c.type = 'instance' AND IS_DEFINED(c.publish) AND c.publish.at <= @cut", param("@cut", cutoff))
	if err == nil {
		for _, r := range rows {
			d, err := p.readInstance(ctx, r.InstanceID)
			if err != nil || d == nil || d.Publish == nil {
				continue
			}
			if err := p.publish(ctx, d.InstanceID, d.Publish, d.ETag); err != nil {
				p.log.Warn("publication sweep failed", zap.String("instance", d.InstanceID), zap.Error(err))
				continue
			}
		}
	}
	p.sweepDeletions(ctx, cutoff)
}
