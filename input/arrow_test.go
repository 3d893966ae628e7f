package input

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
)

// The format: arrow scenarios run with the others, on kfake and on Kafka.
func init() {
	scenarios = append(scenarios, []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"ArrowRecordsExact", scenarioArrowRecordsExact},
		{"ArrowTxnMarkersCutsAndCommits", scenarioArrowTxnCuts},
		{"ArrowTombstonesDrop", scenarioArrowTombstonesDrop},
		{"ArrowStopInsideABatch", scenarioArrowStopInsideBatch},
	}...)
}

// arrowMsg is one format: arrow message, decoded.
type arrowMsg struct {
	topic              string
	partition          int64
	first, last, count int64
	span               handover.Span
	hasSpan            bool
	rows               []*kgo.Record
}

// readArrow reads and acks until the input ends, decoding every message.
func (h *harness) readArrow(d time.Duration) []arrowMsg {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []arrowMsg
	for {
		b, ack, err := h.in.ReadBatch(ctx)
		if errors.Is(err, service.ErrEndOfInput) {
			return out
		}
		require.NoError(h.t, err)
		require.Len(h.t, b, 1, "format arrow: one message per batch")
		m := b[0]
		body, err := m.AsBytes()
		require.NoError(h.t, err)
		var am arrowMsg
		am.rows, err = kafkaarrow.NewDecoder().DecodeRecords(body)
		require.NoError(h.t, err)
		meta := func(k string) any { v, _ := m.MetaGetMut(k); return v }
		am.topic, _ = meta(metaTopic).(string)
		am.partition, _ = meta(metaPartition).(int64)
		am.first, _ = meta(metaFirstOffset).(int64)
		am.last, _ = meta(metaLastOffset).(int64)
		am.count, _ = meta(metaRecordCount).(int64)
		_, hasKey := m.MetaGetMut(metaKey)
		assert.False(h.t, hasKey, "no per-record metadata in arrow mode")
		am.span, am.hasSpan = handover.SpanOf(m)
		require.NoError(h.t, ack(ctx, nil))
		out = append(out, am)
	}
}

func rowsOf(ms []arrowMsg) []*kgo.Record {
	var out []*kgo.Record
	for _, m := range ms {
		out = append(out, m.rows...)
	}
	return out
}

// scenarioArrowRecordsExact: every distinction Benthos metadata loses (null
// vs empty key and value, duplicate and null headers) survives format: arrow,
// and so do large values, offsets and timestamps.
func scenarioArrowRecordsExact(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	large := bytes.Repeat([]byte("L"), 700<<10)
	want := []*kgo.Record{
		{Key: nil, Value: []byte("null key")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte("k"), Value: nil}, // tombstone
		{Key: []byte("k"), Value: []byte{}},
		{Key: []byte("h"), Value: []byte("headers"), Headers: []kgo.RecordHeader{
			{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "n", Value: nil}, {Key: "e", Value: []byte{}},
		}},
		{Key: []byte("big"), Value: large},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, r := range want {
		r.Topic, r.Partition = topic, 0
		// Recent: a real broker's retention (7 days by default) deletes
		// older records while the test reads them.
		r.Timestamp = time.Now().Add(-time.Hour).Truncate(time.Second).Add(time.Duration(i) * time.Millisecond)
	}
	require.NoError(t, e.cl.ProduceSync(ctx, want...).FirstErr())
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\nformat: arrow\n", topic, group))
	h.mustConnect()
	ms := h.readArrow(readTimeout)
	got := rowsOf(ms)
	require.Len(t, got, len(want))
	for i, g := range got {
		w := want[i]
		assert.Equal(t, topic, g.Topic)
		assert.Equal(t, int32(0), g.Partition)
		assert.Equal(t, int64(i), g.Offset)
		assert.Equal(t, w.Timestamp.UnixMilli(), g.Timestamp.UnixMilli(), "row %d", i)
		assert.Equal(t, w.Key == nil, g.Key == nil, "row %d: null key", i)
		assert.Equal(t, w.Value == nil, g.Value == nil, "row %d: null value", i)
		assert.True(t, bytes.Equal(w.Key, g.Key), "row %d key", i)
		assert.True(t, bytes.Equal(w.Value, g.Value), "row %d value", i)
		require.Len(t, g.Headers, len(w.Headers), "row %d", i)
		for j, hd := range g.Headers {
			assert.Equal(t, w.Headers[j].Key, hd.Key)
			assert.Equal(t, w.Headers[j].Value == nil, hd.Value == nil)
			assert.True(t, bytes.Equal(w.Headers[j].Value, hd.Value))
		}
	}
	for _, m := range ms {
		assert.Equal(t, topic, m.topic)
		assert.Equal(t, int64(0), m.partition)
		assert.Equal(t, int64(len(m.rows)), m.count)
		assert.Equal(t, m.rows[0].Offset, m.first)
		assert.Equal(t, m.rows[len(m.rows)-1].Offset, m.last)
		require.True(t, m.hasSpan, "a group read stamps the span")
	}
	assert.Equal(t, int64(len(want)), e.committed(t, group, topic, 0))
}

// scenarioArrowTxnCuts: under read_committed, aborted records and markers
// produce no rows but are covered by the spans; messages are cut at
// max_batch_records; the spans are contiguous from the start to the stop, and
// the finished partition commits its stop.
func scenarioArrowTxnCuts(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 3)...) // 0-2
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("aborted", 2)...) // 3-4, marker 5
	x.end(false)
	y := e.beginTxn(t)
	y.produce(topic, 0, vals("t", 3)...) // 6-8, marker 9
	y.end(true)
	e.produce(t, topic, 0, vals("b", 2)...) // 10-11
	end := int64(12)
	e.waitEnd(t, topic, 0, end)
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
stop_offset: latest
format: arrow
max_batch_records: 2
`, topic, group))
	h.mustConnect()
	ms := h.readArrow(readTimeout)
	var vs []string
	for _, r := range rowsOf(ms) {
		vs = append(vs, string(r.Value))
	}
	assert.Equal(t, []string{"a0", "a1", "a2", "t0", "t1", "t2", "b0", "b1"}, vs)
	next := int64(0)
	for _, m := range ms {
		assert.LessOrEqual(t, len(m.rows), 2, "cut at max_batch_records")
		assert.Equal(t, next, m.span.From, "spans are contiguous")
		assert.Greater(t, m.span.To, m.last)
		assert.LessOrEqual(t, m.span.From, m.first)
		next = m.span.To
	}
	assert.LessOrEqual(t, next, end)
	assert.Equal(t, end, e.committed(t, group, topic, 0), "lag 0 behind the markers")
}

// scenarioArrowTombstonesDrop: tombstones: drop leaves the rows out, the
// offsets still advance past them.
func scenarioArrowTombstonesDrop(t *testing.T, e *env) {
	topic := tombstoneTopic(t, e)
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\ntombstones: drop\nformat: arrow\n", topic, group))
	h.mustConnect()
	var vs []string
	var nulls int
	for _, r := range rowsOf(h.readArrow(readTimeout)) {
		vs = append(vs, string(r.Value))
		if r.Value == nil {
			nulls++
		}
	}
	assert.Equal(t, []string{"a", "", "b"}, vs)
	assert.Zero(t, nulls, "the empty value stays a non-null row")
	assert.Equal(t, int64(5), e.committed(t, group, topic, 0))
}

// scenarioArrowStopInsideBatch: a stop inside a record batch (kgo returns
// whole batches) cuts the Arrow message at the stop; the rows beyond it are
// never emitted and the stop is committed.
func scenarioArrowStopInsideBatch(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 10)...) // one record batch, offsets 0-9
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %[1]s ]
consumer_group: %[2]s
stop_offset: specific
stop_offsets: { "%[1]s:0": 4 }
format: arrow
`, topic, group))
	h.mustConnect()
	ms := h.readArrow(readTimeout)
	var vs []string
	for _, r := range rowsOf(ms) {
		vs = append(vs, string(r.Value))
	}
	assert.Equal(t, strs(vals("a", 4)), vs)
	require.Len(t, ms, 1)
	assert.Equal(t, int64(3), ms[0].last)
	assert.Equal(t, int64(4), ms[0].span.To, "the span ends at the stop")
	assert.Equal(t, int64(4), e.committed(t, group, topic, 0))
}

func TestArrowFormatLint(t *testing.T) {
	for _, tt := range []struct{ conf, wantErr string }{
		{"topics: [ a ]\n  format: arrow\n  tombstones: fail", "tombstones fail cannot apply"},
		{"topics: [ a ]\n  format: arrow\n  tombstones: drop", ""},
		{"topics: [ a ]\n  format: arrow", ""},
	} {
		err := service.NewStreamBuilder().AddInputYAML("kafka_native:\n  seed_brokers: [ localhost:9092 ]\n  " + tt.conf + "\n")
		if tt.wantErr == "" {
			assert.NoError(t, err, tt.conf)
		} else {
			assert.ErrorContains(t, err, tt.wantErr, tt.conf)
		}
	}
	pc, err := Spec().ParseYAML("seed_brokers: [ x ]\ntopics: [ a ]\nformat: arrow\ntombstones: fail\n", nil)
	require.NoError(t, err)
	_, err = configFromParsed(pc)
	require.ErrorContains(t, err, "field tombstones")
}
