package cosmosemu

import (
	"context"
	"net/http"
)

// OperationType names what a request does, in the service's vocabulary.
type OperationType string

// Operation types seen by middleware.
const (
	OpRead     OperationType = "Read"
	OpReadFeed OperationType = "ReadFeed"
	OpCreate   OperationType = "Create"
	OpUpsert   OperationType = "Upsert"
	OpReplace  OperationType = "Replace"
	OpDelete   OperationType = "Delete"
	OpPatch    OperationType = "Patch"
	OpQuery    OperationType = "Query"
	OpBatch    OperationType = "Batch"
	// OpQueryPlan is a gateway query-plan request (POST to a container's
	// docs with x-ms-cosmos-is-query-plan-request: True), answered with the
	// query's PartitionedQueryExecutionInfo and touching no document.
	OpQueryPlan  OperationType = "QueryPlan"
	OpChangeFeed OperationType = "ChangeFeed"
)

// ResourceType names the kind of resource a request addresses, as the path
// segment the service uses for it ("" is the database account).
type ResourceType string

// Resource types seen by middleware.
const (
	ResourceAccount           ResourceType = ""
	ResourceDatabase          ResourceType = "dbs"
	ResourceContainer         ResourceType = "colls"
	ResourceDocument          ResourceType = "docs"
	ResourceOffer             ResourceType = "offers"
	ResourcePartitionKeyRange ResourceType = "pkranges"
)

// Request is one authenticated, routed request as middleware sees it. Fields
// are read-only for middleware.
type Request struct {
	// Operation is what the request does.
	Operation OperationType
	// ResourceType is the kind of resource addressed.
	ResourceType ResourceType
	// ResourceLink is the name-based link the request was signed for, e.g.
	// "dbs/db1/colls/c1/docs/item1" (feeds use the parent's link).
	ResourceLink string
	// Database and Container are the ids in the path, when present.
	Database, Container string
	// PartitionKeyRangeIDs are the physical partition key ranges the request
	// touches as routed (document operations only; empty when not applicable
	// or when the container does not exist). A split racing the request may
	// move it to a child range, or fail it with 410/1002 if it named the
	// range.
	PartitionKeyRangeIDs []string
	// ActivityID is the x-ms-activity-id answered to the client.
	ActivityID string
	// HTTP is the underlying request; its body has already been read.
	HTTP *http.Request

	body []byte
	path []string
	tgt  *target
}

// Response is the answer a handler produced; middleware may inspect or
// replace it.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// SubStatus is sent as x-ms-substatus when non-zero.
	SubStatus int
	// Header holds the response headers (without the common ones the server
	// adds: activity id, request charge, versions, date).
	Header http.Header
	// Body is the response payload (may be nil).
	Body []byte
	// RequestCharge is sent as x-ms-request-charge.
	RequestCharge float64
}

// Handler serves one routed request.
type Handler func(ctx context.Context, req *Request) *Response

// Middleware wraps a Handler. It must call next at most once, or answer by
// itself (e.g. an injected 429), and must not retain req after returning.
type Middleware func(next Handler) Handler

// ErrorResponse builds a service-shaped error answer (status, sub-status and
// {"code","message"} body) for middleware that injects faults.
func ErrorResponse(req *Request, status, subStatus int, message string) *Response {
	e := newErrSub(status, subStatus, message)
	return errResponse(req, e)
}

func errResponse(req *Request, e *apiError) *Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	act := ""
	if req != nil {
		act = req.ActivityID
	}
	return &Response{Status: e.status, SubStatus: e.sub, Header: h, Body: errorBody(e, act)}
}

func jsonResponse(status int, body []byte, charge float64) *Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &Response{Status: status, Header: h, Body: body, RequestCharge: charge}
}
