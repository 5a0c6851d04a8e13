// Command cosmosemu serves the in-memory Azure Cosmos DB emulator until
// SIGINT or SIGTERM.
//
//	go run ./cmd/cosmosemu -addr localhost:8081
//
// Flags: -addr, -key, -partitions, -http (plain HTTP), -cert-out (write the
// self-signed certificate as PEM, e.g. for SSL_CERT_FILE), -v (debug logs),
// and the test knobs of package cosmosemu/knobs: -latency, -latency-jitter,
// -latency-dist, -latency-seed, -sim-charges, -ru-budget, -fault (JSON,
// repeatable), -fault-seed.
//
// The account (package cosmosemu's Options):
//
//	-account-name NAME    the account's name, the one databaseAccounts name
//	                      its ARM surface serves (default cosmosemu; 3-44
//	                      lowercase letters, digits and hyphens)
//	-serverless           a serverless account: throughput refused on create,
//	                      offers neither read nor replaced
//	-region NAME          its region (default "South Central US")
//	-consistency LEVEL    its default consistency: Strong (default),
//	                      BoundedStaleness, Session, ConsistentPrefix, Eventual
//
// Microsoft Entra ID (any of these four makes the emulator enforce what an
// account with Entra ID enforces, Options.Auth: a data-plane token then
// needs a -data-contributor role, and management by token goes through
// the ARM endpoint):
//
//	-entra-tenant ID      accept tokens of this tenant only
//	-disable-local-auth   refuse key-signed requests
//	-data-contributor OID grant the principal Cosmos DB Built-in Data
//	                      Contributor on the account (repeatable)
//	-manager OID          let the principal manage databases and containers
//	                      through the ARM surface (repeatable; none: any
//	                      token with an ARM audience may)
//
// and a managed-identity token endpoint, as App Service's and Container
// Apps' (both flags or neither):
//
//	-identity-header SECRET  the X-IDENTITY-HEADER secret (IDENTITY_HEADER)
//	-identity-oid OID        the principal its tokens name; their tenant is
//	                         -entra-tenant's, else cosmosemu.DefaultTenantID
//
// A process with IDENTITY_ENDPOINT set to the printed identity endpoint,
// IDENTITY_HEADER to the secret and SSL_CERT_FILE to the -cert-out file
// (Linux and other Unix systems but macOS; elsewhere give the client a
// transport trusting the certificate) obtains tokens through azidentity's
// DefaultAzureCredential that the data plane and the ARM surface accept.
// Flags that contradict each other exit with status 2.
//
// The emulator prints, on standard output, its endpoint, then its ARM
// endpoint (the endpoint followed by /_arm: ARM clients' resource manager
// endpoint, audience https://management.azure.com) and, with the identity
// flags, its identity endpoint:
//
//	cosmosemu listening on https://127.0.0.1:8081/
//	cosmosemu ARM endpoint https://127.0.0.1:8081/_arm
//	cosmosemu identity endpoint https://127.0.0.1:8081/_emulator/identity/token
//
// Test tooling can drive the emulator through its unauthenticated admin
// surface under /_emulator/, e.g. split a physical partition:
//
//	curl -k -X POST https://localhost:8081/_emulator/split \
//	  -d '{"database":"db","container":"c","range":"0"}'
//	curl -k 'https://localhost:8081/_emulator/ranges?database=db&container=c'
//
// The knobs are read and changed at run time under the same prefix, e.g.
// GET /_emulator/counters, POST /_emulator/latency, POST /_emulator/faults.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/cosmosemu/knobs"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		os.Exit(2) // the FlagSet already reported it
	default:
		fmt.Fprintln(os.Stderr, "cosmosemu:", err)
		os.Exit(1)
	}
}

// usageError is a command-line error.
type usageError struct{ error }

// config holds the parsed command line. Extensions register their own flags
// on the same FlagSet in newFlags and contribute to the options in
// (*config).options (e.g. middleware and an Options.Admin handler).
type config struct {
	addr       string
	key        string
	partitions int
	plain      bool
	certOut    string
	verbose    bool
	knobs      func() (*knobs.Knobs, error)

	accountName string
	serverless  bool
	region      string
	consistency string

	tenant           string
	disableLocalAuth bool
	contributors     oidList
	managers         oidList

	identityHeader string
	identityOID    string
}

// oidList collects a repeatable flag's principal object ids.
type oidList []string

// String renders the ids comma-separated.
func (l *oidList) String() string { return strings.Join(*l, ",") }

// Set adds one id.
func (l *oidList) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return errors.New("an object id must not be empty")
	}
	*l = append(*l, v)
	return nil
}

// consistencyLevels are the default consistency levels an account may have.
var consistencyLevels = []string{"Strong", "BoundedStaleness", "Session", "ConsistentPrefix", "Eventual"}

// accountNameRE is Azure Cosmos DB's account name rule.
var accountNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,42}[a-z0-9]$`)

// newFlags registers every flag of the command on a new FlagSet.
func newFlags(stderr io.Writer) (*flag.FlagSet, *config) {
	fs := flag.NewFlagSet("cosmosemu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	fs.StringVar(&cfg.addr, "addr", "localhost:8081", "address to listen on")
	fs.StringVar(&cfg.key, "key", cosmosemu.WellKnownKey, "base64 master key")
	fs.IntVar(&cfg.partitions, "partitions", cosmosemu.DefaultPartitionCount, "physical partition key ranges per new container")
	fs.BoolVar(&cfg.plain, "http", false, "serve plain HTTP instead of HTTPS")
	fs.StringVar(&cfg.certOut, "cert-out", "", "write the server certificate (PEM) to this file")
	fs.BoolVar(&cfg.verbose, "v", false, "debug logging")
	fs.StringVar(&cfg.accountName, "account-name", cosmosemu.DefaultAccountName, "the account's name (the databaseAccounts name its ARM surface serves)")
	fs.BoolVar(&cfg.serverless, "serverless", false, "a serverless account: no dedicated throughput, no offers")
	fs.StringVar(&cfg.region, "region", cosmosemu.DefaultRegion, "the account's region")
	fs.StringVar(&cfg.consistency, "consistency", cosmosemu.DefaultConsistencyLevel, "the account's default consistency: "+strings.Join(consistencyLevels, ", "))
	fs.StringVar(&cfg.tenant, "entra-tenant", "", "accept Entra ID tokens of this tenant only")
	fs.BoolVar(&cfg.disableLocalAuth, "disable-local-auth", false, "refuse key-signed requests (Entra ID tokens only)")
	fs.Var(&cfg.contributors, "data-contributor", "grant this principal object id Cosmos DB Built-in Data Contributor on the account (repeatable)")
	fs.Var(&cfg.managers, "manager", "let this principal object id manage databases and containers through ARM (repeatable; none: any token)")
	fs.StringVar(&cfg.identityHeader, "identity-header", "", "serve the managed-identity token endpoint with this X-IDENTITY-HEADER secret (with -identity-oid)")
	fs.StringVar(&cfg.identityOID, "identity-oid", "", "the principal object id the managed-identity tokens name (with -identity-header)")
	cfg.knobs = knobs.Flags(fs)
	return fs, cfg
}

// validate refuses flags that contradict each other or name no valid
// value, and canonicalizes -consistency.
func (cfg *config) validate() error {
	if (cfg.identityHeader == "") != (cfg.identityOID == "") {
		return errors.New("-identity-header and -identity-oid go together: the endpoint needs both its secret and the principal its tokens name")
	}
	if cfg.certOut != "" && cfg.plain {
		return errors.New("-cert-out needs HTTPS; drop -http")
	}
	if !accountNameRE.MatchString(cfg.accountName) || strings.Contains(cfg.accountName, "--") {
		return fmt.Errorf("-account-name %q is not an Azure Cosmos DB account name (3-44 lowercase letters, digits and single hyphens, starting and ending with a letter or digit)", cfg.accountName)
	}
	if strings.TrimSpace(cfg.region) == "" {
		return errors.New("-region must not be empty")
	}
	found := false
	for _, l := range consistencyLevels {
		if strings.EqualFold(l, cfg.consistency) {
			cfg.consistency, found = l, true
		}
	}
	if !found {
		return fmt.Errorf("-consistency %q is not one of %s", cfg.consistency, strings.Join(consistencyLevels, ", "))
	}
	return nil
}

// options builds the emulator's options from the parsed flags: the knobs'
// middleware wraps every request and their admin handler is mounted under
// the emulator's admin prefix; any Entra ID flag makes Options.Auth.
func (cfg *config) options(logger *zap.Logger) (cosmosemu.Options, error) {
	k, err := cfg.knobs()
	if err != nil {
		return cosmosemu.Options{}, err
	}
	opts := cosmosemu.Options{
		Addr: cfg.addr, Key: cfg.key, PartitionCount: cfg.partitions, PlainHTTP: cfg.plain, Logger: logger,
		Middleware: k.Middleware(), Admin: k.AdminHandler(),
		AccountName: cfg.accountName, Serverless: cfg.serverless, Region: cfg.region, ConsistencyLevel: cfg.consistency,
	}
	if cfg.tenant != "" || cfg.disableLocalAuth || len(cfg.contributors) > 0 || len(cfg.managers) > 0 {
		a := &cosmosemu.AuthOptions{TenantID: cfg.tenant, DisableLocalAuth: cfg.disableLocalAuth, ManagementPrincipals: cfg.managers}
		for _, oid := range cfg.contributors {
			a.RoleAssignments = append(a.RoleAssignments, cosmosemu.RoleAssignment{PrincipalID: oid, RoleDefinitionID: cosmosemu.DataContributorRole, Scope: "/"})
		}
		opts.Auth = a
	}
	if cfg.identityHeader != "" {
		opts.Identity = &cosmosemu.IdentityOptions{Header: cfg.identityHeader, ObjectID: cfg.identityOID}
	}
	return opts, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	fs, cfg := newFlags(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return usageError{fmt.Errorf("unexpected arguments: %v", fs.Args())}
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "cosmosemu:", err)
		return usageError{err}
	}

	zcfg := zap.NewProductionConfig()
	if cfg.verbose {
		zcfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	logger, err := zcfg.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = logger.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts, err := cfg.options(logger)
	if err != nil {
		return err
	}
	srv, err := cosmosemu.Start(ctx, opts)
	if err != nil {
		return err
	}
	if cfg.certOut != "" {
		if err := os.WriteFile(cfg.certOut, srv.CertificatePEM(), 0o644); err != nil {
			_ = srv.Close()
			return fmt.Errorf("write certificate: %w", err)
		}
	}
	fmt.Fprintln(stdout, "cosmosemu listening on", srv.Endpoint())
	fmt.Fprintln(stdout, "cosmosemu ARM endpoint", srv.ARMEndpoint())
	if ep := srv.IdentityEndpoint(); ep != "" {
		fmt.Fprintln(stdout, "cosmosemu identity endpoint", ep)
	}
	<-ctx.Done()
	logger.Info("cosmosemu: shutting down")
	return srv.Close()
}
