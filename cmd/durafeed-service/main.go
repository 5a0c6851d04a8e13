// Command durafeed-service is durafeed's reference service: a runtime
// replica (the orchestrations of package sample) serving the JSON HTTP
// API of package httpapi, with liveness and readiness endpoints and a
// graceful stop on SIGTERM. It is built on the public API only, so it is
// also the example of embedding durafeed in a service of one's own.
//
//	go run ./cmd/durafeed-service                  # embedded cosmosemu, 127.0.0.1:8080, no authentication
//	curl -s localhost:8080/v1/instances -d '{"name":"Greet","input":{"name":"Ada"}}'
//
// Configuration is read from the environment:
//
//	DURAFEED_LISTEN                     HTTP listen address (default :8080 with authentication, else 127.0.0.1:8080)
//	DURAFEED_AUTH_TENANT_ID             Entra ID tenant (directory) id, a GUID: the API takes bearer tokens
//	                                    of https://login.microsoftonline.com/<tenant>/v2.0 (default: none)
//	DURAFEED_AUTH_ISSUER                token issuer URL instead of the tenant's (another cloud, another
//	                                    OpenID Connect issuer); when set, DURAFEED_AUTH_TENANT_ID is not used
//	DURAFEED_AUTH_AUDIENCE              accepted aud values, comma-separated: the API app registration's
//	                                    client id (required with either of the two above)
//	DURAFEED_AUTH                       none: serve the API without authentication on any address
//	COSMOS_ENDPOINT                     account endpoint; unset: an embedded, in-memory cosmosemu
//	COSMOS_KEY                          account key; unset: Entra ID (DefaultAzureCredential)
//	AZURE_CLIENT_ID                     client id of the user-assigned managed identity to use
//	COSMOS_DATABASE, COSMOS_CONTAINER   database and container (default durafeed, durafeed)
//	DURAFEED_MODE                       event-driven (default) or polling
//	DURAFEED_LOG_LEVEL                  debug, info (default), warn, error
//	DURAFEED_GRACE                      shutdown grace period after SIGTERM (default 25s)
//	DURAFEED_DRAIN                      part of the grace period the listener stays open, answering
//	                                    /readyz with 503, before it closes (default 5s; less than the grace)
//	DURAFEED_REPLICA_ID                 replica name in the leases (default: a fresh one)
//	DURAFEED_PEER_LISTEN                peer wake channel listen address (default: channel off)
//	DURAFEED_PEER_ADVERTISE             host:port other replicas dial (default: the listener's)
//	DURAFEED_ORCHESTRATION_CONCURRENCY  orchestration dispatchers (default 2)
//	DURAFEED_WORKER_CONCURRENCY         activity workers (default 2)
//	OTEL_EXPORTER_OTLP_ENDPOINT         OTLP/HTTP endpoint of traces and metrics (default: none; the
//	                                    _TRACES_/_METRICS_ variants and the exporters' other variables apply)
//	OTEL_SERVICE_NAME                   the service's name in telemetry (default durafeed-service)
//
// Metrics are served in the Prometheus format at /metrics, and a web
// dashboard (package dashboard) at /ui/.
//
// GET /v1/engine adds, to the provider's view of dispatch, rates the
// service computes from its own metrics: a goroutine reads them every 5 s
// and keeps the last minute (requests, request units and 429s a minute,
// wake latency p50/p99, feed lag).
//
// Authentication: with DURAFEED_AUTH_TENANT_ID (or DURAFEED_AUTH_ISSUER)
// and DURAFEED_AUTH_AUDIENCE, every request but /healthz and /readyz
// needs an access token (Authorization: Bearer), verified by package
// httpauth (issuer, audience, signature by the issuer's published keys,
// expiry), and its app roles decide what it may do: Durafeed.Reader
// reads (status, list, history, the engine view, /metrics),
// Durafeed.Operator also starts, raises and cancels, Durafeed.Admin also
// deletes and forces; any valid token may ask GET /v1/me who it is.
// Entra ID issues the v2.0 tokens this expects when the API's app
// registration asks for them (api.requestedAccessTokenVersion 2);
// otherwise its v1.0 tokens name another issuer and are refused.
// Without authentication the API is open to whoever reaches it, so the
// service refuses to start (status 2, naming these variables) on an
// address beyond loopback, such as the image's :8080, unless
// DURAFEED_AUTH=none says that is intended (then it logs a warning); by
// default it listens on 127.0.0.1:8080 then. The issuer's keys load in
// the background, retried: until they do, the replica runs its
// orchestrations but is not ready, and the API answers 503.
//
// With Entra ID the database and container must exist (data-plane RBAC
// cannot create them); with a key they are created when missing. The key
// and tokens are never logged, nor are payloads.
//
// Readiness (/readyz) turns on once the runtime's dispatchers run, in
// event-driven mode the replica holds its share of the leases, and with
// authentication the issuer's keys are loaded; liveness (/healthz)
// answers while the process serves. On SIGTERM or SIGINT the
// replica stops being ready: for DURAFEED_DRAIN it keeps its listener
// open and answers every request (/readyz with 503, so that probes and
// load balancers take it out of rotation; connections are not kept
// alive), and a status request waiting for an instance (?wait=) gets the
// instance's current status at once. Then it closes the listener, waits
// for the requests in flight to end, lets in-flight turns and activities
// finish within the rest of the grace period (abandoning what is left,
// for other replicas to take), hands its leases to the live replicas and
// exits 0.
//
// Exit status: 0 after a stop by signal, 1 when the service could not
// start or stop cleanly, 2 for a bad configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/cmd/durafeed-service/sample"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/dashboard"
	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/httpapi"
	"github.com/durafeed/durafeed/httpauth"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

func main() {
	os.Exit(realMain(os.Getenv, os.Stderr))
}

// realMain runs the service until SIGTERM or SIGINT and returns the exit
// status.
func realMain(getenv func(string) string, stderr io.Writer) int {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		fmt.Fprintln(stderr, "durafeed-service: configuration:", err)
		return 2
	}
	log := newLogger(stderr, cfg.LogLevel)
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, getenv, log, nil); err != nil {
		log.Error("durafeed-service failed", zap.Error(err))
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), level))
}

// hooks let a test follow the service: listening is called with the HTTP
// address once the listener is open.
type hooks struct {
	listening func(addr string)
	// holdDrain, when set, keeps the drain going (past DURAFEED_DRAIN)
	// until it is closed: a test observes the draining service.
	holdDrain <-chan struct{}
	// sampleEvery, when set, replaces sampleEvery (GET /v1/engine's
	// figures).
	sampleEvery time.Duration
}

// run serves until ctx ends, then stops within cfg.Grace. getenv gives
// the OpenTelemetry variables (see telemetry).
func run(ctx context.Context, cfg config, getenv func(string) string, log *zap.Logger, h *hooks) (err error) {
	log.Info("starting", cfg.fields()...)
	tel, err := newTelemetry(ctx, getenv)
	if err != nil {
		return err
	}
	defer func() {
		if terr := tel.shutdown(context.WithoutCancel(ctx)); terr != nil {
			log.Warn("telemetry did not flush", zap.Error(terr))
		}
	}()
	pcfg, closeStore, err := storeConfig(ctx, cfg, log)
	if err != nil {
		return err
	}
	pcfg.MeterProvider = tel.meter
	defer func() {
		if cerr := closeStore(); err == nil {
			err = cerr
		}
	}()
	p, err := provider.New(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("open the provider: %w", err)
	}
	providerClosed := false
	defer func() {
		if !providerClosed {
			_ = p.Close()
		}
	}()

	// The figures of GET /v1/engine: a goroutine samples the service's
	// own metrics until run returns (before the provider closes).
	var every time.Duration
	if h != nil {
		every = h.sampleEvery
	}
	figures := newSampler(tel.own, every, replicaName(cfg))
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	sampling := make(chan struct{})
	go func() {
		defer close(sampling)
		figures.run(sampleCtx)
	}()
	defer func() {
		stopSampling()
		<-sampling
	}()

	// The API's authentication: the issuer's keys load in the background
	// (retried; not ready until they do), while the replica starts.
	var (
		verifier *httpauth.Verifier
		authn    httpapi.Authenticator
	)
	switch {
	case cfg.AuthIssuer != "":
		verifier, err = httpauth.New(httpauth.Options{Issuer: cfg.AuthIssuer, Audiences: cfg.AuthAudiences, Logger: log.Named("auth")})
		if err != nil {
			return err
		}
		authn = verifier
	case cfg.AuthNone:
		log.Warn("DURAFEED_AUTH=none: the API is open, without authentication: whoever reaches the listen address may start, raise, cancel, list and delete instances",
			zap.String("listen", cfg.Listen))
	}
	var ready atomic.Bool // the replica's part of readiness; the keys are the other
	readyNow := func() bool { return ready.Load() && (verifier == nil || verifier.Ready()) }
	var announced sync.Once
	announce := func() {
		if readyNow() {
			announced.Do(func() { log.Info("ready") })
		}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loading := make(chan struct{})
	go func() {
		defer close(loading)
		if verifier != nil && verifier.Load(loadCtx) == nil {
			announce()
		}
	}()
	defer func() {
		stopLoad()
		<-loading
	}()

	reg := runtime.NewRegistry()
	sample.Register(reg)
	rt := runtime.New(p, reg, runtime.Options{Logger: log.Named("runtime"),
		OrchestrationConcurrency: cfg.Orchestration, WorkerConcurrency: cfg.Workers,
		TracerProvider: tel.tracer, MeterProvider: tel.meter})

	stopping := make(chan struct{})
	api, err := httpapi.New(rt.Client(), httpapi.Options{Orchestrations: reg, Ready: readyNow, Stopping: stopping,
		Logger: log.Named("http"), TracerProvider: tel.tracer, Authenticator: authn, EngineFigures: figures.figures})
	if err != nil {
		return err
	}
	routes := http.NewServeMux()
	routes.Handle("GET /metrics", httpapi.RequireRole(authn, httpapi.RoleReader, tel.metrics))
	routes.Handle("/", api)
	// The dashboard's static assets: no role (they hold no data); the page
	// calls the API above with the caller's bearer token.
	ui := dashboard.Handler()
	routes.Handle("GET /ui", ui) // redirects to /ui/
	routes.Handle("GET /ui/", ui)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: routes, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: httpapi.DefaultMaxWait + 10*time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: zap.NewStdLog(log.Named("http"))}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", zap.String("addr", ln.Addr().String()))
	if h != nil && h.listening != nil {
		h.listening(ln.Addr().String())
	}

	if err := rt.Start(); err != nil {
		_ = srv.Close()
		<-served
		return fmt.Errorf("start the runtime: %w", err)
	}
	if err := p.Join(ctx); err != nil && ctx.Err() == nil {
		log.Warn("joining dispatch failed; the first fetch joins", zap.Error(err))
	}
	if ctx.Err() == nil {
		ready.Store(true)
		if !readyNow() {
			log.Info("the replica runs; not ready until the token signing keys load")
		}
		announce()
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		// The server stopped on its own: a listener failure.
		ready.Store(false)
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Grace)
		defer cancel()
		_ = rt.Shutdown(sctx)
		return fmt.Errorf("HTTP server: %w", err)
	}

	// Stop: not ready while still answering (the drain), waiting status
	// requests answered, then no new requests; in-flight work finishes or
	// is abandoned within the grace period, the leases go to live
	// replicas.
	began := time.Now()
	ready.Store(false)
	close(stopping)
	srv.SetKeepAlivesEnabled(false)
	log.Info("stopping", zap.Duration("grace", cfg.Grace), zap.Duration("drain", cfg.Drain))
	gctx, cancel := context.WithTimeout(context.Background(), cfg.Grace)
	defer cancel()
	drain := time.NewTimer(cfg.Drain)
	<-drain.C
	if h != nil && h.holdDrain != nil {
		<-h.holdDrain
	}
	// Shutdown closes the listener and waits for the requests in flight
	// (no status wait is left: they ended at the drain's start).
	if err := srv.Shutdown(gctx); err != nil {
		_ = srv.Close()
	}
	<-served
	var errs []error
	if err := rt.Shutdown(gctx); err != nil {
		errs = append(errs, fmt.Errorf("stop the runtime: %w", err))
	}
	providerClosed = true
	if err := p.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close the provider: %w", err))
	}
	log.Info("stopped", zap.Duration("took", time.Since(began)))
	return errors.Join(errs...)
}

// replicaName is this replica's name in GET /v1/engine when the provider
// names none (polling mode): DURAFEED_REPLICA_ID, else the host name.
func replicaName(cfg config) string {
	if cfg.ReplicaID != "" {
		return cfg.ReplicaID
	}
	h, _ := os.Hostname()
	return h
}

// storeConfig returns the provider configuration: on Azure Cosmos DB when
// cfg names an endpoint, else on an embedded cosmosemu that closeStore
// stops.
func storeConfig(ctx context.Context, cfg config, log *zap.Logger) (provider.Config, func() error, error) {
	pcfg := provider.Config{Mode: cfg.Mode, Logger: log.Named("provider")}
	if cfg.Mode == provider.ModeEventDriven {
		eo := &engine.Options{ReplicaID: cfg.ReplicaID}
		if cfg.PeerListen != "" {
			eo.PeerWake = &engine.PeerWakeOptions{Listen: cfg.PeerListen, Advertise: cfg.PeerAdvertise}
		}
		pcfg.EventDriven = eo
	}
	if cfg.Endpoint != "" {
		pcfg.Store = store.Options{Endpoint: cfg.Endpoint, Key: cfg.Key, Database: cfg.Database, Container: cfg.Container}
		if cfg.Key == "" {
			// Managed identity (AZURE_CLIENT_ID), workload identity, the
			// Azure CLI...: whatever DefaultAzureCredential finds.
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return provider.Config{}, nil, fmt.Errorf("the Entra ID credential: %w", err)
			}
			pcfg.Store.Credential = cred
		}
		return pcfg, func() error { return nil }, nil
	}
	emu, err := cosmosemu.Start(ctx, cosmosemu.Options{PartitionCount: 4, Logger: log.Named("cosmosemu")})
	if err != nil {
		return provider.Config{}, nil, fmt.Errorf("start the embedded cosmosemu: %w", err)
	}
	log.Info("no COSMOS_ENDPOINT: running on an embedded, in-memory cosmosemu (its data ends with the process)",
		zap.String("endpoint", emu.Endpoint()))
	pcfg.Store = store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), ClientOptions: emu.ClientOptions(),
		Database: cfg.Database, Container: cfg.Container}
	return pcfg, emu.Close, nil
}
