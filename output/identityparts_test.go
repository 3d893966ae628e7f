package output

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/txnstate"
)

// TestRecoveryIdentityNamesEveryPartition: the record an epoch stores in the
// state cache names every partition the epoch wrote, each with the offset of
// its first record there: recovery probes those offsets to tell an in-doubt
// epoch committed from aborted. The promise keeps them while franz-go
// acknowledges the records partition batch by partition batch; an epoch that
// is not the topic's first checks that they are its own offsets, not zero.
func TestRecoveryIdentityNamesEveryPartition(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), baseYAML(brokers, "identity-parts", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, batchOf("a", 300)); err != nil {
		t.Fatal(err)
	}
	s := nextSlot(o)
	if err := o.WriteBatch(ctx, batchOf("b", 300)); err != nil {
		t.Fatal(err)
	}

	// The first offset of batch b in each partition, as a reader sees it.
	want := map[int32]int64{}
	for _, r := range readCommittedRecords(t, brokers, testTopic, 10*time.Second, time.Minute) {
		if r.Value[0] != 'b' {
			continue
		}
		if first, ok := want[r.Partition]; !ok || r.Offset < first {
			want[r.Partition] = r.Offset
		}
	}
	if len(want) != 3 {
		t.Fatalf("batch b reached %d partitions, want 3 (keys k0..k299 over 3 partitions)", len(want))
	}
	rec, ok := slotRecord(t, o, s.n)
	if !ok || rec.State != txnstate.Committed {
		t.Fatalf("slot %d: record %+v (found %v), want the second epoch COMMITTED", s.n, rec, ok)
	}
	got := map[int32]int64{}
	for _, p := range rec.Partitions {
		if p.Topic != testTopic {
			t.Errorf("partition write %+v: topic %q, want %q", p, p.Topic, testTopic)
		}
		got[p.Partition] = p.FirstOffset
	}
	if !maps.Equal(got, want) {
		t.Fatalf("stored first offsets %v, want %v (the epoch's first record in each partition)", got, want)
	}
}
