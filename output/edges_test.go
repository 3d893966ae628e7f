package output

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// An EndTransaction(commit) reported successful, after which the broker shows
// the transactional id at another producer's state (here: the commit really
// was an abort, and another instance initialised the id before the check), is
// not a confirmed commit: the batch is never acked (invariant I2). On the
// original code verifyCommit returned nil for CommitNotOurs and the batch was
// acked with nothing committed.
func TestCommitNotOursNotAcked(t *testing.T) {
	for _, tv := range dedupeTVs {
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
	fc, restore := catchFatal()
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
