package output

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/handover"
)

// TestK2KSplitBatchDrainsThenStops: a processor split an input batch of
// source offsets [0, 4) into two WriteBatch calls carrying its span. The
// second part is recognised: it is still written (its offsets were
// committed with the first part), a batch of a new span is nacked, and once
// the input handed a position past the split batch over (every part
// acknowledged) the output stops with ErrSplitBatch through the fatal path.
// Nothing is lost or written twice: the restart copies the nacked batch.
// Before, the guard did not exist: every part and the new batch were
// written and nothing stopped, so a crash between two parts of a later split
// batch lost records.
func TestK2KSplitBatchDrainsThenStops(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := yamlFor(brokers, testTopic, "k2k-split", "consumer_group: "+k2kGroup+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, res, yaml, k2kIn, 0)
	whole := sourcedOf(k2kIn, "s", 0, 0, 4)
	if err := a.WriteBatch(ctx, whole[:2]); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteBatch(ctx, whole[2:]); err != nil {
		t.Fatalf("second part: %v, want it written (its offsets were committed with the first)", err)
	}
	next := sourcedOf(k2kIn, "s", 0, 4, 6)
	err := a.WriteBatch(ctx, next)
	for i, e := range blamed(next, err) {
		if !errors.Is(e, errSplitRefused) {
			t.Fatalf("message %d of a batch begun after the split: %v, want it nacked with errSplitRefused", i, e)
		}
	}
	if len(blamed(next, err)) != len(next) {
		t.Fatalf("batch begun after the split: %v, want every message nacked", err)
	}
	if fc.err() != nil {
		t.Fatalf("stopped before the input acknowledged the split batch: %v", fc.err())
	}
	// The input acknowledged the split batch (both parts): drained.
	if err := a.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 4}}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(fc.err(), ErrSplitBatch) {
		t.Fatalf("fatal error %v, want ErrSplitBatch", fc.err())
	}
	if err := a.WriteBatch(ctx, sourcedOf(k2kIn, "s", 0, 4, 6)); !errors.Is(err, ErrSplitBatch) {
		t.Fatalf("after the stop: %v, want ErrSplitBatch", err)
	}
	want := map[string]int{"s-0": 1, "s-1": 1, "s-2": 1, "s-3": 1}
	if got := countsIn(t, brokers, testTopic); !maps.Equal(got, want) {
		t.Fatalf("at the stop: visible %v, want %v", got, want)
	}
	committed := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]
	if committed != 4 {
		t.Fatalf("the group's offset is %d, want 4", committed)
	}

	// The restart reads from the committed offset.
	handover.ReleaseCommitTakeover(res, k2kGroup, a)
	restore()
	fc, restore = catchFatal(t)
	defer restore()
	b := startK2K(ctx, t, res, yaml, k2kIn, committed)
	if err := b.WriteBatch(ctx, sourcedOf(k2kIn, "s", 0, committed, 6)); err != nil {
		t.Fatal(err)
	}
	want["s-4"], want["s-5"] = 1, 1
	if got := countsIn(t, brokers, testTopic); !maps.Equal(got, want) {
		t.Fatalf("after the restart: visible %v, want %v", got, want)
	}
	if fc.err() != nil {
		t.Fatalf("restart: %v", fc.err())
	}
}

// TestK2KSplitBatchCrashBeforeSecondPartLoses shows what the guard cannot
// protect (docs/exactly-once.md, "Processors that split a batch"): the
// first part of a split input batch of source offsets [0, 4) commits the
// group's offset at 4, and a crash before the second part reached the
// output loses offsets 2 and 3 (the restart reads from 4). Nothing told the
// first part from a whole batch whose other messages a processor dropped.
// Should a fix make the first part commit no offset past its own records,
// this test fails: change it and the docs with the fix.
func TestK2KSplitBatchCrashBeforeSecondPartLoses(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := yamlFor(brokers, testTopic, "k2k-split-crash", "consumer_group: "+k2kGroup+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, res, yaml, k2kIn, 0)
	whole := sourcedOf(k2kIn, "s", 0, 0, 4)
	if err := a.WriteBatch(ctx, whole[:2]); err != nil {
		t.Fatal(err)
	}
	committed := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]
	handover.ReleaseCommitTakeover(res, k2kGroup, a) // the process dies
	b := startK2K(ctx, t, res, yaml, k2kIn, committed)
	if err := b.WriteBatch(ctx, sourcedOf(k2kIn, "s", 0, committed, 6)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"s-0": 1, "s-1": 1, "s-4": 1, "s-5": 1}
	if got := countsIn(t, brokers, testTopic); committed != 4 || !maps.Equal(got, want) {
		t.Fatalf("the first part committed the group's offset at %d and the restart copied %v; the limitation documented is 4 and %v (offsets 2 and 3 lost)", committed, got, want)
	}
}

// TestK2KSplitProcessorStopsThenRestartCopies: Benthos' split processor
// (parts of 2 messages of input batches of 5) in a Kafka-to-Kafka copy of
// 300 records: the output recognises the split and stops through the fatal
// path with ErrSplitBatch; the copy it leaves is consistent, so that a
// restart without the processor finishes it with every record exactly once
// and the group's lag at 0. Before, the copy ran to its end with nothing
// said, each part committing its whole input batch's offsets.
func TestK2KSplitProcessorStopsThenRestartCopies(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	const n = 300
	fillInput(t, brokers, k2kIn, n)
	s, done := startStream(t, copyYAML(brokers, "k2k-split-stream", false, "\n    - split: { size: 2 }"))
	wait(t, 60*time.Second, "the output's stop on the split", func() bool { return fc.err() != nil })
	if !errors.Is(fc.err(), ErrSplitBatch) {
		t.Fatalf("fatal error %v, want ErrSplitBatch", fc.err())
	}
	stopStream(t, s, done)
	sum := committedSum(t, brokers, k2kGroup, k2kIn)
	t.Logf("the split copy stopped with %d of %d offsets committed", sum, n)
	if sum >= n {
		t.Fatalf("the split copy committed every offset (%d): it did not stop before its end", sum)
	}
	restore()
	fc, restore = catchFatal(t)
	defer restore()
	runStream(t, copyYAML(brokers, "k2k-split-stream", false, ""), 60*time.Second)
	checkCopy(t, brokers, n, func(int) bool { return true })
	if fc.err() != nil {
		t.Fatalf("restart: %v", fc.err())
	}
}
