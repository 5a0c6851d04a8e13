package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/account"
	"github.com/durafeed/durafeed/provider"
	"github.com/durafeed/durafeed/store"
)

// defaultMaxRU is -max-ru's default: the request units a run on an
// account may spend, its estimate before it starts and its services'
// and its own charges while it runs.
const defaultMaxRU = 500_000

// accountPrefix starts the name of the run's throwaway database.
const accountPrefix = "durafeed-fleet"

// The estimate's constants, from the published sweep
// (docs/fleet-sweep/sweep.json: cosmosemu's simulated charge model, three
// replicas per cell, every request of the services counted from their
// /metrics), with estimateMargin on top.
const (
	// sweepRUPerOrchestration is the dearest mode's RU per orchestration at
	// the busiest load, where the idle reads are the smallest part of it:
	// polling at 100 ms, 111,827.8 RU for 600 orchestrations (event-driven
	// 156.8, event-driven+peer 159.4).
	sweepRUPerOrchestration = 186.4
	// sweepIdleRUPerMinute is the dearest mode's RU per minute at the
	// quietest load, three replicas, where the idle reads are most of it:
	// polling at 60 s, 79,850.6 RU in 601.2 s, its 20 orchestrations
	// included (event-driven 1,657.7).
	sweepIdleRUPerMinute = 7968.8
	// sweepReplicas is the number of services of a sweep cell.
	sweepReplicas = 3
	// estimateMargin covers an account's charges above the emulator's
	// model (larger documents' writes, indexing) and the run's noise.
	estimateMargin = 1.5
	// estimateRUPerOrchestration is what the estimate charges a Greet or an
	// Approval: 279.6 RU.
	estimateRUPerOrchestration = sweepRUPerOrchestration * estimateMargin
	// estimateIdleRUPerReplicaSecond is what the estimate charges a
	// running service per second besides its orchestrations: 66.4 RU.
	estimateIdleRUPerReplicaSecond = sweepIdleRUPerMinute / 60 / sweepReplicas * estimateMargin
	// fanOutWeight is a FanOut of 5 (the fleet test's third kind) in
	// Greets: a Greet is an orchestration with one activity; the fan-out
	// has five and gathers them (see estimateFleet).
	fanOutWeight = 2.5
	// sweepCellOverhead is a sweep cell's time besides its ticks and
	// -sweep-settle: its services' start, the warm-up, the leases'
	// spreading and the final reads.
	sweepCellOverhead = 30 * time.Second
)

// estimate is what a run is expected to charge before it starts.
type estimate struct {
	// Orchestrations counts the planned orchestrations in Greets (a
	// FanOut of 5 counts fanOutWeight).
	Orchestrations float64
	// ReplicaSeconds is the services' planned running time, summed.
	ReplicaSeconds float64
	// RU is Orchestrations × estimateRUPerOrchestration + ReplicaSeconds
	// × estimateIdleRUPerReplicaSecond.
	RU float64
}

// newEstimate is the estimate of a run of orchestrations (in Greets) and
// replicaSeconds.
func newEstimate(orchestrations, replicaSeconds float64) estimate {
	return estimate{Orchestrations: orchestrations, ReplicaSeconds: replicaSeconds,
		RU: orchestrations*estimateRUPerOrchestration + replicaSeconds*estimateIdleRUPerReplicaSecond}
}

// String is the estimate's line for the run's header.
func (e estimate) String() string {
	return fmt.Sprintf("estimated %.0f RU: %.0f orchestrations × %.1f RU + %.0f replica-seconds × %.1f RU (docs/fleet-sweep's dearest mode + %.0f%%)",
		e.RU, e.Orchestrations, estimateRUPerOrchestration, e.ReplicaSeconds, estimateIdleRUPerReplicaSecond, (estimateMargin-1)*100)
}

// estimateFleet estimates the fleet test in the given number of modes: N
// orchestrations each (a third of them FanOuts of 5, weighing
// fanOutWeight), and three services running for the whole -timeout (the
// run's bound: its length on an account is not known beforehand), plus
// the SIGTERM'd service's grace period beside its replacement.
//
// fanOutWeight: on cosmosemu with the sweep's settings (-sim-charges
// -latency 2ms, reached over COSMOS_ENDPOINT), the fleet test's mix at
// -n 300 cost 263.7 RU per orchestration in polling and 199.6 in
// event-driven mode, 1.41 and 1.27 times the sweep's Greets and
// Approvals at its busiest load (186.4 and 156.8); counting a FanOut as
// 2.5 Greets weighs the mix (1 + 2.5 + 1) / 3 = 1.5 times.
func estimateFleet(c config, modes int) estimate {
	perMode := float64(c.N/3)*fanOutWeight + float64(c.N-c.N/3)
	replicaSeconds := 3*c.Timeout.Seconds() + float64(modes)*c.Grace.Seconds()
	return newEstimate(float64(modes)*perMode, replicaSeconds)
}

// estimateSweep estimates a sweep: per cell a Greet and an Approval per
// tick (the most ticks the cell can run) and a warm-up of each, and its
// three services for the ticks' mean length (capped by -sweep-duration),
// two gaps more, -sweep-settle and sweepCellOverhead.
func estimateSweep(c sweepConfig) estimate {
	var orch, secs float64
	for _, l := range c.Loads {
		ticks := c.ticksFor(l)
		length := min(c.Duration, time.Duration(ticks)*l.Gap) + 2*l.Gap + c.Settle + sweepCellOverhead
		orch += float64(2*ticks + 2)
		secs += sweepReplicas * length.Seconds()
	}
	n := float64(len(c.modes()))
	return newEstimate(n*orch, n*secs)
}

// accountRun is a run on an Azure Cosmos DB account, or on an emulator
// reached over COSMOS_ENDPOINT the way an account is: the account with the
// run's throwaway database, holding a container per fleet, and what the
// services need to reach it.
type accountRun struct {
	acct *account.Account
	// serviceEnv is the account's part of the services' environment,
	// without COSMOS_CONTAINER (see accountServiceEnv).
	serviceEnv []string
	// keep leaves the database in place (-keep).
	keep bool
	// spend follows the run's charges against the cap.
	spend *spend
}

// startAccount opens the account for a run (accountOptions,
// openAccount) with the containers, and returns it with its spend: the
// services' charges and the fleet's own clients', capped at maxRU (0:
// no cap), stopping the run through stop.
func startAccount(ctx context.Context, o account.Options, env []string, keep bool, t account.Throughput, containers []string,
	maxRU float64, stop context.CancelCauseFunc, w io.Writer) (*accountRun, error) {
	o, err := accountOptions(o, env, keep, t)
	if err != nil {
		return nil, err
	}
	a, err := openAccount(ctx, o, env, containers, w)
	if err != nil {
		return nil, err
	}
	a.spend = newSpend(func() float64 { return a.acct.Meter().Total().RequestCharge }, maxRU, stop)
	return a, nil
}

// spendReport is what the run has charged so far, against estRU and
// maxRU.
func (a *accountRun) spendReport(estRU, maxRU float64) spendReport {
	svc := a.spend.services("")
	return spendReport{EstimateRU: estRU, MaxRU: maxRU, ServicesRU: svc.RU, ServicesRequests: svc.Requests,
		ServicesThrottled: svc.Throttled, FleetRU: a.spend.fleetRU()}
}

// accountOptions completes the options FromEnv read from the fleet's
// environment env: the prefix, -keep, -throughput, and the fleet's own
// clients' transport and credential, which trust the certificates of the
// file SSL_CERT_FILE names in env as the services' Go runtime does (an
// emulator's certificate; on Azure SSL_CERT_FILE is normally unset and
// the system's roots are used). With Entra ID the fleet's own credential
// is DefaultAzureCredential over that transport; it reads its variables
// (AZURE_*, IDENTITY_ENDPOINT, …) from the process's environment.
func accountOptions(o account.Options, env []string, keep bool, t account.Throughput) (account.Options, error) {
	o.Prefix, o.Keep, o.Throughput = accountPrefix, keep, t
	tr, err := ownTransport(env)
	if err != nil {
		return o, err
	}
	if tr != nil {
		o.ClientOptions = func() *azcosmos.ClientOptions {
			return &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr.Clone()}}}
		}
		if o.Key == "" && o.Credential == nil {
			cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
				ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr.Clone()}}})
			if err != nil {
				return o, fmt.Errorf("the Entra ID credential: %w", err)
			}
			o.Credential = cred
		}
	}
	return o, nil
}

// openAccount opens the account (creating the run's throwaway database),
// prints what it is to w and creates the containers; on failure it
// deletes what it created.
func openAccount(ctx context.Context, o account.Options, env []string, containers []string, w io.Writer) (*accountRun, error) {
	acct, err := account.Open(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("open the account: %w", err)
	}
	fmt.Fprintln(w, acct.Info())
	for _, c := range containers {
		if err := acct.CreateContainer(ctx, c); err != nil {
			return nil, errors.Join(fmt.Errorf("create container %q: %w", c, err), acct.Close())
		}
	}
	return &accountRun{acct: acct, serviceEnv: accountServiceEnv(o, acct.Database(), env), keep: o.Keep}, nil
}

// close deletes the run's database, unless -keep, and says so on w.
func (a *accountRun) close(w io.Writer) error {
	db := a.acct.Database()
	if err := a.acct.Close(); err != nil {
		return fmt.Errorf("delete the run's database %q: %w", db, err)
	}
	if a.keep {
		fmt.Fprintf(w, "kept the run's database %q (-keep)\n", db)
	} else {
		fmt.Fprintf(w, "deleted the run's database %q\n", db)
	}
	return nil
}

// accountServiceEnv is the account's part of a service's environment:
// COSMOS_ENDPOINT and COSMOS_DATABASE, COSMOS_KEY with a key; with
// Entra ID instead, what the service's DefaultAzureCredential reads,
// taken from the fleet's environment env: every AZURE_* variable (a
// service principal's or workload identity's, AZURE_CLIENT_ID naming a
// user-assigned identity), the managed identity's endpoints
// (IDENTITY_ENDPOINT, IDENTITY_HEADER, IDENTITY_SERVER_THUMBPRINT,
// IMDS_ENDPOINT, MSI_ENDPOINT, MSI_SECRET), and COSMOS_ACCOUNT_ID and
// COSMOS_ARM_ENDPOINT (not read by the service today; passed so that an
// emulator's Resource Manager surface stays addressable). SSL_CERT_FILE
// and the rest of env (PATH, HOME for the Azure CLI's login) reach the
// services through defaultEnv in every case.
func accountServiceEnv(o account.Options, database string, env []string) []string {
	out := []string{"COSMOS_ENDPOINT=" + o.Endpoint, "COSMOS_DATABASE=" + database}
	if o.Key != "" {
		return append(out, "COSMOS_KEY="+o.Key)
	}
	for _, kv := range env {
		if credentialVar(kv) || strings.HasPrefix(kv, "COSMOS_ACCOUNT_ID=") || strings.HasPrefix(kv, "COSMOS_ARM_ENDPOINT=") {
			out = append(out, kv)
		}
	}
	return out
}

// credentialVar reports whether kv (NAME=value) configures an Entra ID
// credential: AZURE_*, IDENTITY_*, MSI_*, IMDS_ENDPOINT.
func credentialVar(kv string) bool {
	for _, p := range []string{"AZURE_", "IDENTITY_", "MSI_", "IMDS_ENDPOINT="} {
		if strings.HasPrefix(kv, p) {
			return true
		}
	}
	return false
}

// target is the Cosmos DB the services of one fleet use: an emulator
// started for it, or a container of the run's database on an account.
type target struct {
	// desc names it in the report.
	desc string
	// env is its part of the services' environment.
	env []string
	// store returns the options with which the fleet reads the services'
	// container back.
	store func() (store.Options, error)
}

// emulatorTarget is the emulator at endpoint, its certificate in cert:
// database and container fleet, the well-known key.
func emulatorTarget(endpoint, cert string) target {
	return target{desc: "cosmosemu", env: storeEnv(endpoint, cert), store: func() (store.Options, error) {
		tr, err := ownTransport([]string{"SSL_CERT_FILE=" + cert})
		if err != nil {
			return store.Options{}, fmt.Errorf("the emulator's certificate: %w", err)
		}
		return store.Options{Endpoint: endpoint, Key: cosmosemu.WellKnownKey, Database: "fleet", Container: "fleet",
			ClientOptions: &azcosmos.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}}, nil
	}}
}

// target is container of the run's database.
func (a *accountRun) target(container string) target {
	return target{desc: fmt.Sprintf("container %s of %s's database %s", container, a.acct.Info().Endpoint, a.acct.Database()),
		env:   a.targetEnv(container),
		store: func() (store.Options, error) { return a.acct.StoreOptions(container), nil }}
}

// targetEnv is the account's part of the environment of a service on
// container.
func (a *accountRun) targetEnv(container string) []string {
	return append(slices.Clone(a.serviceEnv), "COSMOS_CONTAINER="+container)
}

// openStore opens a polling-mode provider (which dispatches nothing until
// asked) on t's container, to read it back; the caller closes it.
func openStore(ctx context.Context, t target) (*provider.Provider, error) {
	o, err := t.store()
	if err != nil {
		return nil, err
	}
	return provider.New(ctx, provider.Config{Mode: provider.ModePolling, Store: o})
}

// ownTransport returns a transport trusting only the certificates of the
// file SSL_CERT_FILE names in env (nil when it names none), as Go's
// runtime in the services does.
func ownTransport(env []string) (*http.Transport, error) {
	file := lookup(env, "SSL_CERT_FILE")
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("SSL_CERT_FILE: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("SSL_CERT_FILE %s: no certificate", file)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}

// lookup is name's value in env (the last one, as exec uses), "" when
// unset.
func lookup(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// containerName is the container of a fleet test's mode, or of a sweep
// cell (load not ""), on an account: a fleet of its own per mode and per
// cell, as each has its emulator otherwise.
func containerName(mode, load string) string {
	mode = strings.ReplaceAll(mode, "+", "-")
	if load == "" {
		return "fleet-" + mode
	}
	return "sweep-" + mode + "-" + load
}

// spend follows what a run has charged: each service process's request
// units, requests and 429s as its /metrics last said (kept after it
// exits, so a killed service's counters up to its last scrape stay
// counted), and the fleet's own clients' charge (own; nil on the
// emulator). With a cap, watch scrapes every service every
// spendInterval and stops the run (stop, with an error wrapping
// account.ErrOverCap) once the sum passes it. Its methods are safe for
// concurrent use.
type spend struct {
	own   func() float64
	capRU float64
	stop  context.CancelCauseFunc

	mu    sync.Mutex
	procs map[*proc]*procCosts
}

// procCosts is one service's group (a mode, a sweep cell) and its last
// scraped counters.
type procCosts struct {
	group string
	c     costs
}

// spendInterval is how often watch scrapes the services.
const spendInterval = time.Second

// newSpend returns an empty spend; capRU ≤ 0 means no cap.
func newSpend(own func() float64, capRU float64, stop context.CancelCauseFunc) *spend {
	return &spend{own: own, capRU: capRU, stop: stop, procs: map[*proc]*procCosts{}}
}

// add follows p, a service of group.
func (s *spend) add(group string, p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[p] = &procCosts{group: group}
}

// scrape reads p's counters (unless it has exited) and checks the cap.
func (s *spend) scrape(ctx context.Context, p *proc) {
	select {
	case <-p.exited:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := readCosts(ctx, p.address())
	if err != nil {
		return // gone, or going: its last figures stand
	}
	s.mu.Lock()
	if pc := s.procs[p]; pc != nil {
		pc.c = c
	}
	s.mu.Unlock()
	s.check()
}

// scrapeGroup scrapes the services of group ("" for all) at once.
func (s *spend) scrapeGroup(ctx context.Context, group string) {
	s.mu.Lock()
	var ps []*proc
	for p, pc := range s.procs {
		if group == "" || pc.group == group {
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { s.scrape(ctx, p) })
	}
	wg.Wait()
}

// services sums the last counters of group's services ("" for all).
func (s *spend) services(group string) costs {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum costs
	for _, pc := range s.procs {
		if group == "" || pc.group == group {
			sum = sum.add(pc.c)
		}
	}
	return sum
}

// fleetRU is the fleet's own clients' charge (0 on the emulator).
func (s *spend) fleetRU() float64 {
	if s.own == nil {
		return 0
	}
	return s.own()
}

// check stops the run once the services' and the fleet's charges pass
// the cap.
func (s *spend) check() {
	if s.capRU <= 0 {
		return
	}
	svc, own := s.services("").RU, s.fleetRU()
	if svc+own > s.capRU {
		s.stop(fmt.Errorf("stopped: the services have spent %.0f RU and the fleet's own clients %.0f RU, past the cap of %.0f RU (-max-ru): %w",
			svc, own, s.capRU, account.ErrOverCap))
	}
}

// watch scrapes every service each spendInterval until ctx ends, when
// there is a cap.
func (s *spend) watch(ctx context.Context) {
	if s.capRU <= 0 {
		return
	}
	t := time.NewTicker(spendInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.scrapeGroup(ctx, "")
		}
	}
}

// spendReport is what a run on an account charged, against its estimate
// and cap.
type spendReport struct {
	EstimateRU float64 `json:"estimate_ru"`
	MaxRU      float64 `json:"max_ru"`
	// Services sums every service's counters from its /metrics, the
	// account's own x-ms-request-charge per answer.
	ServicesRU        float64 `json:"services_ru"`
	ServicesRequests  float64 `json:"services_requests"`
	ServicesThrottled float64 `json:"services_throttled"`
	// FleetRU is the fleet's own clients' charge: the database and its
	// containers, the reads of the histories.
	FleetRU float64 `json:"fleet_ru"`
}

// write prints the spend's line.
func (r spendReport) write(w io.Writer) {
	fmt.Fprintf(w, "account spend: %.0f RU by the services (their /metrics: the account's x-ms-request-charge; %.0f requests, %.0f answered 429), %.0f RU by the fleet's own clients; estimate %.0f RU, cap %.0f RU\n",
		r.ServicesRU, r.ServicesRequests, r.ServicesThrottled, r.FleetRU, r.EstimateRU, r.MaxRU)
}
