package store

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"
)

// lockedByRow is what ReleaseLocksOf reads of a locked document.
type lockedByRow struct {
	QueueHead
	ETag string `json:"_etag"`
}

// ReleaseLocksOf frees every lock that holder (LockRequest.Owner) holds:
// orchestration locks (the instance document and the messages it locked)
// and worker-item locks, in every partition, by setting their expiry to
// now. Each write is conditional on the version read, so a lock the
// holder released, renewed or gave up meanwhile is left alone.
//
// It is safe only once the holder can no longer commit anything under
// those locks: every commit, renewal and abandon of a lock is conditional
// on the document version the lock wrote, which this write changes, so a
// holder judged dead wrongly fails its next write instead of committing
// (and an activity it was running may run again: at least once). The
// result lists what became visible again and the orchestration locks
// released, for dispatch to signal at once.
func (p *Store) ReleaseLocksOf(ctx context.Context, holder string) (Write, error) {
	const op = "release_locks"
	if holder == "" {
		return Write{}, nil
	}
	now := nowMS()
	var rows []lockedByRow
	err := p.s.query(ctx, nil,
		"SELECT c.id, c.instanceId, c.type, c.dispatchSlot, c.visibleAt, c.lockedUntil, c.enqueuedAt, c._etag FROM c WHERE c.lockOwner = @o AND c.lockedUntil > @now",
		[]azcosmos.QueryParameter{param("@o", holder), param("@now", now)},
		func(raw json.RawMessage) error {
			var r lockedByRow
			if err := json.Unmarshal(raw, &r); err != nil {
				return err
			}
			rows = append(rows, r)
			return nil
		})
	if err != nil {
		return Write{}, mapErr(op, err)
	}
	// Messages and worker items first, instance documents last: a fetch
	// that finds the instance free then finds its messages free too.
	var w Write
	release := func(r lockedByRow) (bool, error) {
		var pt azcosmos.PatchOperations
		pt.AppendSet("/lockedUntil", now)
		if _, err := p.s.patch(ctx, r.InstanceID, r.ID, pt, r.ETag, nil); err != nil {
			if isStatus(err, http.StatusPreconditionFailed) || isStatus(err, http.StatusNotFound) {
				return false, nil // changed meanwhile: not the dead holder's lock any more
			}
			return false, mapErr(op, err)
		}
		return true, nil
	}
	for _, r := range rows {
		if !IsQueue(r.Type) {
			continue
		}
		ok, err := release(r)
		if err != nil {
			return w, err
		}
		if ok {
			h := r.QueueHead
			h.LockedUntil = now
			w.Visible = append(w.Visible, h)
		}
	}
	for _, r := range rows {
		if r.Type != typeInstance {
			continue
		}
		ok, err := release(r)
		if err != nil {
			return w, err
		}
		if ok {
			w.Released = append(w.Released, Release{Instance: r.InstanceID, LockedUntil: now})
		}
	}
	p.log.Info("released the locks of a holder judged dead", zap.String("holder", holder),
		zap.Int("messages", len(w.Visible)), zap.Int("instances", len(w.Released)))
	return w, nil
}
