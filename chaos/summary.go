package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Summary returns the campaign's one-line summary, e.g.
//
//	chaos: mode=event-driven n=1000 completed=1000 wrong=0 stuck=0 duplicate-events=0 duplicate-completions=0 activity-reexecutions=0.4% lock-stalls=0 faults=1234 splits=1 killed=1 p50=1.2s p99=9.8s max=12s result=ok
//
// wrong counts roots that completed with another output, failed or went
// missing; stuck counts instances not terminal plus messages left in the
// queues; duplicate-events counts client calls recorded or consumed more
// than once; duplicate-completions scheduled operations with more than
// one completion event; activity-reexecutions is activity executions
// beyond the first over scheduled activities (allowed: at least once);
// lock-stalls counts items whose lock was taken by a lost answer nobody
// recovered (the kill's own are left out); latencies run from a root's
// first start attempt to its completion. On an account, faults are those
// injected client side and two fields come before result: ru, the
// charge the clients saw (Result.Spent), and 429s, the 429 answers they
// saw, injected ones included. result is "FAILED" when any correctness
// check failed.
func (r *Result) Summary() string {
	rep := r.Report
	d := rep.QueueDepths
	verdict := "ok"
	if !r.OK() {
		verdict = "FAILED"
	}
	spent := ""
	if r.Account != nil {
		spent = fmt.Sprintf(" ru=%.0f 429s=%d", r.Spent.RequestCharge, r.Spent.Throttled)
	}
	return fmt.Sprintf("chaos: mode=%s n=%d completed=%d wrong=%d stuck=%d duplicate-events=%d duplicate-completions=%d activity-reexecutions=%.1f%% lock-stalls=%d faults=%d splits=%d killed=%d p50=%s p99=%s max=%s%s result=%s",
		r.Campaign.Mode, rep.Expected, rep.Completed, rep.Wrong+rep.Missing, rep.Stuck+d.OrchestratorQueue+d.WorkerQueue+d.TimerQueue,
		rep.DuplicateEvents, rep.DuplicateCompletions, 100*rep.ReExecutionRate(), len(r.LockStalls), r.Faults,
		r.Splits, r.Killed, fmtDur(r.percentile(0.50)), fmtDur(r.percentile(0.99)), fmtDur(r.percentile(1)), spent, verdict)
}

// percentile returns the q-quantile of the latencies (0 when none).
func (r *Result) percentile(q float64) time.Duration { return quantile(r.Latencies, q) }

// quantile returns the q-quantile of sorted durations (0 when none).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sortDurations(d []time.Duration) { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

// maxListed bounds each list of WriteDetails.
const maxListed = 20

// WriteDetails writes what lies behind the summary: the campaign's
// events, on an account the account and what the campaign spent there,
// the faults injected by rule, the provider's lost-answer
// read-backs by outcome, the lock stalls, the client calls that were
// retried, and every finding with its evidence (the calls and read-back
// lines of its instance).
func (r *Result) WriteDetails(w io.Writer) {
	rep := r.Report
	fmt.Fprintf(w, "chaos[%s] events:\n", r.Campaign.Mode)
	for _, e := range r.Events {
		fmt.Fprintf(w, "  %s\n", e)
	}
	rules := make([]string, 0, len(r.FaultsByRule))
	for id, n := range r.FaultsByRule {
		rules = append(rules, fmt.Sprintf("%s=%d", id, n))
	}
	sort.Strings(rules)
	side := "server side"
	if r.Account != nil {
		side = "client side"
		fmt.Fprintf(w, "  %s\n", r.Account)
		fmt.Fprintf(w, "  spent: %.1f RU in %d requests, the injected answers included (estimate %.0f RU, cap %s); 429 answers %d (%d injected), retry-after %v; %.1f RU more in answers the injected drops discarded\n",
			r.Spent.RequestCharge, r.Spent.Requests, r.EstimateRU, capString(r.Campaign.MaxRU), r.Spent.Throttled, r.FaultsByRule[ruleThrottle],
			r.Spent.RetryAfter, r.UnseenRU)
	}
	fmt.Fprintf(w, "  faults (%s): %d of %d requests (%s)\n", side, r.Faults, r.Requests, strings.Join(rules, " "))
	fmt.Fprintf(w, "  instances: %d (roots %d); activities scheduled %d, executed %d, re-executed %d, phantom %d; elapsed %s\n",
		rep.Instances, rep.Expected, rep.ScheduledActivities, rep.ActivityExecutions, rep.ReExecutions, rep.PhantomActivities, fmtDur(r.Elapsed))
	var kinds []string
	for _, k := range Kinds() {
		if l := r.KindLatencies[k]; len(l) > 0 {
			kinds = append(kinds, fmt.Sprintf("%s p50=%s max=%s", k, fmtDur(quantile(l, 0.5)), fmtDur(quantile(l, 1))))
		}
	}
	fmt.Fprintf(w, "  latency by kind: %s\n", strings.Join(kinds, ", "))
	fmt.Fprintf(w, "  queues after settling: orchestrator %d, worker %d, timer %d\n",
		rep.QueueDepths.OrchestratorQueue, rep.QueueDepths.WorkerQueue, rep.QueueDepths.TimerQueue)

	outcomes := map[string]int{}
	for _, b := range r.ReadBacks {
		outcomes[b.Message+" "+readBackOutcome(b)]++
	}
	keys := make([]string, 0, len(outcomes))
	for k := range outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "  lost-answer read-backs (provider Info lines): %d\n", len(r.ReadBacks))
	for _, k := range keys {
		fmt.Fprintf(w, "    %4d  %s\n", outcomes[k], k)
	}
	fmt.Fprintf(w, "  lock stalls (lost answers): %d; attributed to the killed replica: %d\n", len(r.LockStalls), len(r.KillStalls))
	for i, s := range append(append([]LockStall(nil), r.LockStalls...), r.KillStalls...) {
		if i == maxListed {
			fmt.Fprintf(w, "    …\n")
			break
		}
		fmt.Fprintf(w, "    %s\n", s)
		for _, b := range r.ReadBacks {
			if b.Fields["instance"] == s.Instance {
				fmt.Fprintf(w, "      read-back: %s\n", b)
			}
		}
	}
	fmt.Fprintf(w, "  client calls retried or failed: %d\n", len(r.Calls))
	if len(rep.Findings) == 0 {
		fmt.Fprintf(w, "  findings: none\n")
		return
	}
	fmt.Fprintf(w, "  findings: %d\n", len(rep.Findings))
	for i, f := range rep.Findings {
		if i == 5*maxListed {
			fmt.Fprintf(w, "  … %d more\n", len(rep.Findings)-i)
			break
		}
		fmt.Fprintf(w, "  - %s\n", f)
		if f.Instance == "" {
			continue
		}
		for _, c := range r.Calls {
			if c.Instance == f.Instance {
				fmt.Fprintf(w, "      call: %s\n", c)
			}
		}
		for _, b := range r.ReadBacks {
			if b.Fields["instance"] == f.Instance {
				fmt.Fprintf(w, "      read-back: %s\n", b)
			}
		}
		for _, s := range append(append([]LockStall(nil), r.LockStalls...), r.KillStalls...) {
			if s.Instance == f.Instance {
				fmt.Fprintf(w, "      stall: %s\n", s)
			}
		}
	}
}

// readBackOutcome names what a read-back found (found=…, landed=…,
// committed=…).
func readBackOutcome(b ReadBack) string {
	for _, k := range []string{"found", "landed", "committed"} {
		if v, ok := b.Fields[k]; ok {
			return fmt.Sprintf("%s=%v", k, v)
		}
	}
	return ""
}
