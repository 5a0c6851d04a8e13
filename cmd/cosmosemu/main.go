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
}

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
	cfg.knobs = knobs.Flags(fs)
	return fs, cfg
}

// options builds the emulator's options from the parsed flags: the knobs'
// middleware wraps every request and their admin handler is mounted under
// the emulator's admin prefix.
func (cfg *config) options(logger *zap.Logger) (cosmosemu.Options, error) {
	k, err := cfg.knobs()
	if err != nil {
		return cosmosemu.Options{}, err
	}
	return cosmosemu.Options{
		Addr: cfg.addr, Key: cfg.key, PartitionCount: cfg.partitions, PlainHTTP: cfg.plain, Logger: logger,
		Middleware: k.Middleware(), Admin: k.AdminHandler(),
	}, nil
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
		pem := srv.CertificatePEM()
		if pem == nil {
			_ = srv.Close()
			return errors.New("-cert-out needs HTTPS")
		}
		if err := os.WriteFile(cfg.certOut, pem, 0o644); err != nil {
			_ = srv.Close()
			return fmt.Errorf("write certificate: %w", err)
		}
	}
	fmt.Fprintln(stdout, "cosmosemu listening on", srv.Endpoint())
	<-ctx.Done()
	logger.Info("cosmosemu: shutting down")
	return srv.Close()
}
