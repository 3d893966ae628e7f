package output

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/internal/promexport"
)

// metricSum is the sum over the series of the gauge or counter name in exp
// (0 if none).
func metricSum(t testing.TB, exp *promexport.Exporter, name string) int64 {
	t.Helper()
	mfs, err := exp.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += int64(m.GetGauge().GetValue() + m.GetCounter().GetValue())
			}
		}
	}
	return v
}

// heldByCopy reads the n records of topic in of cluster c with a kafka_native
// input whose budgets do not bind into a kafka_eos output whose commits c
// holds (every EndTxn that commits waits until the test ends): the first
// epoch commits at once and waits, and the second takes every other batch
// (30s epochs, max_in_flight above the batches), so that the output holds
// every record, produced and not acknowledged, and returns what they take on the heap (after collections,
// less the heap before the stream was built) and what the input counts for
// them (kafka_native_buffered_bytes).
func heldByCopy(t *testing.T, c *kfake.Cluster, in string, n int64, arrow bool) (heap, counted int64) {
	t.Helper()
	brokers := c.ListenAddrs()
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req.(*kmsg.EndTxnRequest).Commit {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	exp := promexport.New()
	env := service.GlobalEnvironment().Clone()
	if err := env.RegisterMetricsExporter("budget_capture", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Logger) (service.MetricsExporter, error) { return exp, nil }); err != nil {
		t.Fatal(err)
	}
	inFormat, outFormat := "message", "\n    key: ${! metadata(\"kafka_key\") }\n    partition: ${! metadata(\"kafka_partition\") }"
	if arrow {
		inFormat, outFormat = "arrow", "\n    input_format: arrow"
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetYAML(fmt.Sprintf(`
logger: { level: warn }
metrics:
  budget_capture: {}
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[2]s ]
    format: %[3]s
    max_buffered_bytes: 4GiB
    max_buffered_bytes_per_partition: 4GiB
output:
  kafka_eos:
    seed_brokers: [ %[1]s ]
    topic: %[4]s
    partitioner: manual%[5]s
    transactional_id: budget-%[6]d
    state_cache: state
    epoch: { interval: 30s, max_records: 0, max_bytes: 0 }
    commit_timeout: 60s
    transaction_timeout: 300s
    max_in_flight: 1024
cache_resources:
  - label: state
    memory: {}
`, strings.Join(brokers, ","), in, inFormat, testTopic, outFormat, time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	s, err := sb.Build()
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	time.Sleep(2 * time.Second) // what an earlier subtest's cluster and stream leave is let go
	settleHeap(&before)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = s.Run(ctx) }()
	// Every record produced into the open epoch (kafka_eos_buffered_bytes
	// is what franz-go holds; records produced counts them) and the input's
	// gauge the same across two of its polls.
	prev := int64(-1)
	for {
		select {
		case <-done:
			t.Fatalf("the stream stopped before it held the records: %v", runErr)
		case <-ctx.Done():
			mfs, _ := exp.Registry().Gather()
			var names []string
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					names = append(names, fmt.Sprintf("%s=%v%v", mf.GetName(), m.GetCounter().GetValue(), m.GetGauge().GetValue()))
				}
			}
			t.Fatalf("kafka_native_buffered_bytes %d; %d of %d records produced; %v", prev, metricSum(t, exp, metricRecordsProduced), n, names)
		case <-time.After(time.Second):
		}
		v := metricSum(t, exp, "kafka_native_buffered_bytes")
		if v > 0 && v == prev && metricSum(t, exp, metricRecordsProduced) == n {
			counted = v
			break
		}
		prev = v
	}
	settleHeap(&after)
	// The commits go through, and the stream stops once they did: nothing
	// of it outlives the test (a commit left in doubt would stop the
	// process's later streams).
	unblock()
	if err := s.StopWithin(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	<-done
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), counted
}

// settleHeap reads the memory statistics once collections leave only live
// data: at least two (a sync.Pool's contents survive the first in its victim
// cache), and more while the heap still shrinks by more than 1 MiB (what an
// earlier subtest's stream and cluster leave behind is let go over a few
// milliseconds after they stopped).
func settleHeap(m *runtime.MemStats) {
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(m)
	for range 20 {
		time.Sleep(50 * time.Millisecond)
		prev := m.HeapAlloc
		runtime.GC()
		runtime.ReadMemStats(m)
		if prev < m.HeapAlloc+1<<20 {
			return
		}
	}
}

// TestInputBudgetBoundsOutputRecords: in a kafka_native -> kafka_eos pipeline
// the input's count (max_buffered_bytes, kafka_native_buffered_bytes)
// includes what kafka_eos keeps for the records it holds (their kgo.Records,
// through handover.Holder), so that the budget bounds the heap of the two
// together: records held in an open epoch take what the input counts, within
// 15 % either way, in message and Arrow format, at 100-byte and 1 KiB values.
// Without the output's share the input counts 1,100 bytes for a 100-byte
// message that takes about 1,400 (heap/counted 1.27).
func TestInputBudgetBoundsOutputRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("holds tens of MiB of records")
	}
	const records = 40000
	for _, c := range []struct {
		size  int
		arrow bool
	}{{100, true}, {100, false}, {1024, false}} {
		t.Run(fmt.Sprintf("size=%d/arrow=%v", c.size, c.arrow), func(t *testing.T) {
			cl := newK2KCluster(t)
			fillSized(t, cl.ListenAddrs(), k2kIn, records, c.size)
			heap, counted := heldByCopy(t, cl, k2kIn, records, c.arrow)
			ratio := float64(heap) / float64(counted)
			t.Logf("%d records held: heap %d bytes (%d per record), counted %d (%d per record), heap/counted %.2f", records, heap, heap/records, counted, counted/records, ratio)
			if ratio < 1/1.15 || ratio > 1.15 {
				t.Errorf("the input counts %d bytes for %d records that take %d on the heap through kafka_eos (heap/counted %.2f, want within 15%%)", counted, records, heap, ratio)
			}
		})
	}
}

// fillSized writes n records of size-byte values, keyed by their number, to
// topic's 3 partitions in turn.
func fillSized(t testing.TB, brokers []string, topic string, n, size int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := []byte(strings.Repeat("v", size))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 3), Key: []byte(fmt.Sprint(i)), Value: val}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// holdInInput adds each record's share to the Holder of the batch its
// message came from (two input batches in one write here, and a message of
// no input), and the function it returns takes exactly that back.
func TestHoldInInputPerBatch(t *testing.T) {
	ctxA, slotA := handover.WithSpanSlot(context.Background())
	ctxB, slotB := handover.WithSpanSlot(context.Background())
	var a, b int64
	slotA.SetHolder(func(n int64) { a += n })
	slotB.SetHolder(func(n int64) { b += n })
	batch := service.MessageBatch{
		service.NewMessageWithContext(ctxA, []byte("1")),
		service.NewMessageWithContext(ctxA, []byte("2")),
		service.NewMessageWithContext(ctxB, []byte("3")),
		service.NewMessage([]byte("4")),
		service.NewMessageWithContext(ctxA, []byte("5")),
	}
	w := &write{batch: batch, msgOf: []int{0, 1, 2, 3, 4}}
	for range batch {
		w.recs = append(w.recs, &kgo.Record{Key: []byte("kk"), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}})
	}
	undo := holdInInput(w)
	per := int64(recordHeap + 2 + headerHeap + 2)
	if a != 3*per || b != per {
		t.Fatalf("held %d and %d, want %d and %d", a, b, 3*per, per)
	}
	undo()
	if a != 0 || b != 0 {
		t.Fatalf("after undo %d and %d held, want 0", a, b)
	}
}
