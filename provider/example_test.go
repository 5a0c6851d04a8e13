package provider_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/runtime"
	"github.com/durafeed/durafeed/store"
)

// Example runs one orchestration on the Cosmos DB provider, in its default
// event-driven mode, against an embedded emulator. README.md shows the
// lines from the comment on cfg to the end, without the emulator's setup.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	emu, err := cosmosemu.Start(ctx, cosmosemu.Options{})
	if err != nil {
		panic(err)
	}
	defer emu.Close()
	cfg := provider.Config{Store: store.Options{Endpoint: emu.Endpoint(), Key: emu.Key(), ClientOptions: emu.ClientOptions()}}

	// cfg: provider.ConfigFromEnv() on Azure (COSMOS_ENDPOINT; COSMOS_KEY or Entra ID); here an embedded emulator.
	p, err := provider.New(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer p.Close() // hands this replica's leases to the other replicas

	reg := runtime.NewRegistry()
	runtime.RegisterActivity(reg, "Greet", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
	runtime.RegisterOrchestration(reg, "HelloWorld", func(ctx *runtime.OrchestrationContext, name string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
	})
	rt := runtime.New(p, reg, runtime.Options{})
	if err := rt.Start(); err != nil {
		panic(err)
	}
	defer rt.Shutdown(context.Background())

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "hello-1", "HelloWorld", "World", runtime.WithRequestID("start-hello-1")); err != nil {
		panic(err)
	}
	status, err := client.WaitForOrchestration(ctx, "hello-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(status.State, status.Output) // Output is JSON; status.DecodeOutput decodes it
	// Output: Completed "Hello, World!"
}

// TestREADMESnippet keeps README.md's library snippet the same code as
// Example: the README's Go block, from its line starting "// cfg:" to its
// end, must be Example's lines from that line on, one for one (each
// indented by one more tab here), and at most 30 lines.
func TestREADMESnippet(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var snippet []string
	in := false
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case !in && strings.HasPrefix(line, "// cfg: provider.ConfigFromEnv()"):
			in = true
		case in && line == "```":
			in = false
		}
		if in {
			snippet = append(snippet, line)
		}
	}
	if len(snippet) == 0 {
		t.Fatal(`README.md has no Go block starting with "// cfg: provider.ConfigFromEnv()"`)
	}
	if len(snippet) > 30 {
		t.Errorf("README.md's library snippet has %d lines, more than 30", len(snippet))
	}
	var body []string
	for _, line := range strings.Split(string(self), "\n") {
		body = append(body, strings.TrimPrefix(line, "\t"))
	}
	start := slices.Index(body, snippet[0])
	if start < 0 || start+len(snippet) > len(body) || !slices.Equal(body[start:start+len(snippet)], snippet) {
		t.Fatalf("README.md's library snippet is not the body of Example from its %q line on; README shows:\n%s",
			snippet[0], strings.Join(snippet, "\n"))
	}
}
