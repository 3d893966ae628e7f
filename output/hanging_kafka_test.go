package output

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/txnstate"
)

// Hanging transactions on the real broker. A hanging transaction is one its
// coordinator completed while a partition still holds it open. The tests make
// one the way Kafka's own bug did before KIP-890: a transactional batch
// produced to a partition the coordinator never heard of (no
// AddPartitionsToTxn), so the EndTxn's markers go everywhere else. The brokers
// refuse that since KIP-890 (transaction.partition.verification.enable), so
// the tests run on a broker of their own with the verification off; for the
// output the result is the one a skipped marker leaves: the coordinator shows
// CompleteCommit (or CompleteAbort), the partition keeps the transaction open
// from the batch's offset, its last stable offset stuck there.

var (
	hangBrokersMu sync.Mutex
	hangBrokers   = map[int]string{}
)

// hangingBroker returns a single-node broker of transaction version tv with
// transaction.partition.verification.enable=false, started once for the
// package with integration/kafka/up.sh (and stopped when the package's tests
// end). It runs where the real-broker tests run (KAFKA_BROKERS_TV<tv>, which
// it does not touch). HANGING_BROKERS_TV<tv> names a broker to use instead
// (development; its verification is turned off too).
func hangingBroker(t *testing.T, tv int) string {
	t.Helper()
	kafkatest.Brokers(t, tv)
	hangBrokersMu.Lock()
	defer hangBrokersMu.Unlock()
	if b, ok := hangBrokers[tv]; ok {
		return b
	}
	b := os.Getenv(fmt.Sprintf("HANGING_BROKERS_TV%d", tv))
	if b == "" {
		kafkaDir, err := filepath.Abs("../integration/kafka")
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("hanging-tv%d-%d", tv, os.Getpid())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(kafkaDir, "up.sh"), "--tv", strconv.Itoa(tv), "--name", name, "--no-sasl-ssl")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("up.sh --name %s: %v\n%s", name, err, stderr.String())
		}
		sc := bufio.NewScanner(&stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "KAFKA_BROKERS="); ok {
				b = strings.TrimSpace(v)
			}
		}
		if b == "" {
			t.Fatalf("up.sh --name %s printed no KAFKA_BROKERS line", name)
		}
		stopAfterTests = append(stopAfterTests, func() {
			_ = exec.Command("bash", filepath.Join(kafkaDir, "down.sh"), "--name", name).Run()
		})
	}
	adm := kafkatest.Admin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	off := "false"
	resp, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "transaction.partition.verification.enable", Value: &off}})
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("turning transaction.partition.verification.enable off on %s: %v", b, err)
	}
	hangBrokers[tv] = b
	return b
}

// stopAfterTests are run by TestMain after the tests (the brokers the
// package started for itself).
var stopAfterTests []func()

// rawTxnBatch encodes a transactional record batch (magic 2) of producer
// pid/epoch at sequence seq holding vals.
func rawTxnBatch(pid int64, epoch int16, seq int32, vals ...string) []byte {
	now := time.Now().UnixMilli()
	var recs []byte
	for i, v := range vals {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{Magic: 2, Attributes: 0x10, PartitionLeaderEpoch: -1, LastOffsetDelta: int32(len(vals) - 1),
		FirstTimestamp: now, MaxTimestamp: now, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
		NumRecords: int32(len(vals)), Records: recs}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:12], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// produceUnadded writes vals to topic/partition as producer pid/epoch of
// transactional id id, without AddPartitionsToTxn (Produce v11: v12 and later
// add the partition under transaction version 2), and returns the first
// offset.
func produceUnadded(t *testing.T, brokers, topic string, partition int32, id string, pid int64, epoch int16, seq int32, vals ...string) int64 {
	t.Helper()
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.Produce), 11)
	cl := kafkatest.Client(t, brokers, kgo.MaxVersions(vs))
	req := kmsg.NewPtrProduceRequest()
	req.TransactionID = &id
	req.Acks = -1
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = rawTxnBatch(pid, epoch, seq, vals...)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("raw produce to %s/%d: %v", topic, partition, err)
		}
		p := resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		// A topic just created can answer NOT_LEADER_OR_FOLLOWER until the
		// broker's metadata has its partitions: the batch was not written,
		// so the same sequence number goes again.
		if err := kerr.ErrorForCode(p.ErrorCode); kerr.IsRetriable(err) && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if p.ErrorCode != 0 {
			t.Fatalf("raw produce to %s/%d: error code %d (is transaction.partition.verification.enable off?)", topic, partition, p.ErrorCode)
		}
		return p.BaseOffset
	}
}

// hangingTxn is a transaction of slot id left open in partition 1 only.
type hangingTxn struct {
	pid    int64
	pepoch int16
	parts  []txnstate.PartitionWrite
}

// makeHanging runs one transaction of id: "<prefix>-0" to partition 0 the
// normal way, "<prefix>-1" to partition 1 without AddPartitionsToTxn, then
// EndTxn (commit or abort). The coordinator completes it with a marker on
// partition 0 only: partition 1 holds it open. It checks that it hangs.
func makeHanging(t *testing.T, brokers, topic, id, prefix string, commit bool) hangingTxn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := kafkatest.Client(t, brokers, kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	pid, pepoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r, err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte(prefix + "-0")}).First()
	if err != nil {
		t.Fatal(err)
	}
	f1 := produceUnadded(t, brokers, topic, 1, id, pid, pepoch, 0, prefix+"-1")
	how := kgo.TryAbort
	if commit {
		how = kgo.TryCommit
	}
	if err := cl.EndTransaction(ctx, how); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	adm := kafkatest.Admin(t, brokers)
	kafkatest.Wait(t, 30*time.Second, func() bool {
		d, err := adm.DescribeTransactions(ctx, id)
		return err == nil && (d[id].State == txnstate.BrokerCompleteCommit || d[id].State == txnstate.BrokerCompleteAbort)
	})
	if open := openIn(t, brokers, topic, pid); !slices.Equal(open, []int32{1}) {
		t.Fatalf("the transaction should hang in partition 1 only, open in %v", open)
	}
	return hangingTxn{pid: pid, pepoch: pepoch, parts: []txnstate.PartitionWrite{
		{Topic: topic, Partition: 0, FirstOffset: r.Offset, ProducerID: pid},
		{Topic: topic, Partition: 1, FirstOffset: f1, ProducerID: pid},
	}}
}

// openIn lists the partitions of topic where pid has a transaction open.
func openIn(t *testing.T, brokers, topic string, pid int64) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ds, err := kafkatest.Admin(t, brokers).DescribeProducers(ctx, kadm.TopicsSet{topic: nil})
	if err != nil {
		t.Fatal(err)
	}
	var open []int32
	ds.EachProducer(func(p kadm.DescribedProducer) {
		if p.ProducerID == pid && p.CurrentTxnStartOffset >= 0 {
			open = append(open, p.Partition)
		}
	})
	slices.Sort(open)
	return open
}

// countValues counts each value read_committed in topic.
func countValues(t *testing.T, brokers, topic string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, v := range readCommittedFor(t, []string{brokers}, topic, 10*time.Second, 2*time.Minute) {
		n[v]++
	}
	return n
}

// TestKafkaHangingRepairedAtStart: a slot's last record in the state cache
// is decided (COMMITTED or ABORTED) and its transaction hangs in one
// partition. At start the output finds it (log, metric), writes the decided
// marker to that partition only, and then copies on: every record of the
// committed transaction exactly once, none of the aborted one, the new
// batch exactly once, nothing left open.
func TestKafkaHangingRepairedAtStart(t *testing.T) {
	for _, tv := range []int{0, 2} {
		for _, commit := range []bool{true, false} {
			t.Run(fmt.Sprintf("tv%d/commit=%v", tv, commit), func(t *testing.T) {
				b := hangingBroker(t, tv)
				topic := kafkatest.Topic(t, b, 3)
				txnID := fmt.Sprintf("hang-start-%d", time.Now().UnixNano())
				id := txnstate.SlotID(txnID, 0)
				h := makeHanging(t, b, topic, id, "old", commit)

				res := newResources()
				o := newUnconnected(t, res, yamlFor([]string{b}, topic, txnID, ""))
				state := txnstate.Committed
				if !commit {
					state = txnstate.Aborted
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				rec := txnstate.Record{Format: txnstate.FormatVersion, TransactionalID: id, Epoch: 7, ProducerID: h.pid,
					ProducerEpoch: h.pepoch, TxnVersion: txnstate.TxnVersion(tv), State: state, Partitions: h.parts}
				if err := o.store.writeSlot(ctx, 0, rec); err != nil {
					t.Fatal(err)
				}
				if err := o.Connect(ctx); err != nil {
					t.Fatal(err)
				}
				if got := o.m.tally.get(metricHanging + "/" + hangingFound); got != 1 {
					t.Fatalf("hanging transactions found at start: %d, want 1", got)
				}
				if got := o.m.tally.get(metricHanging + "/" + hangingRepaired); got != 1 {
					t.Fatalf("hanging transactions repaired at start: %d, want 1 (left: %d)", got, o.m.tally.get(metricHanging+"/"+hangingLeft))
				}
				if open := openIn(t, b, topic, h.pid); len(open) > 0 {
					t.Fatalf("still open after the repair: %v", open)
				}
				if err := o.WriteBatch(ctx, batchOf("new", 6)); err != nil {
					t.Fatal(err)
				}
				got := countValues(t, b, topic)
				want := map[string]int{}
				if commit {
					want["old-0"], want["old-1"] = 1, 1
				}
				for i := range 6 {
					want[fmt.Sprintf("new-%d", i)] = 1
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("read_committed: %v, want %v", got, want)
				}
			})
		}
	}
}

// TestKafkaHangingLeftWithoutRepair: with repair_hanging_transactions false
// the hanging transaction is found and reported as left, and nothing is
// written to it.
func TestKafkaHangingLeftWithoutRepair(t *testing.T) {
	b := hangingBroker(t, 2)
	topic := kafkatest.Topic(t, b, 3)
	txnID := fmt.Sprintf("hang-left-%d", time.Now().UnixNano())
	id := txnstate.SlotID(txnID, 0)
	h := makeHanging(t, b, topic, id, "old", true)
	o := newUnconnected(t, newResources(), yamlFor([]string{b}, topic, txnID, "repair_hanging_transactions: false"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := txnstate.Record{Format: txnstate.FormatVersion, TransactionalID: id, Epoch: 3, ProducerID: h.pid,
		ProducerEpoch: h.pepoch, TxnVersion: txnstate.TV2, State: txnstate.Committed, Partitions: h.parts}
	if err := o.store.writeSlot(ctx, 0, rec); err != nil {
		t.Fatal(err)
	}
	if err := o.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if f, l, r := o.m.tally.get(metricHanging+"/"+hangingFound), o.m.tally.get(metricHanging+"/"+hangingLeft), o.m.tally.get(metricHanging+"/"+hangingRepaired); f != 1 || l != 1 || r != 0 {
		t.Fatalf("found %d, left %d, repaired %d; want 1, 1, 0", f, l, r)
	}
	if open := openIn(t, b, topic, h.pid); !slices.Equal(open, []int32{1}) {
		t.Fatalf("open in %v, want [1]: nothing may close it without repair", open)
	}
}

// TestKafkaHangingRepairedAfterEpoch injects the fault at the marker step of
// a running output's epoch: when its commit begins, a record of the slot's
// producer goes to partition 2 without AddPartitionsToTxn and is added to the
// epoch's partitions (as if the epoch had written it), so the commit's
// markers skip it. With repair_hanging_transactions false (the control) the
// transaction is shown to hang: its coordinator has it complete while
// partition 2 holds it open, and the output reports it found and left. With
// the repair on (the default), the check after the commit, before the slot
// carries another epoch, finds it and writes the COMMIT marker: nothing is
// left open, and read_committed holds the injected record and every batch
// exactly once.
func TestKafkaHangingRepairedAfterEpoch(t *testing.T) {
	for _, tv := range []int{0, 2} {
		for _, repair := range []bool{false, true} {
			t.Run(fmt.Sprintf("tv%d/repair=%v", tv, repair), func(t *testing.T) {
				hangingAfterEpoch(t, tv, repair)
			})
		}
	}
}

func hangingAfterEpoch(t *testing.T, tv int, repair bool) {
	b := hangingBroker(t, tv)
	topic := kafkatest.Topic(t, b, 3)
	txnID := fmt.Sprintf("hang-epoch-%d", time.Now().UnixNano())
	extra := "partitioner: manual\npartition: '0'"
	if !repair {
		extra += "\nrepair_hanging_transactions: false"
	}
	o := newUnconnected(t, newResources(), yamlFor([]string{b}, topic, txnID, extra))
	var injected sync.Once
	var (
		pid int64  = -1
		id  string // the slot whose epoch got the fault
	)
	// When the committer picks the epoch up, before its record (and the
	// partitions in it) is made.
	o.hooks = &testHooks{beforeCommit: func(n uint64) {
		injected.Do(func() {
			o.mu.Lock()
			var ep *epoch
			for _, l := range o.live {
				if l.n == n {
					ep = l
				}
			}
			o.mu.Unlock()
			off := produceUnadded(t, b, topic, 2, ep.slot.id, ep.pid, ep.pepoch, 0, "injected")
			ep.mu.Lock()
			ep.parts[topicPartition{topic, 2}] = txnstate.PartitionWrite{Topic: topic, Partition: 2, FirstOffset: off, ProducerID: ep.pid}
			ep.mu.Unlock()
			pid, id = ep.pid, ep.slot.id
		})
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := o.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := o.WriteBatch(ctx, batchOf(fmt.Sprintf("b%d", i), 4)); err != nil {
			t.Fatal(err)
		}
	}
	injected.Do(func() {}) // waits for the hook's Do, and orders its writes before the reads here
	if pid < 0 {
		t.Fatal("no epoch committed: the fault was not injected")
	}
	// The check runs after the commit, before the slot's next epoch:
	// the last batch's may still be running.
	kafkatest.Wait(t, time.Minute, func() bool {
		return o.m.tally.get(metricHanging+"/"+hangingLeft)+o.m.tally.get(metricHanging+"/"+hangingRepaired) > 0
	})
	f, l, r := o.m.tally.get(metricHanging+"/"+hangingFound), o.m.tally.get(metricHanging+"/"+hangingLeft), o.m.tally.get(metricHanging+"/"+hangingRepaired)
	if !repair {
		if f != 1 || l != 1 || r != 0 {
			t.Fatalf("found %d, left %d, repaired %d; want 1, 1, 0", f, l, r)
		}
		// The hang itself, seen from the broker and not the output:
		// the coordinator has the slot's transaction complete, and
		// partition 2 holds the injected record's transaction open.
		d, err := kafkatest.Admin(t, b).DescribeTransactions(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st := d[id].State; st != txnstate.BrokerCompleteCommit {
			t.Fatalf("coordinator state %s, want CompleteCommit: the slot's epochs ended", st)
		}
		if open := openIn(t, b, topic, pid); !slices.Equal(open, []int32{2}) {
			t.Fatalf("open in %v, want [2]: the injected record's transaction hangs there", open)
		}
		return
	}
	if f != 1 || r != 1 || l != 0 {
		t.Fatalf("found %d, repaired %d, left %d; want 1, 1, 0", f, r, l)
	}
	if open := openIn(t, b, topic, pid); len(open) > 0 {
		t.Fatalf("still open after the repair: %v", open)
	}
	got := countValues(t, b, topic)
	want := map[string]int{"injected": 1}
	for i := range 3 {
		for j := range 4 {
			want[fmt.Sprintf("b%d-%d", i, j)] = 1
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read_committed: %v, want %v", got, want)
	}
}

// TestKafkaHangingJoinsNextTransaction shows why a hanging transaction must
// be closed before its producer writes the partition again: the producer's
// next transaction joins the open one (same producer id, the partition keeps
// one open transaction per producer), and that transaction's marker closes
// both with its own outcome. Here the next transaction aborts: the hanging
// records, committed at the coordinator, are gone with it.
func TestKafkaHangingJoinsNextTransaction(t *testing.T) {
	for _, tv := range []int{0, 2} {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			b := hangingBroker(t, tv)
			topic := kafkatest.Topic(t, b, 3)
			id := fmt.Sprintf("hang-join-%d", time.Now().UnixNano())
			makeHanging(t, b, topic, id, "old", true)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cl := kafkatest.Client(t, b, kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("next-1")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			got := countValues(t, b, topic)
			if want := map[string]int{"old-0": 1}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("read_committed: %v, want %v (the committed old-1 closed by the next transaction's abort)", got, want)
			}
		})
	}
}
