package replay

import (
	"github.com/durafeed/durafeed/durable"
)

// Replay rules that depend on the runtime version.
//
// A decision the engine takes while replaying must be the one the runtime
// that recorded the history took, or the replay diverges from it. So when
// a rule changes, the new rule applies only to executions started by a
// runtime at or above the version that introduced it, as stamped on the
// execution's OrchestrationStarted event (history.Event.RuntimeVersion);
// an execution started by an older runtime keeps the older rule for its
// whole life, whichever runtime replays or continues it. The stamp of a
// new execution is the version of the runtime that starts it, so a
// continue-as-new successor takes that runtime's rules, not its
// predecessor's. Providers return events exactly as appended, so the stamp
// survives every fetch (durable.Provider, "Version stamps").

// queueRaceRuleSince is the first runtime version whose executions follow
// the current rule for a dequeue that loses a Select: it never takes a
// mailbox arrival, so the next waiting dequeue of the name (or a later
// one) receives it, and nothing is lost. Executions stamped with an older
// version follow the earlier rule: dequeues of a name are paired with
// arrivals in the order they subscribed, losers included, so an arrival
// paired with a dequeue that already lost a Select is consumed by it and
// never reaches the orchestration.
//
// durafeed's runtime has followed the current rule since its first version
// (0.1.0), so only histories stamped below it take the earlier one.
var queueRaceRuleSince = durable.SemVer{Major: 0, Minor: 1, Patch: 0}

// rules are the version-dependent decisions of one execution.
type rules struct {
	// dequeueLosersSkipArrivals: a dequeue that lost a Select takes no
	// arrival (the current rule); when false, it still takes the arrival
	// its subscription order pairs it with, and drops it.
	dequeueLosersSkipArrivals bool
}

// rulesFor returns the rules of an execution whose OrchestrationStarted
// event carries stamp. A stamp that is empty or does not parse (written by
// no released runtime) gets the current rules.
func rulesFor(stamp string) rules {
	v, err := durable.ParseSemVer(stamp)
	if err != nil {
		return rules{dequeueLosersSkipArrivals: true}
	}
	return rules{dequeueLosersSkipArrivals: v.Compare(queueRaceRuleSince) >= 0}
}
