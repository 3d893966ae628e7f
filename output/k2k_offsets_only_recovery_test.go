package output

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/txnstate"
)

// TestK2KOffsetsOnlyEpochDecidedFromGroup: an epoch of offsets only (positions
// handed over past records that make no message) wrote no record, so the
// Fetch probe has nothing to read, and the coordinator's answer does not
// always identify it: kfake answers Empty at the bumped epoch after a
// transaction version 2 commit and after an abort alike, and Apache Kafka
// forgets a transactional id that stayed idle past
// transactional.id.expiration.ms. Its offsets committed in its own
// transaction, so the group's committed offsets tell: at or past its source
// offsets, committed (or aborted and carried again by a later epoch: nothing
// of it is left to decide either way); behind them, aborted. Every start
// stopped on it before.
func TestK2KOffsetsOnlyEpochDecidedFromGroup(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      commitStep
		abort     bool // the open transaction is aborted after the crash
		want      txnstate.State
		committed int64 // the group's offset of partition 0 at the end
	}{
		{"committed", stepEnded, false, txnstate.Committed, 12},
		{"aborted", stepPrepared, true, txnstate.Aborted, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newK2KCluster(t)
			brokers := c.ListenAddrs()
			res := newResources()
			const txnID = "k2k-only-doubt"
			yaml := baseYAML(brokers, txnID, "consumer_group: "+k2kGroup)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			a := newUnconnected(t, res, yaml)
			crashed := make(chan struct{})
			var once sync.Once
			a.hooks = &testHooks{atStep: func(s commitStep, _ uint64) error {
				if s != tc.step {
					return nil
				}
				once.Do(func() { close(crashed) })
				return errCrash
			}}
			if err := a.Connect(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 0}}); err != nil {
				t.Fatal(err)
			}
			// The epoch of offsets only dies at step (the hand-over
			// returns once an epoch is to carry the positions, before
			// or after the crash).
			if err := a.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 12}}); err != nil && !errors.Is(err, errCrash) {
				t.Fatalf("hand-over: %v", err)
			}
			select {
			case <-crashed:
			case <-ctx.Done():
				t.Fatal("the epoch of offsets only never reached the crash")
			}
			var rec txnstate.Record
			for n := range 2 {
				if r, ok := slotRecord(t, a, n); ok && r.State == txnstate.Prepared {
					rec = r
				}
			}
			if rec.Epoch == 0 || len(rec.Partitions) != 0 || len(rec.SourceOffsets) != 1 || rec.TxnVersion != txnstate.TV2 {
				t.Fatalf("in-doubt record %+v, want a TV2 epoch of offsets only", rec)
			}
			handover.ReleaseCommitTakeover(res, k2kGroup, a) // the process died
			if tc.abort {
				abortRaw(ctx, t, brokers, rec)
			}
			if obs, err := a.describe(ctx, txnID+"-0"); err != nil || txnstate.Decide(rec, obs) != txnstate.Unknown {
				t.Fatalf("the coordinator shows %v (%v): the premise is that it does not identify the epoch", obs, err)
			}

			o := newUnconnected(t, res, yaml)
			if err := o.Connect(ctx); err != nil {
				t.Fatalf("start: %v", err)
			}
			if r, _ := slotRecord(t, o, slotOfID(t, rec.TransactionalID)); r.Epoch != rec.Epoch || r.State != tc.want {
				t.Fatalf("after recovery: %+v, want epoch %d %s", r, rec.Epoch, tc.want)
			}
			if o.nextEpoch != rec.Epoch+1 {
				t.Fatalf("next epoch %d, want %d", o.nextEpoch, rec.Epoch+1)
			}
			if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] != tc.committed {
				t.Fatalf("group offsets %v, want 0:%d", got, tc.committed)
			}
		})
	}
}

// slotOfID returns the slot number of a transactional id "<prefix>-<n>".
func slotOfID(t *testing.T, id string) int {
	t.Helper()
	n, err := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	if err != nil {
		t.Fatalf("transactional id %q: %v", id, err)
	}
	return n
}

// abortRaw ends r's open transaction with an EndTxn(abort) at its producer id
// and epoch, as a transaction timeout would.
func abortRaw(ctx context.Context, t *testing.T, brokers []string, r txnstate.Record) {
	t.Helper()
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.EndTxn), r.TxnVersion.EndTxnMaxVersion())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxVersions(vs))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID = r.TransactionalID
	req.ProducerID = r.ProducerID
	req.ProducerEpoch = r.ProducerEpoch
	req.Commit = false
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("aborting %q: %v", r.TransactionalID, err)
	}
}
