package statecache

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkLoad measures what a new process pays before its first Get: reading
// a topic of records (distinct keys, 200 byte values) to its end. One op is
// one full load.
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			be := newKfake(b)
			topic := topicName(b)
			be.createTopic(b, topic, 1, "cleanup.policy", "compact")
			cl := be.client(b, kgo.DefaultProduceTopic(topic))
			value := make([]byte, 200)
			ctx := context.Background()
			for i := 0; i < n; i++ {
				cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", i)), Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := be.newCache(b, topic)
				if _, err := c.Get(ctx, "key-0"); err != nil {
					b.Fatal(err)
				}
				if c.Len() != n {
					b.Fatalf("loaded %d keys, want %d", c.Len(), n)
				}
				_ = c.Close(ctx)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkSet measures one durable write (a ProduceSync round trip).
func BenchmarkSet(b *testing.B) {
	be := newKfake(b)
	topic := topicName(b)
	be.createTopic(b, topic, 1, "cleanup.policy", "compact")
	c := be.newCache(b, topic)
	ctx := context.Background()
	value := make([]byte, 200)
	mustSet(b, c, "warm", "up")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Set(ctx, "k", value, nil); err != nil {
			b.Fatal(err)
		}
	}
}
