package main

import (
	"context"
	"math"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producerOpts are the producer settings of kafka_eos's slots at their
// defaults (output/config.go producerOpts: no record-count cap, a 256 MiB
// byte budget, 1 MiB batches, no linger, the Java client's sticky uniform
// partitioner, no compression), without the transactional id. The plain
// output and the raw franz-go loop use them, so a gap between them and
// kafka_eos is the cost of transactions and of the output, not of settings.
func producerOpts(brokers, topic string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent (franz-go's default)
		kgo.MaxBufferedRecords(math.MaxInt32),
		kgo.MaxBufferedBytes(256 << 20),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil)),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}
}

// plainOutput is the "cost of exactly-once" baseline: a Benthos batch output
// on franz-go, idempotent with acks=all and no transactions. A batch is
// acknowledged once every record of it is acknowledged by the broker.
type plainOutput struct {
	brokers, topic string
	cl             *kgo.Client
}

func registerPlain(env *service.Environment) error {
	spec := service.NewConfigSpec().Fields(service.NewStringField("seed_brokers"), service.NewStringField("topic"))
	return env.RegisterBatchOutput("bench_plain", spec, func(conf *service.ParsedConfig, _ *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		b, err := conf.FieldString("seed_brokers")
		if err != nil {
			return nil, service.BatchPolicy{}, 0, err
		}
		t, err := conf.FieldString("topic")
		if err != nil {
			return nil, service.BatchPolicy{}, 0, err
		}
		// 64 batches in flight: kafka_eos's max_in_flight default.
		return &plainOutput{brokers: b, topic: t}, service.BatchPolicy{}, 64, nil
	})
}

func (p *plainOutput) Connect(ctx context.Context) error {
	cl, err := kgo.NewClient(producerOpts(p.brokers, p.topic)...)
	if err != nil {
		return err
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return err
	}
	p.cl = cl
	return nil
}

// batchWait collects the outcome of one batch's records.
type batchWait struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

func (w *batchWait) done(_ *kgo.Record, err error) {
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
	}
	w.wg.Done()
}

func (p *plainOutput) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	w := &batchWait{}
	w.wg.Add(len(batch))
	for _, m := range batch {
		v, err := m.AsBytes()
		if err != nil {
			w.done(nil, err)
			continue
		}
		p.cl.Produce(ctx, &kgo.Record{Value: v}, w.done)
	}
	w.wg.Wait()
	return w.err
}

func (p *plainOutput) Close(context.Context) error {
	if p.cl != nil {
		p.cl.Close()
	}
	return nil
}
