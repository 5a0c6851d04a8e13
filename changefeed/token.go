package changefeed

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/durafeed/durafeed/internal/epk"
)

// Continuations are azcosmos composite change-feed tokens, the format
// ContainerClient.ReadChangeFeed accepts as ChangeFeedOptions.Continuation
// and returns as ChangeFeedResponse.ContinuationToken:
//
//	{"version":1,"resourceId":"<container rid>",
//	 "continuation":[{"minInclusive":"..","maxExclusive":"..","continuationToken":"\"42\""}, ...]}
//
// A lease's continuation lists one position per sub-range of the lease, each
// inside one physical partition as of its last read; an entry without
// continuationToken was never read.

type compositeToken struct {
	Version      int          `json:"version,omitempty"`
	ResourceID   string       `json:"resourceId"`
	Continuation []tokenRange `json:"continuation"`
}

type tokenRange struct {
	MinInclusive      string  `json:"minInclusive"`
	MaxExclusive      string  `json:"maxExclusive"`
	ContinuationToken *string `json:"continuationToken,omitempty"`
}

const tokenVersion = 1

// position is one sub-range of a lease and where its feed stands.
type position struct {
	rng epk.Range
	// etag is the service's continuation (the ETag of the last page,
	// quotes included), "*" for "from now", "" for never read.
	etag string
}

func decodeToken(s string) (rid string, ps []position, err error) {
	var t compositeToken
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return "", nil, fmt.Errorf("changefeed: continuation is not a composite change-feed token: %w", err)
	}
	if t.Version > tokenVersion {
		return "", nil, fmt.Errorf("changefeed: continuation version %d is newer than %d", t.Version, tokenVersion)
	}
	if len(t.Continuation) == 0 {
		return "", nil, fmt.Errorf("changefeed: continuation lists no ranges")
	}
	for _, e := range t.Continuation {
		p := position{rng: epk.Range{Min: e.MinInclusive, Max: normMax(e.MaxExclusive)}}
		if e.ContinuationToken != nil {
			p.etag = *e.ContinuationToken
		}
		ps = append(ps, p)
	}
	return t.ResourceID, ps, nil
}

func encodeToken(rid string, ps []position) string {
	t := compositeToken{Version: tokenVersion, ResourceID: rid, Continuation: make([]tokenRange, len(ps))}
	for i, p := range ps {
		t.Continuation[i] = tokenRange{MinInclusive: p.rng.Min, MaxExclusive: p.rng.Max}
		if p.etag != "" {
			etag := p.etag
			t.Continuation[i].ContinuationToken = &etag
		}
	}
	b, err := json.Marshal(t)
	if err != nil {
		// Strings and ints only: cannot fail.
		panic(err)
	}
	return string(b)
}

// normMax maps the SDK's open-top "" to epk.MaxExclusive.
func normMax(m string) string {
	if m == "" {
		return epk.MaxExclusive
	}
	return m
}

func overlaps(a, b epk.Range) bool {
	return epk.Compare(a.Min, b.Max) < 0 && epk.Compare(b.Min, a.Max) < 0
}

func intersect(a, b epk.Range) (epk.Range, bool) {
	r := a
	if epk.Compare(b.Min, r.Min) > 0 {
		r.Min = b.Min
	}
	if epk.Compare(b.Max, r.Max) < 0 {
		r.Max = b.Max
	}
	return r, epk.Compare(r.Min, r.Max) < 0
}

func sortPositions(ps []position) {
	slices.SortStableFunc(ps, func(a, b position) int { return epk.Compare(a.rng.Min, b.rng.Min) })
}

// clampPositions narrows ps to within, dropping what falls outside, and
// returns them in EPK order.
func clampPositions(ps []position, within epk.Range) []position {
	out := make([]position, 0, len(ps))
	for _, p := range ps {
		if r, ok := intersect(p.rng, within); ok {
			p.rng = r
			out = append(out, p)
		}
	}
	sortPositions(out)
	return out
}

// gaps returns the parts of within that no position covers (ps sorted and
// disjoint).
func gaps(ps []position, within epk.Range) []epk.Range {
	var out []epk.Range
	cur := within.Min
	for _, p := range ps {
		if epk.Compare(p.rng.Min, cur) > 0 {
			out = append(out, epk.Range{Min: cur, Max: p.rng.Min})
		}
		if epk.Compare(p.rng.Max, cur) > 0 {
			cur = p.rng.Max
		}
	}
	if epk.Compare(cur, within.Max) < 0 {
		out = append(out, epk.Range{Min: cur, Max: within.Max})
	}
	return out
}

// removeOverlaps keeps the first of any positions that overlap (sorted
// input), trimming later ones, so a malformed concatenation of tokens
// cannot make two sub-ranges read the same keys.
func removeOverlaps(ps []position) []position {
	out := ps[:0]
	cur := ""
	for i, p := range ps {
		if i > 0 && epk.Compare(p.rng.Min, cur) < 0 {
			if epk.Compare(p.rng.Max, cur) <= 0 {
				continue
			}
			p.rng.Min = cur
		}
		out = append(out, p)
		cur = p.rng.Max
	}
	return out
}

// etagLSN parses a change-feed ETag ("\"42\"") as an LSN.
func etagLSN(etag string) (int64, bool) {
	s := strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	s = strings.Trim(s, "\"")
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// sessionLSN extracts the partition's global LSN from a session token:
// "<range>:<lsn>" (simple form) or "<range>:<version>#<globalLSN>[#<region>=<lsn>...]".
func sessionLSN(tok string) (int64, bool) {
	if i := strings.IndexByte(tok, ','); i >= 0 {
		tok = tok[:i]
	}
	_, v, ok := strings.Cut(tok, ":")
	if !ok {
		return 0, false
	}
	parts := strings.Split(v, "#")
	s := parts[0]
	if len(parts) > 1 {
		s = parts[1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}
