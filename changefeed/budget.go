package changefeed

import (
	"context"
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

// budgetPeriod is the pause of an idle reader under the budget: zero
// without one.
func (p *Processor) budgetPeriod() time.Duration {
	b := p.opts.EmptyReadBudget
	if b <= 0 {
		return 0
	}
	n := max(1, p.partitionsRead())
	d := time.Duration(float64(n) * p.meanEmptyCharge() / b * float64(time.Second))
	return max(d, p.opts.ActiveDelay, minIdleBase)
}

// partitionsRead counts the container's physical partitions that the
// running readers' leases overlap (zero when they cannot be listed).
func (p *Processor) partitionsRead() int {
	phys, err := p.physicalRanges(context.Background())
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
