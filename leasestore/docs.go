package leasestore

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

// Document types (the "type" property).
const (
	typeLease = "lease"
	typeOwner = "owner"
)

// Heartbeat states (the "state" property of an owner document).
const (
	stateLive    = "live"    // the replica is running and heartbeating
	stateLeaving = "leaving" // the replica is releasing its leases
	stateExpired = "expired" // another replica declared it dead and took a lease
)

const (
	leaseIDPrefix = "lease:"
	ownerIDPrefix = "owner:"
)

func leaseID(i int) string          { return leaseIDPrefix + strconv.Itoa(i) }
func ownerID(replica string) string { return ownerIDPrefix + replica }

// rangeDoc is an EPK range as stored.
type rangeDoc struct {
	Min string `json:"min"`
	Max string `json:"max"`
}

// leaseDoc is the stored form of lease i (id "lease:<i>").
type leaseDoc struct {
	ID    string   `json:"id"`
	Type  string   `json:"type"`
	Index int      `json:"index"`
	Range rangeDoc `json:"range"`
	// Owner is the holder's ReplicaID; "" means free.
	Owner string `json:"owner"`
	// Epoch is incremented on every ownership change (acquire, take-over,
	// hand-off, claim, release). A holder is identified by (Owner, Epoch).
	Epoch int64 `json:"epoch"`
	// Rev is incremented on every write: it orders versions seen through
	// different paths (change feed, queries, write responses).
	Rev int64 `json:"rev"`
	// Continuation is the last checkpointed change-feed continuation.
	Continuation string `json:"continuation"`
	// CheckpointAt and AcquiredAt are informational wall-clock timestamps
	// of the writing replica (RFC 3339); nothing reads them.
	CheckpointAt string `json:"checkpointAt,omitempty"`
	AcquiredAt   string `json:"acquiredAt,omitempty"`
	// StealBy is a pending steal request: the ReplicaID of an under-loaded
	// replica asking the owner to hand this lease over.
	StealBy string `json:"stealBy,omitempty"`
}

// ownerDoc is the heartbeat document of a replica (id "owner:<replica>").
type ownerDoc struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Replica string `json:"replica"`
	// Incarnation is random per registration: a restarted (or re-registered
	// after being declared dead) replica gets a new one.
	Incarnation string `json:"incarnation"`
	// Seq is incremented on every write of the document.
	Seq   int64  `json:"seq"`
	State string `json:"state"`
	// ExpiredBy names the replica that declared this one dead.
	ExpiredBy string `json:"expiredBy,omitempty"`
	// WrittenAt is the writer's wall clock (RFC 3339), informational only.
	WrittenAt string `json:"writtenAt,omitempty"`
	// Host is where the registration runs (Options.Host): a successor on
	// the same Host is a restart in place and takes over at once.
	Host string `json:"host,omitempty"`
	// WakeAddr and WakeKey are the replica's peer wake endpoint
	// (Options.WakeAddr, WakeKey), absent when it has none.
	WakeAddr string `json:"wakeAddr,omitempty"`
	WakeKey  string `json:"wakeKey,omitempty"`
	// WakeHello reports that the receiver takes hello frames
	// (Options.WakeHello).
	WakeHello bool `json:"wakeHello,omitempty"`
	// WakesSent counts, per other replica, the peer wake frames this
	// replica's process has written to it (Options.WakesSent): non-zero
	// counts of replicas with a heartbeat document only.
	WakesSent map[string]uint64 `json:"wakesSent,omitempty"`
}

// stored is a document as read back: its body plus system properties.
type stored struct {
	ID   string      `json:"id"`
	Type string      `json:"type"`
	ETag azcore.ETag `json:"_etag"`
}

// encodeDoc marshals v and adds the partition key property.
func encodeDoc(v any, pkProp, pkValue string) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	prop, _ := json.Marshal(pkProp)
	val, _ := json.Marshal(pkValue)
	out := make([]byte, 0, len(body)+len(prop)+len(val)+2)
	out = append(out, '{')
	out = append(out, prop...)
	out = append(out, ':')
	out = append(out, val...)
	out = append(out, ',')
	out = append(out, body[1:]...)
	return out, nil
}

// decoded is one document of the lease partition.
type decoded struct {
	etag  azcore.ETag
	lease *leaseDoc
	owner *ownerDoc
}

func decodeDoc(raw []byte) (decoded, error) {
	var s stored
	if err := json.Unmarshal(raw, &s); err != nil {
		return decoded{}, err
	}
	d := decoded{etag: s.ETag}
	switch {
	case s.Type == typeLease && strings.HasPrefix(s.ID, leaseIDPrefix):
		var l leaseDoc
		if err := json.Unmarshal(raw, &l); err != nil {
			return decoded{}, fmt.Errorf("lease document %q: %w", s.ID, err)
		}
		// Fields that decode but cannot be a lease's (edited by hand): the
		// index must match the id, and a range's upper bound is never empty.
		if l.ID != leaseID(l.Index) || l.Range.Max == "" {
			return decoded{}, fmt.Errorf("lease document %q: index %d or range [%q, %q) malformed", s.ID, l.Index, l.Range.Min, l.Range.Max)
		}
		d.lease = &l
	case s.Type == typeOwner && strings.HasPrefix(s.ID, ownerIDPrefix):
		var o ownerDoc
		if err := json.Unmarshal(raw, &o); err != nil {
			return decoded{}, fmt.Errorf("owner document %q: %w", s.ID, err)
		}
		d.owner = &o
	}
	return d, nil
}

func wallString(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
