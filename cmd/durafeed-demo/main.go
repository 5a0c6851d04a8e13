// Command durafeed-demo runs durafeed end to end: several runtime replicas
// share one Cosmos DB container and run a mixed workload of orchestrations
// (hello world, fan-out/fan-in, a durable timer, an external event raised
// by the demo, sub-orchestrations) while a progress bar runs; it then
// prints a summary: completions, failures, throughput, latency percentiles
// from start to completion and, on the embedded emulator, the request count
// and simulated request units.
//
//	make demo                                   # or: go run ./cmd/durafeed-demo
//	go run ./cmd/durafeed-demo -n 1000 -replicas 5 -latency 2ms
//
// By default it starts an embedded cosmosemu (4 partitions; -latency adds a
// simulated network round trip through cosmosemu/knobs). With
// COSMOS_ENDPOINT set it runs against Azure Cosmos DB instead, configured
// by provider.ConfigFromEnv: COSMOS_KEY for key auth, otherwise Entra ID
// through DefaultAzureCredential (managed identity, workload identity,
// Azure CLI, ...), in which case the database and container
// (COSMOS_DATABASE, COSMOS_CONTAINER, default "durafeed") must already
// exist. Every replica has its own provider and SDK client, as separate
// processes would. Ctrl-C stops the workload, prints what finished and
// shuts everything down cleanly.
//
// Exit status: 0 when every orchestration completed with its expected
// output, 1 when one failed, produced another output or did not finish
// within -timeout (or the demo could not run), 2 for bad flags, 130 when
// interrupted.
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
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the demo with command-line args and returns the exit status.
func realMain(args []string, stdout, stderr io.Writer) int {
	cfg, level, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.Azure = os.Getenv("COSMOS_ENDPOINT") != ""
	log := newLogger(stderr, level)
	defer func() { _ = log.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := run(ctx, cfg, stdout, isTerminal(stdout), log)
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "durafeed-demo:", err)
		return 1
	case s.Interrupted:
		return 130
	case !s.ok():
		return 1
	}
	return 0
}

// defaultConfig is the demo's default configuration: fast on a laptop.
func defaultConfig() config {
	return config{
		Orchestrations: 200, Replicas: 3, Partitions: 4,
		FanOut: 10, TimerDelay: 200 * time.Millisecond, ApprovalTimeout: time.Minute,
		Timeout:                  2 * time.Minute,
		OrchestrationConcurrency: 4, WorkerConcurrency: 4, IdleBackoff: 25 * time.Millisecond,
	}
}

// parseFlags parses args into a config and a log level.
func parseFlags(args []string, stderr io.Writer) (config, zapcore.Level, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("durafeed-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Orchestrations, "n", cfg.Orchestrations, "number of orchestrations to run")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "number of runtime replicas, each with its own provider and client")
	fs.IntVar(&cfg.Partitions, "partitions", cfg.Partitions, "physical partitions of the embedded emulator")
	fs.DurationVar(&cfg.Latency, "latency", cfg.Latency, "latency injected per emulator request (e.g. 2ms)")
	fs.DurationVar(&cfg.Jitter, "jitter", cfg.Jitter, "uniform jitter around -latency")
	fs.IntVar(&cfg.FanOut, "fanout", cfg.FanOut, "activities per fan-out/fan-in orchestration")
	fs.DurationVar(&cfg.TimerDelay, "timer", cfg.TimerDelay, "durable timer of the timer orchestrations")
	fs.DurationVar(&cfg.ApprovalTimeout, "approval-timeout", cfg.ApprovalTimeout, "how long an event orchestration waits for the demo's event before failing")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "orchestrations started per second (0: all at once)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up on unfinished orchestrations after this long")
	fs.IntVar(&cfg.OrchestrationConcurrency, "orch-concurrency", cfg.OrchestrationConcurrency, "orchestration dispatchers per replica")
	fs.IntVar(&cfg.WorkerConcurrency, "worker-concurrency", cfg.WorkerConcurrency, "activity workers per replica")
	fs.DurationVar(&cfg.IdleBackoff, "idle-backoff", cfg.IdleBackoff, "pause of a dispatcher whose poll found no work")
	level := zap.ErrorLevel
	fs.TextVar(&level, "log-level", level, "log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return config{}, level, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "durafeed-demo: unexpected arguments %q\n", fs.Args())
		return config{}, level, errors.New("unexpected arguments")
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "durafeed-demo:", err)
		return config{}, level, err
	}
	return cfg, level, nil
}

// newLogger logs to w at level, in the console format.
func newLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), level)
	return zap.New(core)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
