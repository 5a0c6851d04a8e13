// Suborchestrations shows orchestrations composed of orchestrations: an
// order is fulfilled by one child orchestration per line item, run in
// parallel; each child has its own history (and could run on another
// runtime). A child that fails reaches the parent as an error it can
// handle, here by backordering the item instead of failing the order.
//
//	go run ./examples/suborchestrations
//
// It runs on an embedded Cosmos DB emulator (cosmosemu), so it needs
// nothing but Go. Set COSMOS_ENDPOINT to run on Azure Cosmos DB instead:
// with COSMOS_KEY for key auth, otherwise with Entra ID through
// DefaultAzureCredential (the database and container, COSMOS_DATABASE and
// COSMOS_CONTAINER, default "durafeed", must then exist).
package main

import (
	"context"
	"errors"
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
		fmt.Fprintln(os.Stderr, "suborchestrations:", err)
		os.Exit(1)
	}
}

// order is the parent's input; its result lists one line per item.
type order struct {
	ID    string   `json:"id"`
	Items []string `json:"items"`
}

// inStock is the warehouse, as the Reserve activity sees it.
func inStock(sku string) bool { return sku != "monitor" }

func registerCode(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "Reserve", func(_ context.Context, sku string) (string, error) {
		if !inStock(sku) {
			return "", errors.New(sku + " is out of stock")
		}
		return "reserved " + sku, nil
	})
	runtime.RegisterActivity(reg, "Ship", func(_ context.Context, sku string) (string, error) {
		return "TRK-" + sku, nil
	})

	// The child: reserve, then ship one item.
	runtime.RegisterOrchestration(reg, "ShipItem", func(ctx *runtime.OrchestrationContext, sku string) (string, error) {
		if _, err := ctx.CallActivity("Reserve", sku).AwaitRaw(); err != nil {
			return "", err // fails the child; the parent receives the failure
		}
		return runtime.AwaitAs[string](ctx.CallActivity("Ship", sku))
	})

	// The parent: one child per item, in parallel.
	runtime.RegisterOrchestration(reg, "FulfillOrder", func(ctx *runtime.OrchestrationContext, o order) ([]string, error) {
		children := make([]*runtime.Task, len(o.Items))
		for i, sku := range o.Items {
			children[i] = ctx.CallSubOrchestration("ShipItem", sku, runtime.WithInstanceID(ctx.InstanceID()+"/"+sku))
		}
		_ = ctx.Join(children...) // wait for all; outcomes are read one by one below
		lines := make([]string, len(children))
		for i, child := range children {
			tracking, err := runtime.AwaitAs[string](child)
			var failure runtime.ErrorDetails
			switch {
			case err == nil:
				lines[i] = o.Items[i] + ": shipped, tracking " + tracking
			case errors.As(err, &failure):
				lines[i] = o.Items[i] + ": backordered (" + failure.Message + ")"
			default:
				return nil, err
			}
		}
		return lines, nil
	})
}

func run(ctx context.Context, out io.Writer) error {
	p, closeStore, err := openProvider(ctx)
	if err != nil {
		return err
	}
	defer closeStore()

	reg := runtime.NewRegistry()
	registerCode(reg)
	rt := runtime.New(p, reg, runtime.Options{IdleBackoff: 20 * time.Millisecond})
	if err := rt.Start(); err != nil {
		return err
	}
	defer shutdown(rt)

	client := rt.Client()
	o := order{ID: "order-" + uuid.NewString(), Items: []string{"keyboard", "monitor", "mouse"}}
	if err := client.StartOrchestration(ctx, o.ID, "FulfillOrder", o); err != nil {
		return err
	}
	status, err := client.WaitForOrchestration(ctx, o.ID)
	if err != nil {
		return err
	}
	if status.State != runtime.StateCompleted {
		return fmt.Errorf("%s ended %s: %v", o.ID, status.State, status.Failure)
	}
	var lines []string
	if err := status.DecodeOutput(&lines); err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	// Every child is an instance of its own, linked to its parent.
	info, err := client.GetInstanceInfo(ctx, o.ID+"/mouse")
	if err != nil {
		return err
	}
	if info.ParentInstanceID != o.ID {
		return fmt.Errorf("child %s has parent %q", info.InstanceID, info.ParentInstanceID)
	}
	fmt.Fprintf(out, "child instance <order>/mouse: %s, parent <order>\n", info.Status)
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
