package handover

import (
	"context"
	"fmt"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The seam of the mirror mode: a kafka_eos output that writes to another
// cluster than the one its kafka_native input reads keeps the group's
// committed positions itself, on its own cluster, inside its transactions (a
// PositionKeeper). The input then starts every partition from the keeper's
// positions, never from the group's committed offsets on the cluster it reads:
// those are written after the fact, for monitoring only.
//
//   - The input asks the keeper (Positions) where the partitions it is about
//     to read start, before it resolves their starts: at Connect for the
//     partitions it reads directly, and in the group's assignment callback
//     for those a group_membership member is assigned. What the keeper
//     answers replaces the group's committed offset; a partition it has no
//     position for starts where start_offset and reset_offset say.
//   - Everything else is the CommitTakeover seam: StartAt, Member, Revoked,
//     CommitOffsets (acknowledged positions to commit with the next epoch).
//     The input additionally commits what it hands over to its group
//     directly, after the fact, so that lag tools see the copy's progress on
//     the cluster it reads; a failure there is logged, never fatal.
//   - In message format the input puts the record each message was read from
//     into the message's context (WithRecord), so that the mirror copies the
//     key (null kept), headers (order and repeats kept), timestamp and
//     partition exactly, whatever the message's metadata says.

// PositionKeeper is a CommitTakeover that keeps the committed positions of the
// group's partitions itself (kafka_eos mirror mode).
type PositionKeeper interface {
	CommitTakeover
	// Positions claims parts for this process and returns, per topic and
	// partition, the next offset to copy: the position committed by the
	// last epoch of whoever copied the partition before (this process
	// before a restart, or another member of the group). It returns only
	// once no earlier owner can commit anything of the partitions any
	// more: an owner that did not release a partition is fenced first. A
	// partition without a position is absent. It may block for as long
	// as ctx allows (an earlier owner's transaction may have to end).
	Positions(ctx context.Context, req PositionsRequest) (map[string]map[int32]int64, error)
}

// PositionsRequest is what the input knows when it asks for positions.
type PositionsRequest struct {
	// Partitions are the partitions to start, by topic.
	Partitions map[string][]int32
	// PartitionCounts is the number of partitions of each topic of
	// Partitions on the cluster the input reads (for creating a missing
	// target topic with as many).
	PartitionCounts map[string]int32
	// SourceConfigs, if set, describes topics on the cluster the input
	// reads: for each, the configs set on the topic itself (not the
	// broker's defaults), so that a missing target topic can be created
	// like its source. It asks that cluster (DescribeConfigs), so it is
	// called only when a topic is to be created.
	SourceConfigs func(ctx context.Context, topics []string) (map[string]map[string]string, error)
	// Generation is the group generation the partitions were assigned in
	// (group_membership), -1 otherwise. Informational: it is recorded with
	// the claim.
	Generation int32
}

// LookupKeeper returns the PositionKeeper registered for group on the
// resources of res's stream, if the group's CommitTakeover is one.
func LookupKeeper(res *service.Resources, group string) (PositionKeeper, bool) {
	t, ok := Lookup(res, group)
	if !ok {
		return nil, false
	}
	k, ok := t.(PositionKeeper)
	return k, ok
}

type recordKey struct{}

// WithRecord returns m carrying r, the record it was read from (kafka_native
// in message format, for a PositionKeeper). The record travels in the
// message's context like the span; a processor that builds new messages drops
// it.
func WithRecord(m *service.Message, r *kgo.Record) *service.Message {
	return m.WithContext(context.WithValue(m.Context(), recordKey{}, r))
}

// RecordOf returns the record m was read from, if the input put it there
// (WithRecord). It must not be modified.
func RecordOf(m *service.Message) (*kgo.Record, bool) {
	r, ok := m.Context().Value(recordKey{}).(*kgo.Record)
	return r, ok && r != nil
}

// TopicConfigsSet returns a SourceConfigs that asks adm's cluster. For each
// of the topics it describes, it returns the configs set on the topic
// itself (DescribeConfigs: those whose source is the topic's dynamic config),
// without the broker's defaults and without sensitive ones (whose values are
// not described). A topic that cannot be described fails the call with an
// error naming it.
func TopicConfigsSet(adm *kadm.Client) func(ctx context.Context, topics []string) (map[string]map[string]string, error) {
	return func(ctx context.Context, topics []string) (map[string]map[string]string, error) {
		return topicConfigsSet(ctx, adm, topics)
	}
}

func topicConfigsSet(ctx context.Context, adm *kadm.Client, topics []string) (map[string]map[string]string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("describing the configs of topics %v: %w", topics, err)
	}
	out := make(map[string]map[string]string, len(topics))
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("describing the configs of topic %s: %w", rc.Name, rc.Err)
		}
		set := map[string]string{}
		for _, c := range rc.Configs {
			if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil && !c.Sensitive {
				set[c.Key] = *c.Value
			}
		}
		out[rc.Name] = set
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			return nil, fmt.Errorf("describing the configs of topic %s: not in the answer", t)
		}
	}
	return out, nil
}
