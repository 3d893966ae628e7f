package output

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// An epoch that fails before its commit aborts every later epoch already
// producing (invariant I5): both batches are nacked, neither is visible.
func TestCascadeAbort(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "max_in_flight: 1\n"))
	o.conf.topic = mustInterp(t, `${! meta("topic").or("out") }`)
	joined := make(chan struct{})
	o.hooks = &testHooks{beforeCommit: func(n uint64) {
		if n == 1 {
			<-joined // hold epoch 1 until epoch 2 produces on the other slot
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := batchOf("bad", 2)
	bad[0].MetaSetMut("topic", "missing")
	var wg sync.WaitGroup
	var err1, err2 error
	wg.Go(func() { err1 = o.WriteBatch(ctx, bad) })
	wait(t, 5*time.Second, "epoch 1 sealed", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.nextEpoch == 2 && o.open == nil
	})
	wg.Go(func() { err2 = o.WriteBatch(ctx, batchOf("later", 3)) })
	wait(t, 5*time.Second, "epoch 2 opened", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.nextEpoch == 3
	})
	close(joined)
	wg.Wait()
	if !errors.Is(err1, ErrEpochAborted) || !strings.Contains(err1.Error(), "missing") {
		t.Fatalf("epoch 1: %v", err1)
	}
	var ee *EpochError
	if !errors.As(err2, &ee) || ee.Epoch != 2 || !strings.Contains(err2.Error(), "epoch 1 before it aborted") {
		t.Fatalf("epoch 2 was not aborted for epoch 1: %v", err2)
	}
	if got := o.m.tally.get(metricEpochsAborted); got != 2 {
		t.Fatalf("aborted epochs %d, want 2", got)
	}
	if err := o.WriteBatch(ctx, batchOf("after", 2)); err != nil {
		t.Fatal(err)
	}
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	if len(got) != 2 || !strings.HasPrefix(got[0], "after") {
		t.Fatalf("visible %v, want only the 2 records written after the aborts", got)
	}
}

// A second instance with the same transactional_id fences the first: the
// first stops with a fatal error naming the id, and nothing it writes after
// is visible.
func TestZombieFenced(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()

	c := newCluster(t)
	a := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, batchOf("before", 3)); err != nil {
		t.Fatal(err)
	}
	newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "")) // fences every slot of a

	var err error
	for i := 0; i < 4 && err == nil; i++ { // both slots: the next epoch runs on the fenced slot either way
		err = a.WriteBatch(ctx, batchOf("zombie", 3))
	}
	var fe *FencedError
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.TransactionalID, "app-") {
		t.Fatalf("write after the fence: %v, want a FencedError naming app-<n>", err)
	}
	var fatalErr *fatal.Error
	if !errors.As(err, &fatalErr) {
		t.Fatalf("not raised as fatal: %v", err)
	}
	if raised := fc.err(); raised == nil || !strings.Contains(raised.Error(), `"app-`) {
		t.Fatalf("fatal handler got %v", raised)
	}
	if a.m.tally.get(metricFenced) != 1 {
		t.Fatalf("fenced metric %d", a.m.tally.get(metricFenced))
	}
	// Every later write fails at once; nothing after the fence is visible.
	if err := a.WriteBatch(ctx, batchOf("zombie2", 1)); err == nil {
		t.Fatal("write after a fatal fence succeeded")
	}
	// Exactly the records committed before the fence are visible: present,
	// and no zombie record beside them.
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	slices.Sort(got)
	if want := []string{"before-0", "before-1", "before-2"}; !slices.Equal(got, want) {
		t.Fatalf("visible %v, want %v (the records before the fence, and no zombie record)", got, want)
	}
}
