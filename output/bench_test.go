package output

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// BenchmarkEpochBoundary shows what an epoch boundary costs with a pre-warmed
// pool: the stall (time a batch waits for the next slot before any of its
// records can be produced) next to the commit latency and next to one
// InitProducerID, which is what every boundary would cost without pooling.
// On kfake by default; on Apache Kafka with BENCH_KAFKA_TV=0|2 and the
// matching KAFKA_BROKERS_TV<n>.
//
//	go test -run X -bench EpochBoundary -benchtime 2000x ./output/
func BenchmarkEpochBoundary(b *testing.B) {
	brokers, topic := benchTarget(b)
	res := newResources()
	yaml := yamlFor(brokers, topic, "bench-"+strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""), "max_in_flight: 8\n")
	o := newTestOutput(b, res, yaml)
	ctx := context.Background()

	// One InitProducerID on a warm cluster: the cost pooling avoids.
	start := time.Now()
	cl, err := o.newSlotClient(ctx, o.conf.transactionalID+"-probe")
	if err != nil {
		b.Fatal(err)
	}
	initNs := time.Since(start)
	cl.Close()

	const writers = 8
	batch := batchOf("bench", 10)
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / writers
	for w := range writers {
		n := per
		if w == 0 {
			n += b.N % writers
		}
		wg.Go(func() {
			for range n {
				if err := o.WriteBatch(ctx, batch); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	epochs := o.m.tally.get(metricEpochsCommitted)
	if epochs == 0 {
		return
	}
	stalls := o.m.tally.get(metricBoundaryStall + "/count")
	b.ReportMetric(float64(epochs), "epochs")
	b.ReportMetric(float64(o.m.tally.get(metricBoundaryStall))/float64(max(stalls, 1)), "stall-ns/epoch")
	b.ReportMetric(float64(o.m.tally.get(metricCommitLatency))/float64(epochs), "commit-ns/epoch")
	b.ReportMetric(float64(initNs.Nanoseconds()), "init-producer-id-ns")
	b.ReportMetric(float64(o.m.tally.get("sealed_by_timer")), "timer-seals")
}

func benchTarget(b *testing.B) ([]string, string) {
	switch tv := os.Getenv("BENCH_KAFKA_TV"); tv {
	case "0", "2":
		addr := kafkatest.Brokers(b, int(tv[0]-'0'))
		return strings.Split(addr, ","), kafkatest.Topic(b, addr, 3)
	}
	c := newCluster(b)
	return c.ListenAddrs(), testTopic
}

// BenchmarkCommitCheck times what the commit check adds to every epoch under
// TV2 (since it asks the broker there too): one DescribeTransactions of the
// slot's transactional id, after a committed epoch, as verifyCommit sends it.
// On kfake by default; on Apache Kafka with BENCH_KAFKA_TV=0|2 and the
// matching KAFKA_BROKERS_TV<n>.
//
//	BENCH_KAFKA_TV=2 go test -run X -bench CommitCheck -benchtime 2000x ./output/
func BenchmarkCommitCheck(b *testing.B) {
	brokers, topic := benchTarget(b)
	o := newTestOutput(b, newResources(), yamlFor(brokers, topic, "bench-check-"+strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""), ""))
	ctx := context.Background()
	if err := o.WriteBatch(ctx, batchOf("check", 1)); err != nil {
		b.Fatal(err)
	}
	id := o.slots[0].id
	b.ResetTimer()
	for range b.N {
		if _, err := o.describe(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPromise is the output's own cost per acknowledged record on the
// produce path: the promise franz-go calls for each record (the first
// offset per partition for the recovery identity, the count the epoch waits
// on), records acknowledged as franz-go does it, partition batch by
// partition batch in offset order.
//
//	go test -run X -bench Promise -benchmem ./output/
func BenchmarkPromise(b *testing.B) {
	const perBatch = 1024
	parts := []string{"orders", "payments", "refunds"}
	recs := make([]*kgo.Record, 0, perBatch*len(parts))
	for p, topic := range parts {
		for i := range perBatch {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Offset: int64(i)})
		}
	}
	ep := newEpoch(1, nil)
	ref := &batchRef{recs: recs}
	promise := ep.promise(ref)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		n := min(len(recs), b.N-i)
		ep.handed(n, false)
		for _, r := range recs[:n] {
			promise(r, nil)
		}
		i += n
	}
	b.StopTimer()
	if len(ep.parts) != min(len(parts), (b.N+perBatch-1)/perBatch) || ep.pending != 0 {
		b.Fatalf("%d partitions recorded, %d records pending", len(ep.parts), ep.pending)
	}
}
