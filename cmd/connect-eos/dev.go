package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	ucli "github.com/urfave/cli/v2"

	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/internal/promexport"
)

// devCommand runs a config against an embedded Kafka-compatible broker
// (franz-go's kfake), so that a new user can try a pipeline with nothing
// installed. It is a playground, not a test of Kafka semantics: kfake differs
// from Apache Kafka in error codes and timing (see docs/testing.md).
func devCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "dev",
		Usage:     "Run a config against an embedded Kafka-compatible broker and report what it did",
		ArgsUsage: "<config.yaml>",
		Description: `Starts an in-process Kafka-compatible broker on 127.0.0.1, creates and fills
the topics named by the flags, exports its address as KAFKA_BROKERS, runs the
config until its input ends (or --timeout), then reads the reported topics
with read_committed and prints records in, records out, duplicates, missing
records and the kafka_* counters of the run. The config's metrics (in the
Prometheus format) and HTTP server are served while it runs. Exits non-zero
when the stream failed, when --timeout stopped it before its input ended (the
run is incomplete and no verdict is given), or when records were duplicated
or lost between the filled topics and the reported ones (--report compares
values, --report-count only counts, for a pipeline that changes values).

Example:
  connect-eos dev --topic orders:3 --fill orders:10000 --topic orders_copy:3 \
    --report orders_copy config/examples/quickstart.yaml`,
		Flags: []ucli.Flag{
			&ucli.StringSliceFlag{Name: "topic", Usage: "create topic NAME:PARTITIONS (repeatable)"},
			&ucli.StringSliceFlag{Name: "fill", Usage: "produce COUNT records with unique values into NAME:COUNT before the run (repeatable)"},
			&ucli.StringSliceFlag{Name: "report", Usage: "after the run, read topic NAME with read_committed and compare its values with the filled records: duplicates and missing records (repeatable)"},
			&ucli.StringSliceFlag{Name: "report-count", Usage: "after the run, read topic NAME with read_committed and compare only its record count with the filled records, for pipelines that change values (repeatable)"},
			&ucli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "stop the stream after this long if it has not ended"},
		},
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return errors.New("dev: exactly one config file is required")
			}
			return runDev(c.Context, devOptions{
				configPath: c.Args().First(),
				topics:     c.StringSlice("topic"),
				fills:      c.StringSlice("fill"),
				reports:    c.StringSlice("report"),
				counts:     c.StringSlice("report-count"),
				timeout:    c.Duration("timeout"),
			})
		},
	}
}

type devOptions struct {
	configPath string
	topics     []string
	fills      []string
	reports    []string
	counts     []string
	timeout    time.Duration
}

func splitNameInt(s, flag string) (string, int, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("--%s %q: want NAME:NUMBER", flag, s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n <= 0 {
		return "", 0, fmt.Errorf("--%s %q: %q is not a positive number", flag, s, s[i+1:])
	}
	return s[:i], n, nil
}

func runDev(ctx context.Context, o devOptions) error {
	confBytes, err := os.ReadFile(o.configPath)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1)) // listens on 127.0.0.1, a free port
	if err != nil {
		return fmt.Errorf("dev: starting the embedded broker: %w", err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	if err := os.Setenv("KAFKA_BROKERS", brokers); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dev: embedded broker at %s (KAFKA_BROKERS)\n", brokers)

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range o.topics {
		name, parts, err := splitNameInt(t, "topic")
		if err != nil {
			return err
		}
		if _, err := adm.CreateTopic(ctx, int32(parts), 1, nil, name); err != nil {
			return fmt.Errorf("dev: creating topic %s: %w", name, err)
		}
	}
	filled := map[string]bool{}
	for _, f := range o.fills {
		name, count, err := splitNameInt(f, "fill")
		if err != nil {
			return err
		}
		if err := fill(ctx, cl, name, count); err != nil {
			return err
		}
		for i := 0; i < count; i++ {
			filled[fillValue(name, i)] = true
		}
		fmt.Fprintf(os.Stderr, "dev: produced %d records into %s\n", count, name)
	}

	// Run the stream in an environment whose metrics exporter we hold, so
	// the summary can show the components' own counters; the exporter takes
	// the config's prometheus settings and is served on the config's HTTP
	// address, as `run` would.
	sections, err := devSections(confBytes)
	if err != nil {
		return fmt.Errorf("dev: %s: %w", o.configPath, err)
	}
	if f, err := checkConfigYAML(confBytes); err == nil {
		for _, w := range f.warnings {
			fmt.Fprintf(os.Stderr, "dev: warning: %s\n", w)
		}
		if len(f.errors) > 0 {
			return fmt.Errorf("dev: %s: %s", o.configPath, strings.Join(f.errors, "; "))
		}
	}
	var exp *promexport.Exporter
	env := binaryEnvironment()
	if err := env.RegisterMetricsExporter("dev_capture", promexport.Spec(), func(conf *service.ParsedConfig, _ *service.Logger) (service.MetricsExporter, error) {
		e, err := promexport.NewFromParsed(conf)
		exp = e
		return e, err
	}); err != nil {
		return err
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetYAML(string(confBytes)); err != nil {
		return fmt.Errorf("dev: %s: %w", o.configPath, err)
	}
	if sections.note != "" {
		fmt.Fprintf(os.Stderr, "dev: %s\n", sections.note)
	}
	if err := sb.SetMetricsYAML(sections.metricsYAML); err != nil {
		return fmt.Errorf("dev: %s: metrics: %w", o.configPath, err)
	}
	mux := http.NewServeMux()
	sb.SetHTTPMux(mux)
	stream, err := sb.Build()
	if err != nil {
		return fmt.Errorf("dev: %s: %w", o.configPath, err)
	}
	if sections.httpEnabled {
		stopHTTP := serveDev(mux, sections.httpAddress)
		defer stopHTTP()
	}
	runCtx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	restore := fatal.SetHandler(func(error) { cancel() })
	defer restore()

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- stream.Run(context.Background()) }()
	var runErr error
	incomplete := ""
	select {
	case runErr = <-done:
	case <-runCtx.Done():
		runErr = stream.StopWithin(10 * time.Second)
		<-done
		if fatal.Err() == nil {
			incomplete = "stopped by a signal before its input ended"
		}
	case <-time.After(o.timeout):
		fmt.Fprintf(os.Stderr, "dev: --timeout %v reached, stopping the stream\n", o.timeout)
		_ = stream.StopWithin(10 * time.Second)
		<-done
		incomplete = fmt.Sprintf("stopped by --timeout %v before its input ended", o.timeout)
	}
	elapsed := time.Since(start)
	if ferr := fatal.Err(); ferr != nil {
		return fmt.Errorf("dev: the stream stopped on a fatal error: %w", ferr)
	}
	if runErr != nil && incomplete == "" {
		return fmt.Errorf("dev: the stream failed: %w", runErr)
	}

	fmt.Printf("dev: stream ran for %v\n", elapsed.Round(time.Millisecond))
	fmt.Printf("dev: records in: %d\n", len(filled))
	var problems []string
	for _, name := range o.reports {
		values, err := readCommitted(ctx, adm, cluster.ListenAddrs(), name)
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, v := range values {
			seen[v]++
		}
		dups, missing := 0, 0
		for _, n := range seen {
			dups += n - 1
		}
		for v := range filled {
			if seen[v] == 0 {
				missing++
			}
		}
		if incomplete != "" {
			fmt.Printf("dev: records out (read_committed) in %s so far: %d, duplicates so far: %d\n", name, len(values), dups)
			continue
		}
		fmt.Printf("dev: records out (read_committed) in %s: %d, duplicates: %d, missing: %d\n", name, len(values), dups, missing)
		if len(filled) > 0 && (dups > 0 || missing > 0) {
			problems = append(problems, fmt.Sprintf("%s has %d duplicates and %d missing records", name, dups, missing))
		}
	}
	for _, name := range o.counts {
		values, err := readCommitted(ctx, adm, cluster.ListenAddrs(), name)
		if err != nil {
			return err
		}
		if incomplete != "" {
			fmt.Printf("dev: records out (read_committed) in %s so far: %d (count only)\n", name, len(values))
			continue
		}
		fmt.Printf("dev: records out (read_committed) in %s: %d, records in: %d (count only: values not compared)\n", name, len(values), len(filled))
		if len(values) != len(filled) {
			problems = append(problems, fmt.Sprintf("%s has %d records, %d were filled", name, len(values), len(filled)))
		}
	}
	printCounters(exp)
	if incomplete != "" {
		return fmt.Errorf("dev: the run is incomplete: the stream was %s; no exactly-once verdict (raise --timeout for a bounded input)", incomplete)
	}
	if len(problems) > 0 {
		return fmt.Errorf("dev: not exactly once: %s", strings.Join(problems, "; "))
	}
	return nil
}

// devConfig is what dev reads of a config's service-wide sections.
type devConfig struct {
	httpEnabled bool
	httpAddress string
	metricsYAML string // the metrics section, with dev_capture for prometheus
	note        string // said to the user when the config's exporter is replaced
}

// devSections reads the config's http and metrics sections: the HTTP
// server's address (DefaultHTTPAddress unless set) and the prometheus
// exporter's settings, which dev keeps.
func devSections(conf []byte) (devConfig, error) {
	spec := service.NewConfigSpec().
		Field(service.NewObjectField("http",
			service.NewBoolField("enabled").Default(true),
			service.NewStringField("address").Default(DefaultHTTPAddress),
		).Optional()).
		Field(service.NewAnyField("metrics").Optional())
	pc, err := spec.ParseYAML(string(conf), nil)
	if err != nil {
		return devConfig{}, err
	}
	d := devConfig{httpEnabled: true, httpAddress: DefaultHTTPAddress, metricsYAML: `dev_capture: {}`}
	if pc.Contains("http") {
		if d.httpEnabled, err = pc.FieldBool("http", "enabled"); err != nil {
			return d, err
		}
		if d.httpAddress, err = pc.FieldString("http", "address"); err != nil {
			return d, err
		}
	}
	if !pc.Contains("metrics") {
		return d, nil
	}
	m, err := pc.FieldAny("metrics")
	if err != nil {
		return d, err
	}
	sec, ok := m.(map[string]any)
	if !ok {
		return d, errors.New("metrics: want an object")
	}
	out := map[string]any{"dev_capture": map[string]any{}}
	for k, v := range sec {
		switch k {
		case "mapping":
			out[k] = v
		case "prometheus":
			if v != nil {
				out["dev_capture"] = v
			}
		default:
			d.note = fmt.Sprintf("the config's metrics exporter %q is replaced by the Prometheus exporter during dev, so the summary can read the counters", k)
		}
	}
	// JSON is YAML.
	b, err := json.Marshal(out)
	if err != nil {
		return d, err
	}
	d.metricsYAML = string(b)
	return d, nil
}

// serveDev serves the stream's HTTP endpoints on addr (the stream registers
// /metrics, /stats and /ready on mux itself). A port already in use is
// reported and the run goes on.
func serveDev(mux *http.ServeMux, addr string) (stop func()) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dev: not serving the config's http.address %s: %v\n", addr, err)
		return func() {}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	fmt.Fprintf(os.Stderr, "dev: serving metrics at http://%s/metrics\n", l.Addr())
	return func() { _ = srv.Close() }
}

func fillValue(topic string, i int) string {
	return fmt.Sprintf(`{"topic":%q,"id":%d}`, topic, i)
}

// fill produces count records with unique values; idempotent and acks=all
// (franz-go's defaults), so a retry cannot duplicate them.
func fill(ctx context.Context, cl *kgo.Client, topic string, count int) error {
	var firstErr error
	for i := 0; i < count; i++ {
		r := &kgo.Record{Topic: topic, Key: []byte("k" + strconv.Itoa(i)), Value: []byte(fillValue(topic, i))}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if firstErr != nil {
		return fmt.Errorf("dev: filling %s: %w", topic, firstErr)
	}
	return nil
}

// readCommitted reads a topic from the start to its last stable offsets with
// read_committed and returns the record values. Control records are kept so
// that the position passes a trailing transaction marker (it takes an offset
// and carries no data), then dropped.
func readCommitted(ctx context.Context, adm *kadm.Client, seeds []string, topic string) ([]string, error) {
	ends, err := adm.ListCommittedOffsets(ctx, topic) // the last stable offsets
	if err != nil {
		return nil, fmt.Errorf("dev: listing offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	parts := map[string]map[int32]kgo.Offset{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
			parts[topic][o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(parts))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var values []string
	for len(want) > 0 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			return nil, fmt.Errorf("dev: reading %s: timed out with partitions %v not read to their end", topic, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				values = append(values, string(r.Value))
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return values, nil
}

// printCounters prints the run's kafka_* counters and gauges, sorted by name,
// summed over their label sets; whole numbers print as integers.
func printCounters(exp *promexport.Exporter) {
	if exp == nil {
		return
	}
	mfs, err := exp.Registry().Gather()
	if err != nil {
		return
	}
	var lines []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "kafka_") {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				sum += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				sum += m.GetGauge().GetValue()
			default:
				continue
			}
		}
		if mf.GetType() == dto.MetricType_COUNTER || mf.GetType() == dto.MetricType_GAUGE {
			lines = append(lines, fmt.Sprintf("dev: %s = %s", mf.GetName(), formatNumber(sum)))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// formatNumber prints v without an exponent: 1234567, not 1.234567e+06.
func formatNumber(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}
