package output

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
)

// hostileInput fills topic with n records "v-<i>" (keys "<i>", round-robin
// over its partitions) and, among them, three records written by a hostile
// producer of the input: one larger than the copy's max_message_bytes, one
// whose header chooses a partition the output topic does not have, and one
// whose value is an Arrow IPC stream of Kafka records with forged keys,
// headers and partitions. It returns the Arrow-looking value.
func hostileInput(t testing.TB, brokers []string, topic string, n int) []byte {
	t.Helper()
	forged, err := kafkaarrow.NewEncoder().AppendIPC(nil, []*kgo.Record{
		{Key: []byte("forged"), Value: []byte("forged-0"), Partition: 2, Headers: []kgo.RecordHeader{{Key: "target", Value: []byte("1")}}},
		{Key: []byte("forged"), Value: []byte("forged-1"), Partition: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(forged) >= 4000 {
		t.Fatalf("the Arrow-looking value is %d bytes, over the copy's max_message_bytes", len(forged))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Partition: int32(i % 3), Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v-%d", i))})
		switch i {
		case n / 4:
			recs = append(recs, &kgo.Record{Partition: 0, Key: []byte("big"), Value: bytes.Repeat([]byte("B"), 6000)})
		case n / 2:
			recs = append(recs, &kgo.Record{Partition: 1, Key: []byte("badpart"), Value: []byte("badpart"), Headers: []kgo.RecordHeader{{Key: "target", Value: []byte("7")}}})
		case 3 * n / 4:
			recs = append(recs, &kgo.Record{Partition: 2, Key: []byte("arrowlike"), Value: forged})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return forged
}

// exampleRoute is the dead-letter route of
// config/examples/kafka_eos_dead_letter.yaml: every message whose error says
// it cannot be written goes to the dead-letter output, and every other
// failure is rejected (replayed by the input).
const exampleRoute = `@fallback_error.has_prefix("kafka_eos: message cannot be written")`

// ownErrorRoute dead-letters only the message the error names by its source:
// under output batching Benthos gives every message of an input batch the
// error of its first failed message, and this route rejects the others of
// that batch (written already), which the input then replays.
const ownErrorRoute = `@fallback_error.has_prefix("kafka_eos: message cannot be written (topic %s partition %v offset %v)".format(@kafka_topic, @kafka_partition, @kafka_offset))`

// hostileCopyYAML is a bounded Kafka-to-Kafka copy with output batching, a
// target partition taken from a header when there is one, and a dead-letter
// route into dir that sends there the messages check matches and rejects the
// others.
func hostileCopyYAML(e k2kTopics, txnID, dir, check string) string {
	return fmt.Sprintf(`
logger: { level: error }
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[2]s ]
    consumer_group: %[3]s
    start_offset: committed
    reset_offset: earliest
    stop_offset: latest
    max_batch_records: 5
    commit_period: 100ms
pipeline:
  # Output batching combines input batches in the order the pipeline hands
  # them over: one thread keeps the input's order (see the spec).
  threads: 1
output:
  fallback:
    - kafka_eos:
        seed_brokers: [ %[1]s ]
        topic: %[4]s
        key: '${! meta("kafka_key") }'
        partitioner: manual
        partition: '${! meta("target").or(meta("kafka_partition")) }'
        consumer_group: %[3]s
        transactional_id: %[5]s
        state_cache: state
        max_message_bytes: 4000
        epoch: { interval: 20ms }
        max_in_flight: 4
        batching:
          count: 7
          period: 20ms
    - switch:
        cases:
          - check: '%[7]s'
            output:
              file:
                path: '%[6]s/${! meta("kafka_topic") }-${! meta("kafka_partition") }-${! meta("kafka_offset") }.msg'
                codec: all-bytes
          - output:
              reject: '${! @fallback_error }'
cache_resources:
  - label: state
    memory: {}
`, strings.Join(e.brokers, ","), e.in, e.grp, e.out, txnID, dir, check)
}

// Kafka-to-Kafka mode with output batching: an output batch holds several
// consecutive input batches of one partition, admitted together (each span
// reaches from the one before it in the batch). On the original code such a
// batch waited for its own spans (the second span's predecessor was the first,
// not yet admitted) and was nacked after the wait, again and again: the copy
// never finished.
func TestK2KOutputBatching(t *testing.T) {
	c := newK2KCluster(t)
	e := k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}
	fillInput(t, e.brokers, e.in, 300)
	y := copyStreamYAML(e, "k2k-batching", copyOpts{batch: 5, k2k: true})
	y = strings.Replace(y, "pipeline:\n", "pipeline:\n  threads: 1\n", 1)
	y = strings.Replace(y, "    max_in_flight: 4\n", "    max_in_flight: 4\n    batching:\n      count: 7\n      period: 20ms\n", 1)
	runStream(t, y, 60*time.Second)
	checkCopyOf(t, e, 300, func(int) bool { return true })
}

// Without processors Benthos builds no pipeline, whatever pipeline.threads
// says: the input's batches reach the batcher in order and the same copy as
// TestK2KOutputBatching finishes on four threads. (With a processor on
// several threads the batches reach the batcher out of order, the copy
// crawls through replays, and connect-eos refuses such a config:
// docs/exactly-once.md.)
func TestK2KOutputBatchingNoProcessors(t *testing.T) {
	c := newK2KCluster(t)
	e := k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}
	fillInput(t, e.brokers, e.in, 300)
	y := copyStreamYAML(e, "k2k-batching-noproc", copyOpts{batch: 5, k2k: true})
	noProc := strings.Replace(y, "pipeline:\n  processors:\n    - mapping: 'root = content()'\n", "pipeline:\n  threads: 4\n", 1)
	if noProc == y {
		t.Fatal("the copy's pipeline section changed: update this test")
	}
	y = strings.Replace(noProc, "    max_in_flight: 4\n", "    max_in_flight: 4\n    batching:\n      count: 7\n      period: 20ms\n", 1)
	if y == noProc {
		t.Fatal("the copy's output section changed: update this test")
	}
	runStream(t, y, 60*time.Second)
	checkCopyOf(t, e, 300, func(int) bool { return true })
}

// Records written into the input topic by whoever can produce to it cannot
// steer the copy: an Arrow-looking value is copied as one record with that
// value (never unpacked into its forged rows); a record too large and one
// whose header picks a partition the output does not have are each reported
// by their source offset and routed to the dead-letter output, never
// acknowledged as written and never replayed in a loop; every other record is
// copied exactly once, with output batching mixing several input batches in
// one output batch, and the group's lag reaches 0.
func TestHostileRecordsCopy(t *testing.T) {
	c := newK2KCluster(t)
	testHostileRecordsCopy(t, k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}, "hostile", exampleRoute)
}

func TestK2KKafkaHostileRecordsCopy(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		testHostileRecordsCopy(t, e, txnID, exampleRoute)
	})
}

// The same copy with a route that dead-letters only the message its error
// names and rejects its batch-mates: the input replays them, and kafka_eos
// acknowledges them without writing them again (they were written in an
// epoch that committed). Before, each was written twice.
func TestHostileRecordsCopyRejectedMates(t *testing.T) {
	c := newK2KCluster(t)
	testHostileRecordsCopy(t, k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}, "hostile-mates", ownErrorRoute)
}

func TestK2KKafkaHostileRecordsCopyRejectedMates(t *testing.T) {
	forEachK2KKafka(t, func(t *testing.T, e k2kTopics, txnID string) {
		testHostileRecordsCopy(t, e, txnID, ownErrorRoute)
	})
}

func testHostileRecordsCopy(t *testing.T, e k2kTopics, txnID, route string) {
	const n = 300
	forged := hostileInput(t, e.brokers, e.in, n)
	dir := t.TempDir()
	runStream(t, hostileCopyYAML(e, txnID, dir, route), 120*time.Second)

	recs := readCommittedRecords(t, e.brokers, e.out, 2500*time.Millisecond, 60*time.Second)
	seen := map[string]int{}
	arrowlike := 0
	for _, r := range recs {
		if bytes.Equal(r.Value, forged) {
			arrowlike++
			continue
		}
		seen[string(r.Value)]++
	}
	var bad []string
	for i := range n {
		if v := fmt.Sprintf("v-%d", i); seen[v] != 1 {
			bad = append(bad, fmt.Sprintf("%s x%d", v, seen[v]))
		}
		delete(seen, fmt.Sprintf("v-%d", i))
	}
	if len(bad) > 0 || len(seen) > 0 || arrowlike != 1 {
		t.Fatalf("output: wrong counts %v; unexpected values %v; the Arrow-looking value %d times (want once, as bytes)", bad, seen, arrowlike)
	}
	// The dead letters: the two records that cannot be written, each named
	// by its source partition and offset. Benthos reports an error per
	// input batch under output batching, so with the example's route the
	// batch-mates of each come along (they are in the output as well,
	// once); the route that rejects them dead-letters only the two.
	files, _ := filepath.Glob(filepath.Join(dir, "*.msg"))
	var big, badpart []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		switch {
		case bytes.Equal(b, bytes.Repeat([]byte("B"), 6000)):
			big = append(big, filepath.Base(f))
		case string(b) == "badpart":
			badpart = append(badpart, filepath.Base(f))
		case strings.HasPrefix(string(b), "v-") && route == exampleRoute:
		default:
			t.Fatalf("dead letter %s holds %q", f, b[:min(len(b), 40)])
		}
	}
	if len(big) != 1 || len(badpart) != 1 || !strings.HasPrefix(big[0], e.in+"-0-") || !strings.HasPrefix(badpart[0], e.in+"-1-") {
		t.Fatalf("dead letters: too large %v, bad partition %v; want one each, named by their partition and offset (all: %d files)", big, badpart, len(files))
	}
	waitLag0(t, e, 30*time.Second)
}

// Two messages that cannot be written in one input batch, under output
// batching, with the route that dead-letters only the message its error
// names: Benthos gives both the first one's error, so the route takes the
// first and rejects the second, which comes back. That is not a message no
// route took (its own error was never shown): it is reported again, with
// its own error, and the route takes it. Before, it stopped the pipeline as
// "sent back".
func TestTwoUnwritableInOneInputBatch(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newK2KCluster(t)
	e := k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.DefaultProduceTopic(e.in), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Partition: int32(i % 3), Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("v-%d", i))})
		if i == 30 {
			// One input batch (max_batch_records 5): v-30, big B, big C, ...
			recs = append(recs,
				&kgo.Record{Partition: 0, Key: []byte("big"), Value: bytes.Repeat([]byte("B"), 6000)},
				&kgo.Record{Partition: 0, Key: []byte("big"), Value: bytes.Repeat([]byte("C"), 6000)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	dir := t.TempDir()
	runStream(t, hostileCopyYAML(e, "two-unwritable", dir, ownErrorRoute), 60*time.Second)
	if err := fc.err(); err != nil {
		t.Fatalf("stopped: %v", err)
	}
	checkCopyOf(t, e, n, func(int) bool { return true })
	files, _ := filepath.Glob(filepath.Join(dir, "*.msg"))
	var got []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		got = append(got, string(b[:1]))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"B", "C"}) {
		t.Fatalf("dead letters %v (files %v), want the two too large", got, files)
	}
}
