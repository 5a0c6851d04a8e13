package cosmosemu

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// normalizePath turns the request URL into resource path segments the way
// the service's routing gateway does: the path is percent-decoded (twice
// when a decoded '%' remains, like the service's layered decoding),
// backslashes act as separators, '#' ends the path, trailing whitespace is
// trimmed and control characters are rejected. This is why ids ending in
// whitespace or containing '/', '\\' or '#' can be created but not
// addressed (401 from the signature check, as on the service).
func normalizePath(u *url.URL) ([]string, *apiError) {
	p, err := url.PathUnescape(u.EscapedPath())
	if err != nil {
		return nil, errBadRequest("The request path is not a valid URL path.")
	}
	if strings.Contains(p, "%") {
		if again, err := url.PathUnescape(p); err == nil {
			p = again
		}
	}
	p = strings.ReplaceAll(p, "\\", "/")
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return nil, errBadRequest("The request path contains invalid characters.")
		}
	}
	p = strings.TrimRight(p, " \t")
	p = strings.Trim(p, "/")
	if p == "" {
		return nil, nil
	}
	segs := strings.Split(p, "/")
	for _, s := range segs {
		if s == "" {
			return nil, errBadRequest("The request path is invalid: empty path segment.")
		}
	}
	return segs, nil
}

// authResource derives the resource type and link the signature covers:
// for a feed (odd number of segments) the last segment is the type and the
// parent is the link; for a single resource the type is the second-to-last
// segment and the link the whole path.
func authResource(segs []string) (string, string) {
	switch {
	case len(segs) == 0:
		return "", ""
	case len(segs) == 2 && segs[0] == "offers":
		// Offers are addressed by resource id; the signed link is the id.
		return "offers", strings.ToLower(segs[1])
	case len(segs)%2 == 1:
		return segs[len(segs)-1], strings.Join(segs[:len(segs)-1], "/")
	default:
		return segs[len(segs)-2], strings.Join(segs, "/")
	}
}

func isTrue(v string) bool { return strings.EqualFold(strings.TrimSpace(v), "true") }

func isQueryRequest(r *http.Request) bool {
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.HasPrefix(ct, "application/query+json") ||
		isTrue(r.Header.Get("x-ms-documentdb-isquery")) || isTrue(r.Header.Get("x-ms-documentdb-query"))
}

func methodNotAllowed() *apiError {
	return newErr(http.StatusMethodNotAllowed, "The requested verb is not supported.")
}

// route classifies the request (operation, ids) and, for document
// operations, resolves the container and the physical partitions touched.
func (s *Server) route(ctx context.Context, req *Request) *apiError {
	segs := req.path
	m := req.HTTP.Method
	n := len(segs)
	if n == 0 {
		if m != http.MethodGet && m != http.MethodHead {
			return methodNotAllowed()
		}
		req.Operation = OpRead
		return nil
	}
	switch segs[0] {
	case "offers":
		switch {
		case n == 1 && m == http.MethodGet:
			req.Operation = OpReadFeed
		case n == 1 && m == http.MethodPost && isQueryRequest(req.HTTP):
			req.Operation = OpQuery
		case n == 2 && m == http.MethodGet:
			req.Operation = OpRead
		case n == 2 && m == http.MethodPut:
			req.Operation = OpReplace
		default:
			return methodNotAllowed()
		}
		return nil
	case "dbs":
	default:
		return newErr(http.StatusNotFound, msgNotFound)
	}
	if n >= 2 {
		req.Database = segs[1]
	}
	if n >= 4 {
		if segs[2] != "colls" {
			return errBadRequest("The resource type '%s' is not supported by cosmosemu.", segs[2])
		}
		req.Container = segs[3]
	}
	switch n {
	case 1, 3:
		if n == 3 && segs[2] != "colls" {
			return errBadRequest("The resource type '%s' is not supported by cosmosemu.", segs[2])
		}
		switch {
		case m == http.MethodGet:
			req.Operation = OpReadFeed
		case m == http.MethodPost && isQueryRequest(req.HTTP):
			req.Operation = OpQuery
		case m == http.MethodPost:
			req.Operation = OpCreate
		default:
			return methodNotAllowed()
		}
		return nil
	case 2, 4:
		switch {
		case m == http.MethodGet || m == http.MethodHead:
			req.Operation = OpRead
		case m == http.MethodDelete:
			req.Operation = OpDelete
		case m == http.MethodPut && n == 4:
			req.Operation = OpReplace
		default:
			return methodNotAllowed()
		}
		return nil
	case 5:
		switch segs[4] {
		case "pkranges":
			if m != http.MethodGet {
				return methodNotAllowed()
			}
			req.Operation = OpReadFeed
			return nil
		case "docs":
		default:
			return errBadRequest("The resource type '%s' is not supported by cosmosemu.", segs[4])
		}
		h := req.HTTP.Header
		switch {
		case m == http.MethodGet && strings.EqualFold(h.Get("A-IM"), "Incremental feed"):
			req.Operation = OpChangeFeed
		case m == http.MethodGet:
			req.Operation = OpReadFeed
		case m == http.MethodPost && isTrue(h.Get("x-ms-cosmos-is-batch-request")):
			req.Operation = OpBatch
		case m == http.MethodPost && isTrue(h.Get("x-ms-cosmos-is-query-plan-request")):
			req.Operation = OpQueryPlan
		case m == http.MethodPost && isQueryRequest(req.HTTP):
			req.Operation = OpQuery
		case m == http.MethodPost && isTrue(h.Get("x-ms-documentdb-is-upsert")):
			req.Operation = OpUpsert
		case m == http.MethodPost:
			req.Operation = OpCreate
		default:
			return methodNotAllowed()
		}
	case 6:
		if segs[4] != "docs" {
			return errBadRequest("The resource type '%s' is not supported by cosmosemu.", segs[4])
		}
		switch m {
		case http.MethodGet, http.MethodHead:
			req.Operation = OpRead
		case http.MethodPut:
			req.Operation = OpReplace
		case http.MethodDelete:
			req.Operation = OpDelete
		case http.MethodPatch:
			req.Operation = OpPatch
		default:
			return methodNotAllowed()
		}
	default:
		return errBadRequest("The resource path is not supported by cosmosemu.")
	}
	req.tgt = s.resolve(req)
	return nil
}

// dispatch is the innermost handler: it runs the operation.
func (s *Server) dispatch(ctx context.Context, req *Request) *Response {
	var resp *Response
	var err *apiError
	switch req.ResourceType {
	case ResourceAccount:
		resp = s.handleAccount(req)
	case ResourceDatabase:
		resp, err = s.handleDatabase(req)
	case ResourceContainer:
		resp, err = s.handleContainer(req)
	case ResourceOffer:
		resp, err = s.handleOffer(req)
	case ResourcePartitionKeyRange:
		resp, err = s.handlePKRanges(req)
	case ResourceDocument:
		resp, err = s.handleDocuments(ctx, req)
	default:
		err = errBadRequest("The resource type '%s' is not supported by cosmosemu.", req.ResourceType)
	}
	if err != nil {
		return errResponse(req, err)
	}
	return resp
}

func (s *Server) handleDocuments(ctx context.Context, req *Request) (*Response, *apiError) {
	t := req.tgt
	if t == nil || t.err != nil {
		if t != nil {
			return nil, t.err
		}
		return nil, errNotFound()
	}
	switch req.Operation {
	case OpCreate, OpUpsert:
		return s.handleWriteNew(req)
	case OpRead:
		return s.handleReadItem(req)
	case OpReplace:
		return s.handleReplaceItem(req)
	case OpDelete:
		return s.handleDeleteItem(req)
	case OpPatch:
		return s.handlePatchItem(req)
	case OpBatch:
		return s.handleBatch(req)
	case OpQuery:
		return s.handleQuery(ctx, req)
	case OpQueryPlan:
		return s.handleQueryPlan(req)
	case OpReadFeed:
		return s.handleReadFeed(ctx, req)
	case OpChangeFeed:
		return s.handleChangeFeed(req)
	}
	return nil, methodNotAllowed()
}
