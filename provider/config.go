package provider

import (
	"errors"
	"os"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"go.uber.org/zap"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultDatabase          = "durafeed"
	DefaultContainer         = "durafeed"
	DefaultReconcileInterval = 2 * time.Second
	DefaultReconcileAge      = 2 * time.Second
)

// Config configures a Provider.
type Config struct {
	// Endpoint is the account endpoint, e.g. https://acct.documents.azure.com:443/.
	Endpoint string
	// Key is the account key. When empty, Credential is used.
	Key string
	// Credential authenticates with Entra ID when Key is empty.
	Credential azcore.TokenCredential
	// Database and Container name the store (defaults "durafeed").
	Database  string
	Container string
	// CreateIfMissing creates the database and container when missing. Nil
	// means true with a key and false with a credential: data-plane RBAC
	// cannot create resources, so with Entra ID the container is expected to
	// exist (deployed by infrastructure code) and a missing one is an error.
	CreateIfMissing *bool
	// OrchestrationDispatchers and WorkerDispatchers split the 256 dispatch
	// slots into that many contiguous shares per queue, so that concurrent
	// fetchers scan disjoint slots (default 1: every fetch scans all slots).
	OrchestrationDispatchers int
	WorkerDispatchers        int
	// ReconcileInterval is how often the background reconciler sweeps
	// undelivered outbox intents, unpublished large turns and interrupted
	// deletions (default 2 s); ReconcileAge is how old such a record must be
	// before the sweep takes it over from the call that wrote it (default 2 s).
	ReconcileInterval time.Duration
	ReconcileAge      time.Duration
	// ClientOptions are passed to the SDK (transport, retries, telemetry).
	ClientOptions *azcosmos.ClientOptions
	// Logger receives operational logs: instance ids, operations and status
	// codes, never keys or payloads. Default: no logging.
	Logger *zap.Logger
}

// ConfigFromEnv reads COSMOS_ENDPOINT, COSMOS_KEY, COSMOS_DATABASE and
// COSMOS_CONTAINER. Without a key it authenticates with
// azidentity.NewDefaultAzureCredential.
func ConfigFromEnv() (Config, error) {
	cfg := Config{
		Endpoint:  os.Getenv("COSMOS_ENDPOINT"),
		Key:       os.Getenv("COSMOS_KEY"),
		Database:  os.Getenv("COSMOS_DATABASE"),
		Container: os.Getenv("COSMOS_CONTAINER"),
	}
	if cfg.Endpoint == "" {
		return Config{}, errors.New("provider: COSMOS_ENDPOINT is not set")
	}
	if cfg.Key == "" {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return Config{}, err
		}
		cfg.Credential = cred
	}
	return cfg, nil
}

func (c Config) withDefaults() Config {
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.Container == "" {
		c.Container = DefaultContainer
	}
	if c.OrchestrationDispatchers <= 0 {
		c.OrchestrationDispatchers = 1
	}
	if c.WorkerDispatchers <= 0 {
		c.WorkerDispatchers = 1
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.ReconcileAge <= 0 {
		c.ReconcileAge = DefaultReconcileAge
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.CreateIfMissing == nil {
		v := c.Key != ""
		c.CreateIfMissing = &v
	}
	return c
}
