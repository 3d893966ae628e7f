package input

import (
	"context"
	"fmt"
	"sync"
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
	e, a, topic, group, ctx := rejoinMember(t, 15)
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

// TestGroupRejoinKeptPartitionRestartsFromCommitted: the member's session is
// forgotten while it holds partition 0 (a commit answered UNKNOWN_MEMBER_ID
// makes kgo rejoin), a successor commits further meanwhile, and the new
// session under a new member id is given partition 0 again. kgo's
// cooperative balancer calls that partition kept: no revoke, no new start,
// the cursor and the tracked position of the old session go on. Its next
// commit would then move the group's offset back behind the successor's,
// and the records between be read again. A kept partition of a new session
// restarts from the group's committed offset, as an added one does. Here the
// successor's commit is played by rewriting the member's last accepted
// commit (to 25, while it acknowledged 10).
func TestGroupRejoinKeptPartitionRestartsFromCommitted(t *testing.T) {
	e, a, topic, group, ctx := rejoinMember(t, 30)
	read := func() (first int64) {
		t.Helper()
		b, ack, err := a.in.ReadBatch(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, b)
		require.NoError(t, ack(ctx, nil))
		v, ok := b[0].MetaGetMut("kafka_offset")
		require.True(t, ok)
		return v.(int64)
	}
	require.Equal(t, int64(0), read())
	wait(t, 10*time.Second, func() bool { return e.committed(t, group, topic, 0) == 5 })

	old, _ := a.raw.conn.consumeCl.GroupMetadata()
	require.NotEmpty(t, old)

	const successor = 25
	var (
		played, refused atomic.Bool
		mu              sync.Mutex
		newCommits      []int64 // the offsets the new session asked to commit
	)
	e.fake.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.OffsetCommitRequest)
		if req.Group != group {
			return nil, nil, false
		}
		if req.MemberID != old {
			mu.Lock()
			for _, rt := range req.Topics {
				for _, rp := range rt.Partitions {
					newCommits = append(newCommits, rp.Offset)
				}
			}
			mu.Unlock()
			return nil, nil, false
		}
		if !played.Load() {
			// The successor's commit, accepted as the member's.
			for i := range req.Topics {
				for j := range req.Topics[i].Partitions {
					if req.Topics[i].Partitions[j].Offset >= 10 {
						req.Topics[i].Partitions[j].Offset = successor
						played.Store(true)
					}
				}
			}
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
		refused.Store(true)
		e.fake.KeepControl()
		return resp, nil, true
	})
	e.fake.ControlKey(int16(kmsg.JoinGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.JoinGroupRequest)
		if req.Group != group || req.MemberID != old {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.Version = req.Version
		resp.ErrorCode = kerr.UnknownMemberID.Code
		e.fake.KeepControl()
		return resp, nil, true
	})

	// The new session's SyncGroup is held until the test has looked at
	// the member between its JoinGroup (a new member id and generation)
	// and its assignment: nothing may be stamped with them yet, since the
	// tracked spans are still the old session's.
	held, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	releaseSync := func() { released.Do(func() { close(release) }) }
	defer releaseSync()
	e.fake.ControlKey(int16(kmsg.SyncGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.SyncGroupRequest)
		if req.Group == group && req.MemberID != old {
			once.Do(func() {
				close(held)
				e.fake.SleepControl(func() { <-release })
			})
		}
		return nil, nil, false
	})

	require.Equal(t, int64(5), read()) // acknowledged up to 10: committed as the successor's 25
	wait(t, 10*time.Second, func() bool { return e.committed(t, group, topic, 0) == successor })
	read() // acknowledged up to 15: that commit is refused and kgo rejoins
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the member never synced under a new member id")
	}
	m := a.raw.conn.member
	_, gen, mem, owned := m.Assignment(topic, 0)
	require.True(t, owned)
	require.NotEqual(t, old, mem)
	require.Equal(t, int32(-1), gen, "a span of the old session could be stamped with the new session's generation")
	releaseSync()
	wait(t, 30*time.Second, func() bool {
		// The new session's assignment ran, and partition 0 is tracked.
		now, _ := a.raw.conn.consumeCl.GroupMetadata()
		last := m.member.Load()
		_, tracked := m.tr.assignmentOf(tp{topic, 0})
		return refused.Load() && now != "" && now != old && last != nil && *last == now && tracked
	})

	// Give the commit loop time to commit what the old session
	// acknowledged (15) under the new one, then read on until the group's
	// offset reaches the end: every commit of the new session is at or past
	// the successor's.
	time.Sleep(500 * time.Millisecond)
	for e.committed(t, group, topic, 0) < 30 {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		b, ack, err := a.in.ReadBatch(rctx)
		rcancel()
		if err == nil {
			require.NoError(t, ack(ctx, nil))
			_ = b
		}
		require.NoError(t, ctx.Err(), "the group's offset never reached 30")
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the new session's commits: %v", newCommits)
	require.NotEmpty(t, newCommits)
	for _, o := range newCommits {
		require.GreaterOrEqual(t, o, int64(successor), "the new session committed %v: an offset behind the successor's commit", newCommits)
	}
}

// rejoinMember connects a group_membership member of a fresh group that
// commits itself, on a fresh one-partition kfake topic holding n records, in
// batches of 5, with session, heartbeat and rebalance timeouts short enough
// for a rejoin to run within a test. ctx bounds the test (60 s).
func rejoinMember(t *testing.T, n int) (e *env, a *harness, topic, group string, ctx context.Context) {
	t.Helper()
	e = newKfakeEnv(t)
	topic = e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", n)...)
	group = uniq(t, "g")
	a = e.newInput(t, fmt.Sprintf(`
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
	t.Cleanup(cancel)
	return e, a, topic, group, ctx
}
