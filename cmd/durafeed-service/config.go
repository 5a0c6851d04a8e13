package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/httpauth"
	"github.com/durafeed/durafeed/provider"
)

// config is the service's configuration, read from the environment (see
// the package documentation's table).
type config struct {
	Listen    string
	Endpoint  string
	Key       string
	Database  string
	Container string
	// ClientID is AZURE_CLIENT_ID: the user-assigned managed identity
	// that DefaultAzureCredential uses (azidentity reads the variable
	// itself; it is kept here to be logged as set or not).
	ClientID      string
	Mode          provider.Mode
	LogLevel      zapcore.Level
	Grace         time.Duration
	Drain         time.Duration
	ReplicaID     string
	PeerListen    string
	PeerAdvertise string
	Orchestration int
	Workers       int
	// AuthIssuer and AuthAudiences configure the API's bearer tokens
	// (DURAFEED_AUTH_ISSUER, else the issuer of DURAFEED_AUTH_TENANT_ID;
	// DURAFEED_AUTH_AUDIENCE); AuthIssuer "": no authentication, which
	// configFromEnv allows on a loopback address, or with AuthNone.
	AuthIssuer    string
	AuthAudiences []string
	// AuthNone is DURAFEED_AUTH=none: the API served unauthenticated on
	// purpose, on any address.
	AuthNone bool
}

// defaultGrace is the shutdown grace period: under Azure Container Apps'
// 30 s termination grace period, so the process exits on its own.
const defaultGrace = 25 * time.Second

// defaultDrain is how long a stopping service keeps answering, not
// ready, before it closes its listener: a few probe periods for the
// platform to take it out of rotation (at most a fifth of the grace
// period unless DURAFEED_DRAIN says otherwise).
const defaultDrain = 5 * time.Second

// Default listen addresses: every interface when the API authenticates
// its callers, else this machine only.
const (
	defaultListen     = ":8080"
	defaultListenOpen = "127.0.0.1:8080"
)

// authRemedy is what the refusal to serve an open API beyond loopback
// tells the operator to set.
const authRemedy = "set DURAFEED_AUTH_TENANT_ID and DURAFEED_AUTH_AUDIENCE (Entra ID bearer tokens; " +
	"DURAFEED_AUTH_ISSUER and DURAFEED_AUTH_AUDIENCE for another issuer), or DURAFEED_AUTH=none to serve the API " +
	"unauthenticated on purpose, or listen on loopback only (DURAFEED_LISTEN=127.0.0.1:8080)"

// configFromEnv reads the configuration through getenv.
func configFromEnv(getenv func(string) string) (config, error) {
	c := config{
		Endpoint:      getenv("COSMOS_ENDPOINT"),
		Key:           getenv("COSMOS_KEY"),
		Database:      or(getenv("COSMOS_DATABASE"), "durafeed"),
		Container:     or(getenv("COSMOS_CONTAINER"), "durafeed"),
		ClientID:      getenv("AZURE_CLIENT_ID"),
		ReplicaID:     getenv("DURAFEED_REPLICA_ID"),
		PeerListen:    getenv("DURAFEED_PEER_LISTEN"),
		PeerAdvertise: getenv("DURAFEED_PEER_ADVERTISE"),
		Grace:         defaultGrace,
		Drain:         defaultDrain,
		Orchestration: 2,
		Workers:       2,
	}
	var errs []error
	switch m := or(getenv("DURAFEED_MODE"), "event-driven"); m {
	case "event-driven":
		c.Mode = provider.ModeEventDriven
	case "polling":
		c.Mode = provider.ModePolling
	default:
		errs = append(errs, fmt.Errorf("DURAFEED_MODE %q: want event-driven or polling", m))
	}
	if err := c.LogLevel.UnmarshalText([]byte(or(getenv("DURAFEED_LOG_LEVEL"), "info"))); err != nil {
		errs = append(errs, fmt.Errorf("DURAFEED_LOG_LEVEL: %w", err))
	}
	if s := getenv("DURAFEED_GRACE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("DURAFEED_GRACE %q: want a positive duration such as 25s", s))
		}
		c.Grace = d
	}
	if c.Grace > 0 {
		c.Drain = min(defaultDrain, c.Grace/5)
	}
	if s := getenv("DURAFEED_DRAIN"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("DURAFEED_DRAIN %q: want a non-negative duration such as 5s", s))
		}
		c.Drain = d
	}
	if c.Grace > 0 && c.Drain >= c.Grace {
		errs = append(errs, fmt.Errorf("DURAFEED_DRAIN %s must be shorter than DURAFEED_GRACE %s", c.Drain, c.Grace))
	}
	for _, v := range []struct {
		name string
		dst  *int
	}{{"DURAFEED_ORCHESTRATION_CONCURRENCY", &c.Orchestration}, {"DURAFEED_WORKER_CONCURRENCY", &c.Workers}} {
		if s := getenv(v.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1000 {
				errs = append(errs, fmt.Errorf("%s %q: want 1 to 1000", v.name, s))
			}
			*v.dst = n
		}
	}
	if c.PeerAdvertise != "" && c.PeerListen == "" {
		errs = append(errs, errors.New("DURAFEED_PEER_ADVERTISE is set without DURAFEED_PEER_LISTEN"))
	}
	if c.PeerListen != "" && c.Mode == provider.ModePolling {
		errs = append(errs, errors.New("DURAFEED_PEER_LISTEN applies to the event-driven mode only"))
	}
	if c.PeerListen != "" {
		// An endpoint no peer can dial would drop every wake; refuse it now.
		pw := &engine.PeerWakeOptions{Listen: c.PeerListen, Advertise: c.PeerAdvertise}
		if _, err := (engine.Options{PeerWake: pw}).WithDefaults(); err != nil {
			errs = append(errs, fmt.Errorf("DURAFEED_PEER_LISTEN %q, DURAFEED_PEER_ADVERTISE %q: %w", c.PeerListen, c.PeerAdvertise, err))
		}
	}
	if c.Key != "" && c.Endpoint == "" {
		errs = append(errs, errors.New("COSMOS_KEY is set without COSMOS_ENDPOINT"))
	}
	errs = append(errs, c.readAuth(getenv)...)
	return c, errors.Join(errs...)
}

// readAuth reads the API's authentication and the listen address, whose
// default depends on it: a listener beyond loopback needs authentication,
// or DURAFEED_AUTH=none.
func (c *config) readAuth(getenv func(string) string) []error {
	var errs []error
	tenant, issuer := strings.TrimSpace(getenv("DURAFEED_AUTH_TENANT_ID")), strings.TrimSpace(getenv("DURAFEED_AUTH_ISSUER"))
	for _, a := range strings.Split(getenv("DURAFEED_AUTH_AUDIENCE"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.AuthAudiences = append(c.AuthAudiences, a)
		}
	}
	switch mode := getenv("DURAFEED_AUTH"); mode {
	case "":
	case "none":
		c.AuthNone = true
	default:
		errs = append(errs, fmt.Errorf("DURAFEED_AUTH %q: want none (no authentication, on purpose) or unset", mode))
	}
	switch {
	case issuer != "":
		c.AuthIssuer = issuer // the explicit issuer wins; the tenant is then not used
	case tenant != "":
		derived, err := httpauth.EntraIssuer(tenant)
		if err != nil {
			errs = append(errs, fmt.Errorf("DURAFEED_AUTH_TENANT_ID: %w", err))
		}
		c.AuthIssuer = derived
	}
	switch {
	case c.AuthIssuer != "" && c.AuthNone:
		errs = append(errs, errors.New("DURAFEED_AUTH=none is set with DURAFEED_AUTH_TENANT_ID or DURAFEED_AUTH_ISSUER: choose one"))
	case (tenant != "" || issuer != "") && len(c.AuthAudiences) == 0:
		errs = append(errs, errors.New("DURAFEED_AUTH_AUDIENCE is required with DURAFEED_AUTH_TENANT_ID or DURAFEED_AUTH_ISSUER: the API's client (application) id"))
	case tenant == "" && issuer == "" && len(c.AuthAudiences) > 0:
		errs = append(errs, errors.New("DURAFEED_AUTH_AUDIENCE is set without DURAFEED_AUTH_TENANT_ID or DURAFEED_AUTH_ISSUER"))
	case c.AuthIssuer != "":
		if err := (httpauth.Options{Issuer: c.AuthIssuer, Audiences: c.AuthAudiences}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("DURAFEED_AUTH_ISSUER, DURAFEED_AUTH_AUDIENCE: %w", err))
		}
	}
	authenticated := tenant != "" || issuer != ""
	c.Listen = getenv("DURAFEED_LISTEN")
	if strings.TrimSpace(c.Listen) == "" {
		c.Listen = defaultListenOpen
		if authenticated {
			c.Listen = defaultListen
		}
	}
	if !authenticated && !c.AuthNone && !loopback(c.Listen) {
		errs = append(errs, fmt.Errorf("DURAFEED_LISTEN %q is not a loopback address and the API has no authentication: %s", c.Listen, authRemedy))
	}
	return errs
}

// loopback reports whether a listen address takes connections from this
// machine only: a loopback IP or localhost (an empty host is every
// interface, and another name could resolve anywhere).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiAuth describes the API's authentication for the start-up line.
func (c config) apiAuth() string {
	switch {
	case c.AuthIssuer != "":
		return "bearer tokens of " + c.AuthIssuer
	case c.AuthNone:
		return "none (DURAFEED_AUTH=none)"
	}
	return "none (loopback only)"
}

func or(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// fields describe the configuration for the start-up log line: never the
// key, only whether one is set.
func (c config) fields() []zap.Field {
	store := "embedded cosmosemu"
	auth := "emulator key"
	if c.Endpoint != "" {
		store = c.Endpoint
		switch {
		case c.Key != "":
			auth = "account key"
		case c.ClientID != "":
			auth = "Entra ID, user-assigned managed identity"
		default:
			auth = "Entra ID (DefaultAzureCredential)"
		}
	}
	return []zap.Field{zap.String("listen", c.Listen), zap.String("api_auth", c.apiAuth()), zap.String("store", store), zap.String("auth", auth),
		zap.String("database", c.Database), zap.String("container", c.Container), zap.Stringer("mode", c.Mode),
		zap.Duration("grace", c.Grace), zap.Duration("drain", c.Drain), zap.Bool("peer_wake", c.PeerListen != ""),
		zap.Int("orchestration_concurrency", c.Orchestration), zap.Int("worker_concurrency", c.Workers)}
}
