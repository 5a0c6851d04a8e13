package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/runtime/runtimetest"
)

// hang bounds waits that only catch hangs.
const hang = 30 * time.Second

// fixture is the API over a runtime on the in-memory provider, served by
// an httptest server. Orchestrations: Echo returns its input, Wait
// returns the data of its "go" event, Fail fails.
type fixture struct {
	srv   *httptest.Server
	p     durable.Provider
	ready atomic.Bool
}

func newFixture(t *testing.T, mutate func(*httpapi.Options)) *fixture {
	t.Helper()
	return newFixtureOf(t, fixtureOpts{mutate: mutate})
}

// fixtureOpts extend a fixture: register adds orchestrations and
// activities, wrap wraps the provider, mutate changes the options.
type fixtureOpts struct {
	register func(*runtime.Registry)
	wrap     func(durable.Provider) durable.Provider
	mutate   func(*httpapi.Options)
}

func newFixtureOf(t *testing.T, fo fixtureOpts) *fixture {
	t.Helper()
	mutate := fo.mutate
	reg := runtime.NewRegistry()
	runtime.RegisterOrchestration(reg, "Echo", func(ctx *runtime.OrchestrationContext, in json.RawMessage) (json.RawMessage, error) {
		return in, nil
	})
	runtime.RegisterOrchestration(reg, "Wait", func(ctx *runtime.OrchestrationContext, _ json.RawMessage) (json.RawMessage, error) {
		var out json.RawMessage
		err := ctx.WaitForEvent("go").Await(&out)
		return out, err
	})
	runtime.RegisterOrchestration(reg, "Fail", func(ctx *runtime.OrchestrationContext, _ json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("failed on purpose")
	})
	if fo.register != nil {
		fo.register(reg)
	}
	f := &fixture{p: memprovider.NewStore().Open()}
	if fo.wrap != nil {
		f.p = fo.wrap(f.p)
	}
	f.ready.Store(true)
	rt := runtime.New(f.p, reg, runtimetest.FastOptions(t))
	require.NoError(t, rt.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	o := httpapi.Options{Orchestrations: reg, Ready: f.ready.Load, MaxInputBytes: 1000}
	if mutate != nil {
		mutate(&o)
	}
	h, err := httpapi.New(rt.Client(), o)
	require.NoError(t, err)
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// answer is a decoded response.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// code returns the error code of an error answer.
func (a answer) code() string {
	e, _ := a.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (f *fixture) do(t *testing.T, method, path, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(bytes.TrimSpace(b)) > 0 {
		require.NoError(t, json.Unmarshal(b, &a.body), "a JSON body: %s", b)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	}
	return a
}

// nothingWritten checks that the store holds no instance and no message.
func (f *fixture) nothingWritten(t *testing.T) {
	t.Helper()
	admin, _ := f.p.Admin()
	ids, err := admin.ListInstances(context.Background())
	require.NoError(t, err)
	require.Empty(t, ids)
	d, err := admin.GetQueueDepths(context.Background())
	require.NoError(t, err)
	require.Equal(t, durable.QueueDepths{}, d)
}

// running waits until the instance's first turn has run.
func (f *fixture) running(t *testing.T, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		a := f.do(t, "GET", "/v1/instances/"+id, "")
		return a.status == http.StatusOK && a.body["state"] == "Running"
	}, hang, 5*time.Millisecond)
}

func TestStartAndStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	a := f.do(t, "POST", "/v1/instances", `{"name":"Echo","input":{"a":[1,2]},"instanceId":"e/1"}`)
	require.Equal(t, http.StatusCreated, a.status, a.raw)
	require.Equal(t, "e/1", a.body["instanceId"])
	require.Equal(t, "/v1/instances/e%2F1", a.header.Get("Location"))

	a = f.do(t, "GET", "/v1/instances/e%2F1?wait=20s", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.Equal(t, "Completed", a.body["state"])
	require.Equal(t, "Echo", a.body["name"])
	require.Equal(t, map[string]any{"a": []any{1.0, 2.0}}, a.body["output"])

	// Without an id, one is made.
	a = f.do(t, "POST", "/v1/instances", `{"name":"Echo"}`)
	require.Equal(t, http.StatusCreated, a.status, a.raw)
	id, _ := a.body["instanceId"].(string)
	require.Len(t, id, 36)
	a = f.do(t, "GET", "/v1/instances/"+id+"?wait=20s", "")
	require.Equal(t, "Completed", a.body["state"])
	require.Nil(t, a.body["output"], "a null output")

	// A failure is structured.
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Fail","instanceId":"f"}`).status)
	a = f.do(t, "GET", "/v1/instances/f?wait=20s", "")
	require.Equal(t, "Failed", a.body["state"])
	failure, _ := a.body["failure"].(map[string]any)
	require.Equal(t, "application", failure["category"])
	require.Contains(t, failure["message"], "failed on purpose")
}

func TestStartExistingInstanceConflicts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"w"}`).status)
	f.running(t, "w")
	a := f.do(t, "POST", "/v1/instances", `{"name":"Echo","instanceId":"w","input":1}`)
	require.Equal(t, http.StatusConflict, a.status, a.raw)
	require.Equal(t, "instance_exists", a.code())
	st, _ := a.body["status"].(map[string]any)
	require.Equal(t, "Running", st["state"])
	require.Equal(t, "Wait", st["name"])
}

func TestStatusOfUnknownAndInvalid(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/instances/nobody", http.StatusNotFound, "instance_not_found"},
		{"/v1/instances/" + strings.Repeat("x", httpapi.MaxInstanceIDBytes+1), http.StatusBadRequest, "invalid_instance_id"},
		{"/v1/instances/a%01b", http.StatusBadRequest, "invalid_instance_id"},
		{"/v1/instances/a%FFb", http.StatusBadRequest, "invalid_instance_id"},
		{"/v1/instances/nobody?wait=soon", http.StatusBadRequest, "invalid_wait"},
	} {
		a := f.do(t, "GET", tc.path, "")
		require.Equal(t, tc.status, a.status, "%s: %s", tc.path, a.raw)
		require.Equal(t, tc.code, a.code(), tc.path)
	}
}

// TestBadStartsChangeNothing: every refused start answers its status and
// error code, and leaves the store empty.
func TestBadStartsChangeNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, tc := range []struct {
		name, body string
		header     []string
		status     int
		code       string
		limit      float64
	}{
		{"malformed JSON", `{"name":`, nil, http.StatusBadRequest, "bad_json", 0},
		{"not an object", `[1]`, nil, http.StatusBadRequest, "bad_json", 0},
		{"unknown field", `{"name":"Echo","inptu":1}`, nil, http.StatusBadRequest, "bad_json", 0},
		{"two values", `{"name":"Echo"} {}`, nil, http.StatusBadRequest, "bad_json", 0},
		{"no name", `{"input":1}`, nil, http.StatusBadRequest, "invalid_name", 0},
		{"unknown orchestration", `{"name":"Nope"}`, nil, http.StatusBadRequest, "unknown_orchestration", 0},
		{"unknown version", `{"name":"Echo","version":"9.9.9"}`, nil, http.StatusBadRequest, "unknown_orchestration", 0},
		{"control character in id", `{"name":"Echo","instanceId":"a\u0007b"}`, nil, http.StatusBadRequest, "invalid_instance_id", 0},
		{"id too long", `{"name":"Echo","instanceId":"` + strings.Repeat("i", httpapi.MaxInstanceIDBytes+1) + `"}`, nil, http.StatusBadRequest, "invalid_instance_id", 0},
		{"input over the limit", `{"name":"Echo","input":"` + strings.Repeat("x", 1000) + `"}`, nil, http.StatusBadRequest, "input_too_large", 1000},
		{"body over the limit", `{"name":"Echo","input":"` + strings.Repeat("x", 70_000) + `"}`, nil, http.StatusRequestEntityTooLarge, "body_too_large", 1000 + 64<<10},
		{"idempotency key too long", `{"name":"Echo"}`, []string{"Idempotency-Key", strings.Repeat("k", httpapi.MaxIdempotencyKeyBytes+1)}, http.StatusBadRequest, "invalid_idempotency_key", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := f.do(t, "POST", "/v1/instances", tc.body, tc.header...)
			require.Equal(t, tc.status, a.status, a.raw)
			require.Equal(t, tc.code, a.code())
			e, _ := a.body["error"].(map[string]any)
			require.NotEmpty(t, e["message"])
			if tc.limit > 0 {
				require.Equal(t, tc.limit, e["limit"], "the limit is stated")
			}
		})
	}
	f.nothingWritten(t)
}

// TestIdempotentStart: a start resent with its Idempotency-Key gets the
// first start's answer (201, the same instance id), whether the id was
// given or generated and however far the instance has gone since; the key
// with another body gets 422 and writes nothing; a key over another
// caller's instance still finds the conflict.
func TestIdempotentStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	admin, _ := f.p.Admin()
	executions := func(id string) []uint64 {
		execs, err := admin.ListExecutions(context.Background(), id)
		require.NoError(t, err)
		return execs
	}

	// A given id: the resend after the instance completed answers 201.
	body := `{"name":"Echo","instanceId":"idem","input":7}`
	a := f.do(t, "POST", "/v1/instances", body, "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusCreated, a.status, a.raw)
	a = f.do(t, "GET", "/v1/instances/idem?wait=20s", "")
	require.Equal(t, 7.0, a.body["output"])
	a = f.do(t, "POST", "/v1/instances", body, "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusCreated, a.status, a.raw)
	require.Equal(t, "idem", a.body["instanceId"])
	require.Equal(t, []uint64{1}, executions("idem"))

	// A generated id: three sends, one instance, one id.
	gen := `{"name":"Echo","input":"g"}`
	var ids []string
	for range 3 {
		a = f.do(t, "POST", "/v1/instances", gen, "Idempotency-Key", "req-gen")
		require.Equal(t, http.StatusCreated, a.status, a.raw)
		ids = append(ids, a.body["instanceId"].(string))
	}
	require.Equal(t, []string{ids[0], ids[0], ids[0]}, ids)
	require.Equal(t, httpapi.KeyInstanceID("req-gen"), ids[0])
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/"+ids[0]+"?wait=20s", "").body["state"])
	a = f.do(t, "POST", "/v1/instances", gen, "Idempotency-Key", "req-gen")
	require.Equal(t, http.StatusCreated, a.status, "a resend after completion: %s", a.raw)
	list, err := admin.ListInstances(context.Background())
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"idem", ids[0]}, list)

	// The same key with another body: 422, nothing written.
	depths, err := admin.GetQueueDepths(context.Background())
	require.NoError(t, err)
	for _, other := range []string{`{"name":"Echo","input":"other"}`, `{"name":"Echo","instanceId":"idem","input":8}`} {
		key := "req-gen"
		if strings.Contains(other, "idem") {
			key = "req-1"
		}
		a = f.do(t, "POST", "/v1/instances", other, "Idempotency-Key", key)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, a.raw)
		require.Equal(t, "idempotency_key_reused", a.code())
	}
	after, err := admin.GetQueueDepths(context.Background())
	require.NoError(t, err)
	require.Equal(t, depths, after, "a refused resend enqueues nothing")
	require.Equal(t, "g", f.do(t, "GET", "/v1/instances/"+ids[0], "").body["output"])

	// A fresh key on an instance that exists is a conflict.
	a = f.do(t, "POST", "/v1/instances", body, "Idempotency-Key", "req-new")
	require.Equal(t, http.StatusConflict, a.status, a.raw)
	require.Equal(t, "instance_exists", a.code())
	require.Equal(t, []uint64{1}, executions("idem"))
}

// TestIdempotentEventAndCancel: an event or a cancellation resent with
// its Idempotency-Key answers 202 again after the instance has ended
// (the cancel's own doing), instead of 409; the key with another body
// answers 422 and writes nothing.
func TestIdempotentEventAndCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for _, id := range []string{"ev", "cx"} {
		require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"`+id+`"}`).status)
		f.running(t, id)
	}
	a := f.do(t, "POST", "/v1/instances/ev/events/go", `{"n":1}`, "Idempotency-Key", "ev-1")
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/ev?wait=20s", "").body["state"])
	a = f.do(t, "POST", "/v1/instances/ev/events/go", `{"n":1}`, "Idempotency-Key", "ev-1")
	require.Equal(t, http.StatusAccepted, a.status, "the resend after the instance ended: %s", a.raw)
	a = f.do(t, "POST", "/v1/instances/ev/events/go", `{"n":2}`, "Idempotency-Key", "ev-1")
	require.Equal(t, http.StatusUnprocessableEntity, a.status, a.raw)
	require.Equal(t, "idempotency_key_reused", a.code())
	a = f.do(t, "POST", "/v1/instances/ev/events/go", `{"n":1}`, "Idempotency-Key", "ev-other")
	require.Equal(t, http.StatusConflict, a.status, "a new event to an ended instance: %s", a.raw)
	require.Equal(t, "instance_ended", a.code())

	a = f.do(t, "POST", "/v1/instances/cx/cancel", `{"reason":"r"}`, "Idempotency-Key", "cx-1")
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	require.Equal(t, "Failed", f.do(t, "GET", "/v1/instances/cx?wait=20s", "").body["state"])
	a = f.do(t, "POST", "/v1/instances/cx/cancel", `{"reason":"r"}`, "Idempotency-Key", "cx-1")
	require.Equal(t, http.StatusAccepted, a.status, "the cancel's resend: %s", a.raw)
	a = f.do(t, "POST", "/v1/instances/cx/cancel", `{"reason":"other"}`, "Idempotency-Key", "cx-1")
	require.Equal(t, http.StatusUnprocessableEntity, a.status, a.raw)

	admin, _ := f.p.Admin()
	d, err := admin.GetQueueDepths(context.Background())
	require.NoError(t, err)
	require.Equal(t, durable.QueueDepths{}, d, "no resend left a message")
}

func TestRaiseEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"r"}`).status)
	f.running(t, "r")
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"unknown instance", "/v1/instances/nobody/events/go", `1`, http.StatusNotFound, "instance_not_found"},
		{"malformed data", "/v1/instances/r/events/go", `{`, http.StatusBadRequest, "bad_json"},
		{"data over the limit", "/v1/instances/r/events/go", `"` + strings.Repeat("d", 1000) + `"`, http.StatusBadRequest, "input_too_large"},
		{"invalid id", "/v1/instances/a%02/events/go", `1`, http.StatusBadRequest, "invalid_instance_id"},
	} {
		a := f.do(t, "POST", tc.path, tc.body)
		require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.raw)
		require.Equal(t, tc.code, a.code(), tc.name)
	}
	a := f.do(t, "GET", "/v1/instances/r", "")
	require.Equal(t, "Running", a.body["state"], "no refused event reached it")

	a = f.do(t, "POST", "/v1/instances/r/events/go", `{"ok":true}`)
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	a = f.do(t, "GET", "/v1/instances/r?wait=20s", "")
	require.Equal(t, "Completed", a.body["state"])
	require.Equal(t, map[string]any{"ok": true}, a.body["output"])

	a = f.do(t, "POST", "/v1/instances/r/events/go", `1`)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, "instance_ended", a.code())
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"c"}`).status)
	f.running(t, "c")
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"unknown instance", "/v1/instances/nobody/cancel", ``, http.StatusNotFound, "instance_not_found"},
		{"malformed body", "/v1/instances/c/cancel", `{"reason":`, http.StatusBadRequest, "bad_json"},
		{"unknown field", "/v1/instances/c/cancel", `{"why":"x"}`, http.StatusBadRequest, "bad_json"},
	} {
		a := f.do(t, "POST", tc.path, tc.body)
		require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.raw)
		require.Equal(t, tc.code, a.code(), tc.name)
	}
	require.Equal(t, "Running", f.do(t, "GET", "/v1/instances/c", "").body["state"])

	a := f.do(t, "POST", "/v1/instances/c/cancel", `{"reason":"no longer needed"}`)
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	a = f.do(t, "GET", "/v1/instances/c?wait=20s", "")
	require.Equal(t, "Failed", a.body["state"])
	require.Contains(t, a.raw, "no longer needed")

	a = f.do(t, "POST", "/v1/instances/c/cancel", ``)
	require.Equal(t, http.StatusConflict, a.status)
	require.Equal(t, "instance_ended", a.code())
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	want := map[string]bool{}
	for _, id := range []string{"l1", "l2", "l3", "l4", "l5"} {
		require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Echo","instanceId":"`+id+`"}`).status)
		require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/"+id+"?wait=20s", "").body["state"])
		want[id] = true
	}
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"l6"}`).status)
	f.running(t, "l6")

	got := map[string]bool{}
	token, pages := "", 0
	for {
		a := f.do(t, "GET", "/v1/instances?status=Completed&pageSize=2&continuationToken="+token, "")
		require.Equal(t, http.StatusOK, a.status, a.raw)
		list, _ := a.body["instances"].([]any)
		require.LessOrEqual(t, len(list), 2)
		for _, it := range list {
			m := it.(map[string]any)
			require.Equal(t, "Completed", m["status"])
			require.Equal(t, "Echo", m["name"])
			require.False(t, got[m["instanceId"].(string)], "listed once")
			got[m["instanceId"].(string)] = true
		}
		pages++
		token, _ = a.body["continuationToken"].(string)
		if token == "" {
			break
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	a := f.do(t, "GET", "/v1/instances", "")
	require.Len(t, a.body["instances"], 6)
	a = f.do(t, "GET", "/v1/instances?status=Running", "")
	require.Len(t, a.body["instances"], 1)

	for _, q := range []struct{ query, code string }{
		{"status=Sleeping", "invalid_status"},
		{"pageSize=0", "invalid_page_size"},
		{"pageSize=1001", "invalid_page_size"},
		{"continuationToken=%21%21", "invalid_continuation_token"},
	} {
		a := f.do(t, "GET", "/v1/instances?"+q.query, "")
		require.Equal(t, http.StatusBadRequest, a.status, q.query)
		require.Equal(t, q.code, a.code(), q.query)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Echo","instanceId":"d1"}`).status)
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/d1?wait=20s", "").body["state"])
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"d2"}`).status)
	f.running(t, "d2")

	for _, tc := range []struct {
		name, path string
		status     int
		code       string
	}{
		{"unknown", "/v1/instances/nobody", http.StatusNotFound, "instance_not_found"},
		{"running, not forced", "/v1/instances/d2", http.StatusConflict, "instance_running"},
		{"bad force", "/v1/instances/d2?force=maybe", http.StatusBadRequest, "invalid_force"},
	} {
		a := f.do(t, "DELETE", tc.path, "")
		require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.raw)
		require.Equal(t, tc.code, a.code(), tc.name)
	}
	require.Equal(t, "Running", f.do(t, "GET", "/v1/instances/d2", "").body["state"], "still there")

	a := f.do(t, "DELETE", "/v1/instances/d1", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.Equal(t, 1.0, a.body["instancesDeleted"])
	require.Equal(t, http.StatusNotFound, f.do(t, "GET", "/v1/instances/d1", "").status)

	a = f.do(t, "DELETE", "/v1/instances/d2?force=true", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.Equal(t, http.StatusNotFound, f.do(t, "GET", "/v1/instances/d2", "").status)
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/healthz", "").status)
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/readyz", "").status)
	f.ready.Store(false)
	a := f.do(t, "GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Equal(t, "not_ready", a.code())
	require.Equal(t, http.StatusOK, f.do(t, "GET", "/healthz", "").status, "alive while not ready")
	a = f.do(t, "POST", "/healthz", "")
	require.Equal(t, http.StatusMethodNotAllowed, a.status)
	require.Equal(t, "method_not_allowed", a.code())
	require.Equal(t, "GET", a.header.Get("Allow"))
	a = f.do(t, "GET", "/v2/nothing", "")
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, "no_route", a.code())
}

func TestNewRequiresResolver(t *testing.T) {
	t.Parallel()
	_, err := httpapi.New(nil, httpapi.Options{})
	require.Error(t, err)
}

// TestTraceContextReachesTheInstance: a start carrying a W3C traceparent
// header puts the instance in the caller's trace, with or without a
// tracer provider of the API's own.
func TestTraceContextReachesTheInstance(t *testing.T) {
	t.Parallel()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	f := newFixture(t, nil)
	a := f.do(t, "POST", "/v1/instances", `{"name":"Echo","instanceId":"traced"}`,
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	require.Equal(t, http.StatusCreated, a.status, a.raw)
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/traced?wait=20s", "").body["state"])
	admin, _ := f.p.Admin()
	events, err := admin.ReadHistory(context.Background(), "traced")
	require.NoError(t, err)
	started, ok := events[0].Kind.(history.OrchestrationStarted)
	require.True(t, ok)
	require.Contains(t, started.TraceParent, traceID)
}

// TestStoppingEndsWaits: when the server begins to stop, a status request
// waiting for an instance answers at once with the instance as it is,
// and later ones do not wait.
func TestStoppingEndsWaits(t *testing.T) {
	t.Parallel()
	stopping := make(chan struct{})
	f := newFixture(t, func(o *httpapi.Options) { o.Stopping = stopping; o.MaxWait = time.Hour })
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"s"}`).status)
	f.running(t, "s")
	got := make(chan answer, 1)
	go func() { got <- f.do(t, "GET", "/v1/instances/s?wait=1h", "") }()
	select {
	case a := <-got:
		t.Fatalf("the wait ended before the stop: %s", a.raw)
	case <-time.After(50 * time.Millisecond): // the request is waiting (or about to): either way the stop must answer it
	}
	close(stopping)
	select {
	case a := <-got:
		require.Equal(t, http.StatusOK, a.status, a.raw)
		require.Equal(t, "Running", a.body["state"])
	case <-time.After(hang):
		t.Fatal("the waiting request was not answered at the stop")
	}
	a := f.do(t, "GET", "/v1/instances/s?wait=1h", "")
	require.Equal(t, "Running", a.body["state"], "a wait after the stop answers at once")
}

// TestDefaultInputLimit: with the default limit the stored size decides
// (StoredSize): letters up to the limit pass, a quote-heavy input far
// shorter than the limit is refused as too large (not as an encoder
// failure), and the answer states the limit.
func TestDefaultInputLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(o *httpapi.Options) { o.MaxInputBytes = 0 })
	limit := httpapi.DefaultMaxInputBytes
	for _, tc := range []struct {
		name   string
		input  string
		status int
	}{
		{"letters at the limit", `"` + strings.Repeat("x", limit-16) + `"`, http.StatusCreated},
		{"letters over the limit", `"` + strings.Repeat("x", limit) + `"`, http.StatusBadRequest},
		{"quotes, 200 KiB of them", `"` + strings.Repeat(`\"`, 100<<10-4) + `"`, http.StatusCreated},
		{"quotes, 500,000 bytes", `"` + strings.Repeat(`\"`, 249_999) + `"`, http.StatusBadRequest},
		{"markup, 120,000 bytes", `"` + strings.Repeat(`<`, 120_000) + `"`, http.StatusBadRequest},
	} {
		body, err := json.Marshal(map[string]any{"name": "Echo", "input": json.RawMessage(tc.input)})
		require.NoError(t, err)
		a := f.do(t, "POST", "/v1/instances", string(body))
		require.Equal(t, tc.status, a.status, "%s: %.300s", tc.name, a.raw)
		if tc.status == http.StatusBadRequest {
			require.Equal(t, "input_too_large", a.code(), tc.name)
			e, _ := a.body["error"].(map[string]any)
			require.Equal(t, float64(limit), e["limit"], tc.name)
		}
	}
	require.Equal(t, 7, httpapi.StoredSize("x"), `x is stored as "\"x\""`)
	quotes := func(n int) int { return httpapi.StoredSize(`"` + strings.Repeat(`\"`, n) + `"`) }
	require.Equal(t, 8*1000, quotes(2000)-quotes(1000), "a quote inside a string takes eight bytes stored")
}

// ifRunning is a provider whose EnqueueIfRunning (durable.RunningEnqueuer)
// enqueues an event or a cancellation when the instance runs and its
// request is new (the memory provider reads, then writes: no concurrent
// writer here), and counts what it did; with broken it fails instead.
type ifRunning struct {
	durable.Provider
	broken             error
	mu                 sync.Mutex
	enqueued, declined int
}

func (p *ifRunning) CheckRequest(ctx context.Context, item durable.WorkItem) (durable.RequestState, error) {
	return p.Provider.(durable.RequestChecker).CheckRequest(ctx, item)
}

func (p *ifRunning) EnqueueIfRunning(ctx context.Context, item durable.WorkItem) (bool, error) {
	p.mu.Lock()
	broken := p.broken
	p.mu.Unlock()
	if broken != nil {
		return false, broken
	}
	admin, _ := p.Admin()
	info, err := admin.GetInstanceInfo(ctx, item.TargetInstance())
	rs, rerr := p.CheckRequest(ctx, item)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil || rerr != nil || rs != durable.RequestUnknown || info.Status != durable.StatusRunning {
		p.declined++
		return false, nil
	}
	p.enqueued++
	return true, p.EnqueueForOrchestrator(ctx, item, 0)
}

func (p *ifRunning) counts() (enqueued, declined int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.enqueued, p.declined
}

// TestCallIfRunning: with a provider that can check in the write that
// the instance runs, an event or a cancellation of a running instance is
// that one write; a declined write (an ended or unknown instance, a
// resend) falls back to the reads, whose answers are unchanged (409,
// 404, the resend's 202, 422); a failed one is the answer.
func TestCallIfRunning(t *testing.T) {
	t.Parallel()
	var p *ifRunning
	f := newFixtureOf(t, fixtureOpts{wrap: func(inner durable.Provider) durable.Provider {
		p = &ifRunning{Provider: inner}
		return p
	}})
	for _, id := range []string{"ev", "cx"} {
		require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"`+id+`"}`).status)
		f.running(t, id)
	}
	a := f.do(t, "POST", "/v1/instances/ev/events/go", `{"n":1}`, "Idempotency-Key", "ev-1")
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	enqueued, declined := p.counts()
	require.Equal(t, 1, enqueued)
	require.Zero(t, declined)
	a = f.do(t, "GET", "/v1/instances/ev?wait=20s", "")
	require.Equal(t, "Completed", a.body["state"])
	require.Equal(t, map[string]any{"n": float64(1)}, a.body["output"])

	for _, tc := range []struct {
		name, path, body, key string
		status                int
		code                  string
	}{
		{"the resend after the end", "/v1/instances/ev/events/go", `{"n":1}`, "ev-1", http.StatusAccepted, ""},
		{"the key reused", "/v1/instances/ev/events/go", `{"n":2}`, "ev-1", http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"an ended instance", "/v1/instances/ev/events/go", `1`, "", http.StatusConflict, "instance_ended"},
		{"an unknown instance", "/v1/instances/nobody/events/go", `1`, "", http.StatusNotFound, "instance_not_found"},
		{"an unknown instance's cancel", "/v1/instances/nobody/cancel", ``, "", http.StatusNotFound, "instance_not_found"},
	} {
		var h []string
		if tc.key != "" {
			h = []string{"Idempotency-Key", tc.key}
		}
		a := f.do(t, "POST", tc.path, tc.body, h...)
		require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.raw)
		require.Equal(t, tc.code, a.code(), tc.name)
	}
	enqueued, declined = p.counts()
	require.Equal(t, 1, enqueued, "nothing declined was written")
	require.Equal(t, 5, declined)

	a = f.do(t, "POST", "/v1/instances/cx/cancel", `{"reason":"r"}`)
	require.Equal(t, http.StatusAccepted, a.status, a.raw)
	require.Equal(t, "Failed", f.do(t, "GET", "/v1/instances/cx?wait=20s", "").body["state"])
	enqueued, _ = p.counts()
	require.Equal(t, 2, enqueued)

	admin, _ := f.p.Admin()
	d, err := admin.GetQueueDepths(context.Background())
	require.NoError(t, err)
	require.Equal(t, durable.QueueDepths{}, d, "no message left")

	// A write whose outcome is unknown is the answer: no second write.
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"broken"}`).status)
	f.running(t, "broken")
	p.mu.Lock()
	p.broken = durable.Retryable("enqueue_for_orchestrator", errors.New("lost answer"), "the answer was lost")
	p.mu.Unlock()
	a = f.do(t, "POST", "/v1/instances/broken/events/go", `1`)
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)
	require.Equal(t, "Running", f.do(t, "GET", "/v1/instances/broken", "").body["state"], "no event written")
}
