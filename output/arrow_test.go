package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
)

// edgeRows are records with every distinction Benthos metadata loses: null
// and empty keys, a tombstone and an empty value, duplicate, null and empty
// header values, and a large value. Timestamps are distinct and recent: a
// real broker's retention (7 days by default) deletes records older than that
// while a test reads them.
func edgeRows(topic string, partition int32, n int) []*kgo.Record {
	var out []*kgo.Record
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Timestamp: time.UnixMilli(recentMillis + int64(i))}
		switch i % 7 {
		case 0:
			r.Value = []byte(fmt.Sprintf("null-key-%d", i))
		case 1:
			r.Key, r.Value = []byte{}, []byte(fmt.Sprintf("empty-key-%d", i))
		case 2:
			r.Key = []byte(fmt.Sprintf("tomb-%d", i)) // null value
		case 3:
			r.Key, r.Value = []byte(fmt.Sprintf("empty-%d", i)), []byte{}
		case 4:
			r.Key, r.Value = []byte(fmt.Sprintf("h-%d", i)), []byte("headers")
			r.Headers = []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "n"}, {Key: "e", Value: []byte{}}}
		case 5:
			r.Key, r.Value = []byte(fmt.Sprintf("big-%d", i)), bytes.Repeat([]byte{byte('A' + i%26)}, 300<<10)
		default:
			r.Key, r.Value = []byte(fmt.Sprintf("k-%d", i)), []byte(fmt.Sprintf("v-%d", i))
		}
		out = append(out, r)
	}
	return out
}

// recentMillis is an hour before the test binary started, whole seconds.
var recentMillis = time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()

func arrowMessage(t testing.TB, recs []*kgo.Record) *service.Message {
	t.Helper()
	return handover.MarkArrow(arrowValue(t, recs))
}

// arrowValue is a message whose body is the Arrow IPC stream of recs, as
// anyone who can produce to an input topic can write it, without the mark of
// a kafka_native input.
func arrowValue(t testing.TB, recs []*kgo.Record) *service.Message {
	t.Helper()
	b, err := kafkaarrow.NewEncoder().AppendIPC(nil, recs)
	if err != nil {
		t.Fatal(err)
	}
	return service.NewMessage(b)
}

// A value shaped as an Arrow IPC stream of Kafka records that no kafka_native
// input of the stream wrote (a producer of the input topic did) is one record
// with exactly that value under input_format auto, the default: its rows,
// with the keys, headers and partitions its producer chose, are never
// written. On the original code auto sniffed the body and wrote the rows.
// (Under input_format arrow, the operator's choice, such a body is unpacked:
// TestArrowBadMessagesFailAlone and the copy tests.)
func TestArrowLookingValueIsBytes(t *testing.T) {
	c := newCluster(t)
	rows := []*kgo.Record{
		{Key: []byte("forged-key"), Value: []byte("forged-0"), Partition: 2, Headers: []kgo.RecordHeader{{Key: "forged", Value: []byte("h")}}},
		{Key: []byte("forged-key"), Value: []byte("forged-1"), Partition: 2},
	}
	hostile := arrowValue(t, rows)
	body, _ := hostile.AsBytes()
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "arrowlike", "partitioner: manual\npartition: '0'\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hostile.MetaSetMut("key", "k")
	if err := o.WriteBatch(ctx, service.MessageBatch{hostile}); err != nil {
		t.Fatal(err)
	}
	got := readCommittedRecords(t, c.ListenAddrs(), testTopic, 2500*time.Millisecond, 30*time.Second)
	if len(got) != 1 || !bytes.Equal(got[0].Value, body) || string(got[0].Key) != "k" || got[0].Partition != 0 || len(got[0].Headers) != 0 {
		t.Fatalf("%d records (first %+v), want one record holding the body as its value, key k, partition 0", len(got), got)
	}
}

// input_format arrow is the operator's statement that every body is an Arrow
// IPC stream of Kafka records: a body no kafka_native input marked is
// unpacked all the same, and its rows are written with the keys, headers and
// (partitioner manual) partitions the body holds. So arrow trusts whoever
// wrote the bodies; docs/security.md says so.
func TestArrowFormatTrustsTheBody(t *testing.T) {
	c := newCluster(t)
	rows := []*kgo.Record{
		{Key: []byte("chosen-key"), Value: []byte("row-0"), Partition: 2, Headers: []kgo.RecordHeader{{Key: "chosen", Value: []byte("h")}}},
		{Key: []byte("chosen-key"), Value: []byte("row-1"), Partition: 2},
	}
	unmarked := arrowValue(t, rows)
	o := newTestOutput(t, newResources(), fmt.Sprintf(`
seed_brokers: [ %s ]
topic: %s
transactional_id: arrowtrust
input_format: arrow
partitioner: manual
state_cache: state
`, strings.Join(c.ListenAddrs(), ","), testTopic))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, service.MessageBatch{unmarked}); err != nil {
		t.Fatal(err)
	}
	got := readCommittedRecords(t, c.ListenAddrs(), testTopic, 2500*time.Millisecond, 30*time.Second)
	if len(got) != len(rows) {
		t.Fatalf("%d records, want the body's %d rows", len(got), len(rows))
	}
	for i, r := range got {
		if string(r.Value) != fmt.Sprintf("row-%d", i) || string(r.Key) != "chosen-key" || r.Partition != 2 {
			t.Fatalf("record %d: %q key %q partition %d, want row-%d with the body's key and partition 2", i, r.Value, r.Key, r.Partition, i)
		}
	}
	if len(got[0].Headers) != 1 || got[0].Headers[0].Key != "chosen" {
		t.Fatalf("headers %v, want the body's", got[0].Headers)
	}
}

// sameRecord compares what a copy must keep: key, value (null apart from
// empty), headers (order, duplicates, null values), timestamp.
func sameRecord(want, got *kgo.Record) error {
	switch {
	case (want.Key == nil) != (got.Key == nil) || !bytes.Equal(want.Key, got.Key):
		return fmt.Errorf("key %q (nil %v), want %q (nil %v)", got.Key, got.Key == nil, want.Key, want.Key == nil)
	case (want.Value == nil) != (got.Value == nil) || !bytes.Equal(want.Value, got.Value):
		return fmt.Errorf("value of %d bytes (nil %v), want %d (nil %v)", len(got.Value), got.Value == nil, len(want.Value), want.Value == nil)
	case !want.Timestamp.Equal(got.Timestamp):
		return fmt.Errorf("timestamp %v, want %v", got.Timestamp, want.Timestamp)
	case len(want.Headers) != len(got.Headers):
		return fmt.Errorf("headers %v, want %v", got.Headers, want.Headers)
	}
	for j, h := range want.Headers {
		g := got.Headers[j]
		if h.Key != g.Key || (h.Value == nil) != (g.Value == nil) || !bytes.Equal(h.Value, g.Value) {
			return fmt.Errorf("header %d: %q=%q (nil %v), want %q=%q (nil %v)", j, g.Key, g.Value, g.Value == nil, h.Key, h.Value, h.Value == nil)
		}
	}
	return nil
}

// readRecords reads every committed record of topic (read_committed, to the
// last stable offsets on positions, as readCommitted), by partition in offset
// order.
func readRecords(t testing.TB, brokers []string, topic string) map[int32][]*kgo.Record {
	t.Helper()
	out := map[int32][]*kgo.Record{}
	for _, r := range readCommittedRecords(t, brokers, topic, 2500*time.Millisecond, 60*time.Second) {
		out[r.Partition] = append(out[r.Partition], r)
	}
	return out
}

func TestArrowRowsProduced(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), fmt.Sprintf(`
seed_brokers: [ %s ]
topic: %s
partitioner: manual
partition: '${! meta("p") }'
transactional_id: arrow-rows
arrow_timestamps: true
state_cache: state
epoch: { interval: 20ms }
`, strings.Join(brokers, ","), testTopic))
	rows0, rows2 := edgeRows("src", 0, 14), edgeRows("src", 2, 7)
	plain := service.NewMessage([]byte("plain"))
	plain.MetaSetMut("p", "1")
	// auto: Arrow messages and a plain one in one batch.
	batch := service.MessageBatch{arrowMessage(t, rows0), plain, arrowMessage(t, rows2), arrowMessage(t, nil)}
	if err := o.WriteBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	got := readRecords(t, brokers, testTopic)
	for p, want := range map[int32][]*kgo.Record{0: rows0, 2: rows2} {
		if len(got[p]) != len(want) {
			t.Fatalf("partition %d: %d records, want %d", p, len(got[p]), len(want))
		}
		for i, r := range got[p] {
			if err := sameRecord(want[i], r); err != nil {
				t.Errorf("partition %d record %d: %v", p, i, err)
			}
		}
	}
	if len(got[1]) != 1 || string(got[1][0].Value) != "plain" {
		t.Fatalf("partition 1: %v, want the plain message", got[1])
	}
}

func TestArrowBadMessagesFailAlone(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	good := arrowMessage(t, edgeRows("src", 0, 3))
	body, _ := good.AsBytes()
	for _, tc := range []struct {
		format string
		bad    *service.Message
		want   string
	}{
		// Written by kafka_native (marked), then damaged: an error, not
		// a value.
		{"auto", handover.MarkArrow(service.NewMessage(body[:len(body)-24])), "corrupt"},
		{"arrow", service.NewMessage(body[:len(body)-24]), "corrupt"},
		{"arrow", service.NewMessage([]byte(`{"not":"arrow"}`)), "continuation token"},
		{"arrow", service.NewMessage(nil), "truncated"},
	} {
		tc.bad.MetaSetMut("kafka_topic", "src")
		tc.bad.MetaSetMut("kafka_first_offset", int64(42))
		t.Run(tc.format+"/"+tc.want, func(t *testing.T) {
			o := newTestOutput(t, newResources(), fmt.Sprintf(`
seed_brokers: [ %s ]
topic: %s
transactional_id: arrow-bad-%s
input_format: %s
state_cache: state
`, strings.Join(brokers, ","), testTopic, tc.want, tc.format))
			before := counts(t, brokers)
			batch := service.MessageBatch{good, tc.bad}
			err := o.WriteBatch(context.Background(), batch)
			var be *service.BatchError
			if !errors.As(err, &be) || be.IndexedErrors() != 1 || !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Arrow IPC message") {
				t.Fatalf("%v, want a BatchError for message 1 naming the Arrow message (%s)", err, tc.want)
			}
			if !strings.Contains(err.Error(), "topic src offsets 42..") || !strings.Contains(err.Error(), "field input_format") {
				t.Fatalf("%v: the message's source or the field is not named", err)
			}
			failed := -1
			be.WalkMessages(func(i int, _ *service.Message, err error) bool {
				if err != nil {
					failed = i
				}
				return true
			})
			if failed != 1 {
				t.Fatalf("message %d blamed, want 1", failed)
			}
			// Message 0 is acknowledged: its rows are written, once.
			after := counts(t, brokers)
			for _, r := range edgeRows("src", 0, 3) {
				if after[string(r.Value)]-before[string(r.Value)] != 1 {
					t.Fatalf("row %s of the good message visible %d more times, want 1 (its message is acknowledged)", r.Value, after[string(r.Value)]-before[string(r.Value)])
				}
			}
		})
	}
}

// A row too large fails its Arrow message (not the plain one beside it),
// before anything is produced.
func TestArrowRowTooLarge(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), fmt.Sprintf(`
seed_brokers: [ %s ]
topic: %s
transactional_id: arrow-large
state_cache: state
max_message_bytes: 1024
`, strings.Join(brokers, ","), testTopic))
	big := arrowMessage(t, []*kgo.Record{{Value: []byte("ok")}, {Value: make([]byte, 2000)}})
	batch := service.MessageBatch{service.NewMessage([]byte("plain")), big}
	err := o.WriteBatch(context.Background(), batch)
	var be *service.BatchError
	var re *RecordError
	if !errors.As(err, &be) || be.IndexedErrors() != 1 || !errors.As(err, &re) || !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), "Arrow row 1") {
		t.Fatalf("%v, want a BatchError naming Arrow row 1", err)
	}
	if bl := blamed(batch, err); bl[0] != nil || bl[1] == nil {
		t.Fatalf("blamed %v, want the Arrow message alone", bl)
	}
	// The plain message is acknowledged: written once; no row of the Arrow
	// message is (it is not written in part).
	got := counts(t, c.ListenAddrs())
	if got["plain"] != 1 || got["ok"] != 0 {
		t.Fatalf("visible %v, want the plain message once and no Arrow row", got)
	}
}

func TestArrowLintAndConfig(t *testing.T) {
	base := "kafka_eos:\n  seed_brokers: [ localhost:9092 ]\n  topic: out\n  transactional_id: x\n  state_cache: state\n  "
	for _, tt := range []struct{ conf, want string }{
		{"input_format: arrow", ""},
		{"input_format: arrow\n  partitioner: manual", ""},
		{"input_format: auto\n  partitioner: manual", "field partition: required when partitioner is manual"},
		{"input_format: arrow\n  partitioner: manual\n  partition: '0'", "field partition: not used with input_format arrow"},
		{"input_format: arrow\n  key: k", "field key: not used with input_format arrow"},
		{"input_format: arrow\n  metadata: { include_prefixes: [ a ] }", "field metadata: not used with input_format arrow"},
		{"input_format: message\n  key: k", ""},
	} {
		sb := service.NewStreamBuilder()
		if err := sb.AddCacheYAML("label: state\nmemory: {}"); err != nil {
			t.Fatal(err)
		}
		err := sb.AddOutputYAML(base + tt.conf)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%q: %v", tt.conf, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: %v, want %q", tt.conf, err, tt.want)
		}
		// The same rules hold for a config built in code.
		_, err = configFromParsed(parse(t, "seed_brokers: [ x ]\ntopic: out\ntransactional_id: x\nstate_cache: state\n"+strings.ReplaceAll(tt.conf, "\n  ", "\n")), newResources())
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("config %q: %v", tt.conf, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(strings.SplitN(tt.want, ":", 2)[0], "field "))):
			t.Errorf("config %q: %v, want %q", tt.conf, err, tt.want)
		}
	}
}

// arrowCopyYAML is a bounded kafka_native (format: arrow) -> kafka_eos copy
// that keeps partitions; with k2k the output commits the group's offsets in
// its transactions (exactly-once), otherwise the input commits them.
func arrowCopyYAML(e k2kTopics, txnID string, k2k bool, extraProc string) string {
	return copyStreamYAML(e, txnID, copyOpts{batch: 50, arrow: true, k2k: k2k, proc: extraProc})
}

// fillEdgeInput writes edgeRows to every partition of topic, with an
// aborted and a committed transaction in the middle (markers and aborted
// records the copy must step over), and returns the committed records.
func fillEdgeInput(t testing.TB, brokers []string, topic string, partitions int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(fmt.Sprintf("fill-%s-%d", topic, time.Now().UnixNano())), kgo.TransactionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p := range partitions {
		rows := edgeRows(topic, p, n)
		half := len(rows) / 2
		for _, part := range []struct {
			recs   []*kgo.Record
			commit bool
		}{{rows[:half], true}, {edgeRows(topic, p, 5), false}, {rows[half:], true}} {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, part.recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(part.commit)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkArrowCopy asserts the output holds exactly the committed input
// records, partition by partition in order, identical.
func checkArrowCopy(t testing.TB, e k2kTopics) int {
	t.Helper()
	in := readRecords(t, e.brokers, e.in)
	out := readRecords(t, e.brokers, e.out)
	total := 0
	var ps []int32
	for p := range in {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		want, got := in[p], out[p]
		total += len(want)
		if len(got) != len(want) {
			t.Fatalf("partition %d: %d records copied, want %d", p, len(got), len(want))
		}
		for i := range want {
			if err := sameRecord(want[i], got[i]); err != nil {
				t.Fatalf("partition %d record %d: %v", p, i, err)
			}
		}
	}
	if len(out) > len(in) {
		t.Fatalf("output partitions %d, input %d", len(out), len(in))
	}
	wantLag0(t, e)
	return total
}

// TestArrowCopyRoundTrip: records with null keys, tombstones, empty values,
// headers and large values -> kafka_native format arrow -> kafka_eos ->
// read back identical, with the input's group at lag 0; in plain mode (the
// input commits) and in Kafka-to-Kafka mode (the output commits).
func TestArrowCopyRoundTrip(t *testing.T) {
	for _, k2k := range []bool{false, true} {
		t.Run(fmt.Sprintf("k2k=%v", k2k), func(t *testing.T) {
			c := newK2KCluster(t)
			e := k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}
			fillEdgeInput(t, e.brokers, e.in, 3, 60)
			// In order (one thread, one batch in flight): the copy is
			// compared record by record per partition.
			runStream(t, ordered(arrowCopyYAML(e, "arrow-copy", k2k, "")), 60*time.Second)
			if n := checkArrowCopy(t, e); n != 3*60 {
				t.Fatalf("%d records copied, want %d", n, 3*60)
			}
			// A second run starts at the committed ends: nothing again.
			runStream(t, ordered(arrowCopyYAML(e, "arrow-copy", k2k, "")), 60*time.Second)
			checkArrowCopy(t, e)
		})
	}
}

// TestArrowK2KStopMidCopyAndRestart: Kafka-to-Kafka in Arrow mode, stopped
// mid-copy and restarted on the same group and transactional id: every
// record exactly once.
func TestArrowK2KStopMidCopyAndRestart(t *testing.T) {
	c := newK2KCluster(t)
	arrowStopMidCopyAndRestart(t, k2kTopics{c.ListenAddrs(), k2kIn, testTopic, k2kGroup}, "arrow-restart")
}

func arrowStopMidCopyAndRestart(t *testing.T, e k2kTopics, txnID string) {
	const n = 700 // per partition
	fillInput(t, e.brokers, e.in, 3*n)
	slow := `
    - sleep: { duration: 100ms }`
	s, done := startStream(t, ordered(arrowCopyYAML(e, txnID, true, slow)))
	wait(t, 30*time.Second, "some offsets committed", func() bool {
		return committedSum(t, e.brokers, e.grp, e.in) >= 300
	})
	stopStream(t, s, done)
	sum := committedSum(t, e.brokers, e.grp, e.in)
	if sum >= 3*n {
		t.Fatalf("the first run finished the copy (%d): not a mid-copy stop", sum)
	}
	runStream(t, arrowCopyYAML(e, txnID, true, ""), 60*time.Second)
	checkCopyOf(t, e, 3*n, func(int) bool { return true })
}

// Only a config that keeps row timestamps gives up franz-go's record delivery
// timeout (measured from Record.Timestamp, which an old source timestamp
// would exceed at once); every other config keeps it.
func TestArrowTimestampsAndDeliveryTimeout(t *testing.T) {
	base := "seed_brokers: [ x ]\ntopic: out\ntransactional_id: x\nstate_cache: state\n"
	for conf, want := range map[string]bool{
		"":                         false,
		"arrow_timestamps: true\n": true,
		"input_format: arrow\n":    false,
		"input_format: arrow\narrow_timestamps: true\n":   true,
		"input_format: message\narrow_timestamps: true\n": false,
	} {
		c, err := configFromParsed(parse(t, base+conf), newResources())
		if err != nil {
			t.Fatal(err)
		}
		if c.keepsRowTimestamps() != want {
			t.Errorf("%q: keeps row timestamps %v, want %v", conf, !want, want)
		}
	}
}
