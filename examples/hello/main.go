// Hello is the smallest durafeed program: one orchestration that calls one
// activity, run by one runtime, started and awaited through its client.
//
//	go run ./examples/hello
//
// It runs on an embedded Cosmos DB emulator (cosmosemu), so it needs
// nothing but Go. Set COSMOS_ENDPOINT to run on Azure Cosmos DB instead:
// with COSMOS_KEY for key auth, otherwise with Entra ID through
// DefaultAzureCredential (the database and container, COSMOS_DATABASE and
// COSMOS_CONTAINER, default "durafeed", must then exist).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/google/uuid"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	p, closeStore, err := openProvider(ctx)
	if err != nil {
		return err
	}
	defer closeStore()

	// Register the code: activities do the work (I/O is allowed there),
	// orchestrations coordinate it and are replayed, so they must be
	// deterministic.
	reg := runtime.NewRegistry()
	runtime.RegisterActivity(reg, "Greet", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
	runtime.RegisterOrchestration(reg, "HelloWorld", func(ctx *runtime.OrchestrationContext, name string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
	})

	rt := runtime.New(p, reg, runtime.Options{})
	if err := rt.Start(); err != nil {
		return err
	}
	defer shutdown(rt)

	client := rt.Client()
	id := "hello-" + uuid.NewString()
	if err := client.StartOrchestration(ctx, id, "HelloWorld", "World"); err != nil {
		return err
	}
	status, err := client.WaitForOrchestration(ctx, id)
	if err != nil {
		return err
	}
	if status.State != runtime.StateCompleted {
		return fmt.Errorf("%s ended %s: %v", id, status.State, status.Failure)
	}
	var greeting string
	if err := status.DecodeOutput(&greeting); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s\n", status.State, greeting)
	return nil
}

// shutdown stops the runtime, letting in-flight work finish for a while.
func shutdown(rt *runtime.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rt.Shutdown(ctx)
}

// openProvider connects to Azure Cosmos DB when COSMOS_ENDPOINT is set and
// to an embedded emulator otherwise; closeStore releases what it opened.
func openProvider(ctx context.Context) (p *provider.Provider, closeStore func(), err error) {
	if os.Getenv("COSMOS_ENDPOINT") != "" {
		cfg, err := provider.ConfigFromEnv()
		if err != nil {
			return nil, nil, err
		}
		p, err := provider.New(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Close() }, nil
	}
	emu, err := cosmosemu.Start(ctx, cosmosemu.Options{})
	if err != nil {
		return nil, nil, err
	}
	p, err = provider.New(ctx, provider.Config{Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), ClientOptions: emu.ClientOptions()}})
	if err != nil {
		_ = emu.Close()
		return nil, nil, err
	}
	return p, func() { _ = p.Close(); _ = emu.Close() }, nil
}
