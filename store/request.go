package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
)

// typeRequest is the type of a request record.
const typeRequest = "request"

// requestDoc records one client call by its request id, in the target
// instance's partition: it is created in the same transactional batch as
// the call's queue message, so a resend of the call (the store's own after
// a lost answer, or the caller's) fails that batch with 409 and is
// recognised as done. It outlives the message (a turn deletes the message,
// never the record) and expires after Options.RequestRetention through the
// container's time to live.
type requestDoc struct {
	ID         string `json:"id"`
	InstanceID string `json:"instanceId"`
	Type       string `json:"type"`
	// RequestID is the caller's id (the document id may be its hash).
	RequestID string `json:"requestId"`
	// Kind and Digest identify the call: the work item's kind and the
	// SHA-256 of its encoding. The same request id with another digest is
	// another call.
	Kind   string `json:"kind"`
	Digest string `json:"digest"`
	// Message is the id of the queue message the call created.
	Message   string `json:"message"`
	CreatedAt int64  `json:"createdAt"`
	// TTL is the record's time to live in seconds (the service deletes it
	// that long after its last write when the container has TTL on).
	TTL int64 `json:"ttl"`
}

func requestDocID(rid string) string { return userID("req", rid) }

// ttlSeconds converts a retention to the whole seconds of a Cosmos DB ttl
// (at least 1, at most what the field holds).
func ttlSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	switch {
	case s < 1:
		return 1
	case s > math.MaxInt32:
		return math.MaxInt32
	}
	return s
}

// enqueueOnce creates a client call's queue message together with its
// request record, so the call takes effect at most once per request id.
// Both are created in one batch: a resend after a lost answer (or the
// caller's own retry) finds the record and returns done without a second
// message. The same request id with a different call is a permanent
// error. dup reports that the call had taken effect already (nothing was
// written now).
func (p *Store) enqueueOnce(ctx context.Context, op, rid, kind string, d queueDoc) (dup bool, etag string, err error) {
	rec := p.requestRecord(rid, kind, d)
	// Safe to resend: the record's fixed id turns a second landing into 409.
	res, err := p.s.execBatch(ctx, d.InstanceID, []batchOp{opCreate(rec), opCreate(d)}, true)
	if err == nil && len(res.etags) == 2 {
		etag = res.etags[1]
	}
	var be *batchError
	if err == nil || !errors.As(err, &be) || be.status != http.StatusConflict || be.index != 0 {
		return false, etag, mapErr(op, err)
	}
	var got requestDoc
	found, rerr := p.s.read(ctx, d.InstanceID, rec.ID, &got)
	switch {
	case rerr != nil:
		return false, "", mapErr(op, rerr)
	case !found:
		// Expired or deleted between the batch and the read: the caller
		// may try again and create it.
		return false, "", durable.Retryable(op, err, "request record vanished while checking a resend")
	case got.Kind != rec.Kind || got.Digest != rec.Digest:
		return false, "", durable.Permanent(op, durable.ErrRequestReused, "request id was already used for a different %s call on this instance", got.Kind)
	}
	p.log.Info("a resent call had taken effect already", zap.String("op", op), zap.String("instance", d.InstanceID))
	return true, "", nil
}

// requestRecord is the record of the call with request id rid, of kind,
// that enqueues d.
func (p *Store) requestRecord(rid, kind string, d queueDoc) requestDoc {
	return requestDoc{ID: requestDocID(rid), InstanceID: d.InstanceID, Type: typeRequest, RequestID: rid,
		Kind: kind, Digest: callDigest(d.WorkItem), Message: d.ID, CreatedAt: nowMS(),
		TTL: ttlSeconds(p.opts.RequestRetention)}
}

// callDigest is a request record's digest of a call's encoded work item.
func callDigest(workItem string) string {
	sum := sha256.Sum256([]byte(callEncoding(workItem)))
	return hex.EncodeToString(sum[:])
}

// CheckRequest implements durable.RequestChecker: one point read of the
// request record in the target instance's partition.
func (p *Store) CheckRequest(ctx context.Context, item durable.WorkItem) (durable.RequestState, error) {
	const op = "check_request"
	rid := durable.RequestIDOf(item)
	if rid == "" {
		return durable.RequestUnknown, nil
	}
	inst := item.TargetInstance()
	if err := checkInstanceID(op, inst); err != nil {
		return durable.RequestUnknown, err
	}
	b, err := durable.MarshalWorkItem(item)
	if err != nil {
		return durable.RequestUnknown, durable.Permanent(op, err, "encode work item")
	}
	var got requestDoc
	found, err := p.s.read(ctx, inst, requestDocID(rid), &got)
	switch {
	case err != nil:
		return durable.RequestUnknown, mapErr(op, err)
	case !found:
		return durable.RequestUnknown, nil
	case got.Kind != item.Kind() || got.Digest != callDigest(string(b)):
		return durable.RequestDifferent, nil
	}
	return durable.RequestSame, nil
}

// callEncoding is the encoding a request record's digest covers: the work
// item without its trace context (durable.WithoutTraceParent), so that a
// resend from another span is the same call.
func callEncoding(workItem string) string {
	w, err := durable.UnmarshalWorkItem([]byte(workItem))
	if err != nil {
		return workItem
	}
	b, err := durable.MarshalWorkItem(durable.WithoutTraceParent(w))
	if err != nil {
		return workItem
	}
	return string(b)
}
