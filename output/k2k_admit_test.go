package output

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// A batch that merges input batches of one partition out of their order
// (output batching merges replays in the order Benthos retries them) is
// written in source order: its records go to the partition's copy sorted by
// span, each input batch's in its own order. Written in message order, the
// later input batch's records landed before the earlier one's.
func TestK2KMergedBatchWrittenInSourceOrder(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), baseYAML(brokers, "k2k-merged", "consumer_group: "+k2kGroup+"\nmax_in_flight: 1\npartitioner: manual\npartition: '0'\n"))
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0, 1: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	var merged service.MessageBatch
	merged = append(merged, spanBatch("c", 0, 20, 30, 1)...)
	merged = append(merged, spanBatch("p", 1, 0, 5, 1)...)
	merged = append(merged, spanBatch("b", 0, 10, 20, 2)...)
	merged = append(merged, spanBatch("a", 0, 0, 10, 2)...)
	if err := o.WriteBatch(ctx, merged); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] != 30 || got[1] != 5 {
		t.Fatalf("committed %v, want 0:30 1:5", got)
	}
	var p0 []string
	for _, v := range readCommitted(t, brokers, testTopic) {
		if v != "p-0" {
			p0 = append(p0, v)
		}
	}
	if want := []string{"a-0", "a-1", "b-0", "b-1", "c-0"}; !slices.Equal(p0, want) {
		t.Fatalf("source partition 0 copied as %v, want %v", p0, want)
	}
}
