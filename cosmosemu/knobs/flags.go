package knobs

import (
	"encoding/json"
	"flag"
	"fmt"
)

// faultFlag collects repeated -fault values.
type faultFlag struct{ rules *[]FaultRule }

// String renders the collected rules as JSON.
func (f faultFlag) String() string {
	if f.rules == nil || len(*f.rules) == 0 {
		return ""
	}
	b, _ := json.Marshal(*f.rules)
	return string(b)
}

// Set parses and validates one rule.
func (f faultFlag) Set(v string) error {
	var r FaultRule
	if err := strictUnmarshal([]byte(v), &r); err != nil {
		return fmt.Errorf("fault rule %q: %w", v, err)
	}
	if err := r.validate(); err != nil {
		return err
	}
	*f.rules = append(*f.rules, r)
	return nil
}

// Flags registers the knobs' command-line flags on fs and returns a function
// to call after fs.Parse that builds the configured Knobs:
//
//	-latency duration        added latency per request (e.g. 2ms)
//	-latency-jitter duration jitter around -latency (e.g. 1ms)
//	-latency-dist string     jitter distribution: uniform or normal
//	-latency-seed uint       jitter seed
//	-sim-charges             apply the simulated request-charge model
//	-ru-budget float         provisioned RU/s per container (0: unlimited)
//	-fault json              add a fault rule (repeatable), e.g.
//	                         '{"kind":"throttle","operations":["Create"],"probability":0.1}'
//	-fault-seed uint         seed of the fault rules' probability draws
func Flags(fs *flag.FlagSet) func() (*Knobs, error) {
	var (
		cfg    Config
		dist   string
		rules  []FaultRule
		sim    bool
		budget float64
	)
	fs.DurationVar(&cfg.Latency.Default.Base, "latency", 0, "added latency per request, imitating a network round trip (e.g. 2ms)")
	fs.DurationVar(&cfg.Latency.Default.Jitter, "latency-jitter", 0, "jitter around -latency (uniform half-width or normal standard deviation)")
	fs.StringVar(&dist, "latency-dist", string(Uniform), "latency jitter distribution: uniform or normal")
	fs.Uint64Var(&cfg.Latency.Seed, "latency-seed", 1, "latency jitter seed")
	fs.BoolVar(&sim, "sim-charges", false, "apply the simulated request-charge model (x-ms-request-charge)")
	fs.Float64Var(&budget, "ru-budget", 0, "provisioned throughput per container in RU/s (0: unlimited)")
	fs.Var(faultFlag{&rules}, "fault", "add a fault rule as JSON (repeatable), e.g. '{\"kind\":\"throttle\",\"operations\":[\"Create\"],\"probability\":0.1}'")
	fs.Uint64Var(&cfg.FaultSeed, "fault-seed", 1, "seed of the fault rules' probability draws")
	return func() (*Knobs, error) {
		c := cfg
		c.Latency.Default.Distribution = Distribution(dist)
		c.Faults = rules
		c.Budget.DefaultRUPerSecond = budget
		if sim {
			c.Charges = DefaultChargeModel()
		}
		k, err := New(c)
		if err != nil {
			return nil, fmt.Errorf("knobs flags: %w", err)
		}
		return k, nil
	}
}
