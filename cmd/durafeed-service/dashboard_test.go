package main

// The dashboard's browser tests: the whole service in-process on an
// embedded emulator, with authentication on through a local token
// issuer, driven by a real headless Chromium over the DevTools protocol
// (chromedp). They wait on the page's DOM, never for a fixed time. With
// DURAFEED_SCREENSHOTS=<dir> they save PNGs of the three views there
// (instances, instance, engine), and of an instance at a phone's width.

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp/jsonv2"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/httpauth/httpauthtest"
)

// noChrome is the reason the browser tests skip on a machine without a
// browser.
const noChrome = "no Chromium found (install the Debian package chromium or set DURAFEED_CHROME)"

// findChrome returns the browser to drive: $DURAFEED_CHROME (a name or a
// path; set but not found fails the test: it was asked for), else the
// first of chromium, chromium-browser and google-chrome on PATH. Without
// one the test is skipped.
func findChrome(t *testing.T) string {
	t.Helper()
	if want := os.Getenv("DURAFEED_CHROME"); want != "" {
		p, err := exec.LookPath(want)
		require.NoError(t, err, "DURAFEED_CHROME=%q", want)
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip(noChrome)
	return ""
}

// browser is one headless Chromium with one tab, and what the tab
// reported: console messages, exceptions and browser log entries (as
// the protocol's JSON), and the URLs it requested (as sent: a fragment
// never leaves the browser).
type browser struct {
	ctx context.Context // the tab, under a deadline that only catches hangs

	mu         sync.Mutex
	console    []string
	exceptions int
	requests   []string
}

// newBrowser starts Chromium (--headless=new, a temporary profile
// removed after the test) with a width×height window.
func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	bin := findChrome(t)
	profile := t.TempDir() // removed after the browser has exited (cleanups run last-in first-out)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to start its sandbox as root (CI and containers
		// run as root); as any other user the sandbox stays on.
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{}
	tab, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithListener(b.listen))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser to exit
	})
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Logf("the page's console:\n%s", strings.Join(b.console, "\n"))
		}
	})
	// The first run starts the browser; it gets no deadline, which would
	// bind the browser's life to it.
	require.NoError(t, chromedp.Do(tab), "start Chromium")
	ctx, cancel := context.WithTimeout(tab, 2*hang)
	t.Cleanup(cancel)
	b.ctx = ctx
	return b
}

// listen runs in the tab's event loop: it records and returns at once.
func (b *browser) listen(ev any) {
	switch ev := ev.(type) {
	case *cdpruntime.EventConsoleAPICalled, *cdpruntime.EventExceptionThrown, *cdplog.EventEntryAdded:
		j, err := jsonv2.Marshal(ev)
		if err != nil {
			j = []byte(err.Error())
		}
		b.mu.Lock()
		b.console = append(b.console, string(j))
		if _, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			b.exceptions++
		}
		b.mu.Unlock()
	case *network.EventRequestWillBeSent:
		b.mu.Lock()
		b.requests = append(b.requests, ev.Request.URL) // what leaves the browser: no fragment
		b.mu.Unlock()
	}
}

func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(b.ctx, steps...), what)
}

func value[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, a)
	require.NoError(t, err, what)
	return v
}

// eval evaluates a JavaScript expression in the page, awaiting a promise.
func eval[T any](t *testing.T, b *browser, what, js string) T {
	t.Helper()
	return value(t, b, what, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// ready waits until the page shows view with its first answer rendered.
func (b *browser) ready(t *testing.T, view string) {
	t.Helper()
	b.do(t, "the "+view+" view", chromedp.WaitVisible(chromedp.CSS(`main[data-view="`+view+`"][data-ready]`)))
}

// screenshot saves the page as dir/name.png when DURAFEED_SCREENSHOTS is
// set.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("DURAFEED_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := value(t, b, "screenshot "+name, chromedp.FullScreenshot(100))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// noTokenAnywhere checks that the token never reached the page's
// address (now or in the tab's history), a request URL, the console,
// localStorage or a cookie; and that the page threw no uncaught error.
func (b *browser) noTokenAnywhere(t *testing.T, token string) {
	t.Helper()
	require.NotContains(t, value(t, b, "location", chromedp.Location()), token, "the token is not in the address bar")
	hist := value(t, b, "history", chromedp.NavigationEntries())
	for _, e := range hist.Entries {
		require.NotContains(t, e.URL, token, "the token is in no history entry")
	}
	require.Equal(t, "", eval[string](t, b, "cookies", `document.cookie`), "no cookie")
	require.Equal(t, 0, eval[int](t, b, "localStorage", `localStorage.length`), "nothing in localStorage")
	sig := token[strings.LastIndexByte(token, '.')+1:]
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Zero(t, b.exceptions, "no uncaught error in the page")
	for _, u := range b.requests {
		require.NotContains(t, u, sig, "the token is in no request URL")
	}
	for _, m := range b.console {
		require.NotContains(t, m, sig, "the token is in no console message")
	}
}

// dashboardService starts the service with authentication through a
// local issuer, sampling its figures (GET /v1/engine) every 100 ms;
// token returns a token holding role.
func dashboardService(t *testing.T) (base string, token func(role string) string, stop func() error) {
	t.Helper()
	iss := httpauthtest.NewIssuer(t)
	base, stop = startServiceWith(t, map[string]string{"DURAFEED_AUTH_ISSUER": iss.URL, "DURAFEED_AUTH_AUDIENCE": testAudience,
		"DURAFEED_DRAIN": "0s"}, zap.NewNop(), &hooks{sampleEvery: 100 * time.Millisecond})
	token = func(role string) string {
		return iss.Token(t, httpauthtest.Claims{Audience: []string{testAudience}, Subject: "ui-" + strings.ToLower(strings.TrimPrefix(role, "Durafeed.")),
			ObjectID: "oid-ui", Roles: []string{role}})
	}
	return base, token, stop
}

// startInstance starts an orchestration over the API and waits until
// it is visible (its first turn ran).
func startInstance(t *testing.T, base, token, id, body string) {
	t.Helper()
	s, _, resp := call(t, "POST", base+"/v1/instances", token, body)
	require.Equal(t, http.StatusCreated, s, "%v", resp)
	require.Eventually(t, func() bool {
		s, _, _ := call(t, "GET", base+"/v1/instances/"+id, token, "")
		return s == http.StatusOK
	}, hang, 10*time.Millisecond, "%s becomes visible", id)
}

// TestDashboardOperatorFlow: an operator opens the dashboard with a
// token in the URL fragment (moved to sessionStorage, gone from the
// address bar), sees an Approval in the list (filtered by creation time,
// then by name: the API's filter), opens it, sees its
// timeline (the first turn; the wait for "decision", bounded by a timer
// still pending, drawn open-ended), raises the event
// from the page's dialog (keyboard: Escape closes it, Tab stays in it;
// an API error shows inline with its code), and sees it complete; then
// the engine view.
func TestDashboardOperatorFlow(t *testing.T) {
	findChrome(t)
	base, token, stop := dashboardService(t)
	operator := token("Durafeed.Operator")
	startInstance(t, base, operator, "ui-approval-1", `{"name":"Approval","input":{"item":"laptop"},"instanceId":"ui-approval-1"}`)
	startInstance(t, base, operator, "ui-fanout-1", `{"name":"FanOut","input":{"count":5},"instanceId":"ui-fanout-1"}`)
	startInstance(t, base, operator, "ui-greet-1", `{"name":"Greet","input":{"name":"Ada"},"instanceId":"ui-greet-1"}`)
	startInstance(t, base, operator, "ui-bad-1", `{"name":"Approval","input":{"item":"desk","timeout":"soon"},"instanceId":"ui-bad-1"}`)
	for _, id := range []string{"ui-fanout-1", "ui-greet-1", "ui-bad-1"} {
		s, _, body := call(t, "GET", base+"/v1/instances/"+id+"?wait=50s", operator, "")
		require.Equal(t, http.StatusOK, s)
		require.Contains(t, []any{"Completed", "Failed"}, body["state"], id)
	}

	b := newBrowser(t, 1280, 900)
	b.do(t, "open the dashboard", chromedp.Navigate(base+"/ui/#token="+operator))
	b.ready(t, "instances")
	row := `#instances-table a[href="#/instances/ui-approval-1"]`
	b.do(t, "the Approval in the list", chromedp.WaitVisible(chromedp.CSS(row)))
	require.Equal(t, base+"/ui/#/instances", value(t, b, "location", chromedp.Location()), "the token left the address bar")
	require.Equal(t, operator, eval[string](t, b, "sessionStorage", `sessionStorage.getItem('durafeed.token')`))
	require.Equal(t, "Operator", value(t, b, "role", chromedp.Text(chromedp.ID("who-role"))))
	state := value(t, b, "row state", chromedp.AttributeValue(chromedp.CSS(`#instances-table tr[data-id="ui-approval-1"] .badge`), "data-state"))
	require.Equal(t, "Running", state.Value)
	b.do(t, "the other rows", chromedp.WaitVisible(chromedp.CSS(`#instances-table tr[data-id="ui-bad-1"] .badge[data-state="Failed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#instances-table tr[data-id="ui-greet-1"] .badge[data-state="Completed"]`)))
	b.screenshot(t, "instances")

	// The creation-time filter reaches the API: created before an hour ago
	// lists none of the run's instances, created since then lists them.
	hourAgo := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	b.do(t, "created before an hour ago", chromedp.Navigate(base+"/ui/#/instances?createdTo="+hourAgo))
	b.ready(t, "instances")
	require.Equal(t, localMinutes(hourAgo), value(t, b, "the filter's input", chromedp.Value(chromedp.ID("filter-to"))))
	require.Zero(t, eval[int](t, b, "rows", `document.querySelectorAll('#instances-table tr[data-id]').length`))
	b.do(t, "created since an hour ago", chromedp.Navigate(base+"/ui/#/instances?createdFrom="+hourAgo))
	b.ready(t, "instances")
	b.do(t, "the Approval in the filtered list", chromedp.WaitVisible(chromedp.CSS(row)))

	// The name filter reaches the API (the page filters nothing itself):
	// Approval lists the two Approvals, not the Greet or the FanOut.
	greet := `#instances-table tr[data-id="ui-greet-1"]`
	b.do(t, "filter by name", chromedp.WaitVisible(chromedp.CSS(greet)),
		chromedp.SetValue(chromedp.ID("filter-name"), "Approval"), chromedp.Click(chromedp.ID("filter-apply")),
		chromedp.WaitNotPresent(chromedp.CSS(greet)))
	b.ready(t, "instances")
	b.do(t, "the Approvals by name", chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS(`#instances-table tr[data-id="ui-bad-1"]`)))
	require.Contains(t, value(t, b, "location", chromedp.Location()), "name=Approval")
	require.Equal(t, []string{"ui-approval-1", "ui-bad-1"}, eval[[]string](t, b, "rows",
		`[...document.querySelectorAll('#instances-table tr[data-id]')].map(r => r.dataset.id).sort()`))
	b.mu.Lock()
	asked := false
	for _, u := range b.requests {
		asked = asked || (strings.Contains(u, "/v1/instances?") && strings.Contains(u, "name=Approval"))
	}
	b.mu.Unlock()
	require.True(t, asked, "the page asks the API for the name")

	// The instance: header, timeline with the first turn and the pending wait.
	b.do(t, "open the Approval", chromedp.Click(chromedp.CSS(row)))
	b.ready(t, "instance")
	wait := `#timeline li.span[data-kind="timer"][data-status="pending"]`
	b.do(t, "its header and timeline",
		chromedp.WaitVisible(chromedp.CSS(`#instance-state[data-state="Running"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.span[data-kind="turn"][data-status="completed"]`)),
		chromedp.WaitVisible(chromedp.CSS(wait+` .bar.open`)))
	require.Equal(t, "Approval", value(t, b, "name", chromedp.Text(chromedp.ID("instance-name"))))
	require.Equal(t, "waiting for a decision", value(t, b, "custom status", chromedp.Text(chromedp.ID("instance-custom-status"))))
	require.Contains(t, value(t, b, "the wait's row", chromedp.Text(chromedp.CSS(wait))), "1h0m0s")
	require.Contains(t, value(t, b, "the wait's row", chromedp.Text(chromedp.CSS(wait))), "fires in 59 min")
	require.Contains(t, value(t, b, "the input", chromedp.Text(chromedp.ID("block-input"))), `"item": "laptop"`)
	b.screenshot(t, "instance")

	// The raise dialog by keyboard: Escape closes it and gives focus back;
	// Tab from its last control wraps to its first.
	b.do(t, "open the dialog", chromedp.Click(chromedp.ID("action-raise")), chromedp.WaitVisible(chromedp.ID("raise-name")))
	require.Equal(t, "raise-name", eval[string](t, b, "focus in the dialog", `document.activeElement.id`))
	b.do(t, "Escape", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(chromedp.ID("raise-dialog")))
	require.Equal(t, "action-raise", eval[string](t, b, "focus back", `document.activeElement.id`))
	b.do(t, "open again", chromedp.Click(chromedp.ID("action-raise")), chromedp.WaitVisible(chromedp.ID("raise-name")),
		chromedp.Focus(chromedp.ID("raise-submit")), chromedp.KeyEvent(kb.Tab))
	require.Equal(t, "raise-name", eval[string](t, b, "Tab wraps", `document.activeElement.id`))

	// A refused request shows the API's code inline and changes nothing.
	b.do(t, "a name the API refuses", chromedp.SetValue(chromedp.ID("raise-name"), strings.Repeat("n", 1025)),
		chromedp.Click(chromedp.ID("raise-submit")), chromedp.WaitVisible(chromedp.CSS(`#raise-error [data-code="invalid_name"]`)))
	require.Contains(t, value(t, b, "the error", chromedp.Text(chromedp.ID("raise-error"))), "400 invalid_name")

	// The decision: the instance completes on the page.
	b.do(t, "raise the decision",
		chromedp.Evaluate[chromedp.Void](`document.getElementById('raise-name').value = ''`), chromedp.SendKeys(chromedp.ID("raise-name"), "decision"),
		chromedp.SetValue(chromedp.ID("raise-data"), `{"approved": true, "by": "ui"}`),
		chromedp.Click(chromedp.ID("raise-submit")),
		chromedp.WaitNotPresent(chromedp.ID("raise-dialog")),
		chromedp.WaitVisible(chromedp.CSS(`#instance-state[data-state="Completed"]`)),
		chromedp.WaitNotPresent(chromedp.ID("action-raise")),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.span[data-kind="event"][data-status="completed"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline li.span[data-kind="timer"][data-status="cancelled"]`)))
	require.Contains(t, value(t, b, "the event's row", chromedp.Text(chromedp.CSS(`#timeline li.span[data-kind="event"]`))), "decision")
	out := value(t, b, "output", chromedp.Text(chromedp.ID("block-output")))
	require.Contains(t, out, `"approved": true`)
	require.Contains(t, out, `"by": "ui"`)
	s, _, body := call(t, "GET", base+"/v1/instances/ui-approval-1", operator, "")
	require.Equal(t, http.StatusOK, s)
	require.Equal(t, "Completed", body["state"], "the API agrees")

	// The engine.
	b.do(t, "the engine", chromedp.Click(chromedp.CSS(`a[data-nav="engine"]`)))
	b.ready(t, "engine")
	b.do(t, "its mode", chromedp.WaitVisible(chromedp.ID("engine-mode")))
	require.Equal(t, "event-driven", eval[string](t, b, "mode", `document.getElementById('engine-mode').textContent`))
	b.do(t, "this replica in the table", chromedp.WaitVisible(chromedp.CSS(`#replicas-table tr.self`)),
		chromedp.WaitVisible(chromedp.CSS(`#leases-table tbody tr:nth-child(8)`)))
	// The request rates come from the service's sampler: the page shows
	// them once it has two samples (every 100 ms here, refreshed every 2 s).
	b.do(t, "the rates", chromedp.WaitVisible(chromedp.CSS(`#engine-ru[data-known]`)), chromedp.WaitVisible(chromedp.CSS(`#engine-requests[data-known]`)))
	b.screenshot(t, "engine")

	b.noTokenAnywhere(t, operator)
	require.NoError(t, stop())
}

// TestDashboardReaderCannotAct: a reader signs in through the token
// field; the page offers no raise, cancel or delete; the same requests
// forged from the page with the reader's token get 403 and change
// nothing; the token reaches no URL or console; sign-out forgets it.
func TestDashboardReaderCannotAct(t *testing.T) {
	findChrome(t)
	base, token, stop := dashboardService(t)
	reader, operator := token("Durafeed.Reader"), token("Durafeed.Operator")
	startInstance(t, base, operator, "ui-reader-1", `{"name":"Approval","input":{"item":"chair"},"instanceId":"ui-reader-1"}`)

	b := newBrowser(t, 1280, 900)
	b.do(t, "open the dashboard", chromedp.Navigate(base+"/ui"))
	require.Equal(t, base+"/ui/", value(t, b, "redirected", chromedp.Location()))
	b.ready(t, "signin")
	b.do(t, "sign in", chromedp.SetValue(chromedp.ID("token-input"), reader), chromedp.Click(chromedp.ID("token-submit")))
	b.ready(t, "instances")
	require.Equal(t, "Reader", value(t, b, "role", chromedp.Text(chromedp.ID("who-role"))))

	b.do(t, "open the instance", chromedp.Click(chromedp.CSS(`#instances-table a[href="#/instances/ui-reader-1"]`)))
	b.ready(t, "instance")
	b.do(t, "its state", chromedp.WaitVisible(chromedp.CSS(`#instance-state[data-state="Running"]`)),
		chromedp.WaitVisible(chromedp.ID("action-refresh")))
	require.Equal(t, 0, eval[int](t, b, "actions", `document.querySelectorAll('[data-action], #action-raise, #action-cancel, #action-delete').length`),
		"no raise, cancel or delete for a reader")

	// Forged from the page, with the reader's own token: refused.
	statuses := eval[[]int](t, b, "forged requests", `(async () => {
		const auth = {Authorization: 'Bearer ' + sessionStorage.getItem('durafeed.token'), 'Content-Type': 'application/json'};
		const at = '/v1/instances/' + encodeURIComponent('ui-reader-1');
		const call = async (method, path, body) => (await fetch(at + path, {method, headers: auth, body})).status;
		return [
			await call('POST', '/events/decision', '{"approved": true}'),
			await call('POST', '/cancel', '{"reason": "forged"}'),
			await call('DELETE', ''),
			await call('DELETE', '?force=true'),
			await call('GET', ''),
		];
	})()`)
	require.Equal(t, []int{http.StatusForbidden, http.StatusForbidden, http.StatusForbidden, http.StatusForbidden, http.StatusOK}, statuses)
	s, _, body := call(t, "GET", base+"/v1/instances/ui-reader-1", operator, "")
	require.Equal(t, http.StatusOK, s, "not deleted")
	require.Equal(t, "Running", body["state"], "neither decided nor cancelled")
	require.Equal(t, "waiting for a decision", body["customStatus"])

	b.noTokenAnywhere(t, reader)

	// Sign out: the token is forgotten and the API asks for one again.
	b.do(t, "sign out", chromedp.Click(chromedp.ID("sign-out")))
	b.ready(t, "signin")
	require.True(t, eval[bool](t, b, "forgotten", `sessionStorage.getItem('durafeed.token') === null`))
	require.NoError(t, stop())
}

// TestDashboardPhoneWidth: at 375×800 the instances, instance and engine
// pages fit the width: the document never scrolls sideways (the
// timeline scrolls in its own box).
func TestDashboardPhoneWidth(t *testing.T) {
	findChrome(t)
	base, token, stop := dashboardService(t)
	operator := token("Durafeed.Operator")
	startInstance(t, base, operator, "ui-phone-approval-with-a-rather-long-instance-id-0123456789",
		`{"name":"Approval","input":{"item":"phone"},"instanceId":"ui-phone-approval-with-a-rather-long-instance-id-0123456789"}`)

	b := newBrowser(t, 375, 800)
	b.do(t, "a phone's viewport", chromedp.EmulateViewport(375, 800, chromedp.EmulateMobile))
	fits := func(what string) {
		t.Helper()
		w := eval[map[string]int](t, b, "widths", `({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,
			view: document.documentElement.clientWidth})`)
		require.Equal(t, 375, w["view"], what)
		require.LessOrEqual(t, w["doc"], w["view"], "%s: the document scrolls sideways: %v", what, w)
		require.LessOrEqual(t, w["body"], w["view"], "%s: the body is wider than the screen: %v", what, w)
	}
	b.do(t, "open the dashboard", chromedp.Navigate(base+"/ui/#token="+operator))
	b.ready(t, "instances")
	b.do(t, "the row", chromedp.WaitVisible(chromedp.CSS(`#instances-table tr[data-id^="ui-phone-approval"] a`)))
	fits("instances")

	b.do(t, "open it", chromedp.Click(chromedp.CSS(`#instances-table tr[data-id^="ui-phone-approval"] a`)))
	b.ready(t, "instance")
	b.do(t, "its timeline", chromedp.WaitVisible(chromedp.CSS(`#timeline li.span`)), chromedp.WaitVisible(chromedp.ID("action-raise")))
	fits("instance")
	b.screenshot(t, "instance-phone")
	tl := eval[map[string]int](t, b, "the timeline's box", `({scroll: document.getElementById('timeline').scrollWidth,
		client: document.getElementById('timeline').clientWidth})`)
	require.Greater(t, tl["scroll"], tl["client"], "the timeline scrolls in its own box")
	b.do(t, "the raise dialog", chromedp.Click(chromedp.ID("action-raise")), chromedp.WaitVisible(chromedp.ID("raise-name")))
	fits("instance with the dialog open")
	b.do(t, "close it", chromedp.KeyEvent(kb.Escape), chromedp.WaitNotPresent(chromedp.ID("raise-dialog")))

	b.do(t, "the engine", chromedp.Click(chromedp.CSS(`a[data-nav="engine"]`)))
	b.ready(t, "engine")
	fits("engine")
	require.NoError(t, stop())
}

// localMinutes is an RFC 3339 time as a datetime-local input shows it
// (this process's local time zone, which the browser it starts shares).
func localMinutes(rfc3339 string) string {
	t, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		return ""
	}
	return t.Local().Format("2006-01-02T15:04")
}
