package input

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readMsgs reads and acks until the input ends, keeping the messages.
func (h *harness) readMsgs(d time.Duration) []*service.Message {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []*service.Message
	for {
		b, ack, err := h.in.ReadBatch(ctx)
		if errors.Is(err, service.ErrEndOfInput) {
			return out
		}
		require.NoError(h.t, err)
		out = append(out, b...)
		require.NoError(h.t, ack(ctx, nil))
	}
}

func meta(m *service.Message, k string) any {
	v, _ := m.MetaGetMut(k)
	return v
}

// A record's headers never change what the input says about the record: a
// producer of the input topic who writes headers named like the input's
// metadata (kafka_offset, kafka_partition, ...) does not steer a dedupe keyed
// on kafka_offset nor a copy partitioned by kafka_partition. Those headers
// stay reachable under kafka_header_<name>; other headers keep their names;
// a header repeated in one record keeps every value, in order, as a list.
func scenarioHeadersNeverOverwriteMetadata(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	hostile := []kgo.RecordHeader{
		{Key: "kafka_offset", Value: []byte("1000000")},
		{Key: "kafka_partition", Value: []byte("1")},
		{Key: "kafka_topic", Value: []byte("elsewhere")},
		{Key: "kafka_key", Value: []byte("forged")},
		{Key: "kafka_timestamp_ms", Value: []byte("0")},
		{Key: "kafka_tombstone_message", Value: []byte("true")},
		{Key: "trace", Value: []byte("abc")},
		{Key: "dup", Value: []byte("first")},
		{Key: "dup", Value: []byte("second")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var recs []*kgo.Record
	for i := range 5 {
		r := &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i), Timestamp: ts}
		if i == 2 {
			r.Headers = hostile
		}
		recs = append(recs, r)
	}
	require.NoError(t, e.cl.ProduceSync(ctx, recs...).FirstErr())

	h, _ := e.boundedRead(t, topic, "")
	msgs := h.readMsgs(readTimeout)
	require.Len(t, msgs, 5)
	for i, m := range msgs {
		assert.Equal(t, int64(i), meta(m, metaOffset), "record %d: kafka_offset", i)
		assert.Equal(t, int64(0), meta(m, metaPartition), "record %d: kafka_partition", i)
		assert.Equal(t, topic, meta(m, metaTopic), "record %d: kafka_topic", i)
		assert.Equal(t, fmt.Sprintf("k%d", i), meta(m, metaKey), "record %d: kafka_key", i)
		assert.Equal(t, ts.UnixMilli(), meta(m, metaTimestamp), "record %d: kafka_timestamp_ms", i)
		assert.Equal(t, false, meta(m, metaTombstone), "record %d: kafka_tombstone_message", i)
	}
	m := msgs[2]
	for _, hd := range hostile[:6] {
		assert.Equal(t, string(hd.Value), meta(m, "kafka_header_"+hd.Key), "the header %s stays reachable", hd.Key)
	}
	assert.Equal(t, "abc", meta(m, "trace"))
	assert.Equal(t, []any{"first", "second"}, meta(m, "dup"), "a repeated header keeps every value")
	assert.Nil(t, meta(msgs[1], "kafka_header_kafka_offset"))
}
