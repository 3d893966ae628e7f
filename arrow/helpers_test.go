package kafkaarrow

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// newChecked returns a checked allocator that fails tb if anything
// allocated from it is still live when the test ends.
func newChecked(tb testing.TB) *memory.CheckedAllocator {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	tb.Cleanup(func() { mem.AssertSize(tb, 0) })
	return mem
}

// rec builds a fetched-looking record.
func rec(topic string, part int32, off int64, key, value []byte, hdrs ...kgo.RecordHeader) *kgo.Record {
	return &kgo.Record{
		Topic:     topic,
		Partition: part,
		Offset:    off,
		Timestamp: time.UnixMilli(1_700_000_000_000 + off),
		Key:       key,
		Value:     value,
		Headers:   hdrs,
	}
}

// edgeRecords covers the distinctions the format must keep.
func edgeRecords() []*kgo.Record {
	return []*kgo.Record{
		rec("orders", 3, 100, nil, []byte("null key")),
		rec("orders", 3, 101, []byte{}, []byte("empty key")),
		rec("orders", 3, 102, []byte("k"), nil), // tombstone
		rec("orders", 3, 103, []byte("k"), []byte{}),
		rec("orders", 3, 104, nil, nil),
		rec("orders", 3, 105, []byte("k"), []byte("v"),
			kgo.RecordHeader{Key: "dup", Value: []byte("1")},
			kgo.RecordHeader{Key: "other", Value: nil},
			kgo.RecordHeader{Key: "dup", Value: []byte("2")},
			kgo.RecordHeader{Key: "dup", Value: []byte{}},
			kgo.RecordHeader{Key: "", Value: []byte("empty key")},
		),
		rec("payments", 0, 7, []byte("other topic"), []byte("v")),
		rec("orders", 3, 106, []byte{0, 1, 2, 0xff}, []byte("\x00binary\xff")),
		{Topic: "orders", Partition: 3, Offset: 107, Timestamp: time.UnixMilli(-1), Value: []byte("no timestamp")},
	}
}

// randomRecords returns n records over a few topics with random shapes.
func randomRecords(r *rand.Rand, n, maxValue int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		var key, value []byte
		switch r.IntN(4) {
		case 0:
		case 1:
			key = []byte{}
		default:
			key = []byte(fmt.Sprintf("key-%d", r.IntN(1000)))
		}
		switch r.IntN(6) {
		case 0:
		case 1:
			value = []byte{}
		default:
			value = make([]byte, r.IntN(maxValue+1))
			for j := range value {
				value[j] = byte(r.Uint32())
			}
		}
		var hdrs []kgo.RecordHeader
		for range r.IntN(4) {
			h := kgo.RecordHeader{Key: []string{"a", "b", "trace-id"}[r.IntN(3)]}
			if r.IntN(5) > 0 {
				h.Value = []byte(fmt.Sprint(r.IntN(100)))
				if r.IntN(4) == 0 {
					h.Value = []byte{}
				}
			}
			hdrs = append(hdrs, h)
		}
		recs[i] = rec([]string{"t1", "t2", "a-much-longer-topic-name"}[r.IntN(3)], int32(r.IntN(12)), int64(i), key, value, hdrs...)
	}
	return recs
}

// valueRecords returns n records of one partition with size-byte values and
// a 16-byte key, the shape of the benchmarks.
func valueRecords(n, size int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		v := bytes.Repeat([]byte{byte(i)}, size)
		recs[i] = rec("bench-topic", 0, int64(i), []byte(fmt.Sprintf("key-%012d", i)), v,
			kgo.RecordHeader{Key: "trace-id", Value: []byte("0123456789abcdef")})
	}
	return recs
}

// sameBytes compares with nil and empty kept apart.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// requireSameRecords fails tb unless got holds the same records as want,
// field by field, with null and empty kept apart.
func requireSameRecords(tb testing.TB, want, got []*kgo.Record) {
	tb.Helper()
	if len(want) != len(got) {
		tb.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		switch {
		case w.Topic != g.Topic, w.Partition != g.Partition, w.Offset != g.Offset:
			tb.Fatalf("record %d: got %s/%d@%d, want %s/%d@%d", i, g.Topic, g.Partition, g.Offset, w.Topic, w.Partition, w.Offset)
		case !w.Timestamp.Equal(g.Timestamp):
			tb.Fatalf("record %d: timestamp %v, want %v", i, g.Timestamp, w.Timestamp)
		case !sameBytes(w.Key, g.Key):
			tb.Fatalf("record %d: key %q (nil %v), want %q (nil %v)", i, g.Key, g.Key == nil, w.Key, w.Key == nil)
		case !sameBytes(w.Value, g.Value):
			tb.Fatalf("record %d: value of %d bytes (nil %v), want %d bytes (nil %v)", i, len(g.Value), g.Value == nil, len(w.Value), w.Value == nil)
		case len(w.Headers) != len(g.Headers):
			tb.Fatalf("record %d: %d headers, want %d", i, len(g.Headers), len(w.Headers))
		}
		if len(w.Headers) == 0 && g.Headers != nil {
			tb.Fatalf("record %d: headers %v, want nil", i, g.Headers)
		}
		for j := range w.Headers {
			if w.Headers[j].Key != g.Headers[j].Key || !sameBytes(w.Headers[j].Value, g.Headers[j].Value) {
				tb.Fatalf("record %d header %d: got %q=%q (nil %v), want %q=%q (nil %v)", i, j,
					g.Headers[j].Key, g.Headers[j].Value, g.Headers[j].Value == nil,
					w.Headers[j].Key, w.Headers[j].Value, w.Headers[j].Value == nil)
			}
		}
	}
}

// encode returns recs as IPC bytes, failing tb on error.
func encode(tb testing.TB, recs []*kgo.Record) []byte {
	tb.Helper()
	b, err := NewEncoder().AppendIPC(nil, recs)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
