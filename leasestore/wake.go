package leasestore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// WakeEndpoint is a replica's published peer wake endpoint
// (Options.WakeAddr, WakeKey and WakeHello).
type WakeEndpoint struct {
	// Replica is the ReplicaID that publishes it.
	Replica   string
	Addr, Key string
	// Hello: the receiver takes hello frames (Options.WakeHello).
	Hello bool
}

// endpointOf returns the endpoint a heartbeat document publishes.
func endpointOf(d *ownerDoc) WakeEndpoint {
	return WakeEndpoint{Replica: d.Replica, Addr: d.WakeAddr, Key: d.WakeKey, Hello: d.WakeHello}
}

// WakeEndpoint returns the wake endpoint replica publishes, as this
// replica last saw its heartbeat document, when that replica counts as
// live and publishes one.
func (s *Store) WakeEndpoint(replica string) (WakeEndpoint, bool) {
	if replica == s.id {
		return WakeEndpoint{Replica: s.id, Addr: s.opts.WakeAddr, Key: s.opts.WakeKey, Hello: s.opts.WakeHello}, s.opts.WakeAddr != ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[replica]
	if m == nil || !s.memberLiveLocked(m, time.Now()) || m.doc.WakeAddr == "" {
		return WakeEndpoint{}, false
	}
	return endpointOf(&m.doc), true
}

// PeerEndpoints returns the wake endpoints of the other replicas that
// this replica last saw live and publishing one.
func (s *Store) PeerEndpoints() []WakeEndpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []WakeEndpoint
	for r, m := range s.members {
		if r != s.id && m.doc.WakeAddr != "" && s.memberLiveLocked(m, now) {
			out = append(out, endpointOf(&m.doc))
		}
	}
	return out
}

// WakesReport is what another replica's heartbeat document says of the
// peer wake frames it wrote to this replica (Options.WakesSent).
type WakesReport struct {
	// Replica and Incarnation name the registration that published it: a
	// new incarnation may have started counting anew.
	Replica, Incarnation string
	// Sent is its count of frames written to this replica (0 when it
	// publishes none).
	Sent uint64
}

// WakesReported returns, for every other replica this one last saw live,
// its latest heartbeat's count of peer wake frames written to this
// replica, ordered by ReplicaID.
func (s *Store) WakesReported() []WakesReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []WakesReport
	for r, m := range s.members {
		if r != s.id && s.memberLiveLocked(m, now) {
			out = append(out, WakesReport{Replica: r, Incarnation: m.doc.Incarnation, Sent: m.doc.WakesSent[s.id]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Replica < out[j].Replica })
	return out
}

// wakeFields sets the peer wake fields of this replica's heartbeat
// document d: the endpoint, and the non-zero counts of frames written to
// replicas with a heartbeat document (so the map stays as small as the
// membership).
func (s *Store) wakeFields(d *ownerDoc) {
	d.WakeAddr, d.WakeKey, d.WakeHello = s.opts.WakeAddr, s.opts.WakeKey, s.opts.WakeHello
	if s.opts.WakesSent == nil {
		return
	}
	sent := s.opts.WakesSent()
	s.mu.Lock()
	defer s.mu.Unlock()
	for r, n := range sent {
		if _, ok := s.members[r]; !ok || n == 0 || r == s.id {
			continue
		}
		if d.WakesSent == nil {
			d.WakesSent = make(map[string]uint64, len(sent))
		}
		d.WakesSent[r] = n
	}
}

// Kick makes the lease watch read the lease partition's change feed now,
// or WatchActiveDelay after its previous read if that was sooner: another
// replica wrote something there that this one acts on (see
// Options.OnWrote). Kicks coalesce; it never blocks.
func (s *Store) Kick() { s.signal(s.kickWatch) }

// OwnerOf returns the owner of lease index as this replica last saw it
// ("" when free, unknown or out of range). It allocates nothing: writers
// ask it on every write they wake a peer for.
func (s *Store) OwnerOf(index int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index < 0 || index >= len(s.leases) || !s.leases[index].known {
		return ""
	}
	return s.leases[index].doc.Owner
}

// View is the lease partition as one read saw it, for a process that
// takes no part in ownership (a client): the owner of each lease, by
// index ("" for free), and the wake endpoints of the replicas whose
// heartbeat says live.
type View struct {
	Owners []string
	Wake   map[string]WakeEndpoint
}

// ReadView reads the lease partition pkValue of container with one
// single-partition query. Leases whose index is below 0 or not below
// blocks are ignored. It writes nothing.
func ReadView(ctx context.Context, container *azcosmos.ContainerClient, pkValue string, blocks int) (View, error) {
	v := View{Owners: make([]string, blocks), Wake: map[string]WakeEndpoint{}}
	pager := container.NewQueryItemsPager("SELECT * FROM c WHERE c.type = 'lease' OR c.type = 'owner'",
		azcosmos.NewPartitionKeyString(pkValue), nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return View{}, fmt.Errorf("leasestore: read view: %w", err)
		}
		for _, raw := range page.Items {
			d, err := decodeDoc(raw)
			if err != nil {
				continue // a document edited by hand: the owners' own repair handles it
			}
			switch {
			case d.lease != nil && d.lease.Index >= 0 && d.lease.Index < blocks:
				v.Owners[d.lease.Index] = d.lease.Owner
			case d.owner != nil && d.owner.State == stateLive && d.owner.WakeAddr != "":
				v.Wake[d.owner.Replica] = endpointOf(d.owner)
			}
		}
	}
	return v, nil
}
