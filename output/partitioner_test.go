package output

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// javaMurmur2 is Kafka's Utils.murmur2, written out from the Java source so
// the test does not trust franz-go to check franz-go.
func javaMurmur2(data []byte) int32 {
	length := len(data)
	const m = 0x5bd1e995
	h := uint32(0x9747b28c) ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> 24
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

func TestJavaMurmur2Vectors(t *testing.T) {
	// Kafka's UtilsTest.testMurmur2.
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := javaMurmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

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
