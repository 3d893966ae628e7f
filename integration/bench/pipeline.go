package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/promexport"
	// The project's components (kafka_eos, kafka_native, kafka_state).
	_ "github.com/connect-eos/connect-eos/plugin"
)

// payload is the value of every record: size random upper-case letters, made
// once, as ProducerPerformance does without a payload file.
func payload(size int) []byte {
	p := make([]byte, size)
	var x uint32 = 2463534242
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = 'A' + byte(x%26)
	}
	return p
}

// clock is what the bench input and sink share with the child: when the
// measured part started and ended, and how many records it covered.
type clock struct {
	mu      sync.Mutex
	start   time.Time
	end     time.Time
	records int64
	// Heap allocations (objects, the whole process) at start and end, for
	// the allocations per record of the consume and copy rows.
	allocStart, allocEnd uint64
	// began and first (records of the first batch) let a consume run whose
	// records all came in one batch be timed from the stream's start
	// (tiny runs: the benchmarks' first b.N=1 round).
	began time.Time
	first int64
}

// heapAllocs is the number of heap objects allocated so far by this process
// (runtime/metrics, cheap enough to read per batch: no stop-the-world as
// runtime.ReadMemStats).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// recordsIn is the number of Kafka records a message stands for: the rows of
// an Arrow message of kafka_native (format: arrow), otherwise 1.
func recordsIn(m *service.Message) int64 {
	if v, ok := m.MetaGetMut("kafka_record_count"); ok {
		if n, ok := v.(int64); ok {
			return n
		}
	}
	return 1
}

func (c *clock) span() (time.Duration, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.records == 0 && c.first > 0 && !c.began.IsZero() {
		return c.start.Sub(c.began), c.first
	}
	return c.end.Sub(c.start), c.records
}

// benchSource is the pipelines' input: like `generate` with a constant
// payload, at no cost per record beyond service.NewMessage. It first emits one
// warm-up batch of one record and waits for its ack, so the clock starts once
// the output is connected (producers initialised, state cache read) and one
// epoch went round; then it emits count records in batches of batch, and the
// clock stops when the last of them is acknowledged (for kafka_eos: when its
// epoch committed).
type benchSource struct {
	count, batch int
	value        []byte
	fresh        bool // a copy of value per message
	clk          *clock

	warmed   chan struct{}
	emitted  int
	warmSent bool
	acked    atomic.Int64
}

func benchSourceSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Fields(service.NewIntField("count"), service.NewIntField("size"), service.NewIntField("batch"),
			service.NewBoolField("fresh").Default(false))
}

func newBenchSource(conf *service.ParsedConfig, clk *clock) (*benchSource, error) {
	count, err := conf.FieldInt("count")
	if err != nil {
		return nil, err
	}
	size, err := conf.FieldInt("size")
	if err != nil {
		return nil, err
	}
	batch, err := conf.FieldInt("batch")
	if err != nil {
		return nil, err
	}
	fresh, err := conf.FieldBool("fresh")
	if err != nil {
		return nil, err
	}
	return &benchSource{count: count, batch: batch, value: payload(size), fresh: fresh, clk: clk, warmed: make(chan struct{})}, nil
}

func (s *benchSource) Connect(context.Context) error { return nil }

func (s *benchSource) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if !s.warmSent {
		s.warmSent = true
		return service.MessageBatch{service.NewMessage(s.value)}, func(_ context.Context, err error) error {
			if err == nil {
				close(s.warmed)
			}
			return nil
		}, nil
	}
	if s.emitted == 0 {
		select {
		case <-s.warmed:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		s.clk.mu.Lock()
		s.clk.start = time.Now()
		s.clk.mu.Unlock()
	}
	if s.emitted >= s.count {
		return nil, nil, service.ErrEndOfInput
	}
	n := min(s.batch, s.count-s.emitted)
	s.emitted += n
	b := make(service.MessageBatch, n)
	for i := range b {
		if s.fresh {
			b[i] = service.NewMessage(append([]byte(nil), s.value...))
		} else {
			b[i] = service.NewMessage(s.value)
		}
	}
	total := int64(s.count)
	return b, func(_ context.Context, err error) error {
		if err != nil {
			// The batch is replayed by Benthos; nothing counted.
			return nil
		}
		if s.acked.Add(int64(n)) == total {
			s.clk.mu.Lock()
			s.clk.end = time.Now()
			s.clk.records = total
			s.clk.mu.Unlock()
		}
		return nil
	}, nil
}

func (s *benchSource) Close(context.Context) error { return nil }

// benchSink is the consume rows' output: it counts records and stamps the
// first and the last write. The rate is taken from the end of the first batch
// to the end of the last one, over the records after the first batch, so the
// start-up of the input (admin requests, first fetch) is not in it.
type benchSink struct {
	clk   *clock
	first bool
	total int64
	mu    sync.Mutex
}

func (s *benchSink) Connect(context.Context) error { return nil }

func (s *benchSink) WriteBatch(_ context.Context, b service.MessageBatch) error {
	now := time.Now()
	var n int64
	for _, m := range b {
		n += recordsIn(m)
	}
	allocs := heapAllocs()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total += n
	if !s.first {
		s.first = true
		s.clk.mu.Lock()
		s.clk.start = now
		s.clk.allocStart = allocs
		s.clk.first = n
		s.clk.mu.Unlock()
		return nil
	}
	s.clk.mu.Lock()
	s.clk.end = now
	s.clk.allocEnd = allocs
	s.clk.records += n
	s.clk.mu.Unlock()
	return nil
}

// benchClock is the copy rows' processor: it stamps the first message
// through the pipeline (in Kafka-to-Kafka mode the input reads only once the
// output recovered, so the output is ready by then) and counts records; the
// clock stops when the stream ends, that is once every record was copied and
// its epoch committed with the group's offsets.
type benchClock struct {
	clk *clock
}

func (p *benchClock) ProcessBatch(_ context.Context, b service.MessageBatch) ([]service.MessageBatch, error) {
	var n int64
	for _, m := range b {
		n += recordsIn(m)
	}
	p.clk.mu.Lock()
	if p.clk.start.IsZero() {
		p.clk.start = time.Now()
		p.clk.allocStart = heapAllocs()
	}
	p.clk.records += n
	p.clk.mu.Unlock()
	return []service.MessageBatch{b}, nil
}

func (p *benchClock) Close(context.Context) error { return nil }

func (s *benchSink) Close(context.Context) error { return nil }

// pipelineYAML is the stream config of one pipeline contender.
func pipelineYAML(kind string, o options) (string, error) {
	src := fmt.Sprintf("input:\n  bench_source: { count: %d, size: %d, batch: %d, fresh: %t }\n", o.records, o.size, o.batch, o.fresh)
	inFlight := ""
	if o.maxInFlight > 0 {
		inFlight = fmt.Sprintf("    max_in_flight: %d\n", o.maxInFlight)
	}
	logger := "logger:\n  level: WARN\n"
	switch kind {
	case "eos":
		return src + fmt.Sprintf(`output:
  kafka_eos:
    seed_brokers: [ %q ]
    topic: %q
    transactional_id: %q
    state_cache: eos_state
    # Epochs close on the interval only, as ProducerPerformance's
    # --transaction-duration-ms does (the record and byte caps are off;
    # max_in_flight, default 64 batches, still closes an epoch early).
    epoch: { interval: %s, max_records: 0, max_bytes: 0 }
%scache_resources:
  - label: eos_state
    kafka_state:
      seed_brokers: [ %q ]
      topic: bench_eos_state
`, o.brokers, o.topic, "bench-"+o.topic, o.interval, inFlight, o.brokers) + logger, nil
	case "plain":
		return src + fmt.Sprintf(`output:
  bench_plain:
    seed_brokers: %q
    topic: %q
    max_in_flight: %d
`, o.brokers, o.topic, plainInFlight(o.maxInFlight)) + logger, nil
	case "native", "native_arrow":
		format := "message"
		if kind == "native_arrow" {
			format = "arrow"
		}
		return fmt.Sprintf(`input:
  kafka_native:
    seed_brokers: [ %q ]
    topics: [ %q ]
    isolation_level: read_committed
    start_offset: earliest
    stop_offset: latest
    format: %s
output:
  bench_sink: {}
`, o.brokers, o.topic, format) + logger, nil
	case "copy_message", "copy_arrow":
		// The exactly-once copy (Kafka-to-Kafka mode) of the consume
		// topic to a fresh topic, partitions kept, per message or as
		// Arrow batches; the same input and epoch settings otherwise.
		format, out := "message", `    partition: '${! meta("kafka_partition") }'
    key: '${! meta("kafka_key") }'`
		if kind == "copy_arrow" {
			format, out = "arrow", "    input_format: arrow"
		}
		group := "bench-copy-" + o.copyTopic
		return fmt.Sprintf(`input:
  kafka_native:
    seed_brokers: [ %[1]q ]
    topics: [ %[2]q ]
    consumer_group: %[3]q
    isolation_level: read_committed
    start_offset: committed
    reset_offset: earliest
    stop_offset: latest
    format: %[4]s
pipeline:
  # One thread: batches reach the output in offset order, so none waits
  # for its predecessor (Kafka-to-Kafka admission); max_in_flight stays
  # at its default, 64.
  threads: 1
  processors:
    - bench_clock: {}
output:
  kafka_eos:
    seed_brokers: [ %[1]q ]
    topic: %[5]q
    partitioner: manual
%[6]s
    transactional_id: %[3]q
    consumer_group: %[3]q
    state_cache: eos_state
    epoch: { interval: %[7]s, max_records: 0, max_bytes: 0 }
cache_resources:
  - label: eos_state
    kafka_state:
      seed_brokers: [ %[1]q ]
      topic: bench_eos_state
`, o.brokers, o.topic, group, format, o.copyTopic, out, o.interval) + logger, nil
	}
	return "", fmt.Errorf("unknown pipeline %q", kind)
}

// runPipeline runs one pipeline contender in this process through a
// StreamBuilder on a cloned environment that holds the bench components and a
// metrics exporter this function reads from.
func runPipeline(ctx context.Context, kind string, o options) (result, error) {
	clk := &clock{}
	if strings.HasPrefix(kind, "native") {
		clk.began = time.Now()
	}
	exp := promexport.New()
	env := service.GlobalEnvironment().Clone()
	if err := env.RegisterMetricsExporter("bench_capture", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Logger) (service.MetricsExporter, error) {
		return exp, nil
	}); err != nil {
		return result{}, err
	}
	if err := env.RegisterBatchInput("bench_source", benchSourceSpec(), func(conf *service.ParsedConfig, _ *service.Resources) (service.BatchInput, error) {
		return newBenchSource(conf, clk)
	}); err != nil {
		return result{}, err
	}
	if err := env.RegisterBatchOutput("bench_sink", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return &benchSink{clk: clk}, service.BatchPolicy{}, 1, nil
	}); err != nil {
		return result{}, err
	}
	if err := registerPlain(env, o); err != nil {
		return result{}, err
	}
	if err := env.RegisterBatchProcessor("bench_clock", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchProcessor, error) {
		return &benchClock{clk: clk}, nil
	}); err != nil {
		return result{}, err
	}

	yaml, err := pipelineYAML(kind, o)
	if err != nil {
		return result{}, err
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetYAML(yaml); err != nil {
		return result{}, err
	}
	if err := sb.SetMetricsYAML("bench_capture: {}"); err != nil {
		return result{}, err
	}
	stream, err := sb.Build()
	if err != nil {
		return result{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var smp *sampler
	if o.sample {
		smp = startSampler(exp)
	}
	runErr := stream.Run(runCtx)
	if smp != nil {
		smp.stop()
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return result{}, fmt.Errorf("stream: %w", runErr)
	}
	if strings.HasPrefix(kind, "copy_") {
		clk.mu.Lock()
		clk.end = time.Now()
		clk.allocEnd = heapAllocs()
		clk.mu.Unlock()
	}
	d, n := clk.span()
	if n == 0 || d <= 0 {
		return result{}, fmt.Errorf("the stream ended before the measured records were acknowledged")
	}
	r := result{Records: n, Bytes: n * int64(o.size), Seconds: d.Seconds()}
	if kind != "eos" && kind != "plain" {
		r.Bytes = 0 // filled in by the parent, which knows the record size
	}
	clk.mu.Lock()
	if clk.allocEnd > clk.allocStart && n > 0 {
		r.AllocsPerRecord = float64(clk.allocEnd-clk.allocStart) / float64(n)
	}
	clk.mu.Unlock()
	readOutputMetrics(exp, &r)
	if smp != nil {
		r.BufferedPeak, r.RSSSampled = smp.buffered.Load(), smp.rss.Load()
	}
	return r, nil
}

// sampler records, every 20 ms, the highest kafka_eos_buffered_bytes (the
// bytes franz-go holds against max_buffered_bytes, set by the output after
// every batch) and the highest VmRSS: the saturation row shows with them that
// the byte budget was reached, and how the peak RSS relates to it.
type sampler struct {
	buffered, rss atomic.Int64
	done          chan struct{}
	stopped       sync.WaitGroup
}

func startSampler(exp *promexport.Exporter) *sampler {
	s := &sampler{done: make(chan struct{})}
	s.stopped.Add(1)
	go func() {
		defer s.stopped.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v := vmRSS(); v > s.rss.Load() {
				s.rss.Store(v)
			}
			if mfs, err := exp.Registry().Gather(); err == nil {
				for _, mf := range mfs {
					if mf.GetName() != "kafka_eos_buffered_bytes" {
						continue
					}
					for _, m := range mf.GetMetric() {
						if v := int64(m.GetGauge().GetValue()); v > s.buffered.Load() {
							s.buffered.Store(v)
						}
					}
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() {
	close(s.done)
	s.stopped.Wait()
}

// readOutputMetrics copies the kafka_eos metrics (output/metrics.go) from the
// exporter's registry: epochs committed and the commit latency and boundary
// stall summaries (0.5 and 0.99 quantiles, seconds).
func readOutputMetrics(exp *promexport.Exporter, r *result) {
	mfs, err := exp.Registry().Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			switch {
			case name == "kafka_eos_epochs_committed" && m.GetCounter() != nil:
				r.Epochs += int64(m.GetCounter().GetValue())
			case strings.HasPrefix(name, "kafka_eos_epoch_commit_latency") && m.GetSummary() != nil:
				r.CommitP50, r.CommitP99 = quantiles(m.GetSummary().GetQuantile())
			case strings.HasPrefix(name, "kafka_eos_epoch_boundary_stall") && m.GetSummary() != nil:
				r.StallP50, r.StallP99 = quantiles(m.GetSummary().GetQuantile())
			}
		}
	}
}
