// Command durafeed-fleet runs durafeed as real processes: cmd/cosmosemu
// as its own process, three durafeed-service processes on it (peer wake
// channel on), and a workload of mixed orchestrations driven through
// their HTTP API as a load balancer would (round robin, a failed request
// retried on the next service, starts and events with an
// Idempotency-Key, whose resends must get the first answer: a start
// answered 409 fails the run). A third of the way in, one service is killed
// (SIGKILL); two thirds in, another gets SIGTERM and a replacement
// starts. At the end every instance's history is read back and checked:
// completed once, with the expected output, each activity completed
// once, each event received once; and the SIGTERM'd service must have
// exited 0 within its grace period.
//
//	make fleet                       # 300 orchestrations
//	go run ./cmd/durafeed-fleet -n 60
//
// It prints throughput and the latency from start to completion as the
// HTTP client saw it (Greet, one activity, is the wake latency's proxy),
// and exits 1 when a check fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "durafeed-fleet:", err)
		}
		os.Exit(1)
	}
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("durafeed-fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := defaultConfig()
	fs.IntVar(&c.N, "n", c.N, "orchestrations (a third each Greet, FanOut of 5, Approval answered by an event)")
	fs.IntVar(&c.InFlight, "inflight", c.InFlight, "orchestrations in flight at once")
	fs.DurationVar(&c.Grace, "grace", c.Grace, "the services' shutdown grace period")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the whole run")
	fs.StringVar(&c.BinDir, "bin-dir", "", "directory holding cosmosemu and durafeed-service binaries (empty: build them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.N < 3 || c.InFlight < 1 || c.Grace <= 0 {
		return errors.New("-n must be at least 3, -inflight and -grace positive")
	}
	c.Log = stderr
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	rep, err := run(ctx, c)
	if rep != nil {
		rep.write(stdout)
	}
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d checks failed", len(rep.Problems))
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
}

func defaultConfig() config {
	return config{N: 300, InFlight: 20, Grace: 10 * time.Second, Timeout: 5 * time.Minute, Log: io.Discard}
}
