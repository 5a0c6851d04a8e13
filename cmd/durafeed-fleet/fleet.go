package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/durafeed/durafeed/bench"
	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/durable/history"
)

// proc is one child process and what its output said.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	addr string // the service's HTTP address, or the emulator's endpoint
	// events are closed when the process printed the matching line.
	listening, ready, stopped chan struct{}
	released                  chan struct{} // the service's leases went to the others
	exited                    chan struct{}
	exitErr                   error
}

// start runs bin with env; lines of its output are matched with the
// service's and the emulator's start-up lines.
func start(ctx context.Context, name, bin string, args, env []string, log io.Writer) (*proc, error) {
	p := &proc{name: name, listening: make(chan struct{}), ready: make(chan struct{}), stopped: make(chan struct{}),
		released: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Env = env
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = p.cmd.Stdout // one stream, read below
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var once [4]sync.Once
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "cosmosemu listening on "):
				p.setAddr(strings.TrimPrefix(line, "cosmosemu listening on "))
				once[0].Do(func() { close(p.listening) })
			case strings.Contains(line, `"msg":"listening"`):
				var l struct{ Addr string }
				if json.Unmarshal([]byte(line), &l) == nil {
					p.setAddr(l.Addr)
				}
				once[0].Do(func() { close(p.listening) })
			case strings.Contains(line, `"msg":"ready"`):
				once[1].Do(func() { close(p.ready) })
			case strings.Contains(line, `"msg":"stopped"`):
				once[2].Do(func() { close(p.stopped) })
			case strings.Contains(line, `"msg":"released"`):
				once[3].Do(func() { close(p.released) })
			case strings.Contains(line, `"level":"error"`):
				fmt.Fprintf(log, "%s: %s\n", name, line)
			}
		}
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// setAddr records the address the process printed.
func (p *proc) setAddr(a string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addr = a
}

// address is the address the process printed ("" before it did).
func (p *proc) address() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// await waits for ch (a process event) or the process's exit.
func (p *proc) await(ctx context.Context, ch chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-p.exited:
		return fmt.Errorf("%s exited before %s: %v", p.name, what, p.exitErr)
	case <-ctx.Done():
		return fmt.Errorf("%s: no %s: %w", p.name, what, ctx.Err())
	}
}

// procSet is the child processes of a run. They run under a context of
// their own, not the run's, so that a run that ends early still finds them
// to stop: stop kills (SIGKILL) those still running and waits for all to
// exit. Its methods are safe for concurrent use.
type procSet struct {
	ctx    context.Context // the processes' context, ended by stop
	cancel context.CancelFunc
	mu     sync.Mutex
	procs  []*proc
}

// newProcSet returns an empty set whose processes carry ctx's values but
// not its cancellation.
func newProcSet(ctx context.Context) *procSet {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &procSet{ctx: pctx, cancel: cancel}
}

// start starts a process (see start) in the set.
func (s *procSet) start(name, bin string, args, env []string, log io.Writer) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := start(s.ctx, name, bin, args, env, log)
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// stop kills the set's processes still running and waits until every
// one has exited.
func (s *procSet) stop() {
	s.cancel()
	s.mu.Lock()
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for _, p := range procs {
		<-p.exited
	}
}

// startEmulator starts cmd/cosmosemu (bin) in ps on a loopback port with
// extra flags, its certificate written to cert, and waits (bounded by
// ctx) until it prints its endpoint, which the returned proc's address
// gives.
func startEmulator(ctx context.Context, ps *procSet, bin, cert string, extra, env []string, log io.Writer) (*proc, error) {
	emu, err := ps.start("cosmosemu", bin, append([]string{"-addr", "127.0.0.1:0", "-cert-out", cert}, extra...), env, log)
	if err != nil {
		return nil, err
	}
	if err := emu.await(ctx, emu.listening, "its endpoint"); err != nil {
		return nil, err
	}
	return emu, nil
}

// storeEnv is the environment that points a service at the emulator at
// endpoint, whose certificate is in cert: database and container fleet.
func storeEnv(endpoint, cert string) []string {
	return []string{"COSMOS_ENDPOINT=" + endpoint, "COSMOS_KEY=" + cosmosemu.WellKnownKey, "SSL_CERT_FILE=" + cert,
		"COSMOS_DATABASE=fleet", "COSMOS_CONTAINER=fleet"}
}

// report is what a run measured and found.
// slow is an orchestration after the kill: when it began, relative to
// the SIGKILL, and how long it took.
type slow struct {
	id, kind    string
	began, took time.Duration
}

// afterKillWindow is how long after the SIGKILL a started orchestration
// still counts as "after the kill".
const afterKillWindow = 10 * time.Second

// report is what one fleet run saw.
type report struct {
	Mode string
	// Store names where the services kept their state (target.desc);
	// OnAccount says it was an account's.
	Store        string
	OnAccount    bool
	Peer         bool
	RestartAfter time.Duration
	Restarted    bool
	// RestartReady is how long after the SIGKILL the restarted service
	// answered ready (its /readyz: joined the leases).
	RestartReady time.Duration
	// AfterKill are the latencies of the orchestrations in flight at the
	// SIGKILL or started within afterKillWindow after it.
	AfterKill []time.Duration
	slowest   []slow // the same orchestrations, for naming the slowest
	// AtTerm are the latencies of the orchestrations in flight at the
	// SIGTERM.
	AtTerm                  []time.Duration
	N, Completed            int
	Elapsed                 time.Duration
	Latency, Greet          []time.Duration
	Retries                 int64
	TermToExit              time.Duration
	TermExitOK, HandedOff   bool
	Grace                   time.Duration
	Killed, Termed, Started string
	Problems                []string
	// Costs sums the services' counters from their /metrics, each
	// process's as last scraped (a stopped service's last second or so
	// may be missing).
	Costs costs
}

// write prints the report.
func (r *report) write(w io.Writer) {
	channel := "peer wake channel off"
	if r.Peer {
		channel = "peer wake channel on"
	}
	fmt.Fprintf(w, "durafeed fleet, %s (%s): %s and 3 durafeed-service processes, %d orchestrations (Greet, FanOut of 5, Approval by event)\n",
		r.Mode, channel, r.Store, r.N)
	fmt.Fprintf(w, "  %s killed (SIGKILL) and started again under its replica id %v later: %v (ready %v after the kill); %s stopped (SIGTERM), %s started in its place\n",
		r.Killed, r.RestartAfter, r.Restarted, r.RestartReady.Round(time.Millisecond), r.Termed, r.Started)
	fmt.Fprintf(w, "  completed     %d of %d in %.1fs: %.1f orchestrations/s\n", r.Completed, r.N, r.Elapsed.Seconds(), float64(r.Completed)/r.Elapsed.Seconds())
	fmt.Fprintf(w, "  latency       p50 %v  p99 %v  max %v (HTTP start to completion seen over HTTP)\n",
		pct(r.Latency, 0.5).Round(time.Millisecond), pct(r.Latency, 0.99).Round(time.Millisecond), pct(r.Latency, 1).Round(time.Millisecond))
	fmt.Fprintf(w, "  Greet         p50 %v  p99 %v (one activity: the wake latency's proxy)\n",
		pct(r.Greet, 0.5).Round(time.Millisecond), pct(r.Greet, 0.99).Round(time.Millisecond))
	fmt.Fprintf(w, "  after kill    p50 %v  p99 %v  max %v (%d orchestrations in flight at the SIGKILL or started within %v of it)\n",
		pct(r.AfterKill, 0.5).Round(time.Millisecond), pct(r.AfterKill, 0.99).Round(time.Millisecond), pct(r.AfterKill, 1).Round(time.Millisecond),
		len(r.AfterKill), afterKillWindow)
	fmt.Fprintf(w, "  at SIGTERM    p50 %v  p99 %v (%d orchestrations in flight at the SIGTERM)\n",
		pct(r.AtTerm, 0.5).Round(time.Millisecond), pct(r.AtTerm, 0.99).Round(time.Millisecond), len(r.AtTerm))
	sort.Slice(r.slowest, func(i, j int) bool { return r.slowest[i].took > r.slowest[j].took })
	for _, o := range r.slowest[:min(3, len(r.slowest))] {
		fmt.Fprintf(w, "                %s (%s) began %v from the kill, took %v\n", o.id, o.kind, o.began.Round(time.Millisecond), o.took.Round(time.Millisecond))
	}
	handed := fmt.Sprint(r.HandedOff)
	if r.Mode == modePolling {
		handed = "none held (polling)"
	}
	fmt.Fprintf(w, "  SIGTERM       exited %v after the signal (grace %v), status 0: %v, leases handed over: %s\n", r.TermToExit.Round(time.Millisecond), r.Grace, r.TermExitOK, handed)
	fmt.Fprintf(w, "  HTTP retries  %d (requests that failed on a stopped service and went to the next)\n", r.Retries)
	charges := "cosmosemu's charge model"
	if r.OnAccount {
		charges = "the account's own charges"
	}
	perOrch := 0.0
	if r.Completed > 0 {
		perOrch = r.Costs.RU / float64(r.Completed)
	}
	fmt.Fprintf(w, "  RU            %.1f per orchestration completed: %.0f RU, %.0f requests, %.0f answered 429 (the services' /metrics: each answer's x-ms-request-charge, %s)\n",
		perOrch, r.Costs.RU, r.Costs.Requests, r.Costs.Throttled, charges)
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "  checks        every orchestration completed once with its output; every activity and event once")
		return
	}
	fmt.Fprintf(w, "  PROBLEMS      %d\n", len(r.Problems))
	for i, p := range r.Problems {
		if i == 20 {
			fmt.Fprintf(w, "    … %d more\n", len(r.Problems)-20)
			break
		}
		fmt.Fprintln(w, "    "+p)
	}
}

// binaries returns the paths of the emulator and service binaries in
// binDir, or, when binDir is empty, built into dir (the emulator only
// when emulator is set: a run on an account does not start one).
func binaries(ctx context.Context, binDir, dir string, emulator bool) (emu, svc string, err error) {
	if binDir != "" {
		return filepath.Join(binDir, "cosmosemu"), filepath.Join(binDir, "durafeed-service"), nil
	}
	for _, b := range []struct{ out, pkg string }{{"cosmosemu", "github.com/durafeed/durafeed/cmd/cosmosemu"},
		{"durafeed-service", "github.com/durafeed/durafeed/cmd/durafeed-service"}} {
		if b.out == "cosmosemu" && !emulator {
			continue
		}
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("build %s: %w: %s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "cosmosemu"), filepath.Join(dir, "durafeed-service"), nil
}

// run runs the fleet and checks it: on an emulator of its own, or with
// c.Account on the mode's container of the run's database.
func run(ctx context.Context, c config) (*report, error) {
	dir, err := os.MkdirTemp("", "durafeed-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	emuBin, svcBin, err := binaries(ctx, c.BinDir, dir, c.Account == nil)
	if err != nil {
		return nil, err
	}
	ps := newProcSet(ctx)
	defer ps.stop() // kills what still runs

	var tgt target
	if c.Account != nil {
		tgt = c.Account.target(containerName(c.Mode, ""))
	} else {
		cert := filepath.Join(dir, "cosmosemu.pem")
		emu, err := startEmulator(ctx, ps, emuBin, cert, nil, c.Env, c.Log)
		if err != nil {
			return nil, err
		}
		tgt = emulatorTarget(emu.address(), cert)
	}
	env := append(append(defaultEnv(c.Env), tgt.env...), "DURAFEED_LISTEN=127.0.0.1:0",
		"DURAFEED_GRACE="+c.Grace.String(), "DURAFEED_MODE="+c.Mode)
	if c.Peer {
		env = append(env, "DURAFEED_PEER_LISTEN=127.0.0.1:0")
	}
	var fl fleet
	startService := func(i int) error {
		name := fmt.Sprintf("service-%d", i)
		p, err := ps.start(name, svcBin, nil, append(slices.Clone(env), "DURAFEED_REPLICA_ID="+name), c.Log)
		if err != nil {
			return err
		}
		c.Spend.add(c.Mode, p)
		if err := p.await(ctx, p.ready, "readiness"); err != nil {
			return err
		}
		fl.add(p)
		return nil
	}
	// The services' last counters, whatever the run's end.
	defer c.Spend.scrapeGroup(context.WithoutCancel(ctx), c.Mode)
	for i := range 3 {
		if err := startService(i); err != nil {
			return nil, err
		}
	}

	rep := &report{Mode: c.Mode, Store: tgt.desc, OnAccount: c.Account != nil, Peer: c.Peer, N: c.N, Grace: c.Grace, RestartAfter: c.RestartAfter}
	type outcome struct {
		id, kind   string
		began, end time.Time
		err        error
	}
	var killedAt atomic.Int64 // unix ns of the SIGKILL, 0 before
	var termedAt atomic.Int64 // unix ns of the SIGTERM, 0 before
	outcomes := make(chan outcome, c.N)
	var completed atomic.Int64
	sem := make(chan struct{}, c.InFlight)
	began := time.Now()
	var wg sync.WaitGroup
	chaosDone := make(chan error, 1)
	go func() {
		// A third of the way: SIGKILL, and the same replica started
		// again RestartAfter later (a platform restarting a crashed
		// container in place); two thirds: SIGTERM and a replacement.
		wait := func(n int64) bool {
			for completed.Load() < n {
				select {
				case <-ctx.Done():
					return false
				case <-time.After(20 * time.Millisecond):
				}
			}
			return true
		}
		if !wait(int64(c.N / 3)) {
			chaosDone <- ctx.Err()
			return
		}
		killed := fl.remove(0)
		rep.Killed = killed.name
		c.Spend.scrape(ctx, killed) // its counters die with it
		killedAt.Store(time.Now().UnixNano())
		_ = killed.cmd.Process.Kill()
		select {
		case <-killed.exited:
		case <-ctx.Done():
			chaosDone <- ctx.Err()
			return
		}
		select {
		case <-time.After(c.RestartAfter):
		case <-ctx.Done():
			chaosDone <- ctx.Err()
			return
		}
		if err := startService(0); err != nil { // its replica id again
			chaosDone <- fmt.Errorf("restart %s: %w", killed.name, err)
			return
		}
		rep.Restarted = true
		rep.RestartReady = time.Since(time.Unix(0, killedAt.Load()))
		if !wait(int64(2 * c.N / 3)) {
			chaosDone <- ctx.Err()
			return
		}
		termed := fl.remove(0)
		rep.Termed = termed.name
		c.Spend.scrape(ctx, termed)
		at := time.Now()
		termedAt.Store(at.UnixNano())
		_ = termed.cmd.Process.Signal(syscall.SIGTERM)
		if err := startService(3); err != nil {
			chaosDone <- err
			return
		}
		rep.Started = "service-3"
		select {
		case <-termed.exited:
			rep.TermToExit = time.Since(at)
			rep.TermExitOK = termed.exitErr == nil
			select {
			case <-termed.released:
				rep.HandedOff = true
			default:
			}
		case <-ctx.Done():
			chaosDone <- ctx.Err()
			return
		}
		chaosDone <- nil
	}()
	for i := range c.N {
		id := fmt.Sprintf("fleet-%04d", i)
		kind := []string{"Greet", "FanOut", "Approval"}[i%3]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			err := drive(ctx, &fl, id, kind)
			if err == nil {
				completed.Add(1)
			}
			outcomes <- outcome{id: id, kind: kind, began: t0, end: time.Now(), err: err}
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(began)
	c.Spend.scrapeGroup(ctx, c.Mode)
	rep.Costs = c.Spend.services(c.Mode)
	close(outcomes)
	kinds := map[string]string{}
	for o := range outcomes {
		kinds[o.id] = o.kind
		if o.err != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s): %v", o.id, o.kind, o.err))
			continue
		}
		rep.Completed++
		took := o.end.Sub(o.began)
		rep.Latency = append(rep.Latency, took)
		if o.kind == "Greet" {
			rep.Greet = append(rep.Greet, took)
		}
		// After the kill: in flight at it, or started within
		// afterKillWindow of it, and ended before the SIGTERM (which
		// AtTerm measures).
		if k := killedAt.Load(); k != 0 {
			at := time.Unix(0, k)
			term := termedAt.Load()
			if term != 0 && o.began.Before(time.Unix(0, term)) && o.end.After(time.Unix(0, term)) {
				rep.AtTerm = append(rep.AtTerm, took)
			} else if (o.began.Before(at) && o.end.After(at)) || (!o.began.Before(at) && o.began.Sub(at) < afterKillWindow) {
				rep.AfterKill = append(rep.AfterKill, took)
				rep.slowest = append(rep.slowest, slow{id: o.id, kind: o.kind, began: o.began.Sub(at), took: took})
			}
		}
	}
	rep.Retries = fl.retries.Load()
	if err := <-chaosDone; err != nil {
		return rep, err
	}
	handOff := rep.HandedOff || c.Mode == modePolling // polling holds no leases
	if rep.TermToExit > c.Grace || !rep.TermExitOK || !handOff {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s exited %v after SIGTERM (grace %v), cleanly: %v, leases handed over: %v",
			rep.Termed, rep.TermToExit, c.Grace, rep.TermExitOK, rep.HandedOff))
	}
	problems, err := check(ctx, tgt, kinds)
	if err != nil {
		return rep, err
	}
	rep.Problems = append(rep.Problems, problems...)
	return rep, nil
}

// fleet is the live services, as a load balancer sees them.
type fleet struct {
	mu      sync.Mutex
	live    []*proc
	next    int
	retries atomic.Int64
}

// add puts p in rotation.
func (f *fleet) add(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = append(f.live, p)
}

// remove takes the i-th live service out of rotation and returns it.
func (f *fleet) remove(i int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.live[i]
	f.live = append(f.live[:i:i], f.live[i+1:]...)
	return p
}

// pick returns the next live service's address, round robin.
func (f *fleet) pick() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return f.live[f.next%len(f.live)].address()
}

// do sends a request to the next service, and to the next again after a
// transport error or a 5xx, until ctx ends; it returns the status and
// the decoded JSON body.
func (f *fleet) do(ctx context.Context, method, path, body string, header map[string]string) (int, map[string]any, error) {
	return request(ctx, f.pick, &f.retries, method, path, body, header)
}

// request sends a request to the service at addr(), and again to addr()
// (which may name another service) 50 ms after a transport error or a
// 5xx, until ctx ends; retries counts the resends. It returns the status
// and the decoded JSON body (nil when empty or not a JSON object).
func request(ctx context.Context, addr func() string, retries *atomic.Int64, method, path, body string, header map[string]string) (int, map[string]any, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr()+path, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var m map[string]any
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode < 500 {
				if len(b) > 0 {
					_ = json.Unmarshal(b, &m)
				}
				return resp.StatusCode, m, nil
			}
		}
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		retries.Add(1)
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// drive runs one orchestration through the API: start, the event an
// Approval waits for, and the wait for its end.
func drive(ctx context.Context, f *fleet, id, kind string) error {
	input := map[string]string{"Greet": `{"name":"` + id + `"}`, "FanOut": `{"count":5}`, "Approval": `{"item":"` + id + `"}`}[kind]
	status, body, err := f.do(ctx, "POST", "/v1/instances", `{"name":"`+kind+`","instanceId":"`+id+`","input":`+input+`}`,
		map[string]string{"Idempotency-Key": "start-" + id})
	if err != nil {
		return err
	}
	if status != http.StatusCreated { // a resend of a start that landed answers 201 too: a 409 is a failure
		return fmt.Errorf("start: %d %v", status, body)
	}
	if kind == "Approval" {
		for {
			status, body, err = f.do(ctx, "GET", "/v1/instances/"+id, "", nil)
			if err != nil {
				return err
			}
			if status == http.StatusOK && body["customStatus"] == "waiting for a decision" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		status, body, err = f.do(ctx, "POST", "/v1/instances/"+id+"/events/decision", `{"approved":true,"by":"fleet"}`,
			map[string]string{"Idempotency-Key": "decision-" + id})
		if err != nil {
			return err
		}
		if status != http.StatusAccepted {
			return fmt.Errorf("event: %d %v", status, body)
		}
	}
	for {
		status, body, err = f.do(ctx, "GET", "/v1/instances/"+id+"?wait=20s", "", nil)
		if err != nil {
			return err
		}
		switch {
		case status == http.StatusOK && body["state"] == "Completed":
			return nil
		case status == http.StatusOK && body["state"] == "Failed":
			return fmt.Errorf("failed: %v", body["failure"])
		}
	}
}

// check reads every instance's history back from the services' store t
// and checks it: one execution, started and completed once with the
// expected output, each activity completed once, each event once.
func check(ctx context.Context, t target, kinds map[string]string) ([]string, error) {
	p, err := openStore(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("open the store to check it: %w", err)
	}
	defer p.Close()
	admin, _ := p.Admin()
	var problems []string
	for id, kind := range kinds {
		execs, err := admin.ListExecutions(ctx, id)
		if err != nil {
			return nil, err
		}
		if len(execs) != 1 {
			problems = append(problems, fmt.Sprintf("%s: executions %v", id, execs))
			continue
		}
		events, err := admin.ReadHistory(ctx, id)
		if err != nil {
			return nil, err
		}
		if msg := checkHistory(id, kind, events); msg != "" {
			problems = append(problems, id+": "+msg)
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// checkHistory checks one history; "" when it is right.
func checkHistory(id, kind string, events []history.Event) string {
	started, completed := 0, 0
	scheduled := map[uint64]bool{}
	done := map[uint64]int{}
	raised := 0
	var output string
	for _, e := range events {
		switch k := e.Kind.(type) {
		case history.OrchestrationStarted:
			started++
		case history.OrchestrationCompleted:
			completed++
			output = k.Output
		case history.ActivityScheduled:
			scheduled[e.EventID] = true
		case history.ActivityCompleted, history.ActivityFailed:
			done[e.SourceEventID]++
		case history.ExternalEvent:
			raised++
		}
	}
	want := map[string]string{"Greet": `"Hello, ` + id + `!"`, "FanOut": "55", "Approval": `{"item":"` + id + `","approved":true,"by":"fleet"}`}[kind]
	switch {
	case started != 1 || completed != 1:
		return fmt.Sprintf("started %d times, completed %d times", started, completed)
	case output != want:
		return fmt.Sprintf("output %s, want %s", output, want)
	case kind == "Approval" && raised != 1:
		return fmt.Sprintf("the decision was received %d times", raised)
	}
	for ev := range scheduled {
		if done[ev] != 1 {
			return fmt.Sprintf("activity %d completed %d times", ev, done[ev])
		}
	}
	if len(done) != len(scheduled) {
		return fmt.Sprintf("%d completions for %d activities", len(done), len(scheduled))
	}
	return ""
}

// pct is the nearest-rank p quantile of ds (p in [0, 1]; 0 for none).
func pct(ds []time.Duration, p float64) time.Duration { return bench.Percentile(ds, 100*p) }

// afterKillTarget is the target of the p99 after the kill in
// event-driven mode: a replica restarted in place takes over at once, so
// what is left is the restart, the take-over and the lock releases.
const afterKillTarget = 3 * time.Second

// writeAfterKill prints the runs' p99 after the kill side by side, with
// the event-driven target's verdict (a figure, not a check: it does not
// fail the run).
func writeAfterKill(w io.Writer, reps []*report) {
	if len(reps) == 0 {
		return
	}
	fmt.Fprintf(w, "after the kill and restart in place (p99 / max):")
	for _, r := range reps {
		fmt.Fprintf(w, "  %s %v / %v", r.Mode, pct(r.AfterKill, 0.99).Round(time.Millisecond), pct(r.AfterKill, 1).Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	for _, r := range reps {
		if r.Mode != modeEventDriven {
			continue
		}
		verdict := "NO"
		if p := pct(r.AfterKill, 0.99); len(r.AfterKill) > 0 && p <= afterKillTarget {
			verdict = "yes"
		}
		fmt.Fprintf(w, "  target: event-driven p99 after the kill ≤ %v: %s\n", afterKillTarget, verdict)
	}
}
