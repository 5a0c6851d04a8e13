package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durafeed/durafeed/internal/epk"
	"go.uber.org/zap"
)

// Shared reads. The readers of one Processor whose positions lie side by
// side in one physical partition read that span once: the reader with the
// lowest position reads the whole span from there (a position behind the
// reader's own is never widened over, so a reader stuck on a failing batch
// never holds the others back), keeps its own changes and publishes the
// page in the partition's state; a sibling whose position the page covers
// takes its changes from it (those past its own position, in its range)
// and moves its position to the page's end, exactly as its own read of
// the same moment would have. Each lease keeps its own position,
// checkpoint and handler calls. Telling one lease's documents from
// another's needs each document's EPK, computed from the container's
// partition key definition.

// keyRetry is the least time between two attempts to read the container's
// partition key definition.
const keyRetry = 10 * time.Second

// keyDef is a container's partition key definition, parsed.
type keyDef struct {
	kind    epk.Kind
	version int
	paths   [][]string
}

// keys returns the container's partition key definition, reading it on
// first use; nil while it is unknown (a failed read is tried again after
// keyRetry) or when sharing is off.
func (p *Processor) keys(ctx context.Context) *keyDef {
	p.keyMu.Lock()
	defer p.keyMu.Unlock()
	if p.key != nil || p.keyOff {
		return p.key
	}
	now := p.opts.Clock.Now()
	if !p.keyTried.IsZero() && now.Sub(p.keyTried) < keyRetry {
		return nil
	}
	p.keyTried = now
	rctx, cancel := context.WithTimeout(ctx, p.opts.ReadTimeout)
	defer cancel()
	resp, err := p.container.Read(rctx, nil)
	if err != nil || resp.ContainerProperties == nil {
		if ctx.Err() == nil {
			p.log.Debug("changefeed: reading the partition key definition failed; leases read alone meanwhile", zap.Error(err))
		}
		return nil
	}
	def := resp.ContainerProperties.PartitionKeyDefinition
	k := &keyDef{kind: epk.Kind(def.Kind), version: def.Version}
	for _, path := range def.Paths {
		k.paths = append(k.paths, epk.SplitPath(path))
	}
	if _, err := epk.KeyOf(k.kind, k.version, nil); err != nil || len(k.paths) == 0 {
		p.keyOff = true
		p.log.Warn("changefeed: unsupported partition key definition; leases read alone", zap.Any("definition", def), zap.Error(err))
		return nil
	}
	p.key = k
	return k
}

// pageDoc is a document of a shared page with what splitting needs.
type pageDoc struct {
	raw json.RawMessage
	epk string
	lsn int64
}

// parse reads a changed document's EPK and LSN.
func (k *keyDef) parse(raw json.RawMessage) (pageDoc, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return pageDoc{}, err
	}
	var lsn int64
	if err := json.Unmarshal(top["_lsn"], &lsn); err != nil {
		return pageDoc{}, fmt.Errorf("changefeed: changed document without a valid _lsn: %w", err)
	}
	comps := make([]any, len(k.paths))
	for i, segs := range k.paths {
		comps[i] = component(top, segs)
	}
	e, err := epk.KeyOf(k.kind, k.version, comps)
	if err != nil {
		return pageDoc{}, err
	}
	return pageDoc{raw: raw, epk: e, lsn: lsn}, nil
}

// component reads one partition key component at the property path segs
// of a document's top-level properties, as epk.Components does from a
// fully decoded document: a missing path, an object or an array is
// epk.Undefined.
func component(top map[string]json.RawMessage, segs []string) any {
	m := top
	for i, s := range segs {
		v, ok := m[s]
		if !ok {
			return epk.Undefined
		}
		if i < len(segs)-1 {
			m = nil
			if json.Unmarshal(v, &m) != nil || m == nil {
				return epk.Undefined
			}
			continue
		}
		var x any
		if json.Unmarshal(v, &x) != nil {
			return epk.Undefined
		}
		switch x.(type) {
		case string, float64, bool, nil:
			return x
		}
		return epk.Undefined
	}
	return epk.Undefined
}

// sharedPage is a read of a span of one physical partition, kept in the
// partition's state for the siblings it covers.
type sharedPage struct {
	rng    epk.Range // the span read
	from   int64     // the LSN it was read from
	end    string    // the span's continuation ETag after it
	endLSN int64
	rid    string
	docs   []pageDoc
	more   bool // the page was full: the span has changes past end
	latest int64
	at     time.Time // when the read began
	by     *reader
}

// newPage builds the shared page of rr, the read of span begun at at, or
// nil when it cannot be shared (the span came back split, or a
// document's key cannot be read).
func (p *Processor) newPage(by *reader, span position, rr readResult, at time.Time) *sharedPage {
	k := p.key
	from, ok := etagLSN(span.etag)
	if k == nil || !ok || len(rr.pos) != 1 || rr.pos[0].rng != span.rng {
		return nil
	}
	endLSN, ok := etagLSN(rr.pos[0].etag)
	if !ok {
		return nil
	}
	pg := &sharedPage{rng: span.rng, from: from, end: rr.pos[0].etag, endLSN: endLSN, rid: rr.rid, more: rr.more, latest: rr.latest, at: at, by: by}
	pg.docs = make([]pageDoc, 0, len(rr.docs))
	for _, raw := range rr.docs {
		d, err := k.parse(raw)
		if err != nil {
			p.log.Debug("changefeed: a changed document's key cannot be read; the page is not shared", zap.Error(err))
			return nil
		}
		pg.docs = append(pg.docs, d)
	}
	return pg
}

// span returns what r reads for pos: pos itself, or, when sharing, pos
// widened over the positions of the processor's other readers that lie
// next to it in its physical partition and stand at or past its LSN.
func (p *Processor) span(ctx context.Context, r *reader, pos position) (position, bool) {
	if p.opts.SeparateReads {
		return pos, false
	}
	n, ok := etagLSN(pos.etag)
	if !ok {
		return pos, false
	}
	phys, _, ok := p.physicalOf(ctx, pos.rng)
	if !ok {
		return pos, false
	}
	var side []epk.Range
	p.mu.Lock()
	for rd := range p.readers {
		if rd == r {
			continue
		}
		rd.mu.Lock()
		for _, q := range rd.pos {
			if m, ok := etagLSN(q.etag); ok && m >= n && within(q.rng, phys) {
				side = append(side, q.rng)
			}
		}
		rd.mu.Unlock()
	}
	p.mu.Unlock()
	hull := pos.rng
	for grown := true; grown; {
		grown = false
		for _, q := range side {
			switch {
			case epk.Compare(q.Min, hull.Max) == 0 && epk.Compare(q.Max, hull.Max) > 0:
				hull.Max, grown = q.Max, true
			case epk.Compare(q.Max, hull.Min) == 0 && epk.Compare(q.Min, hull.Min) < 0:
				hull.Min, grown = q.Min, true
			}
		}
	}
	if hull == pos.rng || p.keys(ctx) == nil {
		return pos, false
	}
	return position{rng: hull, etag: pos.etag}, true
}

// within reports whether a lies inside b.
func within(a, b epk.Range) bool {
	return epk.Compare(b.Min, a.Min) <= 0 && epk.Compare(a.Max, b.Max) <= 0
}

// errUnsplit says a widened read's documents could not be split by lease.
var errUnsplit = errors.New("changefeed: widened page cannot be split")

// narrow turns the result of a read of a span widened from pos into pos's
// own: its positions within pos's range and the documents whose EPK lies
// in it (the span was read from pos's LSN, so all of them are new to pos).
func narrow(rr readResult, pos position) (readResult, error) {
	out := rr
	out.from = pos.rng
	out.pos = clampPositions(rr.pos, pos.rng)
	out.docs = nil
	if len(out.pos) == 0 {
		return rr, fmt.Errorf("changefeed: widened read returned no position within [%s, %s)", pos.rng.Min, pos.rng.Max)
	}
	if len(rr.docs) == 0 {
		return out, nil
	}
	if rr.page == nil {
		return rr, errUnsplit
	}
	for _, d := range rr.page.docs {
		if pos.rng.Contains(d.epk) {
			out.docs = append(out.docs, d.raw)
		}
	}
	return out, nil
}

// fromPage is what page pg holds for position pos (at LSN n): the
// changes past n in pos's range, and pos moved to the page's end. ok is
// false when pg does not cover pos: another range, read from past n, or
// full and ending before n (it says nothing about what follows n).
func fromPage(pg *sharedPage, pos position, n int64) (readResult, bool) {
	if !within(pos.rng, pg.rng) || pg.from > n || pg.more && pg.endLSN <= n {
		return readResult{}, false
	}
	res := readResult{rid: pg.rid, from: pos.rng, latest: pg.latest, more: pg.more, pos: []position{pos}}
	if pg.endLSN > n {
		res.pos[0].etag = pg.end
	}
	for _, d := range pg.docs {
		if d.lsn > n && pos.rng.Contains(d.epk) {
			res.docs = append(res.docs, d.raw)
		}
	}
	return res, true
}

// wakeRiders wakes the pausing readers that pg holds changes for, so they
// take them at once rather than at the end of their pause.
func (p *Processor) wakeRiders(pg *sharedPage) {
	if pg == nil || len(pg.docs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for rd := range p.readers {
		if rd == pg.by || rd.pausing.Load() <= 0 {
			continue
		}
		rd.mu.Lock()
		want := false
		for _, q := range rd.pos {
			if n, ok := etagLSN(q.etag); ok {
				if res, ok := fromPage(pg, q, n); ok && len(res.docs) > 0 {
					want = true
					break
				}
			}
		}
		rd.mu.Unlock()
		if want {
			rd.pageWoken.Store(pg.at.UnixNano())
			select {
			case rd.wake <- struct{}{}:
			default:
			}
		}
	}
}
