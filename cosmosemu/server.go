package cosmosemu

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/google/uuid"
	"go.uber.org/zap"
)

// Server is a running emulator. It is safe for concurrent use; all state is
// in memory and lost on Close.
type Server struct {
	opts     Options
	key      []byte
	log      *zap.Logger
	listener net.Listener
	http     *http.Server
	endpoint string
	account  string // endpoint advertised in the database account resource
	certDER  []byte
	certPool *x509.CertPool
	store    *store
	chain    Handler
	admin    http.Handler
	done     chan struct{}
	serveErr error
	// auth is the enforcement in force (Options.Auth, then SetAuth).
	auth atomic.Pointer[AuthOptions]
	// armOps holds the operations ARM DELETEs answered 202 for, by
	// lowercase id (armOperation).
	armOps sync.Map

	closeOnce sync.Once
	closeErr  error
}

// Start listens on opts.Addr and serves the emulator until Close. It returns
// once the listener is open, so the endpoint is immediately usable. ctx only
// bounds start-up.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cosmosemu: start: %w", err)
	}
	opts = opts.withDefaults()
	if id := opts.Identity; id != nil && (id.Header == "" || id.ObjectID == "") {
		return nil, errors.New("cosmosemu: Options.Identity needs a Header and an ObjectID")
	}
	key, err := base64.StdEncoding.DecodeString(opts.Key)
	if err != nil {
		return nil, fmt.Errorf("cosmosemu: decode key: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("cosmosemu: listen on %s: %w", opts.Addr, err)
	}
	s := &Server{
		opts:     opts,
		key:      key,
		log:      opts.Logger,
		listener: ln,
		store:    newStore(opts.PartitionCount, opts.Clock, opts.DisableQueryIndex),
		done:     make(chan struct{}),
	}
	s.SetAuth(opts.Auth)
	port := ln.Addr().(*net.TCPAddr).Port
	scheme := "https"
	if opts.PlainHTTP {
		scheme = "http"
	}
	host, _, _ := net.SplitHostPort(opts.Addr)
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	s.endpoint = fmt.Sprintf("%s://%s/", scheme, net.JoinHostPort(host, strconv.Itoa(port)))
	s.account = fmt.Sprintf("%s://%s/", scheme, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))

	var h Handler = s.dispatch
	for i := len(opts.Middleware) - 1; i >= 0; i-- {
		h = opts.Middleware[i](h)
	}
	s.chain = h
	s.admin = s.newAdminHandler(opts.Admin)

	s.http = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          zap.NewStdLog(s.log),
	}
	if !opts.PlainHTTP {
		cert, der, err := selfSignedCertificate(host)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("cosmosemu: certificate: %w", err)
		}
		s.certDER = der
		parsed, err := x509.ParseCertificate(der)
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("cosmosemu: parse certificate: %w", err)
		}
		s.certPool = x509.NewCertPool()
		s.certPool.AddCert(parsed)
		s.http.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
		ln = tls.NewListener(ln, s.http.TLSConfig)
	}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
			s.log.Error("cosmosemu: serve failed", zap.Error(err))
		}
	}()
	s.log.Info("cosmosemu: listening", zap.String("endpoint", s.endpoint), zap.Int("partitions", opts.PartitionCount))
	return s, nil
}

// Endpoint is the account endpoint clients connect to, with a trailing slash
// (e.g. "https://127.0.0.1:54321/").
func (s *Server) Endpoint() string { return s.endpoint }

// SetAuth replaces the authentication and authorization the emulator
// enforces (Options.Auth; nil: the default, keys and any well-formed
// token). A test creates the database and container with the key first,
// as a deployment creates them, and then disables local
// authentication. Requests under way finish under the rules they started
// with.
func (s *Server) SetAuth(a *AuthOptions) {
	if a == nil {
		s.auth.Store(nil)
		return
	}
	c := *a
	c.RoleAssignments = append([]RoleAssignment(nil), a.RoleAssignments...)
	c.Audiences = append([]string(nil), a.Audiences...)
	c.ManagementPrincipals = append([]string(nil), a.ManagementPrincipals...)
	s.auth.Store(&c)
}

// Key is the base64 master key requests are verified against.
func (s *Server) Key() string { return s.opts.Key }

// CertificatePEM returns the server certificate in PEM form (nil for plain
// HTTP), for clients that install it into a trust store or SSL_CERT_FILE.
func (s *Server) CertificatePEM() []byte {
	if s.certDER == nil {
		return nil
	}
	return pemCertificate(s.certDER)
}

// HTTPClient returns an *http.Client that trusts the server's self-signed
// certificate (no InsecureSkipVerify). For plain HTTP it is a default client.
func (s *Server) HTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	if s.certPool != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: s.certPool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}
}

// ClientOptions returns azcosmos client options whose transport trusts the
// server; callers may adjust the copy further.
func (s *Server) ClientOptions() *azcosmos.ClientOptions {
	return &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: s.HTTPClient()}}
}

// NewClient returns an azcosmos client for this server, authenticated with
// the master key and trusting the server's certificate.
func (s *Server) NewClient() (*azcosmos.Client, error) {
	cred, err := azcosmos.NewKeyCredential(s.opts.Key)
	if err != nil {
		return nil, fmt.Errorf("cosmosemu: key credential: %w", err)
	}
	c, err := azcosmos.NewClientWithKey(s.endpoint, cred, s.ClientOptions())
	if err != nil {
		return nil, fmt.Errorf("cosmosemu: new client: %w", err)
	}
	return c, nil
}

// Close stops accepting requests, waits for in-flight requests to finish
// (bounded at five seconds, after which connections are cut) and releases
// the listener. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.http.Shutdown(ctx)
		if err != nil {
			_ = s.http.Close()
		}
		<-s.done
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			s.closeErr = fmt.Errorf("cosmosemu: shutdown: %w", err)
		}
		if s.closeErr == nil && s.serveErr != nil {
			s.closeErr = fmt.Errorf("cosmosemu: serve: %w", s.serveErr)
		}
	})
	return s.closeErr
}

// serveHTTP is the single entry point of every request: ARM paths go to
// the ARM surface and admin paths to the admin handler, neither through
// the middleware; Cosmos DB requests are parsed, authenticated, routed,
// passed through the middleware chain and answered. Panics in the latter
// become 500 answers.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if isARMPath(r.URL.Path) {
		s.serveARM(w, r)
		return
	}
	if isAdminPath(r.URL.Path) {
		s.admin.ServeHTTP(w, r)
		return
	}
	activity := r.Header.Get("x-ms-activity-id")
	if _, err := uuid.Parse(activity); err != nil {
		activity = uuid.NewString()
	}
	req := &Request{ActivityID: activity, HTTP: r}
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("cosmosemu: panic while serving request",
				zap.Any("panic", p), zap.String("method", r.Method), zap.String("activity", activity),
				zap.String("operation", string(req.Operation)), zap.String("resource", string(req.ResourceType)))
			s.write(w, req, errResponse(req, newErr(http.StatusInternalServerError, "An unexpected error occurred while processing the request.")))
		}
	}()
	resp := s.prepare(r.Context(), req)
	if resp == nil {
		resp = s.chain(r.Context(), req)
	}
	if resp == nil {
		resp = errResponse(req, newErr(http.StatusInternalServerError, "no response produced"))
	}
	s.write(w, req, resp)
}

// prepare parses and authenticates the request; a non-nil answer ends the
// request before the middleware chain.
func (s *Server) prepare(ctx context.Context, req *Request) *Response {
	r := req.HTTP
	segs, perr := normalizePath(r.URL)
	if perr != nil {
		return errResponse(req, perr)
	}
	req.path = segs
	rtype, link := authResource(segs)
	req.ResourceType = ResourceType(rtype)
	req.ResourceLink = link
	who, aerr := s.authenticate(r, rtype, link)
	if aerr != nil {
		return errResponse(req, aerr)
	}
	if r.Body != nil {
		body, err := io.ReadAll(io.LimitReader(r.Body, defaultMaxDocumentBytes+1))
		if err != nil {
			return errResponse(req, errBadRequest("could not read the request body"))
		}
		if len(body) > defaultMaxDocumentBytes {
			return errResponse(req, errTooLarge())
		}
		req.body = body
	}
	if rerr := s.route(ctx, req); rerr != nil {
		return errResponse(req, rerr)
	}
	if who != nil {
		if aerr := s.authorize(who, req); aerr != nil {
			return errResponse(req, aerr)
		}
	}
	return nil
}

func (s *Server) write(w http.ResponseWriter, req *Request, resp *Response) {
	h := w.Header()
	for k, vs := range resp.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.Set("x-ms-activity-id", req.ActivityID)
	charge := resp.RequestCharge
	if charge == 0 && resp.Status < 300 {
		charge = 1
	}
	h.Set("x-ms-request-charge", strconv.FormatFloat(charge, 'f', 2, 64))
	h.Set("x-ms-gatewayversion", "2.0.0")
	h.Set("x-ms-serviceversion", "version=2.14.0.0")
	h.Set("x-ms-schemaversion", "1.18")
	if resp.SubStatus != 0 {
		h.Set("x-ms-substatus", strconv.Itoa(resp.SubStatus))
	}
	if h.Get("Content-Type") == "" && len(resp.Body) > 0 {
		h.Set("Content-Type", "application/json")
	}
	if resp.Status == http.StatusNotModified || resp.Status == http.StatusNoContent {
		w.WriteHeader(resp.Status)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 && req.HTTP.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}
