package output

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// javaMurmur2 is Kafka's Utils.murmur2 (kafkatest writes it out from the Java
// source, so the test does not trust franz-go to check franz-go).
var javaMurmur2 = kafkatest.JavaMurmur2

// The default partitioner puts a keyed record where the Java client's
// default does: toPositive(murmur2(key)) mod partitions.
func TestDefaultPartitionerIsJavas(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := batchOf("p", 30)
	for i, m := range b {
		m.MetaSetMut("key", fmt.Sprintf("user-%d", i*7919))
	}
	if err := o.WriteBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(testTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	for n < 30 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n++
			want := int32(int64(javaMurmur2(r.Key)&0x7fffffff) % 3)
			if r.Partition != want {
				t.Errorf("key %s on partition %d, Java would pick %d", r.Key, r.Partition, want)
			}
		})
	}
	if n != 30 {
		t.Fatalf("read %d records", n)
	}
}
