package output

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// In dedupe mode a batch holding an owed replay among messages of its key that
// arrived before their turn writes the replay and nacks only those messages.
// Nacking it whole made the key's progress depend on a batch holding the owed
// replays first and in order: behind a retry list that replays each nacked
// batch after its own growing wait, merged by output batching with whatever
// else was due, such a batch became rare, and a bounded run crawled a record a
// second or slower (a dead-letter route behind an oversized record, simulation
// seed 7559726458393081020).
func TestDedupeOwedReplayWrittenFromAMixedBatch(t *testing.T) {
	c := newCluster(t)
	res := newResources()
	yaml := baseYAML(c.ListenAddrs(), "partial", "max_message_bytes: 600\n"+dedupeExtra)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := newTestOutput(t, res, yaml)

	// a@1 commits; a@2 cannot be written and holds a@3 back: a@3 is owed.
	if err := o.WriteBatch(ctx, posBatch("a", 1, 1)); err != nil {
		t.Fatal(err)
	}
	b := posBatch("a", 2, 3)
	b[0].SetBytes(make([]byte, 1000))
	if err := o.WriteBatch(ctx, b); err == nil {
		t.Fatal("[a@2 unwritable, a@3] acknowledged whole")
	}

	// a@5 and a@6 arrive around the replay of a@3 and a@4.
	mixed := service.MessageBatch{posBatch("a", 5, 5)[0], posBatch("a", 3, 3)[0], posBatch("a", 4, 4)[0], posBatch("a", 6, 6)[0]}
	err := o.WriteBatch(ctx, mixed)
	var be *service.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("[a@5 a@3 a@4 a@6]: %v, want a batch error naming a@5 and a@6 only", err)
	}
	failed := map[int]error{}
	be.WalkMessages(func(i int, _ *service.Message, err error) bool {
		if err != nil {
			failed[i] = err
		}
		return true
	})
	// a@3 is the replay owed; a@4 is below the held-back a@5, and a@6
	// above it.
	for i, want := range []bool{true, false, false, true} {
		if _, got := failed[i]; got != want {
			t.Fatalf("message %d failed %v, want %v (errors %v)", i, got, want, failed)
		}
		if e := failed[i]; e != nil && !errors.Is(e, ErrAwaitingReplay) {
			t.Fatalf("message %d: %v, want ErrAwaitingReplay", i, e)
		}
	}
	if got := counts(t, c.ListenAddrs()); got["a@3"] != 1 || got["a@4"] != 1 || got["a@5"] != 0 || got["a@6"] != 0 {
		t.Fatalf("after the mixed batch: %v, want a@3 and a@4 once, a@5 and a@6 not yet", got)
	}

	// a@6 before the replay of a@5 waits again; then both are written, once.
	if err := o.WriteBatch(ctx, posBatch("a", 6, 6)); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("a@6 before the replay of a@5: %v, want ErrAwaitingReplay", err)
	}
	if err := o.WriteBatch(ctx, posBatch("a", 5, 6)); err != nil {
		t.Fatalf("[a@5 a@6]: %v", err)
	}
	got := counts(t, c.ListenAddrs())
	wantExactly(t, got, "a", 3, 6)
	if got["a@2"] != 0 || got["a@1"] != 1 {
		t.Fatalf("%v: want a@1 once, the unwritable a@2 never", got)
	}
}
