package output

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/txnstate"
)

func TestCommittedEpochsVisible(t *testing.T) {
	c := newCluster(t)
	res := newResources()
	o := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "app", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 5 {
		if err := o.WriteBatch(ctx, batchOf(string(rune('a'+i)), 10)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	if len(got) != 50 {
		t.Fatalf("read_committed saw %d records, want 50", len(got))
	}
	// Every slot record is COMMITTED, and epochs were numbered in order.
	var epochs []uint64
	for n := range 2 {
		r, ok := slotRecord(t, o, n)
		if !ok {
			continue
		}
		if r.State != txnstate.Committed {
			t.Fatalf("slot %d: %s", n, r.State)
		}
		epochs = append(epochs, r.Epoch)
	}
	sort.Slice(epochs, func(i, j int) bool { return epochs[i] < epochs[j] })
	if len(epochs) != 2 || epochs[1] != 5 {
		t.Fatalf("slot epochs %v, want [4 5]", epochs)
	}
}

func TestEmptyBatchNeverCommits(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", ""))
	if err := o.WriteBatch(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := slotRecord(t, o, 0); ok {
		t.Fatal("an empty batch reached PREPARE")
	}
	if o.nextEpoch != 1 {
		t.Fatalf("an epoch was opened for an empty batch (next %d)", o.nextEpoch)
	}
}

func TestConcurrentBatchesShareEpochs(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "max_in_flight: 8\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 40)
	for i := range 40 {
		go func() { errs <- o.WriteBatch(ctx, batchOf(string(rune('A'+i)), 5)) }()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	if len(got) != 200 {
		t.Fatalf("saw %d, want 200", len(got))
	}
	if o.nextEpoch-1 >= 40 {
		t.Fatalf("%d epochs for 40 concurrent batches: no batching into epochs", o.nextEpoch-1)
	}
}

func TestFailingEpochNacksAndAbortsLater(t *testing.T) {
	c := newCluster(t)
	// A topic that does not exist fails its record: the epoch aborts.
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "max_in_flight: 4\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := batchOf("bad", 3)
	bad[1].MetaSetMut("topic", "missing")
	o.conf.topic = mustInterp(t, `${! meta("topic").or("out") }`)
	err := o.WriteBatch(ctx, bad)
	if err == nil {
		t.Fatal("a batch with a record to a missing topic was acked")
	}
	var re *RecordError
	if !errors.As(err, &re) || re.Topic != "missing" {
		t.Fatalf("error does not name the topic: %v", err)
	}
	if !errors.Is(err, ErrEpochAborted) {
		t.Fatalf("not an epoch abort: %v", err)
	}
	// The output keeps working and nothing of the aborted epoch is visible.
	if err := o.WriteBatch(ctx, batchOf("good", 4)); err != nil {
		t.Fatal(err)
	}
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	for _, v := range got {
		if v[:3] == "bad" {
			t.Fatalf("record of an aborted epoch visible: %s", v)
		}
	}
	if len(got) != 4 {
		t.Fatalf("saw %v, want the 4 good records", got)
	}
}
