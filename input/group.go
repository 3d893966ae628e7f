package input

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupMember runs the kgo group callbacks of group_membership (unbounded
// reads only). The rules, from shared/design/native-input.md:
//
//   - Starts stay exact: AdjustFetchOffsetsFn (called after
//     OnPartitionsAssigned, before the first fetch of the new partitions)
//     resolves each assigned partition's start with the admin API the same
//     way a direct read does (committed offset, validated against the log,
//     reset_offset otherwise; none is fatal) and hands kgo Offset.At(start).
//     kgo's own reset handling is never relied on.
//   - A reassigned partition must not stay paused: kgo keeps pauses across
//     rebalances, so OnPartitionsAssigned resumes what it gets.
//   - OnPartitionsRevoked waits up to revoke_ack_timeout for the revoked
//     partitions' batches to be acknowledged, commits synchronously what
//     was, then forgets the partitions. Acks that arrive later belong to an
//     old assignment and are ignored (the tracker checks the span's owner);
//     the new owner reads those records again (at-least-once; the paired
//     kafka_eos output rejects them with the generation stamped on the span).
//     It runs concurrently with polling (no BlockRebalanceOnPoll, which would
//     hold the rebalance while a slow pipeline blocks the fetch loop).
//   - OnPartitionsLost commits nothing: the session is gone and a late commit
//     could move the offset backwards behind the new owner. kgo reports the
//     partitions of a session the coordinator forgot as revoked once it has
//     rejoined under a new member id (an offset commit answered
//     UNKNOWN_MEMBER_ID makes it rejoin): a revoke under a member id other
//     than the last assignment's is handled as lost, and no commit is sent
//     between such a rejoin and the new session's assignment. A partition
//     the new session keeps (kgo calls it neither revoked nor assigned)
//     starts over from the group's committed offset (restartKept), and
//     until then nothing is stamped with the new member id (Assignment).
//   - With a kafka_eos output committing the group's offsets in its
//     transactions (Kafka-to-Kafka, KIP-447), the member is its handover.GroupState:
//     every span carries the id of the assignment it was read under, and the
//     output commits a partition's offsets only under the current assignment,
//     with the generation and member id of commit time (a partition kept
//     across a rebalance is committed with the new generation, not the stale
//     stamp of fetch time). After forgetting revoked or lost partitions, the
//     callback asks the output to finish the epochs holding their records
//     (Revoked, up to revoke_ack_timeout) before the member rejoins: those
//     already past PREPARE commit (their offsets were sent under a
//     generation still current), the others abort, and batches of the
//     partitions that reach the output later are dropped.
//   - On Close, revoke does not wait: Close commits what was acknowledged
//     before it closes the client (which leaves the group).
type groupMember struct {
	cfg *config
	res *service.Resources
	adm *kadm.Client
	tr  *tracker
	met *inputMetrics
	log *service.Logger
	// step is stored by start, after the client began joining the group:
	// a rebalance callback can run before it (a refused session timeout
	// ends the session at once), with nothing fetched to commit.
	step    atomic.Pointer[commitStep]
	fail    func(error)
	closing atomic.Bool
	cl      atomic.Pointer[kgo.Client] // the consuming client, for GroupMetadata
	// member is the member id of the last assignment (OnPartitionsAssigned).
	// kgo rejoins under a new member id when the coordinator no longer knows
	// the old one (the session expired while the process stalled), and then
	// reports the partitions of the old session as revoked, not lost: a
	// commit there would pass under the new generation and could move an
	// offset back behind the partition's new owner.
	member atomic.Pointer[string]
}

// Assignment implements handover.GroupState.
func (g *groupMember) Assignment(topic string, partition int32) (uint64, int32, string, bool) {
	id, ok := g.tr.assignmentOf(tp{topic, partition})
	if !ok {
		return 0, -1, "", false
	}
	member, gen := "", int32(-1)
	if cl := g.cl.Load(); cl != nil {
		member, gen = cl.GroupMetadata()
	}
	if was := g.member.Load(); member == "" || (was != nil && *was != member) {
		// Rejoining: kgo reset the member id, or the member rejoined
		// under a new one and the new session's assignment has not run
		// (restartKept). Nothing is stamped until it has.
		gen = -1
	}
	return id, gen, member, true
}

func (g *groupMember) opts() []kgo.Opt {
	var topics []kgo.Opt
	if g.cfg.regexpTopics {
		// kgo matches a pattern anywhere in a name: use the anchored
		// ones, so that the group reads what a direct read would.
		var res []string
		for _, re := range g.cfg.patterns {
			res = append(res, re.String())
		}
		topics = append(topics, kgo.ConsumeRegex(), kgo.ConsumeTopics(res...))
	} else {
		topics = append(topics, kgo.ConsumeTopics(g.cfg.topicOrder...))
	}
	if g.cfg.discovery > 0 {
		// New partitions and matching topics are found at metadata
		// refreshes.
		topics = append(topics, kgo.MetadataMinAge(min(g.cfg.discovery, 5*time.Second)), kgo.MetadataMaxAge(min(g.cfg.discovery, time.Hour)))
	}
	opts := append(topics,
		kgo.ConsumerGroup(g.cfg.group),
		kgo.SessionTimeout(g.cfg.session),
		kgo.RebalanceTimeout(g.cfg.rebalance),
		kgo.HeartbeatInterval(g.cfg.heartbeat),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(g.assigned),
		kgo.AdjustFetchOffsetsFn(g.adjust),
		kgo.OnPartitionsRevoked(g.revoked),
		kgo.OnPartitionsLost(g.lost),
	)
	if g.cfg.instanceID != "" {
		opts = append(opts, kgo.InstanceID(g.cfg.instanceID))
	}
	return opts
}

func toTPs(m map[string][]int32) []tp {
	var out []tp
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, tp{t, p})
		}
	}
	return out
}

func (g *groupMember) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	member, _ := cl.GroupMetadata()
	if g.sessionChanged(cl) {
		// Before the new member id is stored: until then no commit
		// goes out (memberCommitter), so the kept partitions' old
		// positions cannot be committed under the new session.
		g.restartKept(ctx, cl, assigned)
	}
	g.member.Store(&member)
	cl.ResumeFetchPartitions(assigned)
	if len(assigned) > 0 {
		g.met.rebalance("assigned")
	}
	g.log.Infof("Assigned %v by group %s", assigned, g.cfg.group)
}

func (g *groupMember) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	var parts []tp
	for t, ps := range offsets {
		for p := range ps {
			parts = append(parts, tp{t, p})
		}
	}
	plans, err := g.starts(ctx, parts)
	if err == nil {
		out := map[string]map[int32]kgo.Offset{}
		for _, pp := range plans {
			if out[pp.Topic] == nil {
				out[pp.Topic] = map[int32]kgo.Offset{}
			}
			out[pp.Topic][pp.Partition] = kgo.NewOffset().At(pp.start)
		}
		g.tr.add(plans, time.Now())
		// Before the first fetch of the assigned partitions.
		handOverStarts(g.res, g.cfg.group, plans)
		return out, nil
	}
	if isFatal(err) {
		g.fail(err)
	} else {
		g.log.Warnf("Resolving the start offsets of assigned partitions (the group retries): %v", err)
	}
	return nil, err
}

// starts resolves where parts start, as a direct read does (see
// groupMember), and logs each start.
func (g *groupMember) starts(ctx context.Context, parts []tp) ([]*partPlan, error) {
	l, _, err := g.cfg.list(ctx, g.adm, g.log)
	if err != nil {
		return nil, err
	}
	gen := int32(-1)
	if cl := g.cl.Load(); cl != nil {
		_, gen = cl.GroupMetadata()
	}
	if err := keptStarts(ctx, g.res, g.adm, g.cfg.group, l, parts, gen); err != nil {
		return nil, err
	}
	plans, err := g.cfg.resolve(ctx, g.adm, l, parts)
	if err != nil {
		return nil, err
	}
	for _, pp := range plans {
		g.log.Debugf("Partition %s: start %d (log start %d, end %d, committed %d)", pp.tp, pp.start, pp.logStart, pp.end, pp.committed)
		pp.logFallback(g.log, g.cfg)
	}
	return plans, nil
}

// restartKept starts over, from the group's committed offsets, the
// partitions that a new session under a new member id kept from the old one.
// kgo's cooperative balancer calls a partition kept when both sessions were
// given it, and neither revokes it nor resolves its start again: its cursor
// and tracked position would go on from the old session's, although another
// member may have owned it in between (the coordinator forgot this member)
// and committed further, so that the next commit would move the group's
// offset back and the records between would be read again. So their old
// tracking is dropped without a commit, as for lost partitions, their starts
// are resolved as for assigned ones, and kgo's cursor is moved there while
// no poll is in flight (tracker.addWith). A start that cannot be resolved is
// retried for up to rebalance_timeout, then the input fails: the partition
// would otherwise be fetched and never read.
func (g *groupMember) restartKept(ctx context.Context, cl *kgo.Client, added map[string][]int32) {
	isAdded := map[tp]bool{}
	for _, p := range toTPs(added) {
		isAdded[p] = true
	}
	kept := map[string][]int32{}
	var parts []tp
	for _, s := range g.tr.snapshots() {
		if !isAdded[s.tp] {
			kept[s.Topic] = append(kept[s.Topic], s.Partition)
			parts = append(parts, s.tp)
		}
	}
	if len(parts) == 0 {
		return
	}
	g.lost(ctx, cl, kept)
	deadline := time.Now().Add(g.cfg.rebalance)
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		plans, err := g.starts(ctx, parts)
		if err == nil {
			g.tr.addWith(plans, time.Now(), func() {
				at := map[string]map[int32]kgo.EpochOffset{}
				for _, pp := range plans {
					if at[pp.Topic] == nil {
						at[pp.Topic] = map[int32]kgo.EpochOffset{}
					}
					at[pp.Topic][pp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: pp.start}
				}
				cl.SetOffsets(at)
			})
			handOverStarts(g.res, g.cfg.group, plans)
			g.log.Infof("Kept %v across a rejoin of group %s under a new member id: restarted from the group's committed offsets", kept, g.cfg.group)
			return
		}
		if isFatal(err) {
			g.fail(err)
			return
		}
		if ctx.Err() != nil || g.closing.Load() {
			return
		}
		if time.Now().Add(backoff).After(deadline) {
			g.fail(fmt.Errorf("group %s: the partitions %v kept across a rejoin under a new member id could not restart from the group's committed offsets within %s (%s): %w", g.cfg.group, kept, knFieldRebalanceTimeout, g.cfg.rebalance, err))
			return
		}
		g.log.Warnf("Resolving the starts of %v, kept across a rejoin of group %s under a new member id (retrying): %v", kept, g.cfg.group, err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
	}
}

func (g *groupMember) revoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	parts := toTPs(revoked)
	if len(parts) == 0 {
		return
	}
	if g.sessionChanged(cl) {
		// Partitions of a session that ended: lost, whatever kgo calls
		// them.
		g.lost(ctx, cl, revoked)
		return
	}
	if !g.closing.Load() {
		deadline := time.NewTimer(g.cfg.revokeTimeout)
		defer deadline.Stop()
	wait:
		for g.tr.pendingIn(parts) {
			select {
			case <-g.tr.changedChan():
			case <-time.After(20 * time.Millisecond):
			case <-deadline.C:
				g.log.Warnf("Revoke of %v: batches still unacknowledged after %v; committing what was acknowledged", revoked, g.cfg.revokeTimeout)
				break wait
			case <-ctx.Done():
				break wait
			}
		}
	}
	// Commit what was acknowledged and stop tracking the partitions, under
	// the commit lock (a periodic commit cannot follow with positions it
	// read before). On Close nothing is committed here: Close commits
	// what was acknowledged before it leaves the group.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = g.revokeParts(cctx, parts, !g.closing.Load()) // a failure is logged and counted
	cancel()
	g.met.rebalance("revoked")
	g.met.gaveUp(parts)
	g.takeoverRevoked(ctx, revoked)
	g.log.Infof("Revoked %v by group %s", revoked, g.cfg.group)
}

// takeoverRevoked tells the group's takeover, if any, that parts left this
// member (after they were removed from the tracker, so acks of their batches
// are ignored from now on) and waits up to revoke_ack_timeout for it.
func (g *groupMember) takeoverRevoked(ctx context.Context, parts map[string][]int32) {
	d := g.cfg.revokeTimeout
	if g.closing.Load() {
		// Leaving on Close, which returns within about a second: the
		// next owner's stable offset fetch waits for what is pending.
		d = min(d, closeTimeout)
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	handOverRevoked(rctx, g.res, g.cfg.group, parts)
}

// revokeParts stops tracking parts through the commit step (committing what
// was acknowledged of them if commit), or directly before start stored the
// step, when nothing of theirs has been fetched.
func (g *groupMember) revokeParts(ctx context.Context, parts []tp, commit bool) error {
	if s := g.step.Load(); s != nil {
		return s.revoke(ctx, parts, commit)
	}
	g.tr.remove(parts)
	return nil
}

// sessionChanged reports whether the member id differs from the one of the
// last assignment: the partitions held since belong to a session that ended.
func (g *groupMember) sessionChanged(cl *kgo.Client) bool {
	was := g.member.Load()
	if was == nil || cl == nil {
		return false
	}
	now, _ := cl.GroupMetadata()
	return now != *was
}

func (g *groupMember) lost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	parts := toTPs(lost)
	// Under the commit lock: a periodic commit that read their positions
	// before cannot follow.
	_ = g.revokeParts(ctx, parts, false)
	if len(parts) > 0 {
		g.met.rebalance("lost")
		g.met.gaveUp(parts)
	}
	g.takeoverRevoked(ctx, lost)
	g.log.Warnf("Lost %v (group %s session ended); nothing committed for them", lost, g.cfg.group)
}

// memberCommitter commits as the group member (with its generation), which
// the broker requires once the group has members.
type memberCommitter struct {
	cl *kgo.Client
	g  *groupMember
}

// errSessionChanged refuses a commit between a rejoin under a new member id
// and the assignment of the new session: the positions it holds are the old
// session's, which the new generation would let through.
var errSessionChanged = errors.New("the group member rejoined under a new member id: the previous session's positions are not committed")

func (m *memberCommitter) CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error {
	if m.g != nil && m.g.sessionChanged(m.cl) {
		return errSessionChanged
	}
	eo := map[string]map[int32]kgo.EpochOffset{}
	for t, ps := range offsets {
		eo[t] = map[int32]kgo.EpochOffset{}
		for p, at := range ps {
			eo[t][p] = kgo.EpochOffset{Epoch: -1, Offset: at}
		}
	}
	var rerr error
	m.cl.CommitOffsetsSync(ctx, eo, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
					rerr = fmt.Errorf("%s:%d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return rerr
}
