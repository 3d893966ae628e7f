package integration

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// TestHangingTransactionAbort exercises the recipe of docs/operations.md for
// a hanging transaction of a Kafka-to-Kafka epoch, on Apache Kafka (both
// transaction versions): the transaction is open on the output partitions
// and, with a pending offset commit of the group, on the group's
// __consumer_offsets partition, and nothing will end it. (In the field the
// coordinator has forgotten it; here its producer stays silent under a
// 10-minute transaction timeout, which leaves the partitions in the same
// state.) Its symptoms: the output's last stable offset is stuck at the
// transaction's first offset, and the group's committed offsets are
// UNSTABLE_OFFSET_COMMIT for every reader that asks for stable ones (the
// kafka_native input does). The recipe, with the pipeline stopped: find the
// transaction's start offset on each partition with `kafka-transactions.sh
// describe-producers`, abort it on every one of them (output partitions and
// the group's __consumer_offsets partition) with `kafka-transactions.sh abort
// --start-offset`, and start the pipeline again: the epoch's records are
// aborted and its source offsets were never committed, so the group reads
// them again and the copy holds every record exactly once.
func TestHangingTransactionAbort(t *testing.T) {
	for _, tv := range kafkatest.Versions() {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) { testHangingTransactionAbort(t, tv) })
	}
}

func testHangingTransactionAbort(t *testing.T, tv int) {
	brokers := kafkatest.Brokers(t, tv)
	in := kafkatest.Topic(t, brokers, 2)
	out := kafkatest.Topic(t, brokers, 2)
	group := "ops-hang-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// 100 source records, 50 per partition.
	src := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 100 {
		recs = append(recs, &kgo.Record{Topic: in, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	require.NoError(t, src.ProduceSync(ctx, recs...).FirstErr())

	// The hanging epoch: the copies of the first 20 records of each input
	// partition, and the group's offsets past them, in one transaction
	// that is never ended.
	hang := kafkatest.Client(t, brokers,
		kgo.TransactionalID(group+"-hanging"), kgo.TransactionTimeout(10*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, hang.BeginTransaction())
	var copies []*kgo.Record
	for i := range 40 {
		copies = append(copies, &kgo.Record{Topic: out, Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	require.NoError(t, hang.ProduceSync(ctx, copies...).FirstErr())
	addTxnOffsets(ctx, t, hang, brokers, group, in, map[int32]int64{0: 20, 1: 20})
	pid, _, err := hang.ProducerID(ctx)
	require.NoError(t, err)

	// The symptoms.
	adm := kafkatest.Admin(t, brokers)
	stable, err := adm.ListCommittedOffsets(ctx, out)
	require.NoError(t, err)
	stable.Each(func(o kadm.ListedOffset) {
		require.Zero(t, o.Offset, "the last stable offset of %s/%d", out, o.Partition)
	})
	require.ErrorIs(t, fetchStableOffsets(ctx, src, group, in), kerr.UnstableOffsetCommit)

	// The recipe: every partition the transaction is open on.
	offsetsPart := consumerOffsetsPartition(ctx, t, adm, group)
	var opened []string
	for _, tp := range []struct {
		topic string
		part  int32
	}{{out, 0}, {out, 1}, {"__consumer_offsets", offsetsPart}} {
		start := openTransactionStart(ctx, t, brokers, tp.topic, tp.part, pid)
		opened = append(opened, fmt.Sprintf("%s/%d@%d", tp.topic, tp.part, start))
		if tp.topic == "__consumer_offsets" {
			// The output partitions alone are not enough: the
			// group's offsets stay pending, and every reader of
			// the group waits on them.
			require.ErrorIs(t, fetchStableOffsets(ctx, src, group, in), kerr.UnstableOffsetCommit)
		}
		runTool(ctx, t, "TransactionsCommand", "--bootstrap-server", brokers, "abort",
			"--topic", tp.topic, "--partition", strconv.Itoa(int(tp.part)), "--start-offset", strconv.FormatInt(start, 10))
	}
	t.Logf("aborted the transaction open on %s", strings.Join(opened, ", "))

	kafkatest.Wait(t, time.Minute, func() bool {
		return fetchStableOffsets(ctx, src, group, in) == nil
	})

	// The pipeline again: a bounded Kafka-to-Kafka copy from the group.
	dir := t.TempDir()
	conf := filepath.Join(dir, "copy.yaml")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, `
http: { enabled: false }
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[2]s ]
    consumer_group: %[4]s
    start_offset: committed
    reset_offset: earliest
    stop_offset: latest
output:
  kafka_eos:
    seed_brokers: [ %[1]s ]
    topic: %[3]s
    partitioner: manual
    partition: '${! metadata("kafka_partition") }'
    key: '${! metadata("kafka_key") }'
    transactional_id: %[4]s
    consumer_group: %[4]s
    state_cache: state
cache_resources:
  - label: state
    kafka_state: { seed_brokers: [ %[1]s ], topic: %[4]s-state }
`, brokers, in, out, group), 0o644))
	cmd := exec.CommandContext(ctx, kafkatest.Binary(t), "run", conf)
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", outb)

	// Every record exactly once for read_committed readers: read the
	// output to its last stable offsets (control records kept, so that the
	// position passes a trailing marker).
	ends, err := adm.ListCommittedOffsets(ctx, out)
	require.NoError(t, err)
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl := kafkatest.Client(t, brokers, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{out: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart()}}))
	seen := map[string]int{}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: partitions %v not read to their end", out, left)
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				seen[string(r.Value)]++
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	require.Len(t, seen, 100, "every input record in the output")
	for v, n := range seen {
		require.Equal(t, 1, n, "%s copied %d times", v, n)
	}
}

// addTxnOffsets sends AddOffsetsToTxn and TxnOffsetCommit for group on cl's
// open transaction, as a kafka_eos epoch in Kafka-to-Kafka mode does.
func addTxnOffsets(ctx context.Context, t *testing.T, cl *kgo.Client, brokers, group, topic string, offsets map[int32]int64) {
	t.Helper()
	pid, epoch, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	txnID := cl.OptValue(kgo.TransactionalID).(string)
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, pid, epoch, group
	resp, err := add.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.NoError(t, kerr.ErrorForCode(resp.ErrorCode))

	topics, err := kafkatest.Admin(t, brokers).ListTopics(ctx, topic)
	require.NoError(t, err)
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, group, pid, epoch
	req.Generation, req.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = topic, topics[topic].ID
	for p, o := range offsets {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = p, o, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	cresp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	for _, rt := range cresp.Topics {
		for _, rp := range rt.Partitions {
			require.NoError(t, kerr.ErrorForCode(rp.ErrorCode), "%s/%d", rt.Topic, rp.Partition)
		}
	}
}

// fetchStableOffsets asks for the group's committed offsets of topic as a
// read_committed consumer does (require_stable) and returns the error of
// the first partition that has one.
func fetchStableOffsets(ctx context.Context, cl *kgo.Client, group, topic string) error {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	req.RequireStable = true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{0, 1}
	req.Topics = append(req.Topics, rt)
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	gt := kmsg.NewOffsetFetchRequestGroupTopic()
	gt.Topic, gt.Partitions = topic, []int32{0, 1}
	g.Topics = append(g.Topics, gt)
	req.Groups = append(req.Groups, g)
	shards := cl.RequestSharded(ctx, req)
	for _, sh := range shards {
		if sh.Err != nil {
			return sh.Err
		}
		resp := sh.Resp.(*kmsg.OffsetFetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, rg := range resp.Groups {
			if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
				return err
			}
			for _, rt := range rg.Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						return err
					}
				}
			}
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// consumerOffsetsPartition is the __consumer_offsets partition of group:
// the absolute value of Java's String.hashCode of the group (0 for
// MinInt32, as Kafka's Utils.abs) modulo the topic's partition count.
func consumerOffsetsPartition(ctx context.Context, t *testing.T, adm *kadm.Client, group string) int32 {
	t.Helper()
	td, err := adm.ListTopics(ctx, "__consumer_offsets")
	require.NoError(t, err)
	n := int32(len(td["__consumer_offsets"].Partitions))
	require.Positive(t, n)
	var h int32
	for _, c := range group { // ASCII group names: UTF-16 code units are the runes
		h = 31*h + c
	}
	switch {
	case h == math.MinInt32:
		h = 0
	case h < 0:
		h = -h
	}
	return h % n
}

// openTransactionStart runs `kafka-transactions.sh describe-producers` on
// one partition and returns the start offset of the transaction producer id
// pid has open on it (the CurrentTransactionStartOffset column; other
// producers may have theirs on a shared __consumer_offsets partition).
func openTransactionStart(ctx context.Context, t *testing.T, brokers, topic string, part int32, pid int64) int64 {
	t.Helper()
	out := runTool(ctx, t, "TransactionsCommand", "--bootstrap-server", brokers, "describe-producers",
		"--topic", topic, "--partition", strconv.Itoa(int(part)))
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != strconv.FormatInt(pid, 10) {
			continue
		}
		s, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		require.NoError(t, err, "producer %d has no transaction open on %s/%d:\n%s", pid, topic, part, out)
		return s
	}
	t.Fatalf("producer %d not on %s/%d:\n%s", pid, topic, part, out)
	return 0
}

func runTool(ctx context.Context, t *testing.T, class string, args ...string) string {
	t.Helper()
	cmd, err := kafkatest.ToolCmd(ctx, class, args...)
	require.NoError(t, err)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", class, strings.Join(args, " "), out)
	return string(out)
}
