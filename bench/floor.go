package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/durafeed/durafeed/cosmosemu/knobs"
)

// floorSample is how many completed instances the write floor is
// averaged over.
const floorSample = 10

// WriteFloor is the request charge an orchestration cannot avoid under
// the store's document layout (section 6 of DESIGN): each document it
// leaves behind written once, at its final size (its history events, its
// instance and execution records), and each message it consumed created
// once and deleted once (its start, a work item per activity scheduled
// and a completion per activity that ended), priced by the simulated
// charge model. A consumed message is gone when the floor is read, so its
// size is taken as that of the history event that records it (the work
// item's input, the completion's result). Locks, reads, queries and the
// change feed are not in the floor: they are what dispatch costs.
type WriteFloor struct {
	// RU is the floor's mean over the sampled instances; Documents and
	// Messages the mean documents left and messages consumed.
	RU        float64 `json:"ru"`
	Documents float64 `json:"documents"`
	Messages  float64 `json:"messages"`
	// Sampled is the number of instances averaged.
	Sampled int `json:"sampled"`
}

// storedDoc is the part of a stored document the floor needs: its type
// and, for a history document, the event's JSON (a tagged union whose
// "type" names its kind).
type storedDoc struct {
	Type      string `json:"type"`
	EventData string `json:"eventData"`
}

// writeFloor computes the write floor of the given completed instances of
// container, reading their documents (after the scenario's usage was
// taken, so these reads are not counted).
func (e *Env) writeFloor(ctx context.Context, container string, instances []string) (WriteFloor, error) {
	var f WriteFloor
	if len(instances) == 0 {
		return f, nil
	}
	cl, err := e.acct.NewClient()
	if err != nil {
		return f, err
	}
	cc, err := cl.NewContainer(e.database(), container)
	if err != nil {
		return f, err
	}
	m := knobs.DefaultChargeModel()
	for _, inst := range instances {
		ru, docs, msgs, err := instanceFloor(ctx, cc, m, inst)
		if err != nil {
			return f, fmt.Errorf("bench: write floor of %s: %w", inst, err)
		}
		f.RU += ru
		f.Documents += float64(docs)
		f.Messages += float64(msgs)
		f.Sampled++
	}
	n := float64(f.Sampled)
	f.RU, f.Documents, f.Messages = round2(f.RU/n), round2(f.Documents/n), round2(f.Messages/n)
	return f, nil
}

// instanceFloor is one instance's write floor: its documents, and the
// messages its history says it consumed.
func instanceFloor(ctx context.Context, cc *azcosmos.ContainerClient, m *knobs.ChargeModel, inst string) (ru float64, docs, msgs int, err error) {
	pager := cc.NewQueryItemsPager("SELECT * FROM c", azcosmos.NewPartitionKeyString(inst), nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		for _, raw := range page.Items {
			size, err := userSize(raw)
			if err != nil {
				return 0, 0, 0, err
			}
			var d storedDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return 0, 0, 0, err
			}
			ru += m.WriteCharge(size)
			docs++
			if d.Type != "history" {
				continue
			}
			var ev struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal([]byte(d.EventData), &ev)
			switch {
			case ev.Type == "OrchestrationStarted", ev.Type == "ActivityScheduled",
				strings.HasPrefix(ev.Type, "Activity") && ev.Type != "ActivityScheduled":
				// Its message: the start, the work item, the completion.
				ru += m.WriteCharge(size) + m.Delete
				msgs++
			}
		}
	}
	return round2(ru), docs, msgs, nil
}

// userSize is a stored document's size without the service's system
// properties (_rid, _etag, _ts, _self, _attachments, _lsn): what the
// writer sent.
func userSize(raw []byte) (int, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return 0, err
	}
	for k := range m {
		if strings.HasPrefix(k, "_") {
			delete(m, k)
		}
	}
	b, err := json.Marshal(m)
	return len(b), err
}
