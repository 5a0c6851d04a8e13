package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/runtime"
)

// registerJourney adds Journey: a fan-out of three Squares, a 10 ms timer,
// a wait for the event "decision", a Decline activity that fails (its
// error caught), a Flaky activity that fails once and is retried, then
// the custom status "done" and the sum of the squares. Again continues as
// new once. Status sets its custom status and waits for "go".
func registerJourney(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "Square", func(_ context.Context, n int) (int, error) { return n * n, nil })
	runtime.RegisterActivity(reg, "Decline", func(_ context.Context, _ string) (string, error) { return "", errors.New("card declined") })
	var mu sync.Mutex
	tries := map[string]int{}
	runtime.RegisterActivity(reg, "Flaky", func(_ context.Context, in string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		tries[in]++
		if tries[in] == 1 {
			return "", errors.New("flaked")
		}
		return "ok", nil
	})
	runtime.RegisterOrchestration(reg, "Journey", func(ctx *runtime.OrchestrationContext, _ json.RawMessage) (int, error) {
		var tasks []*runtime.Task
		for n := 1; n <= 3; n++ {
			tasks = append(tasks, ctx.CallActivity("Square", n))
		}
		sum := 0
		for _, tk := range tasks {
			var v int
			if err := tk.Await(&v); err != nil {
				return 0, err
			}
			sum += v
		}
		if err := ctx.CreateTimer(10 * time.Millisecond).Await(nil); err != nil {
			return 0, err
		}
		var d json.RawMessage
		if err := ctx.WaitForEvent("decision").Await(&d); err != nil {
			return 0, err
		}
		_ = ctx.CallActivity("Decline", "x").Await(nil) // fails: the span shows it
		retry := runtime.RetryPolicy{MaxAttempts: 3, Backoff: runtime.Backoff{Kind: runtime.BackoffFixed, Base: 5 * time.Millisecond}}
		if err := ctx.CallActivity("Flaky", ctx.InstanceID(), runtime.WithRetry(retry)).Await(nil); err != nil {
			return 0, err
		}
		ctx.SetCustomStatus("done")
		return sum, nil
	})
	runtime.RegisterOrchestration(reg, "Again", func(ctx *runtime.OrchestrationContext, n int) (int, error) {
		if n < 1 {
			return 0, ctx.ContinueAsNew(n + 1)
		}
		return n, nil
	})
	runtime.RegisterOrchestration(reg, "Status", func(ctx *runtime.OrchestrationContext, _ json.RawMessage) (string, error) {
		ctx.SetCustomStatus("half")
		var out string
		err := ctx.WaitForEvent("go").Await(&out)
		return out, err
	})
}

// msTime matches the API's timestamps: RFC 3339, UTC, milliseconds.
var msTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// history reads an instance's history.
func (f *fixture) history(t *testing.T, path string, header ...string) (answer, httpapi.HistoryResponse) {
	t.Helper()
	a := f.do(t, "GET", path, "", header...)
	var h httpapi.HistoryResponse
	if a.status == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(a.raw), &h))
	}
	return a, h
}

// spansOf returns the spans of kind in h's only execution.
func spansOf(h httpapi.HistoryResponse, kind string) []httpapi.Span {
	var out []httpapi.Span
	for _, s := range h.Executions[len(h.Executions)-1].Spans {
		if s.Kind == kind {
			out = append(out, s)
		}
	}
	return out
}

func TestHistory(t *testing.T) {
	t.Parallel()
	f := newFixtureOf(t, fixtureOpts{register: registerJourney})
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Journey","input":{"who":"ada"},"instanceId":"j1"}`).status)
	// The event is raised once the orchestration waits for it.
	require.Eventually(t, func() bool {
		a, h := f.history(t, "/v1/instances/j1/history")
		if a.status != http.StatusOK {
			return false
		}
		for _, e := range h.Executions[0].Events {
			if e.Kind == "ExternalSubscribed" {
				return true
			}
		}
		return false
	}, hang, 5*time.Millisecond)
	a, h := f.history(t, "/v1/instances/j1/history")
	require.Len(t, spansOf(h, httpapi.SpanEvent), 0)
	require.Len(t, spansOf(h, httpapi.SpanActivity), 3, "the squares")
	require.Equal(t, http.StatusAccepted, f.do(t, "POST", "/v1/instances/j1/events/decision", `{"approved":true}`).status)
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/j1?wait=20s", "").body["state"])

	a, h = f.history(t, "/v1/instances/j1/history")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.Equal(t, "j1", h.InstanceID)
	require.False(t, h.Truncated)
	require.Len(t, h.Executions, 1)
	ex := h.Executions[0]
	require.Equal(t, uint64(1), ex.ExecutionID)

	// Events: the kind's own fields, payloads as JSON values.
	var raw struct {
		Executions []struct {
			Events []map[string]any `json:"events"`
		} `json:"executions"`
	}
	require.NoError(t, json.Unmarshal([]byte(a.raw), &raw))
	events := raw.Executions[0].Events
	require.Len(t, events, len(ex.Events))
	byKind := map[string][]map[string]any{}
	for i, e := range events {
		require.Equal(t, float64(i+1), e["eventId"], "ascending ids")
		require.Regexp(t, msTime, e["timestamp"])
		byKind[e["kind"].(string)] = append(byKind[e["kind"].(string)], e)
	}
	start := byKind["OrchestrationStarted"][0]
	require.Equal(t, "Journey", start["name"])
	require.Equal(t, map[string]any{"who": "ada"}, start["input"], "the input as JSON")
	require.Len(t, byKind["ActivityScheduled"], 3+1+2, "squares, decline, two flaky attempts")
	require.Equal(t, "Square", byKind["ActivityScheduled"][0]["name"])
	require.Equal(t, 1.0, byKind["ActivityScheduled"][0]["input"])
	for _, c := range byKind["ActivityCompleted"][:3] {
		require.Contains(t, []any{1.0, 4.0, 9.0}, c["result"])
		require.Contains(t, []any{2.0, 3.0, 4.0}, c["scheduledId"], "names its schedule")
	}
	require.Regexp(t, msTime, byKind["TimerCreated"][0]["fireAt"])
	require.Equal(t, map[string]any{"approved": true}, byKind["ExternalEvent"][0]["data"])
	require.Equal(t, "decision", byKind["ExternalEvent"][0]["name"])
	failed := byKind["ActivityFailed"][0]
	require.Equal(t, "card declined", failed["error"].(map[string]any)["message"])
	require.Equal(t, "application", failed["error"].(map[string]any)["category"])
	require.Equal(t, "done", byKind["CustomStatusUpdated"][0]["customStatus"])
	require.Equal(t, 14.0, byKind["OrchestrationCompleted"][0]["output"])

	// Spans: the fan-out, the timer, the event, the failed activity, the
	// retried one, turns.
	acts := spansOf(h, httpapi.SpanActivity)
	require.Len(t, acts, 5, "three squares, decline, flaky (two attempts, one span)")
	for _, s := range acts[:3] {
		require.Equal(t, "Square", s.Name)
		require.Equal(t, httpapi.SpanCompleted, s.Status)
		require.Equal(t, 1, s.Attempts)
		require.NotNil(t, s.End)
		require.False(t, s.End.Time().Before(s.Start.Time()))
	}
	require.Equal(t, "Decline", acts[3].Name)
	require.Equal(t, httpapi.SpanFailed, acts[3].Status)
	require.Equal(t, "Flaky", acts[4].Name)
	require.Equal(t, httpapi.SpanCompleted, acts[4].Status)
	require.Equal(t, 2, acts[4].Attempts)
	require.Len(t, acts[4].AttemptIDs, 2)
	timers := spansOf(h, httpapi.SpanTimer)
	require.Len(t, timers, 2, "the 10 ms timer and the retry's backoff")
	require.Equal(t, "10ms", timers[0].Name)
	require.Equal(t, httpapi.SpanCompleted, timers[0].Status)
	ev := spansOf(h, httpapi.SpanEvent)
	require.Len(t, ev, 1)
	require.Equal(t, "decision", ev[0].Name)
	require.Equal(t, ev[0].Start, *ev[0].End, "an instant")
	turns := spansOf(h, httpapi.SpanTurn)
	require.GreaterOrEqual(t, len(turns), 5)
	for _, s := range ex.Spans {
		require.NotEqual(t, httpapi.SpanPending, s.Status, "%+v: nothing is pending in a completed execution", s)
	}

	// The limit: the first events, spans bounded too, flagged.
	a, h = f.history(t, "/v1/instances/j1/history?limit=3")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.True(t, h.Truncated)
	require.Len(t, h.Executions[0].Events, 3)
	require.Len(t, h.Executions[0].Spans, 3)

	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/instances/nobody/history", http.StatusNotFound, "instance_not_found"},
		{"/v1/instances/j1/history?executionId=2", http.StatusNotFound, "execution_not_found"},
		{"/v1/instances/j1/history?executionId=x", http.StatusBadRequest, "invalid_execution_id"},
		{"/v1/instances/j1/history?limit=0", http.StatusBadRequest, "invalid_limit"},
		{"/v1/instances/j1/history?limit=10001", http.StatusBadRequest, "invalid_limit"},
		{"/v1/instances/a%02/history", http.StatusBadRequest, "invalid_instance_id"},
	} {
		a := f.do(t, "GET", tc.path, "")
		require.Equal(t, tc.status, a.status, "%s: %s", tc.path, a.raw)
		require.Equal(t, tc.code, a.code(), tc.path)
	}
}

// TestHistoryExecutions: executions come ascending; the limit keeps the
// newest ones whole and cuts or leaves out the older ones.
func TestHistoryExecutions(t *testing.T) {
	t.Parallel()
	f := newFixtureOf(t, fixtureOpts{register: registerJourney})
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Again","input":0,"instanceId":"a1"}`).status)
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/a1?wait=20s", "").body["state"])

	_, h := f.history(t, "/v1/instances/a1/history")
	require.False(t, h.Truncated)
	require.Len(t, h.Executions, 2)
	require.Equal(t, uint64(1), h.Executions[0].ExecutionID)
	require.Equal(t, uint64(2), h.Executions[1].ExecutionID)
	first := h.Executions[0]
	require.Equal(t, "OrchestrationContinuedAsNew", first.Events[len(first.Events)-1].Kind)
	require.Equal(t, json.RawMessage("1"), first.Events[len(first.Events)-1].Input)
	require.Equal(t, httpapi.SpanContinueAsNew, first.Spans[len(first.Spans)-1].Kind)
	second := len(h.Executions[1].Events)

	_, h = f.history(t, "/v1/instances/a1/history?limit="+itoa(second))
	require.True(t, h.Truncated)
	require.Len(t, h.Executions, 1, "the newest execution only")
	require.Equal(t, uint64(2), h.Executions[0].ExecutionID)

	_, h = f.history(t, "/v1/instances/a1/history?limit="+itoa(second+1))
	require.True(t, h.Truncated)
	require.Len(t, h.Executions, 2)
	require.Len(t, h.Executions[0].Events, 1, "the older execution cut after its first event")
	require.Equal(t, "OrchestrationStarted", h.Executions[0].Events[0].Kind)

	_, h = f.history(t, "/v1/instances/a1/history?executionId=1")
	require.False(t, h.Truncated)
	require.Len(t, h.Executions, 1)
	require.Equal(t, uint64(1), h.Executions[0].ExecutionID)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestDashboardRoles: the history and engine routes need Durafeed.Reader;
// /v1/me any valid token.
func TestDashboardRoles(t *testing.T) {
	t.Parallel()
	f, _ := authFixture(t)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Wait","instanceId":"w"}`, bearer("operator")...).status)
	require.Eventually(t, func() bool {
		return f.do(t, "GET", "/v1/instances/w", "", bearer("reader")...).status == http.StatusOK
	}, hang, 5*time.Millisecond)
	for _, tc := range []struct {
		path   string
		header []string
		status int
	}{
		{"/v1/instances/w/history", nil, http.StatusUnauthorized},
		{"/v1/instances/w/history", bearer("forged"), http.StatusUnauthorized},
		{"/v1/instances/w/history", bearer("norole"), http.StatusForbidden},
		{"/v1/instances/w/history", bearer("reader"), http.StatusOK},
		{"/v1/instances/w/history?force=true", bearer("operator"), http.StatusForbidden},
		{"/v1/engine", nil, http.StatusUnauthorized},
		{"/v1/engine", bearer("norole"), http.StatusForbidden},
		{"/v1/engine", bearer("reader"), http.StatusNotImplemented}, // past the check: the in-memory provider has no view
		{"/v1/me", nil, http.StatusUnauthorized},
		{"/v1/me", bearer("forged"), http.StatusUnauthorized},
		{"/v1/me", bearer("down"), http.StatusServiceUnavailable},
		{"/v1/me", bearer("norole"), http.StatusOK},
	} {
		a := f.do(t, "GET", tc.path, "", tc.header...)
		require.Equal(t, tc.status, a.status, "%s %v: %s", tc.path, tc.header, a.raw)
	}
	a := f.do(t, "POST", "/v1/me", "", bearer("reader")...)
	require.Equal(t, http.StatusMethodNotAllowed, a.status)
	require.Equal(t, "GET", a.header.Get("Allow"))
}

func TestMe(t *testing.T) {
	t.Parallel()
	open := newFixture(t, nil)
	a := open.do(t, "GET", "/v1/me", "")
	require.Equal(t, http.StatusOK, a.status)
	require.JSONEq(t, `{"authenticated":false,"roles":["Durafeed.Reader","Durafeed.Operator","Durafeed.Admin"]}`, a.raw,
		"without an Authenticator everyone may do everything")

	f, _ := authFixture(t)
	for _, tc := range []struct{ token, want string }{
		{"norole", `{"authenticated":true,"roles":[],"subject":"norole-oid"}`},
		{"reader", `{"authenticated":true,"roles":["Durafeed.Reader"],"subject":"reader-oid"}`},
		{"operator", `{"authenticated":true,"roles":["Durafeed.Reader","Durafeed.Operator"],"subject":"operator-oid"}`},
		{"admin", `{"authenticated":true,"roles":["Durafeed.Reader","Durafeed.Operator","Durafeed.Admin"],"subject":"admin-oid","name":"Ada Admin"}`},
	} {
		a := f.do(t, "GET", "/v1/me", "", bearer(tc.token)...)
		require.Equal(t, http.StatusOK, a.status, a.raw)
		require.JSONEq(t, tc.want, a.raw, tc.token)
	}
}

// inspected is a provider with a fixed cluster view.
type inspected struct {
	durable.Provider
	view durable.ClusterView
	err  error
}

func (p inspected) InspectCluster(context.Context) (durable.ClusterView, error) { return p.view, p.err }

func TestEngineView(t *testing.T) {
	t.Parallel()
	seen := time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	event := durable.ClusterView{Mode: durable.DispatchEventDriven, Replica: "ra", ObservedAt: seen,
		Replicas: []durable.ClusterReplica{
			{ID: "ra", Host: "pod-a", LastHeartbeat: seen, State: "live", Live: true, Leases: 1, Self: true},
			{ID: "rb", State: "expired"},
		},
		Leases: []durable.ClusterLease{
			{FirstSlot: 0, LastSlot: 127, Owner: "ra", Since: seen, Epoch: 3},
			{FirstSlot: 128, LastSlot: 255, Epoch: 4},
		},
		Feed: &durable.ClusterFeed{Heads: 2, DueOrchestrator: 1, DueWorker: 3, Later: 4, FeedDelivered: 5, SweepDelivered: 6, Catchups: 7},
	}
	pending, lag := int64(9), 0.25
	figures := httpapi.EngineFigures{Replica: "service-name",
		Requests:      &httpapi.RequestRates{RUPerMin: 120.5, ThrottledPerMin: 1, RequestsPerMin: 60, WindowSeconds: 60},
		WakeLatencyMs: &httpapi.LatencyQuantiles{P50: 3.5, P99: 40}, FeedPendingChanges: &pending, FeedLagSeconds: &lag}
	serve := func(view durable.ClusterView, err error) *fixture {
		return newFixtureOf(t, fixtureOpts{
			wrap:   func(p durable.Provider) durable.Provider { return inspected{Provider: p, view: view, err: err} },
			mutate: func(o *httpapi.Options) { o.EngineFigures = func() httpapi.EngineFigures { return figures } },
		})
	}

	a := serve(event, nil).do(t, "GET", "/v1/engine", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.JSONEq(t, `{
		"mode": "event-driven",
		"replica": "ra",
		"observedAt": "2026-01-02T03:04:05.678Z",
		"replicas": [
			{"id":"ra","host":"pod-a","lastHeartbeat":"2026-01-02T03:04:05.678Z","state":"live","live":true,"leases":1,"self":true},
			{"id":"rb","state":"expired","live":false,"leases":0,"self":false}
		],
		"leases": [
			{"range":"0-127","owner":"ra","since":"2026-01-02T03:04:05.678Z","epoch":3},
			{"range":"128-255","owner":"","epoch":4}
		],
		"feed": {"pendingChanges":9,"lagSeconds":0.25,"heads":2,"dueWakeups":{"orchestrator":1,"worker":3},"laterWakeups":4,
			"intentsDelivered":5,"intentsSwept":6,"catchups":7},
		"wakeLatencyMs": {"p50":3.5,"p99":40},
		"requests": {"ruPerMin":120.5,"throttledPerMin":1,"requestsPerMin":60,"windowSeconds":60}
	}`, a.raw)

	a = serve(durable.ClusterView{Mode: durable.DispatchPolling, ObservedAt: seen, Note: "polling mode: no leases"}, nil).do(t, "GET", "/v1/engine", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.JSONEq(t, `{"mode":"polling","replica":"service-name","observedAt":"2026-01-02T03:04:05.678Z","replicas":[],"leases":[],
		"note":"polling mode: no leases","wakeLatencyMs":{"p50":3.5,"p99":40},
		"requests":{"ruPerMin":120.5,"throttledPerMin":1,"requestsPerMin":60,"windowSeconds":60}}`, a.raw,
		"the service names the replica the provider does not")

	a = serve(durable.ClusterView{}, durable.Retryable("inspect_cluster", errors.New("throttled"), "busy")).do(t, "GET", "/v1/engine", "")
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.raw)

	a = newFixture(t, nil).do(t, "GET", "/v1/engine", "")
	require.Equal(t, http.StatusNotImplemented, a.status, a.raw)
	require.Equal(t, "no_engine_view", a.code())
}

// TestListFiltersAndCustomStatus: rows carry the custom status; the
// creation-time and name filters combine with the status; a name filter
// must be a valid name.
func TestListFiltersAndCustomStatus(t *testing.T) {
	t.Parallel()
	f := newFixtureOf(t, fixtureOpts{register: registerJourney})
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Echo","instanceId":"old"}`).status)
	require.Equal(t, "Completed", f.do(t, "GET", "/v1/instances/old?wait=20s", "").body["state"])
	// The next start must be created in a later millisecond than this one.
	listed := f.do(t, "GET", "/v1/instances", "").body["instances"].([]any)
	require.Len(t, listed, 1)
	oldAt, err := time.Parse(time.RFC3339Nano, listed[0].(map[string]any)["createdAt"].(string))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return time.Now().After(oldAt.Add(time.Millisecond)) }, 10*time.Second, time.Millisecond)
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Status","instanceId":"new"}`).status)
	f.running(t, "new")

	rows := func(query string) []map[string]any {
		t.Helper()
		a := f.do(t, "GET", "/v1/instances"+query, "")
		require.Equal(t, http.StatusOK, a.status, a.raw)
		var out []map[string]any
		for _, r := range a.body["instances"].([]any) {
			out = append(out, r.(map[string]any))
		}
		return out
	}
	all := rows("")
	require.Len(t, all, 2)
	require.Equal(t, "new", all[0]["instanceId"], "newest first")
	require.Equal(t, "half", all[0]["customStatus"])
	require.Equal(t, "Running", all[0]["status"])
	require.Equal(t, "Status", all[0]["name"])
	require.NotEmpty(t, all[0]["createdAt"])
	require.NotEmpty(t, all[0]["updatedAt"])
	require.NotContains(t, all[1], "customStatus", "none set")

	newAt := url.QueryEscape(all[0]["createdAt"].(string))
	ids := func(rs []map[string]any) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r["instanceId"].(string))
		}
		return out
	}
	require.Equal(t, []string{"new"}, ids(rows("?createdFrom="+newAt)))
	require.Equal(t, []string{"old"}, ids(rows("?createdTo="+newAt)))
	require.Empty(t, ids(rows("?status=Completed&createdFrom="+newAt)))
	require.Equal(t, []string{"new"}, ids(rows("?status=Running&createdFrom=2000-01-01T00:00:00Z&createdTo=2100-01-01T00:00:00Z")))

	// By name: exact, ANDed with the others, paged like any list.
	require.Equal(t, []string{"old"}, ids(rows("?name=Echo")))
	require.Equal(t, []string{"new"}, ids(rows("?name=Status")))
	require.Empty(t, ids(rows("?name=status")), "case-sensitive")
	require.Empty(t, ids(rows("?name=Stat")), "no prefix match")
	require.Empty(t, ids(rows("?name=Journey")))
	require.Empty(t, ids(rows("?name=Status&status=Completed")))
	require.Equal(t, []string{"new"}, ids(rows("?name=Status&status=Running&createdFrom="+newAt)))
	require.Empty(t, ids(rows("?name=Echo&createdFrom="+newAt)))
	require.Equal(t, []string{"old"}, ids(rows("?name=Echo&createdTo="+newAt)))
	require.Equal(t, http.StatusCreated, f.do(t, "POST", "/v1/instances", `{"name":"Status","instanceId":"newer"}`).status)
	f.running(t, "newer")
	a := f.do(t, "GET", "/v1/instances?name=Status&pageSize=1", "")
	require.Equal(t, http.StatusOK, a.status, a.raw)
	require.Len(t, a.body["instances"], 1)
	require.Equal(t, "newer", a.body["instances"].([]any)[0].(map[string]any)["instanceId"])
	tok, _ := a.body["continuationToken"].(string)
	require.NotEmpty(t, tok, "a second page")
	require.Equal(t, []string{"new"}, ids(rows("?name=Status&pageSize=1&continuationToken="+tok)))

	require.Empty(t, ids(rows("?name="+strings.Repeat("n", httpapi.MaxNameBytes))), "the longest name is valid")
	for _, q := range []string{"name=", "status=Running&name=", "name=" + strings.Repeat("n", httpapi.MaxNameBytes+1), "name=%FF"} {
		a := f.do(t, "GET", "/v1/instances?"+q, "")
		require.Equal(t, http.StatusBadRequest, a.status, q)
		require.Equal(t, "invalid_name", a.code(), q)
	}

	for _, q := range []string{"createdFrom=yesterday", "createdTo=2026-13-01T00:00:00Z", "createdFrom=" + newAt + "&createdTo=" + newAt} {
		a := f.do(t, "GET", "/v1/instances?"+q, "")
		require.Equal(t, http.StatusBadRequest, a.status, q)
		require.Equal(t, "invalid_created_range", a.code(), q)
	}
}
