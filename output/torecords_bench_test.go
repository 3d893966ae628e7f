package output

import (
	"fmt"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
)

// BenchmarkToRecords measures the message -> kgo.Record mapping of one batch,
// per record, with an interpolated topic, key and partition. Its cost must
// stay linear in the batch size: Benthos' batch.TryInterpolatedString copies
// the whole batch on every call (quadratic per batch), so the mapping builds
// one InterpolationExecutor per batch instead.
func BenchmarkToRecords(b *testing.B) {
	for _, size := range []int{64, 1024} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			o := newUnconnected(b, newResources(), fmt.Sprint(`
seed_brokers: [ 127.0.0.1:1 ]
topic: '${! metadata("t") }'
key: '${! metadata("key") }'
partitioner: manual
partition: '${! metadata("p") }'
transactional_id: bench
state_cache: state
`))
			batch := batchOf("v", size)
			for i := range batch {
				batch[i].MetaSetMut("t", "out")
				batch[i].MetaSetMut("p", "0")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				if w := o.toRecords(batch); len(w.failed) > 0 {
					b.Fatal(w.failed)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/record")
		})
	}
}

// BenchmarkToRecordsArrow is the same mapping for the Arrow path: one
// message holding size rows (an Arrow IPC stream as kafka_native format:
// arrow emits it) against size plain messages, with the same values. The
// Arrow message is decoded and validated, and its rows become records that
// alias the message's bytes (Batch.ProduceRecords: a constant number of
// allocations per message, none per record).
//
//	go test -run X -bench 'ToRecords(Arrow)?$' ./output/
func BenchmarkToRecordsArrow(b *testing.B) {
	for _, size := range []int{64, 1024} {
		rows := make([]*kgo.Record, size)
		for i := range rows {
			rows[i] = &kgo.Record{Topic: "in", Partition: 1, Offset: int64(i), Key: []byte(fmt.Sprintf("k%d", i)),
				Value: []byte(fmt.Sprintf("v-%d", i)), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
		}
		body, err := kafkaarrow.NewEncoder().AppendIPC(nil, rows)
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range []string{"arrow", "arrow-auto", "message"} {
			b.Run(fmt.Sprintf("%s/rows=%d", mode, size), func(b *testing.B) {
				conf := `
seed_brokers: [ 127.0.0.1:1 ]
topic: '${! metadata("kafka_topic") }'
partitioner: manual
transactional_id: bench
state_cache: state
`
				switch mode {
				case "arrow":
					// The rows carry key and partition.
					conf += "input_format: arrow\n"
				case "arrow-auto":
					// Marked by kafka_native (handover.MarkArrow).
					conf += "partition: '${! metadata(\"kafka_partition\") }'\n"
				default:
					conf += "input_format: message\npartition: '${! metadata(\"kafka_partition\") }'\nkey: '${! metadata(\"kafka_key\") }'\n"
				}
				o := newUnconnected(b, newResources(), conf)
				var batch service.MessageBatch
				if mode != "message" {
					m := handover.MarkArrow(service.NewMessage(body))
					m.MetaSetMut("kafka_topic", "out")
					batch = service.MessageBatch{m}
				} else {
					for _, r := range rows {
						m := service.NewMessage(r.Value)
						m.MetaSetMut("kafka_topic", "out")
						m.MetaSetMut("kafka_partition", "1")
						m.MetaSetMut("kafka_key", string(r.Key))
						batch = append(batch, m)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for n := 0; n < b.N; n++ {
					tr := o.toRecords(batch)
					if len(tr.failed) > 0 {
						b.Fatal(tr.failed)
					}
					if len(tr.recs) != size {
						b.Fatalf("%d records", len(tr.recs))
					}
					kafkaarrow.ReleaseAll(tr.arrow)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/record")
			})
		}
	}
}
