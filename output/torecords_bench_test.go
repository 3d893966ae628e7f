package output

import (
	"fmt"
	"testing"
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
				if _, err := o.toRecords(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/record")
		})
	}
}
