// Command bench measures the kafka_eos output and the kafka_native input
// against Kafka's own tools (ProducerPerformance, ConsumerPerformance) and the
// raw franz-go client, side by side on one real Apache Kafka broker, and
// prints (and optionally writes into docs/benchmarks.md) a Markdown table of
// medians and same-run ratios, plus a PNG plot of throughput vs epoch interval.
//
//	go run ./integration/bench -out docs/benchmarks.md     (make bench)
//
// It starts its own broker with integration/kafka/up.sh --tv 2 --name bench
// (stopped again at the end) unless -brokers names one. Every row runs on a
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
	"strings"
	"syscall"
	"time"
)

// options are the flags of one invocation (the parent's and the child's).
type options struct {
	records    int
	sizes      []int
	intervals  []time.Duration
	runs       int
	partitions int
	batch      int
	slots      int
	out        string
	plot       string
	brokers    string
	keep       bool
	skipJava   bool
	skipCons   bool

	// child mode
	child    string
	topic    string
	size     int
	interval time.Duration
}

func main() {
	var o options
	var sizes, intervals string
	flag.IntVar(&o.records, "records", 600000, "records per run (every contender of a row gets the same count)")
	flag.StringVar(&sizes, "sizes", "100,1024", "record (value) sizes in bytes, comma separated")
	flag.StringVar(&intervals, "intervals", "100ms,1s", "epoch (transaction) intervals, comma separated")
	flag.IntVar(&o.runs, "runs", 3, "rounds per row; the table shows medians")
	flag.IntVar(&o.partitions, "partitions", 3, "partitions of every benchmark topic")
	flag.IntVar(&o.batch, "batch", 1024, "records per Benthos batch emitted by the pipelines' input")
	flag.IntVar(&o.slots, "probe-slots", 2, "transactional producers of the raw franz-go loop (kafka_eos's producer_pool_size default)")
	flag.StringVar(&o.out, "out", "", "Markdown file whose generated block (between the bench markers) is replaced with the results")
	flag.StringVar(&o.plot, "plot", "", "PNG plot of throughput vs epoch interval (default: next to -out)")
	flag.StringVar(&o.brokers, "brokers", "", "use this broker instead of starting one (host:port)")
	flag.BoolVar(&o.keep, "keep", false, "leave the broker this run started running")
	flag.BoolVar(&o.skipJava, "skip-java", false, "do not run Kafka's Java tools")
	flag.BoolVar(&o.skipCons, "skip-consume", false, "do not run the consume rows")
	flag.StringVar(&o.child, "child", "", "internal: run one contender in this process and print its result")
	flag.StringVar(&o.topic, "topic", "", "internal (child): topic")
	flag.IntVar(&o.size, "size", 0, "internal (child): record size")
	flag.DurationVar(&o.interval, "interval", 0, "internal (child): epoch interval")
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
	if o.records <= 0 || o.runs <= 0 || o.partitions <= 0 || o.batch <= 0 || o.slots <= 0 {
		fatalf("-records, -runs, -partitions, -batch and -probe-slots must be positive")
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
