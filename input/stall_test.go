package input

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// runLogged runs a stream of the input YAML (seed_brokers prepended) into a
// consumer that blocks until release is closed (nil: never blocks) until
// until() holds or d passes, and returns the logs (info and above).
func runLogged(t *testing.T, e *env, input string, release chan struct{}, d time.Duration, until func(logs string) bool) string {
	t.Helper()
	s, _, logs := captureStream(t, fmt.Sprintf("kafka_native:\n  seed_brokers: [ %s ]\n%s", strings.Join(e.brokers, ","), input),
		func(ctx context.Context, _ service.MessageBatch) error {
			if release != nil {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	defer func() { _ = s.StopWithin(5 * time.Second) }()
	for ctx.Err() == nil && !until(logs.String()) {
		time.Sleep(20 * time.Millisecond)
	}
	if release != nil {
		close(release)
	}
	return logs.String()
}

// A retriable fetch error is logged as a warning (at most every few seconds
// per kind), not at debug level where nobody sees a partition that keeps
// failing.
func TestRetriableFetchErrorIsWarned(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	meta, err := e.adm.Metadata(context.Background(), topic)
	require.NoError(t, err)
	var arm atomic.Bool
	var hits atomic.Int64
	arm.Store(true)
	failFetchOnce(e.fake, topic, meta.Topics[topic].ID, kerr.KafkaStorageError.Code, &arm, &hits)
	logs := runLogged(t, e, fmt.Sprintf("  topics: [ %s ]\n", topic), nil, 20*time.Second, func(logs string) bool {
		return strings.Contains(logs, "KAFKA_STORAGE_ERROR")
	})
	assert.Regexp(t, `level=WARN msg=".*`+topic+`:0.*KAFKA_STORAGE_ERROR`, logs)
}

// A batch that decompresses past max_decompressed_batch_bytes stops the
// partition in franz-go for good (refetching fails the same way): the stream
// fails with an error naming the partition, the batch's offset and the field.
func TestDecompressTooLargeIsFatal(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("small")}).FirstErr())
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: bytes.Repeat([]byte("z"), 64<<10)}).FirstErr())
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nmax_decompressed_batch_bytes: 16384\n", topic))
	h.mustConnect()
	err = h.readError()
	requireFatal(t, h, err, nil)
	assert.Contains(t, err.Error(), topic+":0")
	assert.Contains(t, err.Error(), "offset 1")
	assert.Contains(t, err.Error(), "max_decompressed_batch_bytes")
}

// corruptBatch is a record batch at offset whose CRC does not match.
func corruptBatch(offset int64) []byte {
	r := kmsg.Record{Value: []byte("v")}
	rec := r.AppendTo(nil)
	r.Length = int32(len(rec) - 1)
	rec = r.AppendTo(nil)
	b := kmsg.RecordBatch{FirstOffset: offset, Magic: 2, CRC: 12345, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1, Records: rec}
	raw := b.AppendTo(nil)
	b.Length = int32(len(raw) - 12)
	return b.AppendTo(nil)
}

// corruptFetches answers every fetch of the consumer with a corrupt batch at
// offset for partition 0 of topic while on is set.
func corruptFetches(c *kfake.Cluster, topic string, id [16]byte, offset int64, on *atomic.Bool) {
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis == 0 || !on.Load() {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.SessionID = req.SessionID
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = topic, id
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.HighWatermark, sp.LastStableOffset = offset+5, offset+5
		sp.RecordBatches = corruptBatch(offset)
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
}

// A partition that makes no progress for stall_warning_interval while
// records are there gets a warning naming it and the reason: here a batch
// that cannot be decoded (its CRC does not match), and, in the second case,
// a pipeline that does not acknowledge what it was handed.
func TestStallIsWarned(t *testing.T) {
	t.Run("corrupt batch", func(t *testing.T) {
		e := newKfakeEnv(t)
		topic := e.topic(t, 1)
		e.produce(t, topic, 0, vals("a", 5)...)
		meta, err := e.adm.Metadata(context.Background(), topic)
		require.NoError(t, err)
		var on atomic.Bool
		on.Store(true)
		corruptFetches(e.fake, topic, meta.Topics[topic].ID, 0, &on)
		logs := runLogged(t, e, fmt.Sprintf("  topics: [ %s ]\n  stall_warning_interval: 500ms\n", topic), nil, 20*time.Second, func(logs string) bool {
			return strings.Contains(logs, "no progress")
		})
		assert.Regexp(t, `level=WARN msg=".*`+topic+`:0.*no progress.*position 0.*crc`, logs)
	})
	t.Run("backpressure", func(t *testing.T) {
		e := newKfakeEnv(t)
		topic := e.topic(t, 1)
		e.produce(t, topic, 0, vals("a", 5)...)
		release := make(chan struct{})
		logs := runLogged(t, e, fmt.Sprintf("  topics: [ %s ]\n  max_batch_records: 1\n  max_buffered_bytes_per_partition: 1\n  stall_warning_interval: 500ms\n", topic), release, 20*time.Second, func(logs string) bool {
			return strings.Contains(logs, "no progress")
		})
		assert.Regexp(t, `level=WARN msg=".*`+topic+`:0.*no progress.*not acknowledged`, logs)
	})
	assert.NoError(t, fatal.Err())
}
