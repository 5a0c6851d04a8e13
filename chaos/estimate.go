package chaos

import (
	"time"

	"github.com/durafeed/durafeed/provider"
)

// The constants of EstimateRU. They were measured on the embedded
// campaign at the default settings (3 replicas, the default workload
// shape and fault rates, 2 ms latency), whose emulator charges by the
// knobs' DefaultChargeModel, from its counters (every request from the
// faults' start to the end of the read-back): 600 roots at 5 roots/s and
// 300 roots as fast as possible, per mode. The two rates separate the
// charge that follows the roots from the charge that follows the clock;
// the sums, measured:
//
//	mode          roots  rate    RU        seconds
//	event-driven  600    5/s     227,651   131.7
//	event-driven  300    max      94,234    34.1
//	polling       600    5/s     327,728   132.0
//	polling       300    max     138,441    25.6
//
// solve to 244 RU per root and 618 RU/s event-driven, 408 RU per root and
// 629 RU/s polling (a run of 1000 roots at 5/s: about 377,000 and
// 543,000 RU before the margin). Checked on the account path (120 roots at
// 5/s per mode, an emulator with the same charge model reached over its
// endpoint, faults client side, the account's meter): 42,115 RU spent
// event-driven against 80,536 estimated, 58,843 polling against 110,708.
const (
	// RUPerRootEventDriven and RUPerRootPolling are the charge of one root
	// of the default workload shape (its turns, activities, client calls
	// and read-back), by mode.
	RUPerRootEventDriven = 244
	RUPerRootPolling     = 408
	// RUPerSecondEventDriven and RUPerSecondPolling are the charge per
	// second of the clock of DefaultReplicas replicas and the client,
	// by mode: change feed and queue polls, lease renewals, the client's
	// status polls.
	RUPerSecondEventDriven = 618
	RUPerSecondPolling     = 629
	// EstimateMargin multiplies the estimate: the figures are one run's on
	// a charge model, not an account's bill.
	EstimateMargin = 1.5
	// estimateTail is the time a campaign runs beyond its starts (the
	// last roots, settling, the lock timeout before the read-back, the
	// read-back): about 12 s measured, rounded up.
	estimateTail = 15 * time.Second
	// fastSecondsPerRoot is the time per root with no pacing (Rate < 0):
	// 0.11 s event-driven, 0.09 s polling measured, rounded up.
	fastSecondsPerRoot = 0.12
)

// EstimateRU returns the campaign's estimated request charge on an
// account, in RU, defaults applied: EstimateMargin × (the roots' charge +
// the clock's charge). The roots' charge is Orchestrations × the mode's
// RU per root scaled by the workload's steps per root (steps: see
// rootSteps; the default shape takes 9.5 on average), so a wider fan-out
// or a longer mailbox costs more; the clock's charge is the mode's RU per
// second × the expected duration (Orchestrations / Rate, or 0.12 s per
// root without pacing, plus 15 s and TimerDelay) × (Replicas + 1) /
// (DefaultReplicas + 1). Other settings (concurrencies, backoffs, the faults' rates) are not
// modelled. Campaign.Run checks it against MaxRU.
func (c Campaign) EstimateRU() float64 {
	c = c.withDefaults()
	perRoot, perSecond := float64(RUPerRootEventDriven), float64(RUPerSecondEventDriven)
	if c.Mode == provider.ModePolling {
		perRoot, perSecond = RUPerRootPolling, RUPerSecondPolling
	}
	shape := workloadShape{fanOut: c.FanOut, timerDelay: c.TimerDelay, mailboxItems: c.MailboxItems}
	def := workloadShape{fanOut: DefaultFanOut, timerDelay: DefaultTimerDelay, mailboxItems: DefaultMailboxItems}
	kinds := Kinds()
	defSteps := 0.0
	for _, k := range kinds {
		defSteps += float64(rootSteps(k, def))
	}
	defSteps /= float64(len(kinds))
	steps := 0.0
	for i := range c.Orchestrations {
		steps += float64(rootSteps(kinds[i%len(kinds)], shape))
	}
	roots := perRoot * steps / defSteps

	seconds := estimateTail.Seconds() + c.TimerDelay.Seconds()
	if c.Rate > 0 {
		seconds += float64(c.Orchestrations) / c.Rate
	} else {
		seconds += float64(c.Orchestrations) * fastSecondsPerRoot
	}
	clock := perSecond * seconds * float64(c.Replicas+1) / float64(DefaultReplicas+1)
	return EstimateMargin * (roots + clock)
}

// rootSteps counts the units of work of one root of a kind: its
// orchestration turns (every execution's start and each completion it
// awaits), its activities and the client's calls (the start, raises,
// enqueues).
func rootSteps(kind string, w workloadShape) int {
	switch kind {
	case KindChain:
		return chainSteps + (chainSteps + 1) + 1
	case KindFanOut:
		return w.fanOut + (w.fanOut + 1) + 1
	case KindSubOrch:
		child := 2 + 3 // a chain of two: two activities, three turns
		return 2*child + 3 + 1
	case KindTimer:
		return 1 + 3 + 1
	case KindEvent:
		return (eventsPerJob + 1) + eventsPerJob + 1
	case KindMailbox:
		return 2*w.mailboxItems + w.mailboxItems + 1
	}
	return 0
}
