package input

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// holdingOutput holds every batch it is given (unacknowledged) until release
// is closed, counting their messages.
type holdingOutput struct {
	n       atomic.Int64
	release chan struct{}
}

func (h *holdingOutput) Connect(context.Context) error { return nil }

func (h *holdingOutput) WriteBatch(ctx context.Context, b service.MessageBatch) error {
	h.n.Add(int64(len(b)))
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil
}

func (h *holdingOutput) Close(context.Context) error { return nil }

// heapHoldInFlight is the holding output's max_in_flight: more than the
// batches heapHeld's reads make (one per partition fetch, cut at 1024
// records or 1 MiB), so that every record is held at once. Benthos starts a
// goroutine per slot, a few hundred bytes of heap each, which the heap
// measured includes: about 10 bytes per record at 150,000 records.
const heapHoldInFlight = 2048

// heapCase is what heapHeld reads: records of size-byte values, each with
// headers headers of 16-byte values, as messages or Arrow rows.
type heapCase struct {
	size, headers int
	arrow         bool
}

func (c heapCase) String() string {
	format := formatMessage
	if c.arrow {
		format = formatArrow
	}
	return fmt.Sprintf("%s/%dB/headers=%d", format, c.size, c.headers)
}

// heapTopic creates a topic of 3 partitions holding n records of c's shape
// (keys the decimal record number) and returns it with the bytes of the
// records' keys and values.
func heapTopic(tb testing.TB, e *env, c heapCase, n int) (string, int64) {
	tb.Helper()
	topic := e.topic(tb, 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	val := []byte(strings.Repeat("x", c.size))
	var hs []kgo.RecordHeader
	for i := range c.headers {
		hs = append(hs, kgo.RecordHeader{Key: fmt.Sprintf("header-%d", i), Value: []byte(strings.Repeat("h", 16))})
	}
	var kv int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range n {
		key := []byte(fmt.Sprint(i))
		kv += int64(len(key) + len(val))
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: key, Value: val, Headers: hs}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
	return topic, kv
}

// heapHeld reads the n records of topic with a kafka_native input whose
// budgets do not bind into an output that holds them all, unacknowledged,
// and returns what they take on the heap (the heap after a collection, less
// the heap before the stream was built: the Benthos messages, their
// metadata, what the consumer keeps of its fetches, Benthos' transactions)
// and what the input counts for them (kafka_native_buffered_bytes, what
// max_buffered_bytes bounds).
func heapHeld(tb testing.TB, brokers []string, topic string, n int64, arrow bool) (heap, counted int64) {
	tb.Helper()
	capture := &captureMetrics{vals: map[string]int64{}}
	senv := service.NewEnvironment()
	h := &holdingOutput{release: make(chan struct{})}
	if err := senv.RegisterBatchOutput("holding", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return h, service.BatchPolicy{}, heapHoldInFlight, nil
	}); err != nil {
		tb.Fatal(err)
	}
	if err := senv.RegisterMetricsExporter("capture", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Logger) (service.MetricsExporter, error) { return capture, nil }); err != nil {
		tb.Fatal(err)
	}
	format := formatMessage
	if arrow {
		format = formatArrow
	}
	sb := senv.NewStreamBuilder()
	if err := sb.SetYAML(fmt.Sprintf(`
input:
  kafka_native:
    seed_brokers: [ %s ]
    topics: [ %s ]
    format: %s
    max_buffered_bytes: 4GiB
    max_buffered_bytes_per_partition: 4GiB
output:
  holding: {}
metrics:
  capture: {}
logger: { level: WARN }
`, strings.Join(brokers, ","), topic, format)); err != nil {
		tb.Fatal(err)
	}
	s, err := sb.Build()
	if err != nil {
		tb.Fatal(err)
	}
	var before, after runtime.MemStats
	settledHeap(&before)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	// Every record held, and the gauge set after the last of them was
	// handed over (the input sets it before each poll, at least every
	// pollTimeout): the same value across two polls.
	const key = "kafka_native_buffered_bytes{,root.input}"
	prev := int64(-1)
	for {
		select {
		case <-ctx.Done():
			tb.Fatalf("%d of %d records held, %s %d", h.n.Load(), n, key, prev)
		case <-time.After(2 * pollTimeout):
		}
		held := h.n.Load()
		if arrow {
			// The output sees one message per Arrow batch.
			held = -1
		}
		v, _ := capture.get(key)
		if v > 0 && v == prev && (held == n || arrow && allRead(capture, topic, n)) {
			counted = v
			break
		}
		prev = v
	}
	settledHeap(&after)
	if f := os.Getenv("HEAPPROF"); f != "" {
		writeHeapProfile(tb, f)
	}
	close(h.release)
	if err := s.StopWithin(30 * time.Second); err != nil {
		tb.Fatal(err)
	}
	<-done
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), counted
}

// allRead reports whether the input's positions (kafka_native_position) of
// topic's 3 partitions add up to n.
func allRead(capture *captureMetrics, topic string, n int64) bool {
	var sum int64
	for p := range 3 {
		v, _ := capture.get(fmt.Sprintf("kafka_native_position{,root.input,%s,%d}", topic, p))
		sum += v
	}
	return sum == n
}

// BenchmarkHeapPerRecord measures what a record handed to the pipeline and not
// yet acknowledged takes on the heap, against what the input counts for it
// (max_buffered_bytes, kafka_native_buffered_bytes): 150,000 records read
// from kfake by a kafka_native input whose budgets do not bind, held by an
// output that acknowledges nothing, the heap compared after a collection
// before and after. It reports heap-B/record, counted-B/record and their
// ratio heap/counted, and beside the keys and values overhead-B/record, in
// message and Arrow format, with 100-byte and 1 KiB values, without headers
// and with 4. Run it with -benchtime 1x (each iteration holds the same
// records again); HEAPPROF=<file> writes a heap profile while they are held.
// On kfake the broker runs in the process, and what it keeps of the fetches
// it served counts too; with KAFKA_BROKERS set (host:port, comma separated)
// it reads from that broker instead.
func BenchmarkHeapPerRecord(b *testing.B) {
	const records = 150000
	for _, size := range []int{100, 1024} {
		for _, headers := range []int{0, 4} {
			for _, arrow := range []bool{false, true} {
				c := heapCase{size: size, headers: headers, arrow: arrow}
				b.Run(c.String(), func(b *testing.B) {
					e := heapBenchEnv(b)
					topic, kv := heapTopic(b, e, c, records)
					for b.Loop() {
						heap, counted := heapHeld(b, e.brokers, topic, records, arrow)
						b.ReportMetric(float64(heap)/records, "heap-B/record")
						b.ReportMetric(float64(counted)/records, "counted-B/record")
						b.ReportMetric(float64(heap)/float64(counted), "heap/counted")
						b.ReportMetric(float64(heap-kv)/records, "overhead-B/record")
					}
				})
			}
		}
	}
}

// heapBenchEnv is the broker at KAFKA_BROKERS, or kfake.
func heapBenchEnv(b *testing.B) *env {
	if v := os.Getenv("KAFKA_BROKERS"); v != "" {
		return newEnv(b, "kafka", strings.Split(v, ","))
	}
	return newKfakeEnv(b)
}

func writeHeapProfile(tb testing.TB, file string) {
	w, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Close()
	if err := pprof.Lookup("heap").WriteTo(w, 0); err != nil {
		tb.Fatal(err)
	}
}

// TestBufferedBytesTrackHeap: what the input counts for the records it handed
// to the pipeline and had not had acknowledged (max_buffered_bytes,
// kafka_native_buffered_bytes) is what they take on the heap, within a factor
// of 1.5 either way, in message and Arrow format, with and without headers:
// records held by an output that acknowledges nothing, the heap compared
// after a collection (heapHeld). Heap sizes after a collection do not depend
// on the machine's load.
func TestBufferedBytesTrackHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("holds tens of MiB of records")
	}
	const records = 40000
	for _, c := range []heapCase{
		{size: 100, headers: 0},
		{size: 100, headers: 4},
		{size: 1024, headers: 0},
		{size: 1024, headers: 0, arrow: true},
		{size: 100, headers: 4, arrow: true},
	} {
		t.Run(c.String(), func(t *testing.T) {
			e := newKfakeEnv(t)
			topic, _ := heapTopic(t, e, c, records)
			heap, counted := heapHeld(t, e.brokers, topic, records, c.arrow)
			ratio := float64(heap) / float64(counted)
			t.Logf("%d records held: heap %d bytes (%d per record), counted %d (%d per record), heap/counted %.2f", records, heap, heap/records, counted, counted/records, ratio)
			if ratio < 1/1.5 || ratio > 1.5 {
				t.Errorf("the input counts %d bytes for %d records that take %d on the heap (heap/counted %.2f, want within 1.5x)", counted, records, heap, ratio)
			}
		})
	}
}

// settledHeap reads the memory statistics after collections that leave only
// live data: two, since a sync.Pool's contents (the clients' and kfake's
// buffers) survive the first in its victim cache.
func settledHeap(m *runtime.MemStats) {
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(m)
}

// countingOutput acknowledges every batch, counting its messages.
type countingOutput struct{ n atomic.Int64 }

func (c *countingOutput) Connect(context.Context) error { return nil }

func (c *countingOutput) WriteBatch(_ context.Context, b service.MessageBatch) error {
	c.n.Add(int64(len(b)))
	return nil
}

func (c *countingOutput) Close(context.Context) error { return nil }

// streamMallocs reads topic to its end with a kafka_native input (message
// format, as the plugin registers it: behind the replay list) in a Benthos
// stream into an output that acknowledges every batch, and returns the heap
// allocations of the whole process meanwhile (runtime.MemStats.Mallocs: the
// stream's, the consumer's and kfake's) and the messages read.
func streamMallocs(tb testing.TB, brokers []string, topic string) (mallocs uint64, msgs int64) {
	tb.Helper()
	senv := service.NewEnvironment()
	out := &countingOutput{}
	if err := senv.RegisterBatchOutput("counting", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return out, service.BatchPolicy{}, 1, nil
	}); err != nil {
		tb.Fatal(err)
	}
	sb := senv.NewStreamBuilder()
	if err := sb.SetYAML(fmt.Sprintf(`
input:
  kafka_native:
    seed_brokers: [ %s ]
    topics: [ %s ]
    stop_offset: latest
output:
  counting: {}
logger: { level: WARN }
`, strings.Join(brokers, ","), topic)); err != nil {
		tb.Fatal(err)
	}
	s, err := sb.Build()
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := s.Run(ctx); err != nil {
		tb.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, out.n.Load()
}

// maxMallocsPerRecord bounds the heap allocations a record read in message
// format costs the whole process on kfake, measured by
// TestMessageAllocsPerRecord. Of the 15 it costs (100-byte values, short keys, no
// header): Benthos' message and its metadata map 5, its tracing spans at the
// input and the output 5, the output's message wrapper 1; the replay list's
// copy and tag of the message 4; kfake and the consumer about 0.01. A record's
// key, offset and timestamps as metadata cost nothing per record (boxed a
// chunk of records at a time).
const maxMallocsPerRecord = 15.5

// TestMessageAllocsPerRecord: the allocations per record of a kafka_native
// input in message format stay at what they were measured, so that an
// allocation more per record (a value boxed, a copy, a closure) does not come
// back unnoticed. The count is the whole process's over a stream reading a
// topic of n records and one of 2n: their difference over n leaves out what a
// stream costs whatever it reads (building it, connecting). Allocation counts
// do not depend on the machine's load.
func TestMessageAllocsPerRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 60,000 records")
	}
	const n = 20000
	e := newKfakeEnv(t)
	c := heapCase{size: 100}
	small, _ := heapTopic(t, e, c, n)
	large, _ := heapTopic(t, e, c, 2*n)
	m1, got1 := streamMallocs(t, e.brokers, small)
	m2, got2 := streamMallocs(t, e.brokers, large)
	if got1 != n || got2 != 2*n {
		t.Fatalf("read %d and %d records, want %d and %d", got1, got2, n, 2*n)
	}
	per := (float64(m2) - float64(m1)) / n
	t.Logf("%.2f allocations per record (%d for %d records, %d for %d)", per, m1, n, m2, 2*n)
	if per > maxMallocsPerRecord {
		t.Errorf("a record read costs %.2f allocations, want at most %.1f", per, maxMallocsPerRecord)
	}
}
