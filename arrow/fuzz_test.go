package kafkaarrow

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// seedStreams returns valid encodings of several shapes: the fuzzer's
// starting points.
func seedStreams(tb testing.TB) [][]byte {
	enc := NewEncoder()
	var seeds [][]byte
	for _, recs := range [][]*kgo.Record{
		nil,
		edgeRecords(),
		randomRecords(rand.New(rand.NewPCG(3, 4)), 20, 16),
		valueRecords(3, 100),
	} {
		b, err := enc.AppendIPC(nil, recs)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	// Compressed, and with two record batches, as other writers produce.
	rb, err := enc.Build(edgeRecords())
	if err != nil {
		tb.Fatal(err)
	}
	defer rb.Release()
	for _, opts := range [][]ipc.Option{{ipc.WithLZ4()}, {ipc.WithZstd()}, nil} {
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, append(opts, ipc.WithSchema(Schema))...)
		for range 2 {
			if err := w.Write(rb); err != nil {
				tb.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
	}
	// A plain utf8 topic column.
	plain := arrow.NewSchema(foreignFields(arrow.BinaryTypes.String, false), nil)
	rbld := array.NewRecordBuilder(memory.DefaultAllocator, plain)
	defer rbld.Release()
	buildForeign(rbld, 2, false)
	prec := rbld.NewRecordBatch()
	defer prec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(plain))
	if err := w.Write(prec); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return append(seeds, buf.Bytes())
}

// FuzzDecode feeds untrusted bytes to Decode. It must never panic (nor die
// of a fatal out-of-memory or stack overflow); whatever it accepts must be
// readable through every accessor, and must round-trip: re-encoded and
// decoded again, it gives the same records.
func FuzzDecode(f *testing.F) {
	for _, s := range seedStreams(f) {
		f.Add(s)
	}
	golden, _ := filepath.Glob(filepath.Join("testdata", "*.arrows"))
	for _, g := range golden {
		b, err := os.ReadFile(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := NewDecoder(WithMaxDecodedBytes(64 << 20))
		batches, err := dec.Decode(b)
		if err != nil {
			if batches != nil {
				t.Fatal("batches with an error")
			}
			return
		}
		defer ReleaseAll(batches)
		var recs []*kgo.Record
		for _, bt := range batches {
			touch(bt)
			recs = append(recs, bt.Records()...)
		}
		again, err := NewEncoder().AppendIPC(nil, recs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dec.DecodeRecords(again)
		if err != nil {
			t.Fatal(err)
		}
		requireSameRecords(t, recs, got)
	})
}

// FuzzRoundTrip builds records from fuzz bytes and checks that they survive
// records -> Arrow -> IPC -> Arrow -> records.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("\x00\x01key\x02value\x03h\x04"), uint8(3))
	f.Add([]byte{}, uint8(0))
	f.Add(bytes.Repeat([]byte{0xff, 0, 7}, 50), uint8(200))
	f.Fuzz(func(t *testing.T, data []byte, n uint8) {
		// Each record consumes a control byte and a few data bytes: bits of
		// the control byte choose nil / empty / some bytes for each field.
		var recs []*kgo.Record
		take := func(ctl byte, shift uint) []byte {
			switch (ctl >> shift) & 3 {
			case 0:
				return nil
			case 1:
				return []byte{}
			}
			k := min(len(data), int(ctl>>shift)&15+1)
			p := data[:k]
			data = data[k:]
			return p
		}
		for i := range int(n) {
			ctl := byte(i)
			if len(data) > 0 {
				ctl, data = data[0], data[1:]
			}
			r := rec([]string{"a", "b"}[ctl&1], int32(ctl), int64(i)-3, take(ctl, 1), take(ctl, 3))
			for range int(ctl>>5) & 3 {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(take(ctl, 4)), Value: take(ctl, 5)})
			}
			recs = append(recs, r)
		}
		b, err := NewEncoder().AppendIPC(nil, recs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewDecoder().DecodeRecords(b)
		if err != nil {
			t.Fatal(err)
		}
		requireSameRecords(t, recs, got)
	})
}
