// Package runtime runs durable orchestrations on any durafeed provider
// (durable.Provider): a deterministic replay engine (package
// runtime/replay), orchestration and activity dispatchers, and a Client.
//
// Orchestrations are Go functions that coordinate activities, timers,
// external events, sub-orchestrations and key-value state through an
// *OrchestrationContext. They are replayed from their durable history on
// every turn, so they must be deterministic: use ctx.Now, ctx.NewGUID and
// ctx.Logger instead of the clock, random numbers and plain logging, and
// do I/O only in activities. Activities are plain functions taking a
// context.Context, run at least once by worker dispatchers.
//
//	reg := runtime.NewRegistry()
//	runtime.RegisterActivity(reg, "Greet", func(ctx context.Context, name string) (string, error) {
//		return "Hello, " + name + "!", nil
//	})
//	runtime.RegisterOrchestration(reg, "HelloWorld", func(ctx *runtime.OrchestrationContext, name string) (string, error) {
//		return runtime.AwaitAs[string](ctx.CallActivity("Greet", name))
//	}, runtime.WithVersion("1.0.0"))
//
//	// p is a durable.Provider, e.g. from provider.New (Cosmos DB).
//	rt := runtime.New(p, reg, runtime.Options{})
//	if err := rt.Start(); err != nil {
//		return err
//	}
//	defer rt.Shutdown(context.Background())
//
//	client := rt.Client()
//	if err := client.StartOrchestration(ctx, "hello-1", "HelloWorld", "World"); err != nil {
//		return err
//	}
//	status, err := client.WaitForOrchestration(ctx, "hello-1")
//	if err != nil {
//		return err
//	}
//	fmt.Println(status.State) // Completed
//
// examples/hello is this program, complete.
//
// Composition: ctx.Join waits for several tasks; ctx.Select returns the
// first to complete and cancels the others (activities by lock stealing,
// sub-orchestrations with a cancellation request, event waits by
// withdrawing the subscription). Failures reach orchestration code as
// ErrorDetails values (errors.As); failures the code cannot handle
// (unregistered code, undecodable input, panics, nondeterminism, poison
// messages) fail the instance with structured details instead of crashing
// or hanging the process.
//
// Sub-orchestrations: a child records the parent execution that scheduled
// it (durable.StartOrchestration and history.OrchestrationStarted
// ParentExecutionID) and reports its completion to that execution, so a
// child that finishes after its parent continued as new is not mistaken
// for a child of the new execution (it is dropped there). Children started
// before that field existed report 0, and the dispatcher then routes to the
// parent's current execution. Auto-named children are
// "<parent>::sub::<eventId>" in a first execution and
// "<parent>::exec<executionId>::sub::<eventId>" after a continue-as-new.
//
// Payloads are JSON by default (typed registration and CallActivity, with
// AwaitAs to decode); the Raw variants pass strings through unchanged.
//
// Runtimes scale out by sharing a provider's store: every replica fetches
// from the same queues, and TagFilter and sessions route activities to
// particular replicas. The end-to-end sample suite in runtime/runtimetest
// runs against any provider factory (the in-memory reference and Cosmos DB
// over cosmosemu); examples/ holds small programs to copy from, and
// cmd/durafeed-demo runs replicas under a mixed workload.
package runtime
