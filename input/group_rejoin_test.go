package input

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupRejoinUnderNewMemberCommitsNothing: a member whose session the
// coordinator forgot (it stalled past session_timeout; another member took
// its partitions and committed further) rejoins under a new member id, and
// kgo then reports the old session's partitions as revoked, not lost. A
// commit of their acknowledged positions there passes under the new
// generation and moves the group's offset back behind the new owner's. Here
// the coordinator's forgetting is played by kfake's control hooks: the
// member's JoinGroup under its member id is answered UNKNOWN_MEMBER_ID, and
// the new session's assignment is empty, as when another member owns the
// partition.
func TestGroupRejoinUnderNewMemberCommitsNothing(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 15)...)
	group := uniq(t, "g")
	a := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
max_batch_records: 5
commit_period: 50ms
session_timeout: 6s
heartbeat_interval: 500ms
rebalance_timeout: 3s
revoke_ack_timeout: 1s
`, topic, group))
	a.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	read := func() {
		t.Helper()
		b, ack, err := a.in.ReadBatch(ctx)
		require.NoError(t, err)
		require.Len(t, b, 5)
		require.NoError(t, ack(ctx, nil))
	}
	read()
	wait(t, 10*time.Second, func() bool { return e.committed(t, group, topic, 0) == 5 })

	m := a.raw.conn.member
	old, _ := a.raw.conn.consumeCl.GroupMetadata()
	require.NotEmpty(t, old)
	part := tp{topic, 0}

	// The coordinator forgets the member: its next commit, and its
	// JoinGroup under the old member id, are answered UNKNOWN_MEMBER_ID
	// (kgo then rejoins under a new member id); the new session's
	// assignment is empty, as when another member took the partition.
	var refusedCommit, refusedJoin, emptied atomic.Bool
	e.fake.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.OffsetCommitRequest)
		if req.Group != group || req.MemberID != old {
			e.fake.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownMemberID.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refusedCommit.Store(true)
		return resp, nil, true
	})
	e.fake.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.JoinGroupRequest)
		if req.Group != group || req.MemberID != old {
			e.fake.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = req.Version
		resp.ErrorCode = kerr.UnknownMemberID.Code
		refusedJoin.Store(true)
		return resp, nil, true
	})
	e.fake.ControlKey(int16(kmsg.SyncGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.SyncGroupRequest)
		if req.Group != group || req.MemberID == old || len(req.GroupAssignment) == 0 {
			e.fake.KeepControl()
			return nil, nil, false
		}
		// The new session's leader plan, changed before kfake runs the
		// sync: nothing for anyone.
		var none kmsg.ConsumerMemberAssignment
		for i := range req.GroupAssignment {
			req.GroupAssignment[i].MemberAssignment = none.AppendTo(nil)
		}
		emptied.Store(true)
		return nil, nil, false
	})
	read() // acknowledged up to 10; the periodic commit meets the refusal

	wait(t, 30*time.Second, func() bool {
		_, held := m.tr.assignmentOf(part)
		return !held && refusedCommit.Load() && refusedJoin.Load() && emptied.Load()
	})
	now, _ := a.raw.conn.consumeCl.GroupMetadata()
	require.NotEqual(t, old, now, "the member rejoined under a new member id")
	require.Equal(t, int64(5), e.committed(t, group, topic, 0), "a position of the old session was committed under the new one")
}
