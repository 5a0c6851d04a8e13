package cosmosemu

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// offer is the throughput resource of a database or container.
type offer struct {
	id              string
	resource        string // self link of the owner
	offerResourceID string // _rid of the owner
	manual          int    // RU/s when manual
	autoscaleMax    int    // max RU/s when autoscale
	ts              int64
	etag            string
	seq             uint64
}

// throughputRequest is the dedicated throughput a create asks for.
type throughputRequest struct {
	manual       int
	autoscaleMax int
}

// Data-plane headers asking for dedicated throughput on a create.
const (
	headerOfferThroughput = "x-ms-offer-throughput"
	headerAutopilot       = "x-ms-cosmos-offer-autopilot-settings"
)

// Refusals of a serverless account, worded as the service words them.
const (
	msgServerlessOffers = "Reading or replacing offers is not supported for serverless accounts."
	msgServerlessCreate = "Setting offer throughput or autopilot on %s is not supported for serverless accounts."
)

// throughputFor validates the dedicated throughput a create asks for, the
// one check behind both planes: manual RU/s as decimal text (the
// x-ms-offer-throughput header, ARM's options.throughput) and autoscale
// settings as {"maxThroughput":N} JSON (the
// x-ms-cosmos-offer-autopilot-settings header, ARM's
// options.autoscaleSettings), "" when absent. owner ("database" or
// "container") names the resource in the refusal of a serverless
// account, which refuses either. nil means no dedicated throughput.
func (s *Server) throughputFor(manual, auto, owner string) (*throughputRequest, *apiError) {
	if manual == "" && auto == "" {
		return nil, nil
	}
	if s.opts.Serverless {
		return nil, errBadRequest(msgServerlessCreate, owner)
	}
	if manual != "" && auto != "" {
		return nil, errBadRequest("Both manual throughput and autoscale settings were specified; specify only one.")
	}
	if manual != "" {
		n, err := strconv.Atoi(manual)
		if err != nil || n < 400 {
			return nil, errBadRequest("The Offer Throughput '%s' is invalid; it must be an integer of at least 400.", manual)
		}
		return &throughputRequest{manual: n}, nil
	}
	var v struct {
		MaxThroughput int `json:"maxThroughput"`
	}
	if err := json.Unmarshal([]byte(auto), &v); err != nil || v.MaxThroughput < 1000 {
		return nil, errBadRequest("The autoscale settings are invalid; maxThroughput must be at least 1000.")
	}
	return &throughputRequest{autoscaleMax: v.MaxThroughput}, nil
}

// createOffer registers an offer for an owner; assign records the offer id
// on the owner.
func (s *store) createOffer(t *throughputRequest, resource, ownerRID string, assign func(id string)) *offer {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.ridCounter.Add(1)
	id := offerID(n)
	o := &offer{id: id, resource: resource, offerResourceID: ownerRID, manual: t.manual, autoscaleMax: t.autoscaleMax,
		ts: s.now(), etag: s.newETag(), seq: s.creation.Add(1)}
	s.offers[id] = o
	assign(id)
	return o
}

// offerID renders a short lowercase resource id (the SDK lowercases offer
// links when signing, so ids are kept lowercase).
func offerID(n uint32) string {
	const digits = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte{'a', 'a', 'a', 'a'}
	for i := 3; i >= 0; i-- {
		b[i] = digits[n%uint32(len(digits))]
		n /= uint32(len(digits))
	}
	return string(b)
}

func (o *offer) toJSON() map[string]any {
	content := map[string]any{"offerIsRUPerMinuteThroughputEnabled": false}
	if o.autoscaleMax > 0 {
		content["offerThroughput"] = float64(o.autoscaleMax / 10)
		content["offerAutopilotSettings"] = map[string]any{"maxThroughput": float64(o.autoscaleMax)}
	} else {
		content["offerThroughput"] = float64(o.manual)
	}
	return map[string]any{
		"id": o.id, "_rid": o.id, "_self": "offers/" + o.id + "/", "_etag": o.etag, "_ts": float64(o.ts),
		"offerVersion": "V2", "offerType": "Invalid", "resource": o.resource,
		"offerResourceId": o.offerResourceID, "content": content,
	}
}

func (s *Server) handleOffer(req *Request) (*Response, *apiError) {
	if s.opts.Serverless {
		return nil, errBadRequest(msgServerlessOffers)
	}
	switch req.Operation {
	case OpReadFeed, OpQuery:
		s.store.mu.RLock()
		list := make([]*offer, 0, len(s.store.offers))
		for _, o := range s.store.offers {
			list = append(list, o)
		}
		items := make([]map[string]any, 0, len(list))
		sort.Slice(list, func(i, j int) bool { return list[i].seq < list[j].seq })
		for _, o := range list {
			items = append(items, o.toJSON())
		}
		s.store.mu.RUnlock()
		out, err := s.filterResources(req, items)
		if err != nil {
			return nil, err
		}
		return feedResponse("", "Offers", out), nil
	case OpRead:
		s.store.mu.RLock()
		o := s.store.offers[strings.ToLower(req.path[1])]
		var j map[string]any
		if o != nil {
			j = o.toJSON()
		}
		s.store.mu.RUnlock()
		if o == nil {
			return nil, errNotFound()
		}
		return marshalResource(http.StatusOK, j, j["_etag"].(string)), nil
	case OpReplace:
		body, err := parseDocument(req.body)
		if err != nil {
			return nil, err
		}
		content, _ := body["content"].(map[string]any)
		if content == nil {
			return nil, errBadRequest("The offer content is missing.")
		}
		manual, hasManual := content["offerThroughput"].(float64)
		var autoMax float64
		hasAuto := false
		if ap, ok := content["offerAutopilotSettings"].(map[string]any); ok {
			autoMax, hasAuto = ap["maxThroughput"].(float64)
		}
		s.store.mu.Lock()
		defer s.store.mu.Unlock()
		o := s.store.offers[strings.ToLower(req.path[1])]
		if o == nil {
			return nil, errNotFound()
		}
		if ifm := req.HTTP.Header.Get("If-Match"); ifm != "" && ifm != "*" && ifm != o.etag {
			return nil, errPrecondition()
		}
		switch {
		case hasAuto:
			if o.autoscaleMax == 0 {
				return nil, errBadRequest("Changing a manual throughput offer to autoscale requires the offer migration API.")
			}
			if autoMax < 1000 {
				return nil, errBadRequest("The autoscale maxThroughput must be at least 1000.")
			}
			o.autoscaleMax = int(autoMax)
		case hasManual:
			if o.autoscaleMax != 0 {
				return nil, errBadRequest("Changing an autoscale offer to manual throughput requires the offer migration API.")
			}
			if manual < 400 {
				return nil, errBadRequest("The Offer Throughput '%v' is invalid; it must be at least 400.", manual)
			}
			o.manual = int(manual)
		default:
			return nil, errBadRequest("The offer content must specify offerThroughput or offerAutopilotSettings.")
		}
		o.etag = s.store.newETag()
		o.ts = s.store.now()
		j := o.toJSON()
		return marshalResource(http.StatusOK, j, o.etag), nil
	}
	return nil, methodNotAllowed()
}
