package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EndError is a judge that did not reach the end it set out to read to: it
// says nothing about the data, only that the read is incomplete. A test
// reports it as a failure of its judge, never as a verdict (a record missing
// from a read that stopped early is not a lost record).
type EndError struct {
	Topic     string
	Partition int32
	Position  int64 // the offset the judge's read had reached
	End       int64 // the offset it had to reach
	Err       error // why it stopped (the context's error, or a broker error)
}

func (e *EndError) Error() string {
	return fmt.Sprintf("judge did not reach the end: %s partition %d at offset %d of %d: %v",
		e.Topic, e.Partition, e.Position, e.End, e.Err)
}

func (e *EndError) Unwrap() error { return e.Err }

// ReadCommitted reads every partition of topic under read_committed, from its
// log start to its last stable offset as listed before the first fetch, and
// returns each partition's data records in offset order.
//
// It knows when it is done: it fetches by hand and tracks each partition's
// fetch position, which moves past transaction markers and aborted records
// (which a consumer never sees), and stops when the position reached the end
// listed at the start. No quiet period is taken for the end, so a slow broker
// or a loaded machine makes it slower, never shorter. Everything committed
// before the call is in the answer; records of transactions still open at the
// start (past the last stable offset, see SettledEnds) are not. If ctx ends first, the error
// is an *EndError naming the partition and how far it got.
func ReadCommitted(ctx context.Context, cl *kgo.Client, topic string) (map[int32][]*kgo.Record, error) {
	ends, err := SettledEnds(ctx, cl, topic, settle)
	if err != nil {
		return nil, err
	}
	return ReadCommittedTo(ctx, cl, topic, ends)
}

// settle is how long ReadCommitted waits for the last stable offsets to reach
// the high watermarks before it takes them as its ends.
const settle = 10 * time.Second

// SettledEnds lists the last stable offset of every partition of topic, after
// waiting up to wait for each to reach its high watermark: Kafka answers
// EndTxn once the outcome is in its transaction log and writes the markers
// afterwards, so a transaction committed just before a judge starts may hold
// the last stable offset back for a moment. A transaction still open after
// wait is left out (its records lie past the end).
func SettledEnds(ctx context.Context, cl *kgo.Client, topic string, wait time.Duration) (map[int32]int64, error) {
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(wait)
	for {
		var lsos, hwms map[int32]int64
		err := retry(ctx, func() (err error) {
			if lsos, err = listed(adm.ListCommittedOffsets(ctx, topic)); err != nil {
				return err
			}
			hwms, err = listed(adm.ListEndOffsets(ctx, topic))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("judge: listing the end offsets of %s: %w", topic, err)
		}
		settled := true
		for p, l := range lsos {
			settled = settled && l >= hwms[p]
		}
		if settled || time.Now().After(deadline) {
			return lsos, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("judge: waiting for the transactions of %s to settle: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listed turns a listing into offsets per partition, failing on any error
// (an unknown topic lists as an error, never as no partitions).
func listed(l kadm.ListedOffsets, err error) (map[int32]int64, error) {
	if err != nil {
		return nil, err
	}
	if err := l.Error(); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, errors.New("no partitions listed")
	}
	return out, nil
}

// ReadCommittedTo is ReadCommitted up to the given end offset of each
// partition (partitions not in ends are not read). An end beyond the high
// watermark waits for records until ctx ends, and then fails with an
// *EndError.
func ReadCommittedTo(ctx context.Context, cl *kgo.Client, topic string, ends map[int32]int64) (map[int32][]*kgo.Record, error) {
	adm := kadm.NewClient(cl)
	var starts map[int32]int64
	err := retry(ctx, func() (err error) {
		starts, err = listed(adm.ListStartOffsets(ctx, topic))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("judge: listing the log start offsets of %s: %w", topic, err)
	}
	parts := make([]int32, 0, len(ends))
	for p := range ends {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	out := map[int32][]*kgo.Record{}
	for _, p := range parts {
		start, ok := starts[p]
		if !ok {
			return nil, fmt.Errorf("judge: %s has no partition %d", topic, p)
		}
		recs, err := readPartition(ctx, cl, adm, topic, p, start, ends[p])
		if err != nil {
			return nil, err
		}
		out[p] = recs
	}
	return out, nil
}

// readPartition fetches partition p of topic from start until its position
// reaches end.
func readPartition(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, p int32, start, end int64) ([]*kgo.Record, error) {
	var (
		out    []*kgo.Record
		pos    = start
		leader = int32(-1)
		id     [16]byte
		last   error // the last retriable problem, for the EndError
	)
	fail := func(err error) error {
		if last != nil && !errors.Is(last, context.Canceled) && !errors.Is(last, context.DeadlineExceeded) && !errors.Is(err, last) {
			err = fmt.Errorf("%w (last broker error: %v)", err, last)
		}
		return &EndError{Topic: topic, Partition: p, Position: pos, End: end, Err: err}
	}
	for sleep := time.Duration(0); pos < end; {
		if sleep > 0 {
			select {
			case <-ctx.Done():
				return nil, fail(ctx.Err())
			case <-time.After(sleep):
			}
		}
		if ctx.Err() != nil {
			return nil, fail(ctx.Err())
		}
		sleep = 100 * time.Millisecond // unless this round moves on
		if leader < 0 {
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				last = err
				continue
			}
			td, ok := md.Topics[topic]
			if !ok || td.Err != nil {
				last = fmt.Errorf("metadata of %s: %v", topic, td.Err)
				continue
			}
			pd, ok := td.Partitions[p]
			if !ok || pd.Err != nil || pd.Leader < 0 {
				last = fmt.Errorf("no leader for partition %d (%v)", p, pd.Err)
				continue
			}
			leader, id = pd.Leader, td.ID
		}
		rp, err := fetch(ctx, cl, topic, id, p, leader, pos)
		if err != nil {
			last = err
			if errors.Is(err, kerr.OffsetOutOfRange) {
				// The log start moved past the position: records
				// were deleted under the judge, an answer it cannot
				// give.
				return nil, fail(err)
			}
			leader = -1
			continue
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset:         pos,
			IsolationLevel: kgo.ReadCommitted(),
			Topic:          topic,
			Partition:      p,
		}, rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return nil, fail(fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset < end {
				out = append(out, r)
			}
		}
		if next > pos {
			pos, sleep = next, 0
		}
	}
	return out, nil
}

// fetch sends one sessionless read_committed Fetch for partition p at pos to
// its leader and returns the partition's answer, or the error it carries.
func fetch(ctx context.Context, cl *kgo.Client, topic string, id [16]byte, p, leader int32, pos int64) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 500
	req.MinBytes = 1
	req.MaxBytes = 16 << 20
	req.IsolationLevel = 1
	req.SessionID = 0
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = id
	rpq := kmsg.NewFetchRequestTopicPartition()
	rpq.Partition = p
	rpq.FetchOffset = pos
	rpq.PartitionMaxBytes = 8 << 20
	rt.Partitions = append(rt.Partitions, rpq)
	req.Topics = append(req.Topics, rt)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(fctx, cl.Broker(int(leader)))
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			rp := &resp.Topics[i].Partitions[j]
			if rp.Partition != p {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, err
			}
			return rp, nil
		}
	}
	return nil, fmt.Errorf("fetch answer without partition %d of %s", p, topic)
}

// retry calls f until it succeeds or ctx ends (brokers just restarted answer
// with retriable errors for a while).
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
