package output

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/connect-eos/connect-eos/statecache"
	"github.com/connect-eos/connect-eos/txnstate"
)

// lateCache is a state cache that fences as kafka_state does (per key, a
// write with a token below the highest one written is refused) and can hold
// one write: its caller gets a timeout at once, and the write lands only when
// the test says so, as a write to a remote cache that timed out can land
// after later ones. Registered as "eos_test_late"; lateResources builds
// resources with one labelled "state".
type lateCache struct {
	mu     sync.Mutex
	vals   map[string][]byte
	tokens map[string]uint64
	// holds pick the writes to keep back: a write that one of them
	// picks is kept, and that one is used up.
	holds []func(key string, value []byte) bool
	held  []lateWrite
}

type lateWrite struct {
	key   string
	value []byte
	token uint64
}

func init() { registerTestCache("eos_test_late") }

func lateResources(t testing.TB) (*service.Resources, *lateCache) {
	t.Helper()
	lc := &lateCache{vals: map[string][]byte{}, tokens: map[string]uint64{}}
	return testCacheResources(t, "eos_test_late", lc), lc
}

func (c *lateCache) Get(_ context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vals[key]
	if !ok {
		return nil, service.ErrKeyNotFound
	}
	return append([]byte(nil), v...), nil
}

// apply writes under the fence; c.mu is held.
func (c *lateCache) apply(w lateWrite) error {
	if cur := c.tokens[w.key]; w.token < cur {
		return &statecache.FencedError{Topic: "late", Key: w.key, Token: w.token, Current: cur}
	}
	c.tokens[w.key] = w.token
	c.vals[w.key] = w.value
	return nil
}

func (c *lateCache) Set(ctx context.Context, key string, value []byte, _ *time.Duration) error {
	w := lateWrite{key: key, value: append([]byte(nil), value...), token: statecache.FenceOf(ctx)}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, h := range c.holds {
		if h(key, value) {
			c.holds = append(c.holds[:i], c.holds[i+1:]...)
			c.held = append(c.held, w)
			return fmt.Errorf("set %s: %w", key, context.DeadlineExceeded)
		}
	}
	return c.apply(w)
}

func (c *lateCache) Add(ctx context.Context, key string, value []byte, ttl *time.Duration) error {
	c.mu.Lock()
	_, ok := c.vals[key]
	c.mu.Unlock()
	if ok {
		return service.ErrKeyAlreadyExists
	}
	return c.Set(ctx, key, value, ttl)
}

func (c *lateCache) Delete(_ context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.vals, key)
	return nil
}

func (c *lateCache) Close(context.Context) error { return nil }

// holdNext keeps back the next write to key whose record is in state st.
func (c *lateCache) holdNext(key string, st txnstate.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds = append(c.holds, func(k string, v []byte) bool {
		if k != key {
			return false
		}
		r, err := txnstate.Decode(v)
		return err == nil && r.State == st
	})
}

// land applies the writes held back, in order, and returns what the fence
// said of each (nil: taken).
func (c *lateCache) land() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, w := range c.held {
		errs = append(errs, c.apply(w))
	}
	c.held = nil
	return errs
}

func (c *lateCache) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// TestLateSlotWriteRefused: a slot's COMMITTED write that timed out (and was
// retried until it landed) can still land later, after the slot carried a
// later epoch. Under transaction version 0 an instance's token does not
// change between its transactions, so a fencing cache would take it and put
// the earlier record back over the later epoch's: in dedupe mode a crash
// before the later epoch's COMMITTED then loses its positions (the next
// start writes its replay again). A slot whose write's outcome is unknown is
// re-initialised before its next epoch, so that its later writes carry a
// higher token and the late write is refused.
func TestLateSlotWriteRefused(t *testing.T) {
	for _, tv := range kfakeTVs {
		for _, st := range []txnstate.State{txnstate.Committed, txnstate.Prepared} {
			t.Run(tv.name+"/"+string(st), func(t *testing.T) { testLateSlotWrite(t, tv.opts, st) })
		}
	}
}

// testLateSlotWrite holds the next write of a record in state st to the slot
// of the next epoch, writes until that slot committed a later epoch, then
// lands the held write.
func testLateSlotWrite(t *testing.T, opts []kfake.Opt, st txnstate.State) {
	c := newCluster(t, opts...)
	res, lc := lateResources(t)
	a := newTestOutput(t, res, baseYAML(c.ListenAddrs(), "app", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, batchOf("first", 3)); err != nil {
		t.Fatal(err)
	}
	s := nextSlot(a)
	key := "app/slot/" + fmt.Sprint(s.n)
	lc.holdNext(key, st)
	// A held COMMITTED is retried until it lands and the batch is acked;
	// a held PREPARE aborts the epoch (ABORTED written) and nacks it.
	if err := a.WriteBatch(ctx, batchOf("held", 3)); (err != nil) != (st == txnstate.Prepared) {
		t.Fatalf("the batch whose %s write was held: %v", st, err)
	}
	held, ok := slotRecord(t, a, s.n)
	if !ok || lc.heldCount() != 1 {
		t.Fatalf("the %s write was not held (held %d, record %+v)", st, lc.heldCount(), held)
	}
	// Epochs until the slot carried a later one, committed.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("the slot carried no later epoch in 10 batches")
		}
		if err := a.WriteBatch(ctx, batchOf(fmt.Sprintf("later%d", i), 3)); err != nil {
			t.Fatal(err)
		}
		if r, ok := slotRecord(t, a, s.n); ok && r.Epoch > held.Epoch && r.State == txnstate.Committed {
			break
		}
	}
	before, _ := slotRecord(t, a, s.n)
	errs := lc.land()
	after, _ := slotRecord(t, a, s.n)
	if after.Epoch != before.Epoch || after.State != before.State {
		t.Fatalf("the late write of epoch %d's %s (%v) put slot %d back from epoch %d %s to epoch %d %s", held.Epoch, st, errs, s.n, before.Epoch, before.State, after.Epoch, after.State)
	}
	if len(errs) != 1 || errs[0] == nil || !strings.Contains(errs[0].Error(), "refused") {
		t.Fatalf("the late write was not refused: %v", errs)
	}
}
