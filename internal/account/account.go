// Package account connects durafeed's tools (the bench, the fleet, the
// chaos campaign) to an Azure Cosmos DB account, or to an emulator over its
// endpoint, the way a user's deployment connects: a key or a Microsoft
// Entra ID credential, the account's own request charges, its 429s. It owns
// the run's throwaway database (created at the start, deleted at the end
// unless kept) and the meter every client of the run reports to.
//
// With a key, databases and containers are managed on the data plane. With
// Entra ID they cannot be (the data plane refuses management to tokens), so
// they are managed through Azure Resource Manager with the same credential:
// Options.AccountID names the account there.
package account

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/store"
)

// Options say which account a run uses and how it provisions it.
type Options struct {
	// Endpoint is the account endpoint (COSMOS_ENDPOINT). Required.
	Endpoint string
	// Key is the account key (COSMOS_KEY). When empty the run
	// authenticates with Credential.
	Key string
	// Credential authenticates with Entra ID when Key is empty (default:
	// azidentity.NewDefaultAzureCredential, which finds a managed
	// identity, workload identity, environment service principal or the
	// Azure CLI's login).
	Credential azcore.TokenCredential
	// AccountID is the account's Azure Resource Manager id
	// (/subscriptions/…/resourceGroups/…/providers/Microsoft.DocumentDB/databaseAccounts/…,
	// COSMOS_ACCOUNT_ID). Required with Entra ID; with a key it is used
	// only to tell serverless from provisioned when set.
	AccountID string
	// ARMEndpoint and ARMAudience locate Resource Manager (defaults
	// https://management.azure.com for both; COSMOS_ARM_ENDPOINT).
	ARMEndpoint, ARMAudience string
	// Throughput is the throwaway database's shared throughput on a
	// provisioned account (ignored on serverless). Default: autoscale up to
	// DefaultAutoscaleMax RU/s.
	Throughput Throughput
	// Prefix starts the throwaway database's name (default "durafeed").
	Prefix string
	// Keep leaves the throwaway database in place at Close.
	Keep bool
	// ClientOptions returns the base options of one new client (transport,
	// retries); it is called once per client, so that each can have
	// connections of its own, as separate processes have, and the meter's
	// policy is added to what it returns. Default: the SDK's defaults with
	// a transport of the client's own.
	ClientOptions func() *azcosmos.ClientOptions
	// PerRetryPolicies are added to every client the account hands out
	// (its own, NewClient's, ClientOptions' and StoreOptions'), on every
	// attempt, after the meter's policy: they sit between the meter and the
	// transport, so the meter counts what the client saw. An answer such a
	// policy makes up (an injected fault) is counted with its own headers
	// (its charge, its 429); an attempt it fails without an answer is not
	// counted, like a dropped connection, even when it sent the request.
	// The same policies serve every client: they must be safe for
	// concurrent use.
	PerRetryPolicies []policy.Policy
}

// Throughput is a database's provisioned throughput: Manual RU/s or an
// autoscale maximum (one of the two).
type Throughput struct {
	Manual, AutoscaleMax int32
}

// DefaultAutoscaleMax is the throwaway database's default autoscale
// maximum: billed hourly at the highest RU/s reached, at least a tenth of
// it.
const DefaultAutoscaleMax = 10000

// String is "autoscale up to N RU/s" or "N RU/s manual".
func (t Throughput) String() string {
	if t.Manual > 0 {
		return fmt.Sprintf("%d RU/s manual", t.Manual)
	}
	return fmt.Sprintf("autoscale up to %d RU/s", t.AutoscaleMax)
}

// ParseThroughput reads "autoscale:N" or "manual:N".
func ParseThroughput(s string) (Throughput, error) {
	kind, n, ok := strings.Cut(s, ":")
	var v int32
	if _, err := fmt.Sscanf(n, "%d", &v); !ok || err != nil || v <= 0 {
		return Throughput{}, fmt.Errorf("throughput %q: want autoscale:N or manual:N", s)
	}
	switch kind {
	case "autoscale":
		if v < 1000 || v%1000 != 0 {
			return Throughput{}, fmt.Errorf("throughput %q: an autoscale maximum is a multiple of 1000, at least 1000", s)
		}
		return Throughput{AutoscaleMax: v}, nil
	case "manual":
		if v < 400 || v%100 != 0 {
			return Throughput{}, fmt.Errorf("throughput %q: manual throughput is a multiple of 100, at least 400", s)
		}
		return Throughput{Manual: v}, nil
	}
	return Throughput{}, fmt.Errorf("throughput %q: want autoscale:N or manual:N", s)
}

// FromEnv reads COSMOS_ENDPOINT, COSMOS_KEY, COSMOS_ACCOUNT_ID and
// COSMOS_ARM_ENDPOINT. It reports false when no endpoint is set. The
// credential is left to Open's default.
func FromEnv(getenv func(string) string) (Options, bool) {
	o := Options{Endpoint: getenv("COSMOS_ENDPOINT"), Key: getenv("COSMOS_KEY"),
		AccountID: getenv("COSMOS_ACCOUNT_ID"), ARMEndpoint: getenv("COSMOS_ARM_ENDPOINT")}
	return o, o.Endpoint != ""
}

// Info is what the run prints about the account before it starts.
type Info struct {
	Endpoint string `json:"endpoint"`
	// Auth is "key" or "Entra ID".
	Auth string `json:"auth"`
	// Regions are the account's writable regions, then its readable ones.
	Regions []string `json:"regions"`
	// Consistency is the account's default consistency level.
	Consistency string `json:"consistency"`
	// Serverless reports a serverless account; otherwise Throughput is the
	// throwaway database's.
	Serverless bool   `json:"serverless"`
	Throughput string `json:"throughput,omitempty"`
	// Database is the run's throwaway database.
	Database string `json:"database"`
}

// String is one line for the run's header.
func (i Info) String() string {
	mode := "serverless"
	if !i.Serverless {
		mode = "provisioned, database " + i.Throughput
	}
	return fmt.Sprintf("account %s (%s): regions %s, %s consistency, %s; run database %q",
		i.Endpoint, i.Auth, strings.Join(i.Regions, ", "), i.Consistency, mode, i.Database)
}

// ErrOverCap is returned when a run's estimated or spent charge passes the
// cap the user set.
var ErrOverCap = errors.New("over the RU cap")

// CheckEstimate refuses a run whose estimate passes the cap (a cap of zero
// or less means none).
func CheckEstimate(estimateRU, capRU float64) error {
	if capRU > 0 && estimateRU > capRU {
		return fmt.Errorf("the run is estimated at %.0f RU, above the cap of %.0f RU (raise the cap flag or shrink the run): %w", estimateRU, capRU, ErrOverCap)
	}
	return nil
}

// Account is an open connection to an account with the run's throwaway
// database. Close deletes the database.
type Account struct {
	opts  Options
	meter *Meter
	cred  azcore.TokenCredential
	cli   *azcosmos.Client
	arm   *armClient
	info  Info

	mu      sync.Mutex
	created bool
}

// Open connects, reads the account's properties and creates the run's
// throwaway database (named Prefix-<UTC time>-<random>).
func Open(ctx context.Context, o Options) (*Account, error) {
	if o.Endpoint == "" {
		return nil, errors.New("account: no endpoint")
	}
	if o.Prefix == "" {
		o.Prefix = "durafeed"
	}
	if o.Throughput == (Throughput{}) {
		o.Throughput = Throughput{AutoscaleMax: DefaultAutoscaleMax}
	}
	a := &Account{opts: o, meter: NewMeter()}
	a.info.Endpoint, a.info.Auth = o.Endpoint, "key"
	if o.Key == "" {
		a.info.Auth = "Entra ID"
		a.cred = o.Credential
		if a.cred == nil {
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("account: the Entra ID credential: %w", err)
			}
			a.cred = cred
		}
		if o.AccountID == "" {
			return nil, errors.New("account: with Entra ID the run manages its database through Azure Resource Manager: set COSMOS_ACCOUNT_ID to the account's resource id (or use a key)")
		}
	}
	if o.AccountID != "" {
		cred := a.cred
		if cred == nil {
			cred2, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("account: COSMOS_ACCOUNT_ID needs an Entra ID credential: %w", err)
			}
			cred = cred2
		}
		arm, err := newARMClient(o, cred)
		if err != nil {
			return nil, err
		}
		a.arm = arm
	}
	var err error
	if a.cli, err = a.NewClient(); err != nil {
		return nil, err
	}
	if err := a.readProperties(ctx); err != nil {
		return nil, err
	}
	a.info.Database = fmt.Sprintf("%s-%s-%s", o.Prefix, time.Now().UTC().Format("20060102-150405"), randHex(3))
	if err := a.createDatabase(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Info describes the account and the run's database.
func (a *Account) Info() Info { return a.info }

// Database is the run's throwaway database.
func (a *Account) Database() string { return a.info.Database }

// Meter is the meter of every client the account hands out.
func (a *Account) Meter() *Meter { return a.meter }

// Client is the account's own metered client.
func (a *Account) Client() *azcosmos.Client { return a.cli }

// ClientOptions returns a copy of the base client options with the meter's
// policy added, followed by Options.PerRetryPolicies: give them to every
// client of the run (store.Options included) so that its requests are
// counted.
func (a *Account) ClientOptions() *azcosmos.ClientOptions {
	opts := a.baseOptions()
	opts.PerRetryPolicies = append(append(append([]policy.Policy{}, opts.PerRetryPolicies...), a.meter.Policy()), a.opts.PerRetryPolicies...)
	return &opts
}

// baseOptions returns a fresh copy of the base client options, with a
// transport of its own.
func (a *Account) baseOptions() azcosmos.ClientOptions {
	opts := azcosmos.ClientOptions{}
	if a.opts.ClientOptions != nil {
		if o := a.opts.ClientOptions(); o != nil {
			opts = *o
		}
	}
	if opts.Transport == nil {
		opts.Transport = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return opts
}

// NewClient returns a new metered client with its own connections (as
// another process's would be when the base options carry no transport).
func (a *Account) NewClient() (*azcosmos.Client, error) {
	if a.opts.Key != "" {
		cred, err := azcosmos.NewKeyCredential(a.opts.Key)
		if err != nil {
			return nil, fmt.Errorf("account: key: %w", err)
		}
		return azcosmos.NewClientWithKey(a.opts.Endpoint, cred, a.ClientOptions())
	}
	return azcosmos.NewClient(a.opts.Endpoint, a.cred, a.ClientOptions())
}

// StoreOptions returns store options for a container of the run's
// database, metered, with the run's key or credential. The container must
// exist (CreateContainer).
func (a *Account) StoreOptions(container string) store.Options {
	no := false
	return store.Options{Endpoint: a.opts.Endpoint, Key: a.opts.Key, Credential: a.cred,
		Database: a.info.Database, Container: container, ClientOptions: a.ClientOptions(), CreateIfMissing: &no}
}

// CreateContainer creates a container of the run's database with the
// store's properties (store.ContainerProperties), sharing the database's
// throughput.
func (a *Account) CreateContainer(ctx context.Context, name string) error {
	props := store.ContainerProperties(name)
	if a.managedByARM() {
		return a.arm.putContainer(ctx, a.info.Database, props)
	}
	db, err := a.cli.NewDatabase(a.info.Database)
	if err != nil {
		return err
	}
	if _, err := db.CreateContainer(ctx, props, nil); err != nil {
		return fmt.Errorf("account: create container %q: %w", name, err)
	}
	return nil
}

// DeleteContainer deletes a container of the run's database (a container
// already gone is not an error).
func (a *Account) DeleteContainer(ctx context.Context, name string) error {
	if a.managedByARM() {
		return a.arm.delete(ctx, a.arm.databasePath(a.info.Database)+"/containers/"+name)
	}
	c, err := a.cli.NewContainer(a.info.Database, name)
	if err != nil {
		return err
	}
	if _, err := c.Delete(ctx, nil); err != nil && statusOf(err) != http.StatusNotFound {
		return fmt.Errorf("account: delete container %q: %w", name, err)
	}
	return nil
}

// Close deletes the run's database unless Options.Keep. It uses its own
// deadline, so a cancelled run still cleans up.
func (a *Account) Close() error {
	a.mu.Lock()
	created := a.created
	a.created = false
	a.mu.Unlock()
	if !created || a.opts.Keep {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if a.managedByARM() {
		return a.arm.delete(ctx, a.arm.databasePath(a.info.Database))
	}
	db, err := a.cli.NewDatabase(a.info.Database)
	if err != nil {
		return err
	}
	if _, err := db.Delete(ctx, nil); err != nil && statusOf(err) != http.StatusNotFound {
		return fmt.Errorf("account: delete database %q: %w", a.info.Database, err)
	}
	return nil
}

// managedByARM reports whether the run's database and containers are
// managed through Resource Manager: with Entra ID, whose tokens the data
// plane refuses management to.
func (a *Account) managedByARM() bool { return a.opts.Key == "" }

// createDatabase creates the throwaway database, with throughput unless
// the account is serverless. With a key and no ARM view of the account,
// serverless is recognised by the service's refusal of throughput.
func (a *Account) createDatabase(ctx context.Context) error {
	t := a.opts.Throughput
	if a.managedByARM() {
		if err := a.arm.putDatabase(ctx, a.info.Database, t, a.info.Serverless); err != nil {
			return err
		}
	} else {
		var props *azcosmos.ThroughputProperties
		if !a.info.Serverless {
			props = throughputProperties(t)
		}
		_, err := a.cli.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: a.info.Database}, &azcosmos.CreateDatabaseOptions{ThroughputProperties: props})
		if err != nil && props != nil && isServerlessRefusal(err) {
			a.info.Serverless = true
			_, err = a.cli.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: a.info.Database}, nil)
		}
		if err != nil {
			return fmt.Errorf("account: create database %q: %w", a.info.Database, err)
		}
	}
	a.mu.Lock()
	a.created = true
	a.mu.Unlock()
	if !a.info.Serverless {
		a.info.Throughput = t.String()
	}
	return nil
}

func throughputProperties(t Throughput) *azcosmos.ThroughputProperties {
	if t.Manual > 0 {
		p := azcosmos.NewManualThroughputProperties(t.Manual)
		return &p
	}
	p := azcosmos.NewAutoscaleThroughputProperties(t.AutoscaleMax)
	return &p
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// isServerlessRefusal recognises the 400 a serverless account answers to
// a request setting throughput.
func isServerlessRefusal(err error) bool {
	return statusOf(err) == http.StatusBadRequest && strings.Contains(strings.ToLower(err.Error()), "serverless")
}
