// Command durafeed-bench compares the provider's event-driven mode with the
// seeds' 1 s polling on an embedded cosmosemu: enqueue-to-fetch wake
// latency (another replica's client and the same replica), timer lateness,
// and the idle cost per replica in simulated request units. It prints a
// table to stdout, progress to stderr, and writes the full report as JSON.
// With -stress it runs only the stress phase instead: duroxide's
// parallel_orchestrations workload on the runtime (throughput, latency,
// turns and cost per orchestration, the replicas' shares of the work),
// polling every 100 ms as duroxide's stress configuration does. With
// -backlog it runs only the backlog phase: 100 and 100,000 queued starts
// (-backlog-depths) of the same workload, enqueued with no replica
// running and then drained by 3 replicas (-backlog-replicas), in both
// modes, at 0 ms injected unless -latencies says otherwise: the drain's
// pace, cost per orchestration, documents its queries examined and the
// process's heap, the deepest backlog against the shallowest.
//
//	go run ./cmd/durafeed-bench                       # everything, defaults
//	go run ./cmd/durafeed-bench -modes polling -latencies 2ms -samples 20
//	go run ./cmd/durafeed-bench -stress -stress-orchestrations 200 -latencies 0
//	go run ./cmd/durafeed-bench -backlog -backlog-depths 100,10000
//
// With COSMOS_ENDPOINT set it runs on that account instead (COSMOS_KEY, or
// Microsoft Entra ID through DefaultAzureCredential with COSMOS_ACCOUNT_ID
// naming the account in Resource Manager), in a throwaway database it
// deletes at the end (-keep keeps it), with the account's own charges and
// nothing injected. It prints the account's regions, consistency and
// throughput mode and its estimated charge first, and refuses to start
// when the estimate is above -max-ru; a run that spends past it stops. See
// docs/BENCHMARKING.md.
//
// Unmet targets are reported, not failures: the table ends with the count
// of targets met, a target whose result is missing (a mode that measured
// nothing) counting as NO; the exit status is 1 only when a scenario could
// not run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/durafeed/durafeed/bench"
	"github.com/durafeed/durafeed/internal/account"
)

func main() {
	if err := run(os.Getenv, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "durafeed-bench:", err)
		}
		os.Exit(1)
	}
}

// options are the parsed command line.
type options struct {
	cfg    bench.Config
	out    string
	png    string
	replot string
	cpu    string
	quiet  bool
	// estimate prints the run's estimated charge and exits.
	estimate bool
}

// defaultMaxRU is the cap on an account when -max-ru is not given.
const defaultMaxRU = 1_000_000

// backlogMemProfileRate is the heap profile's sampling rate in a backlog
// run (bytes between samples; Go's default is 512 KiB): eight times the
// samples, so that the replicas' tens of megabytes are read from
// hundreds of samples.
const backlogMemProfileRate = 64 << 10

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	d := bench.DefaultConfig()
	fs := flag.NewFlagSet("durafeed-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		modes      = fs.String("modes", joinModes(d.Modes), "modes to compare, comma-separated")
		cases      = fs.String("cases", joinCases(d.Cases), "latency cases, comma-separated (empty: none)")
		latencies  = fs.String("latencies", "0,2ms", "latency injected per request, comma-separated durations (one emulator each)")
		replicas   = fs.String("replicas", "1,3", "replica counts for the idle cost, comma-separated (empty: no idle phase)")
		interval   = fs.String("interval", "20ms-1.02s", "random pause before each enqueue, min-max (keep the width a multiple of -poll-interval)")
		timerDelay = fs.String("timer-delay", "200ms-1s", "visibility delay of timer items, min-max")
		sweep      = fs.String("sweep", "", "sweep loads, comma-separated ("+sweepNames()+", or all; empty: no sweep phase)")
		sweepScale = fs.Float64("sweep-scale", 1, "multiplies the sweep loads' item counts (and the burst's quiet), for a shorter run")
		ds         = bench.DefaultStressConfig()
		stress     = fs.Bool("stress", false, "run only the stress phase (duroxide's parallel_orchestrations; no latency cases, idle, failover or sweep phase)")
		stressReps = fs.String("stress-replicas", "1,3", "stress: replica counts, comma-separated")
		stressCli  = fs.String("stress-client", string(bench.StressClientSeparate), "stress: where the client runs: separate (a provider of its own, as another process) or replica (the first replica's provider)")
		sc         = ds
		db         = bench.DefaultBacklogConfig()
		backlog    = fs.Bool("backlog", false, "run only the backlog phase (a backlog enqueued with no replica running, then drained; no other phase; -latencies defaults to 0)")
		blDepths   = fs.String("backlog-depths", joinInts(db.Depths), "backlog: depths (queued starts), comma-separated; the targets compare the deepest with the shallowest")
		blPolling  = fs.String("backlog-polling-depths", "", "backlog: polling mode's depths, comma-separated (empty: -backlog-depths); a polling drain grows with the square of the depth")
		bc         = db
		o          = options{cfg: d}
	)
	fs.IntVar(&bc.Replicas, "backlog-replicas", db.Replicas, "backlog: replicas that drain")
	fs.IntVar(&bc.TasksPerInstance, "backlog-tasks", db.TasksPerInstance, "backlog: activities each instance fans out")
	fs.DurationVar(&bc.ActivityDelay, "backlog-activity", db.ActivityDelay, "backlog: how long each activity sleeps")
	fs.IntVar(&bc.EnqueueConcurrency, "backlog-enqueue-concurrency", db.EnqueueConcurrency, "backlog: starts the client has in flight at once while it enqueues")
	fs.DurationVar(&bc.MaxDrain, "backlog-max-drain", db.MaxDrain, "backlog: a drain still running after this is stopped and reported as such (negative: no limit)")
	fs.DurationVar(&bc.PollingMaxDrain, "backlog-polling-max-drain", 0, "backlog: polling mode's drain bound (0: -backlog-max-drain); a deep polling drain stopped early still shows its pace and cost")
	fs.IntVar(&sc.Orchestrations, "stress-orchestrations", ds.Orchestrations, "stress: instances started per scenario")
	fs.IntVar(&sc.MaxInFlight, "stress-inflight", ds.MaxInFlight, "stress: instances in flight at once")
	fs.IntVar(&sc.TasksPerInstance, "stress-tasks", ds.TasksPerInstance, "stress: activities each instance fans out")
	fs.DurationVar(&sc.ActivityDelay, "stress-activity", ds.ActivityDelay, "stress: how long each activity sleeps")
	fs.DurationVar(&sc.PollInterval, "stress-poll-interval", ds.PollInterval, "stress: polling replicas' poll interval (duroxide's stress configuration: 100ms)")
	fs.DurationVar(&sc.MaxDuration, "stress-duration", ds.MaxDuration, "stress: no instance starts after this (negative: no limit)")
	fs.IntVar(&o.cfg.SweepDispatchers, "sweep-dispatchers", 4, "sweep: orchestration fetch loops of the replica")
	fs.BoolVar(&o.cfg.PeerWake, "peer-wake", false, "event-driven mode: turn the peer wake channel on (replicas and clients)")
	fs.Float64Var(&o.cfg.FeedReadsPerChange, "feed-reads-per-change", 0, "event-driven mode: reads added to the feed budget per change delivered (0: the engine's default, 10 without the peer wake channel, none with it; negative: none)")
	fs.BoolVar(&o.cfg.NoEager, "no-eager", false, "event-driven mode: leave the work a replica's own writes made visible in slots others own to their owners (engine.Options.DisableEager; by default the writer runs it when a fetch of it is idle)")
	fs.DurationVar(&o.cfg.SiblingWait, "sibling-wait", 0, "event-driven mode: how long a turn without an await hint may wait for sibling activities (0 or negative: never, the engine's default)")
	fs.Float64Var(&o.cfg.FeedBudget, "feed-budget", 0, "event-driven mode: RU per second a replica may spend on empty change-feed reads (0: the engine's default; negative: back-off without a budget)")
	fs.StringVar(&o.png, "png", "durafeed-bench.png", "sweep picture path (written when the sweep ran; empty: none)")
	fs.StringVar(&o.replot, "replot", "", "draw the sweep picture (-png) of this JSON report and exit, running nothing")
	fs.IntVar(&o.cfg.Samples, "samples", d.Samples, "samples per latency scenario")
	fs.IntVar(&o.cfg.Warmup, "warmup", d.Warmup, "warm-up samples discarded per latency scenario")
	fs.DurationVar(&o.cfg.MaxDuration, "duration", d.MaxDuration, "latency scenario time limit: no sample starts after it (negative: none)")
	fs.DurationVar(&o.cfg.Fetch.PollInterval, "poll-interval", d.Fetch.PollInterval, "polling mode: sleep after an empty fetch (the seeds' 1 s)")
	fs.DurationVar(&o.cfg.Fetch.PollTimeout, "poll-timeout", d.Fetch.PollTimeout, "event-driven mode: how long a fetch waits for work")
	fs.DurationVar(&o.cfg.SampleTimeout, "sample-timeout", d.SampleTimeout, "an item not fetched within this is counted as lost")
	fs.DurationVar(&o.cfg.IdleWarmup, "idle-warmup", d.IdleWarmup, "idle phase: wait before the window")
	fs.DurationVar(&o.cfg.IdleWindow, "idle-window", d.IdleWindow, "idle phase: measurement window (the duration of the idle measurement)")
	fs.IntVar(&o.cfg.IdleSlices, "idle-slices", d.IdleSlices, "idle phase: slices of the window, to show steadiness")
	fs.DurationVar(&o.cfg.Failover, "failover", d.Failover, "failover phase: trickle window after a replica is cut (negative: no failover phase)")
	fs.IntVar(&o.cfg.PartitionCount, "partitions", d.PartitionCount, "physical partitions per container")
	fs.IntVar(&o.cfg.Parallel, "parallel", d.Parallel, "event-driven latency scenarios run at once (negative: all; polling and idle scenarios always all run at once)")
	fs.Uint64Var(&o.cfg.Seed, "seed", d.Seed, "seed of the random intervals and delays")
	fs.StringVar(&o.out, "out", "durafeed-bench.json", "JSON report path (empty: none)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines on stderr")
	maxRU := fs.Float64("max-ru", 0, fmt.Sprintf("on an account (COSMOS_ENDPOINT): refuse a run estimated above this many RU, stop one that spends it (default %d; 0 on the embedded emulator: none)", defaultMaxRU))
	keep := fs.Bool("keep", false, "on an account: keep the run's throwaway database")
	throughput := fs.String("throughput", "", "on a provisioned account: the throwaway database's throughput, autoscale:N or manual:N (default autoscale:10000)")
	fs.BoolVar(&o.estimate, "estimate", false, "print the run's estimated charge in RU and exit")
	fs.StringVar(&o.cpu, "cpuprofile", "", "write a CPU profile of the whole run to this path (empty: none)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if ao, ok := account.FromEnv(getenv); ok {
		ao.Keep = *keep
		if *throughput != "" {
			if ao.Throughput, err = account.ParseThroughput(*throughput); err != nil {
				return o, fmt.Errorf("-throughput: %w", err)
			}
		}
		o.cfg.Account = &ao
		o.cfg.MaxRU = defaultMaxRU
		if !flagSet(fs, "latencies") {
			*latencies = "0"
		}
	}
	if flagSet(fs, "max-ru") {
		o.cfg.MaxRU = *maxRU
	}
	if o.cfg.Modes, err = parseList(*modes, bench.ParseMode); err != nil {
		return o, err
	}
	if len(o.cfg.Modes) == 0 {
		return o, errors.New("-modes is empty")
	}
	if o.cfg.Cases, err = parseList(*cases, bench.ParseCase); err != nil {
		return o, err
	}
	if o.cfg.Latencies, err = parseList(*latencies, parseDuration); err != nil {
		return o, err
	}
	if o.cfg.Account != nil && (len(o.cfg.Latencies) != 1 || o.cfg.Latencies[0] != 0) {
		return o, errors.New("-latencies: nothing is injected on an account (COSMOS_ENDPOINT): leave it unset or 0")
	}
	if len(o.cfg.Latencies) == 0 {
		return o, errors.New("-latencies is empty")
	}
	if o.cfg.Replicas, err = parseList(*replicas, parseReplicas); err != nil {
		return o, err
	}
	if o.cfg.Interval, err = parseRange(*interval); err != nil {
		return o, fmt.Errorf("-interval: %w", err)
	}
	if o.cfg.TimerDelay, err = parseRange(*timerDelay); err != nil {
		return o, fmt.Errorf("-timer-delay: %w", err)
	}
	names, _ := parseList(*sweep, func(s string) (string, error) { return s, nil })
	if len(names) > 0 {
		if o.cfg.Sweep, err = bench.SelectSweep(names, *sweepScale); err != nil {
			return o, err
		}
	}
	if o.cfg.Samples <= 0 || o.cfg.IdleWindow <= 0 {
		return o, errors.New("-samples and -idle-window must be positive")
	}
	if *stress && *backlog {
		return o, errors.New("-stress and -backlog each run only their own phase: choose one")
	}
	if *backlog {
		if bc.Depths, err = parseList(*blDepths, parsePositive); err != nil {
			return o, fmt.Errorf("-backlog-depths: %w", err)
		}
		if len(bc.Depths) == 0 {
			return o, errors.New("-backlog-depths is empty")
		}
		if *blPolling != "" {
			if bc.PollingDepths, err = parseList(*blPolling, parsePositive); err != nil {
				return o, fmt.Errorf("-backlog-polling-depths: %w", err)
			}
		}
		if bc.Replicas <= 0 || bc.TasksPerInstance <= 0 || bc.ActivityDelay <= 0 || bc.EnqueueConcurrency <= 0 || bc.MaxDrain == 0 {
			return o, errors.New("-backlog-replicas, -backlog-tasks, -backlog-activity and -backlog-enqueue-concurrency must be positive, -backlog-max-drain not zero")
		}
		// Only the backlog phase runs; one injected latency unless asked.
		o.cfg.Backlog = &bc
		o.cfg.Cases, o.cfg.Replicas, o.cfg.Failover, o.cfg.Sweep = []bench.Case{}, []int{}, -1, nil
		if !flagSet(fs, "latencies") {
			o.cfg.Latencies = []time.Duration{0}
		}
	}
	if *stress {
		if sc.Replicas, err = parseList(*stressReps, parseReplicas); err != nil {
			return o, fmt.Errorf("-stress-replicas: %w", err)
		}
		if len(sc.Replicas) == 0 {
			return o, errors.New("-stress-replicas is empty")
		}
		if sc.Client, err = bench.ParseStressClient(*stressCli); err != nil {
			return o, fmt.Errorf("-stress-client: %w", err)
		}
		if sc.Orchestrations <= 0 || sc.MaxInFlight <= 0 || sc.TasksPerInstance <= 0 || sc.ActivityDelay <= 0 || sc.PollInterval <= 0 || sc.MaxDuration == 0 {
			return o, errors.New("-stress-orchestrations, -stress-inflight, -stress-tasks, -stress-activity and -stress-poll-interval must be positive, -stress-duration not zero")
		}
		// Only the stress phase runs.
		o.cfg.Stress = &sc
		o.cfg.Cases, o.cfg.Replicas, o.cfg.Failover, o.cfg.Sweep = []bench.Case{}, []int{}, -1, nil
	}
	return o, nil
}

func run(getenv func(string) string, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if o.estimate {
		fmt.Fprintf(stdout, "estimated charge: %.0f RU\n", bench.Estimate(o.cfg))
		return nil
	}
	if o.replot != "" {
		b, err := os.ReadFile(o.replot)
		if err != nil {
			return err
		}
		var rep bench.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("%s: %w", o.replot, err)
		}
		return writePNG(o.png, &rep)
	}
	if !o.quiet {
		o.cfg.Progress = func(line string) { fmt.Fprintln(stderr, line) }
	}
	if o.cfg.Backlog != nil {
		// The backlog phase splits the heap by owner through the heap
		// profile: sample it finely, before the run allocates anything.
		goruntime.MemProfileRate = backlogMemProfileRate
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.cpu != "" {
		f, err := os.Create(o.cpu)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	rep, runErr := bench.Run(ctx, o.cfg)
	if rep != nil {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
		if o.out != "" {
			if err := writeJSON(o.out, rep); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "report written to %s\n", o.out)
		}
		if o.png != "" && len(rep.Sweep) > 0 {
			if err := writePNG(o.png, rep); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "sweep picture written to %s\n", o.png)
		}
	}
	return runErr
}

func writeJSON(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func writePNG(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteSweepPNG(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func sweepNames() string {
	var n []string
	for _, l := range bench.DefaultSweepLoads() {
		n = append(n, l.Name)
	}
	return strings.Join(n, ",")
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseList parses a comma-separated list; an empty string is an empty
// (non-nil) list.
func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	out := []T{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// parseDuration accepts Go durations and a bare 0.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = fmt.Errorf("negative duration %q", s)
	}
	return d, err
}

// parsePositive parses a positive integer (a backlog depth).
func parsePositive(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive integer", s)
	}
	return n, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseReplicas(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("replica count %q is not a positive integer", s)
	}
	return n, nil
}

// parseRange parses "min-max" or a single duration.
func parseRange(s string) (bench.Range, error) {
	lo, hi, found := strings.Cut(s, "-")
	a, err := parseDuration(strings.TrimSpace(lo))
	if err != nil {
		return bench.Range{}, err
	}
	if !found {
		return bench.Range{Min: a, Max: a}, nil
	}
	b, err := parseDuration(strings.TrimSpace(hi))
	if err != nil {
		return bench.Range{}, err
	}
	if b < a {
		return bench.Range{}, fmt.Errorf("range %q: max below min", s)
	}
	return bench.Range{Min: a, Max: b}, nil
}

func joinModes(ms []bench.Mode) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ",")
}

func joinCases(cs []bench.Case) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ",")
}
