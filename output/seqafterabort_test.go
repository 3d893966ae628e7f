package output

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// rawProduceTimeout marks the test's own copy of a captured Produce request,
// which the control function lets through.
const rawProduceTimeout = 4321

// A Produce the broker applied whose answer was lost (the connection closed),
// then retried and answered NOT_LEADER_FOR_PARTITION until the epoch's local
// deadline: franz-go takes the answer to the retry for the fate of the batch
// (not written), fails its records when the epoch aborts and rewinds the
// partition's sequence to the batch's first one. Under transaction version 0
// the abort keeps the producer epoch, and the broker expects the sequence after
// the applied batch: the next transaction on that client reused the sequence,
// and the broker either refused it (OUT_OF_ORDER_SEQUENCE_NUMBER, the
// producer id failed for good: the output stopped at the next epoch, exit 3)
// or, the replayed batch having the same records count, took it for a
// duplicate of the aborted batch and acknowledged it without writing it: the
// epoch committed, its records invisible (lost). After an epoch aborted with
// records not all written, the slot gets a new client (a new producer epoch,
// sequences from 0).
//
// The slot's next transaction writes the replay, with as many records to the
// partition as the aborted batch (replay: the broker's duplicate, the replay
// lost), or another batch with fewer first (other: its sequence refused, then
// the output stopped at the slot's next epoch).
func TestSequenceAfterAbortWithAppliedProduce(t *testing.T) {
	for _, next := range []string{"replay", "other"} {
		t.Run(next, func(t *testing.T) { testSequenceAfterAbort(t, next == "replay") })
	}
}

func testSequenceAfterAbort(t *testing.T, replayFirst bool) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newCluster(t, kfake.MaxVersions(kversion.V3_9_0()))
	brokers := c.ListenAddrs()
	yaml := strings.Replace(baseYAML(brokers, "seqabort", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: 6s", 1)
	a := newUnconnected(t, newResources(), yaml)
	// The refused retries come at once (not after the default 5 s
	// between metadata refreshes), so that franz-go fails the batch as
	// soon as the epoch aborts, as in the simulation's run.
	a.clientOpts = append(a.clientOpts, kgo.MetadataMinAge(50*time.Millisecond))
	if err := a.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	writeReplaying(ctx, t, a, batchOf("a", 2))
	writeReplaying(ctx, t, a, batchOf("a2", 2))

	slot := nextSlot(a)
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MaxVersions(kversion.V3_9_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	// 0: the first Produce of slot's next transaction is closed, and a
	// copy of it applied; 1: every later one is refused
	// NOT_LEADER_FOR_PARTITION; 2: off.
	var state atomic.Int32
	applied := make(chan error, 1)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if req.TransactionID == nil || *req.TransactionID != slot.id || req.TimeoutMillis == rawProduceTimeout || state.Load() == 2 {
			return nil, nil, false
		}
		if state.CompareAndSwap(0, 1) {
			cp := *req
			cp.TimeoutMillis = rawProduceTimeout
			go func() {
				resp, err := cp.RequestWith(ctx, raw)
				if err == nil {
					for _, rt := range resp.Topics {
						for _, rp := range rt.Partitions {
							if err == nil {
								err = kerr.ErrorForCode(rp.ErrorCode)
							}
						}
					}
				}
				applied <- err
			}()
			return nil, errors.New("injected close after the broker applied the request"), true
		}
		return refusedProduce(req, kerr.NotLeaderForPartition.Code), nil, true
	})
	werr := a.WriteBatch(ctx, batchOf("b", 2))
	state.Store(2)
	if !errors.Is(werr, ErrEpochAborted) || fc.err() != nil {
		t.Fatalf("epoch whose produce was refused until its deadline: %v (fatal %v), want it aborted", werr, fc.err())
	}
	select {
	case err := <-applied:
		if err != nil {
			t.Fatalf("the copy of the closed Produce was not applied: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the copy of the closed Produce got no answer")
	}
	// The slot carries every other epoch: the one after the next on the
	// other slot is its own again.
	batches := []service.MessageBatch{batchOf("c", 2), batchOf("b", 2), batchOf("d", 2), batchOf("e", 2)}
	if !replayFirst {
		batches = []service.MessageBatch{batchOf("c", 2), batchOf("x", 1), batchOf("d", 2), batchOf("b", 2), batchOf("e", 2)}
	}
	for i, b := range batches {
		writeReplaying(ctx, t, a, b)
		if fc.err() != nil {
			t.Fatalf("after batch %d: the output stopped: %v", i, fc.err())
		}
	}
	want := map[string]int{"a": 2, "a2": 2, "b": 2, "c": 2, "d": 2, "e": 2}
	if !replayFirst {
		want["x"] = 1
	}
	checkBatchesOnce(t, brokers, want)
}

// An epoch aborts with its records never written (every AddPartitionsToTxn
// answered CONCURRENT_TRANSACTIONS until the epoch's deadline) while another
// instance took the transactional id: the client never heard of the fence,
// and franz-go's abort sends nothing (no partition joined the transaction).
// The slot gets a new client for the unwritten records (above), but only once
// the broker's state shows no other producer: here it shows the other one,
// and the output stops as a zombie instead of fencing it with a new
// InitProducerID.
func TestAbortWithUnwrittenRecordsNotStealing(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newCluster(t, kfake.MaxVersions(kversion.V3_9_0()))
	brokers := c.ListenAddrs()
	yaml := strings.Replace(baseYAML(brokers, "unwritten", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: 6s", 1)
	a := newTestOutput(t, newResources(), yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	writeReplaying(ctx, t, a, batchOf("a", 2))

	slot := nextSlot(a)
	var refusing atomic.Bool
	refusing.Store(true)
	c.ControlKey(int16(kmsg.AddPartitionsToTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.AddPartitionsToTxnRequest)
		if req.TransactionalID != slot.id || !refusing.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewAddPartitionsToTxnResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				sp.Partition = p
				sp.ErrorCode = kerr.ConcurrentTransactions.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	rival := newRival(ctx, t, brokers, slot.id)
	werr := a.WriteBatch(ctx, batchOf("b", 2))
	refusing.Store(false)

	rival.checkStillOwns(ctx, t, a)
	var fe *FencedError
	if !errors.As(fc.err(), &fe) {
		t.Fatalf("epoch aborted with unwritten records while another instance took the id: %v (fatal %v), want a zombie stop (FencedError)", werr, fc.err())
	}
}
