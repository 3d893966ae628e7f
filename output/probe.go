package output

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/txnstate"
)

// describe returns the broker's transaction state of one transactional id.
func (o *output) describe(ctx context.Context, id string) (txnstate.Observation, error) {
	ds, err := kadm.NewClient(o.admin).DescribeTransactions(ctx, id)
	if err != nil {
		return txnstate.Observation{}, fmt.Errorf("describe transactions %q: %w", id, err)
	}
	d, ok := ds[id]
	if !ok || errors.Is(d.Err, kerr.TransactionalIDNotFound) {
		return txnstate.Observation{}, nil
	}
	if d.Err != nil {
		return txnstate.Observation{}, fmt.Errorf("describe transactions %q: %w", id, d.Err)
	}
	return txnstate.Observation{Found: true, State: d.State, ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch}, nil
}

// rawEndTxn sends EndTxn(commit) for the stored (producer id, epoch) itself:
// franz-go has no public way to resume a transaction. The request version is
// pinned to the stored transaction version (brokers from 4.0 advertise EndTxn
// v5 even with transaction.version 0, and v5 means TV2): a client capped at
// EndTxn v4 for TV0, v5 for TV2. kgo routes EndTxn to the transaction
// coordinator.
func (o *output) rawEndTxn(ctx context.Context, r txnstate.Record) (txnstate.RetryResult, error) {
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.EndTxn), r.TxnVersion.EndTxnMaxVersion())
	opts := append(o.conf.conn.Opts(), o.clientOpts...)
	opts = append(opts, kgo.MaxVersions(vs))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return txnstate.RetryFailed, err
	}
	defer cl.Close()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = r.TransactionalID
	req.ProducerID = r.ProducerID
	req.ProducerEpoch = r.ProducerEpoch
	req.Commit = true
	// A raw request gets no retries from kgo on error codes in the
	// response. Right after a commit under TV0 the coordinator is still
	// writing markers (PrepareCommit) and answers CONCURRENT_TRANSACTIONS
	// (Apache Kafka 4.3, measured): retriable codes are retried here until
	// ctx ends.
	backoff := 50 * time.Millisecond
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return txnstate.RetryFailed, err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		switch {
		case err == nil:
			return txnstate.RetryOK, nil
		case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch), errors.Is(err, kerr.InvalidTxnState):
			return txnstate.RetryRejected, err
		case kerr.IsRetriable(err):
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, time.Second)
				continue
			case <-ctx.Done():
				return txnstate.RetryFailed, fmt.Errorf("%w (last answer %v)", ctx.Err(), err)
			}
		}
		return txnstate.RetryFailed, err
	}
}

// probe is the exact three-valued Fetch probe of the brief for one in-doubt
// epoch: a read_committed Fetch at each stored first offset.
func (o *output) probe(ctx context.Context, r txnstate.Record) (txnstate.Outcome, error) {
	if len(r.Partitions) == 0 {
		return txnstate.Unknown, nil
	}
	topics := make([]string, 0, len(r.Partitions))
	for _, p := range r.Partitions {
		topics = append(topics, p.Topic)
	}
	md, err := kadm.NewClient(o.admin).Metadata(ctx, topics...)
	if err != nil {
		return txnstate.Unknown, fmt.Errorf("metadata: %w", err)
	}
	var outs []txnstate.Outcome
	var errs []error
	for _, w := range r.Partitions {
		f, err := o.fetchObservation(ctx, md, w)
		if err != nil {
			errs = append(errs, err)
			outs = append(outs, txnstate.Unknown)
			continue
		}
		outs = append(outs, txnstate.ProbePartition(w, f))
	}
	out := txnstate.CombineProbes(outs)
	if out == txnstate.Unknown && len(errs) > 0 {
		return out, errors.Join(errs...)
	}
	return out, nil
}

const (
	controlAttr     = 0x20 // record batch attribute: control batch
	controlTypeAbrt = 0
	controlTypeCmt  = 1
)

func (o *output) fetchObservation(ctx context.Context, md kadm.Metadata, w txnstate.PartitionWrite) (txnstate.FetchObservation, error) {
	var f txnstate.FetchObservation
	td, ok := md.Topics[w.Topic]
	if !ok || td.Err != nil {
		return f, fmt.Errorf("topic %q: not in metadata (%v)", w.Topic, td.Err)
	}
	pd, ok := td.Partitions[w.Partition]
	if !ok || pd.Leader < 0 {
		return f, fmt.Errorf("topic %q partition %d: no leader", w.Topic, w.Partition)
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = 4 << 20
	req.IsolationLevel = 1 // read_committed: the aborted transactions list
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = w.Topic
	rt.TopicID = [16]byte(td.ID)
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = w.Partition
	rp.FetchOffset = w.FirstOffset
	rp.PartitionMaxBytes = 4 << 20
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, o.admin.Broker(int(pd.Leader)))
	if err != nil {
		return f, fmt.Errorf("fetch %s/%d@%d: %w", w.Topic, w.Partition, w.FirstOffset, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return f, fmt.Errorf("fetch %s/%d@%d: %w", w.Topic, w.Partition, w.FirstOffset, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Partition != w.Partition {
				continue
			}
			f.LogStartOffset, f.LastStableOffset = p.LogStartOffset, p.LastStableOffset
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if errors.Is(err, kerr.OffsetOutOfRange) {
					return f, nil // below the log start or beyond the end: unknown
				}
				return f, fmt.Errorf("fetch %s/%d@%d: %w", w.Topic, w.Partition, w.FirstOffset, err)
			}
			for _, a := range p.AbortedTransactions {
				if a.ProducerID == w.ProducerID && a.FirstOffset <= w.FirstOffset {
					f.AbortedListed = true
				}
			}
			scanBatches(p.RecordBatches, w, &f)
			return f, nil
		}
	}
	return f, fmt.Errorf("fetch %s/%d@%d: partition missing from the response", w.Topic, w.Partition, w.FirstOffset)
}

// scanBatches finds the data batch holding w.FirstOffset and the first
// control batch of w.ProducerID after it.
func scanBatches(b []byte, w txnstate.PartitionWrite, f *txnstate.FetchObservation) {
	markerSeen := false
	for len(b) >= 12 {
		length := int(int32(binary.BigEndian.Uint32(b[8:12])))
		if length <= 0 || 12+length > len(b) {
			return // a partial batch at the end of the response
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b[:12+length]); err != nil {
			return
		}
		b = b[12+length:]
		last := rb.FirstOffset + int64(rb.LastOffsetDelta)
		control := rb.Attributes&controlAttr != 0
		if !control && rb.FirstOffset <= w.FirstOffset && w.FirstOffset <= last {
			f.BatchFound, f.BatchProducerID = true, rb.ProducerID
		}
		if control && !markerSeen && rb.ProducerID == w.ProducerID && rb.FirstOffset > w.FirstOffset {
			markerSeen = true
			switch controlType(rb.Records) {
			case controlTypeAbrt:
				f.AbortMarker = true
			case controlTypeCmt:
				f.CommitMarker = true
			}
		}
	}
}

// controlType decodes the type of the one control record of an (uncompressed)
// control batch: key = version int16, type int16. -1 if unreadable.
func controlType(records []byte) int16 {
	var r kmsg.Record
	if err := r.ReadFrom(records); err != nil || len(r.Key) < 4 {
		return -1
	}
	return int16(binary.BigEndian.Uint16(r.Key[2:4]))
}
