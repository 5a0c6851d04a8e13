package account

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/stretchr/testify/require"
)

func TestLabel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		method, path string
		headers      map[string]string
		want         string
	}{
		{"GET", "/", nil, "Read account"},
		{"GET", "/dbs/d/colls/c", nil, "Read colls"},
		{"GET", "/dbs/d/colls/c/pkranges", nil, "ReadFeed pkranges"},
		{"GET", "/dbs/d/colls/c/docs/x", map[string]string{"x-ms-documentdb-partitionkey": `["i"]`}, "Read"},
		{"GET", "/dbs/d/colls/c/docs", map[string]string{"A-IM": "Incremental feed"}, "ChangeFeed"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-documentdb-partitionkey": `["i"]`}, "Create"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-documentdb-is-upsert": "True", "x-ms-documentdb-partitionkey": `["i"]`}, "Upsert"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-documentdb-isquery": "True"}, "Query (cross-partition)"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"Content-Type": "application/query+json", "x-ms-documentdb-partitionkey": `["i"]`}, "Query"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-documentdb-isquery": "True", "x-ms-documentdb-partitionkey": `["$leases"]`}, "Query [$leases]"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-cosmos-is-query-plan-request": "True", "x-ms-documentdb-isquery": "True"}, "QueryPlan"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-cosmos-is-batch-request": "True", "x-ms-documentdb-partitionkey": `["i"]`}, "Batch"},
		{"POST", "/dbs/d/colls/c/docs", map[string]string{"x-ms-cosmos-is-batch-request": "True", "x-ms-cosmos-batch-atomic": "False"}, "Bulk"},
		{"PUT", "/dbs/d/colls/c/docs/x", nil, "Replace"},
		{"PATCH", "/dbs/d/colls/c/docs/x", nil, "Patch"},
		{"DELETE", "/dbs/d/colls/c/docs/x", nil, "Delete"},
		{"DELETE", "/dbs/d", nil, "Delete dbs"},
	} {
		r, err := http.NewRequest(tt.method, "https://acct.documents.azure.com"+tt.path, nil)
		require.NoError(t, err)
		for k, v := range tt.headers {
			r.Header.Set(k, v)
		}
		require.Equal(t, tt.want, Label(r), "%s %s %v", tt.method, tt.path, tt.headers)
	}
}

func TestTarget(t *testing.T) {
	t.Parallel()
	for path, want := range map[string][2]string{
		"/": {"", ""}, "/dbs/d": {"d", ""}, "/dbs/d/colls/c": {"d", "c"}, "/dbs/d%20x/colls/c/docs/i": {"d x", "c"},
	} {
		u, err := url.Parse("https://a" + path)
		require.NoError(t, err)
		db, c := Target(u)
		require.Equal(t, want, [2]string{db, c}, path)
	}
}

// answers is a transport answering each request with the next status and
// charge.
type answers struct {
	status []int
	charge []string
	i      int
}

func (a *answers) Do(r *http.Request) (*http.Response, error) {
	i := a.i
	a.i++
	h := http.Header{}
	h.Set("x-ms-request-charge", a.charge[i])
	if a.status[i] == http.StatusTooManyRequests {
		h.Set("x-ms-retry-after-ms", "1")
	}
	return &http.Response{StatusCode: a.status[i], Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: r}, nil
}

// TestMeterCountsEveryAttempt: charges, requests and 429s are counted per
// container and label and in the total, retries included, and the cap
// fires once, from the request that passes it.
func TestMeterCountsEveryAttempt(t *testing.T) {
	t.Parallel()
	m := NewMeter()
	fired := 0
	m.SetCap(10, func() { fired++ })
	tr := &answers{status: []int{429, 200, 201, 200}, charge: []string{"0", "2.5", "6.19", "3"}}
	pl := runtime.NewPipeline("t", "v", runtime.PipelineOptions{PerRetry: []policy.Policy{m.Policy()}},
		&policy.ClientOptions{Transport: tr, Retry: policy.RetryOptions{MaxRetries: 1, RetryDelay: time.Millisecond, MaxRetryDelay: time.Second,
			StatusCodes: []int{429}}})
	send := func(method, path string) {
		req, err := runtime.NewRequest(t.Context(), method, "https://a"+path)
		require.NoError(t, err)
		if method == http.MethodPost {
			req.Raw().Header.Set("x-ms-documentdb-partitionkey", `["i"]`)
		}
		_, err = pl.Do(req)
		require.NoError(t, err)
	}
	send(http.MethodGet, "/dbs/d/colls/c/docs/x") // 429, then 200 on the retry
	require.Equal(t, 0, fired)
	require.False(t, m.Exceeded())
	send(http.MethodPost, "/dbs/d/colls/c/docs") // 6.19: 8.69 in all
	require.False(t, m.Exceeded())
	send(http.MethodGet, "/dbs/d/colls/other/docs/y") // 11.69: past the cap
	require.True(t, m.Exceeded())
	require.Equal(t, 1, fired)

	require.Equal(t, Usage{Requests: 4, RequestCharge: 11.69, Throttled: 1, RetryAfter: time.Millisecond}, m.Total())
	require.Equal(t, map[string]Usage{
		"Read":   {Requests: 2, RequestCharge: 2.5, Throttled: 1, RetryAfter: time.Millisecond},
		"Create": {Requests: 1, RequestCharge: 6.19},
	}, m.Container("d", "c"))
	require.Equal(t, 11.69, m.Database("d").RequestCharge)
	require.Empty(t, m.Container("d", "none"))
}

func TestParseThroughput(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Throughput{"autoscale:4000": {AutoscaleMax: 4000}, "manual:400": {Manual: 400}} {
		got, err := ParseThroughput(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "4000", "autoscale:", "autoscale:1500", "autoscale:500", "manual:399", "manual:450", "serverless:1", "manual:-400"} {
		_, err := ParseThroughput(bad)
		require.Error(t, err, bad)
	}
}

func TestCheckEstimate(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckEstimate(100, 0))
	require.NoError(t, CheckEstimate(100, 100))
	err := CheckEstimate(101, 100)
	require.True(t, errors.Is(err, ErrOverCap))
	require.Contains(t, err.Error(), "101 RU")
}
