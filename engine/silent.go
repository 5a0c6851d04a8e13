package engine

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// A silent channel: a peer's heartbeat reports wake frames written to
// this replica (its sender's peerwake.Sender.WrittenTo, published as
// wakesSent), and this replica's receiver got none of them
// (peerwake.Receiver.ReceivedFrom, counted per sender by the hello that
// names each connection). A firewall, a NAT or an advertised address that
// reaches another process looks like that: the sender's writes succeed
// and nothing arrives, and the start-up check of the endpoint cannot see
// it. The feed still brings the work, late; the check makes it visible
// (a log line, MetricPeerWakeSilent, PeerWakeStats.PeersSilent).

// silentMinSends is how many frames a peer must report written here,
// after the last that arrived, for nothing arriving to count as a silent
// channel. More than one: a frame written into a connection the receiver
// is closing (its idle timeout), or to an address this replica has just
// left, is lost in the normal course (peerwake's Transport); three is
// more than those, and still few enough for a lightly used channel.
const silentMinSends = 3

// peerSilence is what a session's check knows of one peer's channel to
// this replica. The check runs every ViewRefresh on the session's
// goroutine; nothing else touches it.
type peerSilence struct {
	seen   bool
	inc    string    // the peer's incarnation, as its heartbeat names it
	prev   uint64    // its count reported at the previous check
	recv   uint64    // frames received from it, at the previous check
	recvAt time.Time // the check that saw recv grow last (or the first check)
	// base is the peer's count at a check at least the margin after
	// recvAt (hasBase): every frame that arrived by recvAt is in it, so
	// frames it reports beyond base were written after the last arrival.
	base    uint64
	hasBase bool
	silent  bool
}

// silenceChange is what one observation changed.
type silenceChange int

const (
	silenceSame silenceChange = iota
	silenceFound
	silenceEnded
)

// observe takes the peer's latest report (its incarnation inc and the
// frames it reports written to this replica) and the frames received
// from it, at a check at now. margin bounds how long before a check the
// heartbeat it reads may have been written (the peer's last heartbeat
// seen at most the lease expiry ago, read within the watch's idle
// ceiling). judged reports whether the report was compared with what
// arrived (a base was in place).
//
// The channel is silent when the count reported at the previous check
// (so that the frames it counts have had a check interval to arrive)
// exceeds the base by silentMinSends and nothing arrived since. It stops
// being silent when a frame arrives. A new incarnation, or a count that
// falls, starts the counting over without a verdict.
func (p *peerSilence) observe(now time.Time, inc string, sent, recv uint64, margin time.Duration) (ch silenceChange, judged bool) {
	if !p.seen {
		*p = peerSilence{seen: true, inc: inc, prev: sent, recv: recv, recvAt: now}
		return silenceSame, false
	}
	switch {
	case recv > p.recv:
		p.recvAt, p.hasBase = now, false
		if p.silent {
			p.silent, ch = false, silenceEnded
		}
	case recv < p.recv:
		// The receiver forgot the name meanwhile (ForgetSenders) and
		// counts anew: not an arrival.
	}
	p.recv = recv
	if inc != p.inc || sent < p.prev {
		p.inc, p.prev, p.hasBase = inc, sent, false
		return ch, false
	}
	if p.hasBase {
		judged = true
		if !p.silent && p.prev >= p.base+silentMinSends {
			p.silent, ch = true, silenceFound
		}
	} else if now.Sub(p.recvAt) >= margin {
		p.base, p.hasBase = sent, true
	}
	p.prev = sent
	return ch, judged
}

// silentMargin is the margin of peerSilence.observe: a live peer's
// heartbeat was seen less than the lease expiry ago, and the lease watch
// reads at least once per WatchIdleCeiling, so the version a check reads
// was written at most their sum before it.
func (e *Engine) silentMargin() time.Duration {
	return e.opts.Leases.Expiry + e.opts.Leases.WatchIdleCeiling
}

// silentLoop compares, every ViewRefresh while session s lasts, each live
// peer's reported wake frames to this replica with those its receiver
// got (peerSilence), logs and counts a channel found silent or working
// again, and keeps the sender's and receiver's per-name counts to the
// live peers.
func (e *Engine) silentLoop(s *session) {
	w := e.wake
	peers := map[string]*peerSilence{}
	defer e.met.peersSilent.Store(0)
	for e.sleep(s.ctx, w.opts.ViewRefresh) {
		e.checkSilence(s, peers)
	}
}

// checkSilence is one round of silentLoop.
func (e *Engine) checkSilence(s *session, peers map[string]*peerSilence) {
	w := e.wake
	reports := s.store.WakesReported()
	recv := s.recv.ReceivedFrom()
	now := e.clk.Now()
	live := make(map[string]bool, len(reports))
	for _, r := range reports {
		live[r.Replica] = true
		p := peers[r.Replica]
		if p == nil {
			p = &peerSilence{}
			peers[r.Replica] = p
		}
		ch, judged := p.observe(now, r.Incarnation, r.Sent, recv[r.Replica], e.silentMargin())
		if judged {
			w.silenceChecks.Add(1)
		}
		switch ch {
		case silenceFound:
			w.silentFound.Add(1)
			e.met.silent.Add(context.Background(), 1)
			e.log.Warn("peer wake channel silent: a peer reports wakes written to this replica and none arrived; check that it can reach the advertised address",
				zap.String("peer", r.Replica), zap.String("advertised", e.advertised(s)),
				zap.Uint64("reported", p.prev-p.base), zap.Duration("since", now.Sub(p.recvAt)))
		case silenceEnded:
			e.log.Info("peer wake channel works again: wakes from the peer arrive", zap.String("peer", r.Replica))
		}
	}
	for name, p := range peers {
		if !live[name] {
			if p.silent {
				e.log.Info("peer wake channel no longer checked: the peer left", zap.String("peer", name))
			}
			delete(peers, name)
		}
	}
	var n int64
	for _, p := range peers {
		if p.silent {
			n++
		}
	}
	e.met.peersSilent.Store(n)
	// The counts of replicas gone are of no use any more.
	keep := func(name string) bool { return live[name] }
	w.sender.ForgetWritten(keep)
	s.recv.ForgetSenders(keep)
}

// advertised is the peer wake address session s publishes (its
// heartbeat's), for log lines.
func (e *Engine) advertised(s *session) string {
	ep, _ := s.store.WakeEndpoint(e.opts.ReplicaID)
	return ep.Addr
}
