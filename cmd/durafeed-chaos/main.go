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
// # On an Azure Cosmos DB account
//
// When COSMOS_ENDPOINT is set the campaigns run on that account (or an
// emulator over its endpoint) instead of the embedded emulator, each in a
// throwaway database of its own (named durafeed-chaos-<time>-<random>,
// deleted at the end unless -keep), authenticated with COSMOS_KEY or,
// without a key, with Microsoft Entra ID (then COSMOS_ACCOUNT_ID names
// the account in Azure Resource Manager, which creates and deletes the
// database; see internal/account):
//
//	COSMOS_ENDPOINT=https://acct.documents.azure.com:443/ COSMOS_KEY=... \
//	  go run ./cmd/durafeed-chaos -n 200
//
// The service cannot be told to fail, so on an account every fault runs
// client side, in each SDK client's pipeline, at the same rates and
// under the same rule ids as on the emulator: 429 with retry-after
// (-throttle), 503 (-unavailable) and 410 (-gone) are answered without
// sending the request; dropped connections (-drop) fail half before
// sending and half after the request ran (its answer discarded); 408
// (-timeout-after) replaces the answer of a request that ran. -latency is
// added by every client before each attempt, on top of the network's. The
// kill of a replica is process-local and runs as on the emulator. The
// partition split does not run: an account's partitions split only when
// the service decides (-splits and -partitions are ignored there, and the
// campaign's events say so).
//
// Before starting, the campaigns' estimated charge (chaos.EstimateRU) is
// checked against -max-ru (default 1,000,000 RU, as the other tools; all
// modes together: up to about 700 roots per mode in both modes, so the
// default 1000 are refused until -n or -max-ru changes; 0: no cap), and
// the run is refused when above it, with nothing created; while running, each mode's campaign
// is stopped when its clients' charge passes its share of the cap (the
// cap split in proportion to the modes' estimates). The output starts with
// the account's line (endpoint, regions, consistency, throughput, the
// run's database) and reports the RU spent and the 429s seen. -throughput
// sets the throwaway database's throughput on a provisioned account
// (autoscale:N or manual:N; default autoscale up to 10,000 RU/s).
//
// Exit status: 0 when every correctness check passed in every mode, 1
// when one failed (or a campaign could not run, or the cap refused or
// stopped it), 2 for bad flags, 130 when interrupted.
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
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/provider"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// defaultMaxRU is -max-ru's default on an account.
const defaultMaxRU = 1000000

// options are the parsed flags.
type options struct {
	modes    []provider.Mode
	campaign chaos.Campaign
	level    zapcore.Level
	// maxRU caps every mode's campaign together on an account (0: none).
	maxRU float64
}

// parseFlags parses args, with the account from getenv (COSMOS_ENDPOINT
// and the rest: account.FromEnv) when it names one; flag.ErrHelp is
// returned for -h.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	c := chaos.Campaign{}
	rates := chaos.DefaultFaultRates()
	fs := flag.NewFlagSet("durafeed-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "both", "dispatch mode: event, polling or both")
	fs.IntVar(&c.Orchestrations, "n", chaos.DefaultOrchestrations, "root orchestrations per mode")
	fs.IntVar(&c.Replicas, "replicas", chaos.DefaultReplicas, "runtime replicas at the start")
	fs.IntVar(&c.Partitions, "partitions", chaos.DefaultPartitions, "physical partitions of the emulator (ignored on an account)")
	fs.DurationVar(&c.Latency, "latency", chaos.DefaultLatency, "latency added to every emulator request, or on an account by every client to each attempt (0: none)")
	fs.Uint64Var(&c.Seed, "seed", chaos.DefaultSeed, "seed of the fault and latency draws")
	fs.Float64Var(&c.Rate, "rate", chaos.DefaultRate, "roots started per second (0: as fast as possible)")
	fs.IntVar(&c.Splits, "splits", chaos.DefaultSplits, "partition splits during the run (0: none; none on an account)")
	fs.Float64Var(&c.KillAt, "kill-at", chaos.DefaultKillAt, "share of roots started when a replica is killed (0: no kill)")
	fs.Float64Var(&rates.Throttle, "throttle", rates.Throttle, "rate of 429 answers (with retry-after)")
	fs.Float64Var(&rates.Unavailable, "unavailable", rates.Unavailable, "rate of 503 answers")
	fs.Float64Var(&rates.Drop, "drop", rates.Drop, "rate of dropped connections (half after the request ran)")
	fs.Float64Var(&rates.TimeoutAfter, "timeout-after", rates.TimeoutAfter, "rate of 408 answers after the request ran")
	fs.Float64Var(&rates.Gone, "gone", rates.Gone, "rate of 410 answers")
	fs.DurationVar(&c.Timeout, "timeout", chaos.DefaultTimeout, "give up on the workload after this long (a hang catcher)")
	maxRU := fs.Float64("max-ru", defaultMaxRU, "on an account (COSMOS_ENDPOINT): refuse or stop the campaigns past this many RU, all modes together (0: no cap)")
	keep := fs.Bool("keep", false, "on an account: keep the throwaway database")
	throughput := fs.String("throughput", "", "on a provisioned account: the throwaway database's throughput, autoscale:N or manual:N (default autoscale:10000)")
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
	if ao, ok := account.FromEnv(getenv); ok {
		ao.Keep = *keep
		if *throughput != "" {
			t, err := account.ParseThroughput(*throughput)
			if err != nil {
				fmt.Fprintf(stderr, "durafeed-chaos: -throughput: %v\n", err)
				return options{}, err
			}
			ao.Throughput = t
		}
		if *maxRU < 0 {
			fmt.Fprintln(stderr, "durafeed-chaos: -max-ru must not be negative")
			return options{}, errors.New("bad -max-ru")
		}
		c.Account, o.maxRU = &ao, *maxRU
	}
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
func realMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, getenv, stderr)
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

	caps, err := splitCap(o)
	if err != nil {
		fmt.Fprintf(stderr, "durafeed-chaos: %v\n", err)
		return 1
	}
	var summaries []string
	status := 0
	for i, m := range o.modes {
		c := o.campaign
		c.Mode, c.Progress, c.Logger, c.MaxRU = m, stdout, log, caps[i]
		res, err := c.Run(ctx)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "durafeed-chaos: interrupted")
			return 130
		}
		if errors.Is(err, account.ErrOverCap) {
			fmt.Fprintf(stderr, "durafeed-chaos: %s campaign refused or stopped at its share of -max-ru (%.0f RU): %v\n", m, c.MaxRU, err)
			status = 1
			continue
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

// splitCap checks the modes' campaigns' estimates, together, against the
// cap on an account and splits the cap between them in proportion to
// their estimates, so that each mode's share covers its estimate and the
// shares sum to the cap. It returns each mode's MaxRU (all zero on the
// embedded emulator or without a cap) or an error wrapping
// account.ErrOverCap.
func splitCap(o options) ([]float64, error) {
	caps := make([]float64, len(o.modes))
	if o.campaign.Account == nil || o.maxRU <= 0 {
		return caps, nil
	}
	total := 0.0
	for i, m := range o.modes {
		c := o.campaign
		c.Mode = m
		caps[i] = c.EstimateRU()
		total += caps[i]
	}
	if err := account.CheckEstimate(total, o.maxRU); err != nil {
		return nil, fmt.Errorf("%d mode(s) of %d roots: %w", len(o.modes), o.campaign.Orchestrations, err)
	}
	for i, est := range caps {
		caps[i] = max(o.maxRU*est/total, est) // max: rounding
	}
	return caps, nil
}
