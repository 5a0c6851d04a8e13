package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/runtime/replay"
)

// Limits and defaults.
const (
	// DefaultMaxInputBytes is Options.MaxInputBytes' default: 800 KiB of
	// stored size (StoredSize: the payload escaped as the store embeds
	// it, a string in a work item that is itself a string in its queue
	// document). It is derived from the Cosmos DB provider's writes so
	// that every input accepted can finish: a turn's commit is one
	// transactional batch of at most 1,800 KiB holding the instance and
	// the execution records, each carrying the orchestration's output
	// (escaped once), so an output that echoes its input must stay
	// under half that; the start message, escaped twice, under the 2 MB
	// document limit. 800 KiB leaves room for an output somewhat larger
	// than its input and for the records' other fields. A turn that
	// still cannot be written (an output grown far past its input) fails
	// its orchestration at once with the store's limit in the error.
	DefaultMaxInputBytes = 800 << 10
	// MaxInstanceIDBytes is the longest instance id accepted, in UTF-8
	// bytes (the Cosmos DB provider's limit).
	MaxInstanceIDBytes = 1024
	// MaxNameBytes is the longest orchestration or event name accepted.
	MaxNameBytes = 1024
	// MaxIdempotencyKeyBytes is the longest Idempotency-Key accepted (a
	// request id's limit).
	MaxIdempotencyKeyBytes = durable.MaxRequestIDBytes
	// DefaultMaxWait is Options.MaxWait's default.
	DefaultMaxWait = time.Minute
	// DefaultPageSize and MaxPageSize bound a list page.
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// envelopeBytes is what a request body may hold beside its input.
	envelopeBytes = 64 << 10
)

// Options configures the API. Orchestrations is required.
type Options struct {
	// Orchestrations resolves orchestration names (a *runtime.Registry): a
	// start naming one it does not know is refused with 400.
	Orchestrations replay.Resolver
	// Ready reports readiness for /readyz (nil: always ready).
	Ready func() bool
	// MaxInputBytes bounds an orchestration input or event payload
	// (default DefaultMaxInputBytes); a request body may hold 64 KiB more.
	MaxInputBytes int
	// MaxWait bounds a status request's wait parameter (default
	// DefaultMaxWait).
	MaxWait time.Duration
	// Stopping, when closed, says the server is stopping: a status
	// request waiting for an instance to end answers at once with its
	// current status, and later ones do not wait (nil: never).
	Stopping <-chan struct{}
	// Logger receives request logs at Debug (no payloads; default none).
	Logger *zap.Logger
	// TracerProvider receives a server span per request, a child of the
	// caller's W3C traceparent header when it sends one; an instance
	// started by the request joins that trace (default: no spans, the
	// caller's trace context is still carried to the instance).
	TracerProvider trace.TracerProvider
	// Authenticator, when set, verifies the bearer token of every request
	// but /healthz and /readyz, before anything else is read or written;
	// the caller's roles then decide what it may do (the package
	// documentation's table: reads need RoleReader, starts, events and
	// cancels RoleOperator, deletes and forced requests RoleAdmin).
	// Default nil: no authentication, every caller may do everything.
	Authenticator Authenticator
	// EngineFigures, when set, gives GET /v1/engine what the service
	// measures of itself (request rates, wake latency, feed lag) beside
	// the provider's view; it must return at once (the service keeps the
	// figures; nil: none).
	EngineFigures func() EngineFigures
}

// api is the handler's state: the client and the options, read-only.
type api struct {
	c      *runtime.Client
	o      Options
	log    *zap.Logger
	mux    *http.ServeMux
	body   int64
	tracer trace.Tracer
	// roles is the role each route's pattern needs ("": none, the
	// probes); a pattern without an entry needs RoleAdmin.
	roles map[string]Role
}

// New returns the API's handler over c.
func New(c *runtime.Client, o Options) (http.Handler, error) {
	if c == nil || o.Orchestrations == nil {
		return nil, errors.New("httpapi: a client and Options.Orchestrations are required")
	}
	if o.MaxInputBytes <= 0 {
		o.MaxInputBytes = DefaultMaxInputBytes
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
	a := &api{c: c, o: o, log: o.Logger, mux: http.NewServeMux(), body: int64(o.MaxInputBytes) + envelopeBytes,
		tracer: o.TracerProvider.Tracer("github.com/durafeed/durafeed/httpapi"), roles: map[string]Role{}}
	for _, rt := range []struct {
		pattern string
		role    Role
		h       http.HandlerFunc
	}{
		{"POST /v1/instances", RoleOperator, a.start},
		{"GET /v1/instances", RoleReader, a.list},
		{"GET /v1/instances/{id}", RoleReader, a.status},
		{"GET /v1/instances/{id}/history", RoleReader, a.history},
		{"GET /v1/engine", RoleReader, a.engine},
		{"GET /v1/me", anyRole, a.me},
		{"DELETE /v1/instances/{id}", RoleAdmin, a.remove},
		{"POST /v1/instances/{id}/events/{name}", RoleOperator, a.raise},
		{"POST /v1/instances/{id}/cancel", RoleOperator, a.cancel},
		{"/", RoleReader, a.noRoute}, // 404 or 405, to a caller with a valid token
		{"GET /healthz", "", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		}},
		{"GET /readyz", "", func(w http.ResponseWriter, _ *http.Request) {
			if o.Ready != nil && !o.Ready() {
				writeError(w, apiError{status: http.StatusServiceUnavailable, Code: "not_ready", Message: "the replica is not ready"})
				return
			}
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		}},
	} {
		a.mux.HandleFunc(rt.pattern, rt.h)
		a.roles[rt.pattern] = rt.role
	}
	return a, nil
}

// role returns the role a request on route needs, and false for an open
// route (the probes). A forced request needs RoleAdmin whatever its route.
func (a *api) role(route string, r *http.Request) (Role, bool) {
	need, ok := a.roles[route]
	switch {
	case route == "":
		need = RoleReader // no pattern: the mux's redirect to a clean path
	case !ok:
		need = RoleAdmin // a route without a role: the most, never the least
	case need == "":
		return "", false
	}
	if forced(r) {
		need = RoleAdmin
	}
	return need, true
}

// noRoute answers a request no route takes: 405 with Allow when the
// path has routes for other methods, else 404.
func (a *api) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, apiError{status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("%s is not allowed here; allowed: %s", r.Method, strings.Join(allow, ", "))})
		return
	}
	writeError(w, apiError{status: http.StatusNotFound, Code: "no_route", Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
}

// ServeHTTP implements http.Handler: the routes, with the body limit and
// a request log.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, route := a.mux.Handler(r)
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := a.tracer.Start(ctx, r.Method+" "+strings.TrimPrefix(route, r.Method+" "), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
	defer span.End()
	r = r.WithContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, a.body)
	rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	var (
		caller  Principal
		authErr error
		allowed = true
	)
	if need, ok := a.role(route, r); ok {
		caller, authErr, allowed = authorize(a.o.Authenticator, need, rw, r)
	}
	if allowed {
		a.mux.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller)))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", rw.status))
	if rw.status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(rw.status))
	}
	if ce := a.log.Check(zap.DebugLevel, "request"); ce != nil {
		fields := []zap.Field{zap.String("method", r.Method), zap.String("route", route),
			zap.Int("status", rw.status), zap.Duration("took", time.Since(start))}
		if caller.ID != "" || caller.App != "" {
			fields = append(fields, zap.String("caller", caller.ID), zap.String("app", caller.App))
		}
		if authErr != nil {
			fields = append(fields, zap.String("auth", authErr.Error())) // claim-free by the Authenticator's contract
		}
		ce.Write(fields...)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// StartRequest is the body of POST /v1/instances.
type StartRequest struct {
	// Name is the orchestration's registered name.
	Name string `json:"name"`
	// Input is the orchestration's JSON input (absent: null).
	Input json.RawMessage `json:"input,omitempty"`
	// InstanceID names the instance (absent: a new UUID).
	InstanceID string `json:"instanceId,omitempty"`
	// Version selects a registered version (absent: the highest).
	Version string `json:"version,omitempty"`
}

// StartResponse is the answer to a start (201).
type StartResponse struct {
	InstanceID string `json:"instanceId"`
}

// InstanceStatus is an instance's status (GET /v1/instances/{id}, and the
// body of a 409 about an existing instance).
type InstanceStatus struct {
	InstanceID  string `json:"instanceId"`
	Name        string `json:"name,omitempty"`
	Version     string `json:"version,omitempty"`
	State       string `json:"state"`
	ExecutionID uint64 `json:"executionId,omitempty"`
	// Output is the JSON output of a completed instance.
	Output json.RawMessage `json:"output,omitempty"`
	// Failure describes a failed instance.
	Failure *history.ErrorDetails `json:"failure,omitempty"`
	// CustomStatus is the last custom status set (absent: none).
	CustomStatus *string `json:"customStatus,omitempty"`
}

// ListResponse is a page of GET /v1/instances.
type ListResponse struct {
	Instances []InstanceSummary `json:"instances"`
	// ContinuationToken asks for the next page (absent: the last page).
	ContinuationToken string `json:"continuationToken,omitempty"`
}

// InstanceSummary is one listed instance.
type InstanceSummary struct {
	InstanceID string    `json:"instanceId"`
	Name       string    `json:"name"`
	Version    string    `json:"version"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	ParentID   string    `json:"parentInstanceId,omitempty"`
	// CustomStatus is the instance's custom status (absent: none).
	CustomStatus *string `json:"customStatus,omitempty"`
}

// DeleteResponse is the answer to a delete.
type DeleteResponse struct {
	InstancesDeleted     uint64 `json:"instancesDeleted"`
	ExecutionsDeleted    uint64 `json:"executionsDeleted"`
	EventsDeleted        uint64 `json:"eventsDeleted"`
	QueueMessagesDeleted uint64 `json:"queueMessagesDeleted"`
}

func (a *api) start(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if e := a.decode(r, &req); e != nil {
		writeError(w, *e)
		return
	}
	if req.Name == "" || len(req.Name) > MaxNameBytes || !utf8.ValidString(req.Name) {
		writeError(w, badRequest("invalid_name", "name must be 1 to %d bytes of UTF-8", MaxNameBytes))
		return
	}
	if _, _, ok := a.o.Orchestrations.ResolveOrchestration(req.Name, req.Version); !ok {
		msg := fmt.Sprintf("no orchestration %q is registered", req.Name)
		if req.Version != "" {
			msg = fmt.Sprintf("no orchestration %q is registered at version %q", req.Name, req.Version)
		}
		writeError(w, apiError{status: http.StatusBadRequest, Code: "unknown_orchestration", Message: msg})
		return
	}
	opts, e := callOptions(r)
	if e != nil {
		writeError(w, *e)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	switch {
	case req.InstanceID == "" && key != "":
		// The key names the instance, so that a resend reaches the request
		// record the first start wrote in its partition.
		req.InstanceID = KeyInstanceID(key)
	case req.InstanceID == "":
		req.InstanceID = uuid.NewString()
	default:
		if e := checkID(req.InstanceID); e != nil {
			writeError(w, *e)
			return
		}
	}
	input := "null"
	if len(req.Input) > 0 {
		input = string(req.Input)
	}
	if e := a.checkSize("input", input); e != nil {
		writeError(w, *e)
		return
	}
	if req.Version != "" {
		opts = append(opts, runtime.WithStartVersion(req.Version))
	}
	created := func() {
		w.Header().Set("Location", "/v1/instances/"+url.PathEscape(req.InstanceID))
		writeJSON(w, http.StatusCreated, StartResponse{InstanceID: req.InstanceID})
	}
	// A keyed start reads its request record and the instance's status at
	// once (one round trip's wait): a resend needs only the first, and
	// wastes the second (a point read, and the history of an instance
	// that has started). The status of an existing instance is the
	// conflict's answer.
	var st runtime.Status
	var err error
	readStatus := func() { st, err = a.c.GetStatus(r.Context(), req.InstanceID) }
	if key == "" {
		readStatus()
	} else {
		var rs durable.RequestState
		var rsErr error
		atOnce(readStatus, func() { rs, rsErr = a.c.StartRecorded(r.Context(), req.InstanceID, req.Name, input, opts...) })
		if done, ok := a.recorded(w, rs, rsErr); ok {
			if done {
				created() // a resend: the first start's answer
			}
			return
		}
	}
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	if st.State != runtime.StateNotFound {
		body := a.describe(r.Context(), st)
		writeJSON(w, http.StatusConflict, struct {
			Error  apiError       `json:"error"`
			Status InstanceStatus `json:"status"`
		}{apiError{Code: "instance_exists", Message: fmt.Sprintf("instance %q exists", req.InstanceID)}, body})
		return
	}
	if err := a.c.StartOrchestrationRaw(r.Context(), req.InstanceID, req.Name, input, opts...); err != nil {
		writeError(w, providerError(err))
		return
	}
	created()
}

// KeyInstanceID is the instance id a start with an Idempotency-Key and no
// instanceId gets: a name-based UUID (version 5) of the key, the same for
// every resend.
func KeyInstanceID(key string) string {
	return uuid.NewSHA1(keyNamespace, []byte(key)).String()
}

// keyNamespace is the UUID namespace of KeyInstanceID.
var keyNamespace = uuid.MustParse("6f0e4a43-8d0b-5b7e-9b55-3c1f0d2a7e10")

// recorded answers a call whose Idempotency-Key the provider has recorded
// (rs, err from a runtime.Client *Recorded check): handled reports that
// the answer is written; done that it is the resent call's own answer,
// for the caller to write (the call took effect already). An unknown
// request is not handled: the call goes on.
func (a *api) recorded(w http.ResponseWriter, rs durable.RequestState, err error) (done, handled bool) {
	switch {
	case err != nil:
		writeError(w, providerError(err))
		return false, true
	case rs == durable.RequestSame:
		return true, true
	case rs == durable.RequestDifferent:
		writeError(w, keyReused())
		return false, true
	}
	return false, false
}

// keyReused is the answer to an Idempotency-Key resent with another call.
func keyReused() apiError {
	return apiError{status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused",
		Message: "the Idempotency-Key was already used for a different request on this instance; nothing was written"}
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if e := checkID(id); e != nil {
		writeError(w, *e)
		return
	}
	var wait time.Duration
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			writeError(w, badRequest("invalid_wait", "wait must be a non-negative duration such as 30s"))
			return
		}
		wait = min(d, a.o.MaxWait)
	}
	select {
	case <-a.o.Stopping:
		wait = 0 // stopping: the status as it is (a nil channel never is)
	default:
	}
	st, err := a.c.GetStatus(r.Context(), id)
	// A wait covers an instance whose start is queued but whose first
	// turn has not run yet (not found until then).
	if err == nil && wait > 0 && !st.State.IsTerminal() {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		if a.o.Stopping != nil {
			go func() { // ends with the wait
				select {
				case <-a.o.Stopping:
					cancel()
				case <-ctx.Done():
				}
			}()
		}
		done, werr := a.c.WaitForOrchestration(ctx, id)
		over := r.Context().Err() == nil && ctx.Err() != nil // the wait's bound, or the server's stop
		cancel()
		switch {
		case werr == nil:
			st = done
		case over:
			st, err = a.c.GetStatus(r.Context(), id) // still running: as it is now
		default:
			err = werr
		}
	}
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	if st.State == runtime.StateNotFound {
		writeError(w, notFound(id))
		return
	}
	writeJSON(w, http.StatusOK, a.describe(r.Context(), st))
}

func (a *api) raise(w http.ResponseWriter, r *http.Request) {
	id, name := r.PathValue("id"), r.PathValue("name")
	if e := checkID(id); e != nil {
		writeError(w, *e)
		return
	}
	if name == "" || len(name) > MaxNameBytes || !utf8.ValidString(name) {
		writeError(w, badRequest("invalid_name", "the event name must be 1 to %d bytes of UTF-8", MaxNameBytes))
		return
	}
	data, e := a.readPayload(r)
	if e != nil {
		writeError(w, *e)
		return
	}
	a.accept(w, r, id, call{
		recorded: func(ctx context.Context, opts []runtime.CallOption) (durable.RequestState, error) {
			return a.c.EventRecorded(ctx, id, name, data, opts...)
		},
		ifRunning: func(ctx context.Context, opts []runtime.CallOption) (bool, error) {
			return a.c.RaiseEventIfRunning(ctx, id, name, data, opts...)
		},
		do: func(ctx context.Context, opts []runtime.CallOption) error {
			return a.c.RaiseEventRaw(ctx, id, name, data, opts...)
		}})
}

// CancelRequest is the optional body of a cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if e := checkID(id); e != nil {
		writeError(w, *e)
		return
	}
	var req CancelRequest
	if e := a.decodeOptional(r, &req); e != nil {
		writeError(w, *e)
		return
	}
	if len(req.Reason) > a.o.MaxInputBytes || !utf8.ValidString(req.Reason) {
		writeError(w, badRequest("invalid_reason", "the reason must be valid UTF-8 of at most %d bytes", a.o.MaxInputBytes))
		return
	}
	a.accept(w, r, id, call{
		recorded: func(ctx context.Context, opts []runtime.CallOption) (durable.RequestState, error) {
			return a.c.CancelRecorded(ctx, id, req.Reason, opts...)
		},
		ifRunning: func(ctx context.Context, opts []runtime.CallOption) (bool, error) {
			return a.c.CancelIfRunning(ctx, id, req.Reason, opts...)
		},
		do: func(ctx context.Context, opts []runtime.CallOption) error {
			return a.c.CancelInstance(ctx, id, req.Reason, opts...)
		}})
}

// call is a client call accept makes: do makes it, recorded asks whether
// a resend of it took effect already, ifRunning makes it if the write
// itself can tell that the instance runs (false: nothing written).
type call struct {
	recorded  func(context.Context, []runtime.CallOption) (durable.RequestState, error)
	ifRunning func(context.Context, []runtime.CallOption) (bool, error)
	do        func(context.Context, []runtime.CallOption) error
}

// accept makes c, with the request's call options, on an instance that
// runs, and answers 202 (or 404 or 409: running). A resend of a call
// with an Idempotency-Key that took effect already answers 202 again,
// whatever the instance has done since (a cancel's resend finds it
// ended); the key with another call answers 422.
func (a *api) accept(w http.ResponseWriter, r *http.Request, id string, c call) {
	opts, e := callOptions(r)
	if e != nil {
		writeError(w, *e)
		return
	}
	// First the call on the condition that the instance runs, where the
	// write can tell (one round trip; a resend fails its condition on the
	// request record the first call wrote). Nothing written: the reads
	// below decide.
	switch done, err := c.ifRunning(r.Context(), opts); {
	case err != nil:
		writeError(w, providerError(err))
		return
	case done:
		w.WriteHeader(http.StatusAccepted)
		return
	}
	// A keyed call reads its request record and the instance's state at
	// once (two point reads, one round trip's wait): a resend needs only
	// the first, and the state read it wasted costs 1 RU.
	var st runtime.Status
	var stErr error
	if len(opts) > 0 {
		var rs durable.RequestState
		var err error
		atOnce(func() { st, stErr = a.state(r.Context(), id) }, func() { rs, err = c.recorded(r.Context(), opts) })
		if done, ok := a.recorded(w, rs, err); ok {
			if done {
				w.WriteHeader(http.StatusAccepted)
			}
			return
		}
	} else {
		st, stErr = a.state(r.Context(), id)
	}
	if !a.running(w, r, id, st, stErr) {
		return
	}
	if err := c.do(r.Context(), opts); err != nil {
		writeError(w, providerError(err))
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// atOnce runs f and g at the same time and returns when both have.
func atOnce(f, g func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		g()
	}()
	f()
	<-done
}

// running answers 404 or 409 and reports false unless the instance
// runs, from the state a.state read (st, err).
func (a *api) running(w http.ResponseWriter, r *http.Request, id string, st runtime.Status, err error) bool {
	if err == nil && st.State.IsTerminal() {
		st, err = a.c.GetStatus(r.Context(), id) // the full status, for the answer's body
	}
	switch {
	case err != nil:
		writeError(w, providerError(err))
	case st.State == runtime.StateNotFound:
		writeError(w, notFound(id))
	case st.State.IsTerminal():
		writeJSON(w, http.StatusConflict, struct {
			Error  apiError       `json:"error"`
			Status InstanceStatus `json:"status"`
		}{apiError{Code: "instance_ended", Message: fmt.Sprintf("instance %q has ended", id)}, a.describe(r.Context(), st)})
	default:
		return true
	}
	return false
}

// listToken is a list page's position: the offset of the next id in the
// listing and the id before it, which finds the place again when
// instances were created or deleted meanwhile.
type listToken struct {
	Offset int    `json:"o"`
	After  string `json:"a"`
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	admin, ok := a.admin(w)
	if !ok {
		return
	}
	q := r.URL.Query()
	size := DefaultPageSize
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, badRequest("invalid_page_size", "pageSize must be 1 to %d", MaxPageSize))
			return
		}
		size = n
	}
	var tok listToken
	if s := q.Get("continuationToken"); s != "" {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || json.Unmarshal(b, &tok) != nil || tok.Offset < 0 {
			writeError(w, badRequest("invalid_continuation_token", "continuationToken is not one this API issued"))
			return
		}
	}
	var f durable.ListFilter
	switch s := durable.Status(q.Get("status")); s {
	case "", durable.StatusRunning, durable.StatusCompleted, durable.StatusFailed, durable.StatusContinuedAsNew:
		f.Status = s
	default:
		writeError(w, badRequest("invalid_status", "status must be Running, Completed, Failed or ContinuedAsNew"))
		return
	}
	if q.Has("name") {
		f.Name = q.Get("name")
		if f.Name == "" || len(f.Name) > MaxNameBytes || !utf8.ValidString(f.Name) {
			writeError(w, badRequest("invalid_name", "the name filter must be 1 to %d bytes of UTF-8", MaxNameBytes))
			return
		}
	}
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"createdFrom", &f.CreatedFrom}, {"createdTo", &f.CreatedTo}} {
		if s := q.Get(b.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				writeError(w, badRequest("invalid_created_range", "%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", b.name))
				return
			}
			*b.to = t
		}
	}
	if !f.CreatedFrom.IsZero() && !f.CreatedTo.IsZero() && !f.CreatedTo.After(f.CreatedFrom) {
		writeError(w, badRequest("invalid_created_range", "createdTo must be after createdFrom"))
		return
	}
	ids, err := admin.ListInstancesFiltered(r.Context(), f)
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	from := min(tok.Offset, len(ids))
	if tok.After != "" && (from == 0 || ids[from-1] != tok.After) {
		for i, id := range ids {
			if id == tok.After {
				from = i + 1
				break
			}
		}
	}
	to := min(from+size, len(ids))
	resp := ListResponse{Instances: []InstanceSummary{}}
	for _, id := range ids[from:to] {
		info, err := admin.GetInstanceInfo(r.Context(), id)
		if err != nil {
			if durable.IsRetryable(err) {
				writeError(w, providerError(err))
				return
			}
			continue // deleted meanwhile
		}
		resp.Instances = append(resp.Instances, InstanceSummary{InstanceID: id, Name: info.OrchestrationName,
			Version: info.OrchestrationVersion, Status: string(info.Status), CreatedAt: info.CreatedAt, UpdatedAt: info.UpdatedAt,
			ParentID: info.ParentInstanceID, CustomStatus: info.CustomStatus})
	}
	if to < len(ids) {
		b, _ := json.Marshal(listToken{Offset: to, After: ids[to-1]})
		resp.ContinuationToken = base64.RawURLEncoding.EncodeToString(b)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *api) remove(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if e := checkID(id); e != nil {
		writeError(w, *e)
		return
	}
	force := false
	if s := r.URL.Query().Get("force"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, badRequest("invalid_force", "force must be true or false"))
			return
		}
		force = b
	}
	admin, ok := a.admin(w)
	if !ok {
		return
	}
	st, err := a.state(r.Context(), id)
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	if st.State == runtime.StateNotFound {
		writeError(w, notFound(id))
		return
	}
	info, err := admin.GetInstanceInfo(r.Context(), id)
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	switch {
	case info.ParentInstanceID != "":
		writeError(w, apiError{status: http.StatusConflict, Code: "sub_orchestration",
			Message: fmt.Sprintf("instance %q is a sub-orchestration of %q: delete its root", id, info.ParentInstanceID)})
		return
	case !force && !st.State.IsTerminal():
		writeError(w, apiError{status: http.StatusConflict, Code: "instance_running",
			Message: fmt.Sprintf("instance %q is running: cancel it first, or delete with force=true", id)})
		return
	}
	res, err := admin.DeleteInstance(r.Context(), id, force)
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	writeJSON(w, http.StatusOK, DeleteResponse{InstancesDeleted: res.InstancesDeleted, ExecutionsDeleted: res.ExecutionsDeleted,
		EventsDeleted: res.EventsDeleted, QueueMessagesDeleted: res.QueueMessagesDeleted})
}

// state returns an instance's state from its record when the provider
// has the admin capability (one point read on the Cosmos DB provider),
// reading the history (which grows with the orchestration) only when the
// record is unknown; Name, Output and Failure are not filled from the
// record.
func (a *api) state(ctx context.Context, id string) (runtime.Status, error) {
	if admin, ok := a.c.Provider().Admin(); ok {
		info, err := admin.GetInstanceInfo(ctx, id)
		switch {
		case err == nil && info.Status == durable.StatusRunning, err == nil && info.Status == durable.StatusContinuedAsNew:
			return runtime.Status{Instance: id, State: runtime.StateRunning}, nil
		case err == nil && info.Status == durable.StatusCompleted:
			return runtime.Status{Instance: id, State: runtime.StateCompleted}, nil
		case err == nil && info.Status == durable.StatusFailed:
			return runtime.Status{Instance: id, State: runtime.StateFailed}, nil
		case err != nil && durable.IsRetryable(err):
			return runtime.Status{}, err
		}
	}
	return a.c.GetStatus(ctx, id)
}

// admin returns the provider's admin capability, or answers 501.
func (a *api) admin(w http.ResponseWriter) (durable.ProviderAdmin, bool) {
	admin, ok := a.c.Provider().Admin()
	if !ok {
		writeError(w, apiError{status: http.StatusNotImplemented, Code: "no_admin", Message: "the provider has no admin capability"})
	}
	return admin, ok
}

// describe turns a status into its JSON form, with the custom status.
func (a *api) describe(ctx context.Context, st runtime.Status) InstanceStatus {
	out := InstanceStatus{InstanceID: st.Instance, Name: st.Name, Version: st.Version, State: string(st.State),
		ExecutionID: st.ExecutionID, Failure: st.Failure}
	if st.State == runtime.StateCompleted {
		if json.Valid([]byte(st.Output)) {
			out.Output = json.RawMessage(st.Output)
		} else {
			b, _ := json.Marshal(st.Output) // a raw output that is not JSON, as a string
			out.Output = b
		}
	}
	if cs, err := a.c.GetCustomStatus(ctx, st.Instance, 0); err == nil && cs != nil {
		out.CustomStatus = cs.Status
	}
	return out
}

// decode reads a required JSON body into v, refusing unknown fields.
func (a *api) decode(r *http.Request, v any) *apiError {
	b, err := readAll(r)
	if err != nil {
		return bodyError(err)
	}
	return decodeBytes(b, v)
}

// decodeOptional is decode for a body that may be empty.
func (a *api) decodeOptional(r *http.Request, v any) *apiError {
	b, err := readAll(r)
	if err != nil {
		return bodyError(err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return decodeBytes(b, v)
}

// decodeBytes decodes one JSON value into v, refusing unknown fields.
func decodeBytes(b []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if dec.More() {
		return ptr(badRequest("bad_json", "the body holds more than one JSON value"))
	}
	return nil
}

// readPayload reads a body that is a JSON value of at most MaxInputBytes
// (empty: null).
func (a *api) readPayload(r *http.Request) (string, *apiError) {
	b, err := readAll(r)
	if err != nil {
		return "", bodyError(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "null", nil
	}
	if !json.Valid([]byte(s)) {
		return "", ptr(badRequest("bad_json", "the body is not one JSON value"))
	}
	if e := a.checkSize("the payload", s); e != nil {
		return "", e
	}
	return s, nil
}

// StoredSize is the size a payload takes as the store embeds it: as a
// JSON string (quotes, backslashes and line breaks take two bytes,
// control characters and <, > and & six) within a work item that is
// itself a JSON string in its queue document, so escaped twice. For
// letters and digits it is the payload's length plus a few bytes.
func StoredSize(payload string) int {
	once, _ := json.Marshal(payload) // a string always encodes
	twice, _ := json.Marshal(string(once))
	return len(twice)
}

// checkSize refuses a payload whose stored size exceeds MaxInputBytes.
func (a *api) checkSize(what, payload string) *apiError {
	if 7*len(payload)+4 <= a.o.MaxInputBytes { // seven bytes a byte at most, escaped twice: no need to measure
		return nil
	}
	n := StoredSize(payload)
	if n <= a.o.MaxInputBytes {
		return nil
	}
	return &apiError{status: http.StatusBadRequest, Code: "input_too_large", Limit: a.o.MaxInputBytes,
		Message: fmt.Sprintf("%s is %d bytes and takes %d stored (escaped as the store embeds it), over the limit of %d", what, len(payload), n, a.o.MaxInputBytes)}
}

func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }

// callOptions reads the Idempotency-Key header.
func callOptions(r *http.Request) ([]runtime.CallOption, *apiError) {
	k := r.Header.Get("Idempotency-Key")
	if k == "" {
		return nil, nil
	}
	if len(k) > MaxIdempotencyKeyBytes || !utf8.ValidString(k) {
		return nil, ptr(badRequest("invalid_idempotency_key", "Idempotency-Key must be UTF-8 of at most %d bytes", MaxIdempotencyKeyBytes))
	}
	return []runtime.CallOption{runtime.WithRequestID(k)}, nil
}

// checkID validates an instance id: 1 to MaxInstanceIDBytes bytes of
// UTF-8 without control characters.
func checkID(id string) *apiError {
	switch {
	case id == "" || len(id) > MaxInstanceIDBytes:
		return ptr(badRequest("invalid_instance_id", "an instance id is 1 to %d bytes", MaxInstanceIDBytes))
	case !utf8.ValidString(id):
		return ptr(badRequest("invalid_instance_id", "an instance id must be valid UTF-8"))
	case strings.IndexFunc(id, unicode.IsControl) >= 0:
		return ptr(badRequest("invalid_instance_id", "an instance id must not hold control characters"))
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
