package input

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTimestampUnixMetadata: every message carries kafka_timestamp_unix, the
// record's timestamp in seconds (Redpanda Connect's kafka_franz sets it, and
// configs that carry over read it), and a header of that name cannot forge
// it: it is kept as kafka_header_kafka_timestamp_unix.
func TestTimestampUnixMetadata(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	ts := time.Unix(1700000000, 123e6)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, e.cl.ProduceSync(ctx,
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte("a"), Timestamp: ts},
		&kgo.Record{Topic: topic, Partition: 0, Value: []byte("b"), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "kafka_timestamp_unix", Value: []byte("0")}}},
	).FirstErr())
	h, _ := e.boundedRead(t, topic, "")
	msgs := h.readMsgs(readTimeout)
	require.Len(t, msgs, 2)
	for i, m := range msgs {
		assert.Equal(t, int64(1700000000), meta(m, metaTimestampUnix), "record %d", i)
		assert.Equal(t, ts.UnixMilli(), meta(m, metaTimestamp), "record %d", i)
	}
	assert.Equal(t, "0", meta(msgs[1], "kafka_header_kafka_timestamp_unix"))
}
