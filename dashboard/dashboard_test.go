package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/dashboard"
)

func get(t *testing.T, h http.Handler, method, path string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// TestAssets: each asset with its type, the security headers, an ETag
// that answers 304; the redirect of /ui; 404 for anything else.
func TestAssets(t *testing.T) {
	t.Parallel()
	h := dashboard.Handler()
	security := func(resp *http.Response, what string) {
		t.Helper()
		require.Equal(t, dashboard.ContentSecurityPolicy, resp.Header.Get("Content-Security-Policy"), what)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'", what)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), what)
		require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"), what)
	}
	etags := map[string]bool{}
	for path, ct := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/index.html":  "text/html; charset=utf-8",
		"/ui/app.js":      "text/javascript; charset=utf-8",
		"/ui/style.css":   "text/css; charset=utf-8",
		"/ui/favicon.svg": "image/svg+xml",
	} {
		resp, body := get(t, h, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, ct, resp.Header.Get("Content-Type"), path)
		require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), path)
		require.NotEmpty(t, body, path)
		security(resp, path)
		etag := resp.Header.Get("ETag")
		require.Regexp(t, `^"[0-9a-f]{32}"$`, etag, path)
		etags[etag] = true

		resp, body = get(t, h, http.MethodGet, path, map[string]string{"If-None-Match": etag})
		require.Equal(t, http.StatusNotModified, resp.StatusCode, path)
		require.Empty(t, body, path)
		resp, _ = get(t, h, http.MethodGet, path, map[string]string{"If-None-Match": `"stale"`})
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		resp, body = get(t, h, http.MethodHead, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Empty(t, body, path)
	}
	require.Len(t, etags, 4, "one ETag per content (/ui/ is index.html)")

	resp, _ := get(t, h, http.MethodGet, "/ui", nil)
	require.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	require.Equal(t, "ui/", resp.Header.Get("Location"), "relative: a path prefix in front survives")
	security(resp, "redirect")

	for _, path := range []string{"/ui/nothing.js", "/ui/static/app.js", "/ui/../go.mod", "/other", "/uix"} {
		resp, _ := get(t, h, http.MethodGet, path, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		security(resp, path)
	}
	resp, _ = get(t, h, http.MethodPost, "/ui/", nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
}

// TestPageKeepsThePolicy: the page works under its policy and keeps the
// token where it belongs: no inline script, style or event handler, no
// external origin, nothing written to the console, no localStorage or
// cookie, no markup built from strings.
func TestPageKeepsThePolicy(t *testing.T) {
	t.Parallel()
	h := dashboard.Handler()
	_, page := get(t, h, http.MethodGet, "/ui/", nil)
	for _, m := range regexp.MustCompile(`(?is)<script\b[^>]*>(.*?)</script>`).FindAllStringSubmatch(page, -1) {
		require.Contains(t, m[0], ` src="`, "every script is a file")
		require.Empty(t, strings.TrimSpace(m[1]), "no inline script")
	}
	require.NotRegexp(t, `(?i)<style\b`, page, "no inline style sheet")
	require.NotRegexp(t, `(?i)\sstyle\s*=`, page, "no style attribute")
	require.NotRegexp(t, `(?i)\son[a-z]+\s*=`, page, "no inline event handler")
	require.NotRegexp(t, `(?i)(src|href)\s*=\s*"(https?:)?//`, page, "no external origin")
	require.Contains(t, page, `<script type="module" src="app.js"></script>`)
	require.Contains(t, page, `<meta name="viewport" content="width=device-width, initial-scale=1">`)

	_, js := get(t, h, http.MethodGet, "/ui/app.js", nil)
	js = regexp.MustCompile(`(?m)^\s*//.*$|/\*.*?\*/`).ReplaceAllString(js, "") // the code, not its comments
	for _, banned := range []string{"console.", "localStorage", "document.cookie", "innerHTML", "outerHTML", "insertAdjacentHTML",
		"document.write", "eval(", "new Function", "setAttribute('style'", "http://", "https://"} {
		require.False(t, strings.Contains(js, banned), "app.js uses %s", banned)
	}
	require.Contains(t, js, "sessionStorage")
	_, css := get(t, h, http.MethodGet, "/ui/style.css", nil)
	require.NotRegexp(t, `(?i)url\(|@import`, css, "no external resource in the style sheet")
}
