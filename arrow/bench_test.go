package kafkaarrow

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// benchBatch is the number of records per encoded batch: a fetch of one
// partition (1 MiB of 1 KB values, the default partition fetch size).
const benchBatch = 1000

var benchSizes = []int{100, 1000}

// perRecord reports ns/record and allocs/record over b.N batches of n
// records, next to the per-batch allocs/op of b.ReportAllocs.
func perRecord(b *testing.B, n int, run func()) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	records := float64(b.N) * float64(n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/records, "allocs/record")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/records, "B/record")
}

// BenchmarkEncode: a fetch (1000 records, 16 B key, one header) to IPC
// bytes, as the input does, into a reused output slice (the encoder's own
// cost) and into a new slice per batch (what a Benthos message body costs).
func BenchmarkEncode(b *testing.B) {
	for _, size := range benchSizes {
		recs := valueRecords(benchBatch, size)
		b.Run(fmt.Sprintf("value=%dB/reuse", size), func(b *testing.B) {
			enc := NewEncoder()
			var out []byte
			perRecord(b, len(recs), func() {
				var err error
				if out, err = enc.AppendIPC(out[:0], recs); err != nil {
					b.Fatal(err)
				}
			})
			b.SetBytes(int64(len(out)))
		})
		b.Run(fmt.Sprintf("value=%dB/new", size), func(b *testing.B) {
			enc := NewEncoder()
			perRecord(b, len(recs), func() {
				if _, err := enc.AppendIPC(nil, recs); err != nil {
					b.Fatal(err)
				}
			})
		})
		// The same through arrow-go's IPC writer (what AppendIPC did
		// before its direct writer): the reference.
		b.Run(fmt.Sprintf("value=%dB/new-arrowgo", size), func(b *testing.B) {
			enc := NewEncoder()
			perRecord(b, len(recs), func() {
				if _, err := enc.appendViaArrowGo(nil, recs); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkDecode: IPC bytes to a validated Batch, then every row turned
// into a *kgo.Record ready to produce (ProduceRecords), as the output does;
// and, for comparison, a deep copy per batch (Records).
func BenchmarkDecode(b *testing.B) {
	for _, size := range benchSizes {
		in := encode(b, valueRecords(benchBatch, size))
		b.Run(fmt.Sprintf("value=%dB/view", size), func(b *testing.B) {
			dec := NewDecoder()
			perRecord(b, benchBatch, func() {
				batches, err := dec.Decode(in)
				if err != nil {
					b.Fatal(err)
				}
				for _, bt := range batches {
					for i := range bt.Len() {
						_ = bt.Value(i)
						_ = bt.Key(i)
					}
				}
				ReleaseAll(batches)
			})
			b.SetBytes(int64(len(in)))
		})
		b.Run(fmt.Sprintf("value=%dB/produce", size), func(b *testing.B) {
			dec := NewDecoder()
			var out []*kgo.Record
			perRecord(b, benchBatch, func() {
				batches, err := dec.Decode(in)
				if err != nil {
					b.Fatal(err)
				}
				out = out[:0]
				for _, bt := range batches {
					out = bt.ProduceRecords(out, ProduceOptions{Topic: "mirror", Partition: true, Timestamp: true})
				}
				ReleaseAll(batches)
			})
		})
		b.Run(fmt.Sprintf("value=%dB/copy", size), func(b *testing.B) {
			dec := NewDecoder()
			perRecord(b, benchBatch, func() {
				if _, err := dec.DecodeRecords(in); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
