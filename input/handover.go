package input

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"

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

// keptStarts replaces, for parts, the group's committed offsets in l with the
// positions that the group's PositionKeeper keeps (a kafka_eos output in
// mirror mode, which writes to another cluster), if the group's takeover is
// one: those are where the copy resumes, the group's offsets on the cluster
// read are only written after the fact. Called before l resolves the starts
// of parts; generation is the group generation they were assigned in (-1
// without group_membership).
func keptStarts(ctx context.Context, res *service.Resources, adm *kadm.Client, group string, l *listing, parts []tp, generation int32) error {
	k, ok := handover.LookupKeeper(res, group)
	if !ok || group == "" || len(parts) == 0 {
		return nil
	}
	req := handover.PositionsRequest{
		Partitions: map[string][]int32{}, PartitionCounts: map[string]int32{}, Generation: generation,
		SourceConfigs: handover.TopicConfigsSet(adm),
	}
	for _, p := range parts {
		req.Partitions[p.Topic] = append(req.Partitions[p.Topic], p.Partition)
		if td, ok := l.meta.Topics[p.Topic]; ok {
			req.PartitionCounts[p.Topic] = int32(len(td.Partitions))
		}
	}
	pos, err := k.Positions(ctx, req)
	if err != nil {
		return fmt.Errorf("the positions the output of group %s keeps: %w", group, err)
	}
	committed := kadm.OffsetResponses{}
	for t, ps := range pos {
		for p, at := range ps {
			committed.Add(kadm.OffsetResponse{Offset: kadm.Offset{Topic: t, Partition: p, At: at, LeaderEpoch: -1}})
		}
	}
	l.committed = committed
	return nil
}

// errTakeoverReleased is what a commit returns once the output that
// committed the group's offsets in its transactions closed.
var errTakeoverReleased = errors.New("kafka_native: the kafka_eos output that commits this consumer group's offsets in its transactions has closed; " +
	"the acknowledged positions are not committed outside a transaction (that could move the group's offsets back past a successor's), the next start resumes from what the output committed")

// handoverCommitter commits through the group's CommitTakeover when one is
// registered (looked up on every commit, so registration order does not
// matter) and directly to the group if none ever was; once the takeover is
// released (its output closed), it commits nothing (errTakeoverReleased). When the takeover keeps the
// positions itself on another cluster (a PositionKeeper), the positions it
// took are also committed directly to the group, after the fact: the group's
// offsets then show the copy's progress to lag tools on the cluster read, and
// are never read back by the copy (a failure is logged, not returned).
type handoverCommitter struct {
	res    *service.Resources
	group  string
	direct OffsetCommitter
	log    *service.Logger
	// warned is when the last failed monitoring commit was logged.
	warned atomic.Int64
}

func (h *handoverCommitter) CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error {
	t, ok := handover.Lookup(h.res, h.group)
	if !ok {
		if handover.Released(h.res, h.group) {
			return fmt.Errorf("%w: group %s", errTakeoverReleased, h.group)
		}
		return h.direct.CommitOffsets(ctx, offsets)
	}
	if err := t.CommitOffsets(ctx, offsets); err != nil {
		return err
	}
	if _, keeper := t.(handover.PositionKeeper); keeper {
		if err := h.direct.CommitOffsets(ctx, offsets); err != nil && h.log != nil && ctx.Err() == nil {
			if now := time.Now().UnixNano(); now-h.warned.Load() > int64(time.Minute) {
				h.warned.Store(now)
				h.log.Warnf("Group %s: committing the copied positions to the group for monitoring failed (the copy does not depend on them; logged at most once a minute): %v", h.group, err)
			}
		}
	}
	return nil
}
