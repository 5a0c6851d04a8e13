package cosmosemu

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/durafeed/durafeed/cosmosemu/internal/query"
	"github.com/durafeed/durafeed/internal/epk"
)

// Query plans
//
// SDKs without a local query engine (Python, JavaScript, Java in gateway
// mode, .NET without its native ServiceInterop) ask the gateway how to run a
// query across partitions: POST .../docs with the query body,
// x-ms-cosmos-is-query-plan-request: True and
// x-ms-cosmos-supported-query-features (a comma-separated list such as
// "Aggregate, CompositeAggregate, Distinct, GroupBy, MultipleOrderBy,
// MultipleAggregates, OffsetAndLimit, OrderBy, Top, NonValueAggregate").
// The answer is a PartitionedQueryExecutionInfo built from internal/query's
// Plan: what the client merges (ORDER BY keys, aggregates, TOP, OFFSET,
// LIMIT, DISTINCT, GROUP BY) and the rewritten query it sends to each range
// with x-ms-documentdb-partitionkeyrangeid, which runDocQuery serves on
// that one range. A feature the query needs and the client did not list answers
// 400 as the service does.

const msgUnsupportedFeatures = "Query contains 1 or more unsupported features. Upgrade your SDK to a version that does support the requested features:"

// queryRange is one EPK interval of a plan's queryRanges.
type queryRange struct {
	Min          string `json:"min"`
	Max          string `json:"max"`
	MinInclusive bool   `json:"isMinInclusive"`
	MaxInclusive bool   `json:"isMaxInclusive"`
}

// partitionedQueryExecutionInfo is the body of a query-plan answer.
type partitionedQueryExecutionInfo struct {
	Version      int             `json:"partitionedQueryExecutionInfoVersion"`
	QueryInfo    *query.Plan     `json:"queryInfo"`
	QueryRanges  []queryRange    `json:"queryRanges"`
	HybridSearch json.RawMessage `json:"hybridSearchQueryInfo"`
}

func (s *Server) handleQueryPlan(req *Request) (*Response, *apiError) {
	t := req.tgt
	qr, err := parseQueryRequest(req.body)
	if err != nil {
		return nil, err
	}
	plan, perr := qr.q.Plan(qr.params)
	if perr != nil {
		return nil, queryError(perr)
	}
	supported := map[string]bool{}
	for _, f := range strings.Split(req.HTTP.Header.Get("x-ms-cosmos-supported-query-features"), ",") {
		supported[strings.TrimSpace(f)] = true
	}
	var missing []string
	for _, f := range plan.Features {
		if !supported[f] {
			missing = append(missing, "Query contained "+f+", which the calling client does not support.")
		}
	}
	if len(missing) > 0 {
		return nil, errBadRequest("%s\r\n%s", msgUnsupportedFeatures, strings.Join(missing, "\r\n"))
	}

	ranges := []queryRange{{Min: epk.MinInclusive, Max: epk.MaxExclusive, MinInclusive: true}}
	pk, prefix, scoped := t.pk, t.prefix, t.hasPK
	if !scoped {
		pk, scoped = pinnedPartitionKey(qr.text, qr.params, t.def)
		prefix = scoped && len(pk) < len(t.def.Paths)
	}
	if scoped {
		e, eerr := t.def.epkOf(pk)
		if eerr != nil {
			return nil, eerr
		}
		if prefix {
			ranges = []queryRange{{Min: e, Max: e + "FF", MinInclusive: true}}
		} else {
			ranges = []queryRange{{Min: e, Max: e, MinInclusive: true, MaxInclusive: true}}
		}
	}
	body, _ := json.Marshal(partitionedQueryExecutionInfo{
		Version: 2, QueryInfo: plan, QueryRanges: ranges, HybridSearch: json.RawMessage("null"),
	})
	return jsonResponse(http.StatusOK, body, 1), nil
}
