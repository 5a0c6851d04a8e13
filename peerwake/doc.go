// Package peerwake is the peer wake channel: right after a writer commits
// a document in a dispatch slot, it sends a small authenticated message to
// the replica that owns the slot, which signals its wakeup hub exactly as
// its change-feed handler would on reading the write. The owner then sees
// the work at once instead of at its next change-feed read.
//
// The change feed remains the source of truth. A wake that is lost, late,
// duplicated, forged or refused costs latency, never correctness: a wake
// only makes the owner look at an instance it would look at anyway once
// the feed delivers the write, and looking finds nothing if there is
// nothing. So every failure here is handled by dropping and counting.
//
//	// owner
//	secret, _ := peerwake.NewSecret()
//	r, _ := peerwake.NewReceiver(peerwake.ReceiverOptions{
//		Listen: ":7070", Secret: secret,
//		OnWake: func(w peerwake.Wake) { hubs[w.Hub].Signal(w.Slot, w.Key, w.VisibleAt) },
//	})
//	defer r.Close()
//	// publish host:port and secret.Encode() in the heartbeat document
//
//	// writer
//	s, _ := peerwake.NewSender(peerwake.SenderOptions{})
//	defer s.Close()
//	_ = s.Send(peerwake.Peer{Addr: addr, Secret: sec}, peerwake.Wake{
//		Hub: peerwake.HubOrchestrator, Slot: slot, Key: instanceID, VisibleAt: visibleAt,
//	})
//
// # Keys
//
// Each receiver incarnation draws a fresh Secret (32 random bytes) and
// publishes it, with its address, in its heartbeat document in Cosmos DB;
// senders read it there. The secret is the HMAC-SHA256 key. Its KeyID (8
// bytes of a domain-separated SHA-256 of it) names it on the wire, so a
// receiver refuses a frame signed with another secret (a previous
// incarnation's, or one replaced with Receiver.SetSecret) by comparing 8
// bytes. A Sender identifies a peer by address and secret, so a new
// incarnation at a reused address gets a fresh queue and connection.
//
// # Frame
//
// On a TCP stream, each frame is preceded by its length, a big-endian
// uint16 counting the frame's bytes. A frame is, big-endian:
//
//	offset size field
//	     0    1 version: 0xD1, 0xD2 or 0xD3 (magic and format version in one byte)
//	     1    8 KeyID of the signing secret
//	     9    8 sent-at, Unix milliseconds (signed)
//	    17    8 nonce, random
//	    25    1 hub: 'o' (HubOrchestrator), 'w' (HubWorker), 'l' (HubLeases),
//	             'v' (HubWatch), 'c' (HubChanged) or 'h' (hello)
//	    26    2 slot, 0..255
//	    28    8 visible-at, Unix milliseconds (signed), rounded up
//	    36    2 key length, 1..MaxKeyBytes (1100)
//	    38    n key
//	  38+n   32 HMAC-SHA256(secret, bytes 0 .. 38+n-1)
//
// so a frame has MinFrameBytes (71) to MaxFrameBytes (1170) bytes. A
// receiver reads the prefix, refuses a length outside those bounds before
// reading anything more, and then reads exactly that many bytes. The tag
// is the full 32-byte HMAC-SHA256. A tag truncated to 16 bytes would be
// secure too (each forgery attempt costs the attacker a connection), but
// it saves 16 bytes per frame, which matters nowhere at one frame per
// commit, and the full tag needs no argument.
//
// The hub byte is checked against the hubs its version byte allows, so a
// new hub needs a new version byte. 0xD1 carries 'o', 'w' and 'l'; 0xD2,
// the same layout, adds 'v' and 'c' (see Watches). A sender writes 'o',
// 'w' and 'l' frames with 0xD1, so that receivers of the first version
// keep taking them, and 'v' frames with 0xD2; a receiver writes 'c' frames
// with 0xD2. A receiver takes 0xD1 with 'o', 'w', 'l', 0xD2 with 'o',
// 'w', 'l', 'v' and 0xD3 with 'h'; a 'c' frame reaching it is malformed. A sender's reader
// takes only 0xD2 'c' frames. A receiver closes the connection of a frame
// it cannot parse, so a receiver of the first version closes a connection
// that carries a 0xD2 frame: the watch is lost, with the wakes written
// after it in the same batch, and the sender backs off before it redials
// (see Transport). That costs the client latency only, since it still
// polls, and the wakes' owner latency only, since its feed still delivers
// the writes. 0xD3, the same layout again, carries only 'h', a hello (see
// Hellos), sender to receiver. An empty key is invalid: a wake names an
// instance, and the hub's slot-wide Scan is not something a peer may ask
// for. Times are
// milliseconds since the Unix epoch; visible-at is rounded up so that a
// wake never becomes takeable before its work is visible, and the zero
// time.Time round-trips as the zero instant.
//
// A receiver checks, in order: the length bounds, the version and field
// consistency (hub, slot, key length), the KeyID, the MAC, the window
// (|now − sent-at| ≤ Window), then under one lock the nonce cache and the
// rate limit. A malformed frame, an unknown KeyID, a bad MAC or a
// replayed nonce closes the connection; a stale or rate-limited frame is
// only dropped, since it comes from a holder of the secret (a sender with
// a skewed clock, or a burst) whose next frame may pass. Every outcome is
// counted in ReceiverStats.
//
// # Hellos
//
// A receiver cannot tell from a wake who sent it, so a sender names
// itself once per connection: a Sender with a Name writes a hello frame
// (version 0xD3, hub 'h', slot 0, key the sender's name) before the
// first wake on each connection it dials to a peer with Peer.Hello set,
// in the same write. The receiver checks it as it checks a wake (the
// window and the nonce cache, but not the rate limit: one hello a
// connection, connections bounded), hands it to no OnWake, and counts
// the authenticated frames that follow on the connection under the name
// (Receiver.ReceivedFrom); the sender counts the frames it writes per
// Peer.Name (Sender.WrittenTo). Comparing the two finds a channel that
// swallows frames (the engine does, through the heartbeats). A receiver
// of an earlier version closes a connection carrying a 0xD3 frame, so a
// sender sets Hello only for a receiver that publishes that it takes
// hellos. A name is a claim by a holder of the secret, which may forge
// wakes anyway: it is used for counting, never to authorise.
//
// # Transport
//
// TCP, because replicas in an Azure Container Apps environment reach each
// other over TCP on the environment's network and UDP is not dependable
// there. A Sender keeps one connection per peer, dialled on the first wake
// and closed after an idle period; a goroutine per peer writes the queued
// frames (those queued together go out in one write) and a reader on the
// connection reads the replies the receiver writes back (see Watches) and
// notices when the receiver closes it. Send never waits for the
// network: a full queue, a failed dial, the backoff after one, and a failed
// write all drop wakes and count them. The sender's idle timeout is
// shorter than the receiver's so that the side that closes an idle
// connection is the sender; a wake written into a connection the receiver
// has just closed is lost.
//
// # Watches
//
// A process with no listening port (a client waiting for an instance)
// hears of an instance's change over its ordinary Sender connection: it
// sends the owner of the instance's slot a HubWatch wake, which reaches
// the owner's OnWake with Wake.Reply, the way back to that connection.
// When the instance changes, the owner gives Reply.Send a HubChanged wake;
// the receiver writes it back on the same TCP connection, signed with the
// receiver's current secret, and the sender's reader for that connection
// checks it with the secret it holds for the peer (Peer.Secret) and hands
// it to SenderOptions.OnReply. There is no new listener and no new secret.
//
//	// owner, in OnWake
//	case peerwake.HubWatch:
//		register(w.Key, w.Reply) // forget it when w.Reply.Done() is closed
//	// owner, when w.Key changes
//	reply.Send(peerwake.Wake{Hub: peerwake.HubChanged, Slot: slot, Key: instanceID})
//
//	// client
//	s, _ := peerwake.NewSender(peerwake.SenderOptions{OnReply: func(from peerwake.Peer, w peerwake.Wake) { changed(w.Key) }})
//	_ = s.Send(owner, peerwake.Wake{Hub: peerwake.HubWatch, Slot: slot, Key: instanceID})
//
// A connection has one Reply, shared by the watches it carries. Replies
// are queued, at most 64 per connection, for a writer goroutine started at
// the connection's first reply; those queued together go out in one write,
// each write bounded by ReceiverOptions.ReplyWriteTimeout. Reply.Send never
// blocks: it drops (and counts) a reply when the queue is full or the
// connection has ended, and replies still queued when it ends are dropped
// too. A failed write closes the connection. A watch lasts as long as its
// connection: the sender closes it after its idle timeout without a Send,
// the receiver after its own without a frame, either side on a failure or
// a refused frame; Reply.Done is closed then. So a client renews its
// watches, and keeps polling as the backstop.
//
// A sender's reader checks a reply as a receiver checks a wake, in the
// same order, with the peer's secret: the length bounds, the version and
// hub (0xD2 'c' only) and field consistency, the KeyID, the MAC and the
// window (|now − sent-at| ≤ SenderOptions.ReplyWindow). It keeps no nonce
// cache (see the threat model). A malformed reply, another KeyID or a bad
// MAC closes the connection; a stale reply is only dropped, as a receiver
// drops a stale wake. Every outcome is counted in SenderStats.
//
// # Threat model
//
// Who can send: anyone who can reach the receiver's port, which is every
// workload on the environment's network (and more, if the port is
// exposed; it should not be). Nothing is trusted about the peer's address.
//
// A forger (no secret) can make the receiver compute MACs and churn
// connections, nothing else: an unauthenticated frame causes no OnWake
// call and closes its connection, so each forgery attempt costs a TCP
// connection, and at most MaxConns connections are open at once. Holding
// connections open without sending does not lock senders out: when
// MaxConns connections are open, a new one evicts the oldest connection
// that has not yet delivered an authenticated frame, and senders
// authenticate with the frame they write right after dialling. A forger
// can still, by opening connections faster than senders dial, keep some
// wakes from arriving (latency, not correctness). Frame sizes are bounded
// before reading, and a connection's buffers are allocated once.
//
// A replayer (who captured frames on the network) can do nothing within
// the window: a nonce already delivered is refused and closes the
// connection, and outside the window the frame is stale. The nonce cache
// is bounded (ReplayCacheSize); if traffic overwhelms it, the oldest nonces
// are forgotten early and a replay of one of them is delivered once more,
// a duplicate wake, still within MaxRate.
//
// A holder of data-plane read access to the Cosmos DB account can read the
// heartbeat documents, so it has the secrets and can forge wakes at will.
// What that buys it is bounded: at most Burst + MaxRate·T wakes are
// delivered over any T (by default 2000 a second), and a wake only makes
// the owner look at an instance: at most one read of it (the engine's
// fetch of an instance with no work), fewer when wakes for one instance
// coalesce; a HubLeases wake makes the owner read its lease partition's
// change feed, at most once per the lease watch's active delay (50 ms by
// default in the engine, 1 RU a read) however many arrive. Such a
// principal can read every instance's data anyway. Rotating secrets (a new
// receiver incarnation, or SetSecret plus a heartbeat update) cuts off a
// principal whose read access was revoked.
//
// Confidentiality: wakes carry no payload, only a hub, a slot, a
// visibility time and a key — an instance id, which may be sensitive (ids
// built from customer identifiers). Frames are not encrypted and TLS is not
// used: the traffic stays on the environment's private network, where it
// is visible only to someone already inside it, the same instance ids
// already travel to Cosmos DB over TLS, and TLS between replicas would need
// certificates distributed and rotated per incarnation (Go's crypto/tls has
// no pre-shared-key mode that could reuse the secret). Deployments that
// need instance ids hidden in transit can enable the Container Apps
// environment's peer-traffic encryption (check that it covers direct
// replica-to-replica TCP in the environment's configuration), or use
// instance ids that reveal nothing. A later frame version (a new version
// byte) could encrypt the key with AES-GCM under a key derived from the
// same secret, which would add confidentiality without certificates.
//
// Watches and replies. A watch is a wake to the receiver: it passes the
// same checks, enters the same nonce cache and counts against the same
// rate limit (MaxRate), so forged, replayed or excess watches cost what
// forged, replayed or excess wakes cost. What a delivered watch costs the
// owner is one bounded registration (the engine's, keyed by the
// connection's Reply and dropped once Done is closed) and the replies it
// answers with. Those go only back on the connection that carried the
// watch, to whoever opened it, at most 64 queued per connection and
// MaxConns connections at once: a watch cannot direct traffic at a third
// party, so there is no reflection or amplification, and a holder of the
// secret who watches learns only that an instance changed, which it can
// read in Cosmos DB anyway. A reply is taken only by a sender's reader,
// only as a 0xD2 'c' frame naming the KeyID of the secret the sender holds
// for that peer and carrying its MAC; a 'c' frame sent to a receiver is
// malformed and closes the connection, and a reply never reaches OnWake.
// A forger without the secret cannot make a reply the sender takes, and a
// failed check closes the connection. The sender keeps no nonce cache for
// replies: replaying one within ReplyWindow means writing it into that
// very TCP connection, which takes a man in the middle of it, and what a
// replayed reply, or one forged by a holder of the secret, buys is that
// the client reads the instance's status once more, a read its polling
// makes anyway. Confidentiality is as for wakes: a reply carries a slot
// and an instance id, unencrypted, on the environment's private network.
//
// OnWake should signal only slots the replica owns (a sender may act on a
// stale view of ownership, and a holder of the secret may name any slot),
// so that wakes for other slots do not sit in the hub until the next Drop.
//
// Integrity of the change feed is never at stake: nothing received here is
// written anywhere; it only schedules a look.
package peerwake
