package provider

import (
	"errors"
	"os"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/durafeed/durafeed/engine"
	"github.com/durafeed/durafeed/polling"
	"github.com/durafeed/durafeed/store"
)

// Mode selects how fetches find work.
type Mode int

const (
	// ModeEventDriven (the default) reads the container's change feed on
	// slot blocks leased across replicas and wakes long-polling fetches
	// from it (package engine).
	ModeEventDriven Mode = iota
	// ModePolling is the seeds' algorithm (package polling): every fetch
	// runs a cross-partition candidate query and returns at once, and a
	// reconciler runs the repair pass every ReconcileInterval. It is kept
	// as the benchmark's baseline and for deployments that cannot read the
	// change feed.
	ModePolling
)

// String returns "event-driven" or "polling".
func (m Mode) String() string {
	switch m {
	case ModeEventDriven:
		return "event-driven"
	case ModePolling:
		return "polling"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures a Provider: one options struct per concern, each with
// documented defaults; a nil pointer means every default.
type Config struct {
	// Store configures the connection, the container and the store's own
	// behaviour (package store). Store.Endpoint is required, with
	// Store.Key or Store.Credential. In ModePolling a zero
	// Store.InstanceCacheSize means no cache (the seeds' order: every lock
	// and ack reads the instance document), not the store's default.
	Store store.Options
	// Mode selects event-driven (default) or polling dispatch.
	Mode Mode
	// Polling configures the polling dispatcher (ModePolling only).
	Polling *polling.Options
	// EventDriven configures the event-driven engine: leases, change feed,
	// sweep (ModeEventDriven only).
	EventDriven *engine.Options
	// Logger receives operational logs (instance ids, operations and
	// status codes, never keys or payloads) of every part whose own
	// Logger is nil. Default: no logging.
	Logger *zap.Logger
	// MeterProvider receives the metrics of every part whose own
	// MeterProvider is nil: the store's requests (by operation and
	// status, request units, durations, throttles, retries) and the
	// event-driven engine's (wake latency, slots owned, feed pending and
	// lag). Default: none, at no cost.
	MeterProvider metric.MeterProvider
}

// ConfigFromEnv reads COSMOS_ENDPOINT, COSMOS_KEY, COSMOS_DATABASE and
// COSMOS_CONTAINER into Config.Store. Without a key it authenticates with
// azidentity.NewDefaultAzureCredential.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Store: store.Options{
		Endpoint:  os.Getenv("COSMOS_ENDPOINT"),
		Key:       os.Getenv("COSMOS_KEY"),
		Database:  os.Getenv("COSMOS_DATABASE"),
		Container: os.Getenv("COSMOS_CONTAINER"),
	}}
	if cfg.Store.Endpoint == "" {
		return Config{}, errors.New("provider: COSMOS_ENDPOINT is not set")
	}
	if cfg.Store.Key == "" {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return Config{}, err
		}
		cfg.Store.Credential = cred
	}
	return cfg, nil
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
