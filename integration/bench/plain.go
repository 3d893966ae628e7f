package main

import (
	"context"
	"math"
	"net"
	"sync"
	"time"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producerOpts are the producer settings of kafka_eos's slots at their
// defaults (output/config.go producerOpts: no record-count cap, a 256 MiB
// byte budget (the probe splits it between its slots as kafka_eos does), 1 MiB batches, no linger, the Java client's sticky uniform
// partitioner, no compression), without the transactional id. The plain
// output and the raw franz-go loop use them, so a gap between them and
// kafka_eos is the cost of transactions and of the output, not of settings.
//
// The -p-* flags change one of them for the produce-path parity experiments
// (docs/benchmarks.md, "produce-path parity log").
func producerOpts(o options) []kgo.Opt {
	batch := int32(1 << 20)
	if o.pBatchBytes > 0 {
		batch = int32(o.pBatchBytes)
	}
	maxRecs := math.MaxInt32
	if o.pMaxRecords > 0 {
		maxRecs = o.pMaxRecords
	}
	sticky := 64
	if o.pStickyKiB > 0 {
		sticky = o.pStickyKiB
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.brokers),
		kgo.DefaultProduceTopic(o.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent (franz-go's default)
		kgo.MaxBufferedRecords(maxRecs),
		kgo.MaxBufferedBytes(256 << 20),
		kgo.ProducerBatchMaxBytes(batch),
		kgo.ProducerLinger(o.pLinger),
		kgo.RecordPartitioner(kgo.UniformBytesPartitioner(sticky<<10, true, true, nil)),
	}
	opts = append(opts, kafkaconf.Compression(o.pCompress))
	if !o.pNoDelay {
		// Go sets TCP_NODELAY on every TCP connection; this turns it off
		// (Nagle on), to show what it is worth.
		d := &net.Dialer{Timeout: 10 * time.Second}
		opts = append(opts, kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, host)
			if tc, ok := c.(*net.TCPConn); ok && err == nil {
				err = tc.SetNoDelay(false)
			}
			return c, err
		}))
	}
	return opts
}

// plainOutput is the "cost of exactly-once" baseline: a Benthos batch output
// on franz-go, idempotent with acks=all and no transactions. A batch is
// acknowledged once every record of it is acknowledged by the broker.
type plainOutput struct {
	o  options
	cl *kgo.Client
}

func registerPlain(env *service.Environment, o options) error {
	spec := service.NewConfigSpec().Fields(service.NewStringField("seed_brokers"), service.NewStringField("topic"),
		service.NewIntField("max_in_flight").Default(plainInFlight(0)))
	return env.RegisterBatchOutput("bench_plain", spec, func(conf *service.ParsedConfig, _ *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		b, err := conf.FieldString("seed_brokers")
		if err != nil {
			return nil, service.BatchPolicy{}, 0, err
		}
		t, err := conf.FieldString("topic")
		if err != nil {
			return nil, service.BatchPolicy{}, 0, err
		}
		n, err := conf.FieldInt("max_in_flight")
		if err != nil {
			return nil, service.BatchPolicy{}, 0, err
		}
		po := o
		po.brokers, po.topic = b, t
		return &plainOutput{o: po}, service.BatchPolicy{}, n, nil
	})
}

func (p *plainOutput) Connect(ctx context.Context) error {
	cl, err := kgo.NewClient(producerOpts(p.o)...)
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

// plainInFlight is the plain output's concurrency: kafka_eos's max_in_flight
// (n, or its default when n is 0), so both hold as many batches in flight.
func plainInFlight(n int) int {
	if n > 0 {
		return n
	}
	return eosDefaultMaxInFlight
}

// eosDefaultMaxInFlight mirrors kafka_eos's max_in_flight default
// (output/spec.go defaultMaxInFlight; the output does not export it).
const eosDefaultMaxInFlight = 64

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
	// One timestamp per batch, as kafka_eos stamps its records, so that
	// the gap between them is not franz-go reading the clock per record.
	now := time.Now()
	for _, m := range batch {
		v, err := m.AsBytes()
		if err != nil {
			w.done(nil, err)
			continue
		}
		p.cl.Produce(ctx, &kgo.Record{Value: v, Timestamp: now}, w.done)
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
