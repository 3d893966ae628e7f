package output

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

// These tests run on Apache Kafka (integration/kafka/up.sh --tv 0|2, found
// through KAFKA_BROKERS_TV0 / KAFKA_BROKERS_TV2) and skip without it. They are
// the judge for what kfake does not model: DescribeTransactions states
// (CompleteCommit, CompleteAbort after a timeout), EndTxn retries of a
// completed commit, and PRODUCER_FENCED after a timeout.

type kafkaEnv struct {
	tv      txnstate.TxnVersion
	brokers []string
	topic   string
	txnID   string
}

func forEachKafka(t *testing.T, fn func(t *testing.T, env kafkaEnv)) {
	for _, tv := range []int{0, 2} {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			b := kafkatest.Brokers(t, tv)
			env := kafkaEnv{
				tv:      txnstate.TxnVersion(tv),
				brokers: strings.Split(b, ","),
				topic:   kafkatest.Topic(t, b, 3),
				// Transactional ids outlive the test on a real broker.
				txnID: fmt.Sprintf("eos-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()),
			}
			fn(t, env)
		})
	}
}

// stateTopic names a kafka_state topic of the test, deleted after the test
// if it passed (a failed test leaves it to look at).
func (e kafkaEnv) stateTopic(t *testing.T) string {
	name := e.txnID + "-state"
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		adm := kafkatest.Admin(t, strings.Join(e.brokers, ","))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopic(ctx, name)
	})
	return name
}

func (e kafkaEnv) yaml(extra string) string { return yamlFor(e.brokers, e.topic, e.txnID, extra) }

func (e kafkaEnv) count(t *testing.T, prefix string) int {
	n := 0
	for _, v := range readCommitted(t, e.brokers, e.topic) {
		if strings.HasPrefix(v, prefix) {
			n++
		}
	}
	return n
}

// crashAt makes the output "die" (errCrash, everything abandoned) at step of
// epoch number epoch only.
func crashAt(step commitStep, epoch uint64) *testHooks {
	return &testHooks{atStep: func(s commitStep, n uint64) error {
		if s == step && n == epoch {
			return errCrash
		}
		return nil
	}}
}

// crashAtStep makes the output die at step of whichever epoch reaches it
// first (tests that write a single epoch before the crash).
func crashAtStep(step commitStep) *testHooks {
	return &testHooks{atStep: func(s commitStep, _ uint64) error {
		if s == step {
			return errCrash
		}
		return nil
	}}
}

func TestKafkaCommitAndRecover(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		for _, tc := range []struct {
			name        string
			step        commitStep
			mode        txnstate.Mode
			wantVisible bool
			wantState   txnstate.State
			wantOutcome string
		}{
			// Open at the stored (pid, epoch): plain mode aborts it.
			{"after prepare plain", stepPrepared, txnstate.Plain, false, txnstate.Aborted, outcomeAborted},
			// Open at the stored (pid, epoch): resumed by a raw EndTxn
			// pinned to the stored version under TV2 (dedupe mode, and
			// Kafka-to-Kafka below); under TV0, where the open
			// transaction at the stored (pid, epoch) may be a later one
			// of a previous owner still running, aborted (its positions
			// or offsets with it).
			{"after prepare resumed", stepPrepared, txnstate.Dedupe, true, txnstate.Committed, outcomeResumed},
			{"after prepare k2k", stepPrepared, txnstate.KafkaToKafka, true, txnstate.Committed, outcomeResumed},
			// CompleteCommit at e (TV0) / e+1 (TV2): found committed.
			{"after end txn", stepEnded, txnstate.Plain, true, txnstate.Committed, outcomeFoundCommitted},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.mode != txnstate.Plain && tc.step == stepPrepared && env.tv == 0 {
					tc.wantVisible, tc.wantState, tc.wantOutcome = false, txnstate.Aborted, outcomeAborted
				}
				res := newResources()
				a := newTestOutput(t, res, env.yaml(""))
				if a.clusterTV != env.tv {
					t.Fatalf("detected transaction version %d, want %d", a.clusterTV, env.tv)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				prefix := strings.ReplaceAll(tc.name, " ", "_")
				if err := a.WriteBatch(ctx, batchOf(prefix+"-first", 3)); err != nil {
					t.Fatal(err)
				}
				a.hooks = crashAt(tc.step, 2)
				if err := a.WriteBatch(ctx, batchOf(prefix+"-crashed", 4)); err == nil {
					t.Fatal("crashed epoch acked")
				}
				stored, _ := slotRecord(t, a, 0)
				if tc.step == stepEnded {
					// A retried commit of an epoch that already committed
					// says so (NONE) under both versions, as long as the
					// slot was not re-initialised since.
					if res, err := a.rawEndTxn(ctx, stored); res != txnstate.RetryOK {
						t.Fatalf("retried commit of a committed epoch: %v %v", res, err)
					}
				}

				b := newUnconnected(t, res, env.yaml(""))
				b.conf.mode = tc.mode
				if err := b.Connect(ctx); err != nil {
					t.Fatal(err)
				}
				r, _ := slotRecord(t, b, 0)
				if r.Epoch != 2 || r.State != tc.wantState || r.TxnVersion != env.tv {
					t.Fatalf("epoch 2 record %+v, want %s under TV%d", r, tc.wantState, env.tv)
				}
				if got := b.m.tally.get(metricInDoubtResolved + "/" + tc.wantOutcome); got != 1 {
					t.Fatalf("in-doubt %s = %d", tc.wantOutcome, got)
				}
				if err := b.WriteBatch(ctx, batchOf(prefix+"-after", 2)); err != nil {
					t.Fatal(err)
				}
				want := 0
				if tc.wantVisible {
					want = 4
				}
				if got := env.count(t, prefix+"-crashed"); got != want {
					t.Fatalf("crashed epoch: %d records visible, want %d", got, want)
				}
				if env.count(t, prefix+"-first") != 3 || env.count(t, prefix+"-after") != 2 {
					t.Fatal("the other epochs are not whole")
				}
			})
		}
	})
}

// A state cache lost with the process (Benthos' memory cache): the restart
// cannot resume the epoch left in doubt, in Kafka-to-Kafka mode either, and
// does not wait for transaction_timeout (5m here) to end it: its slots'
// InitProducerID aborts it at once. The judge reads the partitions the
// crashed epoch wrote to their last stable offsets right after the restart's
// first epoch: while that transaction stayed open they would stop below the
// new records. What connect-eos's warning for a memory or file state_cache
// says.
func TestKafkaLostStateCacheAbortsAtRestart(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		yaml := strings.Replace(env.yaml(""), "transaction_timeout: 30s\n", "transaction_timeout: 5m\n", 1)
		a := newTestOutput(t, newResources(), yaml)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := a.WriteBatch(ctx, batchOf("lost-first", 3)); err != nil {
			t.Fatal(err)
		}
		a.hooks = crashAt(stepPrepared, 2)
		if err := a.WriteBatch(ctx, batchOf("lost-crashed", 4)); !errors.Is(err, errCrash) {
			t.Fatalf("epoch 2 did not reach PREPARE: %v", err)
		}
		if r, ok := slotRecord(t, a, txnstate.SlotFor(2, a.conf.poolSize)); !ok || r.Epoch != 2 || r.State != txnstate.Prepared {
			t.Fatalf("epoch 2 record %+v (found %v), want PREPARED: the crash is not in doubt", r, ok)
		}

		b := newUnconnected(t, newResources(), yaml) // the cache is gone
		b.conf.mode = txnstate.KafkaToKafka
		if err := b.Connect(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteBatch(ctx, batchOf("lost-after", 2)); err != nil {
			t.Fatal(err)
		}
		if got := env.count(t, "lost-crashed"); got != 0 {
			t.Fatalf("the crashed epoch: %d records visible, want 0 (aborted)", got)
		}
		if env.count(t, "lost-first") != 3 || env.count(t, "lost-after") != 2 {
			t.Fatal("the other epochs are not whole, or the crashed epoch still holds the last stable offset")
		}
	})
}

// An epoch that timed out while the process was down is found aborted
// (CompleteAbort at e+1 under TV0, e+2 under TV2).
func TestKafkaTimedOutWhileDown(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		res := newResources()
		// 15s: the epoch must reach PREPARE before the timeout (minus
		// the output's margin) even when a loaded machine makes its
		// flush take seconds; 5s failed under a load average of 30.
		yaml := env.yaml("commit_timeout: 1s\n") + "transaction_timeout: 15s\n"
		yaml = strings.Replace(yaml, "transaction_timeout: 30s\n", "", 1)
		a := newTestOutput(t, res, yaml)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		a.hooks = crashAt(stepPrepared, 1)
		if err := a.WriteBatch(ctx, batchOf("late", 3)); !errors.Is(err, errCrash) {
			t.Fatalf("epoch 1 did not reach PREPARE: %v", err)
		}
		r0, _ := slotRecord(t, a, 1)
		// Wait for the coordinator to abort it (the broker checks every second).
		var last txnstate.Observation
		kafkatest.Wait(t, 60*time.Second, func() bool {
			obs, err := a.describe(ctx, r0.TransactionalID)
			if err != nil {
				t.Logf("describe: %v", err)
			}
			if err == nil && obs != last {
				t.Logf("stored %d/%d TV%d; broker: %v", r0.ProducerID, r0.ProducerEpoch, r0.TxnVersion, obs)
				last = obs
			}
			return err == nil && txnstate.Decide(r0, obs) == txnstate.FoundAborted
		})
		b := newTestOutput(t, res, yaml)
		if r, _ := slotRecord(t, b, 1); r.State != txnstate.Aborted {
			t.Fatalf("record %+v", r)
		}
		if b.m.tally.get(metricInDoubtResolved+"/"+outcomeFoundAborted) != 1 {
			t.Fatal("in-doubt metric")
		}
		if env.count(t, "late") != 0 {
			t.Fatal("timed-out epoch visible")
		}
	})
}

// Our own transaction timing out is told apart from a zombie: the epoch is
// aborted and nacked, the slot re-initialised, and the output carries on.
func TestKafkaOwnTimeoutNotZombie(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		fc, restore := catchFatal(t)
		defer restore()
		res := newResources()
		yaml := strings.Replace(env.yaml("commit_timeout: 500ms\n"), "transaction_timeout: 30s\n", "transaction_timeout: 3s\n", 1)
		o := newTestOutput(t, res, yaml)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// Stall epoch 1 after PREPARE until the coordinator aborted it.
		o.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
			if s == stepPrepared && n == 1 {
				r, _ := slotRecord(t, o, 1)
				kafkatest.Wait(t, 30*time.Second, func() bool {
					obs, err := o.describe(ctx, r.TransactionalID)
					return err == nil && (obs.State == txnstate.BrokerCompleteAbort || obs.State == txnstate.BrokerPrepareAbort)
				})
			}
			return nil
		}}
		err := o.WriteBatch(ctx, batchOf("timedout", 3))
		if !errors.Is(err, ErrEpochAborted) {
			t.Fatalf("timed-out epoch: %v, want an epoch abort", err)
		}
		o.hooks = nil
		for i := range 3 {
			if err := o.WriteBatch(ctx, batchOf(fmt.Sprintf("next%d", i), 2)); err != nil {
				t.Fatalf("after our own timeout: %v", err)
			}
		}
		if raised := fc.err(); raised != nil {
			t.Fatalf("own timeout raised fatal: %v", raised)
		}
		if r, _ := slotRecord(t, o, 1); r.Epoch == 1 && r.State != txnstate.Aborted {
			t.Fatalf("record %+v", r)
		}
		if env.count(t, "timedout") != 0 || env.count(t, "next") != 6 {
			t.Fatal("visible records")
		}
	})
}

func TestKafkaZombieFenced(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		restore := fatal.SetHandler(func(error) {})
		defer restore()
		a := newTestOutput(t, newResources(), env.yaml(""))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := a.WriteBatch(ctx, batchOf("before", 2)); err != nil {
			t.Fatal(err)
		}
		newTestOutput(t, newResources(), env.yaml(""))
		var err error
		for i := 0; i < 4 && err == nil; i++ {
			err = a.WriteBatch(ctx, batchOf("zombie", 2))
		}
		var fe *FencedError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.TransactionalID, env.txnID+"-") {
			t.Fatalf("%v, want a FencedError naming %s-<n>", err, env.txnID)
		}
		if env.count(t, "zombie") != 0 || env.count(t, "before") != 2 {
			t.Fatal("visible records")
		}
	})
}

// Two epochs in doubt at once on Apache Kafka: the first found committed
// from DescribeTransactions (CompleteCommit), the second open and aborted.
func TestKafkaTwoInDoubt(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) { testTwoInDoubt(t, env.brokers, env.topic, env.txnID) })
}

// A lost EndTxn answer on Apache Kafka: the raw retry pinned to the stored
// version establishes the commit (right after a TV0 commit the coordinator
// answers CONCURRENT_TRANSACTIONS for a while; the retry waits it out).
func TestKafkaLostEndTxnAnswer(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		for _, applied := range []bool{true, false} {
			t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
				testLostEndTxnAnswer(t, env.brokers, env.topic, fmt.Sprintf("%s-%v", env.txnID, applied), applied)
			})
		}
	})
}

// kafka_state on Apache Kafka as the state cache across a crash.
func TestKafkaStateCache(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testKafkaStateRecovery(t, env.brokers, env.topic, env.txnID, env.stateTopic(t))
	})
}

// SIGKILL of a real process at random points, on Apache Kafka.
func TestKafkaKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testKillNine(t, env.brokers, env.topic, env.txnID, env.stateTopic(t))
	})
}

// The rule txnstate.ReinitAfterRival rests on, on Apache Kafka: from a
// committed or aborted transaction, or from Empty, a new client's one
// InitProducerID moves the producer id's epoch up by exactly one. Another
// producer's InitProducerID in between is what moves it further.
func TestKafkaReinitBumpsOnce(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		a := newTestOutput(t, newResources(), env.yaml(""))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		id := env.txnID + "-reinit"
		describe := func(want string) txnstate.Observation {
			t.Helper()
			var obs txnstate.Observation
			var err error
			for i := 0; i < 50; i++ {
				if obs, err = a.describe(ctx, id); err == nil && obs.State == want {
					return obs
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("DescribeTransactions(%s): %v (%v), want %s", id, obs, err, want)
			return obs
		}
		reinit := func(before txnstate.Observation) *kgo.Client {
			t.Helper()
			cl, in, err := a.initSlotClient(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if in.sent != 1 || in.pid != before.ProducerID || in.epoch != before.ProducerEpoch+1 {
				t.Errorf("from %v: producer id %d epoch %d after %d InitProducerID, want producer id %d epoch %d after 1",
					before, in.pid, in.epoch, in.sent, before.ProducerID, before.ProducerEpoch+1)
			}
			if txnstate.ReinitAfterRival(before, in.pid, in.epoch) {
				t.Errorf("from %v to epoch %d: taken for another producer's", before, in.epoch)
			}
			return cl
		}
		cl, _, err := a.initSlotClient(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, end := range []struct {
			how   kgo.TransactionEndTry
			state string
		}{{kgo.TryCommit, txnstate.BrokerCompleteCommit}, {kgo.TryAbort, txnstate.BrokerCompleteAbort}} {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: env.topic, Value: []byte("reinit")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if err := cl.EndTransaction(ctx, end.how); err != nil {
				t.Fatal(err)
			}
			cl.Close()
			cl = reinit(describe(end.state))
		}
		cl.Close()
		cl = reinit(describe(txnstate.BrokerEmpty))
		cl.Close()
	})
}
