// Command cosmosemu serves the in-memory Azure Cosmos DB emulator until
// SIGINT or SIGTERM.
//
//	go run ./cmd/cosmosemu -addr localhost:8081
//
// Flags: -addr, -key, -partitions, -http (plain HTTP), -cert-out (write the
// self-signed certificate as PEM, e.g. for SSL_CERT_FILE), -v (debug logs).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/durafeed/durafeed/cosmosemu"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cosmosemu:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "localhost:8081", "address to listen on")
	key := flag.String("key", cosmosemu.WellKnownKey, "base64 master key")
	partitions := flag.Int("partitions", cosmosemu.DefaultPartitionCount, "physical partition key ranges per new container")
	plain := flag.Bool("http", false, "serve plain HTTP instead of HTTPS")
	certOut := flag.String("cert-out", "", "write the server certificate (PEM) to this file")
	verbose := flag.Bool("v", false, "debug logging")
	flag.Parse()

	cfg := zap.NewProductionConfig()
	if *verbose {
		cfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	logger, err := cfg.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = logger.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := cosmosemu.Start(ctx, cosmosemu.Options{
		Addr: *addr, Key: *key, PartitionCount: *partitions, PlainHTTP: *plain, Logger: logger,
	})
	if err != nil {
		return err
	}
	if *certOut != "" {
		pem := srv.CertificatePEM()
		if pem == nil {
			_ = srv.Close()
			return errors.New("-cert-out needs HTTPS")
		}
		if err := os.WriteFile(*certOut, pem, 0o644); err != nil {
			_ = srv.Close()
			return fmt.Errorf("write certificate: %w", err)
		}
	}
	fmt.Println("cosmosemu listening on", srv.Endpoint())
	<-ctx.Done()
	logger.Info("cosmosemu: shutting down")
	return srv.Close()
}
