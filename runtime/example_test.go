package runtime_test

import (
	"context"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/internal/memprovider"
	"github.com/durafeed/durafeed/runtime"
)

func Example() {
	reg := runtime.NewRegistry()
	runtime.RegisterActivity(reg, "Greet", func(_ context.Context, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
	runtime.RegisterOrchestration(reg, "HelloWorld", func(ctx *runtime.OrchestrationContext, name string) (string, error) {
		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
	})

	rt := runtime.New(memprovider.NewStore().Open(), reg, runtime.Options{IdleBackoff: 5 * time.Millisecond})
	if err := rt.Start(); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() { _ = rt.Shutdown(ctx) }()

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "hello-1", "HelloWorld", "World"); err != nil {
		panic(err)
	}
	status, err := client.WaitForOrchestration(ctx, "hello-1")
	if err != nil {
		panic(err)
	}
	var out string
	_ = status.DecodeOutput(&out)
	fmt.Println(status.State, out)
	// Output: Completed Hello, World!
}
