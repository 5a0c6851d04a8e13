package peerwake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Watches and replies: a HubWatch frame reaches OnWake with a Reply, and
// the HubChanged frames given to it travel back on the same connection.

// readFrame reads one frame from c and returns it without its length
// prefix.
func readFrame(t testing.TB, c net.Conn) []byte {
	t.Helper()
	var prefix [prefixBytes]byte
	_, err := io.ReadFull(c, prefix[:])
	require.NoError(t, err)
	b := make([]byte, binary.BigEndian.Uint16(prefix[:]))
	_, err = io.ReadFull(c, b)
	require.NoError(t, err)
	return b
}

// requireEOFAfterDrain reads c until the other end closes it, discarding
// what it wrote first; a hang deadline is a failure.
func requireEOFAfterDrain(t testing.TB, c net.Conn) {
	t.Helper()
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection not closed by the other end")
	}
}

// waitClosed waits until ch is closed.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangDeadline):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// requireOpen asserts that ch is not closed.
func requireOpen(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s closed", what)
	default:
	}
}

func watchOf(key string) Wake { return Wake{Hub: HubWatch, Slot: 42, Key: key} }

func changedOf(key string) Wake { return Wake{Hub: HubChanged, Slot: 42, Key: key} }

// A raw client's watch reaches OnWake with a Reply; what is sent on it
// comes back on the same connection as 0xD2 HubChanged frames signed with
// the receiver's current secret and stamped with its clock; ordinary wakes
// carry no Reply, and every watch of a connection carries the same one.
func TestReceiverReplies(t *testing.T) {
	clk := newFakeClock()
	s, next := mustSecret(t), mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
	c := dialRaw(t, r)
	write(t, c, encode(s, clk.Now(), nonceOf(1), wake("plain")), encode(s, clk.Now(), nonceOf(2), watchOf("w1")), encode(s, clk.Now(), nonceOf(3), watchOf("w2")))
	plain, w1, w2 := sink.next(t), sink.next(t), sink.next(t)
	require.Nil(t, plain.Reply)
	require.Equal(t, HubWatch, w1.Hub)
	require.Equal(t, "w1", w1.Key)
	require.True(t, w1.VisibleAt.IsZero())
	require.NotNil(t, w1.Reply)
	require.Same(t, w1.Reply, w2.Reply, "one Reply per connection")
	requireOpen(t, w1.Reply.Done(), "Done")

	tests := []struct {
		name   string
		secret Secret // the receiver's secret when the reply is sent
		key    string
		slot   int
	}{
		{"first", s, "w1", 42},
		{"second", s, "w2", 7},
		{"after SetSecret: signed with the new secret", next, "w1", 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, r.SetSecret(tt.secret))
			clk.Advance(time.Second)
			require.True(t, w1.Reply.Send(Wake{Hub: HubChanged, Slot: tt.slot, Key: tt.key}))
			b := readFrame(t, c)
			require.Equal(t, frameVersionWatch, b[offVersion])
			f, err := authenticate(b, toSender, tt.secret.KeyID(), newMAC(tt.secret), nil)
			require.NoError(t, err)
			require.Equal(t, HubChanged, f.wake.Hub)
			require.Equal(t, tt.key, f.wake.Key)
			require.Equal(t, tt.slot, f.wake.Slot)
			require.Equal(t, clk.Now().UnixMilli(), f.sentAt)
			_, err = authenticate(b, toReceiver, tt.secret.KeyID(), newMAC(tt.secret), nil)
			require.ErrorIs(t, err, errMalformed, "a reply is not a wake")
		})
	}
	require.NoError(t, r.Close())
	st := r.Stats()
	require.Equal(t, uint64(len(tests)), st.RepliesSent)
	require.Zero(t, st.RepliesDropped)
	require.Equal(t, uint64(3), st.Accepted)
	waitClosed(t, w1.Reply.Done(), "Done after Close")
}

// Reply.Send refuses, and counts, what is not a valid HubChanged wake; a
// nil Reply drops and is done.
func TestReplySendInvalid(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
	c := dialRaw(t, r)
	write(t, c, encode(s, clk.Now(), nonceOf(1), watchOf("w")))
	rep := sink.next(t).Reply
	tests := []struct {
		name string
		w    Wake
	}{
		{"orchestrator hub", Wake{Hub: HubOrchestrator, Slot: 1, Key: "k"}},
		{"watch hub", Wake{Hub: HubWatch, Slot: 1, Key: "k"}},
		{"empty key", Wake{Hub: HubChanged, Slot: 1}},
		{"slot 256", Wake{Hub: HubChanged, Slot: 256, Key: "k"}},
		{"key too long", Wake{Hub: HubChanged, Slot: 1, Key: strings.Repeat("k", MaxKeyBytes+1)}},
		{"no hub", Wake{Slot: 1, Key: "k"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.False(t, rep.Send(tt.w))
			require.Equal(t, uint64(i+1), r.Stats().RepliesDropped)
		})
	}
	require.Zero(t, r.Stats().RepliesSent)
	requireOpen(t, rep.Done(), "Done")

	var none *Reply
	require.False(t, none.Send(changedOf("k")))
	waitClosed(t, none.Done(), "a nil Reply's Done")
}

// However the connection ends, Done is closed and Send drops (and counts).
func TestReplyAfterConnectionEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(t *testing.T, r *Receiver, c net.Conn, s Secret, clk *fakeClock)
	}{
		{"client closes", func(t *testing.T, _ *Receiver, c net.Conn, _ Secret, _ *fakeClock) {
			require.NoError(t, c.Close())
		}},
		{"bad frame", func(t *testing.T, _ *Receiver, c net.Conn, _ Secret, _ *fakeClock) {
			flush(t, c)
		}},
		{"changed frame from the client", func(t *testing.T, _ *Receiver, c net.Conn, s Secret, clk *fakeClock) {
			write(t, c, encode(s, clk.Now(), nonceOf(2), changedOf("w")))
			requireClosedByPeer(t, c)
		}},
		{"receiver closes", func(t *testing.T, r *Receiver, _ net.Conn, _ Secret, _ *fakeClock) {
			require.NoError(t, r.Close())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			s := mustSecret(t)
			r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now})
			c := dialRaw(t, r)
			write(t, c, encode(s, clk.Now(), nonceOf(1), watchOf("w")))
			rep := sink.next(t).Reply
			tt.end(t, r, c, s, clk)
			waitClosed(t, rep.Done(), "Done")
			require.False(t, rep.Send(changedOf("w")))
			st := r.Stats()
			require.Equal(t, uint64(1), st.RepliesDropped)
			require.Zero(t, st.RepliesSent)
		})
	}
}

// heldWriter is a receiver hook that holds the reply writer before each
// write until released, and reports each arrival.
type heldWriter struct {
	entered chan net.Conn
	release chan struct{}
	once    sync.Once
}

func newHeldWriter() *heldWriter {
	return &heldWriter{entered: make(chan net.Conn, 1<<10), release: make(chan struct{})}
}

func (h *heldWriter) hooks() *receiverHooks {
	return &receiverHooks{beforeReplyWrite: func(c net.Conn) {
		h.entered <- c
		<-h.release
	}}
}

func (h *heldWriter) let() { h.once.Do(func() { close(h.release) }) }

// With the writer held, the queue takes replyQueueLen replies and drops
// the next; once released, every queued reply is written.
func TestReplyQueueFull(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	held := newHeldWriter()
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, hooks: held.hooks()})
	t.Cleanup(held.let)
	c := dialRaw(t, r)
	write(t, c, encode(s, clk.Now(), nonceOf(1), watchOf("w")))
	rep := sink.next(t).Reply
	require.True(t, rep.Send(changedOf("first")))
	waitFor(t, held.entered, "the writer at its first write") // it holds "first"
	for i := range replyQueueLen {
		require.True(t, rep.Send(changedOf(fmt.Sprint("q", i))), "reply %d", i)
	}
	require.False(t, rep.Send(changedOf("over")))
	require.Equal(t, uint64(1), r.Stats().RepliesDropped)
	held.let()
	keys := []string{"first"}
	for i := range replyQueueLen {
		keys = append(keys, fmt.Sprint("q", i))
	}
	for _, want := range keys {
		f, err := authenticate(readFrame(t, c), toSender, s.KeyID(), newMAC(s), nil)
		require.NoError(t, err)
		require.Equal(t, want, f.wake.Key, "in order")
	}
	require.NoError(t, r.Close())
	st := r.Stats()
	require.Equal(t, uint64(1+replyQueueLen), st.RepliesSent)
	require.Equal(t, uint64(1), st.RepliesDropped)
}

// Replies queued, or being written, when the connection ends are dropped
// and counted.
func TestReplyQueuedDroppedAtEnd(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	held := newHeldWriter()
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, hooks: held.hooks()})
	t.Cleanup(held.let)
	c := dialRaw(t, r)
	write(t, c, encode(s, clk.Now(), nonceOf(1), watchOf("w")))
	rep := sink.next(t).Reply
	require.True(t, rep.Send(changedOf("being written")))
	waitFor(t, held.entered, "the writer at its first write")
	for i := range 3 {
		require.True(t, rep.Send(changedOf(fmt.Sprint("queued-", i))))
	}
	require.NoError(t, c.Close())
	waitClosed(t, rep.Done(), "Done")
	held.let() // the write fails on the closed connection
	require.NoError(t, r.Close())
	st := r.Stats()
	require.Zero(t, st.RepliesSent)
	require.Equal(t, uint64(4), st.RepliesDropped)
}

// A failed reply write (here its deadline has passed) ends the connection:
// the client sees it closed and Done is closed.
func TestReplyWriteFailureEndsConnection(t *testing.T) {
	clk := newFakeClock()
	s := mustSecret(t)
	core, logs := observer.New(zap.DebugLevel)
	r, sink := startReceiver(t, ReceiverOptions{Secret: s, Now: clk.Now, Logger: zap.New(core), hooks: &receiverHooks{
		beforeReplyWrite: func(c net.Conn) { _ = c.SetWriteDeadline(time.Unix(1, 0)) },
	}})
	c := dialRaw(t, r)
	write(t, c, encode(s, clk.Now(), nonceOf(1), watchOf("secret-instance-id")))
	rep := sink.next(t).Reply
	require.True(t, rep.Send(changedOf("secret-instance-id")))
	requireClosedByPeer(t, c)
	waitClosed(t, rep.Done(), "Done")
	require.NoError(t, r.Close())
	st := r.Stats()
	require.Zero(t, st.RepliesSent)
	require.Equal(t, uint64(1), st.RepliesDropped)
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		for _, bad := range []string{"secret-instance-id", s.Encode()} {
			require.NotContains(t, line, bad)
		}
	}
}

// replySink collects OnReply calls.
type replySink struct {
	ch chan peerReply
}

type peerReply struct {
	from Peer
	w    Wake
}

func newReplySink() *replySink { return &replySink{ch: make(chan peerReply, 1<<10)} }

func (s *replySink) onReply(from Peer, w Wake) {
	select {
	case s.ch <- peerReply{from, w}:
	default:
		panic("replySink full") // tests never send that many
	}
}

func (s *replySink) requireNone(t testing.TB) {
	t.Helper()
	select {
	case got := <-s.ch:
		t.Fatalf("unexpected reply %q", got.w.Key)
	default:
	}
}

// answerWatches is an OnWake that answers every watch at once, and hands
// every wake to sink.
func answerWatches(sink *wakeSink) func(Wake) {
	return func(w Wake) {
		if w.Hub == HubWatch {
			w.Reply.Send(Wake{Hub: HubChanged, Slot: w.Slot, Key: w.Key})
		}
		sink.onWake(w)
	}
}

// End to end: a Sender's watch reaches the Receiver's OnWake, whose reply
// reaches the Sender's OnReply, from the right peer, on the one connection
// that also carries ordinary wakes.
func TestWatchEndToEnd(t *testing.T) {
	secret := mustSecret(t)
	sink := newWakeSink()
	r, _ := startReceiver(t, ReceiverOptions{Secret: secret, OnWake: answerWatches(sink)})
	replies := newReplySink()
	s, probe := startSender(t, SenderOptions{OnReply: replies.onReply})
	to := peerOf(r, secret)
	tests := []Wake{
		{Hub: HubWatch, Slot: 42, Key: "instance-1"},
		{Hub: HubWatch, Slot: 0, Key: "instance-2"},
		{Hub: HubWatch, Slot: 255, Key: strings.Repeat("k", MaxKeyBytes)},
	}
	for i, w := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			require.NoError(t, s.Send(to, wake("plain")))
			require.NoError(t, s.Send(to, w))
			require.Nil(t, sink.next(t).Reply)
			require.NotNil(t, sink.next(t).Reply)
			got := waitFor(t, replies.ch, "reply")
			require.Equal(t, to, got.from)
			require.Equal(t, HubChanged, got.w.Hub)
			require.Equal(t, w.Slot, got.w.Slot)
			require.Equal(t, w.Key, got.w.Key)
			require.Nil(t, got.w.Reply)
			waitFor(t, probe.replies, "reply hook")
		})
	}
	require.NoError(t, s.Close())
	require.NoError(t, r.Close())
	sst, rst := s.Stats(), r.Stats()
	require.Equal(t, uint64(len(tests)), sst.RepliesReceived)
	require.Zero(t, sst.RepliesRefused)
	require.Equal(t, uint64(2*len(tests)), sst.Sent)
	require.Equal(t, uint64(len(tests)), rst.RepliesSent)
	require.Equal(t, uint64(2*len(tests)), rst.Accepted)
	require.Equal(t, uint64(1), rst.ConnsAccepted, "one connection both ways")
	replies.requireNone(t)
}

// Without OnReply, replies are read, counted and discarded.
func TestWatchWithoutOnReply(t *testing.T) {
	secret := mustSecret(t)
	sink := newWakeSink()
	r, _ := startReceiver(t, ReceiverOptions{Secret: secret, OnWake: answerWatches(sink)})
	s, probe := startSender(t, SenderOptions{})
	require.NoError(t, s.Send(peerOf(r, secret), watchOf("w")))
	waitFor(t, probe.replies, "reply")
	st := s.Stats()
	require.Equal(t, uint64(1), st.RepliesReceived)
	require.Zero(t, st.RepliesRefused)
}

// A reply signed with another secret than the one the sender holds for the
// peer (the receiver's secret replaced after the watch) is refused and
// closes the connection, which ends the receiver's Reply.
func TestSenderRefusesReplyWithOtherSecret(t *testing.T) {
	old, next := mustSecret(t), mustSecret(t)
	r, sink := startReceiver(t, ReceiverOptions{Secret: old})
	replies := newReplySink()
	s, probe := startSender(t, SenderOptions{OnReply: replies.onReply, MinBackoff: time.Hour, MaxBackoff: time.Hour})
	require.NoError(t, s.Send(peerOf(r, old), watchOf("w")))
	rep := sink.next(t).Reply
	require.NoError(t, r.SetSecret(next))
	require.True(t, rep.Send(changedOf("w")))
	waitFor(t, probe.replies, "refusal")
	waitClosed(t, rep.Done(), "the receiver's end of the connection")
	replies.requireNone(t)
	st := s.Stats()
	require.Equal(t, uint64(1), st.RepliesRefused)
	require.Zero(t, st.RepliesReceived)
}

// fakeReceiver is a listener whose accepted connection the test writes
// reply frames on, to test the sender's reader.
func fakeReceiver(t *testing.T) (net.Listener, func() net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	return ln, func() net.Conn {
		c := waitFor(t, accepted, "the sender's dial")
		require.NotNil(t, c)
		require.NoError(t, c.SetDeadline(time.Now().Add(hangDeadline)))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// What a sender's reader refuses: anything but a 0xD2 HubChanged frame
// signed with the peer's secret, naming its KeyID and sent within
// ReplyWindow. A refused frame closes the connection, except a stale one,
// which is dropped: the connection then carries a valid reply next.
func TestSenderReplyRefusals(t *testing.T) {
	secret, other := mustSecret(t), mustSecret(t)
	const window = 30 * time.Second
	ch := changedOf("i")
	sign := func(version byte, s Secret, id KeyID, at time.Time, w Wake) []byte {
		return appendFrameVersion(nil, version, newMAC(s), id, at, nonceOf(1), w)
	}
	valid := sign(frameVersionWatch, secret, secret.KeyID(), t0, ch)
	flipped := append([]byte(nil), valid...)
	flipped[len(flipped)-1] ^= 1
	tests := []struct {
		name     string
		frame    []byte
		closes   bool
		received uint64
		refused  uint64
	}{
		{"valid", valid, false, 1, 0},
		{"window edge", sign(frameVersionWatch, secret, secret.KeyID(), t0.Add(-window), ch), false, 1, 0},
		{"stale", sign(frameVersionWatch, secret, secret.KeyID(), t0.Add(-window-time.Millisecond), ch), false, 0, 1},
		{"future", sign(frameVersionWatch, secret, secret.KeyID(), t0.Add(window+time.Millisecond), ch), false, 0, 1},
		{"unknown key id", sign(frameVersionWatch, other, other.KeyID(), t0, ch), true, 0, 1},
		{"bad MAC", sign(frameVersionWatch, other, secret.KeyID(), t0, ch), true, 0, 1},
		{"flipped MAC bit", flipped, true, 0, 1},
		{"changed with version 0xD1", sign(frameVersion, secret, secret.KeyID(), t0, ch), true, 0, 1},
		{"wake hub", sign(frameVersion, secret, secret.KeyID(), t0, wake("i")), true, 0, 1},
		{"wake hub with version 0xD2", sign(frameVersionWatch, secret, secret.KeyID(), t0, wake("i")), true, 0, 1},
		{"watch hub", sign(frameVersionWatch, secret, secret.KeyID(), t0, watchOf("i")), true, 0, 1},
		{"oversize prefix", []byte{0xFF, 0xFF}, true, 0, 1},
		{"zero prefix", []byte{0, 0}, true, 0, 1},
		{"garbage", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), true, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			ln, accept := fakeReceiver(t)
			replies := newReplySink()
			s, probe := startSender(t, SenderOptions{Now: clk.Now, ReplyWindow: window, OnReply: replies.onReply, MinBackoff: time.Hour, MaxBackoff: time.Hour})
			to := Peer{Addr: ln.Addr().String(), Secret: secret}
			require.NoError(t, s.Send(to, watchOf("i")))
			c := accept()
			write(t, c, tt.frame)
			waitFor(t, probe.replies, "the frame read")
			if tt.closes {
				requireEOFAfterDrain(t, c)
			} else {
				// The connection still carries replies.
				write(t, c, sign(frameVersionWatch, secret, secret.KeyID(), t0, changedOf("after")))
				waitFor(t, probe.replies, "the next frame read")
				tt.received++
			}
			st := s.Stats()
			require.Equal(t, tt.received, st.RepliesReceived)
			require.Equal(t, tt.refused, st.RepliesRefused)
			for range tt.received {
				got := waitFor(t, replies.ch, "reply")
				require.Equal(t, to, got.from)
			}
			replies.requireNone(t)
		})
	}
}

// A reply cut short by the end of the connection is refused.
func TestSenderReplyTruncated(t *testing.T) {
	secret := mustSecret(t)
	valid := encode(secret, t0, nonceOf(1), changedOf("instance"))
	for _, n := range []int{1, prefixBytes + 1, len(valid) - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			clk := newFakeClock()
			ln, accept := fakeReceiver(t)
			s, probe := startSender(t, SenderOptions{Now: clk.Now, MinBackoff: time.Hour, MaxBackoff: time.Hour})
			require.NoError(t, s.Send(Peer{Addr: ln.Addr().String(), Secret: secret}, watchOf("i")))
			c := accept()
			write(t, c, valid[:n])
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			waitFor(t, probe.replies, "the frame read")
			require.Equal(t, uint64(1), s.Stats().RepliesRefused)
		})
	}
}

// peerwakeGoroutines returns the stacks of goroutines running this
// package's Receiver, Sender or Reply code.
func peerwakeGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, fn := range []string{"peerwake.(*Receiver)", "peerwake.(*Sender)", "peerwake.(*Reply)"} {
			if strings.Contains(g, fn) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}

// requireNoPeerwakeGoroutines waits for this package's goroutines to be
// gone: a goroutine that has signalled its wait group may still be
// returning.
func requireNoPeerwakeGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(hangDeadline)
	for {
		left := peerwakeGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after Close:\n%s", strings.Join(left, "\n\n"))
		}
		runtime.Gosched()
	}
}

// Close of Receivers and Senders that carried watches, with reply writers
// held and replies queued, leaves none of their goroutines: accept loop,
// connection readers, reply writers, peer goroutines and their
// connections' reply readers; whichever side closes first.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	for _, senderFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("sender first ", senderFirst), func(t *testing.T) {
			requireNoPeerwakeGoroutines(t) // nothing left from earlier tests
			secret := mustSecret(t)
			sink := newWakeSink()
			held := newHeldWriter()
			r, err := NewReceiver(ReceiverOptions{Listen: "127.0.0.1:0", Secret: secret, OnWake: sink.onWake, hooks: held.hooks()})
			require.NoError(t, err)
			to := peerOf(r, secret)
			var (
				senders []*Sender
				reps    []*Reply
			)
			for i := range 2 {
				replies := newReplySink()
				s, err := NewSender(SenderOptions{OnReply: replies.onReply})
				require.NoError(t, err)
				senders = append(senders, s)
				require.NoError(t, s.Send(to, watchOf(fmt.Sprint("w", i))))
				rep := sink.next(t).Reply
				reps = append(reps, rep)
				require.True(t, rep.Send(changedOf("being written")))
				waitFor(t, held.entered, "the writer")
				require.True(t, rep.Send(changedOf("queued")))
			}
			require.NotEmpty(t, peerwakeGoroutines())
			if senderFirst {
				for _, s := range senders {
					require.NoError(t, s.Close())
				}
				for _, rep := range reps {
					waitClosed(t, rep.Done(), "the receiver's end of the connection")
				}
				held.let() // the writes fail on closed connections
				require.NoError(t, r.Close())
				require.Equal(t, uint64(4), r.Stats().RepliesDropped, "being written and queued, per connection")
			} else {
				held.let()
				require.NoError(t, r.Close())
				for _, rep := range reps {
					waitClosed(t, rep.Done(), "Done after Close")
				}
				for _, s := range senders {
					require.NoError(t, s.Close())
				}
				st := r.Stats()
				require.Equal(t, uint64(4), st.RepliesSent+st.RepliesDropped)
			}
			requireNoPeerwakeGoroutines(t)
		})
	}
}
