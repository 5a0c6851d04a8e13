package cosmosemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
)

// AdminPathPrefix is the reserved path prefix of the emulator's admin
// surface (see Options.Admin). Paths under it are served without Cosmos DB
// authentication.
const AdminPathPrefix = "/_emulator/"

const maxAdminBody = 1 << 20

// isAdminPath reports whether a request addresses the admin surface.
func isAdminPath(p string) bool {
	return strings.HasPrefix(p, AdminPathPrefix) || p == strings.TrimSuffix(AdminPathPrefix, "/")
}

// newAdminHandler builds the handler mounted under AdminPathPrefix (the
// prefix is stripped before it runs). The emulator's own operations are
//
//	POST /split   {"database":"db","container":"c","range":"0"}
//	              → 200 {"parent":"0","children":["4","5"]}; 404 unknown
//	              database, container or range; 409 range too narrow
//	GET  /ranges?database=db&container=c
//	              → 200 [{"id","minInclusive","maxExclusive","parents"}]
//	GET  /identity/token?resource=...&api-version=2019-08-01
//	              → the managed-identity token endpoint (IdentityOptions),
//	              when Options.Identity is set
//
// and every other path goes to next (Options.Admin), or answers 404 when
// next is nil. Errors answer {"error":"..."}.
func (s *Server) newAdminHandler(next http.Handler) http.Handler {
	own := func(w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case strings.TrimPrefix(IdentityPath, strings.TrimSuffix(AdminPathPrefix, "/")):
			if s.opts.Identity == nil {
				return false
			}
			s.serveIdentityToken(w, r)
			return true
		case "/split":
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				adminError(w, http.StatusMethodNotAllowed, errors.New("use POST"))
				return true
			}
			s.adminSplit(w, r)
			return true
		case "/ranges":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				adminError(w, http.StatusMethodNotAllowed, errors.New("use GET"))
				return true
			}
			q := r.URL.Query()
			ranges, err := s.PartitionKeyRanges(q.Get("database"), q.Get("container"))
			if err != nil {
				adminError(w, adminStatus(err), err)
				return true
			}
			adminJSON(w, http.StatusOK, ranges)
			return true
		}
		return false
	}
	return http.StripPrefix(strings.TrimSuffix(AdminPathPrefix, "/"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if own(w, r) {
			return
		}
		if next == nil {
			adminError(w, http.StatusNotFound, errors.New("unknown admin path "+r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	}))
}

func (s *Server) adminSplit(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Database  string `json:"database"`
		Container string `json:"container"`
		Range     string `json:"range"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		adminError(w, http.StatusBadRequest, errors.New("invalid body: "+err.Error()))
		return
	}
	if body.Database == "" || body.Container == "" || body.Range == "" {
		adminError(w, http.StatusBadRequest, errors.New(`"database", "container" and "range" are required`))
		return
	}
	children, err := s.SplitPartition(r.Context(), body.Database, body.Container, body.Range)
	if err != nil {
		adminError(w, adminStatus(err), err)
		return
	}
	adminJSON(w, http.StatusOK, map[string]any{"parent": body.Range, "children": children})
}

func adminStatus(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrCannotSplit):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

func adminJSON(w http.ResponseWriter, status int, v any) {
	writeJSONAs(w, status, "application/json", v)
}

// writeJSONAs answers v as JSON (HTML characters unescaped) with the
// given content type.
func writeJSONAs(w http.ResponseWriter, status int, contentType string, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func adminError(w http.ResponseWriter, status int, err error) {
	adminJSON(w, status, map[string]string{"error": err.Error()})
}
