package provider

import (
	"context"
	"sync"

	"github.com/durafeed/durafeed/durable"
)

// watches is the provider's registry of instance watches
// (durable.InstanceWatcher): the turns this provider commits notify the
// watches of their instance. It owns the registry; watches only hold
// their channel.
type watches struct {
	mu sync.Mutex
	by map[string]map[*watch]struct{}
	// remote, when set (event-driven mode), asks the instance's owner to
	// report its changes while watched, and unremote ends that.
	remote, unremote func(instance string)
}

// watch is one InstanceWatch.
type watch struct {
	reg      *watches
	instance string
	ch       chan struct{}
	once     sync.Once
}

// Changed implements durable.InstanceWatch.
func (w *watch) Changed() <-chan struct{} { return w.ch }

// Close implements durable.InstanceWatch.
func (w *watch) Close() {
	w.once.Do(func() {
		r := w.reg
		r.mu.Lock()
		set := r.by[w.instance]
		delete(set, w)
		if len(set) == 0 {
			delete(r.by, w.instance)
		}
		r.mu.Unlock()
		if r.unremote != nil {
			r.unremote(w.instance)
		}
	})
}

// add registers a watch of instance.
func (r *watches) add(instance string) *watch {
	w := &watch{reg: r, instance: instance, ch: make(chan struct{}, 1)}
	r.mu.Lock()
	if r.by == nil {
		r.by = map[string]map[*watch]struct{}{}
	}
	set := r.by[instance]
	if set == nil {
		set = map[*watch]struct{}{}
		r.by[instance] = set
	}
	set[w] = struct{}{}
	r.mu.Unlock()
	if r.remote != nil {
		r.remote(instance)
	}
	return w
}

// notify signals every watch of instance (without blocking: a watch whose
// channel is full has a receive pending, which covers this change too).
func (r *watches) notify(instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.by[instance] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// WatchInstance implements durable.InstanceWatcher. The watch is told of
// every turn of instance this provider commits (a runtime's own client
// therefore hears of its replica's completions at once) and, in
// event-driven mode with the peer wake channel on, of the turns the
// owner of the instance's slot commits or sees committed: the engine asks
// the owner to report them (engine.WatchRemote). Without the channel,
// other processes' turns are not signalled, so callers keep reading the
// instance at their own pace as well.
func (p *Provider) WatchInstance(ctx context.Context, instance string) (durable.InstanceWatch, error) {
	if err := ctx.Err(); err != nil {
		return nil, durable.Retryable("watch_instance", err, "cancelled")
	}
	if instance == "" {
		return nil, durable.Permanent("watch_instance", nil, "empty instance id")
	}
	return p.watches.add(instance), nil
}
