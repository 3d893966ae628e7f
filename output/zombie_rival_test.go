package output

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/txnstate"
)

// writeStalled has zombie A write batch in the background and returns once
// A's hooks closed stalled (the epoch held at the step the test chose, for
// the rival to start meanwhile); A's answer comes on the returned channel.
func writeStalled(ctx context.Context, a *output, batch service.MessageBatch, stalled <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() { done <- a.WriteBatch(ctx, batch) }()
	<-stalled
	return done
}

// rivalStart is where rival B starts after its recovery: its committed
// dedupe position of key "a" and the number of its next epoch.
func rivalStart(b *output) (pos int64, next uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	pos, _ = b.dd.CommittedOf("a")
	return pos, b.nextEpoch
}

// A zombie that wakes while its rival starts, and commits an epoch after the
// rival read the state cache but before the rival's InitProducerID fenced the
// epoch's slot: the rival must count that epoch's dedupe positions (and
// number its own epochs after it). A writes epoch 1 (a@1..2), stalls after
// flushing epoch 2 (a@3..5); B starts, reads the state cache (recovery), and
// before it initialises its slots A wakes and commits epoch 2: either it
// stops right after its EndTxn (its record stays PREPARED, the zombie in the
// simulation whose verification is answered PRODUCER_FENCED), or it writes
// COMMITTED and the positions too. The input then replays a@1..6 to B: only
// a@6 may be written. On the original code B loaded the positions it had
// read before A's commit (a@2) and wrote a@3..5 a second time.
func TestZombieCommitsWhileRivalStarts(t *testing.T) {
	for _, tv := range kfakeTVs {
		for _, cache := range []string{"kafka_state", "shared"} {
			for _, full := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/full=%v", tv.name, cache, full), func(t *testing.T) {
					c := newCluster(t, tv.opts...)
					brokers := c.ListenAddrs()
					res := func() *service.Resources { return kafkaStateResources(t, brokers, "zr-state") }
					if cache == "shared" {
						shared := newResources()
						res = func() *service.Resources { return shared }
					}
					testZombieCommitsWhileRivalStarts(t, brokers, res, full)
				})
			}
		}
	}
}

func testZombieCommitsWhileRivalStarts(t *testing.T, brokers []string, res func() *service.Resources, full bool) {
	_, restore := catchFatal(t)
	defer restore()
	yaml := yamlFor(brokers, testTopic, "zr", dedupeExtra)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := newTestOutput(t, res(), yaml)
	writeReplaying(ctx, t, a, posBatch("a", 1, 2)) // a fresh client\'s first transaction
	stalled, wake := make(chan struct{}), make(chan struct{})
	a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
		if n != 2 {
			return nil
		}
		switch {
		case s == stepProduced:
			close(stalled)
			<-wake // A stalls after its flush, before its PREPARE
		case s == stepEnded && !full:
			return errCrash // committed; stops before COMMITTED
		}
		return nil
	}}
	aDone := writeStalled(ctx, a, posBatch("a", 3, 5), stalled)

	b := newUnconnected(t, res(), yaml)
	b.hooks = &testHooks{afterRecover: func() {
		// B has read the state cache; A wakes and commits epoch 2
		// before B's InitProducerID of its slot.
		close(wake)
		err := <-aDone
		if full && err != nil || !full && !errors.Is(err, errCrash) {
			t.Errorf("A's epoch 2: %v", err)
		}
	}}
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("B's connect: %v", err)
	}
	p, next := rivalStart(b)
	if p != 5 || next != 3 {
		t.Errorf("B starts with a's committed position %d and next epoch %d, want 5 (A's epoch 2 committed) and 3", p, next)
	}
	if got := b.m.tally.get(metricInDoubtResolved + "/" + outcomeFoundCommitted); !full && got != 1 {
		t.Errorf("B resolved %d epochs found committed, want A's epoch 2", got)
	}
	// The positions value holds A's epoch 2 before B's first PREPARE
	// (which may overwrite the slot record that held them).
	if pos, err := b.store.readPositions(ctx); err != nil || pos["a"] != 5 {
		t.Errorf("stored positions after B's start %v (%v), want a=5", pos, err)
	}
	if err := b.WriteBatch(ctx, posBatch("a", 1, 6)); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, brokers, testTopic, "a", 1, 6)
	// A restart finds A's epoch 2 decided committed in the state cache.
	slot := txnstate.SlotFor(2, len(b.slots))
	if r, ok := slotRecord(t, b, slot); !ok || r.Epoch < 2 || r.Epoch == 2 && r.State != txnstate.Committed {
		t.Fatalf("slot %d holds %+v (found %v) after B's start", slot, r, ok)
	}
}

// Under transaction version 0 a slot keeps its producer epoch from one
// transaction to the next, so the transaction a rival's recovery sees open at
// a record's stored producer id and epoch may be a later epoch of a zombie
// still running. A prepares epoch 2 (a@3..5) and stalls before its EndTxn; B
// reads the state cache (slot 0: epoch 2 PREPARED); before B observes it, A
// wakes, commits epoch 2, epoch 3 (a@6..8, slot 1) and flushes epoch 4
// (a@9..11) on slot 0, where it stalls before its PREPARE. B must not commit
// epoch 4 (no PREPARE record holds its positions): the input's replay of
// a@1..11 must leave every message once. On the original code B resumed
// "epoch 2" with a raw EndTxn(commit) that committed epoch 4's records, and
// wrote a@9..11 again. Under version 2 the epochs differ: both versions run.
func TestZombieLaterEpochOpenAtRivalObserve(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c := newCluster(t, tv.opts...)
			brokers := c.ListenAddrs()
			res := newResources() // shared: every write is seen at once
			_, restore := catchFatal(t)
			defer restore()
			yaml := yamlFor(brokers, testTopic, "zl", dedupeExtra+"producer_pool_size: 2\n")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			a := newTestOutput(t, res, yaml)
			writeReplaying(ctx, t, a, posBatch("a", 1, 2)) // a fresh client\'s first transaction
			stalled2, wake2 := make(chan struct{}), make(chan struct{})
			stalled4, wake4 := make(chan struct{}), make(chan struct{})
			a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
				switch {
				case s == stepPrepared && n == 2:
					close(stalled2)
					<-wake2 // PREPARE of 2 written, before its EndTxn
				case s == stepProduced && n == 4:
					close(stalled4)
					<-wake4 // epoch 4 flushed, before its PREPARE
				}
				return nil
			}}
			a2 := writeStalled(ctx, a, posBatch("a", 3, 5), stalled2)
			a4 := make(chan error, 1)

			b := newUnconnected(t, res, yaml)
			b.hooks = &testHooks{beforeObserve: func() {
				close(wake2)
				if err := <-a2; err != nil {
					t.Errorf("A's epoch 2: %v", err)
				}
				if err := a.WriteBatch(ctx, posBatch("a", 6, 8)); err != nil {
					t.Errorf("A's epoch 3: %v", err)
				}
				go func() { a4 <- a.WriteBatch(ctx, posBatch("a", 9, 11)) }()
				<-stalled4
			}}
			if err := b.Connect(ctx); err != nil {
				t.Fatalf("B's connect: %v", err)
			}
			close(wake4)
			if err := <-a4; err == nil {
				t.Error("A's epoch 4 was acked after B's start")
			}
			if err := b.WriteBatch(ctx, posBatch("a", 1, 11)); err != nil {
				t.Fatal(err)
			}
			wantOnly(t, brokers, testTopic, "a", 1, 11)
		})
	}
}

// An epoch a rival's recovery decides to abort while it is open (dedupe under
// transaction version 0) can still be committed by its zombie before the
// rival's InitProducerID of the slot: A prepares epoch 2 (a@3..5) and stalls
// before its EndTxn; B observes it open and decides abort-open; A wakes,
// commits it, and stops before its COMMITTED; then B initialises its slots.
// B must find epoch 2 committed (its positions count): the replay of a@1..6
// leaves every message once. Without the second look after the fence B kept
// its decision, loaded a@2 and wrote a@3..5 again.
func TestZombieCommitsAbortedOpenBeforeFence(t *testing.T) {
	c := newCluster(t, kfakeTVs[1].opts...) // TV0: an open epoch is aborted
	brokers := c.ListenAddrs()
	res := newResources()
	_, restore := catchFatal(t)
	defer restore()
	yaml := yamlFor(brokers, testTopic, "za", dedupeExtra)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := newTestOutput(t, res, yaml)
	writeReplaying(ctx, t, a, posBatch("a", 1, 2)) // a fresh client\'s first transaction
	stalled, wake := make(chan struct{}), make(chan struct{})
	a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
		switch {
		case s == stepPrepared && n == 2:
			close(stalled)
			<-wake
		case s == stepEnded && n == 2:
			return errCrash
		}
		return nil
	}}
	a2 := writeStalled(ctx, a, posBatch("a", 3, 5), stalled)

	b := newUnconnected(t, res, yaml)
	b.hooks = &testHooks{afterRecover: func() {
		close(wake)
		if err := <-a2; !errors.Is(err, errCrash) {
			t.Errorf("A's epoch 2: %v", err)
		}
	}}
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("B's connect: %v", err)
	}
	if got := b.m.tally.get(metricInDoubtResolved + "/" + outcomeAborted); got != 1 {
		t.Errorf("B decided abort-open %d times, want once (epoch 2, open)", got)
	}
	if got := b.m.tally.get(metricInDoubtResolved + "/" + outcomeFoundCommitted); got != 1 {
		t.Errorf("B found %d epochs committed after the fence, want epoch 2", got)
	}
	if r, ok := slotRecord(t, b, txnstate.SlotFor(2, len(b.slots))); !ok || r.Epoch != 2 || r.State != txnstate.Committed {
		t.Errorf("slot record %+v (found %v), want epoch 2 COMMITTED", r, ok)
	}
	if err := b.WriteBatch(ctx, posBatch("a", 1, 6)); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, brokers, testTopic, "a", 1, 6)
}

// A rival's recovery must not write its decision for an epoch over a later
// epoch its zombie prepared on the same slot meanwhile. Under transaction
// version 0 a slot keeps its producer id and epoch from one transaction to
// the next, so the zombie's later records carry the owner token of the
// record recovery read. A (two slots) commits epoch 1 (a@1..2, slot 1),
// commits epoch 2 (a@3..5, slot 0) and stalls before its COMMITTED; B reads
// the state cache (slot 0: epoch 2 PREPARED); before B observes it, A wakes:
// it finishes epoch 2, commits epoch 3 (a@6..8, slot 1) and epoch 4
// (a@9..11) on slot 0, and stops before epoch 4's COMMITTED (its PREPARE
// holds the positions a@11). B finds epoch 2 committed and must keep epoch
// 4's record: the replay of a@1..12 leaves every message once, and slot 0
// ends with epoch 4 committed. On the original code B wrote "epoch 2
// COMMITTED" over epoch 4's PREPARE before its fence, loaded a@8 and wrote
// a@9..11 again.
func TestZombieLaterEpochPreparedAtRivalDecision(t *testing.T) {
	for _, tv := range kfakeTVs {
		for _, cache := range []string{"kafka_state", "shared"} {
			t.Run(tv.name+"/"+cache, func(t *testing.T) {
				c := newCluster(t, tv.opts...)
				brokers := c.ListenAddrs()
				res := func() *service.Resources { return kafkaStateResources(t, brokers, "zd-state") }
				if cache == "shared" {
					shared := newResources()
					res = func() *service.Resources { return shared }
				}
				testZombieLaterEpochPreparedAtRivalDecision(t, brokers, testTopic, "zd", res)
			})
		}
	}
}

// The same on Apache Kafka with kafka_state: under TV0 B's decision landed
// over epoch 4's PREPARE; under TV2 the later epoch's records carry a higher
// owner token and win at read.
func TestKafkaZombieLaterEpochPreparedAtRivalDecision(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		state := env.stateTopic(t)
		res := func() *service.Resources { return kafkaStateResources(t, env.brokers, state) }
		testZombieLaterEpochPreparedAtRivalDecision(t, env.brokers, env.topic, env.txnID, res)
	})
}

func testZombieLaterEpochPreparedAtRivalDecision(t *testing.T, brokers []string, topic, txnID string, res func() *service.Resources) {
	_, restore := catchFatal(t)
	defer restore()
	yaml := yamlFor(brokers, topic, txnID, dedupeExtra+"producer_pool_size: 2\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := newTestOutput(t, res(), yaml)
	writeReplaying(ctx, t, a, posBatch("a", 1, 2)) // a fresh client\'s first transaction
	stalled, wake := make(chan struct{}), make(chan struct{})
	a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
		switch {
		case s == stepEnded && n == 2:
			close(stalled)
			<-wake // committed, before its COMMITTED
		case s == stepEnded && n == 4:
			return errCrash // committed; stops before COMMITTED
		}
		return nil
	}}
	a2 := writeStalled(ctx, a, posBatch("a", 3, 5), stalled)

	b := newUnconnected(t, res(), yaml)
	b.hooks = &testHooks{beforeObserve: func() {
		// B has read slot 0 (epoch 2 PREPARED); A wakes, finishes
		// epoch 2, commits epoch 3 and epoch 4 on slot 0.
		close(wake)
		if err := <-a2; err != nil {
			t.Errorf("A's epoch 2: %v", err)
		}
		if err := a.WriteBatch(ctx, posBatch("a", 6, 8)); err != nil {
			t.Errorf("A's epoch 3: %v", err)
		}
		if err := a.WriteBatch(ctx, posBatch("a", 9, 11)); !errors.Is(err, errCrash) {
			t.Errorf("A's epoch 4: %v", err)
		}
	}}
	if err := b.Connect(ctx); err != nil {
		t.Fatalf("B's connect: %v", err)
	}
	p, next := rivalStart(b)
	if p != 11 || next != 5 {
		t.Errorf("B starts with a's committed position %d and next epoch %d, want 11 (A's epoch 4 committed) and 5", p, next)
	}
	if r, ok := slotRecord(t, b, 0); !ok || r.Epoch != 4 || r.State != txnstate.Committed {
		t.Errorf("slot 0 holds %+v (found %v) after B's start, want epoch 4 COMMITTED", r, ok)
	}
	if pos, err := b.store.readPositions(ctx); err != nil || pos["a"] != 11 {
		t.Errorf("stored positions after B's start %v (%v), want a=11", pos, err)
	}
	if err := b.WriteBatch(ctx, posBatch("a", 1, 12)); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, brokers, topic, "a", 1, 12)
}
