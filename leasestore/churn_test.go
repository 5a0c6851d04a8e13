package leasestore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/slots"
)

// leaseVersion is one committed version of a lease document.
type leaseVersion struct {
	rev, epoch     int64
	owner, stealBy string
	step           int // the churn step during which it was committed
}

// leaseHistory is emulator middleware keeping every committed version of
// every lease document: the owner history the churn test counts moves
// from. It sees each write as the emulator commits it (a replace, a
// create, each operation of a transactional batch that committed), so it
// cannot miss a version, whatever the writer heard back; checkHistory
// proves that by finding the revisions of each lease without a gap.
type leaseHistory struct {
	mu         sync.Mutex
	step       int
	byLease    map[int][]leaseVersion
	unreadable int // committed lease writes whose document could not be read back
	deleted    int // lease documents deleted
}

func newLeaseHistory() *leaseHistory { return &leaseHistory{byLease: map[int][]leaseVersion{}} }

func (h *leaseHistory) setStep(step int) {
	h.mu.Lock()
	h.step = step
	h.mu.Unlock()
}

func (h *leaseHistory) middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			lease := strings.Contains(req.ResourceLink, "/docs/"+leaseIDPrefix)
			switch req.Operation {
			case cosmosemu.OpCreate, cosmosemu.OpReplace, cosmosemu.OpUpsert, cosmosemu.OpPatch, cosmosemu.OpBatch:
			case cosmosemu.OpDelete:
				resp := next(ctx, req)
				if lease && resp != nil && resp.Status < 300 {
					h.mu.Lock()
					h.deleted++
					h.mu.Unlock()
				}
				return resp
			default:
				return next(ctx, req)
			}
			// The SDK asks for no content on writes (Prefer:
			// return=minimal) and the store reads none: have the
			// emulator answer with the documents as written.
			req.HTTP.Header.Del("Prefer")
			resp := next(ctx, req)
			if resp == nil || resp.Status >= 300 {
				return resp // nothing committed (a failed batch answers 207)
			}
			var bodies [][]byte
			if req.Operation == cosmosemu.OpBatch {
				var results []struct {
					StatusCode   int             `json:"statusCode"`
					ResourceBody json.RawMessage `json:"resourceBody"`
				}
				if err := json.Unmarshal(resp.Body, &results); err != nil {
					h.mu.Lock()
					h.unreadable++
					h.mu.Unlock()
					return resp
				}
				for _, r := range results {
					bodies = append(bodies, r.ResourceBody)
				}
			} else {
				bodies = [][]byte{resp.Body}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, b := range bodies {
				d, err := decodeDoc(b)
				switch {
				case err != nil:
					if lease || strings.Contains(string(b), `"`+typeLease+`"`) {
						h.unreadable++
					}
				case d.lease != nil:
					l := d.lease
					h.byLease[l.Index] = append(h.byLease[l.Index], leaseVersion{rev: l.Rev, epoch: l.Epoch, owner: l.Owner, stealBy: l.StealBy, step: h.step})
				case lease:
					h.unreadable++
				}
			}
			return resp
		}
	}
}

// sorted returns each lease's versions in revision order.
func (h *leaseHistory) sorted() map[int][]leaseVersion {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int][]leaseVersion, len(h.byLease))
	for i, vs := range h.byLease {
		vs = append([]leaseVersion(nil), vs...)
		sort.SliceStable(vs, func(a, b int) bool { return vs[a].rev < vs[b].rev })
		out[i] = vs
	}
	return out
}

// latest returns each lease's newest committed version.
func (h *leaseHistory) latest() map[int]leaseVersion {
	out := map[int]leaseVersion{}
	for i, vs := range h.sorted() {
		out[i] = vs[len(vs)-1]
	}
	return out
}

// checkHistory verifies the owner history of blocks leases: each lease
// was created free at revision 1, and every later version has the next
// revision (none missing, so the observation is complete; none twice, so
// no two writers ever committed from the same version); the epoch never
// falls and grows with every change of owner. A lease document names one
// owner at a time, so with the epoch rule no two replicas were ever
// granted the same lease under the same epoch.
func checkHistory(t *testing.T, h *leaseHistory, blocks int) map[int][]leaseVersion {
	t.Helper()
	h.mu.Lock()
	require.Zero(t, h.unreadable, "committed lease writes the history could not read")
	require.Zero(t, h.deleted, "lease documents deleted")
	h.mu.Unlock()
	hist := h.sorted()
	require.Len(t, hist, blocks, "lease documents written")
	for i := 0; i < blocks; i++ {
		vs := hist[i]
		require.NotEmpty(t, vs, "lease %d", i)
		require.Equal(t, int64(1), vs[0].rev, "lease %d: first version", i)
		require.Empty(t, vs[0].owner, "lease %d is created free", i)
		for k := 1; k < len(vs); k++ {
			p, v := vs[k-1], vs[k]
			require.Equal(t, p.rev+1, v.rev, "lease %d: revisions %d then %d", i, p.rev, v.rev)
			require.GreaterOrEqual(t, v.epoch, p.epoch, "lease %d rev %d: epoch fell", i, v.rev)
			if v.owner != p.owner {
				require.Greater(t, v.epoch, p.epoch, "lease %d rev %d: owner %q -> %q without a new epoch", i, v.rev, p.owner, v.owner)
			}
		}
	}
	return hist
}

// churnStep is one step of a churn run and its count of lease moves.
type churnStep struct {
	what     string        // "join r3", "leave r1", "kill r1"
	replicas int           // running replicas after the step
	moves    int           // lease owner changes committed during the step
	detail   []string      // the moves, "lease i: from -> to", in revision order per lease
	minimum  int           // the fewest moves the step can take (see TestChurnMovesAgainstMinimum)
	settled  time.Duration // from the step's start to the stable state (informational)
}

// churnTable renders steps as a Markdown table with running totals.
func churnTable(steps []churnStep) string {
	var b strings.Builder
	b.WriteString("| step | event | replicas | moves | minimum | total moves | total minimum | settled in |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	tm, tmin := 0, 0
	for i, s := range steps {
		tm += s.moves
		tmin += s.minimum
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %d | %d | %d | %v |\n", i+1, s.what, s.replicas, s.moves, s.minimum, tm, tmin, s.settled.Round(time.Millisecond))
	}
	return b.String()
}

// churnSettle waits until ownership is balanced and stable among live
// (every lease document names a live replica, or is free when none is
// left; no steal request is pending; the counts are within one of each
// other; every live store holds exactly the leases the documents give it
// and counts exactly the live replicas as members). With balanced counts
// no rule of the balancer moves anything, so nothing moves after it. The
// deadline only catches a hang: a state that is never reached.
func churnSettle(t *testing.T, h *leaseHistory, blocks int, what string, live []*node) {
	t.Helper()
	ids := make([]string, len(live))
	for i, n := range live {
		ids[i] = n.s.ReplicaID()
	}
	sort.Strings(ids)
	check := func() string {
		cur := h.latest()
		if len(cur) != blocks {
			return fmt.Sprintf("%d of %d lease documents written", len(cur), blocks)
		}
		count := map[string]int{}
		for _, id := range ids {
			count[id] = 0
		}
		for i := 0; i < blocks; i++ {
			v := cur[i]
			if v.stealBy != "" {
				return fmt.Sprintf("lease %d: steal request by %s pending", i, v.stealBy)
			}
			if _, ok := count[v.owner]; !ok && (len(ids) > 0 || v.owner != "") {
				return fmt.Sprintf("lease %d owned by %q, not a live replica", i, v.owner)
			}
			count[v.owner]++
		}
		lo, hi := blocks, 0
		for _, id := range ids {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		if len(ids) > 0 && hi-lo > 1 {
			return fmt.Sprintf("unbalanced: %v", count)
		}
		for _, n := range live {
			var docs, owned []int
			for i := 0; i < blocks; i++ {
				if cur[i].owner == n.s.ReplicaID() {
					docs = append(docs, i)
				}
			}
			for _, li := range n.s.Owned() {
				owned = append(owned, li.Index)
			}
			if fmt.Sprint(docs) != fmt.Sprint(owned) {
				return fmt.Sprintf("%s holds %v, its documents %v", n.name, owned, docs)
			}
			if m := n.s.Members(); fmt.Sprint(m) != fmt.Sprint(ids) {
				return fmt.Sprintf("%s sees members %v, live are %v", n.name, m, ids)
			}
		}
		return ""
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		why := check()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: ownership not balanced and stable after a minute: %s", what, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runChurn starts replicas one at a time, each join settled, then stops
// them one at a time, oldest first, each leave settled: gracefully
// (Release), or, with kill, by cancelling Run without Release so that the
// others take the leases over once its heartbeat has expired (the last
// replica always releases, leaving every lease free). It returns the steps
// with their moves and minimums, after checking the document history and
// the stores' own ownership log.
func runChurn(t *testing.T, replicas, blocks int, kill bool) []churnStep {
	h := newLeaseHistory()
	e := newEnvWith(t, h.middleware())
	var mu sync.Mutex
	var expired []string // holders declared dead (OnExpired)
	mod := func(o *Options) {
		o.Ranges = slots.Ranges(blocks)
		// A leave settles when the peers drop the leaver from their
		// members: at their next full re-read (every 5 heartbeats) unless
		// a feed read caught its "leaving" mark, since the change feed
		// does not show the deletion of its heartbeat document that
		// follows. A kill settles a lease expiry after the kill. The
		// expiry is long enough that a loaded machine does not stall a
		// running replica's heartbeat past it (that would move leases for
		// liveness, not balance: see the end of runChurn).
		o.HeartbeatInterval, o.LeaseExpiry = 150*time.Millisecond, 3*time.Second
		if kill {
			o.LeaseExpiry = 1500 * time.Millisecond
		}
		o.OnExpired = func(holder string) {
			mu.Lock()
			expired = append(expired, holder)
			mu.Unlock()
		}
	}

	var steps []churnStep
	var live []*node
	killed := map[string]bool{}
	var began time.Time
	begin := func(what string) {
		began = time.Now()
		h.setStep(len(steps))
		steps = append(steps, churnStep{what: what})
	}
	for k := 1; k <= replicas; k++ {
		id := fmt.Sprintf("r%d", k)
		begin("join " + id)
		live = append(live, e.start(id, mod))
		s := &steps[len(steps)-1]
		s.replicas, s.minimum = len(live), blocks/k
		churnSettle(t, h, blocks, s.what, live)
		s.settled = time.Since(began)
	}
	for len(live) > 0 {
		n := live[0]
		held := 0
		for _, v := range h.latest() {
			if v.owner == n.s.ReplicaID() {
				held++
			}
		}
		crash := kill && len(live) > 1
		if crash {
			begin("kill " + n.s.ReplicaID())
			n.stop()
			killed[n.s.ReplicaID()] = true
		} else {
			begin("leave " + n.s.ReplicaID())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			require.NoError(t, n.s.Release(ctx))
			cancel()
			n.stop()
		}
		live = live[1:]
		s := &steps[len(steps)-1]
		s.replicas, s.minimum = len(live), held
		churnSettle(t, h, blocks, s.what, live)
		s.settled = time.Since(began)
	}

	hist := checkHistory(t, h, blocks)
	toSomeone := 0
	for i := 0; i < blocks; i++ {
		vs := hist[i]
		for k := 1; k < len(vs); k++ {
			if vs[k].owner != vs[k-1].owner {
				st := &steps[vs[k].step]
				st.moves++
				st.detail = append(st.detail, fmt.Sprintf("lease %d: %q -> %q (epoch %d)", i, vs[k-1].owner, vs[k].owner, vs[k].epoch))
				if vs[k].owner != "" {
					toSomeone++
				}
			}
		}
	}

	// What the stores believed, from their own OnChange hooks: never two
	// holders of a lease at once, each holding backed by a document
	// version naming that replica with that epoch, and one acquisition
	// per move to a replica (more when self-fencing made owners claim
	// their leases back).
	entries := e.log.snapshot()
	checkNoOverlap(t, entries)
	granted := map[string]bool{}
	for i, vs := range hist {
		for _, v := range vs {
			granted[fmt.Sprint(i, v.owner, v.epoch)] = true
		}
	}
	acquisitions, fenced := 0, 0
	var declared []string // running replicas declared dead
	for _, en := range entries {
		replica, _, _ := strings.Cut(en.instance, "#")
		switch {
		case en.ev.Kind == EventAcquired:
			acquisitions++
			require.True(t, granted[fmt.Sprint(en.ev.Lease.Index, replica, en.ev.Lease.Epoch)],
				"%s acquired lease %d at epoch %d, which no document version granted", en.instance, en.ev.Lease.Index, en.ev.Lease.Epoch)
		case en.ev.Reason == ReasonFenced:
			fenced++
		case en.ev.Reason == ReasonExpired:
			declared = append(declared, fmt.Sprintf("%s lost lease %d: %s", en.instance, en.ev.Lease.Index, en.ev.Reason))
		}
	}
	mu.Lock()
	for _, holder := range expired {
		if replica, _, _ := strings.Cut(holder, "/"); !killed[replica] {
			declared = append(declared, "running replica "+holder+" declared dead")
		}
	}
	mu.Unlock()
	if len(declared) > 0 {
		// Not a balancing decision: a running replica's heartbeat (or
		// the whole process) stalled past the lease expiry, so its
		// leases had to move. The counts then exceed the minimum for a
		// reason this test does not measure.
		t.Logf("%s", churnTable(steps))
		t.Skipf("a running replica's heartbeat stalled past the lease expiry (machine overloaded?); move counts not comparable: %v", declared)
	}
	if fenced > 0 {
		// A replica that could not heartbeat for expiry - interval
		// closed its leases and, once it could again, claimed them
		// back (an acquisition under a new epoch, no owner change):
		// nobody took them, so no lease moved.
		t.Logf("self-fencing on a loaded machine closed a lease %d times; each owner claimed its leases back, no move", fenced)
		require.GreaterOrEqual(t, acquisitions, toSomeone, "acquisitions logged by the stores against document moves to a replica")
	} else {
		require.Equal(t, toSomeone, acquisitions, "acquisitions logged by the stores against document moves to a replica")
	}
	return steps
}

// TestChurnMovesAgainstMinimum (issue 33, "Churn"): ten replicas join one
// at a time, each join left to settle (balanced within one lease, stable),
// then leave one at a time, oldest first: gracefully (Release hands the
// leases off), or, in the kill variant, by stopping without Release so
// that the others take the leases over after the lease expiry (the last
// one releases). Every lease move, an owner change of a lease document
// including to and from nobody, is counted from the documents' owner
// history (leaseHistory) and compared with the fewest moves the same
// sequence needs. A table of the steps is logged; docs/churn/README.md has
// one run's.
//
// The minimum, with B leases and balance meaning that owned counts differ
// by at most one:
//
//   - The k-th join needs floor(B/k) moves. The newcomer starts with none
//     and must end within one of every other replica: had it c <
//     floor(B/k), so B >= k(c+1), the k-1 others would hold B-c >=
//     (k-1)(c+1)+1 leases, one of them at least c+2. Each lease it gets is
//     one move: from nobody for the first replica (B moves), from another
//     replica after. floor(B/k) moves are also enough: from counts within
//     one among k-1 replicas, taking a lease at a time from the most
//     loaded keeps everyone within one. For k > B the k-1 others hold at
//     most one lease each already: zero. For B = 8, k = 1..10: 8, 4, 2, 2,
//     1, 1, 1, 1, 0, 0, 20 in all.
//   - A leave (or a kill) needs as many moves as the leaver holds: each of
//     its leases must change owner at least once (to nobody when it is the
//     last replica). That is also enough: the others were within one of
//     each other, and giving each lease to the least loaded keeps them so.
//     The table's minimum for a leave is the leaver's count in the settled
//     state before it, read from the documents.
//
// Moves between the stable states are all counted, so a lease moving twice
// within a step (handed on, or moved back) counts twice. The test asserts
// moves == minimum for every step, without slack: a newcomer only asks
// owners holding at least two more than it (counting every pending
// request, its own and other replicas', as done), an owner only hands over
// on the same condition, Release hands each lease to the least loaded, and
// a take-over fills a replica up to ceil(B/live), which for B = 8 and
// balanced survivors never leaves one two below another. It also asserts
// that each step ends balanced and stable (churnSettle), that no lease
// ever had two believing holders (the stores' OnChange log, each holding
// backed by a document version granting it), and that the document history
// is complete and every owner change took a new epoch (checkHistory).
// Waits only catch hangs; nothing depends on how fast a step settles.
//
// The graceful variant also runs with 16 leases, where a join asks several
// owners at once: before pending requests of other replicas were counted,
// an owner that had just handed leases to the newcomer stole one from an
// owner that had not yet, one move too many in most runs at the third or
// fourth join. The kill variant does not: with 16 leases the take-over's
// fill-up to ceil(B/live) can leave a survivor two below another (4,4,4
// after a fourth of 16 died: 6,6,4), and one steal follows, a move over
// the minimum that docs/churn/README.md reports. Run it with
//
//	go test -run TestChurnMovesAgainstMinimum -v ./leasestore/
func TestChurnMovesAgainstMinimum(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		blocks int
		kill   bool
	}{{slots.DefaultBlocks, false}, {slots.DefaultBlocks, true}, {16, false}} {
		name := fmt.Sprintf("%d-leases-leave", tc.blocks)
		if tc.kill {
			name = fmt.Sprintf("%d-leases-kill", tc.blocks)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			steps := runChurn(t, 10, tc.blocks, tc.kill)
			t.Logf("churn %s, %v:\n%s", name, time.Since(start).Round(time.Millisecond), churnTable(steps))
			moves, minimum := 0, 0
			for _, s := range steps {
				moves += s.moves
				minimum += s.minimum
				require.Equal(t, s.minimum, s.moves, "%s: lease moves against the minimum: %v", s.what, s.detail)
			}
			require.Equal(t, minimum, moves)
		})
	}
}
