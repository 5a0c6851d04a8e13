package engine

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/durafeed/durafeed/leasestore"
	"github.com/durafeed/durafeed/peerwake"
	"github.com/durafeed/durafeed/store"
)

// PeerWakeOptions turn on the peer wake channel (package peerwake): a
// replica listens for wakes and publishes its endpoint and key in its
// heartbeat document; every engine (a client's too) sends the owner of a
// slot a wake right after a write of this process made work visible
// there, so the owner signals its hub at once instead of at its next
// change-feed read. The feed stays the source of truth: a wake lost,
// refused or sent to a former owner costs latency only.
type PeerWakeOptions struct {
	// Listen is the receiver's listen address (default "127.0.0.1:0",
	// this machine only; a deployment listens on the environment's
	// network, e.g. ":7070").
	Listen string
	// Advertise is the host:port other processes dial, published in the
	// heartbeat (default the listener's address, right only when that is
	// reachable as is, as on one machine).
	Advertise string
	// ViewRefresh bounds the age of the lease view of an engine that owns
	// no leases (a client), read from the lease partition on demand: at
	// most one read per ViewRefresh, and only while it sends (default
	// 5 s). An owner change meanwhile sends a few wakes to the former
	// owner, which ignores them. A replica in dispatch compares, as
	// often, the wake frames its peers' heartbeats report written to it
	// with those it received (a silent channel: PeerWakeStats.PeersSilent).
	ViewRefresh time.Duration
}

// DefaultPeerWakeViewRefresh is PeerWakeOptions.ViewRefresh's default.
const DefaultPeerWakeViewRefresh = 5 * time.Second

func (o *PeerWakeOptions) withDefaults() {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.ViewRefresh <= 0 {
		o.ViewRefresh = DefaultPeerWakeViewRefresh
	}
}

// check refuses an endpoint no peer could dial: the address published
// (Advertise, or the listener's own without it) must not be a wildcard,
// and must not be a loopback address while the receiver listens beyond
// loopback (its peers are then on other machines). A hostname is taken
// as given, except "localhost".
func (o PeerWakeOptions) check() error {
	lhost, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return fmt.Errorf("engine: PeerWake.Listen %q is not host:port: %w", o.Listen, err)
	}
	adv, what := o.Advertise, "PeerWake.Advertise"
	if adv == "" {
		adv, what = o.Listen, "PeerWake.Advertise is empty, so the listen address"
	}
	ahost, _, err := net.SplitHostPort(adv)
	if err != nil {
		return fmt.Errorf("engine: PeerWake.Advertise %q is not host:port: %w", adv, err)
	}
	switch {
	case isWildcard(ahost):
		return fmt.Errorf("engine: %s %q is a wildcard, which no peer can dial: set PeerWake.Advertise to the host:port the other replicas reach this one at (the service: DURAFEED_PEER_ADVERTISE)", what, adv)
	case isLoopback(ahost) && !isLoopback(lhost):
		return fmt.Errorf("engine: %s %q is a loopback address, but the receiver listens on %q, beyond loopback, so its peers are on other machines: set PeerWake.Advertise to the host:port they dial (the service: DURAFEED_PEER_ADVERTISE)", what, adv, o.Listen)
	}
	return nil
}

// isWildcard reports an unspecified host ("", 0.0.0.0, ::).
func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// isLoopback reports a loopback host (127.0.0.0/8, ::1, localhost).
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// wakeState is the engine's side of the channel: the sender, and the
// lease view of an engine without a session.
type wakeState struct {
	opts   PeerWakeOptions
	sender *peerwake.Sender

	mu     sync.Mutex
	view   leasestore.View
	readAt time.Time
	kick   chan struct{}
	// firstRead is closed once the first view read has ended (read or
	// failed).
	firstRead     chan struct{}
	firstReadOnce sync.Once
	cancel        context.CancelFunc
	wg            sync.WaitGroup
	sent          atomic.Int64
	dropped       atomic.Int64
	noPeer        atomic.Int64
	got           atomic.Int64
	ignored       atomic.Int64
	// leaseKicks counts lease-partition wakes sent; kicked those received.
	leaseKicks atomic.Int64
	kicked     atomic.Int64
	reads      atomic.Int64
	// watchesSent counts watch requests sent; changesSent the change
	// reports written back to watchers; changesGot those received.
	watchesSent atomic.Int64
	changesSent atomic.Int64
	changesGot  atomic.Int64
	// silentFound counts peers found silent; silenceChecks the
	// comparisons of a peer's report with what arrived (silent.go).
	silentFound   atomic.Int64
	silenceChecks atomic.Int64
}

// startPeerWake creates the sender and the view loop (stopped by Close).
func (e *Engine) startPeerWake() error {
	o := *e.opts.PeerWake
	o.withDefaults()
	// The sender names itself to receivers that take hellos, so that they
	// count what arrives per sender (silent.go).
	snd, err := peerwake.NewSender(peerwake.SenderOptions{Logger: e.log, OnReply: e.onReply, Name: e.opts.ReplicaID})
	if err != nil {
		return err
	}
	w := &wakeState{opts: o, sender: snd, kick: make(chan struct{}, 1), firstRead: make(chan struct{})}
	// A first read now, so that the first writes after start find their
	// owners (a client's view is otherwise read on demand).
	w.kick <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Go(func() { e.viewLoop(ctx, w) })
	w.wg.Go(func() { e.renewLoop(ctx) })
	e.wake = w
	return nil
}

// stopPeerWake stops what startPeerWake started.
func (e *Engine) stopPeerWake() {
	if e.wake == nil {
		return
	}
	e.wake.cancel()
	e.wake.wg.Wait()
	_ = e.wake.sender.Close()
}

// viewLoop reads the lease view when kicked, at most once per
// ViewRefresh.
func (e *Engine) viewLoop(ctx context.Context, w *wakeState) {
	started := e.clk.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		rctx, cancel := context.WithTimeout(ctx, viewTimeout)
		v, err := e.be.View(rctx, e.leasePartition(), e.opts.Leases.Blocks)
		cancel()
		w.mu.Lock()
		w.readAt = e.clk.Now()
		if err == nil {
			w.view = v
			w.reads.Add(1)
		}
		w.mu.Unlock()
		if err == nil && !e.isJoined() {
			// The counts of frames written per replica are of use only for
			// replicas that publish an endpoint (a session keeps them to
			// its live peers).
			w.sender.ForgetWritten(func(name string) bool { _, ok := v.Wake[name]; return ok })
		}
		w.firstReadOnce.Do(func() { close(w.firstRead) })
		if err != nil && ctx.Err() == nil {
			e.log.Info("peer wake: reading the lease view failed", zap.Error(err))
		}
		if !e.sleep(ctx, viewRetry) {
			return
		}
		// In the first minute, a view without a single endpoint is read
		// again (replicas starting beside this process publish theirs
		// shortly), so the first writes find their owners.
		if (err != nil || !hasEndpoint(v)) && e.clk.Now().Sub(started) < viewWarmup {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}

// waitPeerView waits until the peer wake channel's first read of the
// lease view has ended, so that the first writes after it find the
// owners of their slots (without it they would wait for the owners'
// change-feed reads), or until ctx ends; it returns at once when the
// channel is off. New calls it.
func (e *Engine) waitPeerView(ctx context.Context) error {
	if e.wake == nil {
		return nil
	}
	select {
	case <-e.wake.firstRead:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// receiverFor creates a session's wake receiver (nil when the channel is
// off) and sets what the session's heartbeat publishes of the channel in
// so: the endpoint and key, that the receiver takes hellos, and the
// frames the sender wrote to each replica.
func (e *Engine) receiverFor(so *leasestore.Options) (*peerwake.Receiver, error) {
	if e.wake == nil {
		return nil, nil
	}
	secret, err := peerwake.NewSecret()
	if err != nil {
		return nil, err
	}
	r, err := peerwake.NewReceiver(peerwake.ReceiverOptions{Listen: e.wake.opts.Listen, Secret: secret, OnWake: e.onPeerWake, Logger: e.log})
	if err != nil {
		return nil, err
	}
	addr := e.wake.opts.Advertise
	if addr == "" {
		addr = r.Addr().String()
	}
	so.WakeAddr, so.WakeKey, so.WakeHello = addr, secret.Encode(), true
	so.WakesSent = e.wake.sender.WrittenTo
	return r, nil
}

// onPeerWake signals a received wake on the local hub, for an owned slot
// only (the sender's view of ownership may be stale).
func (e *Engine) onPeerWake(w peerwake.Wake) {
	if w.Hub == peerwake.HubLeases {
		// A peer wrote lease documents this replica may act on.
		if s := e.sess.Load(); s != nil {
			s.store.Kick()
			e.wake.got.Add(1)
			e.wake.kicked.Add(1)
		} else {
			e.wake.ignored.Add(1)
		}
		return
	}
	if !e.isOwned(w.Slot) {
		e.wake.ignored.Add(1)
		return
	}
	switch w.Hub {
	case peerwake.HubWatch:
		if !e.onWatch(w) {
			e.wake.ignored.Add(1)
			return
		}
	case peerwake.HubOrchestrator:
		inst, ok := e.orchPeerWake(w.Key)
		if !ok {
			e.wake.ignored.Add(1)
			return
		}
		e.orch.Signal(w.Slot, orchKey(inst), w.VisibleAt)
	case peerwake.HubWorker:
		if _, ok := parseKey(w.Key, kindWork); !ok {
			e.wake.ignored.Add(1)
			return
		}
		e.work.Signal(w.Slot, w.Key, w.VisibleAt)
	default:
		e.wake.ignored.Add(1)
		return
	}
	e.wake.got.Add(1)
}

// orchPeerWake applies an orchestrator wake's key to the hold rules and
// returns the instance to signal: a completion settles its activity; an
// arrival naming its message ends a hold unless a turn here took that
// message already; a bare instance key (a sender that predates named
// arrivals) ends a hold. ok is false for a malformed key.
func (e *Engine) orchPeerWake(s string) (instance string, ok bool) {
	k, ok := parseKey(s, kindSettle, kindArrival, kindMessages)
	if !ok {
		return "", false
	}
	switch k.kind {
	case kindSettle:
		e.siblingDone(k.instance, k.id)
	case kindArrival:
		e.arrivedMsg(k.instance, k.id)
	default:
		e.arrived(k.instance)
	}
	return k.instance, true
}

// wakePeer sends the owner of q's slot a wake for it, unless the channel
// is off, the slot is owned here (signalled locally) or its owner is not
// known to publish an endpoint. It never blocks.
func (e *Engine) wakePeer(q store.QueueHead, settles string) {
	w := e.wake
	if w == nil || e.isOwned(q.DispatchSlot) {
		return
	}
	peer, ok := e.ownerPeer(q.DispatchSlot)
	if !ok {
		return
	}
	wk := peerwake.Wake{Slot: q.DispatchSlot}
	if q.IsOrchestrator() {
		if q.LockedUntil > e.now() {
			return // taken already; its release signals
		}
		k := key{kind: kindArrival, instance: q.InstanceID, id: q.ID}
		if settles != "" {
			k = key{kind: kindSettle, instance: q.InstanceID, id: settles}
		}
		wk.Hub, wk.Key, wk.VisibleAt = peerwake.HubOrchestrator, k.String(), msTime(q.VisibleAt)
		if len(wk.Key) > peerwake.MaxKeyBytes {
			wk.Key = orchKey(q.InstanceID) // an id too long to name: a bare wake
		}
	} else {
		wk.Hub, wk.Key, wk.VisibleAt = peerwake.HubWorker, workKey(q.InstanceID, q.ID), msTime(max(q.VisibleAt, q.LockedUntil))
	}
	if err := w.sender.Send(peer, wk); err != nil {
		w.dropped.Add(1)
		return
	}
	w.sent.Add(1)
}

// ownerPeer returns the peer wake endpoint of the owner of slot, counting
// a miss (no known owner endpoint, or an unreadable key) in NoPeer.
func (e *Engine) ownerPeer(slot int) (peerwake.Peer, bool) {
	ep, ok := e.endpointOf(slot)
	if !ok {
		e.wake.noPeer.Add(1)
		return peerwake.Peer{}, false
	}
	p, ok := peerAt(ep)
	if !ok {
		e.wake.noPeer.Add(1)
	}
	return p, ok
}

// peerAt is the peer a wake endpoint names: its frames are counted under
// its replica (peerwake.Sender.WrittenTo), and its connections begin with
// a hello when it takes them. ok is false for an unreadable key.
func peerAt(ep leasestore.WakeEndpoint) (peerwake.Peer, bool) {
	secret, err := peerwake.ParseSecret(ep.Key)
	if err != nil {
		return peerwake.Peer{}, false
	}
	return peerwake.Peer{Addr: ep.Addr, Secret: secret, Name: ep.Replica, Hello: ep.Hello}, true
}

// kickPeers tells the other replicas of s's lease group, over the peer
// wake channel, to read the lease partition now: this replica handed
// them a lease, asked one of them for one, or refused (leasestore
// Options.OnWrote).
func (e *Engine) kickPeers(s *session) {
	w := e.wake
	if w == nil {
		return
	}
	for _, ep := range s.store.PeerEndpoints() {
		p, ok := peerAt(ep)
		if !ok {
			w.noPeer.Add(1)
			continue
		}
		if err := w.sender.Send(p, peerwake.Wake{Hub: peerwake.HubLeases, Key: e.opts.ReplicaID}); err != nil {
			w.dropped.Add(1)
			continue
		}
		w.sent.Add(1)
		w.leaseKicks.Add(1)
	}
}

// endpointOf returns the wake endpoint of the owner of slot: from the
// session's lease store when this replica takes part in dispatch, else
// from the lease view (read in the background when missing or older
// than ViewRefresh).
func (e *Engine) endpointOf(slot int) (leasestore.WakeEndpoint, bool) {
	idx := slot / e.per
	if s := e.sess.Load(); s != nil {
		owner := s.store.OwnerOf(idx)
		if owner == "" {
			return leasestore.WakeEndpoint{}, false
		}
		return s.store.WakeEndpoint(owner)
	}
	w := e.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	var ep leasestore.WakeEndpoint
	ok := idx < len(w.view.Owners) && w.view.Owners[idx] != ""
	if ok {
		ep, ok = w.view.Wake[w.view.Owners[idx]]
	}
	// Read again when the view is old, or sooner (viewRetry) when it knows
	// no endpoint for this slot: its owner may have joined since.
	age := e.clk.Now().Sub(w.readAt)
	if w.readAt.IsZero() || age >= w.opts.ViewRefresh || (!ok && age >= viewRetry) {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return ep, ok
}

// viewWarmup is how long after start a view without any endpoint is read
// again on its own (every viewRetry).
const viewWarmup = time.Minute

// hasEndpoint reports whether v names the endpoint of a lease's owner.
func hasEndpoint(v leasestore.View) bool {
	for _, o := range v.Owners {
		if _, ok := v.Wake[o]; ok && o != "" {
			return true
		}
	}
	return false
}

// viewRetry is the least age of a lease view that is read again because
// a write found no endpoint for its slot's owner: at most two reads a
// second, and only while such writes happen.
const viewRetry = 500 * time.Millisecond

// PeerWakeStats counts the peer wake channel's traffic (zero when off).
type PeerWakeStats struct {
	// Sent wakes were queued for their owner; Dropped ones were not
	// (queue full, closed); NoPeer writes had no known owner endpoint.
	Sent, Dropped, NoPeer int64
	// Received wakes were signalled; Ignored ones were for slots not owned
	// here or malformed keys.
	Received, Ignored int64
	// ViewReads counts the lease view's reads (an engine without a
	// session); ViewOwners is how many leases its latest read found owned
	// by a replica publishing an endpoint.
	ViewReads  int64
	ViewOwners int
	// LeaseKicksSent and LeaseKicksReceived count the wakes that tell a
	// peer to read the lease partition now (a hand-off, a steal request
	// or its refusal); they are included in Sent and Received.
	LeaseKicksSent, LeaseKicksReceived int64
	// WatchesSent counts requests to an owner to report an instance's
	// next change (included in Sent); ChangesSent the reports this owner
	// wrote back; ChangesReceived those this engine received for
	// instances it watches.
	WatchesSent, ChangesSent, ChangesReceived int64
	// Sender and Receiver are the channel's own counters (the receiver of
	// the current session, if any).
	Sender   peerwake.SenderStats
	Receiver peerwake.ReceiverStats
	// PeersSilent is how many live peers the current session finds
	// sending into a silent channel now: their heartbeats report at
	// least 3 wake frames written to this replica since the last that
	// arrived, and none arrived (DESIGN §6a; 0 without a session).
	// SilentFound counts the times a peer was found so (each logged at
	// warn level, MetricPeerWakeSilent); SilenceChecks the comparisons of
	// a peer's report with what arrived, made each ViewRefresh once a
	// lease expiry has passed since the last frame from it arrived.
	PeersSilent, SilentFound, SilenceChecks int64
}

// PeerWakeStats returns the channel's counters.
func (e *Engine) PeerWakeStats() PeerWakeStats {
	w := e.wake
	if w == nil {
		return PeerWakeStats{}
	}
	st := PeerWakeStats{Sent: w.sent.Load(), Dropped: w.dropped.Load(), NoPeer: w.noPeer.Load(),
		Received: w.got.Load(), Ignored: w.ignored.Load(), Sender: w.sender.Stats(), ViewReads: w.reads.Load(),
		LeaseKicksSent: w.leaseKicks.Load(), LeaseKicksReceived: w.kicked.Load(),
		WatchesSent: w.watchesSent.Load(), ChangesSent: w.changesSent.Load(), ChangesReceived: w.changesGot.Load(),
		PeersSilent: e.met.peersSilent.Load(), SilentFound: w.silentFound.Load(), SilenceChecks: w.silenceChecks.Load()}
	w.mu.Lock()
	for _, o := range w.view.Owners {
		if _, ok := w.view.Wake[o]; ok && o != "" {
			st.ViewOwners++
		}
	}
	w.mu.Unlock()
	if s := e.sess.Load(); s != nil && s.recv != nil {
		st.Receiver = s.recv.Stats()
	}
	return st
}
