package output

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

// An EndTxn(commit) whose answer is lost (it committed, or it never arrived)
// is neither nacked nor aborted: the raw EndTxn retry with the same producer
// id and epoch establishes the commit, and the batch is acked.
func TestUnknownEndTxnOutcomeResolved(t *testing.T) {
	for _, tv := range kfakeTVs {
		for _, applied := range []bool{true, false} {
			name := tv.name + "/lost answer"
			if !applied {
				name = tv.name + "/lost request"
			}
			t.Run(name, func(t *testing.T) {
				c := newCluster(t, tv.opts...)
				testLostEndTxnAnswer(t, c.ListenAddrs(), testTopic, "app", applied)
			})
		}
	}
}

// testLostEndTxnAnswer: EndTxn(commit) is sent (applied) or not, and its
// answer lost; the epoch must be established committed and acked.
func testLostEndTxnAnswer(t *testing.T, brokers []string, topic, txnID string, applied bool) {
	res := newResources()
	o := newTestOutput(t, res, yamlFor(brokers, topic, txnID, ""))
	o.endTxn = func(cl *kgo.Client, ctx context.Context, how kgo.TransactionEndTry) error {
		if applied {
			if err := cl.EndTransaction(ctx, how); err != nil {
				return err
			}
		}
		return context.DeadlineExceeded
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("x-%s-", txnID)
	if err := o.WriteBatch(ctx, batchOf(prefix, 3)); err != nil {
		t.Fatalf("in-doubt commit established by the retry, yet: %v", err)
	}
	got := 0
	for _, v := range readCommitted(t, brokers, topic) {
		if strings.HasPrefix(v, prefix) {
			got++
		}
	}
	if got != 3 {
		t.Fatalf("visible %d, want 3", got)
	}
	if r, _ := slotRecord(t, o, 1); r.State != txnstate.Committed {
		t.Fatalf("record %+v", r)
	}
	if o.m.tally.get(metricInDoubtResolved+"/"+outcomeResumed) != 1 {
		t.Fatal("in-doubt metric")
	}
	// The slot got a fresh client (the old one failed its producer id);
	// the pool keeps working.
	o.endTxn = (*kgo.Client).EndTransaction
	for i := range 3 {
		if err := o.WriteBatch(ctx, batchOf("y", 1)); err != nil {
			t.Fatalf("write %d after the in-doubt epoch: %v", i, err)
		}
	}
}

// When neither the EndTxn, its raw retry nor DescribeTransactions establish
// the outcome, the output stops with an error naming the epoch and the id and
// holds the batch (never acked, never nacked before Close); the next start
// resolves it.
func TestUnknownEndTxnOutcomeStops(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()

	c := newCluster(t)
	res := newResources()
	yaml := baseYAML(c.ListenAddrs(), "app", "commit_timeout: 1s\n")
	o := newTestOutput(t, res, yaml)
	// Every EndTxn from now on goes unanswered (the connection is cut).
	var dropping sync.Mutex
	drop := true
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		dropping.Lock()
		defer dropping.Unlock()
		if !drop {
			return nil, nil, false
		}
		return nil, errors.New("cut"), true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.WriteBatch(ctx, batchOf("doubt", 3)) }()
	wait(t, 15*time.Second, "the fatal stop", func() bool { return fc.err() != nil })
	if raised := fc.err(); !errors.Is(raised, ErrInDoubt) || !strings.Contains(raised.Error(), `"app-1"`) {
		t.Fatalf("raised %v", raised)
	}
	select {
	case err := <-done:
		t.Fatalf("an in-doubt batch returned before Close: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	_ = o.Close(cctx)
	if err := <-done; !errors.Is(err, ErrInDoubt) {
		t.Fatalf("held batch released with %v", err)
	}
	if r, _ := slotRecord(t, o, 1); r.State != txnstate.Prepared {
		t.Fatalf("record %+v, want PREPARED left for the next start", r)
	}

	// The next start (the broker answers again) finds the epoch still open
	// and, in plain mode, aborts it.
	dropping.Lock()
	drop = false
	dropping.Unlock()
	restore()
	restore = fatal.SetHandler(nil)
	b := newTestOutput(t, res, yaml)
	if r, _ := slotRecord(t, b, 1); r.State != txnstate.Aborted {
		t.Fatalf("after restart: %+v", r)
	}
	if b.m.tally.get(metricInDoubtResolved+"/"+outcomeAborted) != 1 {
		t.Fatal("in-doubt metric")
	}
	if got := len(readCommitted(t, c.ListenAddrs(), testTopic)); got != 0 {
		t.Fatalf("visible %d, want 0", got)
	}
}
