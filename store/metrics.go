package store

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// Metric names of the requests to Cosmos DB (DESIGN's telemetry table).
const (
	MetricRequests        = "durafeed.cosmos.requests"
	MetricRequestUnits    = "durafeed.cosmos.request_units"
	MetricRequestDuration = "durafeed.cosmos.request.duration"
	MetricThrottles       = "durafeed.cosmos.throttles"
	MetricRetries         = "durafeed.cosmos.retries"
)

// Attribute keys of the request metrics.
const (
	AttrOperation = attribute.Key("db.operation.name")
	AttrStatus    = attribute.Key("db.response.status_code")
)

// requestMeter counts every HTTP attempt the SDK makes for this store's
// client (documents, change feed, lease documents and metadata alike):
// requests and their request charge by operation and status, their
// duration, 429s, and the attempts beyond a call's first. It is two
// policies: per call (marks the call) and per retry (measures each
// attempt).
type requestMeter struct {
	requests  metric.Int64Counter
	units     metric.Float64Counter
	duration  metric.Float64Histogram
	throttles metric.Int64Counter
	retries   metric.Int64Counter
}

func newRequestMeter(mp metric.MeterProvider) *requestMeter {
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/durafeed/durafeed/store")
	rm := &requestMeter{}
	rm.requests, _ = m.Int64Counter(MetricRequests, metric.WithUnit("{request}"),
		metric.WithDescription("HTTP requests to Cosmos DB, each attempt counted, by operation and status"))
	rm.units, _ = m.Float64Counter(MetricRequestUnits, metric.WithUnit("{RU}"),
		metric.WithDescription("request units charged (x-ms-request-charge), by operation"))
	rm.duration, _ = m.Float64Histogram(MetricRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("time from sending a request to its answer"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	rm.throttles, _ = m.Int64Counter(MetricThrottles, metric.WithUnit("{request}"),
		metric.WithDescription("requests refused with 429 (request rate too large)"))
	rm.retries, _ = m.Int64Counter(MetricRetries, metric.WithUnit("{request}"),
		metric.WithDescription("attempts beyond a call's first (the SDK's retries)"))
	return rm
}

// callMark is the per-call state the attempts of one call share.
type callMark struct{ attempts int }

// perCall marks the call, so that its attempts can tell a retry.
type perCall struct{}

func (perCall) Do(req *policy.Request) (*http.Response, error) {
	req.SetOperationValue(&callMark{})
	return req.Next()
}

// perRetry measures one attempt.
type perRetry struct{ m *requestMeter }

func (p perRetry) Do(req *policy.Request) (*http.Response, error) {
	op := operationOf(req.Raw())
	var mark *callMark
	if req.OperationValue(&mark) && mark != nil {
		mark.attempts++
		if mark.attempts > 1 {
			p.m.retries.Add(req.Raw().Context(), 1, metric.WithAttributes(AttrOperation.String(op)))
		}
	}
	began := time.Now()
	resp, err := req.Next()
	ctx := req.Raw().Context()
	status := "error" // no answer
	var charge float64
	if resp != nil {
		status = strconv.Itoa(resp.StatusCode)
		charge, _ = strconv.ParseFloat(resp.Header.Get("x-ms-request-charge"), 64)
	}
	attrs := metric.WithAttributes(AttrOperation.String(op), AttrStatus.String(status))
	p.m.requests.Add(ctx, 1, attrs)
	p.m.duration.Record(ctx, time.Since(began).Seconds(), attrs)
	if charge > 0 {
		p.m.units.Add(ctx, charge, metric.WithAttributes(AttrOperation.String(op)))
	}
	if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		p.m.throttles.Add(ctx, 1, metric.WithAttributes(AttrOperation.String(op)))
	}
	return resp, err
}

// operationOf names a request's operation from its method, path and
// headers, as the service's REST API defines them.
func operationOf(r *http.Request) string {
	path := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(path, "/")
	last := ""
	if len(parts) > 0 {
		last = parts[len(parts)-1]
	}
	onItem := len(parts) >= 6 && parts[len(parts)-2] == "docs" // dbs/x/colls/y/docs/id
	switch {
	case strings.Contains("/"+path+"/", "/pkranges/"):
		return "read_partition_key_ranges"
	case last == "docs" && r.Method == http.MethodPost:
		switch {
		case r.Header.Get("x-ms-documentdb-isquery") == "true" || strings.HasPrefix(r.Header.Get("Content-Type"), "application/query+json"):
			return "query"
		case r.Header.Get("x-ms-cosmos-is-batch-request") == "True" || r.Header.Get("x-ms-cosmos-is-batch-request") == "true":
			return "batch"
		case r.Header.Get("x-ms-documentdb-is-upsert") == "True" || r.Header.Get("x-ms-documentdb-is-upsert") == "true":
			return "upsert"
		}
		return "create"
	case last == "docs" && r.Method == http.MethodGet:
		if r.Header.Get("A-IM") != "" {
			return "read_change_feed"
		}
		return "read_feed"
	case onItem:
		switch r.Method {
		case http.MethodGet:
			return "read"
		case http.MethodPut:
			return "replace"
		case http.MethodPatch:
			return "patch"
		case http.MethodDelete:
			return "delete"
		}
	}
	return "metadata"
}
