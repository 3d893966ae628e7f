package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The producer probe: a raw franz-go transactional producer loop on the same
// records, the same producer settings (producerOpts) and the same epoch
// interval as kafka_eos, without Benthos. It is what the client can do; a gap
// between it and the pipeline is Benthos' and the output's, a gap between it
// and ProducerPerformance is the client's.
//
// It runs like kafka_eos's slot pool: slots transactional producers, epoch N+1
// produces on the next slot while epoch N flushes and commits in the
// background; a slot is reused only once its previous commit returned. An
// epoch ends once interval has passed since it began (checked every 64
// records), as ProducerPerformance's --transaction-duration-ms.
func runProbe(ctx context.Context, o options, slots int) (result, error) {
	value := payload(o.size)
	clients := make([]*kgo.Client, slots)
	for i := range clients {
		opts := append(producerOpts(o),
			// The byte budget shared by the slots, as kafka_eos's.
			kgo.MaxBufferedBytes((256<<20)/slots),
			kgo.TransactionalID(fmt.Sprintf("bench-probe-%s-%d", o.topic, i)),
			kgo.TransactionTimeout(60*time.Second))
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		clients[i] = cl
		// Warm-up: one committed transaction of one record per slot
		// (InitProducerID, AddPartitions, EndTxn), outside the clock, as
		// the pipelines' warm-up batch.
		if err := oneTxn(ctx, cl, value); err != nil {
			return result{}, fmt.Errorf("warm-up of slot %d: %w", i, err)
		}
	}

	var failed atomic.Pointer[error]
	onDone := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	commits := make([]chan error, slots)
	var epochs int64
	start := time.Now()
	produced := 0
	for slot := 0; produced < o.records; slot = (slot + 1) % slots {
		cl := clients[slot]
		if commits[slot] != nil {
			if err := <-commits[slot]; err != nil {
				return result{}, err
			}
		}
		if err := cl.BeginTransaction(); err != nil {
			return result{}, err
		}
		began := time.Now()
		for produced < o.records {
			cl.Produce(ctx, &kgo.Record{Value: value}, onDone)
			produced++
			if produced%64 == 0 && time.Since(began) >= o.interval {
				break
			}
		}
		epochs++
		ch := make(chan error, 1)
		commits[slot] = ch
		go func() {
			if err := cl.Flush(ctx); err != nil {
				ch <- err
				return
			}
			if p := failed.Load(); p != nil {
				ch <- fmt.Errorf("produce: %w", *p)
				return
			}
			ch <- cl.EndTransaction(ctx, kgo.TryCommit)
		}()
	}
	for _, ch := range commits {
		if ch != nil {
			if err := <-ch; err != nil {
				return result{}, err
			}
		}
	}
	d := time.Since(start)
	return result{Records: int64(o.records), Bytes: int64(o.records) * int64(o.size), Seconds: d.Seconds(), Epochs: epochs}, nil
}

func oneTxn(ctx context.Context, cl *kgo.Client, value []byte) error {
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return err
	}
	return cl.EndTransaction(ctx, kgo.TryCommit)
}

// runRawConsume is the raw franz-go poll loop of the consume rows: every
// partition from the start with read_committed, until o.records records were
// read (the parent filled the topic with exactly that many). Its rate is
// taken like kafka_native's: from the first fetch that returned records to
// the last, over the records after the first fetch.
func runRawConsume(ctx context.Context, o options) (result, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(o.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return result{}, err
	}
	defer cl.Close()

	began := time.Now()
	var first, last time.Time
	var total, after int64
	for total < int64(o.records) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return result{}, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return result{}, ferr
		}
		n := int64(fs.NumRecords())
		if n == 0 {
			continue
		}
		total += n
		now := time.Now()
		if first.IsZero() {
			first = now
			continue
		}
		last = now
		after += n
	}
	if after == 0 {
		// One fetch held everything (tiny runs): time it from the start.
		return result{Records: total, Seconds: time.Since(began).Seconds()}, nil
	}
	return result{Records: after, Seconds: last.Sub(first).Seconds()}, nil
}
