package input

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/connect-eos/connect-eos/handover"
)

// fakeKeeper stands in for a kafka_eos output in mirror mode: it keeps the
// positions itself and answers Positions from them.
type fakeKeeper struct {
	fakeTakeover
	positions map[string]map[int32]int64
	requests  []handover.PositionsRequest
}

func (k *fakeKeeper) Positions(_ context.Context, req handover.PositionsRequest) (map[string]map[int32]int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.requests = append(k.requests, req)
	out := map[string]map[int32]int64{}
	for t, ps := range req.Partitions {
		for _, p := range ps {
			if at, ok := k.positions[t][p]; ok {
				if out[t] == nil {
					out[t] = map[int32]int64{}
				}
				out[t][p] = at
			}
		}
	}
	return out, nil
}

func (k *fakeKeeper) reqs() []handover.PositionsRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]handover.PositionsRequest(nil), k.requests...)
}

// TestPositionKeeper: with a PositionKeeper as the group's takeover (mirror
// mode), the input starts each partition at the keeper's position, not at the
// group's committed offset on the cluster it reads (set here to something
// else); a partition without a position starts where reset_offset says; every
// message carries the record it was read from; what the input hands over to the
// keeper is also committed to the group, for monitoring.
func TestPositionKeeper(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 6)...)
	e.produce(t, topic, 1, vals("b", 4)...)
	group := uniq(t, "g")
	e.commit(t, group, topic, 0, 1) // ignored: the keeper says 3
	res := service.MockResources()
	k := &fakeKeeper{fakeTakeover: fakeTakeover{offsets: map[string]map[int32]int64{}}, positions: map[string]map[int32]int64{topic: {0: 3}}}
	require.NoError(t, handover.RegisterCommitTakeover(res, group, k))
	h := e.newInputWith(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
start_offset: committed
reset_offset: earliest
stop_offset: latest
commit_period: 10ms
`, topic, group), res)
	h.mustConnect()
	reqs := k.reqs()
	require.Len(t, reqs, 1, "one Positions call at Connect")
	assert.ElementsMatch(t, []int32{0, 1}, reqs[0].Partitions[topic])
	assert.Equal(t, map[string]int32{topic: 2}, reqs[0].PartitionCounts)
	assert.Equal(t, int32(-1), reqs[0].Generation)
	assert.Equal(t, map[int32]int64{0: 3, 1: 0}, k.startsOf(topic), "the keeper's position, else reset_offset")

	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	// The request describes the source topics for a keeper that creates
	// their targets: the configs set on the topic itself, no defaults.
	require.NotNil(t, reqs[0].SourceConfigs)
	alt, err := e.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("-1")}}, topic)
	require.NoError(t, err)
	require.NoError(t, alt[0].Err)
	set, err := reqs[0].SourceConfigs(ctx, []string{topic})
	require.NoError(t, err)
	assert.Equal(t, map[string]map[string]string{topic: {"retention.ms": "-1"}}, set)
	_, err = reqs[0].SourceConfigs(ctx, []string{topic, "no-such-topic"})
	require.ErrorContains(t, err, "no-such-topic")

	got := map[int32][]int64{}
	for {
		b, ack, err := h.in.ReadBatch(ctx)
		if err != nil {
			require.ErrorIs(t, err, service.ErrEndOfInput)
			break
		}
		for _, m := range b {
			r, ok := handover.RecordOf(m)
			require.True(t, ok, "the message carries its record")
			body, _ := m.AsBytes()
			assert.Equal(t, r.Value, body)
			got[r.Partition] = append(got[r.Partition], r.Offset)
		}
		require.NoError(t, ack(ctx, nil))
	}
	assert.Equal(t, map[int32][]int64{0: {3, 4, 5}, 1: {0, 1, 2, 3}}, got)
	k.mu.Lock()
	handed := maps.Clone(k.offsets[topic])
	k.mu.Unlock()
	assert.Equal(t, map[int32]int64{0: 6, 1: 4}, handed)
	// Committed to the group as well, after the fact.
	wait(t, 10*time.Second, func() bool {
		return e.committed(t, group, topic, 0) == 6 && e.committed(t, group, topic, 1) == 4
	})
}

// TestPositionKeeperMembership: a group member asks the keeper for the
// positions of the partitions it is assigned, with the generation, and starts
// them there.
func TestPositionKeeperMembership(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 5)...)
	e.produce(t, topic, 1, vals("b", 5)...)
	group := uniq(t, "g")
	res := service.MockResources()
	k := &fakeKeeper{fakeTakeover: fakeTakeover{offsets: map[string]map[int32]int64{}}, positions: map[string]map[int32]int64{topic: {1: 2}}}
	require.NoError(t, handover.RegisterCommitTakeover(res, group, k))
	h := e.newInputWith(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
commit_period: 20ms
`, topic, group), res)
	h.mustConnect()
	byPart := map[int32][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(byPart[0]) < 5 || len(byPart[1]) < 3 {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		for _, m := range b {
			r, ok := handover.RecordOf(m)
			require.True(t, ok)
			byPart[r.Partition] = append(byPart[r.Partition], string(r.Value))
		}
		require.NoError(t, ack(ctx, nil))
	}
	assert.Equal(t, strs(vals("a", 5)), byPart[0])
	assert.Equal(t, strs(vals("b", 5))[2:], byPart[1], "partition 1 from the keeper's position")
	reqs := k.reqs()
	require.NotEmpty(t, reqs)
	assert.ElementsMatch(t, []int32{0, 1}, reqs[0].Partitions[topic])
	assert.GreaterOrEqual(t, reqs[0].Generation, int32(0), "the generation of the assignment")
}
