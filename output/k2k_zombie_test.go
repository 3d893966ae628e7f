package output

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/txnstate"
)

// copyState copies the slot records of txnID (and its pool high-water mark)
// from one memory state cache to another: what a process starting now reads.
func copyState(t *testing.T, from, to *service.Resources, txnID string, slots int) {
	t.Helper()
	ctx := context.Background()
	keys := []string{txnID + "/slots"}
	for n := range slots {
		keys = append(keys, txnID+"/slot/"+strconv.Itoa(n))
	}
	for _, k := range keys {
		var (
			v   []byte
			err error
		)
		if aerr := from.AccessCache(ctx, "state", func(c service.Cache) { v, err = c.Get(ctx, k) }); aerr != nil {
			t.Fatal(aerr)
		}
		if errors.Is(err, service.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if aerr := to.AccessCache(ctx, "state", func(c service.Cache) { err = c.Set(ctx, k, v, nil) }); aerr != nil || err != nil {
			t.Fatal(aerr, err)
		}
	}
}

// TestK2KRivalResumesLaterEpochTV0: a Kafka-to-Kafka instance still running
// (a zombie that woke up) while a rival with its transactional_id starts.
// The rival reads the state cache while epoch 1 is PREPARED on slot 0; the
// running instance then commits epoch 1, epoch 2 waits on slot 1 for its
// commit, and epoch 3 opens on slot 0 with records. Under transaction version
// 0 the producer epoch does not move between a slot's transactions, so the
// rival's DescribeTransactions shows that slot Ongoing at the stored producer id
// and epoch: that open transaction is epoch 3, not epoch 1. Resuming it (a
// raw EndTxn(commit)) commits epoch 3's records without its offsets (planned
// only once epoch 2 committed) and over epoch 2, which the rival's slot
// initialisation then aborts: the group's offset stays behind records that
// are committed, and the next owner copies them again (I3, I5). The rival's
// recovery must ask the Fetch probe whether epoch 1's own records are still
// undecided before it treats the open transaction as epoch 1.
func TestK2KRivalResumesLaterEpochTV0(t *testing.T) {
	fc, restore := catchFatal(t)
	t.Cleanup(restore) // registered first: runs after the outputs closed
	c := newCluster(t, kfake.SeedTopics(3, k2kIn), kfake.MaxVersions(kversion.V3_9_0()))
	brokers := c.ListenAddrs()
	const txnID = "k2k-rival"
	yaml := baseYAML(brokers, txnID, "consumer_group: "+k2kGroup+"\nproducer_pool_size: 2\n")
	resA := newResources()
	a := newUnconnected(t, resA, yaml)
	prepared1 := make(chan struct{})
	release1 := make(chan struct{})
	committing2 := make(chan struct{})
	release2 := make(chan struct{})
	a.hooks = &testHooks{
		atStep: func(s commitStep, n uint64) error {
			if s == stepPrepared && n == 1 {
				close(prepared1)
				<-release1
			}
			return nil
		},
		beforeCommit: func(n uint64) {
			if n == 2 {
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if a.clusterTV != txnstate.TV0 {
		t.Fatalf("cluster transaction version %d, want 0", a.clusterTV)
	}
	if err := a.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 0}}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	go func() { errs <- a.WriteBatch(ctx, spanBatch("a", 0, 0, 10, 4)) }()
	select {
	case <-prepared1:
	case <-ctx.Done():
		t.Fatal("epoch 1 never reached PREPARE")
	}
	slot := 0
	r1, ok := slotRecord(t, a, slot)
	if !ok {
		slot = 1
		r1, ok = slotRecord(t, a, slot)
	}
	if !ok || r1.Epoch != 1 || r1.State != txnstate.Prepared {
		t.Fatalf("slot %d holds %+v, want epoch 1 PREPARED", slot, r1)
	}
	slotID := txnstate.SlotID(txnID, slot)
	// The rival's process reads the state cache now.
	resB := newResources()
	copyState(t, resA, resB, txnID, 2)

	// The running instance goes on: epoch 1 commits, epoch 2 (slot 1)
	// waits for its commit, epoch 3 opens on slot 0 with records.
	close(release1)
	if err := <-errs; err != nil {
		t.Fatalf("epoch 1: %v", err)
	}
	go func() { errs <- a.WriteBatch(ctx, spanBatch("b", 0, 10, 20, 4)) }()
	select {
	case <-committing2:
	case <-ctx.Done():
		t.Fatal("epoch 2 never reached the committer")
	}
	go func() { errs <- a.WriteBatch(ctx, spanBatch("c", 0, 20, 30, 4)) }()
	adm := kadm.NewClient(a.admin)
	wait(t, 20*time.Second, "epoch 3 open on epoch 1's slot", func() bool {
		ds, err := adm.DescribeTransactions(ctx, slotID)
		if err != nil {
			return false
		}
		d, ok := ds[slotID]
		return ok && d.State == txnstate.BrokerOngoing && len(d.Topics) > 0
	})

	// The rival starts on what it read.
	b := newUnconnected(t, resB, yaml)
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("rival connect: %v", err)
	}
	close(release2)
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("the fenced instance acked an epoch after the rival started")
		}
	}

	var fenced *FencedError
	if !errors.As(fc.err(), &fenced) {
		t.Fatalf("the running instance stopped with %v, want a fence", fc.err())
	}

	got := readCommitted(t, brokers, testTopic)
	offs := groupOffsets(t, brokers, k2kGroup, k2kIn)
	var later []string
	for _, v := range got {
		if !strings.HasPrefix(v, "a-") {
			later = append(later, v)
		}
	}
	if len(later) > 0 {
		t.Fatalf("committed %v past the group's offset %v (epoch 3's records, committed by the rival's recovery without their offsets: copied again by the next owner)", later, offs)
	}
	if offs[0] != 10 {
		t.Fatalf("group offset %v, want 0:10 (epoch 1)", offs)
	}
	// Epoch 1 committed before the rival looked: found so (the Fetch
	// probe at its first offsets), not decided by the open transaction.
	if got := b.m.tally.get(metricInDoubtResolved + "/" + outcomeFoundCommitted); got != 1 {
		t.Fatalf("epoch 1 resolved found-committed %d times, want 1", got)
	}
}
