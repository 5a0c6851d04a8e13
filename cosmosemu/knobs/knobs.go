package knobs

import (
	"github.com/durafeed/durafeed/cosmosemu"
)

// Config configures every knob of a Knobs bundle. The zero value installs
// counters only: no latency, no faults, the emulator's own charges and an
// unlimited budget.
type Config struct {
	// Latency is the added latency.
	Latency LatencyConfig
	// Faults are fault rules installed at start, in order.
	Faults []FaultRule
	// FaultSeed seeds the probability draws of rules without their own
	// Seed.
	FaultSeed uint64
	// Charges is the simulated charge model; nil leaves the emulator's own
	// charges (use DefaultChargeModel for the documented table).
	Charges *ChargeModel
	// Budget is the provisioned throughput per container.
	Budget BudgetConfig
}

// Knobs bundles the five knobs and orders their middleware.
type Knobs struct {
	counters *Counters
	latency  *Latency
	budget   *Budget
	faults   *Faults
	charges  *Charges
}

// New builds the knobs described by cfg.
func New(cfg Config) (*Knobs, error) {
	lat, err := NewLatency(cfg.Latency)
	if err != nil {
		return nil, err
	}
	bud, err := NewBudget(cfg.Budget)
	if err != nil {
		return nil, err
	}
	f := NewFaults(cfg.FaultSeed)
	for _, r := range cfg.Faults {
		if _, err := f.Add(r); err != nil {
			return nil, err
		}
	}
	return &Knobs{
		counters: NewCounters(),
		latency:  lat,
		budget:   bud,
		faults:   f,
		charges:  NewCharges(cfg.Charges),
	}, nil
}

// MustNew is New for configurations known to be valid; it panics on error.
func MustNew(cfg Config) *Knobs {
	k, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return k
}

// Middleware returns the knobs' middleware for cosmosemu.Options.Middleware,
// outermost first: Counters, Latency, Budget, Faults, Charges (see the
// package documentation for why).
func (k *Knobs) Middleware() []cosmosemu.Middleware {
	return []cosmosemu.Middleware{
		k.counters.Middleware(),
		k.latency.Middleware(),
		k.budget.Middleware(),
		k.faults.Middleware(),
		k.charges.Middleware(),
	}
}

// Counters returns the request counters.
func (k *Knobs) Counters() *Counters { return k.counters }

// Latency returns the latency knob.
func (k *Knobs) Latency() *Latency { return k.latency }

// Budget returns the throughput budget.
func (k *Knobs) Budget() *Budget { return k.budget }

// Faults returns the fault rules.
func (k *Knobs) Faults() *Faults { return k.faults }

// Charges returns the charge-model knob.
func (k *Knobs) Charges() *Charges { return k.charges }
