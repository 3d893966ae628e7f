package output

import (
	"context"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A metadata value that is a list (kafka_native sets one for a header name
// repeated in a record) is written as one header per element, in order, so
// that a message-mode copy keeps repeated headers as they were.
func TestListMetadataWrittenAsRepeatedHeaders(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), baseYAML(brokers, "txn-headers", "metadata: { include_patterns: [ \"^h\" ] }\n"))
	m := service.NewMessage([]byte("v"))
	m.MetaSetMut("key", "k")
	m.MetaSetMut("h-dup", []any{"first", "second", int64(3)})
	m.MetaSetMut("h-one", "x")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, o.WriteBatch(ctx, service.MessageBatch{m}))
	recs := readCommittedRecords(t, brokers, testTopic, 2500*time.Millisecond, 30*time.Second)
	require.Len(t, recs, 1)
	got := map[string][]string{}
	for _, h := range recs[0].Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	assert.Equal(t, map[string][]string{"h-dup": {"first", "second", "3"}, "h-one": {"x"}}, got)
}
