package sim

import (
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKfakeKeepsMemberDeadInJoin: a member whose JoinGroup was still waiting
// when its process died can be kept by kfake for good, with the partitions
// the leader gave it (no session timer: its JoinGroup answer reached
// nobody), where Apache Kafka expires it a session timeout after the join
// completed; evictDead removes it and the live member gets every partition.
// If kfake starts expiring such members, the search fails: evictDead may go.
func TestKfakeKeepsMemberDeadInJoin(t *testing.T) {
	const topic, grp = "t", "g"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	adm, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()

	// The live member, an eager balancer: one rebalance moves partitions.
	live, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("live"), kgo.ConsumerGroup(grp), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.RebalanceTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			live.PollFetches(ctx)
		}
	}()
	waitAssigned(ctx, t, adm, grp, map[string]int{"live": 2})

	// The member that dies in its join: JoinGroup v3 (no member id
	// round trip) on a connection closed right after the request. kfake
	// answers into the connection's buffered channel or sees it closed,
	// at random: an answered member gets a session timer and is expired
	// (as on Kafka); one not answered is kept. Tried until one is kept.
	dead := ""
	for i := range 10 {
		id := fmt.Sprintf("dead%d", i)
		deadJoin(t, addr, grp, topic, id)
		// The live member rejoins, the rebalance completes with both.
		waitAssigned(ctx, t, adm, grp, map[string]int{"live": 1, id: 1})
		time.Sleep(3 * time.Second) // three session timeouts
		if got := assigned(ctx, t, adm, grp); got[id] == 1 {
			dead = id
			break
		}
		waitAssigned(ctx, t, adm, grp, map[string]int{"live": 2})
	}
	if dead == "" {
		t.Fatal("kfake expired the member that died in its join 10 times of 10: evictDead may no longer be needed")
	}
	time.Sleep(2 * time.Second)
	if got := assigned(ctx, t, adm, grp); got[dead] != 1 {
		t.Fatalf("kfake expired the member that died in its join after 5s (%v)", got)
	}

	gone, err := evictDead(ctx, adm, grp, func(id string) bool { return id == dead })
	if err != nil || len(gone) != 1 {
		t.Fatalf("evictDead: %v, %v; want one member removed", gone, err)
	}
	waitAssigned(ctx, t, adm, grp, map[string]int{"live": 2})
}

// deadJoin sends a JoinGroup (v3: no member id round trip) of client id for
// topic on a connection it closes right after the request.
func deadJoin(t *testing.T, addr, grp, topic, id string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", meta.AppendTo(nil)
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version = 3
	join.Group, join.ProtocolType = grp, "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 1000, 2000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{proto}
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID(id))
	if _, err := conn.Write(f.AppendRequest(nil, join, 1)); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	_, _ = io.Copy(io.Discard, conn) // kfake closes once it reads the end
}

// assigned counts the partitions each client id holds in group (stable
// groups only; nil otherwise).
func assigned(ctx context.Context, t *testing.T, adm *kgo.Client, grp string) map[string]int {
	t.Helper()
	described, err := kadm.NewClient(adm).DescribeGroups(ctx, grp)
	if err != nil {
		t.Fatal(err)
	}
	g := described[grp]
	if g.State != "Stable" {
		return nil
	}
	out := map[string]int{}
	for _, m := range g.Members {
		n := 0
		if ca, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range ca.Topics {
				n += len(tp.Partitions)
			}
		}
		out[m.ClientID] = n
	}
	return out
}

func waitAssigned(ctx context.Context, t *testing.T, adm *kgo.Client, grp string, want map[string]int) {
	t.Helper()
	var got map[string]int
	for ctx.Err() == nil {
		got = assigned(ctx, t, adm, grp)
		if len(got) == len(want) {
			same := true
			for k, v := range want {
				if got[k] != v {
					same = false
				}
			}
			if same {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t.Fatalf("group %s: assigned %v (clients %v), want %v", grp, got, keys, want)
}

// TestKfakeExpiresMemberWaitingInJoin: kfake keeps running a member's
// session timer while its JoinGroup waits for the rebalance, and when the
// timer fires it removes the member without answering that JoinGroup; the
// client then waits for its request to time out (franz-go: the rebalance
// timeout plus 10s) and joins again as a new member. Apache Kafka does not
// expire a member awaiting its join. A rebalance waits longer than a session
// timeout when a member does not rejoin (a frozen or dead instance, kept until
// the rebalance timeout): in the simulation (session 1s, rebalance 4s) the
// live members' JoinGroups went unanswered for 14s ("unable to join group
// session: i/o timeout"), and nobody read the input meanwhile. If kfake starts
// answering them, this fails: the members' hang bound no longer pays for it.
func TestKfakeExpiresMemberWaitingInJoin(t *testing.T) {
	const topic, grp = "t", "g"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	client := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	// join sends JoinGroup (the member id round trip included) with the
	// session timeout given, a 3s rebalance timeout.
	join := func(ctx context.Context, cl *kgo.Client, member string, session int32) (*kmsg.JoinGroupResponse, error) {
		for {
			req := kmsg.NewPtrJoinGroupRequest()
			req.Group, req.ProtocolType, req.MemberID = grp, "consumer", member
			req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = session, 3000
			proto := kmsg.NewJoinGroupRequestProtocol()
			proto.Name, proto.Metadata = "range", meta.AppendTo(nil)
			req.Protocols = []kmsg.JoinGroupRequestProtocol{proto}
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && resp.ErrorCode == kerr.MemberIDRequired.Code {
				member = resp.MemberID
				continue
			}
			if err == nil {
				err = kerr.ErrorForCode(resp.ErrorCode)
			}
			return resp, err
		}
	}
	sync := func(cl *kgo.Client, resp *kmsg.JoinGroupResponse) {
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.Generation, req.MemberID = grp, resp.Generation, resp.MemberID
		req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), resp.Protocol
		if resp.LeaderID == resp.MemberID {
			empty := kmsg.NewConsumerMemberAssignment()
			for _, m := range resp.Members {
				a := kmsg.NewSyncGroupRequestGroupAssignment()
				a.MemberID, a.MemberAssignment = m.MemberID, empty.AppendTo(nil)
				req.GroupAssignment = append(req.GroupAssignment, a)
			}
		}
		sresp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(sresp.ErrorCode)
		}
		if err != nil {
			t.Fatalf("sync %s: %v", resp.MemberID, err)
		}
	}

	// x (session 6s) alone, then a (session 1s) joins and x rejoins:
	// both in the group, stable.
	clX, clA, clS := client(), client(), client()
	jx, err := join(ctx, clX, "", 6000)
	if err != nil {
		t.Fatal(err)
	}
	sync(clX, jx)
	type joined struct {
		resp *kmsg.JoinGroupResponse
		err  error
		at   time.Duration
	}
	aJoined := make(chan joined, 1)
	go func() {
		r, err := join(ctx, clA, "", 1000)
		aJoined <- joined{r, err, 0}
	}()
	time.Sleep(200 * time.Millisecond)
	jx, err = join(ctx, clX, jx.MemberID, 6000)
	if err != nil {
		t.Fatal(err)
	}
	ja := <-aJoined
	if ja.err != nil {
		t.Fatal(ja.err)
	}
	sync(clX, jx)
	sync(clA, ja.resp)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.Generation, hb.MemberID = grp, ja.resp.Generation, ja.resp.MemberID
	if resp, err := hb.RequestWith(ctx, clA); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("heartbeat of a: %v %v", resp, err)
	}

	// s joins: a rejoins at once, x never does (frozen). Kafka answers a
	// and s once the rebalance timeout (3s) ends x's wait.
	start := time.Now()
	sJoined := make(chan joined, 1)
	go func() {
		r, err := join(ctx, clS, "", 6000)
		sJoined <- joined{r, err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	actx, acancel := context.WithTimeout(ctx, 8*time.Second)
	defer acancel()
	go func() {
		r, err := join(actx, clA, ja.resp.MemberID, 1000)
		aJoined <- joined{r, err, time.Since(start)}
	}()
	js := <-sJoined
	if js.err != nil {
		t.Fatalf("s's join: %v", js.err)
	}
	ja = <-aJoined
	if ja.err == nil {
		t.Fatalf("kfake answered a's join after %v (s's after %v): kfake no longer expires a member waiting in its join", ja.at, js.at)
	}
	t.Logf("s answered after %v with %d member(s); a's join unanswered: %v after %v", js.at, len(js.resp.Members), ja.err, ja.at)
}
