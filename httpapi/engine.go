package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/durafeed/durafeed/durable"
)

// EngineView is the answer to GET /v1/engine: how this replica and its
// peers share dispatch, from the provider's view (durable.ClusterInspector)
// and the figures the service keeps of its own metrics
// (Options.EngineFigures).
type EngineView struct {
	// Mode is "event-driven" or "polling" (durable.DispatchEventDriven,
	// DispatchPolling).
	Mode string `json:"mode"`
	// Replica is this replica's id.
	Replica string `json:"replica"`
	// Replicas are those known from their heartbeats or as lease owners
	// (empty in polling mode).
	Replicas []ReplicaView `json:"replicas"`
	// Leases are the lease blocks of dispatch slots (empty in polling
	// mode, or before this replica joined).
	Leases []LeaseView `json:"leases"`
	// Feed holds the feed figures known (absent in polling mode).
	Feed *FeedView `json:"feed,omitempty"`
	// WakeLatencyMs are wake latency quantiles over the last minute, when
	// the service measures them and a wake happened.
	WakeLatencyMs *LatencyQuantiles `json:"wakeLatencyMs,omitempty"`
	// Requests are the rates of the provider's requests to Cosmos DB over
	// the last minute, when the service measures them.
	Requests *RequestRates `json:"requests,omitempty"`
	// Note says what the view lacks, for a person.
	Note string `json:"note,omitempty"`
	// ObservedAt is when the provider made its view.
	ObservedAt Timestamp `json:"observedAt"`
}

// ReplicaView is one replica of an EngineView.
type ReplicaView struct {
	ID   string `json:"id"`
	Host string `json:"host,omitempty"`
	// LastHeartbeat is the replica's last heartbeat write, by its clock.
	LastHeartbeat *Timestamp `json:"lastHeartbeat,omitempty"`
	// State is its heartbeat's: "live", "leaving" or "expired".
	State string `json:"state,omitempty"`
	// Live reports whether this replica counts it live now.
	Live bool `json:"live"`
	// Leases is how many lease blocks it holds.
	Leases int  `json:"leases"`
	Self   bool `json:"self"`
}

// LeaseView is one lease block.
type LeaseView struct {
	// Range is the block's dispatch slots, "<first>-<last>" (of 0-255).
	Range string `json:"range"`
	// Owner is the holder's replica id; "" for a free block.
	Owner string `json:"owner"`
	// Since is when the block passed to Owner, by the writer's clock.
	Since *Timestamp `json:"since,omitempty"`
	// Epoch counts the block's ownership changes.
	Epoch int64 `json:"epoch"`
}

// FeedView holds the feed figures of an EngineView: pendingChanges and
// lagSeconds from the service's metrics (the engine's change-feed lag
// estimate on the leases this replica holds), the rest from the engine.
type FeedView struct {
	// PendingChanges is an upper bound of the changes not yet handled on
	// this replica's leases.
	PendingChanges *int64 `json:"pendingChanges,omitempty"`
	// LagSeconds is the age of the oldest change read but not handled
	// (0: none).
	LagSeconds *float64 `json:"lagSeconds,omitempty"`
	// Heads counts waiting messages the feed showed that no fetch took.
	Heads int `json:"heads"`
	// DueWakeups count the wakeups fetches may take now, per queue;
	// LaterWakeups those due later (timers, lock expiries).
	DueWakeups   QueueCounts `json:"dueWakeups"`
	LaterWakeups int         `json:"laterWakeups"`
	// IntentsDelivered and IntentsSwept count outbox intents delivered by
	// the feed handler and by the safety sweep; Catchups the catch-up
	// queries (since the replica started).
	IntentsDelivered int64 `json:"intentsDelivered"`
	IntentsSwept     int64 `json:"intentsSwept"`
	Catchups         int64 `json:"catchups"`
}

// QueueCounts counts per queue.
type QueueCounts struct {
	Orchestrator int `json:"orchestrator"`
	Worker       int `json:"worker"`
}

// LatencyQuantiles are latency quantiles in milliseconds.
type LatencyQuantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// RequestRates are request rates per minute over the last minute (or
// WindowSeconds, while the service has run less than a minute).
type RequestRates struct {
	RUPerMin        float64 `json:"ruPerMin"`
	ThrottledPerMin float64 `json:"throttledPerMin"`
	RequestsPerMin  float64 `json:"requestsPerMin"`
	WindowSeconds   float64 `json:"windowSeconds"`
}

// EngineFigures are what a service measures of itself for GET /v1/engine
// (Options.EngineFigures); nil fields are unknown and left out.
type EngineFigures struct {
	// Replica names this replica when the provider names none (polling
	// mode).
	Replica string
	// Requests are the provider's request rates.
	Requests *RequestRates
	// WakeLatencyMs are wake latency quantiles.
	WakeLatencyMs *LatencyQuantiles
	// FeedPendingChanges and FeedLagSeconds are the engine's feed lag
	// gauges as last collected.
	FeedPendingChanges *int64
	FeedLagSeconds     *float64
}

// engine answers GET /v1/engine (501 no_engine_view when the provider is
// no durable.ClusterInspector).
func (a *api) engine(w http.ResponseWriter, r *http.Request) {
	ci, ok := a.c.Provider().(durable.ClusterInspector)
	if !ok {
		writeError(w, apiError{status: http.StatusNotImplemented, Code: "no_engine_view",
			Message: "the provider does not describe its dispatch (durable.ClusterInspector)"})
		return
	}
	cv, err := ci.InspectCluster(r.Context())
	if err != nil {
		writeError(w, providerError(err))
		return
	}
	var f EngineFigures
	if a.o.EngineFigures != nil {
		f = a.o.EngineFigures()
	}
	writeJSON(w, http.StatusOK, engineView(cv, f))
}

// engineView is the answer made of the provider's view and the
// service's figures.
func engineView(cv durable.ClusterView, f EngineFigures) EngineView {
	v := EngineView{Mode: cv.Mode, Replica: cv.Replica, Replicas: []ReplicaView{}, Leases: []LeaseView{},
		Note: cv.Note, ObservedAt: Timestamp(cv.ObservedAt), Requests: f.Requests, WakeLatencyMs: f.WakeLatencyMs}
	if v.Replica == "" {
		v.Replica = f.Replica
	}
	for _, r := range cv.Replicas {
		v.Replicas = append(v.Replicas, ReplicaView{ID: r.ID, Host: r.Host, LastHeartbeat: timePtr(r.LastHeartbeat), State: r.State,
			Live: r.Live, Leases: r.Leases, Self: r.Self})
	}
	for _, l := range cv.Leases {
		v.Leases = append(v.Leases, LeaseView{Range: fmt.Sprintf("%d-%d", l.FirstSlot, l.LastSlot), Owner: l.Owner,
			Since: timePtr(l.Since), Epoch: l.Epoch})
	}
	if fd := cv.Feed; fd != nil {
		v.Feed = &FeedView{PendingChanges: f.FeedPendingChanges, LagSeconds: f.FeedLagSeconds, Heads: fd.Heads,
			DueWakeups: QueueCounts{Orchestrator: fd.DueOrchestrator, Worker: fd.DueWorker}, LaterWakeups: fd.Later,
			IntentsDelivered: fd.FeedDelivered, IntentsSwept: fd.SweepDelivered, Catchups: fd.Catchups}
	}
	return v
}

// MeResponse is the answer to GET /v1/me: who the caller is and which
// roles it holds, so that a page shows only what the caller may do.
type MeResponse struct {
	// Authenticated reports that the API checked a bearer token (false
	// without an Authenticator: then everyone holds every role).
	Authenticated bool `json:"authenticated"`
	// Roles are the caller's effective roles, from the least: each role
	// it holds and the ones that role includes.
	Roles []Role `json:"roles"`
	// Subject is the caller's object id (or the token's subject).
	Subject string `json:"subject,omitempty"`
	// Name is the caller's display name, when the token carries one.
	Name string `json:"name,omitempty"`
}

// me answers GET /v1/me.
func (a *api) me(w http.ResponseWriter, r *http.Request) {
	if a.o.Authenticator == nil {
		writeJSON(w, http.StatusOK, MeResponse{Roles: []Role{RoleReader, RoleOperator, RoleAdmin}})
		return
	}
	p, _ := r.Context().Value(callerKey{}).(Principal)
	resp := MeResponse{Authenticated: true, Roles: []Role{}, Subject: p.ID, Name: p.Name}
	for _, role := range []Role{RoleReader, RoleOperator, RoleAdmin} {
		if p.Has(role) {
			resp.Roles = append(resp.Roles, role)
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// timePtr is t as a *Timestamp (nil for the zero time).
func timePtr(t time.Time) *Timestamp {
	if t.IsZero() {
		return nil
	}
	ts := Timestamp(t)
	return &ts
}
