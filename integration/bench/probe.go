package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// window is the time bound of a produce run: warm-up records go out for
// warmup, then the measured records for duration; the measured span ends
// once the last measured record is acknowledged (committed, for the
// transactional loops), as ProducerPerformance's steady-state line counts the
// records after --warmup-records until its producer closed.
type window struct {
	warmup, duration time.Duration
	began, start     time.Time
	marked           bool
}

// tick is called before each record (or batch) is produced; it returns
// measured (the record belongs to the measured span) and done (the measured
// span is over: produce nothing more).
func (w *window) tick(now time.Time) (measured, done bool) {
	if w.began.IsZero() {
		w.began = now
	}
	if !w.marked {
		if now.Sub(w.began) < w.warmup {
			return false, false
		}
		w.marked, w.start = true, now
	}
	return true, now.Sub(w.start) >= w.duration
}

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
// records), as ProducerPerformance's --transaction-duration-ms. With
// o.records > 0 it produces that many records (the consume rows' fill),
// otherwise it runs for o.warmup + o.duration.
func runProbe(ctx context.Context, o options, slots int) (result, error) {
	value := payload(o.size)
	clients := make([]*kgo.Client, slots)
	for i := range clients {
		opts := append(producerOpts(o),
			// The byte budget shared by the slots, as kafka_eos's.
			kgo.MaxBufferedBytes((256<<20)/slots),
			kgo.TransactionalID(fmt.Sprintf("bench-probe-%s-%d-%d", o.topic, time.Now().UnixNano(), i)),
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
	total := int64(slots)

	var failed atomic.Pointer[error]
	onDone := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	commits := make([]chan error, slots)
	w := window{warmup: o.warmup, duration: o.duration}
	var epochs, measured int64
	counted := o.records > 0
	start := time.Now()
	done := false
	for slot := 0; !done; slot = (slot + 1) % slots {
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
		inWindow := false
		for n := 0; ; n++ {
			if counted {
				if total-int64(slots) >= int64(o.records) {
					done = true
					break
				}
				if n%64 == 0 && n > 0 && time.Since(began) >= o.interval {
					break
				}
			} else if n%64 == 0 {
				now := time.Now()
				m, d := w.tick(now)
				inWindow = inWindow || m
				if d {
					done = true
					break
				}
				if n > 0 && now.Sub(began) >= o.interval {
					break
				}
			}
			cl.Produce(ctx, &kgo.Record{Value: value}, onDone)
			total++
			if w.marked {
				measured++
			}
		}
		if inWindow {
			epochs++
		}
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
	end := time.Now()
	if counted {
		return result{Records: total - int64(slots), Total: total, Seconds: end.Sub(start).Seconds(), Epochs: epochs}, nil
	}
	return result{Records: measured, Total: total, Seconds: end.Sub(w.start).Seconds(), Epochs: epochs}, nil
}

// runRawProduce is the ceiling row's franz-go producer: the same producer
// settings (1 MiB batches, the whole 256 MiB budget, idempotent, acks=all), no
// transactions, time-bounded like the probe; the span ends once every record
// is acknowledged.
func runRawProduce(ctx context.Context, o options) (result, error) {
	value := payload(o.size)
	cl, err := kgo.NewClient(producerOpts(o)...)
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
		return result{}, fmt.Errorf("warm-up record: %w", err)
	}
	var failed atomic.Pointer[error]
	onDone := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	w := window{warmup: o.warmup, duration: o.duration}
	total, measured := int64(1), int64(0)
	for n := 0; ; n++ {
		if n%64 == 0 {
			if _, done := w.tick(time.Now()); done {
				break
			}
		}
		cl.Produce(ctx, &kgo.Record{Value: value}, onDone)
		total++
		if w.marked {
			measured++
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return result{}, err
	}
	if p := failed.Load(); p != nil {
		return result{}, *p
	}
	return result{Records: measured, Total: total, Seconds: time.Since(w.start).Seconds()}, nil
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

// partReads are the records a reader received per partition: how many, and
// the offset after the last one. The parent checks them against the topic:
// the count must equal the read_committed records below that offset.
type partReads map[int32]*partRead

type partRead struct {
	N    int64 `json:"n"`
	Next int64 `json:"next"`
}

func (p partReads) add(part int32, n, next int64) {
	r := p[part]
	if r == nil {
		r = &partRead{}
		p[part] = r
	}
	r.N += n
	r.Next = max(r.Next, next)
}

// runRawConsume is the raw franz-go poll loop of the consume rows: every
// partition from the start with read_committed, for o.duration. Its clock is
// kafka_native's: from the client's creation (metadata, offsets and the first
// fetch included) to the end of the duration.
func runRawConsume(ctx context.Context, o options) (result, error) {
	began := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(o.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	timed := o.duration > 0
	deadline := began.Add(o.duration)
	pctx := ctx
	if timed {
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	reads := partReads{}
	var inSpan, total int64
	for {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			break
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return result{}, ferr
		}
		now := time.Now()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if n := len(p.Records); n > 0 {
				reads.add(p.Partition, int64(n), p.Records[n-1].Offset+1)
				total += int64(n)
				if !timed || !now.After(deadline) {
					inSpan += int64(n)
				}
			}
		})
		if o.records > 0 && total >= int64(o.records) {
			if !timed {
				return result{Records: total, Total: total, Seconds: time.Since(began).Seconds(), Reads: reads}, nil
			}
			return result{EndedEarly: true, Records: total, Seconds: time.Since(began).Seconds()}, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	return result{Records: inSpan, Total: total, Seconds: o.duration.Seconds(), Reads: reads}, nil
}

// errEndedEarly: a time-bounded reader reached the end of the topic before
// its duration (its result says how fast it read); the parent fills the topic
// further and runs it again.
var errEndedEarly = errors.New("reached the end of the topic before the duration")

// runRawCopy is the copy rows' limit: franz-go's consume-transform-produce
// loop with the group's offsets in each transaction (GroupTransactSession, the
// loop franz-go documents for exactly-once), copying every record (key,
// value, headers, partition kept) of the consume topic to o.copyTopic with
// read_committed, an epoch every o.interval, for o.duration from the first
// record read; the last transaction commits before the span ends.
func runRawCopy(ctx context.Context, o options) (result, error) {
	group := "bench-copy-" + o.copyTopic
	s, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(o.brokers),
		kgo.TransactionalID(group),
		kgo.TransactionTimeout(60*time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(1<<30),
		kgo.MaxBufferedBytes(256<<20),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(o.topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
	)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	var failed atomic.Pointer[error]
	onDone := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	var first time.Time
	var copied, epochs int64
	for {
		if err := s.Begin(); err != nil {
			return result{}, err
		}
		began := time.Now()
		stop := false
		for time.Since(began) < o.interval {
			pctx, cancel := context.WithTimeout(ctx, o.interval)
			fs := s.PollFetches(pctx)
			cancel()
			if err := ctx.Err(); err != nil {
				return result{}, err
			}
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					ferr = err
				}
			})
			if ferr != nil {
				return result{}, ferr
			}
			fs.EachRecord(func(r *kgo.Record) {
				if first.IsZero() {
					first = time.Now()
				}
				s.Produce(ctx, &kgo.Record{Topic: o.copyTopic, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers}, onDone)
				copied++
			})
			if !first.IsZero() && time.Since(first) >= o.duration {
				stop = true
				break
			}
		}
		if p := failed.Load(); p != nil {
			return result{}, *p
		}
		committed, err := s.End(ctx, kgo.TryCommit)
		if err != nil {
			return result{}, err
		}
		if !committed {
			return result{}, errors.New("a transaction of the copy loop was aborted (rebalance)")
		}
		epochs++
		if stop {
			break
		}
	}
	return result{Records: copied, Total: copied, Seconds: time.Since(first).Seconds(), Epochs: epochs}, nil
}
