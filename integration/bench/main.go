// Command bench measures the kafka_eos output and the kafka_native input
// against Kafka's own tools (ProducerPerformance, ConsumerPerformance) and the
// raw franz-go client, side by side on one real Apache Kafka broker, and
// prints (and optionally writes into docs/benchmarks.md) a Markdown table of
// medians and same-run ratios, plus a PNG plot of throughput vs epoch interval.
//
//	go run ./integration/bench -out docs/benchmarks.md     (make bench)
//
// It starts its own broker with integration/kafka/up.sh --tv 2 --name
// bench-<pid> (stopped again at the end) unless -brokers names one. Every row runs on a
// fresh topic with the same records (same count, same size, same partitions),
// each contender once per round, rounds rotated so no contender always runs
// first; the table shows the median over -runs rounds, and every ratio is
// the median of per-round ratios (two figures measured minutes apart on a
// shared 2-core machine are not comparable, two measured back to back are).
//
// The Go contenders (the pipelines and the raw franz-go loops) each run in a
// child process (this binary, re-executed with -child), so that each has its
// own heap and its peak RSS (VmHWM) is its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// options are the flags of one invocation (the parent's and the child's).
type options struct {
	// records > 0 bounds a child's run by a record count instead of
	// time (the Go benchmarks' b.N; a reader's topic size).
	records int
	// duration is every contender's measured span, warmup the produce
	// rows' unmeasured lead (ProducerPerformance's --warmup-records
	// cover as long at its expected rate).
	duration, warmup time.Duration
	// copyInterval is the copy rows' epoch interval.
	copyInterval time.Duration
	// profileDir: the Go children write CPU profiles there (pprof);
	// cpuProfile is one child's file.
	profileDir, cpuProfile string
	// contextRuns: rounds in which the rows that carry no target (the
	// broker's ceiling, ProducerPerformance at its defaults, the raw
	// loop at kafka_eos's epochs per second) run; all rounds if 0.
	contextRuns int
	sizes       []int
	intervals   []time.Duration
	runs        int
	partitions  int
	batch       int
	slots       int
	out         string
	plot        string
	brokers     string
	keep        bool
	skipJava    bool
	skipCons    bool
	skipSat     bool
	only        map[string]bool // -only: contender slugs (slug()); nil: all
	brokerName  string
	// maxInFlight is kafka_eos's max_in_flight (and the plain output's
	// concurrency); 0 leaves the output's default.
	maxInFlight int

	// producer knobs of the probe and the plain output (-p-*): the
	// produce-path parity experiments; zero values are producerOpts'
	// defaults (kafka_eos's).
	pBatchBytes int
	pLinger     time.Duration
	pCompress   string
	pNoDelay    bool
	pMaxRecords int
	pStickyKiB  int

	// compression is kafka_eos's compression in every pipeline row
	// ("none" by default: the rows compare it with producers that do not
	// compress), payload the values the pipelines send (payloadKinds).
	compression, payload string
	// codecs: run the compression rows (kafka_eos with each of these
	// codecs, order events as values) instead of the other rows.
	codecs []string

	// saturation row
	satBatch int
	// satGoMemLimit: the kafka_eos saturation row runs once more with
	// this GOMEMLIMIT in the child's environment ("": not).
	satGoMemLimit string
	// childEnv is added to a child's environment (the saturation row's
	// GOMEMLIMIT).
	childEnv []string

	// child mode
	child    string
	topic    string
	size     int
	interval time.Duration
	// fresh gives every message its own copy of the value (the saturation
	// row: a real input allocates every record, the throughput rows share
	// one value so the input costs nothing).
	fresh bool
	// sample: the child samples its RSS and the output's buffered bytes.
	sample bool
	// copyTopic is the target topic of the copy rows.
	copyTopic string
	// binaryMemLimit: the child sets the Go memory limit the connect-eos
	// binary derives from the pipeline's config (internal/memlimit),
	// unless GOMEMLIMIT is set.
	binaryMemLimit bool
}

func main() {
	var o options
	var sizes, intervals string
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured span of every contender's run (ProducerPerformance and ConsumerPerformance get a record count that lasts about as long at their last measured rate)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "produce rows: unmeasured lead before the measured span (ProducerPerformance: --warmup-records)")
	flag.DurationVar(&o.copyInterval, "copy-interval", 100*time.Millisecond, "epoch interval of the copy rows (kafka_eos and the raw copy loop)")
	flag.StringVar(&o.profileDir, "cpuprofile", "", "directory: every Go child writes a pprof CPU profile of its run there")
	flag.IntVar(&o.contextRuns, "context-runs", 1, "rounds in which the rows without a target run (ceiling, ProducerPerformance defaults, raw loop at kafka_eos's cadence); 0: every round")
	flag.StringVar(&sizes, "sizes", "100,1024", "record (value) sizes in bytes, comma separated")
	flag.StringVar(&intervals, "intervals", "1s", "epoch (transaction) intervals of the produce rows, comma separated")
	flag.IntVar(&o.runs, "runs", 2, "rounds per row; the table shows medians and ranges, a target is met only if every round meets it")
	flag.IntVar(&o.partitions, "partitions", 3, "partitions of every benchmark topic")
	flag.IntVar(&o.batch, "batch", 1024, "records per Benthos batch emitted by the pipelines' input")
	flag.IntVar(&o.slots, "probe-slots", 2, "transactional producers of the raw franz-go loop (kafka_eos's producer_pool_size default)")
	flag.StringVar(&o.out, "out", "", "Markdown file whose generated block (between the bench markers) is replaced with the results")
	flag.StringVar(&o.plot, "plot", "", "PNG plot of throughput vs epoch interval (default: next to -out)")
	flag.StringVar(&o.brokers, "brokers", "", "use this broker instead of starting one (host:port)")
	flag.BoolVar(&o.keep, "keep", false, "leave the broker this run started running")
	flag.BoolVar(&o.skipJava, "skip-java", false, "do not run Kafka's Java tools")
	flag.BoolVar(&o.skipCons, "skip-consume", false, "do not run the consume rows")
	var only string
	flag.StringVar(&only, "only", "", "run only these contenders, comma separated slugs: kafkaeos, plain, raw, rawcadence, rawnotxn, pptuned, ppdefaults, ppnotxn, rawpoll, kafkanative, kafkanativearrow, consumerperformance, rawcopy, copymessage, copyarrow, copysat (the saturated copy) (empty: all)")
	flag.BoolVar(&o.skipSat, "skip-saturation", false, "do not run the saturation (peak RSS vs max_buffered_bytes) row")
	flag.StringVar(&o.brokerName, "broker-name", fmt.Sprintf("bench-%d", os.Getpid()), "up.sh --name of the broker this run starts (unique per run by default, so two runs on one machine never share or stop each other's broker)")
	flag.IntVar(&o.maxInFlight, "max-in-flight", 0, "kafka_eos max_in_flight and the plain output's concurrency (0: the output's default)")
	flag.StringVar(&o.compression, "compression", "none", "kafka_eos's compression in the pipeline rows: none, gzip, snappy, lz4, zstd")
	flag.StringVar(&o.payload, "payload", "letters", "values of the pipeline rows: letters (one random upper-case value for every record) or json (distinct order events)")
	var codecs string
	flag.StringVar(&codecs, "codecs", "", "run only the compression rows: kafka_eos's produce row with each of these codecs (comma separated, e.g. none,snappy,lz4,zstd,gzip), json order events as values, and the bytes on the broker per record")
	flag.IntVar(&o.satBatch, "sat-batch", 4096, "records per Benthos batch in the saturation row")
	flag.StringVar(&o.satGoMemLimit, "sat-gomemlimit", "", "run kafka_eos's saturation row once more with this GOMEMLIMIT in the child's environment (e.g. 320MiB; the binary sets no limit for that pipeline)")
	flag.IntVar(&o.pBatchBytes, "p-batch-bytes", 0, "probe/plain: kgo.ProducerBatchMaxBytes (0: 1 MiB, kafka_eos's max_message_bytes default)")
	flag.DurationVar(&o.pLinger, "p-linger", 0, "probe/plain: kgo.ProducerLinger (0: none, kafka_eos's)")
	flag.StringVar(&o.pCompress, "p-compression", "none", "probe/plain: none, lz4, snappy, zstd, gzip")
	flag.BoolVar(&o.pNoDelay, "p-nodelay", true, "probe/plain: TCP_NODELAY on the connections (Go's default: true)")
	flag.IntVar(&o.pMaxRecords, "p-max-records", 0, "probe/plain: kgo.MaxBufferedRecords (0: unlimited, the byte budget is the only bound, as kafka_eos)")
	flag.IntVar(&o.pStickyKiB, "p-sticky-kib", 64, "probe/plain: bytes (KiB) the uniform sticky partitioner puts on one partition before it switches")
	flag.StringVar(&o.child, "child", "", "internal: run one contender in this process and print its result")
	flag.StringVar(&o.topic, "topic", "", "internal (child): topic")
	flag.IntVar(&o.size, "size", 0, "internal (child): record size")
	flag.DurationVar(&o.interval, "interval", 0, "internal (child): epoch interval")
	flag.BoolVar(&o.fresh, "fresh", false, "internal (child): a fresh copy of the value per message")
	flag.BoolVar(&o.sample, "sample", false, "internal (child): sample RSS and buffered bytes")
	flag.StringVar(&o.copyTopic, "copy-topic", "", "internal (child): target topic of a copy row")
	flag.BoolVar(&o.binaryMemLimit, "binary-memlimit", false, "internal (child): set the Go memory limit connect-eos run derives from the config")
	flag.IntVar(&o.records, "records", 0, "internal (child): a record count instead of the duration")
	flag.StringVar(&o.cpuProfile, "child-cpuprofile", "", "internal (child): CPU profile file")
	flag.Parse()

	if o.child != "" {
		os.Exit(runChild(o))
	}

	var err error
	if o.sizes, err = parseInts(sizes); err != nil {
		fatalf("-sizes: %v", err)
	}
	if o.intervals, err = parseDurations(intervals); err != nil {
		fatalf("-intervals: %v", err)
	}
	if codecs != "" {
		for _, c := range strings.Split(codecs, ",") {
			c = strings.TrimSpace(c)
			if !slices.Contains(kafkaconf.CompressionNames, c) {
				fatalf("-codecs: %q is not one of %s", c, strings.Join(kafkaconf.CompressionNames, ", "))
			}
			o.codecs = append(o.codecs, c)
		}
	}
	if !slices.Contains(kafkaconf.CompressionNames, o.compression) {
		fatalf("-compression: %q is not one of %s", o.compression, strings.Join(kafkaconf.CompressionNames, ", "))
	}
	if !slices.Contains(payloadKinds, o.payload) {
		fatalf("-payload: %q is not one of %s", o.payload, strings.Join(payloadKinds, ", "))
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, f := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(f)] = true
		}
	}
	if o.duration <= 0 || o.warmup < 0 || o.runs <= 0 || o.partitions <= 0 || o.batch <= 0 || o.slots <= 0 {
		fatalf("-duration, -runs, -partitions, -batch and -probe-slots must be positive")
	}
	if o.plot == "" && o.out != "" {
		o.plot = strings.TrimSuffix(o.out, ".md") + "-throughput.png"
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n <= 0 {
			return nil, fmt.Errorf("bad size %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bad interval %q", f)
		}
		out = append(out, d)
	}
	return out, nil
}
