package output

import (
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// What the broker does with a sequence written again after an aborted
// transaction under transaction version 0, where the abort keeps the producer
// epoch: the case TestSequenceAfterAbortWithAppliedProduce reaches through
// franz-go, here in raw requests. A transaction writes 2 records at sequence
// 0 and is aborted; the next transaction of the same producer id and epoch
// writes sequence 0 again. With as many records the broker answers it as a
// duplicate of the aborted batch (no error, the aborted batch's offset) and
// writes nothing: the second transaction commits without its records. With
// another count it answers OUT_OF_ORDER_SEQUENCE_NUMBER. (Apache Kafka keeps
// a producer's last batches per partition across a transaction marker of the
// same epoch; this test is the claim's check on the real broker.)
func TestKafkaSequenceAfterAbortTV0(t *testing.T) {
	brokers := strings.Split(kafkatest.Brokers(t, 0), ",")
	topic := kafkatest.Topic(t, strings.Join(brokers, ","), 1)
	checkSequenceAfterAbort(t, brokers, topic)
}

// kfake answers the same (the output's kfake test rests on it).
func TestKfakeSequenceAfterAbortTV0(t *testing.T) {
	c := newCluster(t, kfake.MaxVersions(kversion.V3_9_0()))
	checkSequenceAfterAbort(t, c.ListenAddrs(), testTopic)
}

func checkSequenceAfterAbort(t *testing.T, brokers []string, topic string) {
	for _, n := range []int32{2, 1} {
		t.Run(fmt.Sprintf("again=%d", n), func(t *testing.T) {
			code, first, again := sequenceAfterAbort(t, brokers, topic, n)
			switch n {
			case 2:
				if code != 0 || again != first {
					t.Fatalf("the same sequence and count after the abort: %v at offset %d, want the duplicate's answer (no error, offset %d)", kerr.ErrorForCode(code), again, first)
				}
				for _, v := range readCommitted(t, brokers, topic) {
					if strings.HasPrefix(v, "again-") || strings.HasPrefix(v, "aborted-") {
						t.Fatalf("visible: %s", v)
					}
				}
				t.Logf("the second transaction committed, none of its records written")
			default:
				if code != kerr.OutOfOrderSequenceNumber.Code {
					t.Fatalf("the same first sequence, another count: %v at offset %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", kerr.ErrorForCode(code), again)
				}
			}
		})
	}
}

// sequenceAfterAbort runs the two transactions on a new transactional id and
// partition 0 of topic, and returns the second Produce's answer and the first
// Produce's base offset.
func sequenceAfterAbort(t *testing.T, brokers []string, topic string, again int32) (code int16, first, base int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxVersions(kversion.V3_0_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := fmt.Sprintf("seqabort-%d", time.Now().UnixNano())

	// retry sends one request until its error is not a transient one.
	retry := func(what string, do func() (int16, error)) int16 {
		for {
			c, err := do()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			switch c {
			case kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code, kerr.NotCoordinator.Code, kerr.ConcurrentTransactions.Code:
				select {
				case <-ctx.Done():
					t.Fatalf("%s: still %v", what, kerr.ErrorForCode(c))
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			return c
		}
	}
	var pid int64
	var epoch int16
	if c := retry("InitProducerID", func() (int16, error) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &id
		req.TransactionTimeoutMillis = 60000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return 0, err
		}
		pid, epoch = resp.ProducerID, resp.ProducerEpoch
		return resp.ErrorCode, nil
	}); c != 0 {
		t.Fatalf("InitProducerID: %v", kerr.ErrorForCode(c))
	}
	add := func() {
		if c := retry("AddPartitionsToTxn", func() (int16, error) {
			req := kmsg.NewPtrAddPartitionsToTxnRequest()
			req.TransactionalID, req.ProducerID, req.ProducerEpoch = id, pid, epoch
			rt := kmsg.NewAddPartitionsToTxnRequestTopic()
			rt.Topic, rt.Partitions = topic, []int32{0}
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return 0, err
			}
			for _, st := range resp.Topics {
				for _, sp := range st.Partitions {
					if sp.ErrorCode != 0 {
						return sp.ErrorCode, nil
					}
				}
			}
			return 0, nil
		}); c != 0 {
			t.Fatalf("AddPartitionsToTxn: %v", kerr.ErrorForCode(c))
		}
	}
	end := func(commit bool) {
		if c := retry("EndTxn", func() (int16, error) {
			req := kmsg.NewPtrEndTxnRequest()
			req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, commit
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return 0, err
			}
			return resp.ErrorCode, nil
		}); c != 0 {
			t.Fatalf("EndTxn(commit=%v): %v", commit, kerr.ErrorForCode(c))
		}
	}
	produce := func(n int32, prefix string) (int16, int64) {
		req := kmsg.NewPtrProduceRequest()
		req.TransactionID = &id
		req.Acks, req.TimeoutMillis = -1, 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = 0
		rp.Records = txnBatch(pid, epoch, 0, n, prefix)
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("Produce: %v", err)
		}
		p := resp.Topics[0].Partitions[0]
		return p.ErrorCode, p.BaseOffset
	}

	add()
	// A topic just created may have no leader yet: the broker answers
	// without writing anything, and the same batch goes again.
	var c int16
	for {
		c, first = produce(2, "aborted")
		if c != kerr.NotLeaderForPartition.Code && c != kerr.LeaderNotAvailable.Code && c != kerr.UnknownTopicOrPartition.Code {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("first Produce: still %v", kerr.ErrorForCode(c))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if c != 0 {
		t.Fatalf("first Produce: %v", kerr.ErrorForCode(c))
	}
	end(false)
	add()
	code, base = produce(again, "again")
	end(true)
	return code, first, base
}

// txnBatch encodes a transactional record batch of n small records from
// producer id pid at epoch epoch, first sequence seq.
func txnBatch(pid int64, epoch int16, seq, n int32, prefix string) []byte {
	var recs []byte
	for i := range n {
		r := kmsg.Record{OffsetDelta: i, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // a one-byte length varint
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	b := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           0b00010000, // transactional
		LastOffsetDelta:      n - 1,
		FirstTimestamp:       now,
		MaxTimestamp:         now,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		FirstSequence:        seq,
		NumRecords:           n,
		Records:              recs,
	}
	enc := b.AppendTo(nil)
	b.Length = int32(len(enc) - 12)
	b.CRC = int32(crc32.Checksum(b.AppendTo(nil)[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}
