package engine

import (
	"context"
	"sync"
	"time"

	"github.com/durafeed/durafeed/peerwake"
	"github.com/durafeed/durafeed/slots"
)

// Instance watches over the peer wake channel. A client (any engine, a
// replica's included) that waits for an instance asks the owner of the
// instance's slot to tell it of the instance's next change: a HubWatch
// frame on its ordinary sender connection. The owner keeps the frame's
// way back (peerwake.Reply) and, when a turn of the instance commits
// through it (InstanceChanged) or its feed shows another replica's
// commit, writes a HubChanged frame back; the client's engine calls the
// OnInstanceChanged function and asks again while it still watches. A
// registration is used once; the client renews every open watch every
// watchRenew, so a lost frame, a closed connection or a new owner costs
// at most that long, and the client's own polling is the backstop.

// watchRenew is how often a client sends the owners of the instances it
// watches its watches again.
const watchRenew = 2 * time.Second

// maxWatchers bounds the registrations an owner keeps; beyond it, after
// the registrations of ended connections are dropped, new ones are
// refused (the client's polling finds the change).
const maxWatchers = 100_000

// watchState is the engine's side of instance watches (guarded by mu).
type watchState struct {
	mu sync.Mutex
	// watching: instances this engine's clients watch (reference counts).
	watching map[string]int
	// watchers: the ways back to peers watching an owned instance.
	watchers map[string]map[*peerwake.Reply]struct{}
	n        int // registrations in watchers
	// notify is OnInstanceChanged's function (nil: none).
	notify func(instance string)
}

// OnInstanceChanged sets the function told of a change to an instance
// this engine watches (WatchRemote) that another replica reported. Set it
// before the first WatchRemote; it must not block.
func (e *Engine) OnInstanceChanged(fn func(instance string)) {
	e.watch.mu.Lock()
	e.watch.notify = fn
	e.watch.mu.Unlock()
}

// WatchRemote asks the owner of instance's slot to report the instance's
// next change over the peer wake channel, and renews the request until
// UnwatchRemote (calls nest). Without the channel it does nothing; the
// caller's polling is the only way then. Turns this engine commits are
// reported by its caller's provider itself.
func (e *Engine) WatchRemote(instance string) {
	if e.wake == nil || instance == "" {
		return
	}
	e.watch.mu.Lock()
	e.watch.watching[instance]++
	first := e.watch.watching[instance] == 1
	e.watch.mu.Unlock()
	if first {
		e.sendWatch(instance)
	}
}

// UnwatchRemote ends one WatchRemote of instance.
func (e *Engine) UnwatchRemote(instance string) {
	if e.wake == nil || instance == "" {
		return
	}
	e.watch.mu.Lock()
	defer e.watch.mu.Unlock()
	if n := e.watch.watching[instance]; n > 1 {
		e.watch.watching[instance] = n - 1
	} else {
		delete(e.watch.watching, instance)
	}
}

// InstanceChanged tells the peers watching instance that it changed: a
// turn of it committed through this engine's provider. It never blocks.
func (e *Engine) InstanceChanged(instance string) {
	if e.wake == nil {
		return
	}
	e.watch.mu.Lock()
	replies := e.watch.watchers[instance]
	delete(e.watch.watchers, instance)
	e.watch.n -= len(replies)
	e.watch.mu.Unlock()
	if len(replies) == 0 {
		return
	}
	wk := peerwake.Wake{Hub: peerwake.HubChanged, Slot: slots.Of(instance), Key: instance}
	for r := range replies {
		if r.Send(wk) {
			e.wake.changesSent.Add(1)
		}
	}
}

// sendWatch sends the owner of instance's slot a watch request, unless
// this replica owns the slot (its provider reports its own commits) or
// the owner's endpoint is unknown.
func (e *Engine) sendWatch(instance string) {
	w := e.wake
	slot := slots.Of(instance)
	if e.isOwned(slot) {
		return
	}
	peer, ok := e.ownerPeer(slot)
	if !ok {
		return
	}
	if err := w.sender.Send(peer, peerwake.Wake{Hub: peerwake.HubWatch, Slot: slot, Key: instance}); err != nil {
		w.dropped.Add(1)
		return
	}
	w.sent.Add(1)
	w.watchesSent.Add(1)
}

// onWatch registers a peer's watch of an owned instance.
func (e *Engine) onWatch(w peerwake.Wake) bool {
	if w.Reply == nil || w.Slot != slots.Of(w.Key) {
		return false
	}
	select {
	case <-w.Reply.Done():
		return false
	default:
	}
	e.watch.mu.Lock()
	defer e.watch.mu.Unlock()
	if e.watch.n >= maxWatchers {
		e.pruneWatchersLocked()
		if e.watch.n >= maxWatchers {
			return false
		}
	}
	set := e.watch.watchers[w.Key]
	if set == nil {
		set = map[*peerwake.Reply]struct{}{}
		e.watch.watchers[w.Key] = set
	}
	if _, ok := set[w.Reply]; !ok {
		set[w.Reply] = struct{}{}
		e.watch.n++
	}
	return true
}

// pruneWatchersLocked drops the registrations of ended connections.
func (e *Engine) pruneWatchersLocked() {
	for inst, set := range e.watch.watchers {
		for r := range set {
			select {
			case <-r.Done():
				delete(set, r)
				e.watch.n--
			default:
			}
		}
		if len(set) == 0 {
			delete(e.watch.watchers, inst)
		}
	}
}

// onReply takes a peer's report of a change to a watched instance: the
// provider is told, and the watch is renewed at the owner while open.
func (e *Engine) onReply(_ peerwake.Peer, w peerwake.Wake) {
	if w.Hub != peerwake.HubChanged || w.Slot != slots.Of(w.Key) {
		return
	}
	e.watch.mu.Lock()
	open := e.watch.watching[w.Key] > 0
	fn := e.watch.notify
	e.watch.mu.Unlock()
	if !open {
		return
	}
	e.wake.changesGot.Add(1)
	if fn != nil {
		fn(w.Key)
	}
	e.sendWatch(w.Key)
}

// renewLoop sends every open watch again every watchRenew, and drops the
// registrations of ended connections, until ctx ends.
func (e *Engine) renewLoop(ctx context.Context) {
	for e.sleep(ctx, watchRenew) {
		e.watch.mu.Lock()
		open := make([]string, 0, len(e.watch.watching))
		for inst := range e.watch.watching {
			open = append(open, inst)
		}
		e.pruneWatchersLocked()
		e.watch.mu.Unlock()
		for _, inst := range open {
			e.sendWatch(inst)
		}
	}
}

// Watchers returns how many peers' watches of instance this engine holds
// (for tests and diagnostics).
func (e *Engine) Watchers(instance string) int {
	e.watch.mu.Lock()
	defer e.watch.mu.Unlock()
	return len(e.watch.watchers[instance])
}
