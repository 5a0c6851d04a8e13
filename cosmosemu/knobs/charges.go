package knobs

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/durafeed/durafeed/cosmosemu"
)

// ChargeModel holds the parameters of the SIMULATED request-charge model
// (see the package documentation for the table and where the numbers come
// from). All values are request units; "per KiB" terms apply to each KiB
// beyond the first, sizes being rounded up to whole KiB.
type ChargeModel struct {
	// PointRead is the charge of a point read of an item up to 1 KiB.
	PointRead float64 `json:"point_read"`
	// PointReadPerKiB is added per KiB beyond the first.
	PointReadPerKiB float64 `json:"point_read_per_kib"`
	// NotModified is the charge of a point read answered 304.
	NotModified float64 `json:"not_modified"`
	// Write is the charge of a create, upsert or replace of an item up to
	// 1 KiB.
	Write float64 `json:"write"`
	// WritePerKiB is added per KiB beyond the first.
	WritePerKiB float64 `json:"write_per_kib"`
	// Delete is the charge of a delete.
	Delete float64 `json:"delete"`
	// QueryBase is the charge of a query or read-feed page with no results.
	QueryBase float64 `json:"query_base"`
	// QueryPerItem is added per item returned.
	QueryPerItem float64 `json:"query_per_item"`
	// QueryPerKiB is added per KiB of page beyond the first.
	QueryPerKiB float64 `json:"query_per_kib"`
	// ChangeFeedNotModified is the charge of a change feed read answered
	// 304 (nothing new); pages with changes are priced like query pages.
	ChangeFeedNotModified float64 `json:"change_feed_not_modified"`
	// Metadata is the charge of any operation on a non-document resource
	// (account, databases, containers, offers, partition key ranges).
	Metadata float64 `json:"metadata"`
	// Error is the charge of a document operation the emulator answered with
	// a 4xx/5xx status (and of the failing operation of a batch).
	Error float64 `json:"error"`
}

// DefaultChargeModel returns the model documented in the package table,
// anchored on Azure's published figures (1 KB point read = 1 RU, 100 KB =
// 10 RU; 1 KB write = 5 RU, 100 KB = 50 RU).
func DefaultChargeModel() *ChargeModel {
	return &ChargeModel{
		PointRead:             1,
		PointReadPerKiB:       1.0 / 11, // (10 - 1) RU over 99 KiB
		NotModified:           1,
		Write:                 5,
		WritePerKiB:           5.0 / 11, // (50 - 5) RU over 99 KiB
		Delete:                5,
		QueryBase:             2.3,
		QueryPerItem:          0.1,
		QueryPerKiB:           1.0 / 11,
		ChangeFeedNotModified: 1,
		Metadata:              1,
		Error:                 1,
	}
}

// kib returns the size in KiB rounded up, at least 1.
func kib(size int) int {
	k := (size + 1023) / 1024
	if k < 1 {
		k = 1
	}
	return k
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// PointReadCharge is the simulated charge of reading an item of size bytes.
func (m *ChargeModel) PointReadCharge(size int) float64 {
	return round2(m.PointRead + float64(kib(size)-1)*m.PointReadPerKiB)
}

// WriteCharge is the simulated charge of writing an item of size bytes.
func (m *ChargeModel) WriteCharge(size int) float64 {
	return round2(m.Write + float64(kib(size)-1)*m.WritePerKiB)
}

// QueryPageCharge is the simulated charge of a query, read-feed or change
// feed page returning items items in size bytes.
func (m *ChargeModel) QueryPageCharge(items, size int) float64 {
	return round2(m.QueryBase + float64(items)*m.QueryPerItem + float64(kib(size)-1)*m.QueryPerKiB)
}

// Charge returns the simulated charge of the answer resp to req. For a
// transactional batch it also rewrites the per-operation charges in
// resp.Body.
func (m *ChargeModel) Charge(req *cosmosemu.Request, resp *cosmosemu.Response) float64 {
	if resp.Status == http.StatusTooManyRequests {
		return 0
	}
	if req.ResourceType != cosmosemu.ResourceDocument {
		return round2(m.Metadata)
	}
	if resp.Status >= 400 {
		return round2(m.Error)
	}
	switch req.Operation {
	case cosmosemu.OpRead:
		if resp.Status == http.StatusNotModified {
			return round2(m.NotModified)
		}
		return m.PointReadCharge(len(resp.Body))
	case cosmosemu.OpCreate, cosmosemu.OpUpsert, cosmosemu.OpReplace:
		size := len(resp.Body)
		if req.HTTP != nil && req.HTTP.ContentLength > 0 {
			size = int(req.HTTP.ContentLength)
		}
		return m.WriteCharge(size)
	case cosmosemu.OpPatch:
		return m.WriteCharge(len(resp.Body))
	case cosmosemu.OpDelete:
		return round2(m.Delete)
	case cosmosemu.OpBatch:
		return m.batch(req, resp)
	case cosmosemu.OpChangeFeed:
		if resp.Status == http.StatusNotModified {
			return round2(m.ChangeFeedNotModified)
		}
		return m.QueryPageCharge(itemCount(resp), len(resp.Body))
	case cosmosemu.OpQuery, cosmosemu.OpReadFeed:
		// A cross-partition page is served by every physical partition it
		// scans, each charging at least the base cost, as the service sums
		// the charges of its partition-level queries.
		extra := 0
		if n := len(req.PartitionKeyRangeIDs); n > 1 {
			extra = n - 1
		}
		return round2(m.QueryPageCharge(itemCount(resp), len(resp.Body)) + float64(extra)*m.QueryBase)
	}
	return round2(m.Metadata)
}

// batch prices each operation result and rewrites its requestCharge.
func (m *ChargeModel) batch(req *cosmosemu.Request, resp *cosmosemu.Response) float64 {
	var results []map[string]json.RawMessage
	if err := json.Unmarshal(resp.Body, &results); err != nil || len(results) == 0 {
		return round2(m.Write)
	}
	minimal := req.HTTP != nil && strings.EqualFold(strings.TrimSpace(req.HTTP.Header.Get("Prefer")), "return=minimal")
	var total float64
	for _, r := range results {
		var status int
		_ = json.Unmarshal(r["statusCode"], &status)
		body := r["resourceBody"]
		hasBody := len(body) > 0 && string(body) != "null"
		var c float64
		switch {
		case status == http.StatusFailedDependency:
			c = 0
		case status >= 400:
			c = round2(m.Error)
		case status == http.StatusNotModified:
			c = round2(m.NotModified)
		case status == http.StatusNoContent:
			c = round2(m.Delete)
		case status == http.StatusOK && minimal && hasBody:
			c = m.PointReadCharge(len(body))
		default: // 201, or 200 of a write
			c = m.WriteCharge(len(body))
		}
		r["requestCharge"] = json.RawMessage(strconv.FormatFloat(c, 'f', -1, 64))
		total += c
	}
	if b, err := json.Marshal(results); err == nil {
		resp.Body = b
	}
	return round2(total)
}

// itemCount reads x-ms-item-count, falling back to the body's "_count".
func itemCount(resp *cosmosemu.Response) int {
	if v := resp.Header.Get("x-ms-item-count"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	const key = `"_count":`
	if i := bytes.LastIndex(resp.Body, []byte(key)); i >= 0 {
		rest := resp.Body[i+len(key):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if n, err := strconv.Atoi(string(rest[:j])); err == nil {
			return n
		}
	}
	return 0
}

// Charges applies a ChargeModel to every answer (sets
// Response.RequestCharge, sent as x-ms-request-charge). With no model it
// leaves the emulator's own charges alone. It is safe for concurrent use.
type Charges struct {
	model atomic.Pointer[ChargeModel]
}

// NewCharges returns a Charges knob applying model (nil: disabled).
func NewCharges(model *ChargeModel) *Charges {
	c := &Charges{}
	c.SetModel(model)
	return c
}

// SetModel replaces the model; nil disables the simulation. The model is
// copied.
func (c *Charges) SetModel(model *ChargeModel) {
	if model == nil {
		c.model.Store(nil)
		return
	}
	cp := *model
	c.model.Store(&cp)
}

// Model returns a copy of the current model, or nil when disabled.
func (c *Charges) Model() *ChargeModel {
	m := c.model.Load()
	if m == nil {
		return nil
	}
	cp := *m
	return &cp
}

// Middleware returns the middleware that prices answers.
func (c *Charges) Middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			resp := next(ctx, req)
			if m := c.model.Load(); m != nil && resp != nil {
				resp.RequestCharge = m.Charge(req, resp)
			}
			return resp
		}
	}
}
