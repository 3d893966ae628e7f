package output

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// Per-partition order across epochs (invariant I8): epoch 2 writes to a
// partition only after epoch 1's records there are acknowledged. Epoch 1's
// produce request is held by the broker while epoch 2, on the other slot,
// writes to the same partition; a read_committed reader must still see
// epoch 1's record first (on a compacted topic the later offset is the value
// kept). On the original code epoch 2 produced at once: its record took the
// lower offset.
func TestOrderAcrossEpochs(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c := newCluster(t, tv.opts...)
			o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "order", "partitioner: manual\npartition: '0'\nmax_in_flight: 4\n"))
			first := txnstate.SlotID("order", txnstate.SlotFor(1, len(o.slots)))
			release := make(chan struct{})
			var held atomic.Bool
			c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := kreq.(*kmsg.ProduceRequest)
				if req.TransactionID != nil && *req.TransactionID == first && held.CompareAndSwap(false, true) {
					c.SleepControl(func() { <-release })
				}
				return nil, nil, false
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := make(chan error, 2)
			go func() { errs <- o.WriteBatch(ctx, batchOf("first", 1)) }()
			wait(t, 10*time.Second, "epoch 1's produce held", held.Load)
			go func() { errs <- o.WriteBatch(ctx, batchOf("second", 1)) }()
			wait(t, 10*time.Second, "epoch 2 opened", func() bool {
				o.mu.Lock()
				defer o.mu.Unlock()
				return o.nextEpoch == 3
			})
			// Give epoch 2 time to produce, if it does (the original code
			// did at once); then let epoch 1's request through.
			time.Sleep(500 * time.Millisecond)
			close(release)
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			recs := readCommittedRecords(t, c.ListenAddrs(), testTopic, 2500*time.Millisecond, 30*time.Second)
			var order []string
			for _, r := range recs {
				if r.Partition == 0 {
					order = append(order, string(r.Value))
				}
			}
			if len(order) != 2 || order[0] != "first-0" || order[1] != "second-0" {
				t.Fatalf("partition 0 holds %v, want first-0 then second-0 (epoch order)", order)
			}
		})
	}
}

// Within one epoch, batches produce in the order they joined it: the first
// batch to join is held between joining (o.mu released) and producing while
// a second joins the same epoch; the second's record must not take the lower
// offset. On the original code it produced at once and did.
func TestOrderWithinEpoch(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "order", "partitioner: manual\npartition: '0'\nmax_in_flight: 4\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holdCommit, holdFirst, firstHeld := make(chan struct{}), make(chan struct{}), make(chan struct{})
	o.hooks = &testHooks{
		// Epoch 1 stays in flight, so that epoch 2 stays open for
		// both batches.
		beforeCommit: func(n uint64) {
			if n == 1 {
				<-holdCommit
			}
		},
		beforeProduce: func(n uint64, b service.MessageBatch) {
			if v, _ := b[0].AsBytes(); n == 2 && string(v) == "a-0" {
				close(firstHeld)
				<-holdFirst
			}
		},
	}
	errs := make(chan error, 3)
	go func() { errs <- o.WriteBatch(ctx, batchOf("zero", 1)) }()
	wait(t, 10*time.Second, "epoch 1 sealed", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.nextEpoch == 2 && o.open == nil
	})
	go func() { errs <- o.WriteBatch(ctx, batchOf("a", 1)) }()
	<-firstHeld
	go func() { errs <- o.WriteBatch(ctx, batchOf("b", 1)) }()
	wait(t, 10*time.Second, "b joined epoch 2", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.open != nil && o.open.n == 2 && len(o.open.batches) == 2
	})
	time.Sleep(300 * time.Millisecond) // b produces now if it does not wait its turn
	close(holdFirst)
	close(holdCommit)
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	for _, r := range readCommittedRecords(t, c.ListenAddrs(), testTopic, 2500*time.Millisecond, 30*time.Second) {
		order = append(order, string(r.Value))
	}
	if len(order) != 3 || order[1] != "a-0" || order[2] != "b-0" {
		t.Fatalf("partition 0 holds %v, want zero-0, a-0, b-0 (join order)", order)
	}
}
