package output

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/txnstate"
)

// TestPlainStaleAbortedRecordNotAContradiction: in plain mode a slot's record
// can still say PREPARED for an epoch that was aborted (its PREPARE write
// timed out and landed late), while a later in-doubt epoch committed. Plain
// mode keeps no order across a failure (a later epoch may commit before an
// aborted one's batches are replayed by the input), so the pair is what a
// correct run leaves: recovery marks the one aborted and the other committed,
// where every start used to stop on it as a contradiction.
func TestPlainStaleAbortedRecordNotAContradiction(t *testing.T) {
	// Transaction version 0: an epoch open at restart is aborted, and the
	// stale record's slot shows a later transaction, so the probe finds it
	// aborted.
	c := newCluster(t, kfake.MaxVersions(kversion.V3_9_0()))
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := yamlFor(brokers, testTopic, "plain-stale", "producer_pool_size: 2\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Epoch 1 (slot 1) is PREPAREd and dies open.
	a := newUnconnected(t, res, yaml)
	a.hooks = crashAt(stepPrepared, 1)
	if err := a.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteBatch(ctx, batchOf("x", 4)); !errors.Is(err, errCrash) {
		t.Fatalf("write: %v, want the crash", err)
	}
	stale, ok := slotRecord(t, a, 1)
	if !ok || stale.Epoch != 1 || stale.State != txnstate.Prepared {
		t.Fatalf("slot 1 holds %+v, want epoch 1 PREPARED", stale)
	}

	// The next instance aborts epoch 1, writes its batch again (epoch 2,
	// slot 0), commits epoch 3 (slot 1), and dies after the EndTxn of
	// epoch 4 (slot 0): committed, still PREPARED.
	b := newUnconnected(t, res, yaml)
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := slotRecord(t, b, 1); r.Epoch != 1 || r.State != txnstate.Aborted {
		t.Fatalf("slot 1 after recovery: %+v, want epoch 1 ABORTED", r)
	}
	if err := b.WriteBatch(ctx, batchOf("x", 4)); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteBatch(ctx, batchOf("z", 2)); err != nil {
		t.Fatal(err)
	}
	b.hooks = crashAt(stepEnded, 4)
	if err := b.WriteBatch(ctx, batchOf("y", 3)); !errors.Is(err, errCrash) {
		t.Fatalf("write: %v, want the crash", err)
	}
	if r, _ := slotRecord(t, b, 0); r.Epoch != 4 || r.State != txnstate.Prepared {
		t.Fatalf("slot 0: %+v, want epoch 4 PREPARED", r)
	}

	// Epoch 1's PREPARE lands late, over slot 1's later records.
	if err := b.store.writeSlot(ctx, 1, stale); err != nil {
		t.Fatal(err)
	}

	o := newUnconnected(t, res, yaml)
	if err := o.Connect(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	checkStaleResolved(t, o, brokers)
}
