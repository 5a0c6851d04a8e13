// Command durafeed-chaos runs durafeed's chaos campaign (package chaos):
// an embedded cosmosemu with latency and injected faults, three runtime
// replicas and a client, a mixed workload of root orchestrations, a
// partition split and the kill of a replica (with a replacement joining)
// while it runs, and the history checker over everything read back. It
// prints the campaign's events and progress, the details behind the
// verdict, and one summary line per mode:
//
//	make chaos                                   # both modes, 1000 orchestrations each
//	go run ./cmd/durafeed-chaos -mode event -n 200 -seed 7
//	go run ./cmd/durafeed-chaos -drop 0.05 -throttle 0 -latency 0
//
// Exit status: 0 when every correctness check passed in every mode, 1
// when one failed (or a campaign could not run), 2 for bad flags, 130
// when interrupted.
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
	"go.uber.org/zap/zapcore"

	"github.com/durafeed/durafeed/chaos"
	"github.com/durafeed/durafeed/provider"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the parsed flags.
type options struct {
	modes    []provider.Mode
	campaign chaos.Campaign
	level    zapcore.Level
}

// parseFlags parses args; flag.ErrHelp is returned for -h.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	c := chaos.Campaign{}
	rates := chaos.DefaultFaultRates()
	fs := flag.NewFlagSet("durafeed-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "both", "dispatch mode: event, polling or both")
	fs.IntVar(&c.Orchestrations, "n", chaos.DefaultOrchestrations, "root orchestrations per mode")
	fs.IntVar(&c.Replicas, "replicas", chaos.DefaultReplicas, "runtime replicas at the start")
	fs.IntVar(&c.Partitions, "partitions", chaos.DefaultPartitions, "physical partitions of the emulator")
	fs.DurationVar(&c.Latency, "latency", chaos.DefaultLatency, "latency added to every emulator request (0: none)")
	fs.Uint64Var(&c.Seed, "seed", chaos.DefaultSeed, "seed of the fault and latency draws")
	fs.Float64Var(&c.Rate, "rate", chaos.DefaultRate, "roots started per second (0: as fast as possible)")
	fs.IntVar(&c.Splits, "splits", chaos.DefaultSplits, "partition splits during the run (0: none)")
	fs.Float64Var(&c.KillAt, "kill-at", chaos.DefaultKillAt, "share of roots started when a replica is killed (0: no kill)")
	fs.Float64Var(&rates.Throttle, "throttle", rates.Throttle, "rate of 429 answers (with retry-after)")
	fs.Float64Var(&rates.Unavailable, "unavailable", rates.Unavailable, "rate of 503 answers")
	fs.Float64Var(&rates.Drop, "drop", rates.Drop, "rate of dropped connections (half after the request ran)")
	fs.Float64Var(&rates.TimeoutAfter, "timeout-after", rates.TimeoutAfter, "rate of 408 answers after the request ran")
	fs.Float64Var(&rates.Gone, "gone", rates.Gone, "rate of 410 answers")
	fs.DurationVar(&c.Timeout, "timeout", chaos.DefaultTimeout, "give up on the workload after this long (a hang catcher)")
	level := zap.ErrorLevel
	fs.TextVar(&level, "log-level", level, "log level on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "durafeed-chaos: unexpected arguments %q\n", fs.Args())
		return options{}, errors.New("unexpected arguments")
	}
	o := options{level: level}
	switch *mode {
	case "event", "event-driven":
		o.modes = []provider.Mode{provider.ModeEventDriven}
	case "polling":
		o.modes = []provider.Mode{provider.ModePolling}
	case "both":
		o.modes = []provider.Mode{provider.ModeEventDriven, provider.ModePolling}
	default:
		fmt.Fprintf(stderr, "durafeed-chaos: -mode must be event, polling or both, not %q\n", *mode)
		return options{}, errors.New("bad -mode")
	}
	// The flags say 0 for none; the campaign's zero means its default.
	if c.Latency == 0 {
		c.Latency = -1
	}
	if c.Rate == 0 {
		c.Rate = -1
	}
	if c.Splits == 0 {
		c.Splits = -1
	}
	if c.KillAt <= 0 {
		c.KillAt = -1
	}
	c.Faults = &rates
	o.campaign = c
	return o, nil
}

// realMain runs the campaigns and returns the exit status.
func realMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(stderr), o.level)
	log := zap.New(core)
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var summaries []string
	status := 0
	for _, m := range o.modes {
		c := o.campaign
		c.Mode, c.Progress, c.Logger = m, stdout, log
		res, err := c.Run(ctx)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "durafeed-chaos: interrupted")
			return 130
		}
		if err != nil {
			fmt.Fprintf(stderr, "durafeed-chaos: %s campaign could not run: %v\n", m, err)
			status = 1
			continue
		}
		res.WriteDetails(stdout)
		summaries = append(summaries, res.Summary())
		if !res.OK() {
			status = 1
		}
	}
	for _, s := range summaries {
		fmt.Fprintln(stdout, s)
	}
	return status
}
