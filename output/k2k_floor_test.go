package output

import (
	"context"
	"testing"
	"time"
)

// TestK2KOffsetsOnlyEpochAbortedIsCarriedAgain: positions the input hands
// over with no records (a partition holding only aborted transactions and
// their markers, or a message a dead-letter route took) are committed by an
// epoch of offsets only. The input's periodic commit does not wait for it
// (no deadline) and counts them handed over. If that epoch aborts (its
// PREPARE write fails: the state cache is down for a moment), nothing
// replays it: no batch was in it, and the input never hands the same
// positions over again. Another epoch must carry them, or the group's offset
// stays behind for as long as no new record reaches this output (an idle
// partition: the group's lag never reaches 0, and an unbounded copy's
// restart reads those offsets again).
func TestK2KOffsetsOnlyEpochAbortedIsCarriedAgain(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res, cache := flakyResources(t)
	o := k2kOutput(t, res, brokers, "k2k-only-abort")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	cache.down.Store(true)
	// The periodic hand-over: no deadline, it returns once an epoch is to
	// carry the positions.
	if err := o.CommitOffsets(context.Background(), map[string]map[int32]int64{k2kIn: {0: 12}}); err != nil {
		t.Fatal(err)
	}
	// Its PREPARE write fails; the abort writes ABORTED once the cache is
	// back.
	for cache.failed.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the epoch of offsets only never wrote its PREPARE record")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cache.down.Store(false)
	for o.m.tally.get(metricEpochsAborted) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the epoch of offsets only never aborted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] == 12 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the positions of an aborted epoch of offsets only were never committed: group offsets %v, want 0:12 (%d epochs aborted)",
				groupOffsets(t, brokers, k2kGroup, k2kIn), o.m.tally.get(metricEpochsAborted))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestK2KOffsetsOnlyWhileRejoiningCarriedAfter: positions handed over while
// the group member rejoins its group cannot be stamped, and the epoch of
// offsets only commits nothing; the input does not hand them over again, so
// an epoch after the rejoin must carry them (the member kept the partition:
// nothing else moves the offset of an idle partition).
func TestK2KOffsetsOnlyWhileRejoiningCarriedAfter(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	cl, mem, gen := joinGroup(t, brokers, k2kGroup, k2kIn)
	defer cl.Close()
	o := k2kOutput(t, newResources(), brokers, "k2k-only-rejoin")
	fg := &fakeGroup{owned: map[int32]uint64{0: 1}, gen: gen, member: ""} // rejoining
	o.Member(fg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.CommitOffsets(context.Background(), map[string]map[int32]int64{k2kIn: {0: 12}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the epoch of offsets only finds the member rejoining
	fg.mu.Lock()
	fg.member = mem
	fg.mu.Unlock()
	for {
		if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] == 12 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("positions handed over while the member rejoined were never committed: group offsets %v, want 0:12", groupOffsets(t, brokers, k2kGroup, k2kIn))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
