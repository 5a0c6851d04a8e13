package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// barWidth is the width of the terminal progress bar in cells.
const barWidth = 40

// progress reports how many orchestrations have finished. On a terminal it
// redraws one line with \r; otherwise (a pipe, a CI log) it prints one line
// per 10 % so that logs stay readable.
type progress struct {
	out     io.Writer
	tty     bool
	total   int
	start   time.Time
	decile  int // last 10 % step printed (non-terminal)
	lastLen int // length of the last terminal line
	drawn   bool
}

func newProgress(out io.Writer, tty bool, total int, start time.Time) *progress {
	return &progress{out: out, tty: tty, total: total, start: start}
}

// update shows done (completed or failed) of total, failed among them.
func (p *progress) update(now time.Time, done, failed int) {
	elapsed := now.Sub(p.start)
	if p.tty {
		line := p.bar(done, failed, elapsed)
		pad := ""
		if n := p.lastLen - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		fmt.Fprintf(p.out, "\r%s%s", line, pad)
		p.lastLen, p.drawn = len(line), true
		return
	}
	if p.total == 0 {
		return
	}
	for d := done * 10 / p.total; p.decile < d; {
		p.decile++
		fmt.Fprintf(p.out, "progress %3d%%  %d/%d finished, %d failed, %.1fs\n",
			p.decile*10, p.decile*p.total/10, p.total, failed, elapsed.Seconds())
	}
}

// bar renders the terminal line.
func (p *progress) bar(done, failed int, elapsed time.Duration) string {
	filled := 0
	if p.total > 0 {
		filled = done * barWidth / p.total
	}
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	pct := 100
	if p.total > 0 {
		pct = done * 100 / p.total
	}
	return fmt.Sprintf("[%s%s] %d/%d %3d%%  %d failed  %.1f/s  %.1fs",
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), done, p.total, pct, failed, rate, elapsed.Seconds())
}

// finish ends the terminal line.
func (p *progress) finish() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.out)
	}
}
