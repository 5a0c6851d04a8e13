package durable

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxWorkerTags is the most tags one worker may subscribe to.
const MaxWorkerTags = 5

// TagMode selects which activity tags a worker accepts.
type TagMode int

const (
	// TagsDefaultOnly accepts only untagged activities (the zero value).
	TagsDefaultOnly TagMode = iota
	// TagsOnly accepts only activities whose tag is in the set.
	TagsOnly
	// TagsDefaultAnd accepts untagged activities and those in the set.
	TagsDefaultAnd
	// TagsAny accepts every activity.
	TagsAny
	// TagsNone accepts no activity (orchestration-only workers).
	TagsNone
)

// TagFilter says which activities a worker fetches, by tag. The zero value
// accepts only untagged activities. Build others with OnlyTags,
// DefaultAndTags, AnyTag and NoTags. A TagFilter is immutable.
type TagFilter struct {
	mode TagMode
	tags []string // sorted, unique; only for TagsOnly and TagsDefaultAnd
}

// DefaultOnlyTags accepts only untagged activities.
func DefaultOnlyTags() TagFilter { return TagFilter{} }

// AnyTag accepts every activity.
func AnyTag() TagFilter { return TagFilter{mode: TagsAny} }

// NoTags accepts no activity.
func NoTags() TagFilter { return TagFilter{mode: TagsNone} }

// OnlyTags accepts only activities carrying one of tags: 1 to MaxWorkerTags
// distinct, non-empty tags.
func OnlyTags(tags ...string) (TagFilter, error) { return newTagFilter(TagsOnly, tags) }

// DefaultAndTags accepts untagged activities and those carrying one of tags:
// 1 to MaxWorkerTags distinct, non-empty tags.
func DefaultAndTags(tags ...string) (TagFilter, error) { return newTagFilter(TagsDefaultAnd, tags) }

func newTagFilter(mode TagMode, tags []string) (TagFilter, error) {
	set := slices.Clone(tags)
	slices.Sort(set)
	set = slices.Compact(set)
	switch {
	case len(set) == 0:
		return TagFilter{}, fmt.Errorf("tag filter needs at least one tag")
	case len(set) > MaxWorkerTags:
		return TagFilter{}, fmt.Errorf("a worker can subscribe to at most %d tags, got %d", MaxWorkerTags, len(set))
	case set[0] == "":
		return TagFilter{}, fmt.Errorf("tag filter contains an empty tag")
	}
	return TagFilter{mode: mode, tags: set}, nil
}

// Mode returns the filter's mode.
func (f TagFilter) Mode() TagMode { return f.mode }

// Tags returns the filter's tags, sorted (nil unless the mode is TagsOnly or
// TagsDefaultAnd).
func (f TagFilter) Tags() []string { return slices.Clone(f.tags) }

// AcceptsUntagged reports whether untagged activities pass the filter.
func (f TagFilter) AcceptsUntagged() bool {
	return f.mode == TagsDefaultOnly || f.mode == TagsDefaultAnd || f.mode == TagsAny
}

// Matches reports whether an activity with the given tag ("" for untagged)
// passes the filter.
func (f TagFilter) Matches(tag string) bool {
	switch f.mode {
	case TagsAny:
		return true
	case TagsNone:
		return false
	case TagsDefaultOnly:
		return tag == ""
	case TagsOnly:
		return tag != "" && slices.Contains(f.tags, tag)
	case TagsDefaultAnd:
		return tag == "" || slices.Contains(f.tags, tag)
	}
	return false
}

// String renders the filter for logs.
func (f TagFilter) String() string {
	switch f.mode {
	case TagsAny:
		return "any"
	case TagsNone:
		return "none"
	case TagsDefaultOnly:
		return "default"
	case TagsOnly:
		return "only(" + strings.Join(f.tags, ",") + ")"
	case TagsDefaultAnd:
		return "default+(" + strings.Join(f.tags, ",") + ")"
	}
	return "invalid"
}

// SemVer is a semantic version without pre-release or build metadata, as
// stamped on history events by the runtime. Its JSON form is "major.minor.patch".
type SemVer struct {
	Major, Minor, Patch uint64
}

// ParseSemVer parses "major.minor.patch" (each a decimal without sign).
func ParseSemVer(s string) (SemVer, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return SemVer{}, fmt.Errorf("version %q is not major.minor.patch", s)
	}
	var v [3]uint64
	for i, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') || strings.ContainsAny(p, "+-") {
			return SemVer{}, fmt.Errorf("version %q has an invalid component %q", s, p)
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return SemVer{}, fmt.Errorf("version %q has an invalid component %q", s, p)
		}
		v[i] = n
	}
	return SemVer{Major: v[0], Minor: v[1], Patch: v[2]}, nil
}

// String renders "major.minor.patch".
func (v SemVer) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or +1 as v is older than, equal to or newer than o.
func (v SemVer) Compare(o SemVer) int {
	for _, d := range [3][2]uint64{{v.Major, o.Major}, {v.Minor, o.Minor}, {v.Patch, o.Patch}} {
		if d[0] != d[1] {
			if d[0] < d[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// MarshalText implements encoding.TextMarshaler.
func (v SemVer) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (v *SemVer) UnmarshalText(b []byte) error {
	p, err := ParseSemVer(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// SemVerRange is an inclusive version range [Min, Max].
type SemVerRange struct {
	Min, Max SemVer
}

// Contains reports whether Min <= v <= Max.
func (r SemVerRange) Contains(v SemVer) bool { return r.Min.Compare(v) <= 0 && v.Compare(r.Max) <= 0 }

// DispatcherCapabilityFilter restricts fetch_orchestration_item to executions
// whose pinned runtime version the dispatcher can replay. An execution is
// compatible if its pinned version lies in any of the ranges; an execution
// with no pinned version is always compatible.
type DispatcherCapabilityFilter struct {
	SupportedVersions []SemVerRange
}

// IsCompatible reports whether an execution pinned at v may be fetched.
func (f DispatcherCapabilityFilter) IsCompatible(v SemVer) bool {
	for _, r := range f.SupportedVersions {
		if r.Contains(v) {
			return true
		}
	}
	return false
}

// DefaultCapabilityFilter accepts every version up to and including current:
// replay engines are backwards compatible.
func DefaultCapabilityFilter(current SemVer) *DispatcherCapabilityFilter {
	return &DispatcherCapabilityFilter{SupportedVersions: []SemVerRange{{Max: current}}}
}
