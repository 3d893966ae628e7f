package output

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// positionsLog reads the mirror's positions topic (txnstate.Positions says
// what it holds) in two views, each folded incrementally from where its last
// read stopped:
//
//   - committed: read_committed, what a position may be taken from. A read
//     goes up to the high watermark listed when it starts, so it ends only
//     once every transaction with a record below that end has ended: a
//     position committed before the read began is in it.
//   - uncommitted: read_uncommitted, every record including those of open
//     and aborted transactions, to find every writer that may hold a
//     partition without waiting for its transactions (those of a crashed
//     writer stay open until fenced or timed out).
//
// It fetches by hand (sessionless Fetch requests to each partition's
// leader) and tracks each partition's position itself, which moves past
// transaction markers and aborted records: a consumer would not tell it how
// far it got when the last records below the end are ones it skips.
type positionsLog struct {
	cl    *kgo.Client
	topic string

	mu    sync.Mutex
	views [2]*positionsView
}

type positionsView struct {
	committed bool
	next      map[int32]int64
	state     txnstate.Positions
}

func newPositionsLog(cl *kgo.Client, topic string) *positionsLog {
	l := &positionsLog{cl: cl, topic: topic}
	for i := range l.views {
		l.views[i] = &positionsView{committed: i == 0, next: map[int32]int64{}}
	}
	return l
}

// read brings the view up to the end listed now and returns a copy of what it
// holds.
func (l *positionsLog) read(ctx context.Context, committed bool) (txnstate.Positions, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := l.views[1]
	if committed {
		v = l.views[0]
	}
	if err := l.readTo(ctx, v); err != nil {
		return txnstate.Positions{}, fmt.Errorf("reading the positions topic %s: %w", l.topic, err)
	}
	return v.state.Clone(), nil
}

func (l *positionsLog) readTo(ctx context.Context, v *positionsView) error {
	adm := kadm.NewClient(l.cl)
	var (
		starts, ends map[int32]int64
		md           kadm.Metadata
	)
	// Any error but a refusal (isAuthErr) is retried until ctx ends: the
	// target cluster may be restarting, and a claim that fails makes the
	// source group rebalance.
	err := retryAll(ctx, func() error {
		var err error
		if md, err = adm.Metadata(ctx, l.topic); err != nil {
			return err
		}
		if td := md.Topics[l.topic]; td.Err != nil {
			return td.Err
		}
		if starts, err = listedOffsets(adm.ListStartOffsets(ctx, l.topic)); err != nil {
			return err
		}
		ends, err = listedOffsets(adm.ListEndOffsets(ctx, l.topic))
		return err
	})
	if err != nil {
		return err
	}
	td := md.Topics[l.topic]
	for p, end := range ends {
		pos := max(v.next[p], starts[p])
		leader := int32(-1)
		if pd, ok := td.Partitions[p]; ok {
			leader = pd.Leader
		}
		for pos < end {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("partition %d at offset %d of %d: %w", p, pos, end, err)
			}
			if leader < 0 {
				if leader, err = l.leader(ctx, p); err != nil {
					return err
				}
				continue
			}
			rp, err := l.fetch(ctx, td.ID, p, leader, pos, v.committed)
			if err != nil {
				if errors.Is(err, kerr.OffsetOutOfRange) {
					return fmt.Errorf("partition %d: records below offset %d were deleted: %w", p, pos, err)
				}
				if isAuthErr(err) {
					return fmt.Errorf("partition %d: %w (the output's user needs Read on the positions topic)", p, err)
				}
				leader = -1 // ask again: a leader moved, a broker restarted
				if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
					return err
				}
				continue
			}
			iso := kgo.ReadUncommitted()
			if v.committed {
				iso = kgo.ReadCommitted()
			}
			fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: pos, IsolationLevel: iso, Topic: l.topic, Partition: p}, rp, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				return fmt.Errorf("partition %d at offset %d: %w", p, pos, fp.Err)
			}
			for _, r := range fp.Records {
				pr, err := txnstate.ParsePositionRecord(r.Key, r.Value)
				if err != nil {
					return fmt.Errorf("partition %d offset %d: %w", p, r.Offset, err)
				}
				v.state.Apply(pr)
			}
			if next > pos {
				pos = next
				v.next[p] = pos
			} else if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				// Nothing past pos yet: a transaction below the end
				// is still open (read_committed stops at the last
				// stable offset).
				return fmt.Errorf("partition %d at offset %d of %d (a transaction is still open): %w", p, pos, end, err)
			}
		}
	}
	return nil
}

func (l *positionsLog) leader(ctx context.Context, p int32) (int32, error) {
	for {
		md, err := kadm.NewClient(l.cl).Metadata(ctx, l.topic)
		if err == nil {
			err = md.Topics[l.topic].Err
			if pd, ok := md.Topics[l.topic].Partitions[p]; ok && pd.Err == nil && pd.Leader >= 0 {
				return pd.Leader, nil
			}
		}
		if isAuthErr(err) {
			return -1, fmt.Errorf("the leader of partition %d: %w", p, err)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return -1, fmt.Errorf("no leader for partition %d: %w", p, err)
		}
	}
}

// fetch sends one sessionless Fetch for partition p at pos to its leader.
func (l *positionsLog) fetch(ctx context.Context, id [16]byte, p, leader int32, pos int64, committed bool) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 200
	req.MinBytes = 1
	req.MaxBytes = 16 << 20
	if committed {
		req.IsolationLevel = 1
	}
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = l.topic, id
	rpq := kmsg.NewFetchRequestTopicPartition()
	rpq.Partition, rpq.FetchOffset, rpq.PartitionMaxBytes = p, pos, 8<<20
	rpq.CurrentLeaderEpoch, rpq.LogStartOffset = -1, -1
	rt.Partitions = append(rt.Partitions, rpq)
	req.Topics = append(req.Topics, rt)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(fctx, l.cl.Broker(int(leader)))
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if rp := &resp.Topics[i].Partitions[j]; rp.Partition == p {
				return rp, kerr.ErrorForCode(rp.ErrorCode)
			}
		}
	}
	return nil, fmt.Errorf("fetch answer without partition %d", p)
}

// listedOffsets turns a listing into offsets per partition.
func listedOffsets(l kadm.ListedOffsets, err error) (map[int32]int64, error) {
	if err != nil {
		return nil, err
	}
	if err := l.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// retryAll calls fn until it succeeds, fails with a refusal no retry fixes
// (isAuthErr: a missing ACL, bad credentials), or ctx ends, backing off up to
// a second; the error then names the last failure.
func retryAll(ctx context.Context, fn func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || isAuthErr(err) {
			return err
		}
		if sleepCtx(ctx, backoff) != nil {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		backoff = min(2*backoff, time.Second)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ensurePositionsTopic creates the positions topic if it is missing
// (compacted, one partition, the broker's default replication factor) and
// checks that it is compacted and nothing else: retention would delete the
// positions, and with them the record of the copy's progress. A topic that
// exists is not created again, so that a user who created it beforehand needs
// no Create ACL on it (Kafka checks that ACL before whether the topic exists).
func ensurePositionsTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	adm := kadm.NewClient(cl)
	compact := "compact"
	err := retryRetriable(ctx, func() error {
		tds, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("describing the positions topic %s: %w", topic, err)
		}
		switch td := tds[topic]; {
		case td.Err == nil:
			return nil
		case !errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("describing the positions topic %s: %w", topic, td.Err)
		}
		resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating the positions topic %s: %w", topic, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var policy string
	err = retryRetriable(ctx, func() error {
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return err
		}
		rc, err := rcs.On(topic, nil)
		if err != nil {
			return err
		}
		if rc.Err != nil {
			return rc.Err
		}
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				policy = *c.Value
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("describing the positions topic %s: %w", topic, err)
	}
	if policy != compact {
		return fmt.Errorf("%w: the positions topic %s has cleanup.policy %q: it must be %q alone (a delete policy would remove the positions after retention.ms)", ErrConfig, topic, policy, compact)
	}
	return nil
}
