package knobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// AdminHandler returns a JSON-over-HTTP handler to read and change the knobs
// at run time. Paths are relative to where it is mounted: pass it as
// cosmosemu.Options.Admin to serve it under /_emulator/, or use
// http.StripPrefix under a prefix of your own:
//
//	GET    /counters          Snapshot
//	POST   /counters/reset    zero the counters (204)
//	GET    /latency           LatencyConfig
//	POST   /latency           set LatencyConfig, e.g. {"default":{"base":"2ms","jitter":"1ms"}}
//	GET    /faults            [RuleStatus]
//	POST   /faults            add a FaultRule, e.g. {"kind":"throttle","operations":["Create"],"count":3}; 201 RuleStatus
//	GET    /faults/{id}       RuleStatus
//	DELETE /faults/{id}       remove a rule (204, 404 if unknown)
//	DELETE /faults            remove every rule (204)
//	GET    /budget            BudgetStatus
//	POST   /budget            set BudgetConfig, e.g. {"default_ru_per_second":400,"containers":{"db/c":100}}
//	GET    /charges           ChargesStatus
//	POST   /charges           set ChargesStatus ({"simulated":false} restores the emulator's charges)
//
// Request bodies reject unknown fields; errors answer {"error":"..."}.
func (k *Knobs) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counters", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, k.counters.Snapshot())
	})
	mux.HandleFunc("POST /counters/reset", func(w http.ResponseWriter, r *http.Request) {
		k.counters.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /latency", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, k.latency.Config())
	})
	mux.HandleFunc("POST /latency", func(w http.ResponseWriter, r *http.Request) {
		var cfg LatencyConfig
		if !readJSON(w, r, &cfg) {
			return
		}
		if err := k.latency.Set(cfg); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, http.StatusOK, k.latency.Config())
	})
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, k.faults.Rules())
	})
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var fr FaultRule
		if !readJSON(w, r, &fr) {
			return
		}
		id, err := k.faults.Add(fr)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		st, _ := k.faults.Rule(id)
		writeJSON(w, http.StatusCreated, st)
	})
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		k.faults.Clear()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, ok := k.faults.Rule(r.PathValue("id"))
		if !ok {
			writeError(w, http.StatusNotFound, fmt.Errorf("no fault rule %q", r.PathValue("id")))
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("DELETE /faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !k.faults.Remove(r.PathValue("id")) {
			writeError(w, http.StatusNotFound, fmt.Errorf("no fault rule %q", r.PathValue("id")))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /budget", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, k.budgetStatus())
	})
	mux.HandleFunc("POST /budget", func(w http.ResponseWriter, r *http.Request) {
		var cfg BudgetConfig
		if !readJSON(w, r, &cfg) {
			return
		}
		if err := k.budget.Set(cfg); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		writeJSON(w, http.StatusOK, k.budgetStatus())
	})
	mux.HandleFunc("GET /charges", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, k.chargesStatus())
	})
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		var st struct {
			Simulated bool            `json:"simulated"`
			Model     json.RawMessage `json:"model"`
		}
		if !readJSON(w, r, &st) {
			return
		}
		m := DefaultChargeModel()
		if len(st.Model) > 0 && string(st.Model) != "null" {
			if err := strictUnmarshal(st.Model, m); err != nil {
				writeError(w, http.StatusBadRequest, fmt.Errorf("invalid charge model: %w", err))
				return
			}
		}
		if !st.Simulated {
			m = nil
		}
		k.charges.SetModel(m)
		writeJSON(w, http.StatusOK, k.chargesStatus())
	})
	return mux
}

// BudgetStatus is the admin view of the Budget knob.
type BudgetStatus struct {
	// Config is the current configuration.
	Config BudgetConfig `json:"config"`
	// Throttled counts 429 answers of the budget.
	Throttled int64 `json:"throttled"`
	// Balances holds each budgeted container's balance in RU.
	Balances map[string]float64 `json:"balances"`
}

func (k *Knobs) budgetStatus() BudgetStatus {
	return BudgetStatus{Config: k.budget.Config(), Throttled: k.budget.Throttled(), Balances: k.budget.Balances()}
}

// ChargesStatus is the admin view of the Charges knob.
type ChargesStatus struct {
	// Simulated reports whether the simulated charge model is applied.
	Simulated bool `json:"simulated"`
	// Model is the model applied (nil when not simulated). On POST, fields
	// left out keep their DefaultChargeModel values.
	Model *ChargeModel `json:"model,omitempty"`
}

func (k *Knobs) chargesStatus() ChargesStatus {
	m := k.charges.Model()
	return ChargesStatus{Simulated: m != nil, Model: m}
}

const maxAdminBody = 1 << 20

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("invalid JSON body: %w", err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, errors.New("invalid JSON body: trailing data"))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

func writeError(w http.ResponseWriter, status int, err error) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}

// strictUnmarshal decodes one JSON value, rejecting unknown fields.
func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}
