package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfake starts a classic group member's session timer when its JoinGroup
// answer reaches it (and at each heartbeat), and removes the members that
// did not send SyncGroup only while the group is still completing its
// rebalance. A member whose process died while its JoinGroup waited for the
// rebalance (an instance crashed while the group waited for a frozen
// member's session to end) never gets a timer if kfake finds its connection
// closed when it answers (it picks at random between that and a send into the
// connection's buffered channel, which starts the timer): once the leader's SyncGroup
// made the group stable, kfake keeps it for good, with the partitions the
// leader gave it, and no rebalance ever comes (seed 3486820604432258280:
// plain mode with two members, the zombie's rival crashed in its join; the
// partition given to it was read by nobody). Apache Kafka schedules every
// member's session expiry when the join completes, answered or not, and
// removes a member that did not sync within the rebalance timeout in the
// stable state too: that member leaves a session timeout later and its
// partitions go to the live members.
//
// evictDead stands in for Kafka there: it removes (LeaveGroup) the members of
// group whose client is an instance that exited (dead reports it by client
// id) long enough ago that Apache Kafka would have expired them, and returns
// their member ids. A live member, frozen or not, is never touched: kfake's
// timers expire it as Kafka's would.
func evictDead(ctx context.Context, cl *kgo.Client, group string, dead func(clientID string) bool) ([]string, error) {
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	g, ok := described[group]
	if !ok || errors.Is(g.Err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	if g.Err != nil {
		return nil, g.Err
	}
	var gone []string
	for _, m := range g.Members {
		if !dead(m.ClientID) {
			continue
		}
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group = group
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.MemberID
		req.Members = append(req.Members, lm)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return gone, err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return gone, fmt.Errorf("leaving %s for %s: %w", m.MemberID, m.ClientID, err)
		}
		for _, r := range resp.Members {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownMemberID) {
				return gone, fmt.Errorf("leaving %s for %s: %w", m.MemberID, m.ClientID, err)
			}
		}
		gone = append(gone, m.MemberID)
	}
	return gone, nil
}

// deadFor is how long after an instance exited the harness takes its group
// membership for one Apache Kafka would have ended (evictDead): its session
// timeout, and the rebalance timeout within which kfake removes a member that
// did not sync while the group completes its rebalance, with a margin.
const deadFor = sessionTimeout + rebalanceTimeout + time.Second

// evictDeadMembers runs evictDead for the run's group, at most every half
// second, in the modes with group_membership.
func (r *runner) evictDeadMembers() {
	if !r.p.Mode.members() || time.Since(r.lastEvict) < 500*time.Millisecond {
		return
	}
	r.lastEvict = time.Now()
	now := time.Now()
	dead := map[string]bool{}
	for _, in := range r.all {
		if at, ok := in.exitedAt(); ok && now.Sub(at) > deadFor {
			dead["sim-"+in.name] = true
		}
	}
	if len(dead) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gone, err := evictDead(ctx, r.adm, group, func(id string) bool { return dead[id] })
	if err != nil {
		r.logf("evicting the group members of exited instances: %v", err)
	}
	if len(gone) > 0 {
		r.res.Stats.KfakeEvicted += len(gone)
		r.logf("kfake kept %d group member(s) of instances that exited over %s ago (a JoinGroup answer that reached nobody): removed, as Apache Kafka's session timeout would", len(gone), deadFor)
	}
}
