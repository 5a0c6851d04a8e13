package peerwake

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Receiver defaults.
const (
	// DefaultListen listens on an ephemeral port on every interface.
	DefaultListen = ":0"
	// DefaultWindow is the default tolerance on a frame's sent-at time,
	// each way: generous for clock skew between replicas and for a frame
	// queued while its sender dialled, small enough that the replay cache
	// stays small.
	DefaultWindow = 30 * time.Second
	// DefaultMaxConns bounds concurrent connections: a replica has one
	// inbound connection per sending replica, so 64 leaves ample headroom.
	DefaultMaxConns = 64
	// DefaultMaxRate bounds delivered wakes per second: far above what a
	// replica's fetch can act on usefully, low enough that forged or
	// replayed wakes cost at most that many reads per second (a wake makes
	// the owner look at one instance).
	DefaultMaxRate = 2000
	// DefaultReceiverIdleTimeout closes an inbound connection that carried
	// no complete frame for this long. It is longer than
	// DefaultSenderIdleTimeout so that the sender, not the receiver, closes
	// an idle connection (a wake written into a connection the receiver
	// has just closed is lost).
	DefaultReceiverIdleTimeout = 2 * time.Minute
)

// replyQueueLen bounds each connection's queue of replies not yet written:
// Reply.Send drops a reply when it is full.
const replyQueueLen = 64

// maxSenderNames bounds the sender names a Receiver counts frames under
// (ReceivedFrom): names come from hellos, which only holders of the
// secret can write, and a caller forgets those it no longer needs
// (ForgetSenders). A hello naming one more is not counted.
const maxSenderNames = 1024

// maxRateLimit bounds MaxRate and Burst, far above any use, so that token
// arithmetic cannot overflow.
const maxRateLimit = 1_000_000_000

// ReceiverOptions configures a Receiver. Secret and OnWake are required;
// every other field has a documented default, applied to its zero value.
type ReceiverOptions struct {
	// Listen is the TCP address to listen on; default DefaultListen (":0").
	Listen string
	// Secret authenticates frames: only frames signed with it (and naming
	// its KeyID) are delivered. Required, not all zero. Use one fresh
	// secret (NewSecret) per receiver incarnation.
	Secret Secret
	// OnWake receives every delivered wake, on the goroutine of the
	// connection that carried it (so calls can be concurrent). It must not
	// block: signal a hub and return. A HubWatch wake carries the way back
	// to its sender in Wake.Reply, which OnWake may keep and use later
	// (every watch of one connection carries the same *Reply). Required.
	OnWake func(Wake)
	// Window is how far a frame's sent-at time may lie from Now, either
	// way, for the frame to be considered; default DefaultWindow (30 s),
	// at least 1 ms. Frames outside it are refused as stale: a sender
	// whose clock is skewed beyond the window loses its wakes (the change
	// feed still covers them).
	Window time.Duration
	// MaxConns bounds concurrent inbound connections; default
	// DefaultMaxConns (64). A connection beyond the bound evicts the
	// oldest connection that has not delivered an authenticated frame, if
	// there is one, and is closed at once otherwise.
	MaxConns int
	// MaxRate bounds delivered wakes per second, whatever anyone sends: a
	// token bucket refilled at MaxRate per second and holding at most
	// Burst tokens, so over any interval of length T at most
	// Burst + MaxRate*T wakes reach OnWake. Frames beyond it are dropped
	// and counted. Default DefaultMaxRate (2000).
	MaxRate int
	// Burst is the token bucket's capacity; default MaxRate (one second's
	// worth).
	Burst int
	// ReplayCacheSize bounds the nonces remembered to refuse replays;
	// default MaxRate × Window (in whole seconds, rounded up) + Burst:
	// 62 000 entries, about 3 MB at most, with the other defaults. Only
	// delivered frames enter the cache and each needs remembering until
	// its sent-at time + Window, which is Window after arrival for a
	// sender whose clock agrees with ours; so the default holds every
	// nonce that could still pass the window check, except for senders
	// whose clocks run ahead. When full, the oldest entry is evicted; a
	// replay of an evicted nonce is delivered once more, still within
	// MaxRate.
	ReplayCacheSize int
	// IdleTimeout closes a connection that carried no complete frame for
	// this long; default DefaultReceiverIdleTimeout (2 min).
	IdleTimeout time.Duration
	// ReplyWriteTimeout bounds each write of replies (HubChanged frames)
	// back to a sender; default DefaultWriteTimeout (1 s). A write that
	// fails or times out closes the connection: its queued replies are
	// dropped and its Reply's Done is closed.
	ReplyWriteTimeout time.Duration
	// Logger receives connection-level diagnostics (refusals at debug
	// level, accept failures at warn). It never receives keys, secrets or
	// frame contents. Default: a no-op logger.
	Logger *zap.Logger
	// Now is the clock for the window check, the replay cache and the
	// rate limit, and stamps replies' sent-at time; default time.Now.
	// Connection deadlines use the system clock regardless.
	Now func() time.Time

	// hooks are test hooks; nil outside tests.
	hooks *receiverHooks
}

// receiverHooks let tests hold a reply writer at a known point instead of
// sleeping. Each is called on the goroutine named.
type receiverHooks struct {
	// beforeReplyWrite is called on the reply writer before each write,
	// after its deadline is set, with the connection written to.
	beforeReplyWrite func(net.Conn)
}

func (h *receiverHooks) replyWrite(c net.Conn) {
	if h != nil && h.beforeReplyWrite != nil {
		h.beforeReplyWrite(c)
	}
}

// ReceiverStats counts what a Receiver did with the frames and
// connections it saw, since it was created.
type ReceiverStats struct {
	// Accepted counts wakes delivered to OnWake.
	Accepted uint64
	// BadFrames counts malformed frames: bad length prefix or version,
	// inconsistent lengths, invalid hub, slot or key, or a frame cut short
	// by the end of the connection.
	BadFrames uint64
	// UnknownKey counts frames naming another KeyID than the current
	// secret's.
	UnknownKey uint64
	// BadMAC counts frames whose MAC does not verify.
	BadMAC uint64
	// Stale counts authenticated frames sent outside the window.
	Stale uint64
	// Replayed counts authenticated frames whose nonce was already
	// delivered.
	Replayed uint64
	// RateLimited counts authenticated frames dropped by the rate limit.
	RateLimited uint64
	// ConnsAccepted counts connections taken into service.
	ConnsAccepted uint64
	// ConnsRefused counts connections closed at once because MaxConns
	// connections, all authenticated, were open.
	ConnsRefused uint64
	// ConnsEvicted counts unauthenticated connections closed to make room
	// for a new one.
	ConnsEvicted uint64
	// Conns is the number of connections open now.
	Conns int
	// RepliesSent counts replies (HubChanged frames) written back to
	// senders (which does not prove that the sender read them).
	RepliesSent uint64
	// RepliesDropped counts replies given to Reply.Send and not written:
	// invalid, the connection ended, its reply queue full, a failed
	// write, or queued when the connection ended.
	RepliesDropped uint64
	// Hellos counts connections named by a hello frame (see
	// ReceivedFrom). A hello is not a wake: it is not in Accepted.
	Hellos uint64
}

// Receiver listens for wake frames and delivers the authentic ones to
// OnWake. It starts serving in NewReceiver; Close stops it. Its methods
// are safe for concurrent use.
type Receiver struct {
	onWake       func(Wake)
	now          func() time.Time
	windowMs     int64
	maxConns     int
	idleTimeout  time.Duration
	replyTimeout time.Duration
	hooks        *receiverHooks
	log          *zap.Logger
	ln           net.Listener
	key          atomic.Pointer[keyState]

	gateMu sync.Mutex
	gate   *gate

	mu     sync.Mutex
	conns  map[*rconn]struct{}
	seq    uint64
	closed bool
	// senders counts authenticated frames per name a hello gave their
	// connection (ReceivedFrom), at most maxSenderNames names.
	senders map[string]*senderCount

	wg        sync.WaitGroup // the accept loop, every connection goroutine and reply writer
	done      chan struct{}  // closed by Close
	closeOnce sync.Once
	closeErr  error

	accepted, badFrames, unknownKey, badMAC, stale, replayed, rateLimited atomic.Uint64
	connsAccepted, connsRefused, connsEvicted                             atomic.Uint64
	repliesSent, repliesDropped, hellos                                   atomic.Uint64
}

// senderCount counts the frames received under one sender name.
type senderCount struct {
	n     atomic.Uint64
	conns int // connections named so now; guarded by Receiver.mu
}

// keyState is the current secret and its KeyID.
type keyState struct {
	secret Secret
	id     KeyID
}

// rconn is one inbound connection.
type rconn struct {
	c      net.Conn
	seq    uint64 // acceptance order
	authed bool   // delivered an authenticated frame; guarded by Receiver.mu
	// from counts the frames of a connection its hello named; nil
	// before (or without) one. Set by the connection's serve goroutine
	// under Receiver.mu, read there without it.
	from *senderCount
}

// NewReceiver validates opts, listens on opts.Listen and starts serving.
// The caller must Close the receiver.
func NewReceiver(opts ReceiverOptions) (*Receiver, error) {
	if opts.Secret.IsZero() {
		return nil, errors.New("peerwake: ReceiverOptions.Secret is not set")
	}
	if opts.OnWake == nil {
		return nil, errors.New("peerwake: ReceiverOptions.OnWake is nil")
	}
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxRate == 0 {
		opts.MaxRate = DefaultMaxRate
	}
	if opts.Burst == 0 {
		opts.Burst = opts.MaxRate
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultReceiverIdleTimeout
	}
	if opts.ReplyWriteTimeout == 0 {
		opts.ReplyWriteTimeout = DefaultWriteTimeout
	}
	switch {
	case opts.Window < time.Millisecond:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.Window %v is below 1ms", opts.Window)
	case opts.MaxConns < 0:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.MaxConns %d is negative", opts.MaxConns)
	case opts.MaxRate < 0 || opts.MaxRate > maxRateLimit:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.MaxRate %d outside [1, %d]", opts.MaxRate, maxRateLimit)
	case opts.Burst < 0 || opts.Burst > maxRateLimit:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.Burst %d outside [1, %d]", opts.Burst, maxRateLimit)
	case opts.ReplayCacheSize < 0:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.ReplayCacheSize %d is negative", opts.ReplayCacheSize)
	case opts.IdleTimeout < 0:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.IdleTimeout %v is negative", opts.IdleTimeout)
	case opts.ReplyWriteTimeout < 0:
		return nil, fmt.Errorf("peerwake: ReceiverOptions.ReplyWriteTimeout %v is negative", opts.ReplyWriteTimeout)
	}
	if opts.ReplayCacheSize == 0 {
		secs := int((opts.Window + time.Second - 1) / time.Second)
		opts.ReplayCacheSize = opts.MaxRate*secs + opts.Burst
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("peerwake: listening on %q: %w", opts.Listen, err)
	}
	r := &Receiver{
		onWake:       opts.OnWake,
		now:          opts.Now,
		windowMs:     opts.Window.Milliseconds(),
		maxConns:     opts.MaxConns,
		idleTimeout:  opts.IdleTimeout,
		replyTimeout: opts.ReplyWriteTimeout,
		hooks:        opts.hooks,
		log:          opts.Logger.Named("peerwake"),
		ln:           ln,
		gate:         newGate(opts.MaxRate, opts.Burst, opts.ReplayCacheSize),
		conns:        make(map[*rconn]struct{}),
		senders:      make(map[string]*senderCount),
		done:         make(chan struct{}),
	}
	r.key.Store(&keyState{secret: opts.Secret, id: opts.Secret.KeyID()})
	r.log.Info("peer wake receiver listening", zap.Stringer("addr", ln.Addr()))
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

// Addr returns the address the receiver listens on (with the port chosen,
// for ":0"). Publish a host:port at which peers can reach it.
func (r *Receiver) Addr() net.Addr { return r.ln.Addr() }

// KeyID returns the KeyID of the current secret.
func (r *Receiver) KeyID() KeyID { return r.key.Load().id }

// SetSecret replaces the secret: frames signed with the previous one are
// refused (as UnknownKey) from now on, including on open connections, and
// replies written from now on are signed with s. The replay cache is kept.
// The all-zero secret is refused.
func (r *Receiver) SetSecret(s Secret) error {
	if s.IsZero() {
		return errors.New("peerwake: SetSecret: all-zero secret")
	}
	r.key.Store(&keyState{secret: s, id: s.KeyID()})
	return nil
}

// Stats returns the receiver's counters.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	conns := len(r.conns)
	r.mu.Unlock()
	return ReceiverStats{
		Accepted:       r.accepted.Load(),
		BadFrames:      r.badFrames.Load(),
		UnknownKey:     r.unknownKey.Load(),
		BadMAC:         r.badMAC.Load(),
		Stale:          r.stale.Load(),
		Replayed:       r.replayed.Load(),
		RateLimited:    r.rateLimited.Load(),
		ConnsAccepted:  r.connsAccepted.Load(),
		ConnsRefused:   r.connsRefused.Load(),
		ConnsEvicted:   r.connsEvicted.Load(),
		Conns:          conns,
		RepliesSent:    r.repliesSent.Load(),
		RepliesDropped: r.repliesDropped.Load(),
		Hellos:         r.hellos.Load(),
	}
}

// ReceivedFrom returns, per sender name, the authenticated frames other
// than hellos (delivered, or dropped as stale, replayed or rate-limited)
// received on connections a hello frame named with it, since the
// name was first seen or last forgotten. A sender names its connections
// when its peer publishes that it takes hellos (Peer.Hello) and it has a
// name (SenderOptions.Name); frames of other connections are counted in
// ReceiverStats only. At most 1024 names are counted at once.
func (r *Receiver) ReceivedFrom() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]uint64, len(r.senders))
	for name, c := range r.senders {
		out[name] = c.n.Load()
	}
	return out
}

// ForgetSenders forgets the counts of the sender names keep refuses and
// no open connection carries (a name in use is kept): a caller whose set
// of peers changes calls it so that the counts stay bounded. A name seen
// again counts from zero.
func (r *Receiver) ForgetSenders(keep func(name string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, c := range r.senders {
		if c.conns == 0 && !keep(name) {
			delete(r.senders, name)
		}
	}
}

// nameConn counts rc's frames under name from now on, unless it already
// has a name or maxSenderNames other names are counted.
func (r *Receiver) nameConn(rc *rconn, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc.from != nil {
		return
	}
	c := r.senders[name]
	if c == nil {
		if len(r.senders) >= maxSenderNames {
			return
		}
		c = &senderCount{}
		r.senders[name] = c
	}
	c.conns++
	rc.from = c
	r.hellos.Add(1)
}

// Close stops the listener, closes every connection and waits for the
// accept loop, every connection goroutine and every reply writer to
// return; an OnWake call in progress finishes first, and none starts after
// Close returns. Every Reply's Done is closed and its queued replies are
// dropped. It returns the listener's close error, and the same on later
// calls.
func (r *Receiver) Close() error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed = true
		for rc := range r.conns {
			_ = rc.c.Close()
		}
		r.mu.Unlock()
		close(r.done)
		if err := r.ln.Close(); err != nil {
			r.closeErr = fmt.Errorf("peerwake: closing listener: %w", err)
		}
	})
	r.wg.Wait()
	return r.closeErr
}

func (r *Receiver) acceptLoop() {
	defer r.wg.Done()
	var delay time.Duration
	for {
		c, err := r.ln.Accept()
		if err != nil {
			select {
			case <-r.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as
			// net/http's server does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			r.log.Warn("peer wake accept failed; retrying", zap.Error(err), zap.Duration("after", delay))
			t := time.NewTimer(delay)
			select {
			case <-r.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		r.admitConn(c)
	}
}

// admitConn takes c into service, or closes it at once when MaxConns
// authenticated connections are open. When MaxConns connections are open
// but some never delivered an authenticated frame, the oldest of those is
// evicted instead: an attacker who merely holds connections open cannot
// lock senders out, and a sender authenticates with the first frame it
// writes right after dialling.
func (r *Receiver) admitConn(c net.Conn) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = c.Close()
		return
	}
	if len(r.conns) >= r.maxConns {
		var victim *rconn
		for rc := range r.conns {
			if !rc.authed && (victim == nil || rc.seq < victim.seq) {
				victim = rc
			}
		}
		if victim == nil {
			r.mu.Unlock()
			r.connsRefused.Add(1)
			r.log.Debug("peer wake connection refused: MaxConns reached", zap.Stringer("remote", c.RemoteAddr()))
			_ = c.Close()
			return
		}
		delete(r.conns, victim)
		_ = victim.c.Close()
		r.connsEvicted.Add(1)
		r.log.Debug("peer wake connection evicted for a new one", zap.Stringer("remote", victim.c.RemoteAddr()))
	}
	r.seq++
	rc := &rconn{c: c, seq: r.seq}
	r.conns[rc] = struct{}{}
	r.connsAccepted.Add(1)
	r.wg.Add(1)
	r.mu.Unlock()
	go r.serve(rc)
}

// release forgets rc and closes it.
func (r *Receiver) release(rc *rconn) {
	r.mu.Lock()
	delete(r.conns, rc)
	if rc.from != nil {
		rc.from.conns--
	}
	r.mu.Unlock()
	_ = rc.c.Close()
}

func (r *Receiver) markAuthed(rc *rconn) {
	r.mu.Lock()
	rc.authed = true
	r.mu.Unlock()
}

// refuse counts a refusal and logs it; the caller closes the connection.
func (r *Receiver) refuse(rc *rconn, counter *atomic.Uint64, reason string) {
	counter.Add(1)
	r.log.Debug("peer wake connection closed", zap.String("reason", reason), zap.Stringer("remote", rc.c.RemoteAddr()))
}

// serve reads frames from rc until it ends, fails, idles out or sends a
// frame that warrants closing it: malformed, unauthenticated or replayed.
// Stale and rate-limited frames are dropped but keep the connection open:
// they come from a sender holding the secret, whose next frame may pass.
// The connection's Reply, made at its first watch, ends when serve
// returns, after the connection is closed.
func (r *Receiver) serve(rc *rconn) {
	var reply *Reply
	defer r.wg.Done()
	defer func() {
		if reply != nil {
			reply.end()
		}
	}()
	defer r.release(rc)
	var (
		prefix  [prefixBytes]byte
		buf     = make([]byte, MaxFrameBytes)
		scratch = make([]byte, 0, MACBytes)
		ks      *keyState
		mac     hash.Hash
		authed  bool
	)
	for {
		if err := rc.c.SetReadDeadline(time.Now().Add(r.idleTimeout)); err != nil {
			return
		}
		if _, err := io.ReadFull(rc.c, prefix[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				r.refuse(rc, &r.badFrames, "truncated length prefix")
			}
			return // EOF between frames, idle timeout, or closed
		}
		n := int(binary.BigEndian.Uint16(prefix[:]))
		if n < MinFrameBytes || n > MaxFrameBytes {
			r.refuse(rc, &r.badFrames, "frame length out of bounds")
			return
		}
		if _, err := io.ReadFull(rc.c, buf[:n]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				r.refuse(rc, &r.badFrames, "truncated frame")
			}
			return
		}
		cur := r.key.Load()
		if cur != ks {
			ks, mac = cur, newMAC(cur.secret)
		}
		f, err := authenticate(buf[:n], toReceiver, ks.id, mac, scratch)
		switch {
		case errors.Is(err, errUnknownKey):
			r.refuse(rc, &r.unknownKey, "unknown key id")
			return
		case errors.Is(err, errBadMAC):
			r.refuse(rc, &r.badMAC, "bad MAC")
			return
		case err != nil:
			r.refuse(rc, &r.badFrames, "malformed frame")
			return
		}
		now := r.now().UnixMilli()
		if f.wake.Hub == hubHello {
			if !r.hello(rc, f, now) {
				return
			}
			if !authed {
				authed = true
				r.markAuthed(rc)
			}
			continue
		}
		if rc.from != nil {
			rc.from.n.Add(1)
		}
		if f.sentAt < now-r.windowMs || f.sentAt > now+r.windowMs {
			r.stale.Add(1)
			continue
		}
		r.gateMu.Lock()
		v := r.gate.admit(f.nonce, f.sentAt+r.windowMs, now)
		r.gateMu.Unlock()
		if v == replayed {
			r.refuse(rc, &r.replayed, "replayed frame")
			return
		}
		if !authed {
			authed = true
			r.markAuthed(rc)
		}
		if v == rateLimited {
			r.rateLimited.Add(1)
			continue
		}
		if f.wake.Hub == HubWatch {
			if reply == nil {
				reply = &Reply{r: r, rc: rc, queue: make(chan Wake, replyQueueLen), done: make(chan struct{})}
			}
			f.wake.Reply = reply
		}
		r.accepted.Add(1)
		r.onWake(f.wake)
	}
}

// hello acts on an authenticated hello frame f received at now (Unix
// ms): a stale one is dropped, a replayed one refused (false: close the
// connection), and otherwise the connection is named, if it was not yet.
// It takes no token of the rate limit (see gate.admitUnmetered).
func (r *Receiver) hello(rc *rconn, f frame, now int64) bool {
	if f.sentAt < now-r.windowMs || f.sentAt > now+r.windowMs {
		r.stale.Add(1)
		return true
	}
	r.gateMu.Lock()
	v := r.gate.admitUnmetered(f.nonce, f.sentAt+r.windowMs, now)
	r.gateMu.Unlock()
	if v == replayed {
		r.refuse(rc, &r.replayed, "replayed hello")
		return false
	}
	r.nameConn(rc, f.wake.Key)
	return true
}

// closedChan is closed: the Done of a nil *Reply.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Reply is the way back to the sender of a HubWatch frame: HubChanged
// wakes given to Send are written back on the connection that carried the
// watch, signed with the receiver's current secret. A connection has one
// Reply, shared by all the watches it carries, made at the first; its
// writer goroutine starts at the first Send. Its methods are safe for
// concurrent use, and on a nil *Reply (Send returns false, Done a closed
// channel).
type Reply struct {
	r     *Receiver
	rc    *rconn
	queue chan Wake     // replies not yet written, at most replyQueueLen
	done  chan struct{} // closed by end

	mu      sync.Mutex
	ended   bool // the connection has ended: Send drops
	writing bool // the writer goroutine was started
}

// Send queues w (a HubChanged wake) to be written back on the connection,
// signed with the receiver's current secret. It never blocks: it returns
// false, and counts the drop, when the connection has ended, its reply
// queue (64 replies) is full, or w is not a valid HubChanged wake. True
// means queued, not delivered: a reply still queued when the connection
// ends is dropped (and counted).
func (p *Reply) Send(w Wake) bool {
	if p == nil {
		return false
	}
	if w.Hub != HubChanged || w.Validate() != nil {
		p.r.repliesDropped.Add(1)
		return false
	}
	w.Reply = nil
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		p.r.repliesDropped.Add(1)
		return false
	}
	select {
	case p.queue <- w:
	default:
		p.r.repliesDropped.Add(1)
		return false
	}
	if !p.writing {
		// The connection's serve goroutine has not returned (p.ended is
		// false), so the wait group's count is not zero.
		p.writing = true
		p.r.wg.Add(1)
		go p.r.writeReplies(p)
	}
	return true
}

// Done is closed when the connection has ended; replies sent after it are
// dropped.
func (p *Reply) Done() <-chan struct{} {
	if p == nil {
		return closedChan
	}
	return p.done
}

// end marks the connection ended, after it was closed: Send drops from now
// on, and the writer drops what is queued and returns.
func (p *Reply) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	close(p.done)
}

// writeReplies is a connection's reply writer: it writes the queued
// replies, those queued together in one write, until the connection ends.
// A failed write closes the connection, which ends its serve goroutine and
// so the Reply.
func (r *Receiver) writeReplies(p *Reply) {
	defer r.wg.Done()
	var (
		buf []byte
		ks  *keyState
		mac hash.Hash
	)
	for {
		select {
		case <-p.done:
			r.dropQueuedReplies(p)
			return
		case w := <-p.queue:
			cur := r.key.Load()
			if cur != ks {
				ks, mac = cur, newMAC(cur.secret)
			}
			var n int
			buf, n = appendBatch(buf[:0], mac, ks.id, r.now, w, p.queue)
			if err := r.writeReply(p.rc, buf); err != nil {
				r.repliesDropped.Add(uint64(n))
				select {
				case <-p.done: // closed meanwhile: nothing to report
				default:
					r.log.Debug("peer wake reply write failed; closing the connection", zap.Stringer("remote", p.rc.c.RemoteAddr()))
				}
				_ = p.rc.c.Close()
				<-p.done
				r.dropQueuedReplies(p)
				return
			}
			r.repliesSent.Add(uint64(n))
		}
	}
}

func (r *Receiver) writeReply(rc *rconn, buf []byte) error {
	if err := rc.c.SetWriteDeadline(time.Now().Add(r.replyTimeout)); err != nil {
		return err
	}
	r.hooks.replyWrite(rc.c)
	_, err := rc.c.Write(buf)
	return err
}

// dropQueuedReplies counts the replies left in p's queue as dropped, once
// the connection has ended (nothing is queued after that).
func (r *Receiver) dropQueuedReplies(p *Reply) {
	for {
		select {
		case <-p.queue:
			r.repliesDropped.Add(1)
		default:
			return
		}
	}
}
