// Command durafeed-fleet runs durafeed as real processes: cmd/cosmosemu
// as its own process, three durafeed-service processes on it with their
// default settings (peer wake channel off unless -peer), and a workload of
// mixed orchestrations driven through their HTTP API as a load balancer
// would (round robin, a failed request retried on the next service,
// starts and events with an Idempotency-Key, whose resends must get the
// first answer: a start answered 409 fails the run), in each mode of
// -modes, one after the other. A third of the way in, one service is
// killed (SIGKILL) and started again under its replica id a second
// later, as a platform restarts a crashed container in place; two thirds
// in, another gets SIGTERM and a replacement starts. At the end every
// instance's history is read back and checked: completed once, with the
// expected output, each activity completed once, each event received
// once; and the SIGTERM'd service must have exited 0 within its grace
// period.
//
//	make fleet                       # 300 orchestrations per mode
//	go run ./cmd/durafeed-fleet -n 60 -modes event-driven
//
// It prints throughput and the latency from start to completion as the
// HTTP client saw it (Greet, one activity, is the wake latency's proxy),
// the latency of the orchestrations in flight at the kill or started in
// the 10 s after it (those in flight at the SIGTERM apart) with the
// slowest named, and exits 1 when a check fails. The p99 after the kill
// has a target in event-driven mode (3 s), printed, not enforced.
//
// With -sweep it measures instead what a deployment gets with the
// service's default settings, in event-driven and polling mode (and with
// -sweep-peer event-driven with the peer wake channel on), at each load
// of -sweep-loads (the mean gap between ticks, each gap jittered
// uniformly in [0.5, 1.5]× the mean). Every (mode, load) cell is a fleet
// of its own, cmd/cosmosemu (with its simulated request-charge model and
// 2 ms injected per request, -sweep-latency) and three services; the
// loads run one after another, the modes of a load at once (one at a
// time below a 2 s gap: a busy cell's CPU would slow the others). After a
// warm-up and -sweep-settle (event-driven cells also wait until each
// service owns some of the slots), each tick
// starts a Greet and an Approval on one service, and sends the previous
// tick's Approval its decision through another; the latencies are from
// the client's clock before the POST to the OrchestrationCompleted
// event's timestamp in the history (start → completed, event →
// completed; the timestamp has millisecond precision and is taken as the
// completing turn begins, so its commit is not in the figure). Each
// service's /metrics is scraped at the start and the end of the measured
// period for the request units and requests (all the services' requests
// to the store, those serving the sweep's HTTP requests included). It
// prints a table per mode and load, the ratios to polling and a judge
// line per load (PASS or NO for event-driven p50 ≤ 0.1×, p99 ≤ 0.25×
// polling's, both measures, and RU per orchestration ≤ polling's), and
// exits 1 when a cell did not run to its end or a sample failed. A cell
// runs a minute's worth of ticks (12 to 300; -sweep-samples fixes it),
// the 60s load stopping at -sweep-duration; with the defaults the sweep
// takes about twenty minutes with -sweep-peer:
//
//	make fleet-sweep
//	go run ./cmd/durafeed-fleet -sweep -sweep-peer -out sweep.json -png sweep.png
//
// # On an account
//
// When COSMOS_ENDPOINT is set, the fleet (the test and the sweep alike)
// runs on that Azure Cosmos DB account, or an emulator reached the way an
// account is, instead of starting cmd/cosmosemu: with COSMOS_KEY it
// authenticates with the key, without it with Microsoft Entra ID
// (DefaultAzureCredential; COSMOS_ACCOUNT_ID, the account's Azure
// Resource Manager id, is then required, as databases and containers
// are managed through Resource Manager, at COSMOS_ARM_ENDPOINT when
// set). It creates a throwaway database named durafeed-fleet-<UTC
// time>-<random> (on a provisioned account with -throughput,
// autoscale:N or manual:N, default autoscale up to 10000 RU/s, shared
// by its containers), prints the account (endpoint, authentication,
// regions, consistency, serverless or the database's throughput), and
// creates in it a container per mode of the test (fleet-<mode>) or per
// cell of the sweep (sweep-<mode>-<load>), where each would have had an
// emulator of its own. The services get COSMOS_ENDPOINT,
// COSMOS_DATABASE, COSMOS_CONTAINER and COSMOS_KEY with a key; with
// Entra ID instead the credential's variables of the fleet's own
// environment (AZURE_*, IDENTITY_*, MSI_*, IMDS_ENDPOINT,
// COSMOS_ACCOUNT_ID, COSMOS_ARM_ENDPOINT); SSL_CERT_FILE passes to them
// in every case, and the fleet's own clients trust what it names too.
// At the end the database is deleted, unless -keep.
//
// The request units reported are the services' own counters from their
// /metrics (durafeed.cosmos.request_units: the x-ms-request-charge of
// every answer they got), so on an account they are the account's
// charges; the 429s (durafeed.cosmos.throttles) are printed beside them.
// The sweep's JSON report records the account (settings.account) in
// place of the emulator's settings, and what the run spent (spend).
//
// A run on an account has a cost cap, -max-ru (default 500000 RU; 0:
// none; ignored on cmd/cosmosemu). Before anything is created or
// started, the run's charge is estimated from docs/fleet-sweep's
// figures, its dearest mode's plus half (about 280 RU per orchestration,
// a FanOut of 5 counting 2.5, and 66 RU per service and second: the
// whole -timeout for the test, the cells' planned length for the
// sweep), and a run estimated above the cap is refused (an error
// wrapping account.ErrOverCap). While it runs, the services' /metrics
// are scraped every second and the run is stopped, with an error
// wrapping account.ErrOverCap, once their charges and the fleet's own
// clients' pass the cap.
//
//	COSMOS_ENDPOINT=https://myaccount.documents.azure.com:443/ COSMOS_KEY=… \
//	  go run ./cmd/durafeed-fleet -n 60 -max-ru 200000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/durafeed/durafeed/internal/account"
)

// main runs realMain until SIGINT and exits 1 when it fails.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := realMain(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "durafeed-fleet:", err)
		}
		os.Exit(1)
	}
}

// realMain parses args and runs the fleet test, or the sweep with
// -sweep, on emulators or, when env (the fleet's environment, NAME=value)
// sets COSMOS_ENDPOINT, on that account (see the package documentation),
// printing the report to stdout and the processes' errors to stderr; it
// fails on bad flags, a run estimated or found over -max-ru (an error
// wrapping account.ErrOverCap), a run that could not finish or a failed
// check.
func realMain(ctx context.Context, args, env []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("durafeed-fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := defaultConfig()
	fs.IntVar(&c.N, "n", c.N, "orchestrations (a third each Greet, FanOut of 5, Approval answered by an event)")
	fs.IntVar(&c.InFlight, "inflight", c.InFlight, "orchestrations in flight at once")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "the services' shutdown grace period")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the whole run (with -sweep, unless given: -sweep-duration, three of the slowest load's gaps and 7m)")
	keep := fs.Bool("keep", false, "on an account: keep the run's database at the end")
	maxRU := fs.Float64("max-ru", defaultMaxRU, "on an account: refuse a run estimated above this many request units, and stop one whose charges pass it (0: no cap)")
	throughput := fs.String("throughput", "", "on a provisioned account: the run database's shared throughput, autoscale:N or manual:N (default autoscale:10000)")
	fs.StringVar(&c.BinDir, "bin-dir", "", "directory holding cosmosemu and durafeed-service binaries (empty: build them)")
	modes := fs.String("modes", "event-driven,polling", "the modes to run the fleet in, one after another (DURAFEED_MODE)")
	fs.BoolVar(&c.Peer, "peer", false, "turn the peer wake channel on in the services (DURAFEED_PEER_LISTEN=127.0.0.1:0)")
	fs.DurationVar(&c.RestartAfter, "restart-after", c.RestartAfter, "how long after its SIGKILL the killed service starts again under its replica id")
	sweep := fs.Bool("sweep", false, "run the load sweep instead of the fleet test (see the package documentation)")
	sc := defaultSweepConfig()
	loads := fs.String("sweep-loads", defaultSweepLoads, "sweep: the loads, comma-separated mean gaps between ticks")
	fs.IntVar(&sc.Samples, "sweep-samples", sc.Samples, "sweep: ticks per cell (a Greet and an Approval each; at least 3; 0: a minute's worth per load, 12 to 300)")
	fs.DurationVar(&sc.Settle, "sweep-settle", sc.Settle, "sweep: how long a cell's services run before its measured period (event-driven cells also wait for their leases to spread)")
	fs.DurationVar(&sc.Duration, "sweep-duration", sc.Duration, "sweep: no tick of a cell starts after this (the first 3 excepted)")
	fs.BoolVar(&sc.Peer, "sweep-peer", false, "sweep: add the mode event-driven+peer (DURAFEED_PEER_LISTEN=127.0.0.1:0), judged against polling too")
	fs.Uint64Var(&sc.Seed, "sweep-seed", sc.Seed, "sweep: seed of the jittered gaps (the modes of a load see the same gaps)")
	fs.DurationVar(&sc.Latency, "sweep-latency", sc.Latency, "sweep: latency each emulator injects per request (a round trip in the region; none on an account)")
	out := fs.String("out", "", "sweep: write the raw report (settings, every sample, summaries, judges) as JSON to this file")
	png := fs.String("png", "", "sweep: draw p50 (solid) and p99 (dashed) latency in ms against the load, one line per mode, "+
		"as a PNG with two panels: start→completed left, event→completed right")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var tp account.Throughput
	if *throughput != "" {
		if tp, err = account.ParseThroughput(*throughput); err != nil {
			return fmt.Errorf("-throughput: %w", err)
		}
	}
	if *maxRU < 0 {
		return errors.New("-max-ru must not be negative")
	}
	ao, onAccount := account.FromEnv(func(name string) string { return lookup(env, name) })
	var acctOpts *accountFlags
	if onAccount {
		acctOpts = &accountFlags{opts: ao, keep: *keep, throughput: tp, maxRU: *maxRU}
	}
	c.Env, sc.Env = env, env
	if *sweep {
		timeoutSet := false
		fs.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
		if sc.Loads, err = parseLoads(*loads); err != nil {
			return err
		}
		if (sc.Samples != 0 && sc.Samples < minTicks) || sc.Duration <= 0 || sc.Settle < 0 {
			return fmt.Errorf("-sweep-samples must be 0 or at least %d, -sweep-duration positive, -sweep-settle not negative", minTicks)
		}
		if !timeoutSet {
			c.Timeout = sc.timeout()
		}
		sc.BinDir, sc.Prebuilt, sc.Log = c.BinDir, c.BinDir != "", stderr
		var est estimate
		if onAccount {
			est = estimateSweep(sc)
			fmt.Fprintf(stdout, "%s; cap %.0f RU\n", est, *maxRU)
			if err := account.CheckEstimate(est.RU, *maxRU); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(ctx, c.Timeout)
		defer cancel()
		ctx, stopRun := context.WithCancelCause(ctx)
		defer stopRun(nil)
		var s *runSetUp
		if s, err = setUp(ctx, sc.BinDir, acctOpts, env, sc.containers(), stopRun, stdout); err != nil {
			return err
		}
		// err is realMain's result: the database's deletion error joins it.
		defer func() { err = errors.Join(err, s.close(stdout)) }()
		sc.BinDir, sc.Account, sc.Spend = s.binDir, s.account, s.spend
		return overCap(ctx, sweepMain(ctx, sc, *out, *png, stdout, est, *maxRU))
	}
	if c.N < 3 || c.InFlight < 1 || c.Grace <= 0 || c.RestartAfter < 0 {
		return errors.New("-n must be at least 3, -inflight and -grace positive, -restart-after not negative")
	}
	ms, err := parseModes(*modes)
	if err != nil {
		return err
	}
	c.Log = stderr
	var est estimate
	if onAccount {
		est = estimateFleet(c, len(ms))
		fmt.Fprintf(stdout, "%s; cap %.0f RU\n", est, *maxRU)
		if err := account.CheckEstimate(est.RU, *maxRU); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	s, err := setUp(ctx, c.BinDir, acctOpts, env, containersOf(ms), stopRun, stdout)
	if err != nil {
		return err
	}
	// err is realMain's result: the database's deletion error joins it.
	defer func() { err = errors.Join(err, s.close(stdout)) }()
	c.BinDir, c.Account, c.Spend = s.binDir, s.account, s.spend
	if s.account != nil {
		defer func() { s.account.spendReport(est.RU, *maxRU).write(stdout) }()
	}
	var reps []*report
	failed := 0
	for _, m := range ms {
		mc := c
		mc.Mode = m
		rep, err := run(ctx, mc)
		if rep != nil {
			rep.write(stdout)
			reps = append(reps, rep)
			failed += len(rep.Problems)
		}
		if err != nil {
			return overCap(ctx, fmt.Errorf("%s: %w", m, err))
		}
	}
	writeAfterKill(stdout, reps)
	if failed > 0 {
		return fmt.Errorf("%d checks failed", failed)
	}
	return nil
}

// config is a fleet run's configuration.
type config struct {
	N        int
	InFlight int
	Grace    time.Duration
	Timeout  time.Duration
	BinDir   string
	Log      io.Writer
	// Mode is the services' DURAFEED_MODE ("event-driven" or "polling").
	Mode string
	// Peer turns the services' peer wake channel on.
	Peer bool
	// RestartAfter is how long after its SIGKILL the killed service
	// starts again with its replica id (a platform restarting a crashed
	// container in place).
	RestartAfter time.Duration
	// Env is the fleet's environment, from which the services' is made
	// (defaultEnv).
	Env []string
	// Account, when set, runs the fleet on the mode's container of the
	// run's database (containerName) instead of an emulator of its own.
	Account *accountRun
	// Spend follows the services' charges (required).
	Spend *spend
}

func defaultConfig() config {
	return config{N: 300, InFlight: 20, Grace: 10 * time.Second, Timeout: 10 * time.Minute, Log: io.Discard,
		Mode: modeEventDriven, RestartAfter: time.Second}
}

// parseModes reads -modes: a comma-separated list of event-driven and
// polling, each at most once.
func parseModes(s string) ([]string, error) {
	var ms []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m != modeEventDriven && m != modePolling {
			return nil, fmt.Errorf("-modes: %q is neither %s nor %s", m, modeEventDriven, modePolling)
		}
		if slices.Contains(ms, m) {
			return nil, fmt.Errorf("-modes: %s twice", m)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// sweepMain runs the sweep, prints its report to stdout and writes its
// JSON to out and its picture to png (either "" for none), whatever the
// sweep's outcome when there is a report; it returns the sweep's error
// first, else the writes'. On an account the report carries what the
// run spent against est and maxRU.
func sweepMain(ctx context.Context, c sweepConfig, out, png string, stdout io.Writer, est estimate, maxRU float64) error {
	rep, err := runSweep(ctx, c)
	if rep == nil {
		return err
	}
	if c.Account != nil {
		sr := c.Account.spendReport(est.RU, maxRU)
		rep.Spend = &sr
	}
	rep.write(stdout)
	errs := []error{err}
	if out != "" {
		errs = append(errs, rep.writeJSON(out))
	}
	if png != "" {
		errs = append(errs, rep.writePNGFile(png))
	}
	return errors.Join(errs...)
}

// accountFlags are a run's account (FromEnv's options) and the flags
// that apply to it.
type accountFlags struct {
	opts       account.Options
	keep       bool
	throughput account.Throughput
	maxRU      float64
}

// runSetUp is what a run uses beside its configuration: the binaries
// and, on an account, the account with its containers. close undoes it.
type runSetUp struct {
	binDir  string
	account *accountRun // nil on emulators
	spend   *spend
	built   string // the directory the binaries were built into, if any
}

// setUp builds the binaries into a temporary directory unless binDir
// holds them (the emulator's only on emulators), and with a (on an
// account) opens the account, creates containers and watches the
// spend against the cap until ctx ends, stopping the run through stop
// (see startAccount); on emulators the spend has no cap.
func setUp(ctx context.Context, binDir string, a *accountFlags, env, containers []string, stop context.CancelCauseFunc, w io.Writer) (*runSetUp, error) {
	s := &runSetUp{binDir: binDir, spend: newSpend(nil, 0, stop)}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "durafeed-fleet-bin-")
		if err != nil {
			return nil, err
		}
		if _, _, err := binaries(ctx, "", dir, a == nil); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		s.binDir, s.built = dir, dir
	}
	if a != nil {
		ar, err := startAccount(ctx, a.opts, env, a.keep, a.throughput, containers, a.maxRU, stop, w)
		if err != nil {
			return nil, errors.Join(err, s.close(w))
		}
		s.account, s.spend = ar, ar.spend
		go s.spend.watch(ctx)
	}
	return s, nil
}

// close deletes the run's database (unless -keep) and the binaries it
// built.
func (s *runSetUp) close(w io.Writer) error {
	var errs []error
	if s.account != nil {
		errs = append(errs, s.account.close(w))
	}
	if s.built != "" {
		errs = append(errs, os.RemoveAll(s.built))
	}
	return errors.Join(errs...)
}

// containersOf are the fleet test's containers on an account, one per
// mode.
func containersOf(modes []string) []string {
	cs := make([]string, len(modes))
	for i, m := range modes {
		cs[i] = containerName(m, "")
	}
	return cs
}

// overCap returns the cause of ctx's end, which wraps
// account.ErrOverCap, when the run was stopped at the cap (with err, the
// run's own error, in its text); else err.
func overCap(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	switch {
	case !errors.Is(cause, account.ErrOverCap):
		return err
	case err == nil:
		return cause
	}
	return fmt.Errorf("%w (the run's error: %v)", cause, err)
}
