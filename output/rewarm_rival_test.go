package output

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// An epoch commits on a client that is then spent (its EndTxn's answer was
// lost: the in-doubt retry establishes the commit, and the slot gets a new
// client before its next epoch), and the instance, frozen after the commit,
// is fenced meanwhile by another that initialises the slot's transactional
// id. The new client's InitProducerID would take the id back from that
// instance (fencing a live owner), and the zombie would write its pending
// batches there. The output stops as a zombie instead, without an
// InitProducerID for the id, and the other instance commits on it.
func TestRewarmAfterCommitNotStealing(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			fc, restore := catchFatal(t)
			defer restore()
			c := newCluster(t, tv.opts...)
			brokers := c.ListenAddrs()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			a, slot, n := outputLosingCommitAnswer(ctx, t, brokers)
			var inits *atomic.Int32
			var rival *rivalInstance
			var rerr error
			a.hooks = &testHooks{atStep: func(s commitStep, m uint64) error {
				if s != stepEnded || m != n {
					return nil
				}
				// Frozen after the commit: the other instance
				// takes the transactional id.
				rival, rerr = takeID(ctx, brokers, slot.id)
				inits = countInits(c, slot.id)
				return nil
			}}
			werr := a.WriteBatch(ctx, batchOf("b", 2))
			if rerr != nil {
				t.Fatalf("the other instance's InitProducerID: %v", rerr)
			}
			if rival == nil {
				t.Fatal("the commit never reached the hook")
			}
			defer rival.cl.Close()
			if werr != nil {
				t.Errorf("the committed epoch's batch: %v, want it acked", werr)
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
		})
	}
}

// As above, but the other instance initialises the transactional id after the
// check that found none and before the new client's InitProducerID, which
// then takes the id from it (fencing it: nothing can prevent that once the
// request is sent). The new client's epoch, two above the one the check saw,
// shows it: the output stops as a zombie with the new client unused, so it
// leaves no transaction open and writes nothing over the other instance.
func TestRewarmAfterCommitRivalBetweenCheckAndInit(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			fc, restore := catchFatal(t)
			defer restore()
			c := newCluster(t, tv.opts...)
			brokers := c.ListenAddrs()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			a, slot, n := outputLosingCommitAnswer(ctx, t, brokers)
			var inits atomic.Int32
			var rival *kgo.Client
			var rpid int64
			var repoch int16
			var rerr error
			rivalDone := make(chan struct{})
			a.hooks = &testHooks{atStep: func(s commitStep, m uint64) error {
				if s != stepEnded || m != n {
					return nil
				}
				c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					req := kreq.(*kmsg.InitProducerIDRequest)
					if req.TransactionalID == nil || *req.TransactionalID != slot.id || inits.Add(1) != 1 {
						return nil, nil, false
					}
					// The slot's re-initialisation, held until the
					// other instance has taken the id.
					go func() {
						defer close(rivalDone)
						rival, rerr = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(slot.id),
							kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic(testTopic))
						if rerr == nil {
							rpid, repoch, rerr = rival.ProducerID(ctx)
						}
					}()
					c.SleepControl(func() { <-rivalDone })
					return nil, nil, false
				})
				return nil
			}}
			werr := a.WriteBatch(ctx, batchOf("b", 2))
			if werr != nil {
				t.Errorf("the committed epoch's batch: %v, want it acked", werr)
			}
			for deadline := time.Now().Add(20 * time.Second); fc.err() == nil && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case <-rivalDone:
			case <-ctx.Done():
				t.Fatal("the slot was never re-initialised")
			}
			if rival != nil {
				defer rival.Close()
			}
			if rerr != nil {
				t.Fatalf("the other instance's InitProducerID: %v", rerr)
			}
			var fe *FencedError
			if !errors.As(fc.err(), &fe) || fe.TransactionalID != slot.id {
				t.Errorf("stopped with %v, want a zombie stop (FencedError) on %q", fc.err(), slot.id)
			}
			if got := inits.Load(); got != 2 {
				t.Errorf("%d InitProducerID for %q, want 2 (the re-initialisation's and the other instance's)", got, slot.id)
			}
			// The re-initialisation bumped the other instance's epoch
			// once and sent nothing after it.
			obs, err := a.describe(ctx, slot.id)
			if err != nil || obs.ProducerID != rpid || obs.ProducerEpoch != repoch+1 || obs.State != txnstate.BrokerEmpty {
				t.Errorf("broker shows %+v (%v), want Empty at producer id %d epoch %d", obs, err, rpid, repoch+1)
			}
		})
	}
}

// outputLosingCommitAnswer starts an output on brokers that has committed one
// epoch, and whose next epoch's commit (epoch n, on slot) is applied with its
// answer lost: the in-doubt path establishes it and the slot gets a new
// client.
func outputLosingCommitAnswer(ctx context.Context, t *testing.T, brokers []string) (*output, *slot, uint64) {
	t.Helper()
	a := newTestOutput(t, newResources(), yamlFor(brokers, testTopic, "rewarm", ""))
	writeReplaying(ctx, t, a, batchOf("a", 2))
	a.mu.Lock()
	n := a.nextEpoch
	slot := a.slots[txnstate.SlotFor(n, len(a.slots))]
	a.mu.Unlock()
	a.endTxn = func(cl *kgo.Client, ctx context.Context, how kgo.TransactionEndTry) error {
		if err := cl.EndTransaction(ctx, how); err != nil {
			return err
		}
		return context.DeadlineExceeded
	}
	return a, slot, n
}
