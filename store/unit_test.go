package store

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
)

func TestEscapeIDRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "a/b\\c?d#e", "100%", "~tilde", "sp ace ", "ctl\x01\x7f", "日本語🚀", "%2F~2F", `q"uote`} {
		e := escapeID(s)
		require.NotContains(t, e, "/")
		require.NotContains(t, e, "\\")
		require.NotContains(t, e, "?")
		require.NotContains(t, e, "#")
		require.NotContains(t, e, "%")
		require.NotContains(t, e, " ")
		require.NotContains(t, e, `"`)
		back, ok := unescapeID(e)
		require.True(t, ok)
		require.Equal(t, s, back)
	}
	_, ok := unescapeID("bad~Z")
	require.False(t, ok)
}

func TestUserIDLengthLimit(t *testing.T) {
	short := userID("kv", "k/1")
	require.Equal(t, "kv:k~2F1", short)
	long := strings.Repeat("/", 400) // escapes to 1200 bytes
	id := userID("kv", long)
	require.LessOrEqual(t, len(id), maxIDBytes)
	require.True(t, strings.HasPrefix(id, "kv!"))
	require.Equal(t, id, userID("kv", long), "stable")
	require.NotEqual(t, id, userID("kv", long+"x"))
	exact := strings.Repeat("a", maxIDBytes-3)
	require.Equal(t, "kv:"+exact, userID("kv", exact))
	require.True(t, strings.HasPrefix(userID("kv", exact+"a"), "kv!"))
}

func TestInstanceIDLimit(t *testing.T) {
	require.NoError(t, checkInstanceID("op", strings.Repeat("x", MaxInstanceIDBytes)))
	err := checkInstanceID("op", strings.Repeat("x", MaxInstanceIDBytes+1))
	require.ErrorIs(t, err, durable.ErrPermanent)
	require.ErrorIs(t, checkInstanceID("op", ""), durable.ErrPermanent)
}

func TestTokenRoundTrip(t *testing.T) {
	tok := makeToken(tokenWork, "n1", "inst/with.dots", "w:1:2")
	p, ok := parseToken(tok)
	require.True(t, ok)
	require.Equal(t, parsedToken{kind: tokenWork, nonce: "n1", instance: "inst/with.dots", docID: "w:1:2"}, p)
	o, ok := parseToken(makeToken(tokenOrch, "n2", "i", ""))
	require.True(t, ok)
	require.Equal(t, "i", o.instance)
	for _, bad := range []string{"", "x", "o.n", "o.n.!!", "w.n.aQ", "o.n.aQ.aQ", "z.n.aQ"} {
		_, ok := parseToken(bad)
		require.False(t, ok, bad)
	}
}

func TestPlanBatches(t *testing.T) {
	var ops []batchOp
	for i := 0; i < 250; i++ {
		ops = append(ops, opDelete("id-"+itoa(i)))
	}
	b := planBatches(ops, maxBatchOps, maxBatchBytes)
	require.Len(t, b, 3)
	require.Len(t, b[0], 100)
	require.Len(t, b[2], 50)
	require.Equal(t, "id-100", b[1][0].id, "order is kept")

	big := strings.Repeat("x", 700*1024)
	var heavy []batchOp
	for i := 0; i < 5; i++ {
		heavy = append(heavy, opUpsert(historyDoc{ID: itoa(i), EventData: big}))
	}
	hb := planBatches(heavy, maxBatchOps, maxBatchBytes)
	require.Len(t, hb, 3, "two 700 KB documents per batch under the size limit")
	require.True(t, fitsOneBatch(hb[0]))
	require.False(t, fitsOneBatch(heavy))
	require.False(t, fitsOneBatch(ops))
	require.True(t, fitsOneBatch(ops[:100]))
}

func respErr(status int) error {
	return &azcore.ResponseError{StatusCode: status, RawResponse: &http.Response{StatusCode: status, Header: http.Header{}}}
}

func TestErrorMapping(t *testing.T) {
	for status, retryable := range map[int]bool{408: true, 429: true, 449: true, 503: true, 410: true,
		400: false, 404: false, 413: false, 401: false, 409: true, 412: true} {
		err := mapErr("op", respErr(status))
		var pe *durable.ProviderError
		require.True(t, errors.As(err, &pe), "status %d", status)
		require.Equal(t, retryable, pe.Retryable, "status %d", status)
		var re *azcore.ResponseError
		require.True(t, errors.As(err, &re), "the cause is kept")
	}
	require.True(t, durable.IsRetryable(mapErr("op", context.Canceled)))
	require.True(t, errors.Is(mapErr("op", context.Canceled), context.Canceled))
	require.Nil(t, mapErr("op", nil))
	require.Equal(t, 412, statusOf(&batchError{status: 412, index: 0}))
}

func TestRetryHonoursAttemptsAndHints(t *testing.T) {
	p := retryPolicy{initial: 1, max: 1, attempts: 3}
	n := 0
	err := p.do(context.Background(), true, func() error { n++; return respErr(503) })
	require.Error(t, err)
	require.Equal(t, 3, n)
	n = 0
	err = p.do(context.Background(), true, func() error { n++; return respErr(404) })
	require.Error(t, err)
	require.Equal(t, 1, n, "permanent statuses are not retried")
	n = 0
	err = p.do(context.Background(), false, func() error { n++; return errors.New("connection reset") })
	require.Error(t, err)
	require.Equal(t, 1, n, "an unknown outcome is not retried for unsafe calls")
	e := &azcore.ResponseError{StatusCode: 429, RawResponse: &http.Response{Header: http.Header{"X-Ms-Retry-After-Ms": {"15"}}}}
	require.Equal(t, int64(15), retryAfter(e).Milliseconds())
}

func TestFixPKHeader(t *testing.T) {
	require.Equal(t, `["\ud83d\ude80"]`, fixPKHeader(`["\U0001f680"]`))
	require.Equal(t, `["a\u0001\u0007\u000b\n"]`, fixPKHeader(`["a\x01\a\v\n"]`))
	require.Equal(t, `["plain \"q\""]`, fixPKHeader(`["plain \"q\""]`))
}

// TestCallEncodingIgnoresTraceContext: a request record's digest covers
// the call, not the span it was made in.
func TestCallEncodingIgnoresTraceContext(t *testing.T) {
	t.Parallel()
	enc := func(w durable.WorkItem) string {
		b, err := durable.MarshalWorkItem(w)
		require.NoError(t, err)
		return callEncoding(string(b))
	}
	a := durable.StartOrchestration{Instance: "i", Orchestration: "O", Input: "1", ExecutionID: 1, RequestID: "r",
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	b := a
	b.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	require.Equal(t, enc(a), enc(b))
	c := a
	c.Input = "2"
	require.NotEqual(t, enc(a), enc(c))
	require.Equal(t, "not a work item", callEncoding("not a work item"))
}
