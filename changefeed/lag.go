package changefeed

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/durafeed/durafeed/internal/epk"
)

// RangeLag estimates how far one sub-range of a held lease is behind the
// feed. A lease has one sub-range per physical partition it overlaps.
//
// The estimate is in log sequence numbers (LSN): every write to a
// physical partition takes the partition's next LSN, and every change-feed
// answer carries the partition's latest LSN in its session token. The
// pending figure is therefore the number of writes to the physical
// partition between the oldest change not yet acknowledged and the latest
// one: exact when the lease covers the whole partition and every write is
// a distinct change; an upper bound otherwise (writes to other parts of the
// partition, superseded versions and deletes count too).
type RangeLag struct {
	// LeaseID and Range identify the sub-range.
	LeaseID string
	Range   Range
	// ProcessedLSN is the LSN up to which changes were acknowledged (the
	// checkpointed position; -1 if never read or not an LSN).
	ProcessedLSN int64
	// LatestLSN is the physical partition's latest LSN when last observed
	// (-1 if unknown).
	LatestLSN int64
	// PendingLSNs is LatestLSN - (LSN of the oldest unacknowledged change)
	// + 1, or 0 when nothing is pending; -1 if unknown.
	PendingLSNs int64
	// OldestPending is the service timestamp (one-second resolution) of the
	// oldest change read but not yet acknowledged, or found pending by a
	// probe; zero when none is known. Its age is the end-to-end lag.
	OldestPending time.Time
	// ObservedAt is when LatestLSN was observed.
	ObservedAt time.Time
	// Probed reports that this Lag call read the feed for this sub-range.
	Probed bool
}

// Lag estimates each reader's lag, per sub-range. It is passive wherever it
// can be: the figures come from the readers' own latest answers, which are
// at most about IdleCeiling old. Only for a sub-range whose last answer is
// older than twice IdleCeiling (its handler has been busy or failing, or it
// was never read) does Lag probe the feed: one read of at most one document
// from the acknowledged position (about 1 RU), like the .NET estimator.
// Probe errors are returned joined, alongside the figures that could be
// made; ctx bounds the probes.
func (p *Processor) Lag(ctx context.Context) ([]RangeLag, error) {
	now := p.opts.Clock.Now()
	stale := 2 * p.opts.IdleCeiling
	var out []RangeLag
	var errs []error
	for _, r := range p.snapshotReaders() {
		r.mu.Lock()
		ps := slices.Clone(r.pos)
		obs := make(map[epk.Range]observation, len(r.obs))
		for k, v := range r.obs {
			obs[k] = v
		}
		var held *inHand
		if r.held != nil {
			h := *r.held
			held = &h
		}
		rid := r.rid
		r.mu.Unlock()

		for _, pos := range ps {
			l := RangeLag{LeaseID: r.id, Range: pos.rng, ProcessedLSN: -1, LatestLSN: -1, PendingLSNs: -1}
			if n, ok := etagLSN(pos.etag); ok {
				l.ProcessedLSN = n
			}
			firstPending := int64(-1)
			if held != nil && overlaps(held.rng, pos.rng) {
				firstPending, l.OldestPending = held.firstLSN, held.firstTS
			}
			ob, ok := lookupObservation(obs, pos.rng)
			if ok {
				l.LatestLSN, l.ObservedAt = ob.latest, ob.at
			}
			probedEmpty := false
			if !ok || now.Sub(ob.at) > stale {
				rr, err := p.readPage(ctx, nil, rid, pos, 1, false)
				if err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					errs = append(errs, err)
				} else {
					l.Probed = true
					if rr.latest >= 0 {
						l.LatestLSN, l.ObservedAt = rr.latest, p.opts.Clock.Now()
						r.mu.Lock()
						if cur, ok := r.obs[pos.rng]; !ok || cur.latest <= rr.latest {
							r.obs[pos.rng] = observation{latest: rr.latest, at: l.ObservedAt}
						}
						r.mu.Unlock()
					}
					if len(rr.docs) > 0 && firstPending < 0 {
						h := describePage(Batch{Range: rr.from, Documents: rr.docs})
						firstPending, l.OldestPending = h.firstLSN, h.firstTS
					}
					probedEmpty = len(rr.docs) == 0 && firstPending < 0
				}
			}
			switch {
			case firstPending >= 0 && l.LatestLSN >= 0:
				l.PendingLSNs = max(l.LatestLSN-firstPending+1, 1)
			case probedEmpty:
				l.PendingLSNs = 0
			case l.LatestLSN >= 0 && l.ProcessedLSN >= 0:
				l.PendingLSNs = max(l.LatestLSN-l.ProcessedLSN, 0)
			}
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b RangeLag) int {
		if c := strings.Compare(a.LeaseID, b.LeaseID); c != 0 {
			return c
		}
		return epk.Compare(a.Range.Min, b.Range.Min)
	})
	return out, errors.Join(errs...)
}

// lookupObservation finds the observation for r: its own, or the freshest
// of an overlapping range (a parent's before a split, whose LSNs the
// children continue).
func lookupObservation(obs map[epk.Range]observation, r epk.Range) (observation, bool) {
	if o, ok := obs[r]; ok {
		return o, true
	}
	var best observation
	found := false
	for k, o := range obs {
		if overlaps(k, r) && (!found || o.at.After(best.at)) {
			best, found = o, true
		}
	}
	return best, found
}
