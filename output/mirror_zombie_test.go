package output

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/txnstate"
)

// TestMirrorRivalResumesLaterEpochTV0: a mirror writer still running (a
// zombie that woke up) while a rival with its transactional_id starts, under
// transaction version 0. The rival reads the state cache while the writer's
// first epoch of records (after the epochs of its claim and start) is
// PREPARED on its slot; the running writer then commits it, the next epoch
// waits on the other slot for its commit, and a third opens on the first
// one's slot with records. The producer epoch does not move between a slot's
// transactions, so the rival sees that slot Ongoing at the stored producer id
// and epoch: the open transaction is the third epoch, not the first.
// Resuming it (a raw EndTxn(commit)) committed the third epoch's records
// without its positions (written only once the epoch before it committed)
// and over the second, which the rival's initialisation of the other slot
// aborted: the positions stayed behind records that were committed (v-0-10..14
// after v-0-4), and the copy from them wrote those records again. The rival
// must find the first epoch committed (the probe) and abort the open
// transaction instead.
//
// transaction_timeout is far above anything the test waits for: a fenced
// epoch that has been open that long is taken for one the coordinator
// aborted for its timeout (txnstate.ClassifyFence), which aborts the epoch
// and re-initialises the slot instead of stopping, and the running writer
// would not stop with the fence this test expects. The writer's held epochs
// stay open while the test waits (up to mirrorDeadline each step), which a
// loaded machine can stretch past a short timeout.
func TestMirrorRivalResumesLaterEpochTV0(t *testing.T) {
	testMirrorRivalResumesLaterEpochTV0(t, newMirrorEnv(t, 3, kfake.MaxVersions(kversion.V3_9_0())))
}

// The same on Apache Kafka, the target cluster under transaction version 0.
func TestMirrorKafkaRivalResumesLaterEpochTV0(t *testing.T) {
	testMirrorRivalResumesLaterEpochTV0(t, kafkaMirrorEnv(t, 2, 0, 3))
}

func testMirrorRivalResumesLaterEpochTV0(t *testing.T, e mirrorEnv) {
	fc, restore := catchFatal(t)
	t.Cleanup(restore) // registered first: runs after the outputs closed
	txnID := e.id + "rival"
	yaml := fmt.Sprintf(`
seed_brokers: [ %s ]
transactional_id: %s
consumer_group: %s
state_cache: state
producer_pool_size: 2
transaction_timeout: 5m
epoch: { interval: 20ms }
mirror: { positions_topic: %s, topics: { %s: %s } }
`, strings.Join(e.b, ","), txnID, e.group, e.positions, e.src, e.dst)
	resA := newResources()
	a := newUnconnected(t, resA, yaml)
	a.Member(&fakeGroup{owned: map[int32]uint64{0: 1}, gen: 1, member: "m"})
	prepared1, release1 := make(chan struct{}), make(chan struct{})
	committing2, release2 := make(chan struct{}), make(chan struct{})
	// Epochs are told apart by their batches (the claim and the input's
	// start hand over in epochs of their own): first, the first data
	// epoch; second, the next one.
	var first, second atomic.Uint64
	a.hooks = &testHooks{
		atStep: func(s commitStep, n uint64) error {
			if s == stepPrepared && first.Load() == 0 && hasBatches(a, n) {
				first.Store(n)
				close(prepared1)
				<-release1
			}
			return nil
		},
		beforeCommit: func(n uint64) {
			if f := first.Load(); f != 0 && n > f && second.Load() == 0 && hasBatches(a, n) {
				second.Store(n)
				close(committing2)
				<-release2
			}
		},
	}
	// Registered after newUnconnected's Close: runs before it.
	t.Cleanup(func() {
		for _, ch := range []chan struct{}{release1, release2} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	if err := a.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if a.clusterTV != txnstate.TV0 {
		t.Fatalf("cluster transaction version %d, want 0", a.clusterTV)
	}
	claim(t, a, e, 0)
	a.StartAt(map[string]map[int32]int64{e.src: {0: 0}})
	errs := make(chan error, 3)
	go func() { errs <- a.WriteBatch(ctx, sourceBatch(e, 0, 0, 5)) }()
	select {
	case <-prepared1:
	case <-ctx.Done():
		t.Fatal("epoch 2 never reached PREPARE")
	}
	n1 := first.Load()
	slot := txnstate.SlotFor(n1, 2)
	if r, ok := slotRecord(t, a, slot); !ok || r.Epoch != n1 || r.State != txnstate.Prepared {
		t.Fatalf("slot %d holds %+v, want epoch %d PREPARED", slot, r, n1)
	}
	slotID := txnstate.SlotID(txnID, slot)
	// The rival's process reads the state cache now.
	resB := newResources()
	copyState(t, resA, resB, txnID, 2)

	// The running writer goes on: epoch 2 commits, epoch 3 (the other
	// slot) waits for its commit, epoch 4 opens on epoch 2's slot.
	close(release1)
	if err := <-errs; err != nil {
		t.Fatalf("epoch 2: %v", err)
	}
	go func() { errs <- a.WriteBatch(ctx, sourceBatch(e, 0, 5, 5)) }()
	select {
	case <-committing2:
	case <-ctx.Done():
		t.Fatal("epoch 3 never reached the committer")
	}
	if n2 := second.Load(); txnstate.SlotFor(n2+1, 2) != slot {
		t.Fatalf("the next epoch after %d, %d, would not open on epoch %d's slot %d", n2, n2+1, n1, slot)
	}
	go func() { errs <- a.WriteBatch(ctx, sourceBatch(e, 0, 10, 5)) }()
	adm := kadm.NewClient(a.admin)
	wait(t, mirrorDeadline, "epoch 4 open on epoch 2's slot", func() bool {
		ds, err := adm.DescribeTransactions(ctx, slotID)
		if err != nil {
			return false
		}
		d, ok := ds[slotID]
		return ok && d.State == txnstate.BrokerOngoing && len(d.Topics) > 0
	})

	// The rival starts on what it read.
	b := newUnconnected(t, resB, yaml)
	b.Member(&fakeGroup{owned: map[int32]uint64{0: 1}, gen: 2, member: "n"})
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("rival connect: %v", err)
	}
	close(release2)
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("the fenced writer acked an epoch after the rival started")
		}
	}
	var fenced *FencedError
	if !errors.As(fc.err(), &fenced) {
		t.Fatalf("the running writer stopped with %v, want a fence", fc.err())
	}
	if got := readCommitted(t, e.b, e.dst); !slices.Equal(got, []string{"v-0-0", "v-0-1", "v-0-2", "v-0-3", "v-0-4"}) {
		t.Fatalf("target %v after the rival's start, want the first data epoch's records only (later ones committed without their positions are copied again)", got)
	}
	// The first data epoch committed before the rival looked: found so
	// by the probe.
	if got := b.m.tally.get(metricInDoubtResolved + "/" + outcomeFoundCommitted); got != 1 {
		t.Fatalf("%d epochs resolved found-committed, want 1 (the first data epoch)", got)
	}
	// The rival copies on from the committed position: every record once.
	if got := claim(t, b, e, 0); got[0] != 5 {
		t.Fatalf("the rival's claim: position %v, want 5 (the first data epoch)", got)
	}
	b.StartAt(map[string]map[int32]int64{e.src: {0: 5}})
	if err := b.WriteBatch(ctx, sourceBatch(e, 0, 5, 10)); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 15 {
		want = append(want, fmt.Sprintf("v-0-%d", i))
	}
	if got := readCommitted(t, e.b, e.dst); !slices.Equal(got, want) {
		t.Fatalf("target %v, want %v", got, want)
	}
}

// hasBatches reports whether live epoch n of o carries batches.
func hasBatches(o *output, n uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range o.live {
		if l.n == n {
			return len(l.batches) > 0
		}
	}
	return false
}
