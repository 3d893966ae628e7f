package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCountRecords: the header-only count of the harness's assertions sees
// what a read_committed reader sees: committed and non-transactional records,
// no markers, no aborted records, and a bound inside a batch cuts it.
func TestCountRecords(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := c.ListenAddrs()[0]
	txn, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"), kgo.TransactionalID("x"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	produce := func(p int32, n int, commit bool) {
		t.Helper()
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			txn.Produce(ctx, &kgo.Record{Partition: p, Value: []byte("v")}, nil)
		}
		if err := txn.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 5, true)  // offsets 0-4, marker 5
	produce(0, 3, false) // 6-8 aborted, marker 9
	produce(0, 4, true)  // 10-13, marker 14
	plain, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	recs := make([]*kgo.Record, 7)
	for i := range recs {
		recs[i] = &kgo.Record{Partition: 1, Value: []byte("w")}
	}
	if err := plain.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got, err := countRecords(ctx, cl, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 9 || got[1] != 7 {
		t.Fatalf("counts %v, want 9 and 7", got)
	}
	// Bounds: below the second commit's records, inside the plain batch.
	got, err = countRecords(ctx, cl, "t", map[int32]int64{0: 12, 1: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 7 || got[1] != 3 {
		t.Fatalf("bounded counts %v, want 7 and 3", got)
	}

	// The index answers every bound as the fetch-based count does: both
	// partitions, each offset of the span (markers, the aborted
	// transaction and inside batches included).
	all, idx, err := countIndexed(ctx, cl, "t")
	if err != nil {
		t.Fatal(err)
	}
	if all[0] != 9 || all[1] != 7 {
		t.Fatalf("indexed counts %v, want 9 and 7", all)
	}
	if got, ok := idx.below(nil); !ok || got[0] != 9 || got[1] != 7 {
		t.Fatalf("index without bounds: %v %v, want 9 and 7", got, ok)
	}
	answered := 0
	for b0 := int64(0); b0 <= 15; b0++ {
		for b1 := int64(0); b1 <= 7; b1++ {
			bounds := map[int32]int64{0: b0, 1: b1}
			want, err := countRecords(ctx, cl, "t", bounds)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := idx.below(bounds)
			if !ok {
				continue
			}
			answered++
			if got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("bounds %v: the index says %v, the topic %v", bounds, got, want)
			}
		}
	}
	// Every bound is inside the span and every batch is dense.
	if answered != 16*8 {
		t.Fatalf("the index answered %d of %d bounds", answered, 16*8)
	}
	if _, ok := idx.below(map[int32]int64{0: 16, 1: 0}); ok {
		t.Fatal("the index answered a bound past the last stable offset")
	}
	if _, ok := idx.below(map[int32]int64{2: 0}); ok {
		t.Fatal("the index answered for a partition it does not hold")
	}
}
