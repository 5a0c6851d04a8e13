// Fanout shows fan-out/fan-in: an orchestration starts one activity per
// document, all in parallel (on every worker of every runtime sharing the
// store), waits for all of them with Join, and aggregates the results in
// document order whatever order they finished in.
//
//	go run ./examples/fanout
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
	"strings"
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
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

// document is one unit of work.
type document struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// wordCount is an activity's result; report the orchestration's.
type wordCount struct {
	Name  string `json:"name"`
	Words int    `json:"words"`
}

type report struct {
	Counts []wordCount `json:"counts"`
	Total  int         `json:"total"`
}

func registerCode(reg *runtime.Registry) {
	runtime.RegisterActivity(reg, "CountWords", func(_ context.Context, d document) (wordCount, error) {
		return wordCount{Name: d.Name, Words: len(strings.Fields(d.Text))}, nil
	})
	runtime.RegisterOrchestration(reg, "CountAllWords", func(ctx *runtime.OrchestrationContext, docs []document) (report, error) {
		// Fan out: schedule every activity before waiting for any.
		tasks := make([]*runtime.Task, len(docs))
		for i, d := range docs {
			tasks[i] = ctx.CallActivity("CountWords", d)
		}
		// Fan in: Join waits for all and returns the first failure.
		counts, err := runtime.JoinAs[wordCount](ctx, tasks...)
		if err != nil {
			return report{}, err
		}
		r := report{Counts: counts}
		for _, c := range counts {
			r.Total += c.Words
		}
		return r, nil
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
	rt := runtime.New(p, reg, runtime.Options{WorkerConcurrency: 8})
	if err := rt.Start(); err != nil {
		return err
	}
	defer shutdown(rt)

	docs := make([]document, 20)
	for i := range docs {
		docs[i] = document{Name: fmt.Sprintf("doc-%02d", i+1), Text: strings.Repeat("lorem ipsum ", i+1)}
	}
	client := rt.Client()
	id := "fanout-" + uuid.NewString()
	if err := client.StartOrchestration(ctx, id, "CountAllWords", docs); err != nil {
		return err
	}
	status, err := client.WaitForOrchestration(ctx, id)
	if err != nil {
		return err
	}
	if status.State != runtime.StateCompleted {
		return fmt.Errorf("%s ended %s: %v", id, status.State, status.Failure)
	}
	var r report
	if err := status.DecodeOutput(&r); err != nil {
		return err
	}
	fmt.Fprintf(out, "counted %d documents in parallel: first %s=%d, last %s=%d, total %d words\n",
		len(r.Counts), r.Counts[0].Name, r.Counts[0].Words, r.Counts[len(r.Counts)-1].Name, r.Counts[len(r.Counts)-1].Words, r.Total)
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
