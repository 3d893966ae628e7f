package output

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/txnstate"
)

// An epoch aborts after its PREPARE (it reached its local deadline) and its
// abort ends cleanly, so no rival check runs then; the ABORTED write of its
// slot record then fails (the cache is down), which gives the slot a new
// client before its next epoch. While the write is retried, the instance is
// fenced by another that initialises the slot's transactional id. The new
// client's InitProducerID would take the id back from that instance: the
// output asks the broker first, stops as a zombie, sends no InitProducerID for
// the id, and the other instance commits on it.
func TestAbortedWriteFailedNotStealing(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			fc, restore := catchFatal(t)
			defer restore()
			c := newCluster(t, tv.opts...)
			brokers := c.ListenAddrs()
			res, cache := flakyResources(t)
			const txnTimeout = 6 * time.Second
			yaml := strings.Replace(baseYAML(brokers, "abortwrite", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: 6s", 1)
			a := newTestOutput(t, res, yaml)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			writeReplaying(ctx, t, a, batchOf("a", 2))

			a.mu.Lock()
			n := a.nextEpoch
			slot := a.slots[txnstate.SlotFor(n, len(a.slots))]
			a.mu.Unlock()
			a.hooks = &testHooks{atStep: func(s commitStep, m uint64) error {
				if s != stepPrepared || m != n {
					return nil
				}
				// PREPARE is durable. Hold the epoch past its local
				// deadline (as the output measures it), so that it
				// aborts with a PREPARED record, and take the cache
				// down for the ABORTED write.
				time.Sleep(time.Until(epochOpened(a, m).Add(txnTimeout-timeoutMargin(txnTimeout))) + 20*time.Millisecond)
				cache.down.Store(true)
				return nil
			}}
			// Once the ABORTED write failed (the abort's EndTxn is
			// behind it), the other instance takes the transactional
			// id, and the cache comes back.
			var rival *rivalInstance
			var inits *atomic.Int32
			rerr := errors.New("the ABORTED write never failed")
			rivalDone := make(chan struct{})
			go func() {
				defer close(rivalDone)
				for cache.failed.Load() == 0 {
					if ctx.Err() != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				rival, rerr = takeID(ctx, brokers, slot.id)
				inits = countInits(c, slot.id)
				cache.down.Store(false)
			}()
			werr := a.WriteBatch(ctx, batchOf("b", 2))
			<-rivalDone
			if rerr != nil {
				t.Fatalf("the other instance's InitProducerID: %v", rerr)
			}
			defer rival.cl.Close()
			// Nacked: by the stop, which comes before the abort's nack.
			var wfe *FencedError
			if !errors.As(werr, &wfe) && !errors.Is(werr, errEpochDeadline) {
				t.Errorf("the aborted epoch's batch: %v, want it nacked (the zombie stop or the deadline abort)", werr)
			}
			// Without the check, the output goes on (no stop): the
			// wait ends at its deadline and the checks below say why.
			for deadline := time.Now().Add(20 * time.Second); fc.err() == nil && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			var fe *FencedError
			if !errors.As(fc.err(), &fe) || fe.TransactionalID != slot.id {
				t.Errorf("stopped with %v, want a zombie stop (FencedError) on %q", fc.err(), slot.id)
			}
			if got := inits.Load(); got != 0 {
				t.Errorf("%d InitProducerID for %q after the other instance took it, want none", got, slot.id)
			}
			rival.checkStillOwns(ctx, t, a)
			if r, ok, err := a.store.readSlot(ctx, slot.n); err != nil || !ok || r.State != txnstate.Aborted || r.Epoch != n {
				t.Errorf("slot record %+v (found %v, %v), want epoch %d ABORTED", r, ok, err, n)
			}
		})
	}
}
