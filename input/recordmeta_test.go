package input

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// metaRecords are records with every kind of key (none, empty, short, one
// too large for a chunk's shared string) and timestamps before and after
// 1970.
func metaRecords(n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	base := time.UnixMilli(1700000000123)
	for i := range recs {
		r := &kgo.Record{Offset: 1000 + int64(3*i), Timestamp: base.Add(time.Duration(i) * 7 * time.Millisecond)}
		switch i % 5 {
		case 0:
			r.Key = nil
		case 1:
			r.Key = []byte{}
		case 2:
			r.Key = fmt.Appendf(nil, "key-%d", i)
		case 3:
			r.Timestamp = time.UnixMilli(-int64(i) * 1001)
			r.Key = []byte{0, 0xff, byte(i)}
		case 4:
			if i%3 == 0 {
				r.Key = []byte(strings.Repeat("k", maxChunkKeys/2+i))
			}
		}
		recs[i] = r
	}
	return recs
}

// The boxed metadata of every record are the values and types the plain
// conversions give (string(r.Key), r.Offset, r.Timestamp.UnixMilli(),
// r.Timestamp.Unix()), whatever the chunk sizes and whichever records are
// skipped, and they do not change when the records' buffers are reused.
func TestMetaBoxesMatchRecords(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 100, 200, 333} {
		for _, skip := range []int{0, 2, 7} {
			t.Run(fmt.Sprintf("records=%d/skip=%d", n, skip), func(t *testing.T) {
				recs := metaRecords(n)
				boxes := newMetaBoxes(recs)
				type want struct{ key, offset, ms, sec any }
				var got []boxedMeta
				var wants []want
				for i, r := range recs {
					if skip > 0 && i%skip == 1 {
						continue // a marker, a tombstone dropped
					}
					got = append(got, boxes.of(i))
					wants = append(wants, want{string(r.Key), r.Offset, r.Timestamp.UnixMilli(), r.Timestamp.Unix()})
				}
				for _, r := range recs {
					for j := range r.Key {
						r.Key[j] = 'X' // the consumer's buffer reused
					}
					r.Offset = -1
				}
				for i, g := range got {
					w := wants[i]
					require.Equal(t, w.key, g.key, "key %d", i)
					require.Equal(t, w.offset, g.offset, "offset %d", i)
					require.Equal(t, w.ms, g.timestampMs, "timestamp_ms %d", i)
					require.Equal(t, w.sec, g.tsSec, "timestamp_unix %d", i)
					// Interface equality: the same dynamic type and value.
					require.True(t, g.key == w.key && g.offset == w.offset && g.timestampMs == w.ms && g.tsSec == w.sec, "record %d", i)
					_, isInt := g.offset.(int64)
					_, isStr := g.key.(string)
					require.True(t, isInt && isStr, "record %d: %T %T", i, g.key, g.offset)
				}
			})
		}
	}
}

// What boxing costs per record: two allocations per chunk (its array and its
// keys) instead of five per record (the key's bytes, the key, the offset and
// both timestamps as interfaces).
func TestMetaBoxesAllocs(t *testing.T) {
	recs := make([]*kgo.Record, 1024)
	for i := range recs {
		recs[i] = &kgo.Record{Offset: int64(1 << 20 * i), Key: fmt.Appendf(nil, "key-%d", i), Timestamp: time.UnixMilli(1700000000000 + int64(i))}
	}
	var sink boxedMeta
	allocs := testing.AllocsPerRun(20, func() {
		boxes := newMetaBoxes(recs)
		for i := range recs {
			sink = boxes.of(i)
		}
	})
	_ = sink
	if perRecord := allocs / float64(len(recs)); perRecord > 0.05 {
		t.Fatalf("%.0f allocations boxing %d records (%.3f per record), want two per chunk of 64", allocs, len(recs), perRecord)
	}
}

// Through the input: records of one partition, in transactions whose markers
// take offsets, with keys and tombstones, in fetches that span several chunks
// of boxed metadata: every message carries its own record's offset, key,
// timestamps and tombstone flag.
func TestRecordMetadataAcrossChunks(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type rec struct {
		key    string
		offset int64
		ts     time.Time
		tomb   bool
	}
	var want []rec
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	n := 0
	for round := range 3 {
		x := e.beginTxn(t)
		var recs []*kgo.Record
		for range 90 {
			r := &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "v%d", n), Timestamp: base.Add(time.Duration(n) * time.Second / 3)}
			if n%4 != 0 {
				r.Key = fmt.Appendf(nil, "k%d", n)
			}
			if n%11 == 5 {
				r.Value = nil
			}
			if round == 1 && n%30 == 7 {
				r.Key = []byte(strings.Repeat("K", maxChunkKeys))
			}
			recs = append(recs, r)
			n++
		}
		res := x.cl.ProduceSync(ctx, recs...)
		require.NoError(t, res.FirstErr())
		x.end(true)
		for _, pr := range res {
			want = append(want, rec{string(pr.Record.Key), pr.Record.Offset, pr.Record.Timestamp, pr.Record.Value == nil})
		}
	}
	h, _ := e.boundedRead(t, topic, "isolation_level: read_committed\nmax_batch_records: 50")
	msgs := h.readMsgs(readTimeout)
	require.Len(t, msgs, len(want))
	for i, m := range msgs {
		w := want[i]
		assert.Equal(t, w.offset, meta(m, metaOffset), "message %d: kafka_offset", i)
		assert.Equal(t, w.key, meta(m, metaKey), "message %d: kafka_key", i)
		assert.Equal(t, w.ts.UnixMilli(), meta(m, metaTimestamp), "message %d: kafka_timestamp_ms", i)
		assert.Equal(t, w.ts.Unix(), meta(m, metaTimestampUnix), "message %d: kafka_timestamp_unix", i)
		assert.Equal(t, w.tomb, meta(m, metaTombstone), "message %d: kafka_tombstone_message", i)
		assert.Equal(t, topic, meta(m, metaTopic), "message %d: kafka_topic", i)
		assert.Equal(t, int64(0), meta(m, metaPartition), "message %d: kafka_partition", i)
		s, ok := m.MetaGet(metaOffset)
		assert.True(t, ok)
		assert.Equal(t, fmt.Sprint(w.offset), s, "message %d: kafka_offset as a string", i)
	}
	// The markers took offsets: the offsets are not consecutive.
	assert.Greater(t, want[len(want)-1].offset, int64(len(want)-1))
}
