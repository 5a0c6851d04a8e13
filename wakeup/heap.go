package wakeup

// entryHeap is a min-heap of entries by (key, seq) that keeps each entry's
// index, so entries can be fixed or removed in place. An entry is in at most
// one heap at a time: the hub's timer heap while future, its slot's due heap
// while due.
type entryHeap []*entry

func (h entryHeap) less(i, j int) bool { return h[i].before(h[j]) }

func (h entryHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h *entryHeap) push(e *entry) {
	e.idx = len(*h)
	*h = append(*h, e)
	h.up(e.idx)
}

// remove takes the entry at index i out of the heap and returns it.
func (h *entryHeap) remove(i int) *entry {
	old := *h
	n := len(old) - 1
	e := old[i]
	if i != n {
		old.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
	e.idx = -1
	return e
}

// fix restores the order after the key of the entry at index i changed.
func (h entryHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h entryHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts the entry at i down and reports whether it moved.
func (h entryHeap) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
