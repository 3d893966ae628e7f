package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func TestParseProducerPerf(t *testing.T) {
	out := `500000 records sent, 99980.0 records/sec (9.53 MB/sec), 80.1 ms avg latency, 300.0 ms max latency.
1000000 records sent, 121286.4 records/sec (11.57 MB/sec), 85.31 ms avg latency, 412.00 ms max latency, 61 ms 50th, 250 ms 95th, 380 ms 99th, 410 ms 99.9th.
`
	r, err := parseProducerPerf(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 1000000 || r.RecordsPerSec() != 121286.4 || r.MBPerSec(100) != 11.57 {
		t.Fatalf("got %+v", r)
	}
	steady := out + "800000 steady state records sent, 131000.5 records/sec (12.49 MB/sec), 80.0 ms avg latency, 400.00 ms max latency.\n"
	if r, err = parseProducerPerf(steady); err != nil || r.Records != 800000 || r.RecordsPerSec() != 131000.5 {
		t.Fatalf("steady state: got %+v, %v", r, err)
	}
	if _, err := parseProducerPerf("no total\n"); err == nil {
		t.Fatal("want an error without a total line")
	}
}

func TestParseConsumerPerf(t *testing.T) {
	out := `start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-29 12:08:30:100, 2026-11-29 12:08:32:300, 4.7686, 2.1676, 50002, 22728.1818, 312, 1888, 2.5257, 26484.1102
`
	r, err := parseConsumerPerf(out, 50002)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 50002 || r.RecordsPerSec() != 26484.1102 || r.MBPerSec(100) != 2.5257 {
		t.Fatalf("got %+v", r)
	}
	if _, err := parseConsumerPerf(out, 60000); err == nil {
		t.Fatal("want an error when fewer records were read than asked")
	}
}

func TestMedianAndRatio(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Fatalf("median %v", m)
	}
	c := newCell("produce", 100, time.Second)
	for i, v := range [][2]float64{{100, 50}, {90, 100}, {120, 60}} {
		c.record("a", i, 3, result{Records: int64(v[0]), Seconds: 1}, nil)
		c.record("b", i, 3, result{Records: int64(v[1]), Seconds: 1}, nil)
	}
	// Per-round ratios 2, 0.9, 2: the median is 2, not 100/60.
	if r, n := c.ratio("a", "b"); r != 2 || n != 3 {
		t.Fatalf("ratio %v over %d rounds", r, n)
	}
	c.record("b", 2, 3, result{}, fmt.Errorf("boom"))
	c.rounds["b"][2] = nil
	if _, n := c.ratio("a", "b"); n != 2 {
		t.Fatalf("a failed round must not count, got %d rounds", n)
	}
}

func TestWriteBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	if err := os.WriteFile(path, []byte("# Title\n\nintro\n\n"+blockBegin+"\nold\n"+blockEnd+"\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeBlock(path, "new table"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "old") || !strings.Contains(s, "new table") || !strings.HasPrefix(s, "# Title\n\nintro") || !strings.HasSuffix(s, "after\n") {
		t.Fatalf("got %q", s)
	}
}

// BenchmarkPipelineKfake runs the produce pipelines of the harness (the bench
// input -> kafka_eos, and -> the plain idempotent output) on kfake, franz-go's
// in-process Kafka, with b.N records of 100 B: no broker needed. ns/op and
// allocs/op are per record and include kfake's own work (it runs in this
// process), so compare the two sub-benchmarks rather than read either alone;
// records/s is the measured span (after the warm-up batch) as in the harness.
//
//	go test -run X -bench PipelineKfake -benchtime 200000x ./integration/bench/
func BenchmarkPipelineKfake(b *testing.B) {
	for _, kind := range []string{"eos", "plain"} {
		b.Run(kind, func(b *testing.B) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			o := options{
				brokers: c.ListenAddrs()[0], topic: "bench", records: b.N, size: 100,
				batch: 1024, interval: 100 * time.Millisecond, compression: "none",
			}
			b.ReportAllocs()
			b.ResetTimer()
			r, err := runPipeline(context.Background(), kind, o)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.RecordsPerSec(), "records/s")
			if kind == "eos" && r.Epochs > 0 {
				b.ReportMetric(float64(r.Epochs), "epochs")
			}
		})
	}
}

// BenchmarkBenthosFloor runs the bench input, its messages carrying the seven
// metadata keys of a kafka_native message (values boxed once), into an output
// that drops them: what Benthos itself costs per message of that shape, with
// no Kafka and none of the input's or output's work. The message-mode rows
// cannot go faster than this on the same machine.
//
//	go test -run X -bench BenthosFloor -benchtime 5000000x ./integration/bench/
func BenchmarkBenthosFloor(b *testing.B) {
	o := options{records: b.N, size: 100, batch: 1024, compression: "none"}
	b.ReportAllocs()
	b.ResetTimer()
	r, err := runPipeline(context.Background(), "floor", o)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.RecordsPerSec(), "records/s")
}

// BenchmarkProbeKfake is the raw franz-go transactional loop (the producer
// probe) on kfake, for comparison with BenchmarkPipelineKfake/eos.
func BenchmarkProbeKfake(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	o := options{brokers: c.ListenAddrs()[0], topic: "bench", records: b.N, size: 100, interval: 100 * time.Millisecond}
	b.ReportAllocs()
	b.ResetTimer()
	r, err := runProbe(context.Background(), o, 2)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.RecordsPerSec(), "records/s")
}

// BenchmarkPayload is the one-off cost of the shared record value. The
// message -> kgo.Record mapping of kafka_eos (output.toRecords: topic, key and
// partition interpolation, metadata headers) is not exported, so it cannot be
// measured from this package; it belongs in output/ (noted for its owner).
func BenchmarkPayload(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = payload(1024)
	}
}

// BenchmarkConsumeKfake reads b.N records of 100 B (written in
// transactions) with read_committed on kfake: kafka_native through a Benthos
// stream into a counting output, and the raw franz-go poll loop. As above,
// the figures include kfake's own work; compare the two.
//
//	go test -run X -bench ConsumeKfake -benchtime 500000x ./integration/bench/
func BenchmarkConsumeKfake(b *testing.B) {
	for _, kind := range []string{"native", "native_arrow", "rawconsume"} {
		b.Run(kind, func(b *testing.B) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			o := options{brokers: c.ListenAddrs()[0], topic: "bench", records: b.N, size: 100, interval: time.Second}
			if _, err := runProbe(context.Background(), o, 2); err != nil {
				b.Fatal(err)
			}
			o.records = b.N + 2 // the probe's warm-up records
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			var r result
			if kind != "rawconsume" {
				r, err = runPipeline(context.Background(), kind, o)
			} else {
				r, err = runRawConsume(context.Background(), o)
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(r.RecordsPerSec(), "records/s")
			// allocs/op rounded to an integer hides what a change of
			// a fraction of an allocation per record does: the same
			// count (MemStats.Mallocs, tiny objects included) with
			// two decimals.
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/record")
		})
	}
}

// BenchmarkCopyKfake is the exactly-once copy of the harness's copy rows
// (kafka_native -> kafka_eos in Kafka-to-Kafka mode, partitions kept) on
// kfake: per message against Arrow batches, on b.N records of 100 B written
// in transactions. allocs/op and B/op are per record for the whole process
// (kfake included, the same for both); allocs/record is the span from the
// first message to the end of the stream, as in the harness.
//
//	go test -run X -bench CopyKfake -benchtime 200000x ./integration/bench/
func BenchmarkCopyKfake(b *testing.B) {
	for _, kind := range []string{"copy_message", "copy_arrow"} {
		b.Run(kind, func(b *testing.B) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench", "copy"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			// compression: the -compression flag's default, which
			// the pipeline's config needs.
			o := options{brokers: c.ListenAddrs()[0], topic: "bench", records: b.N, size: 100, interval: time.Second, compression: "none"}
			if _, err := runProbe(context.Background(), o, 2); err != nil {
				b.Fatal(err)
			}
			o.records, o.interval, o.copyTopic = b.N+2, 100*time.Millisecond, "copy"
			b.ReportAllocs()
			b.ResetTimer()
			r, err := runPipeline(context.Background(), kind, o)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if r.Total != int64(b.N+2) {
				b.Fatalf("copied %d records, want %d", r.Total, b.N+2)
			}
			b.ReportMetric(r.RecordsPerSec(), "records/s")
			b.ReportMetric(r.AllocsPerRecord, "allocs/record")
		})
	}
}
