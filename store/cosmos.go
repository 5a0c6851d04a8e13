package store

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// store is a thin layer over the container client: every call is retried
// per retryPolicy where that is safe, and 404 on reads is "not found", not
// an error (unless the container itself is missing: ownerMissing).
type client struct {
	c     *azcosmos.ContainerClient
	retry retryPolicy
}

func pk(instance string) azcosmos.PartitionKey { return azcosmos.NewPartitionKeyString(instance) }

func etagPtr(s string) *azcore.ETag {
	e := azcore.ETag(s)
	return &e
}

// read point-reads a document into out; found is false on 404.
func (s *client) read(ctx context.Context, partition, id string, out any) (found bool, err error) {
	found, _, _, err = s.readSession(ctx, partition, id, out)
	return found, err
}

// readSession is read, also returning the answer's session token and the
// size of the document as encoded.
func (s *client) readSession(ctx context.Context, partition, id string, out any) (found bool, session string, size int, err error) {
	err = s.retry.do(ctx, true, func() error {
		resp, err := s.c.ReadItem(ctx, pk(partition), id, nil)
		if err != nil {
			return err
		}
		session, size = "", len(resp.Value)
		if resp.SessionToken != nil {
			session = *resp.SessionToken
		}
		return json.Unmarshal(resp.Value, out)
	})
	if itemMissing(err) {
		return false, "", 0, nil
	}
	return err == nil, session, size, err
}

// create creates a document; safe says whether a retry after an unknown
// outcome is harmless (deterministic ids turn a duplicate into 409).
func (s *client) create(ctx context.Context, partition string, doc any, safe bool) error {
	_, err := s.createETag(ctx, partition, doc, safe)
	return err
}

// createETag is create, returning the created document's ETag.
func (s *client) createETag(ctx context.Context, partition string, doc any, safe bool) (string, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	var etag string
	err = s.retry.do(ctx, safe, func() error {
		resp, err := s.c.CreateItem(ctx, pk(partition), b, nil)
		if err == nil {
			etag = string(resp.ETag)
		}
		return err
	})
	return etag, err
}

// upsert writes a document whatever is there; repeating it is harmless,
// so a write whose outcome is unknown is retried.
func (s *client) upsert(ctx context.Context, partition string, doc []byte) error {
	return s.retry.do(ctx, true, func() error {
		_, err := s.c.UpsertItem(ctx, pk(partition), doc, nil)
		return err
	})
}

// replace replaces a document if its ETag still matches; it returns the new
// ETag. A 412 is returned as is (the caller lost a race).
func (s *client) replace(ctx context.Context, partition, id string, doc any, ifMatch string) (string, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	var etag string
	err = s.retry.do(ctx, false, func() error {
		resp, err := s.c.ReplaceItem(ctx, pk(partition), id, b, &azcosmos.ItemOptions{IfMatchEtag: etagPtr(ifMatch)})
		if err != nil {
			return err
		}
		etag = string(resp.ETag)
		return nil
	})
	return etag, err
}

// patch applies patch operations, conditionally on ifMatch when not empty,
// and decodes the resulting document into out when out is not nil.
func (s *client) patch(ctx context.Context, partition, id string, ops azcosmos.PatchOperations, ifMatch string, out any) (string, error) {
	opts := &azcosmos.ItemOptions{EnableContentResponseOnWrite: out != nil}
	if ifMatch != "" {
		opts.IfMatchEtag = etagPtr(ifMatch)
	}
	var etag string
	err := s.retry.do(ctx, false, func() error {
		resp, err := s.c.PatchItem(ctx, pk(partition), id, ops, opts)
		if err != nil {
			return err
		}
		etag = string(resp.ETag)
		if out != nil {
			return json.Unmarshal(resp.Value, out)
		}
		return nil
	})
	return etag, err
}

// remove deletes a document; a missing document is not an error.
func (s *client) remove(ctx context.Context, partition, id string) (bool, error) {
	err := s.retry.do(ctx, true, func() error {
		_, err := s.c.DeleteItem(ctx, pk(partition), id, nil)
		return err
	})
	if itemMissing(err) {
		return false, nil
	}
	return err == nil, err
}

// query runs a query, within one partition when partition is not nil,
// across partitions otherwise, and hands every result to each.
func (s *client) query(ctx context.Context, partition *string, sql string, params []azcosmos.QueryParameter, each func(json.RawMessage) error) error {
	_, err := s.querySession(ctx, partition, "", sql, params, each)
	return err
}

// querySession is query carrying a session token (when not empty), so that
// on an account with session consistency it reads at least what the write
// that returned the token left. It returns the session token of the last
// page.
func (s *client) querySession(ctx context.Context, partition *string, session, sql string, params []azcosmos.QueryParameter, each func(json.RawMessage) error) (string, error) {
	key := azcosmos.NewPartitionKey()
	if partition != nil {
		key = pk(*partition)
	}
	// Every page is read: let the service size them (up to its 4 MB
	// response bound) rather than at 100 items, so a queue-wide read is a
	// few round trips and page charges instead of one per 100 rows.
	opts := &azcosmos.QueryOptions{QueryParameters: params, PageSizeHint: -1}
	if session != "" {
		opts.SessionToken = &session
	}
	pager := s.c.NewQueryItemsPager(sql, key, opts)
	var last string
	for pager.More() {
		var page azcosmos.QueryItemsResponse
		err := s.retry.do(ctx, true, func() error {
			var err error
			page, err = pager.NextPage(ctx)
			return err
		})
		if err != nil {
			return "", err
		}
		if page.RawResponse != nil {
			if t := page.RawResponse.Header.Get("x-ms-session-token"); t != "" {
				last = t
			}
		}
		for _, it := range page.Items {
			if err := each(it); err != nil {
				return "", err
			}
		}
	}
	return last, nil
}

// queryAll decodes every result of a query into a slice.
func queryAll[T any](ctx context.Context, s *client, partition *string, sql string, params ...azcosmos.QueryParameter) ([]T, error) {
	var out []T
	err := s.query(ctx, partition, sql, params, func(raw json.RawMessage) error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

func param(name string, v any) azcosmos.QueryParameter {
	return azcosmos.QueryParameter{Name: name, Value: v}
}

func strp(s string) *string { return &s }

// batchOp is one operation of a transactional batch, kept in a form the
// planner can size before it is handed to the SDK.
type batchOp struct {
	kind    string // create, upsert, replace, delete, patch, read
	id      string
	body    []byte
	patch   *azcosmos.PatchOperations
	ifMatch string
}

// size is a conservative estimate of the operation's share of the request.
func (o batchOp) size() int {
	n := 128 + len(o.id) + len(o.body)
	if o.patch != nil {
		if b, err := json.Marshal(o.patch); err == nil {
			n += len(b)
		}
	}
	return n
}

func opCreate(doc any) batchOp   { return mustOp("create", doc) }
func opUpsert(doc any) batchOp   { return mustOp("upsert", doc) }
func opDelete(id string) batchOp { return batchOp{kind: "delete", id: id} }
func opRead(id string) batchOp   { return batchOp{kind: "read", id: id} }
func opReplace(id string, doc any, ifMatch string) batchOp {
	o := mustOp("replace", doc)
	o.id, o.ifMatch = id, ifMatch
	return o
}
func opPatch(id string, p azcosmos.PatchOperations, ifMatch string) batchOp {
	return batchOp{kind: "patch", id: id, patch: &p, ifMatch: ifMatch}
}

func mustOp(kind string, doc any) batchOp {
	b, err := json.Marshal(doc)
	if err != nil {
		panic("provider: document does not encode: " + err.Error()) // our own types always encode
	}
	return batchOp{kind: kind, body: b}
}

// batchResult is a committed batch's per-operation ETags and its session
// token.
type batchResult struct {
	etags   []string
	session string
	// bodies holds the documents read operations returned (nil for the
	// other operations).
	bodies [][]byte
}

// execBatch runs ops as one transactional batch in the partition. When the
// service rejects it, the error is a *batchError naming the first failing
// operation and its status. safe says whether a retry after an unknown
// outcome is harmless.
func (s *client) execBatch(ctx context.Context, partition string, ops []batchOp, safe bool) (batchResult, error) {
	if len(ops) == 0 {
		return batchResult{}, nil
	}
	b := s.c.NewTransactionalBatch(pk(partition))
	for _, o := range ops {
		var io *azcosmos.TransactionalBatchItemOptions
		if o.ifMatch != "" {
			io = &azcosmos.TransactionalBatchItemOptions{IfMatchETag: etagPtr(o.ifMatch)}
		}
		switch o.kind {
		case "create":
			b.CreateItem(o.body, io)
		case "upsert":
			b.UpsertItem(o.body, io)
		case "replace":
			b.ReplaceItem(o.id, o.body, io)
		case "delete":
			b.DeleteItem(o.id, io)
		case "patch":
			b.PatchItem(o.id, *o.patch, io)
		case "read":
			b.ReadItem(o.id, io)
		default:
			return batchResult{}, errors.New("provider: unknown batch operation " + o.kind)
		}
	}
	var res batchResult
	err := s.retry.do(ctx, safe, func() error {
		resp, err := s.c.ExecuteTransactionalBatch(ctx, b, nil)
		if err != nil {
			return err
		}
		if !resp.Success {
			for i, r := range resp.OperationResults {
				if r.StatusCode != http.StatusFailedDependency {
					return &batchError{status: int(r.StatusCode), index: i}
				}
			}
			return &batchError{status: http.StatusFailedDependency, index: -1}
		}
		res.session = resp.SessionToken
		res.etags = make([]string, len(resp.OperationResults))
		res.bodies = make([][]byte, len(resp.OperationResults))
		for i, r := range resp.OperationResults {
			res.etags[i] = string(r.ETag)
			if i < len(ops) && ops[i].kind == "read" {
				res.bodies[i] = r.ResourceBody
			}
		}
		return nil
	})
	return res, err
}

// Batch limits of the service.
const (
	maxBatchOps   = 100
	maxBatchBytes = 1800 * 1024 // below the 2 MB request limit, with room for framing
)

// planBatches splits ops into consecutive batches of at most maxOps
// operations and maxBytes estimated bytes each, keeping order. An operation
// that alone exceeds maxBytes gets a batch of its own (the service will
// refuse it with 413).
func planBatches(ops []batchOp, maxOps, maxBytes int) [][]batchOp {
	var out [][]batchOp
	var cur []batchOp
	size := 0
	for _, o := range ops {
		n := o.size()
		if len(cur) > 0 && (len(cur) >= maxOps || size+n > maxBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, o)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// fitsOneBatch reports whether ops fit one batch.
func fitsOneBatch(ops []batchOp) bool {
	if len(ops) > maxBatchOps {
		return false
	}
	n := 0
	for _, o := range ops {
		n += o.size()
	}
	return n <= maxBatchBytes
}

type queryParam struct {
	name  string
	value any
}

func toParams(qp []queryParam) []azcosmos.QueryParameter {
	out := make([]azcosmos.QueryParameter, len(qp))
	for i, q := range qp {
		out[i] = param(q.name, q.value)
	}
	return out
}
