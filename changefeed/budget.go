package changefeed

import (
	"context"
	"math"
	"time"
)

// The empty-read budget (Options.EmptyReadBudget). An idle reader reads
// once per period P·c/B: P physical partitions overlapped by the
// Processor's leases, c the mean charge of an empty read, B the budget.
// Readers of one partition share a phase (and their reads, see
// fromOthers), so each partition costs one read per period.

// emptyChargeWeight is the weight of the newest sample in the running mean
// of empty-read charges.
const emptyChargeWeight = 0.1

// defaultEmptyCharge is the charge assumed before any empty read is
// measured: the service's charge for a change-feed read answered 304.
const defaultEmptyCharge = 1.0

// changeRateWindow is the time constant of the rate of changes that
// raises the budget (Options.ReadsPerChange).
const changeRateWindow = 2 * time.Second

// minChanges is the decayed count below which the changes no longer
// count: the budget is back to EmptyReadBudget exactly.
const minChanges = 1e-3

// noteChanges records n changes delivered to the handler at now.
func (p *Processor) noteChanges(n int, now time.Time) {
	if p.opts.ReadsPerChange <= 0 || n <= 0 {
		return
	}
	p.budgetMu.Lock()
	defer p.budgetMu.Unlock()
	p.changes = p.decayedLocked(now) + float64(n)
	p.changesAt = now
}

// decayedLocked is the decayed count of changes at now (its rate is the
// count over changeRateWindow).
func (p *Processor) decayedLocked(now time.Time) float64 {
	if p.changes == 0 {
		return 0
	}
	dt := now.Sub(p.changesAt)
	if dt <= 0 {
		return p.changes
	}
	v := p.changes * math.Exp(-float64(dt)/float64(changeRateWindow))
	if v < minChanges {
		return 0
	}
	return v
}

// changeRate is the rate of changes delivered, per second.
func (p *Processor) changeRate(now time.Time) float64 {
	p.budgetMu.Lock()
	defer p.budgetMu.Unlock()
	return p.decayedLocked(now) / changeRateWindow.Seconds()
}

// budget is the RU per second idle readers may spend now: the
// EmptyReadBudget plus ReadsPerChange reads for each change seen.
func (p *Processor) budget(c float64) float64 {
	b := p.opts.EmptyReadBudget
	if m := p.opts.ReadsPerChange; m > 0 {
		b += m * c * p.changeRate(p.opts.Clock.Now())
	}
	return b
}

// noteEmptyCharge records the charge of a read that found nothing for the
// handler.
func (p *Processor) noteEmptyCharge(c float64) {
	if c <= 0 {
		return
	}
	p.budgetMu.Lock()
	defer p.budgetMu.Unlock()
	if p.emptyCharge == 0 {
		p.emptyCharge = c
		return
	}
	p.emptyCharge += emptyChargeWeight * (c - p.emptyCharge)
}

// meanEmptyCharge is the running mean of empty-read charges (the default
// until one is measured).
func (p *Processor) meanEmptyCharge() float64 {
	p.budgetMu.Lock()
	defer p.budgetMu.Unlock()
	if p.emptyCharge == 0 {
		return defaultEmptyCharge
	}
	return p.emptyCharge
}

// budgetPeriod is the pause of an idle reader under the budget (zero
// without one), also kept for Stats.IdlePeriod.
func (p *Processor) budgetPeriod(ctx context.Context) time.Duration {
	if p.opts.EmptyReadBudget <= 0 {
		return 0
	}
	n := max(1, p.partitionsRead(ctx))
	c := p.meanEmptyCharge()
	d := time.Duration(float64(n) * c / p.budget(c) * float64(time.Second))
	if m := p.opts.MaxIdlePeriod; m > 0 {
		d = min(d, m)
	}
	d = max(d, p.opts.ActiveDelay, minIdleBase)
	p.idlePeriod.Store(int64(d))
	return d
}

// partitionsRead counts the container's physical partitions that the
// running readers' leases overlap (zero when they cannot be listed).
func (p *Processor) partitionsRead(ctx context.Context) int {
	phys, err := p.physicalRanges(ctx)
	if err != nil {
		return 0
	}
	readers := p.snapshotReaders()
	n := 0
	for _, fr := range phys {
		for _, r := range readers {
			if overlaps(r.rng, fr) {
				n++
				break
			}
		}
	}
	return n
}
