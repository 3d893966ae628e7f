package output

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// bumpEpochTo drives transactional id's producer epoch to at least target
// with empty aborts (EndTxn v5 bumps the epoch on every call, TV2).
func bumpEpochTo(t *testing.T, brokers []string, id string, target int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	init := kmsg.NewPtrInitProducerIDRequest()
	init.TransactionalID = &id
	init.TransactionTimeoutMillis = 30000
	iresp, err := init.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(iresp.ErrorCode)
	}
	if err != nil {
		t.Fatal(err)
	}
	pid, epoch := iresp.ProducerID, iresp.ProducerEpoch
	for epoch < target {
		end := kmsg.NewPtrEndTxnRequest()
		end.TransactionalID, end.ProducerID, end.ProducerEpoch, end.Commit = id, pid, epoch, false
		resp, err := end.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			t.Fatalf("bumping %s at epoch %d: %v", id, epoch, err)
		}
		pid, epoch = resp.ProducerID, resp.ProducerEpoch
	}
}

// Under TV2 every EndTxn spends a producer epoch, so a slot's epoch overflows
// within hours at 10 epochs/s: the coordinator then hands out a new producer
// id at epoch 0. The output commits straight through the rollover, stores
// the new id, and recovers an epoch whose EndTxn caused the rollover.
func TestProducerEpochRollover(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 65,000 producer epochs")
	}
	c := newCluster(t)
	brokers := c.ListenAddrs()
	for _, id := range []string{"app-0", "app-1"} {
		bumpEpochTo(t, brokers, id, math.MaxInt16-6)
	}
	res := newResources()
	yaml := baseYAML(brokers, "app", "")
	a := newTestOutput(t, res, yaml)
	if a.clusterTV != txnstate.TV2 {
		t.Fatal("not TV2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// InitProducerID took each slot to MaxInt16-5; slot 1 carries the odd
	// epochs, so epoch 9 is PREPAREd at MaxInt16-1 and its EndTxn rolls the
	// producer id over. It crashes right after that EndTxn.
	seen := map[int64]bool{}
	for i := range 8 {
		if err := a.WriteBatch(ctx, batchOf("roll", 2)); err != nil {
			t.Fatalf("epoch %d: %v", i+1, err)
		}
		r, _ := slotRecord(t, a, txnstate.SlotFor(uint64(i+1), 2))
		seen[r.ProducerID] = true
	}
	a.hooks = crashAt(stepEnded, 9)
	_ = a.WriteBatch(ctx, batchOf("overflow", 3))
	if r, _ := slotRecord(t, a, 1); r.Epoch != 9 || r.ProducerEpoch != math.MaxInt16-1 || r.State != txnstate.Prepared {
		t.Fatalf("epoch 9 record %+v, want PREPARED at producer epoch %d", r, math.MaxInt16-1)
	}

	b := newTestOutput(t, res, yaml)
	r, _ := slotRecord(t, b, 1)
	if r.Epoch != 9 || r.State != txnstate.Committed {
		t.Fatalf("overflow epoch record %+v, want committed", r)
	}
	if b.m.tally.get(metricInDoubtResolved+"/"+outcomeFoundCommitted) != 1 {
		t.Fatal("in-doubt metric")
	}
	// The new instance commits on through the other slot's rollover.
	for i := range 6 {
		if err := b.WriteBatch(ctx, batchOf("after", 1)); err != nil {
			t.Fatalf("epoch %d: %v", 10+i, err)
		}
		r, _ := slotRecord(t, b, txnstate.SlotFor(uint64(10+i), 2))
		if r.State != txnstate.Committed {
			t.Fatalf("epoch %d: %+v", 10+i, r)
		}
		seen[r.ProducerID] = true
	}
	if len(seen) < 4 {
		t.Fatalf("producer ids %v: want both slots rolled over to new ids", seen)
	}
	counts := map[string]int{}
	for _, v := range readCommitted(t, brokers, testTopic) {
		counts[strings.SplitN(v, "-", 2)[0]]++
	}
	if counts["roll"] != 16 || counts["overflow"] != 3 || counts["after"] != 6 {
		t.Fatalf("visible %v, want roll 16, overflow 3, after 6", counts)
	}
}
