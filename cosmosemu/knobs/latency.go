package knobs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/durafeed/durafeed/cosmosemu"
	"github.com/durafeed/durafeed/internal/clock"
)

// Distribution is the shape of the jitter added around a base latency.
type Distribution string

// Jitter distributions.
const (
	// Uniform draws the delay uniformly from [Base-Jitter, Base+Jitter].
	Uniform Distribution = "uniform"
	// Normal draws the delay from a normal distribution with mean Base and
	// standard deviation Jitter.
	Normal Distribution = "normal"
)

// LatencySpec describes the latency added to one request. Delays below zero
// are clamped to zero. In JSON, durations are Go duration strings:
// {"base":"2ms","jitter":"1ms","distribution":"normal"}.
type LatencySpec struct {
	// Base is the mean added latency.
	Base time.Duration
	// Jitter is the half-width (Uniform) or standard deviation (Normal) of
	// the variation around Base. Zero means a constant delay.
	Jitter time.Duration
	// Distribution is Uniform (the default when empty) or Normal.
	Distribution Distribution
}

type latencySpecJSON struct {
	Base         string       `json:"base,omitempty"`
	Jitter       string       `json:"jitter,omitempty"`
	Distribution Distribution `json:"distribution,omitempty"`
}

// MarshalJSON encodes the durations as Go duration strings.
func (s LatencySpec) MarshalJSON() ([]byte, error) {
	return json.Marshal(latencySpecJSON{Base: durString(s.Base), Jitter: durString(s.Jitter), Distribution: s.Distribution})
}

// UnmarshalJSON decodes durations written as Go duration strings.
func (s *LatencySpec) UnmarshalJSON(b []byte) error {
	var j latencySpecJSON
	if err := strictUnmarshal(b, &j); err != nil {
		return err
	}
	base, err := parseDur("base", j.Base)
	if err != nil {
		return err
	}
	jitter, err := parseDur("jitter", j.Jitter)
	if err != nil {
		return err
	}
	*s = LatencySpec{Base: base, Jitter: jitter, Distribution: j.Distribution}
	return nil
}

func (s LatencySpec) validate() error {
	if s.Base < 0 || s.Jitter < 0 {
		return fmt.Errorf("knobs: latency base and jitter must not be negative (base %v, jitter %v)", s.Base, s.Jitter)
	}
	switch s.Distribution {
	case "", Uniform, Normal:
		return nil
	}
	return fmt.Errorf("knobs: unknown latency distribution %q (want %q or %q)", s.Distribution, Uniform, Normal)
}

func (s LatencySpec) active() bool { return s.Base > 0 || s.Jitter > 0 }

// LatencyConfig configures the Latency knob. The zero value adds nothing.
type LatencyConfig struct {
	// Default applies to operations without an entry in PerOperation.
	Default LatencySpec `json:"default"`
	// PerOperation overrides Default for some operation types.
	PerOperation map[cosmosemu.OperationType]LatencySpec `json:"operations,omitempty"`
	// Seed seeds the jitter; equal seeds give equal delay sequences.
	Seed uint64 `json:"seed,omitempty"`
}

func (c LatencyConfig) validate() error {
	if err := c.Default.validate(); err != nil {
		return err
	}
	for op, s := range c.PerOperation {
		if err := s.validate(); err != nil {
			return fmt.Errorf("%w (operation %s)", err, op)
		}
	}
	return nil
}

func (c LatencyConfig) clone() LatencyConfig {
	out := c
	if c.PerOperation != nil {
		out.PerOperation = make(map[cosmosemu.OperationType]LatencySpec, len(c.PerOperation))
		for k, v := range c.PerOperation {
			out.PerOperation[k] = v
		}
	}
	return out
}

type latencyState struct {
	cfg    LatencyConfig
	active bool
	rng    *stream
}

// Latency adds a delay to every request, imitating an in-region network
// round trip. It is safe for concurrent use; Set takes effect for requests
// that start afterwards.
type Latency struct {
	state   atomic.Pointer[latencyState]
	delayed atomic.Int64
	total   atomic.Int64 // nanoseconds
}

// NewLatency returns a Latency knob configured with cfg.
func NewLatency(cfg LatencyConfig) (*Latency, error) {
	l := &Latency{}
	if err := l.Set(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Set replaces the configuration and restarts the jitter sequence from the
// configured seed.
func (l *Latency) Set(cfg LatencyConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg = cfg.clone()
	active := cfg.Default.active()
	for _, s := range cfg.PerOperation {
		active = active || s.active()
	}
	l.state.Store(&latencyState{cfg: cfg, active: active, rng: newStream(cfg.Seed)})
	return nil
}

// Config returns a copy of the current configuration.
func (l *Latency) Config() LatencyConfig { return l.state.Load().cfg.clone() }

// Delayed returns how many requests were delayed and the total delay added.
func (l *Latency) Delayed() (requests int64, total time.Duration) {
	return l.delayed.Load(), time.Duration(l.total.Load())
}

// Sample draws the delay for one request of the given operation type,
// advancing the jitter sequence.
func (l *Latency) Sample(op cosmosemu.OperationType) time.Duration {
	st := l.state.Load()
	if !st.active {
		return 0
	}
	return st.sample(op)
}

func (st *latencyState) sample(op cosmosemu.OperationType) time.Duration {
	spec := st.cfg.Default
	if s, ok := st.cfg.PerOperation[op]; ok {
		spec = s
	}
	if spec.Jitter == 0 {
		return spec.Base
	}
	var d float64
	if spec.Distribution == Normal {
		d = float64(spec.Base) + st.rng.normal()*float64(spec.Jitter)
	} else {
		d = float64(spec.Base) + (2*st.rng.uniform()-1)*float64(spec.Jitter)
	}
	if d <= 0 {
		return 0
	}
	if d >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(d)
}

// Middleware returns the middleware that applies the delay before passing
// the request on. If the request's context ends while waiting, the request
// is not executed and answers 408.
func (l *Latency) Middleware() cosmosemu.Middleware {
	return func(next cosmosemu.Handler) cosmosemu.Handler {
		return func(ctx context.Context, req *cosmosemu.Request) *cosmosemu.Response {
			d := l.Sample(req.Operation)
			if d > 0 {
				l.delayed.Add(1)
				l.total.Add(int64(d))
				if !clock.Sleep(ctx, d) {
					return cosmosemu.ErrorResponse(req, http.StatusRequestTimeout, 0,
						"The request was cancelled while waiting for injected latency (cosmosemu/knobs).")
				}
			}
			return next(ctx, req)
		}
	}
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func parseDur(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("knobs: %s: %w", field, err)
	}
	return d, nil
}
