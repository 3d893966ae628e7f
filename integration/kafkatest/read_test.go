package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func newFake(t *testing.T, topic string, partitions int32) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func txnClient(t *testing.T, addrs []string, topic, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(ctx context.Context, t *testing.T, cl *kgo.Client, p int32, vals ...string) {
	t.Helper()
	for _, v := range vals {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func values(recs map[int32][]*kgo.Record) map[int32][]string {
	out := map[int32][]string{}
	for p, rs := range recs {
		for _, r := range rs {
			out[p] = append(out[p], string(r.Value))
		}
	}
	return out
}

// The reader reaches the end of partitions that end in transaction markers
// and aborted records (which no consumer sees), returns the committed records
// and nothing aborted or still open, and knows it is done without a quiet
// period.
func TestReadCommittedEndsOnPositions(t *testing.T) {
	t.Run("kfake", func(t *testing.T) { readEndsOnPositions(t, newFake(t, "t", 3), "t", "a", "b") })
	// The same on Apache Kafka, whose last stable offsets and aborted
	// transaction lists are the ones the judges read in the real tests.
	for _, tv := range []int{0, 2} {
		t.Run(fmt.Sprintf("kafka-tv%d", tv), func(t *testing.T) {
			brokers := Brokers(t, tv)
			topic := Topic(t, brokers, 3)
			readEndsOnPositions(t, strings.Split(brokers, ","), topic, topic+"-a", topic+"-b")
		})
	}
}

func readEndsOnPositions(t *testing.T, addrs []string, topic, idA, idB string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	plain, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	produce(ctx, t, plain, 0, "p0", "p1")

	a := txnClient(t, addrs, topic, idA)
	// Partition 0: a committed transaction after the plain records.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, 0, "c0", "c1")
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// Partition 1: committed, then aborted: the partition ends in aborted
	// records and their marker.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, 1, "c2")
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, 1, "x0", "x1")
	if err := a.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	// Partition 2: an aborted transaction whose marker lies past the last
	// stable offset (another transaction opened after it and is still open):
	// the last offset before the end is an aborted record.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, 2, "x2")
	b := txnClient(t, addrs, topic, idB)
	if err := b.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, b, 2, "open")
	if err := a.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	judge, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer judge.Close()
	start := time.Now()
	got, err := ReadCommitted(ctx, judge, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32][]string{0: {"p0", "p1", "c0", "c1"}, 1: {"c2"}}
	if v := values(got); fmt.Sprint(v) != fmt.Sprint(want) {
		t.Fatalf("read %v, want %v", v, want)
	}
	// Done on positions: no read window or quiet period was waited for
	// (generous for a loaded machine, far below the 30s context).
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %v", d)
	}

	// Once the open transaction commits, its record is read too.
	if err := b.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// Kafka writes the markers after EndTxn returns: wait until the
	// last stable offset moved past the record.
	adm := kadm.NewClient(judge)
	Wait(t, 20*time.Second, func() bool {
		l, err := adm.ListCommittedOffsets(ctx, topic)
		o, _ := l.Lookup(topic, 2)
		return err == nil && o.Offset >= 2
	})
	got, err = ReadCommitted(ctx, judge, topic)
	if err != nil {
		t.Fatal(err)
	}
	if v := values(got)[2]; fmt.Sprint(v) != "[open]" {
		t.Fatalf("partition 2 after the commit: %v", v)
	}
}

// A judge that cannot reach its end says so: an *EndError naming the
// partition and how far it got, never a short answer.
func TestReadCommittedToFailsShort(t *testing.T) {
	addrs := newFake(t, "t", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := txnClient(t, addrs, "t", "a")
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, 1, "c0", "c1")
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	judge, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer judge.Close()

	// An open transaction holds the end: a read to the high watermark
	// cannot finish until it ends.
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, a, 1, "open")
	short, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	got, err := ReadCommittedTo(short, judge, "t", map[int32]int64{0: 0, 1: 5})
	var ee *EndError
	if !errors.As(err, &ee) {
		t.Fatalf("read %v, %v; want an EndError", values(got), err)
	}
	if ee.Partition != 1 || ee.Position != 3 || ee.End != 5 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: want partition 1 at offset 3 of 5 (two records and a marker read)", err)
	}
	t.Log(err)

	// A partition that does not exist is an error, not an empty read.
	if _, err := ReadCommittedTo(ctx, judge, "t", map[int32]int64{7: 1}); err == nil {
		t.Fatal("read a partition that does not exist")
	}
}

// Kafka's ConsoleConsumer as a bounded second judge: it prints exactly the
// records the position reader found (keys and null values included), and a
// judge asked for more than there is fails as a judge ("did not reach the
// end") instead of handing back its short read.
func TestConsoleRead(t *testing.T) {
	brokers := Brokers(t, 2)
	topic := Topic(t, brokers, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := Client(t, brokers, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i, r := range []*kgo.Record{
		{Partition: 0, Key: []byte("k0"), Value: []byte("v0")},
		{Partition: 1, Value: []byte("v1")},
		{Partition: 1, Key: []byte("k2")},
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	got, err := ReadCommitted(ctx, cl, topic)
	if err != nil {
		t.Fatal(err)
	}
	n := len(got[0]) + len(got[1])
	if n != 3 {
		t.Fatalf("position reader read %d records, want 3", n)
	}
	console, err := ConsoleRead(ctx, brokers, topic, n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32][]ConsoleRecord{
		0: {{0, 0, "k0", "v0"}},
		1: {{1, 0, "null", "v1"}, {1, 1, "k2", "null"}},
	}
	if fmt.Sprint(console) != fmt.Sprint(want) {
		t.Fatalf("ConsoleConsumer printed %v, want %v", console, want)
	}
	// The idle timeout counts from the consumer's start, group join and first
	// fetch included: long enough for a loaded machine to print the 3 records
	// before the judge gives up on the fourth.
	_, err = ConsoleRead(ctx, brokers, topic, n+1, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not reach the end") || !strings.Contains(err.Error(), "printed 3 of 4") {
		t.Fatalf("asked for one record more than there is: %v, want a judge that did not reach the end", err)
	}
}

func TestParseConsoleLine(t *testing.T) {
	r, err := ParseConsoleLine("Partition:2\tOffset:17\tkey\tva\tlue")
	if err != nil || r != (ConsoleRecord{2, 17, "key", "va\tlue"}) {
		t.Fatalf("%+v %v", r, err)
	}
	for _, bad := range []string{"", "Processed a total of 3 messages", "Partition:x\tOffset:1\tk\tv", "Partition:1\tOffset:1\tv"} {
		if _, err := ParseConsoleLine(bad); err == nil {
			t.Errorf("%q parsed as a record", bad)
		}
	}
}
