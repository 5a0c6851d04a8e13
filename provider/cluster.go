package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/durable"
)

// clusterTTL is how long a ClusterView is served again before it is made
// anew (InspectCluster): dashboards polling every second from several
// browsers share one heartbeat read.
const clusterTTL = time.Second

// heartbeatReadTimeout bounds the one read of the heartbeat documents.
const heartbeatReadTimeout = 5 * time.Second

// clusterCache is the last ClusterView InspectCluster made.
type clusterCache struct {
	mu   sync.Mutex
	view durable.ClusterView
	at   time.Time
}

var _ durable.ClusterInspector = (*Provider)(nil)

// InspectCluster implements durable.ClusterInspector. In polling mode it
// reads nothing and says there are no leases. In event-driven mode the
// leases, the live members and the feed figures are the engine's current
// view (no request); each replica's host and last heartbeat come from
// one single-partition query of the heartbeat documents in the lease
// partition. A view is served again for a second; a failed heartbeat
// read leaves hosts and heartbeats out and says so in Note.
func (p *Provider) InspectCluster(ctx context.Context) (durable.ClusterView, error) {
	if p.cfg.Mode == ModePolling {
		return durable.ClusterView{Mode: durable.DispatchPolling, Replicas: []durable.ClusterReplica{}, Leases: []durable.ClusterLease{},
			Note: "polling mode: no leases or members; every replica queries every dispatch slot for work", ObservedAt: time.Now()}, nil
	}
	i, ok := p.d.(inspector)
	if !ok {
		return durable.ClusterView{}, durable.Permanent("inspect_cluster", nil, "the dispatcher has no cluster view")
	}
	c := &p.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < clusterTTL {
		return cloneView(c.view), nil
	}
	v := p.makeView(ctx, i)
	c.view, c.at = v, time.Now()
	return cloneView(v), nil
}

// makeView builds the event-driven view (InspectCluster).
func (p *Provider) makeView(ctx context.Context, i inspector) durable.ClusterView {
	self := i.ReplicaID()
	v := durable.ClusterView{Mode: durable.DispatchEventDriven, Replica: self, Replicas: []durable.ClusterReplica{},
		Leases: []durable.ClusterLease{}, ObservedAt: time.Now()}
	reps := map[string]*durable.ClusterReplica{self: {ID: self, Self: true}}
	rep := func(id string) *durable.ClusterReplica {
		r := reps[id]
		if r == nil {
			r = &durable.ClusterReplica{ID: id}
			reps[id] = r
		}
		return r
	}
	own := i.Ownership()
	if own == nil {
		v.Note = "this replica has not joined dispatch yet (it joins at its first orchestration fetch): no lease view"
	}
	for _, b := range own {
		v.Leases = append(v.Leases, durable.ClusterLease{FirstSlot: b.Block.First, LastSlot: b.Block.Last, Owner: b.Owner, Since: b.Since, Epoch: b.Epoch})
		if b.Owner != "" {
			rep(b.Owner).Leases++
		}
	}
	sort.Slice(v.Leases, func(a, b int) bool { return v.Leases[a].FirstSlot < v.Leases[b].FirstSlot })
	for _, id := range i.Members() {
		rep(id).Live = true
	}
	beats, err := p.readHeartbeats(ctx, i.LeasePartition())
	if err != nil {
		v.Note = join(v.Note, "the heartbeat documents could not be read, so hosts and heartbeat times are missing: "+err.Error())
	}
	for _, b := range beats {
		r := rep(b.Replica)
		r.Host, r.State = b.Host, b.State
		if t, err := time.Parse(time.RFC3339Nano, b.WrittenAt); err == nil {
			r.LastHeartbeat = t
		}
	}
	for _, r := range reps {
		v.Replicas = append(v.Replicas, *r)
	}
	sort.Slice(v.Replicas, func(a, b int) bool { return v.Replicas[a].ID < v.Replicas[b].ID })
	st := i.Stats()
	orchDue, workDue, later := i.PendingCounts()
	v.Feed = &durable.ClusterFeed{Heads: i.HeadCount(""), DueOrchestrator: orchDue, DueWorker: workDue, Later: later,
		FeedDelivered: st.FeedDelivered, SweepDelivered: st.SweepDelivered, Catchups: st.Catchups}
	return v
}

// heartbeat is what InspectCluster reads of a heartbeat document
// (package leasestore's owner document: {"type": "owner", "replica",
// "state", "writtenAt", "host", ...}).
type heartbeat struct {
	Replica   string `json:"replica"`
	State     string `json:"state"`
	WrittenAt string `json:"writtenAt"`
	Host      string `json:"host"`
}

// readHeartbeats reads the heartbeat documents of the lease partition
// with one single-partition query.
func (p *Provider) readHeartbeats(ctx context.Context, partition string) ([]heartbeat, error) {
	ctx, cancel := context.WithTimeout(ctx, heartbeatReadTimeout)
	defer cancel()
	pager := p.s.Container().NewQueryItemsPager("SELECT c.replica, c.state, c.writtenAt, c.host FROM c WHERE c.type = 'owner'",
		azcosmos.NewPartitionKeyString(partition), nil)
	var out []heartbeat
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("read the heartbeats: %w", err)
		}
		for _, raw := range page.Items {
			var h heartbeat
			if json.Unmarshal(raw, &h) == nil && h.Replica != "" {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// cloneView copies v's slices, so a caller may keep or change what it got.
func cloneView(v durable.ClusterView) durable.ClusterView {
	v.Replicas = append([]durable.ClusterReplica{}, v.Replicas...)
	v.Leases = append([]durable.ClusterLease{}, v.Leases...)
	if v.Feed != nil {
		f := *v.Feed
		v.Feed = &f
	}
	return v
}
