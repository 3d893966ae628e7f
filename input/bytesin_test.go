package input

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

// TestBytesInCountedAsFetched: kafka_native_bytes_in counts a fetch's records
// when they arrive, not once every batch of them was handed to the pipeline.
// The pipeline here takes the first batch (one record) and then holds it:
// the other nine records of the fetch are counted all the same. Before, the
// counter stayed at 0 until the whole fetch had been handed over.
func TestBytesInCountedAsFetched(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 10)...) // 10 x ("kN" + "aN") = 40 bytes
	e.waitEnd(t, topic, 0, 10)

	hold := make(chan struct{})
	defer close(hold)
	s, capture, _ := captureStream(t, fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  stop_offset: latest
  max_batch_records: 1
`, strings.Join(e.brokers, ","), topic), func(ctx context.Context, _ service.MessageBatch) error {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	defer func() { _ = s.StopWithin(5 * time.Second) }()
	key := "kafka_native_bytes_in{,root.input," + topic + ",0}"
	require.Eventually(t, func() bool {
		v, _ := capture.get(key)
		return v == 40
	}, 20*time.Second, 20*time.Millisecond, "bytes in while the pipeline holds the first batch")
}
