package input

import (
	"context"
	"fmt"
	"os"
	"runtime"
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

// BenchmarkHeapPerRecord measures what a record handed to the pipeline and not
// yet acknowledged takes on the heap (the Benthos message, its metadata, the
// consumer's record, the value): 150,000 records of 100 bytes or 1 KiB read
// from kfake by a kafka_native input whose budgets do not bind, held by an
// output that acknowledges nothing, the heap compared after a collection
// before and after. It reports heap-B/record and, beside the key and value,
// overhead-B/record: what the input's max_buffered_bytes counts as 512.
// Run it with -benchtime 1x (each iteration holds the same records again).
// On kfake the broker runs in the process, and what it keeps of the fetches
// it served counts too; with KAFKA_BROKERS set (host:port, comma separated)
// it reads from that broker instead.
func BenchmarkHeapPerRecord(b *testing.B) {
	const records = 150000
	for _, size := range []int{100, 1024} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			e := heapBenchEnv(b)
			topic := e.topic(b, 3)
			cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
			if err != nil {
				b.Fatal(err)
			}
			val := []byte(strings.Repeat("x", size))
			var keyBytes int64
			var wg sync.WaitGroup
			for i := range records {
				key := []byte(fmt.Sprint(i))
				keyBytes += int64(len(key))
				wg.Add(1)
				cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: key, Value: val}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
					wg.Done()
				})
			}
			wg.Wait()
			cl.Close()
			for b.Loop() {
				perRecord := heapPerRecord(b, e.brokers, topic, records)
				b.ReportMetric(perRecord, "heap-B/record")
				b.ReportMetric(perRecord-float64(size)-float64(keyBytes)/records, "overhead-B/record")
			}
		})
	}
}

// heapBenchEnv is the broker at KAFKA_BROKERS, or kfake.
func heapBenchEnv(b *testing.B) *env {
	if v := os.Getenv("KAFKA_BROKERS"); v != "" {
		return newEnv(b, "kafka", strings.Split(v, ","))
	}
	return newKfakeEnv(b)
}

// heapPerRecord reads n records of topic with a kafka_native input into an
// output that holds them all, and returns the heap they take per record.
func heapPerRecord(b *testing.B, brokers []string, topic string, n int64) float64 {
	senv := service.NewEnvironment()
	h := &holdingOutput{release: make(chan struct{})}
	if err := senv.RegisterBatchOutput("holding", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return h, service.BatchPolicy{}, 1 << 20, nil
	}); err != nil {
		b.Fatal(err)
	}
	sb := senv.NewStreamBuilder()
	if err := sb.SetYAML(fmt.Sprintf(`
input:
  kafka_native:
    seed_brokers: [ %s ]
    topics: [ %s ]
    max_buffered_bytes: 4GiB
    max_buffered_bytes_per_partition: 4GiB
output:
  holding: {}
logger: { level: WARN }
`, strings.Join(brokers, ","), topic)); err != nil {
		b.Fatal(err)
	}
	s, err := sb.Build()
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	for h.n.Load() < n {
		select {
		case <-ctx.Done():
			b.Fatalf("%d of %d records held", h.n.Load(), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := h.n.Load()
	close(h.release)
	if err := s.StopWithin(30 * time.Second); err != nil {
		b.Fatal(err)
	}
	<-done
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(held)
}
