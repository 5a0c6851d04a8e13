package peerwake

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Sender defaults.
const (
	// DefaultQueueLen is the default per-peer queue length: a burst of
	// commits to one owner queues while the connection is dialled.
	DefaultQueueLen = 256
	// DefaultDialTimeout bounds a dial: peers share a network, so a dial
	// that takes longer is to a peer that is gone.
	DefaultDialTimeout = time.Second
	// DefaultWriteTimeout bounds a write: a receiver that does not read
	// for that long is stuck, and its wakes are worth nothing.
	DefaultWriteTimeout = time.Second
	// DefaultSenderIdleTimeout closes a peer's connection, and ends its
	// goroutine, after this long without a Send to it. It is shorter than
	// DefaultReceiverIdleTimeout so that the sender closes first.
	DefaultSenderIdleTimeout = time.Minute
	// DefaultMinBackoff is the first pause after a failed dial or a lost
	// connection; it doubles on each further failure.
	DefaultMinBackoff = 100 * time.Millisecond
	// DefaultMaxBackoff caps the pause between dials to a failing peer.
	DefaultMaxBackoff = 5 * time.Second
)

// maxBatchBytes bounds what one write carries: the frames already queued
// when the goroutine takes one are written together.
const maxBatchBytes = 16 << 10

// Errors returned by Sender.Send.
var (
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("peerwake: sender closed")
	// ErrQueueFull is returned by Send when the peer's queue is full; the
	// wake is dropped and counted.
	ErrQueueFull = errors.New("peerwake: peer queue full")
)

// Peer is a receiver to send wakes to, as published in its heartbeat
// document.
type Peer struct {
	// Addr is the receiver's TCP address, host:port.
	Addr string
	// Secret is the receiver's current secret; its KeyID is derived from
	// it. A peer is identified by Addr and Secret together: a new
	// incarnation at the same address (new secret) gets its own queue and
	// connection, and the old one's ends after SenderOptions.IdleTimeout.
	Secret Secret
	// Name, when set, names the receiver (the engine: its replica id):
	// the frames written to it are counted under Name (Sender.WrittenTo).
	// Give a receiver the same Name on every Send: a peer is identified by
	// all its fields.
	Name string
	// Hello reports that the receiver takes hello frames (it publishes
	// so beside its address): each connection to it then begins with a
	// hello naming this sender (SenderOptions.Name), so that it counts
	// what arrives per sender (Receiver.ReceivedFrom). Receivers of
	// earlier versions close a connection that carries a hello: leave it
	// false unless the receiver says it takes them.
	Hello bool
}

// SenderOptions configures a Sender. The zero value is valid: every field
// has a documented default, applied to its zero value.
type SenderOptions struct {
	// QueueLen bounds each peer's queue of wakes not yet written; default
	// DefaultQueueLen (256). Send drops the wake when the queue is full.
	QueueLen int
	// DialTimeout bounds each dial; default DefaultDialTimeout (1 s).
	DialTimeout time.Duration
	// WriteTimeout bounds each write; default DefaultWriteTimeout (1 s).
	WriteTimeout time.Duration
	// IdleTimeout closes a peer's connection and ends its goroutine after
	// that long without a wake to send; default DefaultSenderIdleTimeout
	// (1 min). Keep it below the receivers' IdleTimeout.
	IdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause after a failed dial, a
	// failed write or a connection the peer closed within MaxBackoff of
	// its dial. The pause starts at MinBackoff, doubles on each further
	// failure up to MaxBackoff and is jittered down by up to half. Wakes
	// for the peer are dropped (and counted) during the pause. Defaults
	// DefaultMinBackoff (100 ms) and DefaultMaxBackoff (5 s).
	MinBackoff, MaxBackoff time.Duration
	// Logger receives per-peer diagnostics (dial and write failures at
	// debug level, with the peer's address). It never receives keys,
	// secrets or frame contents. Default: a no-op logger.
	Logger *zap.Logger
	// Now stamps each frame's sent-at time; default time.Now. Timeouts and
	// backoff use the system clock regardless.
	Now func() time.Time
	// Dial opens connections; default a net.Dialer's DialContext. The
	// context carries DialTimeout and is cancelled by Close.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnReply receives every authenticated HubChanged frame a peer writes
	// back on this sender's connection to it (the answer to a HubWatch
	// wake sent there), on that connection's reader goroutine (calls may
	// be concurrent across peers). It must not block; it may call Send.
	// None is in progress or starts after Close returns. A watch lasts as
	// long as the connection that carried it: the connection closes after
	// IdleTimeout without a Send to the peer, on a failure, or when the
	// peer closes it, so a client renews its watches. Nil: replies are
	// read and discarded (counted).
	OnReply func(from Peer, w Wake)
	// ReplyWindow is how far a reply's sent-at time may lie from Now,
	// either way, for the reply to be delivered; default DefaultWindow
	// (30 s), at least 1 ms. Replies outside it are refused (counted) and
	// dropped; the connection stays open, as a receiver keeps it open for
	// a stale wake.
	ReplyWindow time.Duration
	// Name is this sender's name (the engine: its replica id), at most
	// MaxKeyBytes bytes, written in a hello frame at the start of every
	// connection to a peer whose Hello is set. Empty: no hellos.
	Name string

	// hooks are test hooks; nil outside tests.
	hooks *senderHooks
}

// senderHooks let tests wait for a peer goroutine's progress instead of
// sleeping. Each is called on the peer goroutine.
type senderHooks struct {
	afterBatch func(addr string) // after a batch was written or dropped
	peerExit   func(addr string) // as a peer goroutine ends
	afterReply func(addr string) // on the reader, after a reply frame was delivered or refused
}

func (h *senderHooks) replyDone(addr string) {
	if h != nil && h.afterReply != nil {
		h.afterReply(addr)
	}
}

func (h *senderHooks) batchDone(addr string) {
	if h != nil && h.afterBatch != nil {
		h.afterBatch(addr)
	}
}

func (h *senderHooks) exited(addr string) {
	if h != nil && h.peerExit != nil {
		h.peerExit(addr)
	}
}

// SenderStats counts a Sender's work since it was created.
type SenderStats struct {
	// Sent counts frames written to a connection (which does not prove
	// that the receiver read them).
	Sent uint64
	// Dropped counts wakes given to Send and not written: queue full, no
	// connection (dial failed or backing off), write failed, or pending
	// at Close.
	Dropped uint64
	// DialFailures counts failed dials (not those cut short by Close).
	DialFailures uint64
	// WriteFailures counts failed writes; the frames they carried count as
	// Dropped.
	WriteFailures uint64
	// Peers is the number of peers with a running goroutine now.
	Peers int
	// RepliesReceived counts authenticated replies (HubChanged frames)
	// read from peers: delivered to OnReply, or discarded when it is nil.
	RepliesReceived uint64
	// RepliesRefused counts frames read from peers and refused: bad length
	// prefix, version or hub (anything but a 0xD2 HubChanged frame),
	// inconsistent lengths, a frame cut short, another KeyID than the
	// peer's secret's, a bad MAC (each of those closes the connection),
	// or a sent-at time outside ReplyWindow (dropped only).
	RepliesRefused uint64
}

// Sender sends wakes to peers' receivers without ever blocking its caller
// on the network: Send queues the wake for a goroutine per peer that dials
// lazily, writes, reconnects after failures with backoff and ends after an
// idle period. Its methods are safe for concurrent use.
type Sender struct {
	opts   SenderOptions
	log    *zap.Logger
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // every peer goroutine

	mu     sync.Mutex
	peers  map[Peer]*peer
	closed bool
	// pending counts wakes queued and not yet written or dropped;
	// drained is closed (and replaced) each time it falls to zero.
	pending int
	drained chan struct{}
	// written counts the frames written per Peer.Name (WrittenTo).
	written map[string]uint64

	sent, dropped, dialFailures, writeFailures atomic.Uint64
	repliesReceived, repliesRefused            atomic.Uint64
}

// peer is one peer's queue; its goroutine (Sender.run) owns everything
// else about the peer.
type peer struct {
	to    Peer
	queue chan Wake
}

// NewSender returns a Sender configured by opts, or an error for invalid
// options. The caller must Close it.
func NewSender(opts SenderOptions) (*Sender, error) {
	if opts.QueueLen == 0 {
		opts.QueueLen = DefaultQueueLen
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultSenderIdleTimeout
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.ReplyWindow == 0 {
		opts.ReplyWindow = DefaultWindow
	}
	switch {
	case opts.QueueLen < 0:
		return nil, fmt.Errorf("peerwake: SenderOptions.QueueLen %d is negative", opts.QueueLen)
	case opts.DialTimeout < 0, opts.WriteTimeout < 0, opts.IdleTimeout < 0, opts.MinBackoff < 0:
		return nil, errors.New("peerwake: SenderOptions has a negative duration")
	case opts.MaxBackoff < opts.MinBackoff:
		return nil, fmt.Errorf("peerwake: SenderOptions.MaxBackoff %v is below MinBackoff %v", opts.MaxBackoff, opts.MinBackoff)
	case opts.ReplyWindow < time.Millisecond:
		return nil, fmt.Errorf("peerwake: SenderOptions.ReplyWindow %v is below 1ms", opts.ReplyWindow)
	case len(opts.Name) > MaxKeyBytes:
		return nil, fmt.Errorf("peerwake: SenderOptions.Name is %d bytes, more than %d", len(opts.Name), MaxKeyBytes)
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Dial == nil {
		var d net.Dialer
		opts.Dial = d.DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Sender{
		opts:    opts,
		log:     opts.Logger.Named("peerwake"),
		ctx:     ctx,
		cancel:  cancel,
		peers:   make(map[Peer]*peer),
		drained: make(chan struct{}),
		written: make(map[string]uint64),
	}, nil
}

// Send queues w for the receiver at to and returns at once; it never waits
// for the network. It returns an error wrapping ErrInvalidWake for an
// invalid wake or a HubChanged one (those travel only from a receiver,
// by Reply.Send), an error for a peer without address or secret,
// ErrClosed after Close, and ErrQueueFull (the wake is dropped and
// counted) when the peer's queue is full. A nil error means queued, not
// delivered: the wake may still be dropped (see SenderStats.Dropped). A
// HubWatch wake is sent like any other; the peer's answers reach OnReply.
// w.Reply is ignored.
func (s *Sender) Send(to Peer, w Wake) error {
	if err := w.Validate(); err != nil {
		return err
	}
	if w.Hub == HubChanged {
		return fmt.Errorf("%w: HubChanged travels only from a receiver back to a sender", ErrInvalidWake)
	}
	w.Reply = nil
	if to.Addr == "" {
		return errors.New("peerwake: Send: peer without address")
	}
	if to.Secret.IsZero() {
		return errors.New("peerwake: Send: peer without secret")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	p := s.peers[to]
	if p == nil {
		p = &peer{to: to, queue: make(chan Wake, s.opts.QueueLen)}
		s.peers[to] = p
		s.wg.Add(1)
		go s.run(p)
	}
	select {
	case p.queue <- w:
		s.pending++
		return nil
	default:
		s.dropped.Add(1)
		return ErrQueueFull
	}
}

// Stats returns the sender's counters.
func (s *Sender) Stats() SenderStats {
	s.mu.Lock()
	peers := len(s.peers)
	s.mu.Unlock()
	return SenderStats{
		Sent:            s.sent.Load(),
		Dropped:         s.dropped.Load(),
		DialFailures:    s.dialFailures.Load(),
		WriteFailures:   s.writeFailures.Load(),
		Peers:           peers,
		RepliesReceived: s.repliesReceived.Load(),
		RepliesRefused:  s.repliesRefused.Load(),
	}
}

// WrittenTo returns, per Peer.Name, how many frames were written to
// connections to peers of that name (Sent, split by name; peers without
// a Name are left out), since the name was first written to or last
// forgotten. Written means handed to the connection, not read by the
// receiver; hellos are not counted.
func (s *Sender) WrittenTo() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.written))
	for name, n := range s.written {
		out[name] = n
	}
	return out
}

// ForgetWritten forgets the WrittenTo counts of the names keep refuses,
// so that a caller whose peers come and go keeps them bounded. A name
// written to again counts from zero.
func (s *Sender) ForgetWritten(keep func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.written {
		if !keep(name) {
			delete(s.written, name)
		}
	}
}

// Drain waits until every wake queued before it was called (and any
// queued meanwhile) has been written or dropped, or until ctx ends: a
// graceful stop calls it before Close so that its last wakes (a lease
// hand-off) leave.
func (s *Sender) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.pending == 0 {
			s.mu.Unlock()
			return nil
		}
		ch := s.drained
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settle records n queued wakes written or dropped.
func (s *Sender) settle(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending -= n
	if s.pending <= 0 {
		s.pending = 0
		close(s.drained)
		s.drained = make(chan struct{})
	}
}

// Close stops every peer goroutine, closing their connections and
// dropping (and counting) the wakes still queued, and waits for them and
// for their connections' readers (so no OnReply call is in progress).
// Send after Close returns ErrClosed. Close always returns nil; later
// calls do nothing more.
func (s *Sender) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// conn is a peer goroutine's connection, with the goroutine that reads the
// receiver's replies from it and notices when the receiver closes it.
type conn struct {
	c        net.Conn
	dialedAt time.Time
	dead     chan struct{} // closed when the reader returns: the connection has ended
	stop     func() bool   // unregisters the Close hook
}

// run is a peer's goroutine: it takes wakes off the queue, writes them and
// ends on Close or after IdleTimeout without wakes.
func (s *Sender) run(p *peer) {
	defer s.wg.Done()
	defer s.opts.hooks.exited(p.to.Addr)
	var (
		cn      *conn
		fails   int       // consecutive failures, for backoff
		retryAt time.Time // no dial before this
		buf     []byte
		mac     = newMAC(p.to.Secret)
		id      = p.to.Secret.KeyID()
		idle    = time.NewTimer(s.opts.IdleTimeout)
	)
	defer idle.Stop()
	hangUp := func() {
		if cn == nil {
			return
		}
		cn.stop()
		_ = cn.c.Close()
		<-cn.dead
		cn = nil
	}
	// failed closes the connection, if any, and schedules the next dial.
	failed := func() {
		if cn != nil && time.Since(cn.dialedAt) >= s.opts.MaxBackoff {
			fails = 0 // the connection served a while: a fresh failure
		}
		hangUp()
		fails++
		retryAt = time.Now().Add(s.backoff(fails))
	}
	for {
		var dead chan struct{}
		if cn != nil {
			dead = cn.dead
		}
		select {
		case <-s.ctx.Done():
			hangUp()
			s.mu.Lock()
			delete(s.peers, p.to)
			s.mu.Unlock()
			n := len(p.queue)
			s.dropped.Add(uint64(n))
			s.settle(n)
			return
		case <-dead:
			s.log.Debug("peer wake connection closed by peer", zap.String("peer", p.to.Addr))
			failed()
		case <-idle.C:
			s.mu.Lock()
			if len(p.queue) == 0 {
				delete(s.peers, p.to)
				s.mu.Unlock()
				hangUp()
				return
			}
			s.mu.Unlock()
			idle.Reset(s.opts.IdleTimeout)
		case w := <-p.queue:
			var n int
			buf, n = appendBatch(buf[:0], mac, id, s.opts.Now, w, p.queue)
			out := buf
			if cn == nil && !time.Now().Before(retryAt) {
				var err error
				if cn, err = s.dial(p.to); err != nil {
					if s.ctx.Err() == nil {
						s.dialFailures.Add(1)
						s.log.Debug("peer wake dial failed", zap.String("peer", p.to.Addr), zap.Error(err))
						failed()
					}
				} else if p.to.Hello && s.opts.Name != "" {
					// A new connection: the hello goes first, in the
					// same write.
					out = append(s.appendHello(nil, mac, id), buf...)
				}
			}
			switch {
			case cn == nil:
				s.dropped.Add(uint64(n))
			case s.write(cn, out) != nil:
				s.dropped.Add(uint64(n))
				if s.ctx.Err() == nil {
					s.writeFailures.Add(1)
					s.log.Debug("peer wake write failed", zap.String("peer", p.to.Addr))
					failed()
				}
			default:
				s.sent.Add(uint64(n))
				if p.to.Name != "" {
					s.mu.Lock()
					s.written[p.to.Name] += uint64(n)
					s.mu.Unlock()
				}
			}
			s.settle(n)
			s.opts.hooks.batchDone(p.to.Addr)
			idle.Reset(s.opts.IdleTimeout)
		}
	}
}

// appendBatch encodes w and the wakes already queued behind it, up to
// maxBatchBytes, into buf, each frame stamped with now() and a fresh
// nonce; it returns buf and the number of frames. Senders batch wakes and
// receivers replies with it.
func appendBatch(buf []byte, mac hash.Hash, id KeyID, now func() time.Time, w Wake, queue chan Wake) ([]byte, int) {
	n := 0
	for {
		var nonce [nonceBytes]byte
		_, _ = rand.Read(nonce[:]) // never fails (crypto/rand since Go 1.24)
		buf = appendFrame(buf, mac, id, now(), nonce, w)
		n++
		if len(buf)+prefixBytes+MaxFrameBytes > maxBatchBytes {
			return buf, n
		}
		select {
		case w = <-queue:
		default:
			return buf, n
		}
	}
}

// appendHello appends a hello frame naming this sender to buf.
func (s *Sender) appendHello(buf []byte, mac hash.Hash, id KeyID) []byte {
	var nonce [nonceBytes]byte
	_, _ = rand.Read(nonce[:])
	return appendFrame(buf, mac, id, s.opts.Now(), nonce, Wake{Hub: hubHello, Key: s.opts.Name})
}

// dial connects to the peer and starts the connection's reader (see
// readReplies).
func (s *Sender) dial(to Peer) (*conn, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.DialTimeout)
	defer cancel()
	c, err := s.opts.Dial(ctx, "tcp", to.Addr)
	if err != nil {
		return nil, fmt.Errorf("peerwake: dialing %s: %w", to.Addr, err)
	}
	cn := &conn{c: c, dialedAt: time.Now(), dead: make(chan struct{})}
	// Close interrupts a write or read in progress.
	cn.stop = context.AfterFunc(s.ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	go s.readReplies(to, cn) // owned by the peer goroutine: hangUp waits for it
	return cn, nil
}

// readReplies reads the frames the peer writes back on cn, replies to the
// watches sent there, until the connection ends (the peer or hangUp closes
// it) or carries a frame it refuses, which closes it; then it closes
// cn.dead. It checks what a receiver checks, in the same order, with the
// peer's secret, except the nonce (see the package documentation): the
// length bounds, the version and hub (0xD2 HubChanged only) and field
// consistency, the KeyID, the MAC and the window.
func (s *Sender) readReplies(to Peer, cn *conn) {
	defer close(cn.dead)
	var (
		prefix   [prefixBytes]byte
		buf      = make([]byte, MaxFrameBytes)
		scratch  = make([]byte, 0, MACBytes)
		id       = to.Secret.KeyID()
		mac      = newMAC(to.Secret)
		windowMs = s.opts.ReplyWindow.Milliseconds()
	)
	refuse := func(reason string) {
		s.repliesRefused.Add(1)
		s.log.Debug("peer wake reply refused; closing the connection", zap.String("reason", reason), zap.String("peer", to.Addr))
		_ = cn.c.Close()
		s.opts.hooks.replyDone(to.Addr)
	}
	for {
		if _, err := io.ReadFull(cn.c, prefix[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				refuse("truncated length prefix")
			}
			return // EOF between frames, or closed
		}
		n := int(binary.BigEndian.Uint16(prefix[:]))
		if n < MinFrameBytes || n > MaxFrameBytes {
			refuse("frame length out of bounds")
			return
		}
		if _, err := io.ReadFull(cn.c, buf[:n]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				refuse("truncated frame")
			}
			return
		}
		f, err := authenticate(buf[:n], toSender, id, mac, scratch)
		switch {
		case errors.Is(err, errUnknownKey):
			refuse("unknown key id")
			return
		case errors.Is(err, errBadMAC):
			refuse("bad MAC")
			return
		case err != nil:
			refuse("malformed frame")
			return
		}
		now := s.opts.Now().UnixMilli()
		if f.sentAt < now-windowMs || f.sentAt > now+windowMs {
			s.repliesRefused.Add(1)
			s.opts.hooks.replyDone(to.Addr)
			continue
		}
		s.repliesReceived.Add(1)
		if s.opts.OnReply != nil {
			s.opts.OnReply(to, f.wake)
		}
		s.opts.hooks.replyDone(to.Addr)
	}
}

func (s *Sender) write(cn *conn, buf []byte) error {
	if err := cn.c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout)); err != nil {
		return err
	}
	// Close's hook sets a past deadline after the context is cancelled: if
	// it has not run yet it will, and if it ran, this deadline replaced
	// it, so look.
	if err := s.ctx.Err(); err != nil {
		return err
	}
	_, err := cn.c.Write(buf)
	return err
}

// backoff returns the pause after the fails-th consecutive failure:
// MinBackoff doubled per failure, capped at MaxBackoff, jittered down by up
// to half so that senders do not redial in step.
func (s *Sender) backoff(fails int) time.Duration {
	d := s.opts.MinBackoff
	for i := 1; i < fails && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.opts.MaxBackoff)
	if d <= 1 {
		return d
	}
	return d - mrand.N(d/2)
}
