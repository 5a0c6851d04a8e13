package wakeup

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/durafeed/durafeed/internal/clock/clocktest"
	"github.com/stretchr/testify/require"
)

// model is an obviously-correct rendering of the hub's semantics: plain
// maps and linear scans, no heaps, bitsets, weights kept incrementally or
// timer goroutine. "Due" is derived from the clock instead of promoted.
type model struct {
	now       time.Time
	seq       uint64
	max       int
	maxTotal  int
	collapses uint64
	slots     []mSlot
}

type mSlot struct {
	entries map[string]*mEntry
	scan    *mEntry
}

type mEntry struct {
	kind     Kind
	slot     int
	instance string
	vis      time.Time
	later    []time.Time
	key      time.Time
	seq      uint64
}

func newModel(slots, max, maxTotal int) *model {
	m := &model{now: epoch, max: max, maxTotal: maxTotal, slots: make([]mSlot, slots)}
	for i := range m.slots {
		m.slots[i].entries = map[string]*mEntry{}
	}
	return m
}

func (m *model) due(e *mEntry) bool { return !e.vis.After(m.now) }

func (m *model) weight(sl int) int {
	s := m.slots[sl]
	if s.scan != nil {
		return 1
	}
	n := 0
	for _, e := range s.entries {
		n += 1 + len(e.later)
	}
	return n
}

func (m *model) addLater(e *mEntry, t time.Time) {
	if e.kind == Scan {
		return // a scan's taker reads the whole slot
	}
	if !slices.ContainsFunc(e.later, t.Equal) {
		e.later = append(e.later, t)
		slices.SortFunc(e.later, time.Time.Compare)
	}
}

func (m *model) signal(sl int, kind Kind, instance string, t time.Time) {
	m.seq++
	m.claim(sl, kind, instance, t, m.now, m.seq)
}

func (m *model) claim(sl int, kind Kind, instance string, t, key time.Time, seq uint64) {
	s := &m.slots[sl]
	var e *mEntry
	switch {
	case kind == Scan:
		if len(s.entries) > 0 {
			m.collapse(sl)
		}
		e = s.scan
	case s.scan != nil:
		e = s.scan
	default:
		e = s.entries[instance]
	}
	raise := func() {
		if before(key, seq, e.key, e.seq) {
			e.key, e.seq = key, seq
		}
	}
	switch {
	case e == nil:
		e = &mEntry{kind: kind, slot: sl, vis: t, key: key, seq: seq}
		if t.After(m.now) {
			e.key = t
		}
		if kind == Scan {
			s.scan = e
		} else {
			e.instance = instance
			s.entries[instance] = e
		}
	case t.Before(e.vis):
		wasDue := m.due(e)
		if !wasDue {
			m.addLater(e, e.vis)
		}
		e.vis = t
		switch {
		case wasDue:
			raise()
		case !t.After(m.now):
			e.key, e.seq = key, seq
		default:
			e.key, e.seq = t, seq
		}
	case t.Equal(e.vis) || !t.After(m.now):
		if m.due(e) {
			raise()
		}
	default:
		m.addLater(e, t)
	}
	if m.weight(sl) > m.max {
		m.collapse(sl)
	}
	total, heaviest := 0, -1
	for i := range m.slots {
		w := m.weight(i)
		total += w
		if w > 1 && (heaviest < 0 || w > m.weight(heaviest)) {
			heaviest = i
		}
	}
	if m.maxTotal > 0 && total > m.maxTotal && heaviest >= 0 {
		m.collapse(heaviest)
	}
}

func (m *model) collapse(sl int) {
	s := &m.slots[sl]
	var first *mEntry
	var times []time.Time
	for _, e := range s.entries {
		if first == nil || before(e.key, e.seq, first.key, first.seq) {
			first = e
		}
		times = append(times, e.vis)
		times = append(times, e.later...)
	}
	vis := slices.MinFunc(times, time.Time.Compare)
	scan := &mEntry{kind: Scan, slot: sl, vis: vis, key: first.key, seq: first.seq}
	s.entries = map[string]*mEntry{}
	s.scan = scan
	m.collapses++
}

func (m *model) take(set Set) (Wakeup, bool) {
	var best *mEntry
	for sl := range m.slots {
		if !set.Contains(sl) {
			continue
		}
		for _, e := range m.all(sl) {
			if m.due(e) && (best == nil || before(e.key, e.seq, best.key, best.seq)) {
				best = e
			}
		}
	}
	if best == nil {
		return Wakeup{}, false
	}
	e := best
	w := Wakeup{Kind: e.kind, Slot: e.slot, Instance: e.instance, VisibleAt: e.vis, key: e.key, seq: e.seq}
	var rest []time.Time
	for _, t := range e.later {
		if t.After(m.now) {
			rest = append(rest, t)
		}
	}
	if len(rest) > 0 {
		m.seq++
		e.vis, e.later, e.key, e.seq = rest[0], rest[1:], rest[0], m.seq
	} else if e.kind == Scan {
		m.slots[e.slot].scan = nil
	} else {
		delete(m.slots[e.slot].entries, e.instance)
	}
	return w, true
}

func (m *model) all(sl int) []*mEntry {
	var out []*mEntry
	for _, e := range m.slots[sl].entries {
		out = append(out, e)
	}
	if m.slots[sl].scan != nil {
		out = append(out, m.slots[sl].scan)
	}
	return out
}

func (m *model) pending(set Set) int {
	n := 0
	for sl := range m.slots {
		if set.Contains(sl) {
			n += len(m.all(sl))
		}
	}
	return n
}

func (m *model) state() []PendingWakeup {
	var out []PendingWakeup
	for sl := range m.slots {
		es := m.all(sl)
		slices.SortFunc(es, func(a, b *mEntry) int {
			if c := a.key.Compare(b.key); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
		for _, e := range es {
			p := PendingWakeup{
				Wakeup: Wakeup{Kind: e.kind, Slot: e.slot, Instance: e.instance, VisibleAt: e.vis, key: e.key, seq: e.seq},
				Due:    m.due(e),
			}
			if len(e.later) > 0 {
				p.Later = slices.Clone(e.later)
			}
			out = append(out, p)
		}
	}
	return out
}

const modelSlots = 8

// checkAgainstModel decodes ops from data, applies each to a hub and to the
// model, and compares results and full contents after every op.
func checkAgainstModel(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	max := 1 + int(data[0]%6)
	maxTotal := []int{0, 3, 5, 9}[int(data[0]/6)%4]
	data = data[1:]
	clk := clocktest.NewManual(epoch)
	h, err := New(Options{Slots: modelSlots, Clock: clk, MaxPendingPerSlot: max, MaxPending: maxTotal})
	require.NoError(t, err)
	defer h.Close()
	m := newModel(modelSlots, max, maxTotal)
	var taken []Wakeup
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	for step := 0; len(data) > 0; step++ {
		op := next() % 8
		var desc string
		switch op {
		case 0, 1: // Signal / SignalAt
			sl, inst, off := next()%modelSlots, fmt.Sprint("i", next()%5), time.Duration(next()%9-3)*time.Second
			desc = fmt.Sprintf("Signal(%d, %s, now%+v)", sl, inst, off)
			if op == 0 {
				h.Signal(sl, inst, m.now.Add(off))
			} else {
				h.SignalAt(sl, inst, m.now.Add(off))
			}
			m.signal(sl, Instance, inst, m.now.Add(off))
		case 2:
			sl, off := next()%modelSlots, time.Duration(next()%9-3)*time.Second
			desc = fmt.Sprintf("SignalScan(%d, now%+v)", sl, off)
			h.SignalScan(sl, m.now.Add(off))
			m.signal(sl, Scan, "", m.now.Add(off))
		case 3:
			d := time.Duration(next()%4) * time.Second
			desc = fmt.Sprintf("Advance(%v)", d)
			clk.Advance(d)
			m.now = m.now.Add(d)
		case 4, 5:
			set := maskSet(next())
			desc = fmt.Sprintf("Wait(%v)", set)
			got, ok := h.Wait(context.Background(), set, 0)
			want, wantOK := m.take(set)
			require.Equal(t, wantOK, ok, "step %d %s", step, desc)
			require.Equal(t, want, got, "step %d %s", step, desc)
			if ok {
				taken = append(taken, got)
			}
		case 6:
			if len(taken) == 0 {
				continue
			}
			i := next() % len(taken)
			w := taken[i]
			taken = slices.Delete(taken, i, i+1)
			desc = fmt.Sprintf("Requeue(%+v)", w)
			h.Requeue(w)
			instance := w.Instance
			m.claim(w.Slot, w.Kind, instance, w.VisibleAt, w.key, w.seq)
		case 7:
			set := maskSet(next())
			if next()%2 == 0 {
				desc = fmt.Sprintf("Pending(%v)", set)
				require.Equal(t, m.pending(set), h.Pending(set), "step %d %s", step, desc)
			} else {
				desc = fmt.Sprintf("Drop(%v)", set)
				h.Drop(set)
				for sl := range set.All() {
					m.slots[sl] = mSlot{entries: map[string]*mEntry{}}
				}
			}
		}
		st := h.Snapshot()
		require.Equal(t, m.state(), st.Pending, "after step %d %s", step, desc)
		require.Equal(t, m.collapses, st.Collapses, "after step %d %s", step, desc)
	}
}

func maskSet(b int) Set {
	var s Set
	for i := range modelSlots {
		if b&(1<<i) != 0 {
			s.Add(i)
		}
	}
	return s
}

// TestAgainstModel runs random operation sequences against the model.
func TestAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		data := make([]byte, 1+r.IntN(600))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkAgainstModel(t, data) })
	}
}

// FuzzHub explores operation sequences against the model:
// go test ./wakeup/ -run '^$' -fuzz FuzzHub -fuzztime 30s
func FuzzHub(f *testing.F) {
	f.Add([]byte{2, 0, 1, 1, 3, 4, 255, 3, 2, 5, 255})
	f.Add([]byte{0, 0, 3, 0, 8, 0, 3, 1, 1, 0, 3, 2, 3, 3, 4, 255, 6, 0, 4, 255})
	f.Add([]byte{5, 2, 1, 3, 0, 0, 1, 7, 7, 1, 3, 3, 7, 1, 1, 3, 3, 4, 2, 7, 5, 1})
	f.Fuzz(func(t *testing.T, data []byte) { checkAgainstModel(t, data) })
}
