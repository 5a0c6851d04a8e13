package leasestore

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
)

// WakeEndpoint is a replica's published peer wake endpoint
// (Options.WakeAddr and WakeKey).
type WakeEndpoint struct {
	Addr, Key string
}

// WakeEndpoint returns the wake endpoint replica publishes, as this
// replica last saw its heartbeat document, when that replica counts as
// live and publishes one.
func (s *Store) WakeEndpoint(replica string) (WakeEndpoint, bool) {
	if replica == s.id {
		return WakeEndpoint{Addr: s.opts.WakeAddr, Key: s.opts.WakeKey}, s.opts.WakeAddr != ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.members[replica]
	if m == nil || !s.memberLiveLocked(m, time.Now()) || m.doc.WakeAddr == "" {
		return WakeEndpoint{}, false
	}
	return WakeEndpoint{Addr: m.doc.WakeAddr, Key: m.doc.WakeKey}, true
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
			out = append(out, WakeEndpoint{Addr: m.doc.WakeAddr, Key: m.doc.WakeKey})
		}
	}
	return out
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
				v.Wake[d.owner.Replica] = WakeEndpoint{Addr: d.owner.WakeAddr, Key: d.owner.WakeKey}
			}
		}
	}
	return v, nil
}
