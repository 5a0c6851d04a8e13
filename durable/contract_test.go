package durable

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTagFilter(t *testing.T) {
	only, err := OnlyTags("gpu", "gpu", "fpga")
	require.NoError(t, err)
	defAnd, err := DefaultAndTags("gpu")
	require.NoError(t, err)

	tests := []struct {
		name     string
		f        TagFilter
		untagged bool
		gpu      bool
		cpu      bool
	}{
		{"zero value is default only", TagFilter{}, true, false, false},
		{"default only", DefaultOnlyTags(), true, false, false},
		{"only", only, false, true, false},
		{"default and", defAnd, true, true, false},
		{"any", AnyTag(), true, true, true},
		{"none", NoTags(), false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.untagged, tc.f.Matches(""))
			require.Equal(t, tc.untagged, tc.f.AcceptsUntagged())
			require.Equal(t, tc.gpu, tc.f.Matches("gpu"))
			require.Equal(t, tc.cpu, tc.f.Matches("cpu"))
		})
	}
	require.Equal(t, []string{"fpga", "gpu"}, only.Tags(), "deduplicated and sorted")
	require.Equal(t, "only(fpga,gpu)", only.String())
	require.Equal(t, TagsDefaultAnd, defAnd.Mode())

	_, err = OnlyTags()
	require.ErrorContains(t, err, "at least one")
	_, err = DefaultAndTags("a", "b", "c", "d", "e", "f")
	require.ErrorContains(t, err, "at most 5")
	_, err = OnlyTags("a", "")
	require.ErrorContains(t, err, "empty tag")
	five, err := OnlyTags("a", "b", "c", "d", "e")
	require.NoError(t, err)
	require.Len(t, five.Tags(), 5)

	// Tags returns a copy: callers cannot mutate the filter.
	tags := only.Tags()
	tags[0] = "x"
	require.Equal(t, []string{"fpga", "gpu"}, only.Tags())
}

func TestSemVer(t *testing.T) {
	v, err := ParseSemVer("1.20.3")
	require.NoError(t, err)
	require.Equal(t, SemVer{1, 20, 3}, v)
	require.Equal(t, "1.20.3", v.String())
	for _, bad := range []string{"", "1", "1.2", "1.2.3.4", "1.2.x", "-1.2.3", "01.2.3", "1.2.3-beta", "1..3", "+1.2.3"} {
		_, err := ParseSemVer(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, -1, SemVer{0, 9, 9}.Compare(SemVer{1, 0, 0}))
	require.Equal(t, 1, SemVer{1, 0, 1}.Compare(SemVer{1, 0, 0}))
	require.Equal(t, 0, SemVer{2, 1, 0}.Compare(SemVer{2, 1, 0}))

	var back SemVer
	text, err := v.MarshalText()
	require.NoError(t, err)
	require.NoError(t, back.UnmarshalText(text))
	require.Equal(t, v, back)
	require.Error(t, back.UnmarshalText([]byte("x")))
}

func TestCapabilityFilter(t *testing.T) {
	f := DefaultCapabilityFilter(SemVer{0, 3, 0})
	require.True(t, f.IsCompatible(SemVer{0, 0, 0}))
	require.True(t, f.IsCompatible(SemVer{0, 3, 0}), "upper bound inclusive")
	require.False(t, f.IsCompatible(SemVer{0, 3, 1}))

	multi := DispatcherCapabilityFilter{SupportedVersions: []SemVerRange{
		{Min: SemVer{1, 0, 0}, Max: SemVer{1, 5, 0}}, {Min: SemVer{3, 0, 0}, Max: SemVer{3, 0, 0}}}}
	require.True(t, multi.IsCompatible(SemVer{1, 0, 0}), "lower bound inclusive")
	require.False(t, multi.IsCompatible(SemVer{2, 0, 0}))
	require.True(t, multi.IsCompatible(SemVer{3, 0, 0}))
	require.False(t, DispatcherCapabilityFilter{}.IsCompatible(SemVer{}), "no ranges, nothing compatible")
}

func TestProviderError(t *testing.T) {
	cause := context.DeadlineExceeded
	r := Retryable("fetch_work_item", cause, "query failed after %d tries", 3)
	p := Permanent("ack_work_item", nil, "lock token %q not found", "t")

	require.Equal(t, "fetch_work_item: query failed after 3 tries: context deadline exceeded", r.Error())
	require.Equal(t, `ack_work_item: lock token "t" not found`, p.Error())

	wrapped := fmt.Errorf("dispatcher: %w", r)
	require.True(t, errors.Is(wrapped, ErrRetryable))
	require.False(t, errors.Is(wrapped, ErrPermanent))
	require.True(t, errors.Is(wrapped, context.DeadlineExceeded), "cause is visible")
	require.True(t, IsRetryable(wrapped))
	require.False(t, IsRetryable(p))
	require.True(t, errors.Is(p, ErrPermanent))
	require.False(t, IsRetryable(errors.New("plain")))

	var pe *ProviderError
	require.True(t, errors.As(wrapped, &pe))
	require.Equal(t, "fetch_work_item", pe.Operation)
	d := pe.InfrastructureDetails()
	require.True(t, d.IsRetryable())
	require.Equal(t, "infrastructure:fetch_work_item: query failed after 3 tries", d.DisplayMessage())
}

func TestStatus(t *testing.T) {
	require.False(t, StatusRunning.IsTerminal())
	for _, s := range []Status{StatusCompleted, StatusFailed, StatusContinuedAsNew} {
		require.True(t, s.IsTerminal(), s)
	}
}

// fakeAdmin implements the hierarchy primitives over a parent map; the other
// methods are unused by the helpers under test.
type fakeAdmin struct {
	ProviderAdmin
	parents map[string]string
	deleted []string
}

func (f *fakeAdmin) ListChildren(_ context.Context, id string) ([]string, error) {
	var out []string
	for _, c := range []string{"a", "b", "a1", "a2", "b1", "loop"} {
		if p, ok := f.parents[c]; ok && p == id {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *fakeAdmin) GetParentID(_ context.Context, id string) (string, error) {
	if id == "missing" {
		return "", Permanent("get_parent_id", nil, "instance %q not found", id)
	}
	return f.parents[id], nil
}

func (f *fakeAdmin) GetInstanceTree(ctx context.Context, id string) (InstanceTree, error) {
	return CollectInstanceTree(ctx, f, id)
}

func (f *fakeAdmin) DeleteInstancesAtomic(_ context.Context, ids []string, _ bool) (DeleteInstanceResult, error) {
	f.deleted = ids
	return DeleteInstanceResult{InstancesDeleted: uint64(len(ids))}, nil
}

func TestInstanceTreeHelpers(t *testing.T) {
	ctx := context.Background()
	f := &fakeAdmin{parents: map[string]string{"a": "root", "b": "root", "a1": "a", "a2": "a", "b1": "b"}}

	tree, err := CollectInstanceTree(ctx, f, "root")
	require.NoError(t, err)
	require.Equal(t, []string{"root", "a", "b", "a1", "a2", "b1"}, tree.AllIDs, "root first, breadth first")
	require.Equal(t, 6, tree.Size())
	require.False(t, tree.IsRootOnly())

	leaf, err := CollectInstanceTree(ctx, f, "b1")
	require.NoError(t, err)
	require.True(t, leaf.IsRootOnly())

	res, err := DeleteInstanceTree(ctx, f, "root", false)
	require.NoError(t, err)
	require.Equal(t, uint64(6), res.InstancesDeleted)
	require.Equal(t, tree.AllIDs, f.deleted)

	_, err = DeleteInstanceTree(ctx, f, "a", true)
	require.ErrorIs(t, err, ErrPermanent)
	require.ErrorContains(t, err, "sub-orchestration")

	_, err = DeleteInstanceTree(ctx, f, "missing", true)
	require.ErrorIs(t, err, ErrPermanent)

	cyclic := &fakeAdmin{parents: map[string]string{"a": "loop", "loop": "a"}}
	_, err = CollectInstanceTree(ctx, cyclic, "a")
	require.ErrorContains(t, err, "appears twice")

	var sum DeleteInstanceResult
	sum.Add(DeleteInstanceResult{1, 2, 3, 4})
	sum.Add(DeleteInstanceResult{1, 1, 1, 1})
	require.Equal(t, DeleteInstanceResult{2, 3, 4, 5}, sum)
	var pr PruneResult
	pr.Add(PruneResult{1, 2, 3})
	require.Equal(t, PruneResult{1, 2, 3}, pr)
}

// TestListFilterMatches: the criteria are ANDed, zero values select
// everything, the name is compared exactly and the range is [from, to).
func TestListFilterMatches(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		f    ListFilter
		want bool
	}{
		{"zero filter", ListFilter{}, true},
		{"name", ListFilter{Name: "Approval"}, true},
		{"another name", ListFilter{Name: "Greet"}, false},
		{"name is case-sensitive", ListFilter{Name: "approval"}, false},
		{"name is not a prefix", ListFilter{Name: "Approv"}, false},
		{"status", ListFilter{Status: StatusRunning}, true},
		{"another status", ListFilter{Status: StatusCompleted}, false},
		{"from is inclusive", ListFilter{CreatedFrom: at}, true},
		{"after from", ListFilter{CreatedFrom: at.Add(time.Millisecond)}, false},
		{"to is exclusive", ListFilter{CreatedTo: at}, false},
		{"before to", ListFilter{CreatedTo: at.Add(time.Millisecond)}, true},
		{"all", ListFilter{Name: "Approval", Status: StatusRunning, CreatedFrom: at, CreatedTo: at.Add(time.Second)}, true},
		{"all but the name", ListFilter{Name: "Greet", Status: StatusRunning, CreatedFrom: at, CreatedTo: at.Add(time.Second)}, false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.f.Matches("Approval", StatusRunning, at), tc.name)
	}
}
