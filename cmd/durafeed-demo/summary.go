package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// result is the outcome of one job.
type result struct {
	Kind string
	// OK is true when the job completed with the expected output.
	OK bool
	// Latency is from the start request to the commit of the completion.
	Latency time.Duration
	// CompletedAt is when the completion was committed.
	CompletedAt time.Time
	// Detail explains a failure.
	Detail string
}

// summary is what the demo reports at the end.
type summary struct {
	Backend  string
	Replicas int
	Total    int
	// Completed counts jobs that completed with the expected output;
	// Failed those that failed or completed with another output;
	// Unfinished those still running when the demo stopped.
	Completed, Failed, Unfinished int
	CompletedByKind               map[string]int
	Failures                      []string
	// Elapsed is from the first start request to the last completion.
	Elapsed time.Duration
	// Throughput is Completed / Elapsed, in orchestrations per second.
	Throughput         float64
	P50, P90, P99, Max time.Duration
	// Embedded is true for the embedded emulator, whose request counters
	// and simulated charges fill Requests and RU.
	Embedded    bool
	Requests    int64
	RU          float64
	Interrupted bool
}

// maxListedFailures bounds how many failure details the summary prints.
const maxListedFailures = 5

// summarize computes the summary of the results gathered by start.
func summarize(results map[string]result, total int, start time.Time) summary {
	s := summary{Total: total, CompletedByKind: map[string]int{}}
	var lat []time.Duration
	var last time.Time
	ids := make([]string, 0, len(results))
	for id := range results {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := results[id]
		if !r.OK {
			s.Failed++
			if len(s.Failures) < maxListedFailures {
				s.Failures = append(s.Failures, id+": "+r.Detail)
			}
			continue
		}
		s.Completed++
		s.CompletedByKind[r.Kind]++
		lat = append(lat, r.Latency)
		if r.CompletedAt.After(last) {
			last = r.CompletedAt
		}
	}
	s.Unfinished = total - s.Completed - s.Failed
	if s.Completed > 0 {
		s.Elapsed = max(last.Sub(start), time.Millisecond)
		s.Throughput = float64(s.Completed) / s.Elapsed.Seconds()
	}
	slices.Sort(lat)
	s.P50, s.P90, s.P99 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
	if len(lat) > 0 {
		s.Max = lat[len(lat)-1]
	}
	return s
}

// percentile returns the nearest-rank p-th percentile of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 · n)
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// ok reports whether every job completed as expected.
func (s summary) ok() bool {
	return !s.Interrupted && s.Failed == 0 && s.Unfinished == 0 && s.Completed == s.Total
}

// print writes the summary.
func (s summary) print(w io.Writer) {
	fmt.Fprintln(w, "summary")
	var byKind []string
	for _, k := range workloadKinds() {
		if n := s.CompletedByKind[k]; n > 0 {
			byKind = append(byKind, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(w, "  completed   %d of %d (%s)\n", s.Completed, s.Total, strings.Join(byKind, ", "))
	fmt.Fprintf(w, "  failed      %d\n", s.Failed)
	for _, f := range s.Failures {
		fmt.Fprintf(w, "                %s\n", f)
	}
	if s.Unfinished > 0 {
		fmt.Fprintf(w, "  unfinished  %d\n", s.Unfinished)
	}
	fmt.Fprintf(w, "  elapsed     %s (first start to last completion)\n", round(s.Elapsed))
	fmt.Fprintf(w, "  throughput  %.1f orchestrations/s\n", s.Throughput)
	fmt.Fprintf(w, "  latency     p50 %s  p90 %s  p99 %s  max %s (start to completion)\n",
		round(s.P50), round(s.P90), round(s.P99), round(s.Max))
	if s.Embedded {
		perOrch := 0.0
		if n := s.Completed + s.Failed; n > 0 {
			perOrch = s.RU / float64(n)
		}
		fmt.Fprintf(w, "  emulator    %d requests, %.0f RU simulated (%.1f RU per finished orchestration; charge model of cosmosemu/knobs, not measured on Azure)\n",
			s.Requests, s.RU, perOrch)
	}
	if s.Interrupted {
		fmt.Fprintln(w, "  interrupted before the workload finished")
	}
}

// round shortens a duration for display.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}
