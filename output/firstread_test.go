package output

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// startTV0Output starts a one-broker kfake cluster that speaks no more than
// Kafka 3.9 (transaction version 0, whose AddPartitionsToTxn these tests
// close) and an output on it with transactional id txnID, and commits a first
// batch (batchOf("a", 2)): the faults then meet an output whose slots are
// running.
func startTV0Output(ctx context.Context, t *testing.T, txnID string) (*kfake.Cluster, *output) {
	t.Helper()
	c := newCluster(t, kfake.MaxVersions(kversion.V3_9_0()))
	a := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), txnID, ""))
	writeReplaying(ctx, t, a, batchOf("a", 2))
	return c, a
}

// closeAddPartitions closes the connection of the first n AddPartitionsToTxn
// requests of transactional id id (all of them for n < 0) before the broker
// applies them, and counts the closes.
func closeAddPartitions(c *kfake.Cluster, id string, n int64) *atomic.Int64 {
	var closed atomic.Int64
	c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.AddPartitionsToTxnRequest)
		if req.TransactionalID != id || n >= 0 && closed.Load() >= n {
			return nil, nil, false
		}
		closed.Add(1)
		return nil, errors.New("injected close"), true
	})
	return &closed
}

// A connection closed under AddPartitionsToTxn (transaction version 0), then
// again on the connection franz-go dials for the retry: the second close is
// the first answer read on that connection, which franz-go takes for a
// missing SASL (kgo.ErrFirstReadEOF, not retried) and fails the client's
// producer id with. The epoch aborts, and the slot's client can never begin
// another transaction ("producer ID has a fatal, unrecoverable error"). The
// fault is transient: the epoch is nacked, the slot gets a fresh client, and
// the output goes on; the replayed batch and the ones after it commit. On the
// code before, the next epoch on the slot stopped the output (fatal, exit 3).
func TestFirstReadCloseUnderAddPartitions(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, a := startTV0Output(ctx, t, "firstread")
	brokers := c.ListenAddrs()

	slot := nextSlot(a)
	a.mu.Lock()
	oldCl := slot.cl
	a.mu.Unlock()
	closed := closeAddPartitions(c, slot.id, 2)
	err := a.WriteBatch(ctx, batchOf("b", 2))
	if !errors.Is(err, ErrEpochAborted) || fc.err() != nil {
		t.Fatalf("epoch under the closed AddPartitionsToTxn: %v (fatal %v), want it aborted and nacked", err, fc.err())
	}
	var fre *kgo.ErrFirstReadEOF
	if !errors.As(err, &fre) {
		t.Fatalf("epoch aborted for %v, want the first-read close franz-go takes for a missing SASL (the test's fault did not happen as meant: %d closes)", err, closed.Load())
	}
	// Every slot carries an epoch again, the aborted one's included.
	for _, p := range []string{"b", "c", "d", "e"} {
		writeReplaying(ctx, t, a, batchOf(p, 2))
		if fc.err() != nil {
			t.Fatalf("after batch %s: the output stopped: %v", p, fc.err())
		}
	}
	a.mu.Lock()
	replaced := slot.cl != oldCl
	a.mu.Unlock()
	if !replaced {
		t.Errorf("the slot whose client failed its producer id still has that client")
	}
	checkBatchesOnce(t, brokers, map[string]int{"a": 2, "b": 2, "c": 2, "d": 2, "e": 2})
}

// The same close on every AddPartitionsToTxn: what a broker that really
// requires SASL would look like to the producer. The output does not abort
// and re-initialise forever: after firstReadCloseLimit epochs in a row
// aborted on it, it stops (fatal) naming the close and what it often means.
func TestFirstReadCloseEveryTimeStops(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, a := startTV0Output(ctx, t, "firstreadall")
	for _, s := range a.slots {
		closeAddPartitions(c, s.id, -1)
	}
	aborted := 0
	for i := 0; i < 4*firstReadCloseLimit && fc.err() == nil; i++ {
		err := a.WriteBatch(ctx, batchOf("b", 2))
		if err == nil {
			t.Fatal("a batch was acked while every AddPartitionsToTxn is closed")
		}
		if fc.err() == nil {
			if !errors.Is(err, ErrEpochAborted) {
				t.Fatalf("write %d: %v, want the epoch aborted", i, err)
			}
			aborted++
		}
	}
	ferr := fc.err()
	if ferr == nil {
		t.Fatalf("%d epochs aborted on a first-read close and the output goes on: retried forever", aborted)
	}
	if aborted < firstReadCloseLimit-1 {
		t.Errorf("stopped after %d aborted epochs, want about %d (a transient close must not stop it): %v", aborted, firstReadCloseLimit, ferr)
	}
	if msg := ferr.Error(); !strings.Contains(msg, "in a row") || !strings.Contains(msg, "is SASL missing?") {
		t.Errorf("fatal error %q does not say the close repeated and what it often means", msg)
	}
	t.Logf("stopped after %d aborted epochs: %v", aborted, ferr)
}

// The first-read close hides a fence: another instance initialised the
// transactional id while our AddPartitionsToTxn was being closed, so our
// client never heard PRODUCER_FENCED, and with nothing added to its
// transaction its abort sends no EndTxn. Replacing the slot's client would
// take the id back (a fresh InitProducerID fences the other instance): the
// broker's state decides first, and the output stops as a zombie; the other
// instance commits.
func TestFirstReadCloseHidingAFence(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, a := startTV0Output(ctx, t, "firstreadrival")
	brokers := c.ListenAddrs()

	slot := nextSlot(a)
	rival := newRival(ctx, t, brokers, slot.id)
	closeAddPartitions(c, slot.id, 2)
	werr := a.WriteBatch(ctx, batchOf("b", 2))

	rival.checkStillOwns(ctx, t, a)
	var fe *FencedError
	if !errors.As(fc.err(), &fe) {
		t.Fatalf("epoch whose client failed on a first-read close while another instance took the id: %v (fatal %v), want a zombie stop (FencedError)", werr, fc.err())
	}
	for _, v := range readCommitted(t, brokers, testTopic) {
		if v == "b-0" || v == "b-1" {
			t.Fatalf("record of the aborted epoch visible: %s", v)
		}
	}
}

// The slot's new client meets the same close on its InitProducerID, every
// time (a broker that now requires SASL): the re-initialisation is not
// retried forever; after firstReadCloseFor of it the output stops (fatal).
func TestFirstReadCloseReinitStops(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	defer func(d time.Duration) { firstReadCloseFor = d }(firstReadCloseFor)
	firstReadCloseFor = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, a := startTV0Output(ctx, t, "firstreadinit")

	slot := nextSlot(a)
	closeAddPartitions(c, slot.id, 2)
	var inits atomic.Int64
	c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.InitProducerIDRequest)
		if req.TransactionalID == nil || *req.TransactionalID != slot.id {
			return nil, nil, false
		}
		inits.Add(1)
		return nil, errors.New("injected close"), true
	})
	done := make(chan error, 1)
	go func() { done <- a.WriteBatch(ctx, batchOf("b", 2)) }()
	wait(t, 60*time.Second, "the output stopped", func() bool { return fc.err() != nil })
	if err := <-done; !errors.Is(err, ErrEpochAborted) {
		t.Errorf("epoch under the closed AddPartitionsToTxn: %v, want it aborted", err)
	}
	if msg := fc.err().Error(); !strings.Contains(msg, "re-initialising") || !strings.Contains(msg, "is SASL missing?") {
		t.Errorf("fatal error %q does not name the re-initialisation and the close", msg)
	}
	t.Logf("stopped after %d closed InitProducerID: %v", inits.Load(), fc.err())
}
