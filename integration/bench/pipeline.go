package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/memlimit"
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

// clock is what the bench input, sink and copy processor share with the
// child: when the measured span started and ended, how many records it
// covered, and the records the process handled in all.
type clock struct {
	mu      sync.Mutex
	start   time.Time
	end     time.Time
	records int64 // in the measured span
	total   int64 // handled in all (warm-up included), for CPU per record
	// Heap allocations (objects, the whole process) at start and end.
	allocStart, allocEnd uint64
	// onMark runs once when the measured span starts (kafka_eos: the
	// epochs committed so far, to count the span's epochs).
	onMark func()

	// Produce rows: records emitted in the measured span, acknowledged
	// so far, and whether the input has ended.
	emitted, acked int64
	inputEnded     bool

	// Consume rows: what the sink received per partition, and whether
	// the input reached the end of the topic.
	reads partReads
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

func metaInt(m *service.Message, key string) (int64, bool) {
	v, ok := m.MetaGetMut(key)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	return n, ok
}

// mark starts the measured span now.
func (c *clock) mark(now time.Time) {
	c.mu.Lock()
	c.start = now
	c.allocStart = heapAllocs()
	f := c.onMark
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// ackedMeasured counts n acknowledged records of the measured span; the span
// ends with the last of them once the input has ended.
func (c *clock) ackedMeasured(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked += n
	c.maybeEndLocked()
}

func (c *clock) maybeEndLocked() {
	if c.inputEnded && c.acked == c.emitted && c.end.IsZero() {
		c.end = time.Now()
		c.allocEnd = heapAllocs()
		c.records = c.emitted
	}
}

// benchSource is the pipelines' input: like `generate` with a constant
// payload, at no cost per record beyond service.NewMessage. It first emits one
// warm-up batch of one record and waits for its ack, so that the output is
// connected (producers initialised, state cache read) and one epoch went
// round; then it emits batches of batch records for warmup (not measured),
// then for duration (measured), and the span ends when the last measured
// record is acknowledged (for kafka_eos: when its epoch committed). With
// count > 0 it emits count records after the warm-up batch instead, all
// measured (the Go benchmarks' b.N).
type benchSource struct {
	count, batch     int
	warmup, duration time.Duration
	values           [][]byte // sent in turn (-payload)
	next             int      // index of the next value
	fresh            bool     // a copy of the value per message
	// meta gives every message the seven metadata keys kafka_native
	// sets, with values boxed once for the run: what a message of that
	// shape costs Benthos itself (its metadata map and entries), with none
	// of the input's own work.
	meta bool
	clk  *clock

	warmed   chan struct{}
	warmSent bool
	w        window
	emitted  int
}

func benchSourceSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Fields(service.NewIntField("count"), service.NewIntField("size"), service.NewIntField("batch"),
			service.NewDurationField("warmup"), service.NewDurationField("duration"),
			service.NewBoolField("fresh").Default(false), service.NewStringField("payload").Default("letters"),
			service.NewBoolField("meta").Default(false))
}

func newBenchSource(conf *service.ParsedConfig, clk *clock) (*benchSource, error) {
	s := &benchSource{clk: clk, warmed: make(chan struct{})}
	var size int
	var err error
	for _, f := range []struct {
		name string
		dst  *int
	}{{"count", &s.count}, {"size", &size}, {"batch", &s.batch}} {
		if *f.dst, err = conf.FieldInt(f.name); err != nil {
			return nil, err
		}
	}
	if s.warmup, err = conf.FieldDuration("warmup"); err != nil {
		return nil, err
	}
	if s.duration, err = conf.FieldDuration("duration"); err != nil {
		return nil, err
	}
	if s.fresh, err = conf.FieldBool("fresh"); err != nil {
		return nil, err
	}
	if s.meta, err = conf.FieldBool("meta"); err != nil {
		return nil, err
	}
	kind, err := conf.FieldString("payload")
	if err != nil {
		return nil, err
	}
	if s.values, err = values(kind, size); err != nil {
		return nil, err
	}
	s.w = window{warmup: s.warmup, duration: s.duration}
	return s, nil
}

func (s *benchSource) Connect(context.Context) error { return nil }

func (s *benchSource) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if !s.warmSent {
		s.warmSent = true
		s.clk.mu.Lock()
		s.clk.total++
		s.clk.mu.Unlock()
		return service.MessageBatch{service.NewMessage(s.values[0])}, func(_ context.Context, err error) error {
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
	}
	n := s.batch
	var measured, done bool
	if s.count > 0 {
		if s.emitted == 0 {
			s.clk.mark(time.Now())
		}
		measured, done = true, s.emitted >= s.count
		n = min(n, s.count-s.emitted)
	} else {
		wasMarked := s.w.marked
		measured, done = s.w.tick(time.Now())
		if measured && !wasMarked {
			s.clk.mark(s.w.start)
		}
	}
	if done {
		s.clk.mu.Lock()
		s.clk.inputEnded = true
		s.clk.maybeEndLocked()
		s.clk.mu.Unlock()
		return nil, nil, service.ErrEndOfInput
	}
	s.emitted += n
	b := make(service.MessageBatch, n)
	for i := range b {
		v := s.values[s.next]
		if s.next++; s.next == len(s.values) {
			s.next = 0
		}
		if s.fresh {
			v = append([]byte(nil), v...)
		}
		b[i] = service.NewMessage(v)
		if s.meta {
			for _, kv := range floorMeta {
				b[i].MetaSetMut(kv.key, kv.value)
			}
		}
	}
	s.clk.mu.Lock()
	s.clk.total += int64(n)
	if measured {
		s.clk.emitted += int64(n)
	}
	s.clk.mu.Unlock()
	return b, func(_ context.Context, err error) error {
		if err != nil {
			// The batch is replayed by Benthos; nothing counted.
			return nil
		}
		if measured {
			s.clk.ackedMeasured(int64(n))
		}
		return nil
	}, nil
}

func (s *benchSource) Close(context.Context) error { return nil }

// floorMeta are the metadata keys of a kafka_native message (a record of
// partition 0 without key or headers), each value boxed once.
var floorMeta = []struct {
	key   string
	value any
}{
	{"kafka_key", ""}, {"kafka_topic", "bench"}, {"kafka_partition", int64(0)}, {"kafka_offset", int64(1 << 20)},
	{"kafka_timestamp_ms", int64(1764720000000)}, {"kafka_timestamp_unix", int64(1764720000)}, {"kafka_tombstone_message", false},
}

// benchDrop is the floor pipeline's output: it acknowledges every batch and
// keeps nothing.
type benchDrop struct{}

func (benchDrop) Connect(context.Context) error                          { return nil }
func (benchDrop) WriteBatch(context.Context, service.MessageBatch) error { return nil }
func (benchDrop) Close(context.Context) error                            { return nil }

// benchSink is the consume rows' output: it counts the records received per
// partition (the parent checks them against the topic) and those received
// before the deadline (the measured span: from the stream's start, the
// input's connection and first fetch included, to the deadline).
type benchSink struct {
	clk      *clock
	deadline time.Time
	ended    chan struct{} // closed once the stream should stop
	once     sync.Once
	mu       sync.Mutex
}

func (s *benchSink) Connect(context.Context) error { return nil }

func (s *benchSink) WriteBatch(_ context.Context, b service.MessageBatch) error {
	if len(b) == 0 {
		return nil
	}
	now := time.Now()
	var n int64
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	// A batch of kafka_native holds records of one partition: its first
	// and last message say which and up to where (per message otherwise).
	firstP, ok1 := metaInt(b[0], "kafka_partition")
	lastP, ok2 := metaInt(b[len(b)-1], "kafka_partition")
	if ok1 && ok2 && firstP == lastP && len(b) > 1 {
		next, _ := metaInt(b[len(b)-1], "kafka_offset")
		n = int64(len(b))
		c.reads.add(int32(firstP), n, next+1)
	} else {
		for _, m := range b {
			p, _ := metaInt(m, "kafka_partition")
			k := recordsIn(m)
			next, ok := metaInt(m, "kafka_last_offset")
			if !ok {
				next, _ = metaInt(m, "kafka_offset")
			}
			c.reads.add(int32(p), k, next+1)
			n += k
		}
	}
	c.total += n
	if s.deadline.IsZero() || !now.After(s.deadline) {
		c.records += n
	} else {
		s.once.Do(func() { close(s.ended) })
	}
	return nil
}

func (s *benchSink) Close(context.Context) error { return nil }

// pipelineYAML is the stream config of one pipeline contender.
func pipelineYAML(kind string, o options) (string, error) {
	src := fmt.Sprintf("input:\n  bench_source: { count: %d, size: %d, batch: %d, warmup: %s, duration: %s, fresh: %t, payload: %s }\n",
		o.records, o.size, o.batch, o.warmup, o.duration, o.fresh, o.payload)
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
    compression: %s
    # Epochs close on the interval only, as ProducerPerformance's
    # --transaction-duration-ms does (the record and byte caps are off;
    # max_in_flight, default 64 batches, still closes an epoch early).
    epoch: { interval: %s, max_records: 0, max_bytes: 0 }
%scache_resources:
  - label: eos_state
    kafka_state:
      seed_brokers: [ %q ]
      topic: bench_eos_state
`, o.brokers, o.topic, "bench-"+o.topic, o.compression, o.interval, inFlight, o.brokers) + logger, nil
	case "floor":
		// Benthos alone: messages shaped as kafka_native's, no Kafka.
		return strings.Replace(src, "payload: ", "meta: true, payload: ", 1) + "output:\n  bench_drop: {}\n" + logger, nil
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
		format, out := "message", `    partition: '${! metadata("kafka_partition") }'
    key: '${! metadata("kafka_key") }'`
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
  # at its default, 64. No processor: the copy as a user runs it.
  threads: 1
output:
  kafka_eos:
    seed_brokers: [ %[1]q ]
    topic: %[5]q
    partitioner: manual
%[6]s
    transactional_id: %[3]q
    consumer_group: %[3]q
    state_cache: eos_state
    compression: %[9]s
    epoch: { interval: %[7]s, max_records: 0, max_bytes: 0 }
%[8]scache_resources:
  - label: eos_state
    kafka_state:
      seed_brokers: [ %[1]q ]
      topic: bench_eos_state
`, o.brokers, o.topic, group, format, o.copyTopic, out, o.interval, inFlight, o.compression) + logger, nil
	}
	return "", fmt.Errorf("unknown pipeline %q", kind)
}

// runPipeline runs one pipeline contender in this process through a
// StreamBuilder on a cloned environment that holds the bench components and a
// metrics exporter this function reads from.
func runPipeline(ctx context.Context, kind string, o options) (result, error) {
	clk := &clock{reads: partReads{}}
	exp := promexport.New()
	var epochsAtMark atomic.Int64
	clk.onMark = func() { epochsAtMark.Store(epochsCommitted(exp)) }
	sink := &benchSink{clk: clk, ended: make(chan struct{})}
	consume := strings.HasPrefix(kind, "native")
	copyRow := strings.HasPrefix(kind, "copy_")
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
		return sink, service.BatchPolicy{}, 1, nil
	}); err != nil {
		return result{}, err
	}
	if err := env.RegisterBatchOutput("bench_drop", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return benchDrop{}, service.BatchPolicy{}, 1, nil
	}); err != nil {
		return result{}, err
	}
	if err := registerPlain(env, o); err != nil {
		return result{}, err
	}

	yaml, err := pipelineYAML(kind, o)
	if err != nil {
		return result{}, err
	}
	var memLimit int64
	if o.binaryMemLimit {
		// What `connect-eos run` does with this config.
		d, err := memlimit.FromYAML(yaml)
		if err != nil {
			return result{}, err
		}
		env := memlimit.OSEnv()
		fmt.Fprintln(os.Stderr, memlimit.Apply(d, env))
		if d.Limit == 0 && env.GoMemLimit == "" {
			return result{}, fmt.Errorf("the binary sets no memory limit for this pipeline: %s", d.Reason)
		}
		memLimit = debug.SetMemoryLimit(-1)
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
	// Time-bounded consume and copy runs are stopped from here: a
	// consume run at its deadline, a copy run once its duration has
	// passed since its first record was produced (the stream stops
	// gracefully: every record that went through is committed before Run
	// returns).
	began := time.Now()
	timed := o.duration > 0 && o.records == 0
	if consume && timed {
		sink.deadline = began.Add(o.duration)
		clk.start = began
	}
	stopped := make(chan struct{})
	var stopErr error
	var atMark atomic.Int64
	if copyRow {
		// The copy's first record: kafka_eos_records_produced leaves 0
		// (looked at every 5 ms, so the copy has no processor of the
		// harness in its path).
		go func() {
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				if n := producedRecords(exp); n > 0 {
					// Those already produced are left out of
					// the span's records (not its total).
					atMark.Store(n)
					break
				}
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
				}
			}
			clk.mark(time.Now())
		}()
	}
	if timed && (consume || copyRow) {
		go func() {
			defer close(stopped)
			var deadline <-chan time.Time
			if consume {
				deadline = time.After(time.Until(sink.deadline))
			} else {
				t := time.NewTicker(5 * time.Millisecond)
				defer t.Stop()
				for {
					clk.mu.Lock()
					st := clk.start
					clk.mu.Unlock()
					if !st.IsZero() {
						deadline = time.After(time.Until(st.Add(o.duration)))
						break
					}
					select {
					case <-runCtx.Done():
						return
					case <-t.C:
					}
				}
			}
			select {
			case <-sink.ended:
			case <-deadline:
			case <-runCtx.Done():
				return
			}
			stopErr = stream.StopWithin(2 * time.Minute)
		}()
	} else {
		close(stopped)
	}
	runErr := stream.Run(runCtx)
	ranFor := time.Since(began)
	cancel()
	<-stopped
	if smp != nil {
		smp.stop()
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return result{}, fmt.Errorf("stream: %w", runErr)
	}
	if stopErr != nil {
		return result{}, fmt.Errorf("stopping the stream: %w", stopErr)
	}
	clk.mu.Lock()
	defer clk.mu.Unlock()
	switch {
	case consume:
		if timed && ranFor < o.duration {
			return result{EndedEarly: true, Records: clk.total, Seconds: ranFor.Seconds()}, nil
		}
		clk.end = clk.start.Add(o.duration)
		if !timed {
			// b.N records: the span is the whole stream.
			clk.start, clk.end = began, began.Add(ranFor)
		}
		clk.allocEnd = heapAllocs()
	case copyRow:
		clk.end = time.Now()
		clk.allocEnd = heapAllocs()
		clk.total = producedRecords(exp)
		clk.records = clk.total - atMark.Load()
		if clk.start.IsZero() || clk.records == 0 {
			// Over by the first look (tiny runs): the whole
			// stream.
			clk.start, clk.records = began, clk.total
		}
	}
	d, n := clk.end.Sub(clk.start), clk.records
	if n == 0 || d <= 0 {
		return result{}, fmt.Errorf("the stream ended before the measured records were acknowledged (%d records over %s, %d in all)", n, d, clk.total)
	}
	r := result{Records: n, Total: clk.total, Seconds: d.Seconds()}
	if consume {
		r.Reads = clk.reads
	}
	if clk.allocEnd > clk.allocStart {
		r.AllocsPerRecord = float64(clk.allocEnd-clk.allocStart) / float64(n)
	}
	readOutputMetrics(exp, &r)
	if kind == "eos" {
		r.Epochs -= epochsAtMark.Load()
	}
	if smp != nil {
		r.BufferedPeak, r.RSSSampled, r.InputBufferedPeak = smp.buffered.Load(), smp.rss.Load(), smp.input.Load()
	}
	r.MemLimit = memLimit
	return r, nil
}

// producedRecords reads kafka_eos_records_produced from the exporter.
func producedRecords(exp *promexport.Exporter) int64 {
	mfs, err := exp.Registry().Gather()
	if err != nil {
		return 0
	}
	var n int64
	for _, mf := range mfs {
		if mf.GetName() == "kafka_eos_records_produced" {
			for _, m := range mf.GetMetric() {
				n += int64(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// epochsCommitted reads kafka_eos_epochs_committed from the exporter.
func epochsCommitted(exp *promexport.Exporter) int64 {
	var r result
	readOutputMetrics(exp, &r)
	return r.Epochs
}

// sampler records, every 20 ms, the highest kafka_eos_buffered_bytes (the
// bytes franz-go holds against max_buffered_bytes, set by the output after
// every batch) and the highest VmRSS: the saturation row shows with them that
// the byte budget was reached, and how the peak RSS relates to it.
type sampler struct {
	// input is the highest kafka_native_buffered_bytes (what the input's
	// max_buffered_bytes bounds), in the copy rows.
	buffered, rss, input atomic.Int64
	done                 chan struct{}
	stopped              sync.WaitGroup
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
					peak := map[string]*atomic.Int64{"kafka_eos_buffered_bytes": &s.buffered, "kafka_native_buffered_bytes": &s.input}[mf.GetName()]
					if peak == nil {
						continue
					}
					for _, m := range mf.GetMetric() {
						if v := int64(m.GetGauge().GetValue()); v > peak.Load() {
							peak.Store(v)
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
