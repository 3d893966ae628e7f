package input

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// probeTimeout bounds each request of a probe round; the fetch loop waits for
// the round.
const probeTimeout = 5 * time.Second

// probeMaxBackoff bounds how far apart the probes of one partition grow while
// they find nothing to do (a partition waiting for records below its stop).
const probeMaxBackoff = 30 * time.Second

// prober learns the position of idle partitions below their stops, which the
// consumer cannot show: kgo never returns a FetchPartition with no records and
// no error, so a partition whose remaining offsets below the stop hold no
// record for us stays silent. Two cases hang a reader that only waits for
// records:
//
//   - aborted records below the LSO whose ABORT marker lies above another
//     producer's open transaction (so above the LSO): read_committed drops
//     them, the consumer's cursor moves past them, and the marker is not
//     returned until the other transaction ends;
//   - the consumer skipped such records (its cursor is ahead of the position)
//     and retention or DeleteRecords then deleted them: the consumer, past
//     the new log start, raises nothing.
//
// One round probes every idle partition that is not paused (a paused partition
// is not fetched, so the consumer has nothing to tell until it is resumed, and
// the consumer's own OFFSET_OUT_OF_RANGE then reports a deletion). It costs
// one Metadata request and one Fetch per partition leader, at the positions,
// whose answers run through kgo.ProcessFetchPartition with the consumer's
// isolation level and control records kept. If no data record lies between a
// position and its stop, the offsets up to min(next offset processed, stop)
// are consumed as an already-acknowledged span and the consumer is moved there
// too (kgo.Client.SetOffsets), so that the two never disagree.
//
// A fetch answered OFFSET_OUT_OF_RANGE means the offsets from the position on
// were deleted. Whether they held records for us cannot be read any more, but
// the consumer knows: if its cursor is below the new log start, its own
// fetches fail with OFFSET_OUT_OF_RANGE and fetchLoop.outOfRange counts the
// deleted offsets as lost; if it is at or past it, the consumer had skipped
// them (markers, aborted records) and raises nothing. So the round only notes
// the deletion, and a later round that finds it unchanged while the consumer
// reported no OFFSET_OUT_OF_RANGE in between consumes the range as skipped,
// not lost.
type prober struct {
	cfg *config
	cl  *kgo.Client // the admin client; Broker(leader).Request sends the fetches
	adm *kadm.Client
	tr  *tracker
	met *inputMetrics
	log *service.Logger

	// deleted holds, per partition, a deletion seen by a round and not yet
	// settled (see above).
	deleted map[tp]deletion
	// sched is, per partition, when to probe it next (see due).
	sched map[tp]probeSchedule
}

// deletion is a probe's finding that the offsets from pos were deleted.
type deletion struct {
	pos, logStart int64
	seen          time.Time
}

// probeTarget is one partition of a round.
type probeTarget struct {
	tp
	pos, stop int64
}

// round probes targets. lastOOR returns when the consumer last reported
// OFFSET_OUT_OF_RANGE for a partition; setOffset moves the consumer. It
// returns a fatal error only; retriable ones are logged at debug level and the
// next round retries.
func (pr *prober) round(ctx context.Context, targets []probeTarget, lastOOR func(tp) time.Time, setOffset func(tp, int64)) error {
	if len(targets) == 0 {
		return nil
	}
	if pr.deleted == nil {
		pr.deleted = map[tp]deletion{}
	}
	var topics []string
	seen := map[string]bool{}
	for _, t := range targets {
		if !seen[t.Topic] {
			seen[t.Topic] = true
			topics = append(topics, t.Topic)
		}
	}
	sort.Strings(topics)

	mctx, cancel := context.WithTimeout(ctx, probeTimeout)
	meta, err := pr.adm.Metadata(mctx, topics...)
	cancel()
	if err != nil {
		return pr.retriable(fmt.Errorf("probe: metadata: %w", err))
	}
	// One fetch per leader, every partition of the round that it leads.
	byLeader := map[int32][]probeTarget{}
	ids := map[string][16]byte{}
	for _, t := range targets {
		td, ok := meta.Topics[t.Topic]
		if !ok || td.Err != nil {
			pr.log.Debugf("Probe of %s: topic metadata: %v", t.tp, td.Err)
			continue
		}
		pd, ok := td.Partitions[t.Partition]
		if !ok || pd.Err != nil || pd.Leader < 0 {
			pr.log.Debugf("Probe of %s: no leader", t.tp)
			continue
		}
		ids[t.Topic] = td.ID
		byLeader[pd.Leader] = append(byLeader[pd.Leader], t)
	}
	var deletedAt []probeTarget
	for leader, ts := range byLeader {
		resp, err := pr.fetch(ctx, leader, ts, ids)
		if err != nil {
			if isFatal(err) {
				return err
			}
			pr.log.Debugf("Probe fetch from broker %d: %v", leader, err)
			continue
		}
		for _, t := range ts {
			rp := findProbed(resp, t.tp)
			if rp == nil {
				continue
			}
			switch err := kerr.ErrorForCode(rp.ErrorCode); {
			case errors.Is(err, kerr.OffsetOutOfRange):
				deletedAt = append(deletedAt, t)
				continue
			case isFatal(err):
				return fmt.Errorf("probing %s: %w", t.tp, err)
			case err != nil:
				pr.log.Debugf("Probe of %s: %v", t.tp, err)
				continue
			}
			delete(pr.deleted, t.tp)
			pr.settle(t, rp, setOffset)
		}
	}
	if len(deletedAt) > 0 {
		return pr.deletions(ctx, deletedAt, lastOOR, setOffset)
	}
	return nil
}

func (pr *prober) retriable(err error) error {
	if isFatal(err) {
		return err
	}
	pr.log.Debugf("%v", err)
	return nil
}

// fetch sends one Fetch to leader for ts, each at its position, outside any
// fetch session.
func (pr *prober) fetch(ctx context.Context, leader int32, ts []probeTarget, ids map[string][16]byte) (*kmsg.FetchResponse, error) {
	var isoLevel int8
	if pr.cfg.readCommitted {
		isoLevel = 1
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = pr.cfg.maxPartitionBytes
	req.IsolationLevel = isoLevel
	req.SessionEpoch = -1 // a full fetch, outside any fetch session
	topics := map[string]int{}
	for _, t := range ts {
		i, ok := topics[t.Topic]
		if !ok {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = t.Topic
			rt.TopicID = ids[t.Topic]
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
			topics[t.Topic] = i
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = t.Partition
		rp.FetchOffset = t.pos
		rp.CurrentLeaderEpoch = -1
		rp.LastFetchedEpoch = -1
		rp.LogStartOffset = -1
		rp.PartitionMaxBytes = pr.cfg.maxPartitionBytes
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	kresp, err := pr.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	// Fetch v13+ names topics by ID only: name them back.
	names := map[[16]byte]string{}
	for name, id := range ids {
		names[id] = name
	}
	for i := range resp.Topics {
		if resp.Topics[i].Topic == "" {
			resp.Topics[i].Topic = names[resp.Topics[i].TopicID]
		}
	}
	return resp, nil
}

func findProbed(resp *kmsg.FetchResponse, p tp) *kmsg.FetchResponseTopicPartition {
	for i := range resp.Topics {
		if resp.Topics[i].Topic != p.Topic {
			continue
		}
		for j := range resp.Topics[i].Partitions {
			if resp.Topics[i].Partitions[j].Partition == p.Partition {
				return &resp.Topics[i].Partitions[j]
			}
		}
	}
	return nil
}

// settle consumes the offsets from t's position that hold no data record for
// this isolation level, up to the stop, and moves the consumer with it.
func (pr *prober) settle(t probeTarget, rp *kmsg.FetchResponseTopicPartition, setOffset func(tp, int64)) {
	iso := kgo.ReadUncommitted()
	if pr.cfg.readCommitted {
		iso = kgo.ReadCommitted()
	}
	processed, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: true,
		Offset:             t.pos,
		IsolationLevel:     iso,
		Topic:              t.Topic,
		Partition:          t.Partition,
	}, rp, kgo.DefaultDecompressor(), nil)
	if processed.Err != nil {
		pr.log.Debugf("Probe of %s: %v", t.tp, processed.Err)
		return
	}
	for _, r := range processed.Records {
		if r.Offset >= t.stop {
			break
		}
		if !r.Attrs.IsControl() {
			return // data below the stop: the consumer delivers it
		}
	}
	if next <= t.pos {
		return
	}
	to := min(next, t.stop)
	pr.log.Debugf("Probe of %s: offsets [%d, %d) hold no data record for this isolation level", t.tp, t.pos, to)
	if pr.tr.advance(t.tp, to, 0, false, time.Now()) != nil {
		pr.tr.update(t.tp, func(ps *partState) { ps.probed += to - t.pos })
		if to < t.stop {
			setOffset(t.tp, to)
		}
	}
}

// deletions handles the partitions whose probe fetch was answered
// OFFSET_OUT_OF_RANGE (see prober).
func (pr *prober) deletions(ctx context.Context, ts []probeTarget, lastOOR func(tp) time.Time, setOffset func(tp, int64)) error {
	var topics []string
	seen := map[string]bool{}
	for _, t := range ts {
		if !seen[t.Topic] {
			seen[t.Topic] = true
			topics = append(topics, t.Topic)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, probeTimeout)
	starts, err := pr.adm.ListStartOffsets(lctx, topics...)
	cancel()
	if err != nil {
		return pr.retriable(fmt.Errorf("probe: listing the log start: %w", err))
	}
	now := time.Now()
	for _, t := range ts {
		logStart, err := lookup(starts, t.tp)
		if err != nil {
			if isFatal(err) {
				return err
			}
			pr.log.Debugf("Probe of %s: log start: %v", t.tp, err)
			continue
		}
		if logStart <= t.pos {
			delete(pr.deleted, t.tp) // in range again (a leader change)
			continue
		}
		d, ok := pr.deleted[t.tp]
		if !ok || d.pos != t.pos {
			pr.deleted[t.tp] = deletion{pos: t.pos, logStart: logStart, seen: now}
			continue
		}
		if lastOOR(t.tp).After(d.seen) {
			// The consumer reports the deletion itself: it was
			// below the log start, and outOfRange counts the loss.
			continue
		}
		// The consumer raised nothing for a round: its cursor is at or
		// past the log start, so it had read the deleted offsets and
		// found nothing to deliver (markers, aborted records).
		delete(pr.deleted, t.tp)
		to := min(d.logStart, t.stop)
		pr.log.Debugf("Probe of %s: offsets [%d, %d) were deleted after the consumer had skipped them (no data record for this isolation level)", t.tp, t.pos, to)
		if pr.tr.advance(t.tp, to, 0, false, now) != nil {
			pr.tr.update(t.tp, func(ps *partState) { ps.probed += to - t.pos })
			if to < t.stop {
				setOffset(t.tp, to)
			}
		}
	}
	return nil
}

// probeSchedule is when a partition is probed next.
type probeSchedule struct {
	pos     int64 // the position it was last probed at
	next    time.Time
	backoff time.Duration
}

// due reports whether p, at position pos and idle since lastAdvance, is to be
// probed now (must): idle_probe_interval after it last moved, then, while
// probes find nothing to do, at growing intervals up to probeMaxBackoff; and
// whether it may join a round that runs anyway (may: it would be due within
// half an interval), so that partitions that went idle at about the same time
// share rounds and fetches.
func (pr *prober) due(p tp, pos int64, lastAdvance, now time.Time) (must, may bool) {
	half := pr.cfg.idleProbeInterval / 2
	s, ok := pr.sched[p]
	if !ok || s.pos != pos {
		idle := now.Sub(lastAdvance)
		return idle >= pr.cfg.idleProbeInterval, idle >= half
	}
	return !now.Before(s.next), !now.Before(s.next.Add(-half))
}

// probed schedules the next probe of each target of a round.
func (pr *prober) probed(targets []probeTarget, now time.Time) {
	if pr.sched == nil {
		pr.sched = map[tp]probeSchedule{}
	}
	for _, t := range targets {
		pos, _, finished := pr.tr.position(t.tp)
		if finished || pos != t.pos {
			delete(pr.sched, t.tp)
			continue
		}
		s, ok := pr.sched[t.tp]
		d, deleted := pr.deleted[t.tp]
		switch {
		case !ok || s.pos != t.pos:
			s = probeSchedule{pos: t.pos, backoff: pr.cfg.idleProbeInterval}
		case deleted && d.pos == t.pos:
			// A deletion to settle: look again after one interval.
			s.backoff = pr.cfg.idleProbeInterval
		default:
			s.backoff = min(2*s.backoff, max(probeMaxBackoff, pr.cfg.idleProbeInterval))
		}
		s.next = now.Add(s.backoff)
		pr.sched[t.tp] = s
	}
}
