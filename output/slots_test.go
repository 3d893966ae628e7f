package output

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// Lingering transactions of slots beyond a (now smaller) pool are aborted at
// start; a transaction of another deployment whose id extends ours
// ("app-2-x") is left alone (exact matching, never a prefix).
func TestOrphanSlotsAborted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		step  commitStep
		state txnstate.State // slot 2's record after the restart
	}{
		{"open, never prepared", stepProduced, ""},
		{"prepared", stepPrepared, txnstate.Aborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			res := newResources()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// Another deployment's live transaction on "app-2-x".
			foreign, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("app-2-x"))
			if err != nil {
				t.Fatal(err)
			}
			defer foreign.Close()
			if err := foreign.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := foreign.ProduceSync(ctx, &kgo.Record{Topic: testTopic, Value: []byte("foreign")}).FirstErr(); err != nil {
				t.Fatal(err)
			}

			// Pool of 3: epochs 1, 2 commit on slots 1, 2... epoch 2 lands
			// on slot 2 and crashes there.
			a := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "app", "producer_pool_size: 3\n"))
			if err := a.WriteBatch(ctx, batchOf("one", 2)); err != nil {
				t.Fatal(err)
			}
			a.hooks = crashAt(tc.step, 2)
			_ = a.WriteBatch(ctx, batchOf("orphan", 2))

			adm := kadm.NewClient(a.admin)
			if ds, _ := adm.DescribeTransactions(ctx, "app-2"); ds["app-2"].State != txnstate.BrokerOngoing {
				t.Fatalf("app-2 before restart: %+v", ds["app-2"])
			}

			b := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "app", "producer_pool_size: 2\n"))
			badm := kadm.NewClient(b.admin)
			ds, err := badm.DescribeTransactions(ctx, "app-2", "app-2-x")
			if err != nil {
				t.Fatal(err)
			}
			if ds["app-2"].State == txnstate.BrokerOngoing {
				t.Fatal("the orphaned slot's transaction is still open")
			}
			if ds["app-2-x"].State != txnstate.BrokerOngoing {
				t.Fatalf("another deployment's transaction was touched: %+v", ds["app-2-x"])
			}
			if hw, _ := b.store.slotsHighWater(ctx); hw != 3 {
				t.Fatalf("pool high-water mark %d, want 3 (kept so later starts look at slot 2)", hw)
			}
			r, ok := slotRecord(t, b, 2)
			if tc.state == "" && ok && r.Epoch == 2 {
				t.Fatalf("slot 2: %+v", r)
			}
			if tc.state != "" && r.State != tc.state {
				t.Fatalf("slot 2: %+v, want %s", r, tc.state)
			}
			// The foreign transaction holds the last stable offset of its
			// partition: once it ends, the reader sees exactly the committed
			// epoch (present) and no orphan record (absent).
			if err := foreign.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			got := readCommitted(t, c.ListenAddrs(), testTopic)
			slices.Sort(got)
			if want := []string{"one-0", "one-1"}; !slices.Equal(got, want) {
				t.Fatalf("visible %v, want %v (the committed epoch, and no orphan record)", got, want)
			}
		})
	}
}

// An epoch still uncommitted at transaction_timeout minus the margin is
// aborted locally (not left to the coordinator), nacked, and the output
// carries on.
func TestLocalEpochDeadline(t *testing.T) {
	c := newCluster(t)
	const txnTimeout = 6 * time.Second
	yaml := strings.Replace(baseYAML(c.ListenAddrs(), "app", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: 6s", 1)
	o := newTestOutput(t, newResources(), yaml)
	hookErr := make(chan string, 1)
	o.hooks = &testHooks{beforeCommit: func(n uint64) {
		if n != 1 {
			return
		}
		// Hold the epoch until just past its local deadline, measured
		// from the moment it opened as the output measures it (a fixed
		// sleep measured from the test's clock lands anywhere on a
		// loaded machine). The coordinator's own abort comes 600ms later.
		opened := epochOpened(o, n)
		if opened.IsZero() {
			hookErr <- "epoch 1 is not live when its commit starts"
			return
		}
		time.Sleep(time.Until(opened.Add(txnTimeout-timeoutMargin(txnTimeout))) + 20*time.Millisecond)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := o.WriteBatch(ctx, batchOf("slow", 2))
	select {
	case msg := <-hookErr:
		t.Fatal(msg)
	default:
	}
	if !errors.Is(err, errEpochDeadline) {
		t.Fatalf("%v, want the local deadline abort", err)
	}
	if err := o.WriteBatch(ctx, batchOf("fast", 2)); err != nil {
		t.Fatal(err)
	}
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	if len(got) != 2 || !strings.HasPrefix(got[0], "fast") {
		t.Fatalf("visible %v", got)
	}
}

// A batch is never split across epochs: epochs close after whole batches.
func TestBatchesNeverSplit(t *testing.T) {
	c := newCluster(t)
	yaml := strings.Replace(baseYAML(c.ListenAddrs(), "app", "max_in_flight: 16\n"), "epoch:\n", "epoch:\n  max_records: 4\n", 1)
	o := newTestOutput(t, newResources(), yaml)
	var (
		mu    sync.Mutex
		sizes []int
	)
	o.hooks = &testHooks{beforeCommit: func(n uint64) {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, ep := range o.live {
			if ep.n == n {
				mu.Lock()
				sizes = append(sizes, ep.records)
				mu.Unlock()
			}
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			if err := o.WriteBatch(ctx, batchOf("b", 3)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range sizes {
		if n%3 != 0 || n > 6 {
			t.Fatalf("epoch sizes %v: a batch of 3 was split, or the limit of 4 ignored beyond one batch", sizes)
		}
		total += n
	}
	if total != 36 {
		t.Fatalf("epochs hold %d records, want 36", total)
	}
}

// Metadata keys selected by `metadata` become headers; the manual partitioner
// writes to the interpolated partition.
func TestHeadersAndManualPartition(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "partitioner: manual\npartition: ${! meta(\"p\") }\nmetadata:\n  include_prefixes: [ h_ ]\n"))
	b := batchOf("m", 2)
	for i, m := range b {
		m.MetaSetMut("p", []string{"2", "0"}[i])
		m.MetaSetMut("h_trace", "t1")
		m.MetaSetMut("secret", "no")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(testTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	for _, r := range recs {
		want := map[string]int32{"m-0": 2, "m-1": 0}[string(r.Value)]
		if r.Partition != want {
			t.Errorf("%s on partition %d, want %d", r.Value, r.Partition, want)
		}
		if len(r.Headers) != 1 || r.Headers[0].Key != "h_trace" || string(r.Headers[0].Value) != "t1" {
			t.Errorf("%s headers %v, want only h_trace", r.Value, r.Headers)
		}
	}
	// A bad partition fails that message alone, before anything is
	// produced; the other message is written (it is acknowledged).
	bad := batchOf("bad", 2)
	bad[0].MetaSetMut("p", "0")
	bad[1].MetaSetMut("p", "x")
	err = o.WriteBatch(ctx, bad)
	var be interface{ IndexedErrors() int }
	if !errors.As(err, &be) || be.IndexedErrors() != 1 || !errors.Is(err, ErrCannotWrite) || !strings.Contains(err.Error(), "field partition") {
		t.Fatalf("%v, want a BatchError for message 1 naming the partition field", err)
	}
	if bl := blamed(bad, err); bl[0] != nil || bl[1] == nil {
		t.Fatalf("blamed %v, want message 1 alone", bl)
	}
	ackedMustBeVisible(t, bad, err, counts(t, c.ListenAddrs()))
}

// Close releases every waiter; a batch left in an unfinished epoch is
// nacked (its transaction never reached PREPARE: the next start aborts it).
func TestCloseReleasesWaiters(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", ""))
	block := make(chan struct{})
	o.hooks = &testHooks{beforeCommit: func(uint64) { <-block }}
	done := make(chan error, 1)
	go func() { done <- o.WriteBatch(context.Background(), batchOf("x", 1)) }()
	wait(t, 5*time.Second, "epoch sealed", func() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.nextEpoch == 2 && o.open == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The epoch is still unfinished when Close gives up waiting for it (its
	// context ends) and stops the output; only then is the commit let go.
	// (Let go at the context's end instead, the commit can win the race with
	// the stop, and then its ack is right: the epoch did commit.)
	go func() {
		for {
			o.mu.Lock()
			stopped := o.stopErr != nil
			o.mu.Unlock()
			if stopped {
				close(block)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_ = o.Close(ctx)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("WriteBatch acked a batch whose epoch Close left unfinished, want it nacked")
		}
		t.Logf("nacked: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("WriteBatch still blocked after Close")
	}
}

// Each slot's client is initialised once, at Connect, and reused for every
// epoch it carries: no InitProducerID at epoch boundaries.
func TestSlotsInitialisedOnce(t *testing.T) {
	c := newCluster(t)
	var inits atomic.Int64
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		inits.Add(1)
		return nil, nil, false
	})
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", "producer_pool_size: 3\n"))
	if got := inits.Load(); got != 3 {
		t.Fatalf("%d InitProducerID at Connect, want 3 (one per slot)", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		if err := o.WriteBatch(ctx, batchOf(fmt.Sprintf("e%d", i), 2)); err != nil {
			t.Fatal(err)
		}
	}
	if o.nextEpoch != 21 {
		t.Fatalf("%d epochs, want 20", o.nextEpoch-1)
	}
	if got := inits.Load(); got != 3 {
		t.Fatalf("%d InitProducerID after 20 epochs, want still 3", got)
	}
}

// TestOrphanSlotsFenced: slots beyond a (now smaller) pool whose epochs ended
// are fenced at start too, not only those with a transaction open: a previous
// owner still running with the larger pool (a zombie) could otherwise commit
// a later epoch on one of them after this instance read the state cache.
func TestOrphanSlotsFenced(t *testing.T) {
	c := newCluster(t)
	res := newResources()
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Pool of 3: epochs 1 to 4 commit on slots 1, 2, 0, 1 (more if
	// franz-go ended a first transaction with an abort and the batch was
	// replayed: writes go on until the next epoch is one of slot 2's).
	a := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "app", "producer_pool_size: 3\n"))
	var want []string
	for i := 0; i < 4 || txnstate.SlotFor(a.nextEpoch, 3) != 2; i++ {
		writeReplaying(ctx, t, a, batchOf(fmt.Sprintf("a%d", i), 1))
		want = append(want, fmt.Sprintf("a%d-0", i))
	}
	// The next instance runs a pool of 2 while a still runs.
	b := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "app", "producer_pool_size: 2\n"))
	// a's next epoch opens on slot 2, which b's pool does not use.
	if n := txnstate.SlotFor(a.nextEpoch, 3); n != 2 {
		t.Fatalf("epoch %d on slot %d", a.nextEpoch, n)
	}
	if err := a.WriteBatch(ctx, batchOf("zombie", 1)); err == nil {
		t.Fatal("the previous owner committed an epoch on slot 2 after the next instance started: slot 2 was not fenced")
	}
	wait(t, 20*time.Second, "a stopped by the fence", func() bool { return fc.err() != nil })
	writeReplaying(ctx, t, b, batchOf("b", 1))
	got := readCommitted(t, c.ListenAddrs(), testTopic)
	slices.Sort(got)
	if want = append(want, "b-0"); !slices.Equal(got, want) {
		t.Fatalf("visible %v, want %v", got, want)
	}
}
