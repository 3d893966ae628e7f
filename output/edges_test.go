package output

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/txnstate"
)

// An EndTransaction(commit) reported successful, after which the broker shows
// the transactional id at another producer's state (here: the commit really
// was an abort, and another instance initialised the id before the check), is
// not a confirmed commit: the batch is never acked (invariant I2). On the
// original code verifyCommit returned nil for CommitNotOurs and the batch was
// acked with nothing committed.
func TestCommitNotOursNotAcked(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c := newCluster(t, tv.opts...)
			testCommitNotOursNotAcked(t, c.ListenAddrs(), testTopic, "notours")
		})
	}
}

func TestKafkaCommitNotOursNotAcked(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testCommitNotOursNotAcked(t, env.brokers, env.topic, env.txnID)
	})
}

func testCommitNotOursNotAcked(t *testing.T, brokers []string, topic, txnID string) {
	fc, restore := catchFatal(t)
	defer restore()
	a := newTestOutput(t, newResources(), yamlFor(brokers, topic, txnID, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, batchOf("a", 2)); err != nil {
		t.Fatal(err)
	}
	a.endTxn = func(cl *kgo.Client, ctx context.Context, how kgo.TransactionEndTry) error {
		if how != kgo.TryCommit {
			return cl.EndTransaction(ctx, how)
		}
		// The commit turns into an abort that reports success, and
		// another instance takes the id before the output looks.
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			return err
		}
		id := ""
		for _, s := range a.slots {
			if s.cl == cl {
				id = s.id
			}
		}
		other, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(id))
		if err != nil {
			return err
		}
		defer other.Close()
		_, _, err = other.ProducerID(ctx)
		return err
	}
	done := make(chan error, 1)
	go func() { done <- a.WriteBatch(ctx, batchOf("b", 2)) }()
	var werr error
	returned := false
	kafkatest.Wait(t, 60*time.Second, func() bool {
		select {
		case werr = <-done:
			returned = true
			return true
		default:
		}
		return fc.err() != nil
	})
	if returned && werr == nil {
		t.Fatal("acked an epoch the broker shows at another producer (nothing confirms its commit)")
	}
	t.Logf("returned=%v err=%v fatal=%v", returned, werr, fc.err())
}

// A second instance's InitProducerID on a slot whose transaction is still
// open fences it, and until that instance's retried InitProducerID bumps the
// epoch again the broker shows our producer id aborted at e+1: the state a
// coordinator timeout leaves too. A timeout cannot happen before the epoch has
// been open transaction_timeout, so an earlier fence is a zombie's: the output
// stops (FencedError) instead of re-initialising the slot, which would fence
// the live instance in turn. On the original code ClassifyFence read that
// state as our own timeout: the epoch was nacked and the slot re-initialised.
func TestTakeoverNotOwnTimeout(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c := newCluster(t, tv.opts...)
			testTakeoverNotOwnTimeout(t, c.ListenAddrs(), testTopic, "takeover", c)
		})
	}
}

func TestKafkaTakeoverNotOwnTimeout(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testTakeoverNotOwnTimeout(t, env.brokers, env.topic, env.txnID, nil)
	})
}

// c, if set, is the kfake cluster: its InitProducerID fences and bumps at
// once (Empty at the new epoch, which reads as a zombie already), so its
// DescribeTransactions is made to answer what Apache Kafka shows in the window
// before the other instance's retry: CompleteAbort at our producer id, e+1.
func testTakeoverNotOwnTimeout(t *testing.T, brokers []string, topic, txnID string, c *kfake.Cluster) {
	fc, restore := catchFatal(t)
	defer restore()
	a := newTestOutput(t, newResources(), yamlFor(brokers, topic, txnID, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, batchOf("a", 2)); err != nil {
		t.Fatal(err)
	}
	other, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var inits atomic.Int64
	a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
		if s != stepPrepared || n != 2 {
			return nil
		}
		// The other instance's first InitProducerID, not retried: the
		// coordinator fences the open transaction (epoch e+1) and
		// aborts it; the other instance's retry would bump again.
		id := a.slots[txnstate.SlotFor(n, len(a.slots))].id
		req := kmsg.NewPtrInitProducerIDRequest()
		tid := id
		req.TransactionalID = &tid
		req.TransactionTimeoutMillis = 30000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, other)
		t.Logf("other instance's InitProducerID: %v %v", resp, err)
		inits.Add(1)
		if c != nil {
			ep := a.live[0]
			c.ControlKey(int16(kmsg.DescribeTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := kreq.(*kmsg.DescribeTransactionsRequest)
				resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
				for _, id := range req.TransactionalIDs {
					st := kmsg.NewDescribeTransactionsResponseTransactionState()
					st.TransactionalID = id
					st.State = txnstate.BrokerCompleteAbort
					st.ProducerID, st.ProducerEpoch = ep.pid, ep.pepoch+1
					resp.TransactionStates = append(resp.TransactionStates, st)
				}
				return resp, nil, true
			})
		}
		kafkatest.Wait(t, 30*time.Second, func() bool {
			obs, err := a.describe(ctx, id)
			t.Logf("broker: %v %v", obs, err)
			return err == nil && obs.State != txnstate.BrokerOngoing
		})
		return nil
	}}
	werr := a.WriteBatch(ctx, batchOf("b", 2))
	var fe *FencedError
	if !errors.As(werr, &fe) {
		t.Fatalf("epoch fenced by another instance well before transaction_timeout: %v, want a FencedError (a zombie stop)", werr)
	}
	if fc.err() == nil {
		t.Fatal("no fatal stop")
	}
	for _, v := range readCommitted(t, brokers, topic) {
		if v == "b-0" || v == "b-1" {
			t.Fatalf("record of the fenced epoch visible: %s", v)
		}
	}
}

// Dedupe: an aborted epoch's positions stay owed until they are replayed,
// counted from the nack, not from the abort's start. The ABORTED write waits
// for a state cache that is down; on the original code the owed positions
// were stamped before that wait and expired during it, so a read-ahead batch
// of the key was admitted and committed right after the nack, and the real
// replay was then dropped as a duplicate (acked, never written: lost).
func TestDedupeOwedCountedFromNack(t *testing.T) {
	c := newCluster(t)
	res, cache := flakyResources(t)
	o := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "owed", dedupeExtra))
	const expiry = 300 * time.Millisecond
	o.mu.Lock()
	o.dd.SetOwedExpiry(expiry)
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, posBatch("k", 1, 3)); err != nil {
		t.Fatal(err)
	}
	// The ack of 1..3 comes before its committed positions are written
	// (they must be before the slot carries another epoch): the cache goes
	// down only once they are, or that write's retries would hold the slot
	// and 4..6 would commit after the cache came back.
	wait(t, 10*time.Second, "the positions of 1..3 written", func() bool {
		pos, err := o.store.readPositions(ctx)
		return err == nil && pos["k"] == 3
	})
	// The cache goes down: PREPARE of 4..6 fails, the ABORTED write waits.
	cache.down.Store(true)
	done := make(chan error, 1)
	go func() { done <- o.WriteBatch(ctx, posBatch("k", 4, 6)) }()
	wait(t, 10*time.Second, "the ABORTED write retried", func() bool { return cache.failed.Load() >= 2 })
	time.Sleep(3 * expiry)
	cache.down.Store(false)
	if err := <-done; !errors.Is(err, ErrEpochAborted) {
		t.Fatalf("epoch with a failed PREPARE: %v, want nacked", err)
	}
	// A batch read ahead reaches the output before the replay of 4..6.
	if err := o.WriteBatch(ctx, posBatch("k", 7, 9)); !errors.Is(err, ErrAwaitingReplay) {
		t.Fatalf("read-ahead batch right after the nack: %v, want ErrAwaitingReplay (4..6 owed)", err)
	}
	for _, b := range []service.MessageBatch{posBatch("k", 4, 6), posBatch("k", 7, 9)} {
		if err := o.WriteBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	got := counts(t, c.ListenAddrs())
	wantExactly(t, got, "k", 1, 9)
}

// Dedupe: once the output stopped (here fenced by a second instance), a
// batch is never acked: not even the replay of the stopped epoch's batch,
// whose positions that epoch had admitted. On the original code the replay
// found them admitted and was acked as a duplicate, never written (with an
// input that deletes what is acked, a loss).
func TestDedupeNoAckAfterStop(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			fc, restore := catchFatal(t)
			defer restore()
			c := newCluster(t, tv.opts...)
			yaml := baseYAML(c.ListenAddrs(), "stopped", dedupeExtra)
			a := newTestOutput(t, newResources(), yaml)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := a.WriteBatch(ctx, posBatch("k", 1, 3)); err != nil {
				t.Fatal(err)
			}
			newTestOutput(t, newResources(), yaml) // fences every slot of a
			var err error
			for p := int64(4); err == nil && p < 20; p += 3 {
				err = a.WriteBatch(ctx, posBatch("k", p, p+2))
				if err != nil {
					// Benthos redelivers the nacked batch (a
					// drain): it must not be acked.
					if rerr := a.WriteBatch(ctx, posBatch("k", p, p+2)); rerr == nil {
						t.Fatalf("the replay of k@%d..%d was acked after the output stopped (%v)", p, p+2, err)
					}
				}
			}
			var fe *FencedError
			if !errors.As(err, &fe) || fc.err() == nil {
				t.Fatalf("%v, want a fence", err)
			}
		})
	}
}

// Our own abort of a prepared epoch, then a crash before ABORTED was written:
// the restart finds the epoch aborted from DescribeTransactions alone (TV0:
// CompleteAbort at the stored epoch, which an EndTxn(abort) keeps), even when
// the Fetch probe cannot answer because the records are gone from the log
// (compacted or deleted: here DeleteRecords past them). On the original code
// TV0 left that state to the probe, and the start stopped in doubt.
func TestKafkaOwnAbortThenCrash(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		res := newResources()
		a := newTestOutput(t, res, env.yaml(""))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := a.WriteBatch(ctx, batchOf("ok", 2)); err != nil {
			t.Fatal(err)
		}
		a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
			if s == stepPrepared && n == 2 {
				// The abort is sent, then the process dies before
				// the ABORTED record.
				sl := a.slots[txnstate.SlotFor(n, len(a.slots))]
				if err := sl.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
					t.Errorf("abort: %v", err)
				}
				return errCrash
			}
			return nil
		}}
		_ = a.WriteBatch(ctx, batchOf("aborted", 2))
		r, _ := slotRecord(t, a, txnstate.SlotFor(2, len(a.slots)))
		if r.Epoch != 2 || r.State != txnstate.Prepared {
			t.Fatalf("record %+v, want epoch 2 PREPARED", r)
		}
		// The log loses the epoch's records: the probe cannot answer.
		adm := kafkatest.Admin(t, strings.Join(env.brokers, ","))
		ends, err := adm.ListEndOffsets(ctx, env.topic)
		if err != nil {
			t.Fatal(err)
		}
		var del kadm.Offsets
		ends.Each(func(o kadm.ListedOffset) { del.AddOffset(o.Topic, o.Partition, o.Offset, -1) })
		if _, err := adm.DeleteRecords(ctx, del); err != nil {
			t.Fatal(err)
		}
		b := newTestOutput(t, res, env.yaml(""))
		if r, _ := slotRecord(t, b, txnstate.SlotFor(2, len(b.slots))); r.Epoch != 2 || r.State != txnstate.Aborted {
			t.Fatalf("after the restart: %+v, want epoch 2 found aborted", r)
		}
	})
}
