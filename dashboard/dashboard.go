// Package dashboard is durafeed-service's web dashboard: a small
// single-page app, plain HTML, CSS and JavaScript modules with no build
// step, embedded in the binary and served under /ui/.
//
//	GET /ui              redirect to /ui/ (relative, so that a path prefix in front survives)
//	GET /ui/             the page (index.html)
//	GET /ui/app.js       the app (a JavaScript module)
//	GET /ui/style.css    the style sheet
//	GET /ui/favicon.svg  the icon
//
// The assets hold no data, so they need no role: the page reads and acts
// through the service's JSON API (package httpapi), with the caller's
// bearer token on every request, and shows only what the API answers
// that token. The token is kept in the tab's sessionStorage only (never
// localStorage, a cookie or the URL); a token given once as the URL
// fragment #token=... is moved there and removed from the address bar.
//
// Every answer carries a strict Content-Security-Policy (default-src
// 'self', no inline script or style, no framing), X-Content-Type-Options:
// nosniff and Referrer-Policy: no-referrer. Assets are served with an
// ETag of their embedded content and Cache-Control: no-cache, so a
// browser revalidates them (304) and a new build is picked up at once.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy is the policy every answer of the handler
// carries: everything from the page's own origin, nothing inline, no
// plugins, no framing by another page, no <base> rewriting.
const ContentSecurityPolicy = "default-src 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'; form-action 'self'"

//go:embed static
var static embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// contentTypes maps the assets' extensions to their media types.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler returns the handler of the dashboard's assets. It expects the
// full request path (/ui, /ui/...): mount it at "/ui/" and "/ui".
func Handler() http.Handler {
	assets := map[string]asset{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		assets["/"+strings.TrimPrefix(p, "static/")] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		return nil
	})
	if err != nil {
		panic("dashboard: reading the embedded assets: " + err.Error()) // the build embeds them: cannot happen
	}
	assets["/"] = assets["/index.html"]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/"))
		switch {
		case ok && rest == "":
			// Relative, so that a reverse proxy's path prefix is kept.
			h.Set("Location", "ui/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		case !ok:
			http.NotFound(w, r)
			return
		}
		a, found := assets[rest]
		if !found {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}
