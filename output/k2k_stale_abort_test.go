package output

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/txnstate"
)

// TestK2KStaleAbortedRecordNotAContradiction: a slot's record can still say
// PREPARED for an epoch the instance aborted and replayed long ago (its
// PREPARE write timed out and landed late, over the ABORTED written after it
// or over the slot's later epochs). Recovery finds that epoch aborted and a
// later in-doubt epoch committed: no contradiction, and every start stopped on
// it before. The aborted epoch's offsets were to commit in its own
// transaction, so its abort moved none of them, whether the group's committed
// offsets are past its source offsets since (its batches were committed
// again) or not (the group is behind them: its records are read again from
// the group's offset; a later instance, a rival of a woken zombie, committed
// epochs from there).
func TestK2KStaleAbortedRecordNotAContradiction(t *testing.T) {
	for _, tc := range []struct {
		name string
		// behind: the stale record's source offset lies past what the
		// group committed: its range is not committed yet.
		behind bool
	}{
		{"replayed since", false},
		{"group behind it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Transaction version 0: an epoch open at restart is aborted
			// in Kafka-to-Kafka mode (and the stale record's slot shows a
			// later transaction, so the probe finds it aborted).
			c := newCluster(t, kfake.SeedTopics(3, k2kIn), kfake.MaxVersions(kversion.V3_9_0()))
			brokers := c.ListenAddrs()
			res := newResources()
			const txnID = "k2k-stale"
			yaml := baseYAML(brokers, txnID, "consumer_group: "+k2kGroup)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// Epoch 1 (slot 1) is PREPAREd and dies open.
			a := newUnconnected(t, res, yaml)
			a.hooks = crashAt(stepPrepared, 1)
			if err := a.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 0}}); err != nil {
				t.Fatal(err)
			}
			if err := a.WriteBatch(ctx, spanBatch("x", 0, 0, 10, 4)); !errors.Is(err, errCrash) {
				t.Fatalf("write: %v, want the crash", err)
			}
			stale, ok := slotRecord(t, a, 1)
			if !ok || stale.Epoch != 1 || stale.State != txnstate.Prepared || len(stale.SourceOffsets) != 1 {
				t.Fatalf("slot 1 holds %+v, want epoch 1 PREPARED with its source offsets", stale)
			}
			handover.ReleaseCommitTakeover(res, k2kGroup, a)

			// The next instance aborts epoch 1 and replays its range
			// (epoch 2, slot 0), commits epoch 3 (slot 1), and dies after
			// the EndTxn of epoch 4 (slot 0): committed, still PREPARED.
			b := newUnconnected(t, res, yaml)
			if err := b.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			if r, _ := slotRecord(t, b, 1); r.Epoch != 1 || r.State != txnstate.Aborted {
				t.Fatalf("slot 1 after recovery: %+v, want epoch 1 ABORTED", r)
			}
			if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 0}}); err != nil {
				t.Fatal(err)
			}
			if err := b.WriteBatch(ctx, spanBatch("x", 0, 0, 10, 4)); err != nil {
				t.Fatal(err)
			}
			if err := b.WriteBatch(ctx, spanBatch("z", 0, 10, 15, 2)); err != nil {
				t.Fatal(err)
			}
			b.hooks = crashAt(stepEnded, 4)
			if err := b.WriteBatch(ctx, spanBatch("y", 0, 15, 20, 3)); !errors.Is(err, errCrash) {
				t.Fatalf("write: %v, want the crash", err)
			}
			if r, _ := slotRecord(t, b, 0); r.Epoch != 4 || r.State != txnstate.Prepared {
				t.Fatalf("slot 0: %+v, want epoch 4 PREPARED", r)
			}
			if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] != 20 {
				t.Fatalf("committed %v, want 0:20", got)
			}
			handover.ReleaseCommitTakeover(res, k2kGroup, b)

			// Epoch 1's PREPARE lands late, over slot 1's later records.
			if tc.behind {
				stale.SourceOffsets[0].Offset = 100
			}
			if err := b.store.writeSlot(ctx, 1, stale); err != nil {
				t.Fatal(err)
			}

			o := newUnconnected(t, res, yaml)
			if err := o.Connect(ctx); err != nil {
				t.Fatalf("start: %v", err)
			}
			checkStaleResolved(t, o, brokers)
		})
	}
}

// checkStaleResolved checks the start after a stale PREPARED record of epoch 1
// (slot 1) and epoch 4 committed in doubt (slot 0), with x 4, z 2 and y 3
// records written: epoch 4 marked committed, epoch 1 aborted, next epoch 5.
func checkStaleResolved(t *testing.T, o *output, brokers []string) {
	t.Helper()
	if r, _ := slotRecord(t, o, 0); r.Epoch != 4 || r.State != txnstate.Committed {
		t.Fatalf("slot 0: %+v, want epoch 4 COMMITTED", r)
	}
	if r, _ := slotRecord(t, o, 1); r.Epoch != 1 || r.State != txnstate.Aborted {
		t.Fatalf("slot 1: %+v, want epoch 1 ABORTED", r)
	}
	if o.nextEpoch != 5 {
		t.Fatalf("next epoch %d, want 5", o.nextEpoch)
	}
	n := map[string]int{}
	for _, v := range readCommitted(t, brokers, testTopic) {
		n[v[:1]]++
	}
	if n["x"] != 4 || n["z"] != 2 || n["y"] != 3 {
		t.Fatalf("visible %v, want x 4, z 2, y 3", n)
	}
}
