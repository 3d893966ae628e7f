package output

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

// Crash injection at each step of the commit sequence, under both transaction
// versions, then a new instance recovering from the same state cache. The
// assertions are the outcome (what a read_committed consumer sees), the cache
// and the in-doubt metrics: the decision the brief's table requires.
func TestCrashRecovery(t *testing.T) {
	for _, tv := range []struct {
		name string
		opts []kfake.Opt
		want txnstate.TxnVersion
	}{
		{"tv2", nil, txnstate.TV2},
		{"tv0", []kfake.Opt{kfake.MaxVersions(kversion.V3_9_0())}, txnstate.TV0},
	} {
		for _, tc := range []struct {
			name        string
			step        commitStep
			wantVisible bool
			wantState   txnstate.State // of the crashed epoch's slot record; "" = none
			wantOutcome string         // in-doubt metric incremented at restart
		}{
			// Produced, never PREPAREd: InitProducerID at restart aborts it;
			// nothing was in doubt.
			{"after produce", stepProduced, false, "", ""},
			// PREPAREd, EndTxn never sent: open at (pid, epoch); plain mode
			// aborts it.
			{"after prepare", stepPrepared, false, txnstate.Aborted, outcomeAborted},
			// EndTxn succeeded, COMMITTED never written: found committed.
			{"after end txn", stepEnded, true, txnstate.Committed, outcomeFoundCommitted},
			// COMMITTED written, not acked: nothing in doubt.
			{"after committed", stepCommitted, true, txnstate.Committed, ""},
		} {
			t.Run(tv.name+"/"+tc.name, func(t *testing.T) {
				c := newCluster(t, tv.opts...)
				res := newResources()
				yaml := baseYAML(c.ListenAddrs(), "app", "")
				a := newTestOutput(t, res, yaml)
				if a.clusterTV != tv.want {
					t.Fatalf("detected transaction version %d, want %d", a.clusterTV, tv.want)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// Epoch 1 commits normally; epoch 2 crashes at the step.
				if err := a.WriteBatch(ctx, batchOf("first", 3)); err != nil {
					t.Fatal(err)
				}
				a.hooks = crashAt(tc.step, 2)
				if err := a.WriteBatch(ctx, batchOf("crashed", 4)); err == nil {
					t.Fatal("the crashed epoch's batch was acked")
				}

				b := newTestOutput(t, res, yaml)
				defer func() {
					if n := a.m.tally.get("commit_not_applied") + b.m.tally.get("commit_not_applied"); n > 0 {
						t.Logf("EndTransaction returned success without committing %d times; caught by verifyCommit", n)
					}
				}()
				r, ok := slotRecord(t, b, txnstate.SlotFor(2, 2))
				switch {
				case tc.wantState == "" && ok && r.Epoch == 2:
					t.Fatalf("epoch 2 has a record %+v, want none", r)
				case tc.wantState != "" && (!ok || r.Epoch != 2 || r.State != tc.wantState):
					t.Fatalf("epoch 2 record %+v (found %v), want state %s", r, ok, tc.wantState)
				}
				if ok && r.Epoch == 2 && r.TxnVersion != tv.want {
					t.Fatalf("stored transaction version %d, want %d", r.TxnVersion, tv.want)
				}
				for _, o := range []string{outcomeAborted, outcomeFoundCommitted, outcomeFoundAborted, outcomeResumed} {
					want := int64(0)
					if o == tc.wantOutcome {
						want = 1
					}
					if got := b.m.tally.get(metricInDoubtResolved + "/" + o); got != want {
						t.Errorf("in-doubt %s = %d, want %d", o, got, want)
					}
				}
				// The new instance carries on after the last durable epoch
				// (an epoch never PREPAREd leaves no trace, its number is
				// reused).
				wantNext := uint64(3)
				if tc.step == stepProduced {
					wantNext = 2
				}
				if b.nextEpoch != wantNext {
					t.Fatalf("next epoch %d, want %d", b.nextEpoch, wantNext)
				}
				if err := b.WriteBatch(ctx, batchOf("after", 2)); err != nil {
					t.Fatal(err)
				}
				var first, crashed, after int
				for _, v := range readCommitted(t, c.ListenAddrs(), testTopic) {
					switch {
					case strings.HasPrefix(v, "first"):
						first++
					case strings.HasPrefix(v, "crashed"):
						crashed++
					case strings.HasPrefix(v, "after"):
						after++
					}
				}
				wantCrashed := 0
				if tc.wantVisible {
					wantCrashed = 4
				}
				if first != 3 || crashed != wantCrashed || after != 2 {
					t.Fatalf("visible first=%d crashed=%d after=%d, want 3/%d/2 (an epoch is whole or absent)", first, crashed, after, wantCrashed)
				}
			})
		}
	}
}

// Two epochs in doubt at once (both slots PREPARED) are resolved in epoch
// order: the first found committed, the second still open and aborted.
func TestTwoInDoubtResolvedInOrder(t *testing.T) {
	c := newCluster(t)
	testTwoInDoubt(t, c.ListenAddrs(), testTopic, "app")
}

func testTwoInDoubt(t *testing.T, brokers []string, topic, txnID string) {
	res := newResources()
	yaml := yamlFor(brokers, topic, txnID, "")
	a := newTestOutput(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Epoch 1 commits but its COMMITTED is "lost": rewrite PREPARED after.
	if err := a.WriteBatch(ctx, batchOf("one", 2)); err != nil {
		t.Fatal(err)
	}
	r1, _ := slotRecord(t, a, 1)
	if err := a.store.writeSlot(ctx, 1, r1.WithState(txnstate.Prepared, "")); err != nil {
		t.Fatal(err)
	}
	a.hooks = crashAt(stepPrepared, 2)
	_ = a.WriteBatch(ctx, batchOf("two", 2))

	b := newTestOutput(t, res, yaml)
	if r, _ := slotRecord(t, b, 1); r.State != txnstate.Committed || r.Epoch != 1 {
		t.Fatalf("epoch 1: %+v", r)
	}
	if r, _ := slotRecord(t, b, 0); r.State != txnstate.Aborted || r.Epoch != 2 {
		t.Fatalf("epoch 2: %+v", r)
	}
	if b.m.tally.get(metricInDoubtResolved+"/"+outcomeFoundCommitted) != 1 || b.m.tally.get(metricInDoubtResolved+"/"+outcomeAborted) != 1 {
		t.Fatal("in-doubt metrics")
	}
	var one, two int
	for _, v := range readCommitted(t, brokers, topic) {
		switch {
		case strings.HasPrefix(v, "one"):
			one++
		case strings.HasPrefix(v, "two"):
			two++
		}
	}
	if one != 2 || two != 0 {
		t.Fatalf("visible one=%d two=%d, want 2/0", one, two)
	}
}

// writeUnknownInDoubt writes into slot 1 of transactional id prefix "app", in
// the state cache of res, the PREPARED record of an epoch (7) whose producer
// (424242, epoch 3) and records the broker never saw: an in-doubt epoch that
// neither DescribeTransactions nor the Fetch probe can identify, for the next
// start of an output "app" on res to meet.
func writeUnknownInDoubt(ctx context.Context, t testing.TB, res *service.Resources) {
	t.Helper()
	ghost := txnstate.Record{
		Format: txnstate.FormatVersion, TransactionalID: "app-1", Epoch: 7, ProducerID: 424242, ProducerEpoch: 3,
		TxnVersion: txnstate.TV2, State: txnstate.Prepared,
		Partitions: []txnstate.PartitionWrite{{Topic: testTopic, Partition: 0, FirstOffset: 1000, ProducerID: 424242}},
	}
	store := &stateStore{res: res, cache: "state", prefix: "app"}
	if err := store.writeSlot(ctx, 1, ghost); err != nil {
		t.Fatal(err)
	}
}

// An in-doubt epoch that neither DescribeTransactions nor the Fetch probe
// identifies (its records are gone) never defaults to aborted: Connect fails
// with an error naming the epoch and the id, then stops the pipeline; the
// operator's recovery_override lets it start.
func TestUnknownInDoubtStopsThenOverride(t *testing.T) {
	var raised error
	restore := fatal.SetHandler(func(err error) { raised = err })
	defer restore()
	c := newCluster(t)
	res := newResources()
	yaml := baseYAML(c.ListenAddrs(), "app", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	writeUnknownInDoubt(ctx, t, res)
	o := newUnconnected(t, res, yaml)
	for i := 1; i <= inDoubtAttempts; i++ {
		err := o.Connect(ctx)
		var ide *InDoubtError
		if !errors.As(err, &ide) || ide.Epoch != 7 || ide.TransactionalID != "app-1" {
			t.Fatalf("attempt %d: %v, want an InDoubtError for epoch 7 of app-1", i, err)
		}
		isFatal := errors.As(err, new(*fatal.Error))
		if isFatal != (i == inDoubtAttempts) {
			t.Fatalf("attempt %d: fatal=%v", i, isFatal)
		}
	}
	if raised == nil {
		t.Fatal("not raised")
	}
	if r, _ := slotRecord(t, o, 1); r.State != txnstate.Prepared {
		t.Fatalf("an unknown epoch was decided: %+v", r)
	}

	b := newTestOutput(t, res, yaml+"recovery_override: force_aborted\n")
	if r, _ := slotRecord(t, b, 1); r.State != txnstate.Aborted || !strings.Contains(r.Reason, "operator") {
		t.Fatalf("after the override: %+v", r)
	}
	if b.m.tally.get(metricInDoubtResolved+"/"+outcomeForcedAborted) != 1 {
		t.Fatal("in-doubt metric")
	}
	if b.nextEpoch != 8 {
		t.Fatalf("next epoch %d, want 8", b.nextEpoch)
	}
}
