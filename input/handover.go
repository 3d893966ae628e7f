package input

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/handover"
)

// The input's side of the seam with a kafka_eos output (package handover):
// where partitions start, the group membership, revoked partitions, and
// commits routed through the output's CommitTakeover when one is registered.

// handOverStarts tells the group's CommitTakeover, if one is registered,
// where the partitions of plans start.
func handOverStarts(res *service.Resources, group string, plans []*partPlan) {
	if group == "" || len(plans) == 0 {
		return
	}
	t, ok := handover.Lookup(res, group)
	if !ok {
		return
	}
	starts := map[string]map[int32]int64{}
	for _, pp := range plans {
		if starts[pp.Topic] == nil {
			starts[pp.Topic] = map[int32]int64{}
		}
		starts[pp.Topic][pp.Partition] = pp.start
	}
	t.StartAt(starts)
}

// handOverMember tells the group's CommitTakeover, if one is registered,
// that the input reads as a member of the group.
func handOverMember(res *service.Resources, group string, m handover.GroupState) {
	if t, ok := handover.Lookup(res, group); ok {
		t.Member(m)
	}
}

// handOverRevoked tells the group's CommitTakeover, if one is registered,
// that the member gave parts up, and waits for it (bounded by ctx).
func handOverRevoked(ctx context.Context, res *service.Resources, group string, parts map[string][]int32) {
	if t, ok := handover.Lookup(res, group); ok {
		t.Revoked(ctx, parts)
	}
}

// handoverCommitter commits through the group's CommitTakeover when one is
// registered (looked up on every commit, so registration order does not
// matter) and directly to the group otherwise.
type handoverCommitter struct {
	res    *service.Resources
	group  string
	direct OffsetCommitter
}

func (h *handoverCommitter) CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error {
	if t, ok := handover.Lookup(h.res, h.group); ok {
		return t.CommitOffsets(ctx, offsets)
	}
	return h.direct.CommitOffsets(ctx, offsets)
}
