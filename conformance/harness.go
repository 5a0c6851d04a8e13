package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durafeed/durafeed/durable"
	"github.com/durafeed/durafeed/durable/history"
)

// TestOrchestration, TestVersion and TestRuntimeVersion are what the
// scenario helpers write into instances and events.
const (
	TestOrchestration  = "TestOrch"
	TestVersion        = "1.0.0"
	TestRuntimeVersion = "0.1.0"
)

// LongLock is the lock timeout for fetches in scenarios that do not test
// expiry: long enough never to expire during a scenario.
const LongLock = 30 * time.Second

// H is the harness handed to a scenario: the test, its context, its store
// and helpers for the common steps. Helpers fail the test on error.
type H struct {
	// T is the scenario's test.
	T *testing.T
	// Ctx is cancelled when the scenario ends.
	Ctx context.Context
	// P is the scenario's first provider; Open returns more on the same store.
	P durable.Provider
	// Store is the scenario's store name.
	Store string
	f     Factory
	o     Options
	tag   string
}

func newH(t *testing.T, f Factory, name string) *H {
	suffix := randomHex(4)
	store := sanitize(name, 40) + "-" + suffix
	h := &H{T: t, Ctx: ctxFor(t), Store: store, f: f, o: f.Options(), tag: suffix}
	h.P = f.Open(t, store)
	return h
}

// Options returns the factory's description of the provider.
func (h *H) Options() Options { return h.o }

// Open returns another provider on the scenario's store, as a second replica.
func (h *H) Open() durable.Provider { return h.f.Open(h.T, h.Store) }

// Admin returns the management capability of P, failing the scenario if the
// provider has none.
func (h *H) Admin() durable.ProviderAdmin {
	h.T.Helper()
	a, ok := h.P.Admin()
	require.True(h.T, ok, "provider has no management capability")
	return a
}

// ID returns an instance id unique to this scenario run.
func (h *H) ID(name string) string { return name + "-" + h.tag }

// CorruptHistory makes the instance's stored history undecodable.
func (h *H) CorruptHistory(instance string) {
	h.T.Helper()
	h.f.CorruptInstanceHistory(h.T, h.Store, instance)
}

// MaxAttemptCount returns the highest attempt count of the instance's queued
// orchestrator messages.
func (h *H) MaxAttemptCount(instance string) uint32 {
	h.T.Helper()
	return h.f.MaxAttemptCount(h.T, h.Store, instance)
}

// StartItem is a StartOrchestration for instance, execution 1.
func StartItem(instance string) durable.StartOrchestration {
	return durable.StartOrchestration{Instance: instance, Orchestration: TestOrchestration, Input: "{}",
		Version: TestVersion, ExecutionID: 1}
}

// Event builds a history event stamped with the test runtime version.
func Event(instance string, executionID, eventID uint64, kind history.EventKind) history.Event {
	return history.Event{EventID: eventID, InstanceID: instance, ExecutionID: executionID,
		TimestampMS: uint64(time.Now().UnixMilli()), RuntimeVersion: TestRuntimeVersion, Kind: kind}
}

// Started is the OrchestrationStarted event (event 1) of an execution.
func Started(instance string, executionID uint64) history.Event {
	return Event(instance, executionID, 1, history.OrchestrationStarted{Name: TestOrchestration, Version: TestVersion, Input: "{}"})
}

// StartedMetadata is the metadata of an instance's first turn.
func StartedMetadata() durable.ExecutionMetadata {
	return durable.ExecutionMetadata{OrchestrationName: TestOrchestration, OrchestrationVersion: TestVersion}
}

// Enqueue puts item on p's orchestrator queue with no delay.
func (h *H) Enqueue(p durable.Provider, item durable.WorkItem) {
	h.T.Helper()
	require.NoError(h.T, p.EnqueueForOrchestrator(h.Ctx, item, 0))
}

// FetchOrch fetches an orchestration item with a long lock and no poll
// wait; it may return nil.
func (h *H) FetchOrch(p durable.Provider) *durable.OrchestrationItem {
	h.T.Helper()
	item, err := p.FetchOrchestrationItem(h.Ctx, LongLock, 0, nil)
	require.NoError(h.T, err)
	return item
}

// MustFetchOrch fetches an orchestration item and fails if there is none.
// Providers may make new work visible a little after the enqueue returns
// (a change feed, a replica's cache), so it retries briefly.
func (h *H) MustFetchOrch(p durable.Provider, lock time.Duration) *durable.OrchestrationItem {
	h.T.Helper()
	var item *durable.OrchestrationItem
	h.Eventually(func() bool {
		var err error
		item, err = p.FetchOrchestrationItem(h.Ctx, lock, 0, nil)
		require.NoError(h.T, err)
		return item != nil
	}, "an orchestration item to fetch")
	return item
}

// MustFetchWork fetches a work item accepting any tag and no session, and
// fails if there is none (retrying briefly, as MustFetchOrch).
func (h *H) MustFetchWork(p durable.Provider, lock time.Duration) *durable.LockedWorkItem {
	h.T.Helper()
	var item *durable.LockedWorkItem
	h.Eventually(func() bool {
		var err error
		item, err = p.FetchWorkItem(h.Ctx, lock, 0, nil, durable.AnyTag())
		require.NoError(h.T, err)
		return item != nil
	}, "a work item to fetch")
	return item
}

// withheldSlack is how much earlier than due withheld work may come back:
// stores that keep times in whole milliseconds round the due time down.
const withheldSlack = time.Millisecond

// MustFetchOrchAfter is MustFetchOrch for work withheld until due (by a
// visibility delay or a lock; due is the withholding call's start plus
// the delay or lock timeout) and the only work p can fetch meanwhile: it
// fetches from now on until the work comes, and fails if the fetch that
// returned it ended before due. It waits on the event it is about, the
// work's return: a slow run only makes fewer of its fetches fall before
// due, and a provider that hands the work out early fails at once on any
// run that gets here before due. The usual hang deadline starts at due.
func (h *H) MustFetchOrchAfter(p durable.Provider, lock time.Duration, due time.Time) *durable.OrchestrationItem {
	h.T.Helper()
	return fetchAfter(h, due, "orchestration item", func() (*durable.OrchestrationItem, error) {
		return p.FetchOrchestrationItem(h.Ctx, lock, 0, nil)
	}, describeOrch)
}

// MustFetchWorkAfter is MustFetchOrchAfter for a work item (any tag, no
// session).
func (h *H) MustFetchWorkAfter(p durable.Provider, lock time.Duration, due time.Time) *durable.LockedWorkItem {
	h.T.Helper()
	return fetchAfter(h, due, "work item", func() (*durable.LockedWorkItem, error) {
		return p.FetchWorkItem(h.Ctx, lock, 0, nil, durable.AnyTag())
	}, describeWork)
}

// fetchAfter is MustFetchOrchAfter and MustFetchWorkAfter over fetch.
func fetchAfter[T any](h *H, due time.Time, what string, fetch func() (*T, error), describe func(*T) string) *T {
	h.T.Helper()
	var item *T
	var ended time.Time
	early := 0 // fetches that found nothing and ended before due
	h.eventuallyBy(later(time.Now(), due).Add(EventuallyDeadline), func() bool {
		var err error
		item, err = fetch()
		ended = time.Now()
		require.NoError(h.T, err)
		if item == nil && ended.Before(due) {
			early++
		}
		return item != nil
	}, "the withheld "+what+" to come back")
	if ended.Before(due.Add(-withheldSlack)) {
		h.T.Fatalf("fetched %s %v before it was due", describe(item), due.Sub(ended))
	}
	logWithheld(h, early)
	return item
}

// logWithheld notes in the test log a MustFetch*After that saw no fetch
// end empty before the work was due (the run was too slow to watch it
// withheld; its return was still checked).
func logWithheld(h *H, early int) {
	h.T.Helper()
	if early == 0 {
		h.T.Logf("no fetch ended before the withheld work was due: this run saw only its return")
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// AbsenceWindow is how long an absence check (NoOrch, NoWork and their
// variants) gives a provider to produce work that should not be there.
// Instead of looking once, the check watches the queue for this long: a
// long-polling provider waits on one fetch with this poll timeout, a
// short-polling one is polled every absencePollInterval. A provider that
// would hand the work out shortly after the state change under test (one
// that learns of it from a change feed, or a replica's cache) then fails
// the check instead of passing it vacuously. Keep the window well below
// Options.LockTimeout, and short: a scenario waits it out at every check
// that passes.
//
// An absence check only covers work that is certainly withheld while it
// runs, however slow the run: work behind a long lock (LongLock, ended by
// an explicit ack, abandon or renewal after the check) or a long delay
// (longHide). Work withheld by a short lock or delay, that the scenario
// then waits to see come back, is checked by the event instead:
// MustFetchOrchAfter and MustFetchWorkAfter fetch until it comes, and fail
// if it came to a fetch that ended before it was due.
const AbsenceWindow = 250 * time.Millisecond

// absencePollInterval is the pause between the fetches of an absence check
// when a fetch returned before the window closed (a short-polling provider).
const absencePollInterval = 25 * time.Millisecond

// NoOrch asserts that no orchestration item can be fetched from p within
// AbsenceWindow.
func (h *H) NoOrch(p durable.Provider) {
	h.T.Helper()
	h.NoOrchUntil(p, time.Now().Add(AbsenceWindow))
}

// NoOrchUntil is NoOrch with the window cut short at until, the last
// moment the work is known to be withheld (see withheldUntil). Callers
// withhold the work for long (LongLock, longHide) so that until is far
// ahead when the check starts; a check that starts after until means the
// run stalled that long, a hang by the suite's standards (see
// EventuallyDeadline), and fails: it is never skipped.
func (h *H) NoOrchUntil(p durable.Provider, until time.Time) {
	h.T.Helper()
	h.requireBefore(until)
	item, err := watchAbsence(h, absenceEnd(until), func(poll time.Duration) (*durable.OrchestrationItem, error) {
		return p.FetchOrchestrationItem(h.Ctx, LongLock, poll, nil)
	})
	require.NoError(h.T, err)
	if item != nil {
		h.T.Fatalf("expected no orchestration item, got %s", describeOrch(item))
	}
}

// NoWork asserts that no work item (any tag, no session) can be fetched
// from p within AbsenceWindow.
func (h *H) NoWork(p durable.Provider) {
	h.T.Helper()
	h.NoWorkUntil(p, time.Now().Add(AbsenceWindow))
}

// NoWorkUntil is NoWork with the window cut short at until, as NoOrchUntil
// (failing when until has passed).
func (h *H) NoWorkUntil(p durable.Provider, until time.Time) {
	h.T.Helper()
	h.requireBefore(until)
	item, err := watchAbsence(h, absenceEnd(until), func(poll time.Duration) (*durable.LockedWorkItem, error) {
		return p.FetchWorkItem(h.Ctx, LongLock, poll, nil, durable.AnyTag())
	})
	require.NoError(h.T, err)
	if item != nil {
		h.T.Fatalf("expected no work item, got %s", describeWork(item))
	}
}

// requireBefore fails an absence check that starts once the work it covers
// may be visible again: it could assert nothing, and its callers withhold
// the work long enough (LongLock, longHide) that only a stalled run gets
// there.
func (h *H) requireBefore(until time.Time) {
	h.T.Helper()
	if now := time.Now(); !now.Before(until) {
		h.T.Fatalf("absence check started %v after the work it covers may be visible again: "+
			"the run stalled for longer than the work was withheld", now.Sub(until))
	}
}

// NoOrchOrWork asserts NoOrch and NoWork together: both queues are watched
// at once, over one AbsenceWindow.
func (h *H) NoOrchOrWork(p durable.Provider) {
	h.T.Helper()
	end := absenceEnd(time.Now().Add(AbsenceWindow))
	var (
		wg      sync.WaitGroup
		work    *durable.LockedWorkItem
		workErr error
	)
	wg.Go(func() {
		work, workErr = watchAbsence(h, end, func(poll time.Duration) (*durable.LockedWorkItem, error) {
			return p.FetchWorkItem(h.Ctx, LongLock, poll, nil, durable.AnyTag())
		})
	})
	orch, orchErr := watchAbsence(h, end, func(poll time.Duration) (*durable.OrchestrationItem, error) {
		return p.FetchOrchestrationItem(h.Ctx, LongLock, poll, nil)
	})
	wg.Wait()
	require.NoError(h.T, orchErr)
	require.NoError(h.T, workErr)
	if orch != nil {
		h.T.Fatalf("expected no orchestration item, got %s", describeOrch(orch))
	}
	if work != nil {
		h.T.Fatalf("expected no work item, got %s", describeWork(work))
	}
}

// absenceEnd is the end of an absence window that should end at until:
// never later than AbsenceWindow from now.
func absenceEnd(until time.Time) time.Time {
	if end := time.Now().Add(AbsenceWindow); end.Before(until) {
		return end
	}
	return until
}

// watchAbsence fetches with fetch until end (at least once), passing the
// time left as the poll timeout, and returns the first item fetched or
// error met; nil, nil when the window closed with nothing. It only
// fetches: the caller asserts, on the scenario's goroutine.
func watchAbsence[T any](h *H, end time.Time, fetch func(poll time.Duration) (*T, error)) (*T, error) {
	for {
		item, err := fetch(max(time.Until(end), 0))
		if err != nil || item != nil {
			return item, err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-h.Ctx.Done():
			return nil, nil
		case <-time.After(min(left, absencePollInterval)):
		}
	}
}

// describeOrch names a fetched orchestration item for a failure message.
func describeOrch(item *durable.OrchestrationItem) string {
	return fmt.Sprintf("instance %q (execution %d, attempt %d) with %d messages %+v", item.Instance,
		item.ExecutionID, item.AttemptCount, len(item.Messages), item.Messages)
}

// describeWork names a fetched work item for a failure message.
func describeWork(item *durable.LockedWorkItem) string {
	return fmt.Sprintf("%s for %q (attempt %d): %+v", item.Item.Kind(), item.Item.TargetInstance(),
		item.AttemptCount, item.Item)
}

// CreateInstance runs an instance's first turn on p: it enqueues the start,
// fetches it and acks OrchestrationStarted with metadata, leaving the
// instance Running with one event in execution 1.
func (h *H) CreateInstance(p durable.Provider, instance string) {
	h.T.Helper()
	h.CreateInstanceWith(p, StartItem(instance), StartedMetadata())
}

// CreateInstanceWith is CreateInstance with an explicit start item and metadata.
func (h *H) CreateInstanceWith(p durable.Provider, start durable.StartOrchestration, md durable.ExecutionMetadata) {
	h.T.Helper()
	h.Enqueue(p, start)
	item := h.MustFetchOrch(p, LongLock)
	require.Equal(h.T, start.Instance, item.Instance)
	started := Event(start.Instance, 1, 1, history.OrchestrationStarted{Name: start.Orchestration, Version: TestVersion,
		Input: start.Input, ParentInstance: start.ParentInstance, ParentID: start.ParentID})
	require.NoError(h.T, p.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID: 1, HistoryDelta: []history.Event{started}, Metadata: md}))
}

// Complete acks a fetched item as the final turn: it appends
// OrchestrationCompleted after the existing history and marks the execution
// Completed with output.
func (h *H) Complete(p durable.Provider, item *durable.OrchestrationItem, output string) {
	h.T.Helper()
	next := uint64(len(item.History)) + 1
	require.NoError(h.T, p.AckOrchestrationItem(h.Ctx, item.LockToken, durable.OrchestrationTurn{
		ExecutionID:  item.ExecutionID,
		HistoryDelta: []history.Event{Event(item.Instance, item.ExecutionID, next, history.OrchestrationCompleted{Output: output})},
		Metadata:     durable.ExecutionMetadata{Status: durable.StatusCompleted, Output: &output},
	}))
}

// EventuallyDeadline is how long Eventually waits: generous, so that it
// only catches a hang, on a shared machine running hundreds of scenarios
// in parallel beside another test run.
const EventuallyDeadline = 30 * time.Second

// Eventually polls cond every 20 ms until it holds, failing the scenario
// after EventuallyDeadline. what names the awaited condition in the
// failure.
func (h *H) Eventually(cond func() bool, what string) {
	h.T.Helper()
	h.eventuallyBy(time.Now().Add(EventuallyDeadline), cond, what)
}

// eventuallyBy is Eventually failing at deadline.
func (h *H) eventuallyBy(deadline time.Time, cond func() bool, what string) {
	h.T.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			h.T.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-h.Ctx.Done():
			h.T.Fatalf("context done while waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Sleep waits d (or until the scenario ends). Scenarios use it only where
// time itself is under test: lock expiry, delayed visibility.
func (h *H) Sleep(d time.Duration) {
	select {
	case <-h.Ctx.Done():
	case <-time.After(d):
	}
}

// Str returns a pointer to s.
func Str(s string) *string { return &s }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on supported platforms
	}
	return hex.EncodeToString(b)
}

func sanitize(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + 'a' - 'A')
		default:
			b.WriteRune('-')
		}
	}
	return b.String()
}
