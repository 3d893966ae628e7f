package output

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/txnstate"
)

// TestStartStoppedAtOnceResolvesInDoubt: a start whose stream stops before
// its output connected (a bounded input with nothing left to read: Benthos,
// stopping, cancels the context it hands Connect) still resolves the epoch
// its predecessor left in doubt and ends its open transaction. Otherwise the
// run exits 0 with the epoch still PREPARED, and the transaction holds
// read_committed readers of its partitions back until its timeout.
func TestStartStoppedAtOnceResolvesInDoubt(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c, res, yaml, a, ctx := afterOneEpoch(t, tv.opts)
			a.hooks = crashAt(stepPrepared, 2)
			if err := a.WriteBatch(ctx, batchOf("crashed", 4)); err == nil {
				t.Fatal("the crashed epoch's batch was acked")
			}
			open := stableOffsets(t, c.ListenAddrs(), testTopic)

			b := newUnconnected(t, res, yaml)
			stopping, stop := context.WithCancel(context.Background())
			stop()
			if err := b.Connect(stopping); err != nil {
				t.Logf("Connect under a cancelled context: %v", err)
			}
			r, ok := slotRecord(t, b, txnstate.SlotFor(2, 2))
			if !ok || r.Epoch != 2 || r.State != txnstate.Aborted {
				t.Fatalf("epoch 2's record %+v (found %v), want it ABORTED by the start", r, ok)
			}
			ends := stableOffsets(t, c.ListenAddrs(), testTopic)
			moved := false
			for p, o := range ends {
				if o > open[p] {
					moved = true
				}
			}
			if !moved {
				t.Fatalf("the stable offsets %v did not move past the open transaction (%v before the start)", ends, open)
			}
		})
	}
}

// TestStartStoppedAtOnceBounded: the grace a start gets once its context is
// cancelled is one commit_timeout: a broker that does not answer does not
// hold the stop longer.
func TestStartStoppedAtOnceBounded(t *testing.T) {
	// A "broker" that takes connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	o := newUnconnected(t, newResources(), baseYAML([]string{ln.Addr().String()}, "app", ""))
	stopping, stop := context.WithCancel(context.Background())
	stop()
	start := time.Now()
	err = o.Connect(stopping)
	took := time.Since(start)
	if err == nil {
		t.Fatal("Connect succeeded without a broker")
	}
	// commit_timeout is 5s in baseYAML; 3 s of slack for a loaded machine.
	if took > 8*time.Second {
		t.Fatalf("Connect under a cancelled context took %v (commit_timeout 5s): %v", took, err)
	}
	t.Logf("Connect gave up after %v: %v", took, err)
}

// TestStartSupersededStopsFenced: an instance that stalls during its start,
// after initialising some of its slots, while a later instance runs, must not
// go on with the slots that instance initialised after it: the first fence
// on the others would stop it with their transactions open until their
// timeout. Here the later instance is played by an InitProducerID of slot 0's
// transactional id once the start initialised every slot.
func TestStartSupersededStopsFenced(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c, res, yaml, _, ctx := afterOneEpoch(t, tv.opts)
			b := newUnconnected(t, res, yaml)
			b.hooks = &testHooks{afterSlots: func() {
				rival, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(txnstate.SlotID("app", 0)))
				if err != nil {
					t.Error(err)
					return
				}
				defer rival.Close()
				if _, _, err := rival.ProducerID(ctx); err != nil {
					t.Error(err)
				}
			}}
			fc, restore := catchFatal(t)
			defer restore()
			err := b.Connect(ctx)
			var fe *FencedError
			if !errors.As(err, &fe) {
				t.Fatalf("Connect returned %v, want the start stopped as fenced", err)
			}
			if !errors.As(fc.err(), &fe) {
				t.Fatalf("the stop raised %v, want the fence", fc.err())
			}
			if fe.TransactionalID != txnstate.SlotID("app", 0) {
				t.Fatalf("fenced on %q, want %q: %v", fe.TransactionalID, txnstate.SlotID("app", 0), err)
			}
			t.Logf("the start stopped: %v", err)
		})
	}
}

// afterOneEpoch connects an output (transactional id "app") to a fresh kfake
// cluster and commits one epoch through it: the predecessor a start test's
// second instance follows, on the same resources and config. ctx bounds the
// test (30 s).
func afterOneEpoch(t *testing.T, opts []kfake.Opt) (c *kfake.Cluster, res *service.Resources, yaml string, a *output, ctx context.Context) {
	t.Helper()
	c = newCluster(t, opts...)
	res = newResources()
	yaml = baseYAML(c.ListenAddrs(), "app", "")
	a = newTestOutput(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if err := a.WriteBatch(ctx, batchOf("first", 3)); err != nil {
		t.Fatal(err)
	}
	return c, res, yaml, a, ctx
}
