package kafkaarrow

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRoundTrip(t *testing.T) {
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	cases := map[string][]*kgo.Record{
		"edge":       edgeRecords(),
		"empty":      nil,
		"one":        {rec("t", 0, 0, []byte("k"), []byte("v"))},
		"large 4MiB": {rec("t", 0, 0, nil, big), rec("t", 0, 1, big[:3], nil), rec("t", 0, 2, big, big)},
		"many":       randomRecords(rand.New(rand.NewPCG(1, 2)), 20_000, 64),
		"all null":   {rec("t", 0, 0, nil, nil), rec("t", 0, 1, nil, nil)},
		"all empty":  {rec("t", 0, 0, []byte{}, []byte{}, kgo.RecordHeader{Key: "h", Value: []byte{}})},
	}
	for name, recs := range cases {
		t.Run(name, func(t *testing.T) {
			mem := newChecked(t)
			enc := NewEncoder(EncoderAllocator(mem))
			// Twice through the same encoder: the scratch buffers are reused.
			for range 2 {
				b, err := enc.AppendIPC(nil, recs)
				if err != nil {
					t.Fatal(err)
				}
				got, err := NewDecoder(DecoderAllocator(mem)).DecodeRecords(b)
				if err != nil {
					t.Fatal(err)
				}
				requireSameRecords(t, recs, got)
			}

			// Through an allocator-owned record batch and back.
			rb, err := enc.Build(recs)
			if err != nil {
				t.Fatal(err)
			}
			b, err := AppendIPC(nil, rb, mem)
			if err != nil {
				t.Fatal(err)
			}
			view, err := NewBatch(rb)
			rb.Release()
			if err != nil {
				t.Fatal(err)
			}
			requireSameRecords(t, recs, view.Records())
			view.Release()
			batches, err := NewDecoder().Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(batches) != 1 || batches[0].Len() != len(recs) {
				t.Fatalf("got %d batches", len(batches))
			}
			requireSameRecords(t, recs, batches[0].Records())
			ReleaseAll(batches)
		})
	}
}

// TestView checks the zero-copy accessors on the edge cases.
func TestView(t *testing.T) {
	recs := edgeRecords()
	b := encode(t, recs)
	batches, err := NewDecoder().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	defer ReleaseAll(batches)
	v := batches[0]
	for i, r := range recs {
		if v.Topic(i) != r.Topic || v.Partition(i) != r.Partition || v.Offset(i) != r.Offset || v.TimestampMillis(i) != r.Timestamp.UnixMilli() {
			t.Fatalf("row %d: metadata mismatch", i)
		}
		if !sameBytes(v.Key(i), r.Key) || !sameBytes(v.Value(i), r.Value) || v.IsTombstone(i) != (r.Value == nil) {
			t.Fatalf("row %d: key/value mismatch", i)
		}
		if v.NumHeaders(i) != len(r.Headers) {
			t.Fatalf("row %d: %d headers", i, v.NumHeaders(i))
		}
		for j, h := range r.Headers {
			k, val := v.Header(i, j)
			if k != h.Key || !sameBytes(val, h.Value) {
				t.Fatalf("row %d header %d", i, j)
			}
		}
	}

	// Values alias the input bytes: no copy.
	i := 5
	val := v.Value(i)
	if !aliases(val, b) {
		t.Fatal("Value does not alias the IPC bytes")
	}
	if _, hv := v.Header(i, 0); !aliases(hv, b) {
		t.Fatal("header value does not alias the IPC bytes")
	}
	// Capacity is clipped: an append cannot overwrite the next value.
	if cap(val) != len(val) {
		t.Fatalf("cap %d != len %d", cap(val), len(val))
	}
}

func aliases(p, in []byte) bool {
	if len(p) == 0 {
		return false
	}
	start := &in[0]
	end := &in[len(in)-1]
	ptr := &p[0]
	return uintptrOf(ptr) >= uintptrOf(start) && uintptrOf(ptr) <= uintptrOf(end)
}

func TestProduceRecords(t *testing.T) {
	recs := edgeRecords()
	batches, err := NewDecoder().Decode(encode(t, recs))
	if err != nil {
		t.Fatal(err)
	}
	defer ReleaseAll(batches)
	v := batches[0]

	out := v.ProduceRecords(nil, ProduceOptions{})
	if len(out) != len(recs) {
		t.Fatalf("%d records", len(out))
	}
	for i, r := range out {
		if r.Topic != recs[i].Topic || r.Partition != 0 || !r.Timestamp.IsZero() {
			t.Fatalf("record %d: topic %q partition %d ts %v", i, r.Topic, r.Partition, r.Timestamp)
		}
	}
	withAll := v.ProduceRecords(out[:0:0], ProduceOptions{Topic: "mirror", Partition: true, Timestamp: true})
	want := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Topic, c.Offset = "mirror", 0
		want[i] = &c
	}
	requireSameRecords(t, want, withAll)

	// A caller-owned record is refilled, its header capacity reused.
	var r kgo.Record
	v.ProduceRecord(5, &r, ProduceOptions{})
	h := &r.Headers[0]
	v.ProduceRecord(5, &r, ProduceOptions{})
	if &r.Headers[0] != h {
		t.Fatal("headers not reused")
	}
	v.ProduceRecord(0, &r, ProduceOptions{})
	if r.Headers != nil || r.Key != nil || string(r.Value) != "null key" {
		t.Fatalf("row 0: %+v", r)
	}
}

func TestEmptyBatch(t *testing.T) {
	b := encode(t, nil)
	batches, err := NewDecoder().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	defer ReleaseAll(batches)
	if len(batches) != 1 || batches[0].Len() != 0 {
		t.Fatalf("got %d batches", len(batches))
	}
	if got := batches[0].ProduceRecords(nil, ProduceOptions{}); len(got) != 0 {
		t.Fatal(got)
	}
}

func TestSchemaMetadata(t *testing.T) {
	if v, ok := Schema.Metadata().GetValue(MetadataKeyFormatVersion); !ok || v != FormatVersion {
		t.Fatalf("version %q", v)
	}
	if err := ValidateSchema(Schema); err != nil {
		t.Fatal(err)
	}
}

// writeForeign writes an IPC stream of the given columns with arrow-go's
// builders, as another producer (pyarrow, a Benthos pipeline) would.
func writeForeign(t *testing.T, schema *arrow.Schema, build func(b *array.RecordBuilder)) []byte {
	t.Helper()
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	build(rb)
	rec := rb.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func foreignFields(topic arrow.DataType, nullable bool) []arrow.Field {
	return []arrow.Field{
		{Name: FieldHeaders, Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: FieldHeaderValue, Type: arrow.BinaryTypes.Binary, Nullable: true},
			arrow.Field{Name: FieldHeaderKey, Type: arrow.BinaryTypes.String, Nullable: true},
		)), Nullable: nullable},
		{Name: FieldValue, Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: FieldKey, Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: FieldTimestamp, Type: &arrow.TimestampType{Unit: arrow.Millisecond}, Nullable: nullable},
		{Name: FieldOffset, Type: arrow.PrimitiveTypes.Int64, Nullable: nullable},
		{Name: FieldPartition, Type: arrow.PrimitiveTypes.Int32, Nullable: nullable},
		{Name: FieldTopic, Type: topic, Nullable: nullable},
	}
}

func buildForeign(b *array.RecordBuilder, n int, nullPartition bool) {
	hl := b.Field(0).(*array.ListBuilder)
	hs := hl.ValueBuilder().(*array.StructBuilder)
	for i := range n {
		hl.Append(true)
		hs.Append(true)
		hs.FieldBuilder(0).(*array.BinaryBuilder).AppendNull()
		hs.FieldBuilder(1).(*array.StringBuilder).Append("h")
		b.Field(1).(*array.BinaryBuilder).Append([]byte("value"))
		b.Field(2).(*array.BinaryBuilder).AppendNull()
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(i))
		b.Field(4).(*array.Int64Builder).Append(int64(i))
		if nullPartition && i == 1 {
			b.Field(5).(*array.Int32Builder).AppendNull()
		} else {
			b.Field(5).(*array.Int32Builder).Append(2)
		}
		switch tb := b.Field(6).(type) {
		case *array.StringBuilder:
			tb.Append("plain")
		case *array.BinaryDictionaryBuilder:
			_ = tb.AppendString("dict")
		}
	}
}

// TestForeignLayouts: columns in another order, plain utf8 or other
// dictionary index types for the topic, nullable flags with no nulls, no
// format version; and a null in a non-nullable column is rejected.
func TestForeignLayouts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		topic arrow.DataType
		want  string
	}{
		{"plain", arrow.BinaryTypes.String, "plain"},
		{"uint32 dict", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Uint32, ValueType: arrow.BinaryTypes.String}, "dict"},
		{"int8 dict", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}, "dict"},
		{"int64 dict", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int64, ValueType: arrow.BinaryTypes.String}, "dict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := arrow.NewSchema(foreignFields(tc.topic, true), nil)
			b := writeForeign(t, schema, func(b *array.RecordBuilder) { buildForeign(b, 3, false) })
			recs, err := NewDecoder().DecodeRecords(b)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]*kgo.Record, 3)
			for i := range want {
				want[i] = &kgo.Record{Topic: tc.want, Partition: 2, Offset: int64(i), Timestamp: timeMilli(int64(i)),
					Value: []byte("value"), Headers: []kgo.RecordHeader{{Key: "h"}}}
			}
			requireSameRecords(t, want, recs)

			b = writeForeign(t, schema, func(b *array.RecordBuilder) { buildForeign(b, 3, true) })
			_, err = NewDecoder().Decode(b)
			var ce *ColumnError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Column != FieldPartition {
				t.Fatalf("null partition: %v", err)
			}
		})
	}
}

func TestSchemaMismatch(t *testing.T) {
	base := foreignFields(arrow.BinaryTypes.String, false)
	with := func(edit func([]arrow.Field) []arrow.Field) *arrow.Schema {
		f := append([]arrow.Field(nil), base...)
		return arrow.NewSchema(edit(f), nil)
	}
	versioned := func(v string) *arrow.Schema {
		md := arrow.NewMetadata([]string{MetadataKeyFormatVersion}, []string{v})
		return arrow.NewSchema(base, &md)
	}
	for _, tc := range []struct {
		name   string
		schema *arrow.Schema
		column string
	}{
		{"missing value", with(func(f []arrow.Field) []arrow.Field { return append(f[:1], f[2:]...) }), FieldValue},
		{"extra column", with(func(f []arrow.Field) []arrow.Field {
			return append(f, arrow.Field{Name: "extra", Type: arrow.PrimitiveTypes.Int8})
		}), "extra"},
		{"duplicate column", with(func(f []arrow.Field) []arrow.Field { return append(f, f[1]) }), FieldValue},
		{"value as utf8", with(func(f []arrow.Field) []arrow.Field {
			f[1].Type = arrow.BinaryTypes.String
			return f
		}), FieldValue},
		{"value as large binary", with(func(f []arrow.Field) []arrow.Field {
			f[1].Type = arrow.BinaryTypes.LargeBinary
			return f
		}), FieldValue},
		{"timestamp in seconds", with(func(f []arrow.Field) []arrow.Field {
			f[3].Type = arrow.FixedWidthTypes.Timestamp_s
			return f
		}), FieldTimestamp},
		{"partition int64", with(func(f []arrow.Field) []arrow.Field {
			f[5].Type = arrow.PrimitiveTypes.Int64
			return f
		}), FieldPartition},
		{"headers as map", with(func(f []arrow.Field) []arrow.Field {
			f[0].Type = arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.Binary)
			return f
		}), FieldHeaders},
		{"header key binary", with(func(f []arrow.Field) []arrow.Field {
			f[0].Type = arrow.ListOf(arrow.StructOf(
				arrow.Field{Name: FieldHeaderKey, Type: arrow.BinaryTypes.Binary},
				arrow.Field{Name: FieldHeaderValue, Type: arrow.BinaryTypes.Binary}))
			return f
		}), FieldHeaders},
		{"topic dictionary of binary", with(func(f []arrow.Field) []arrow.Field {
			f[6].Type = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.Binary}
			return f
		}), FieldTopic},
		{"future version", versioned("2"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateSchema(tc.schema)
			var ce *ColumnError
			if !errors.Is(err, ErrSchema) || !errors.As(err, &ce) || ce.Column != tc.column {
				t.Fatalf("got %v, want ErrSchema naming %q", err, tc.column)
			}
			// And through Decode, from IPC bytes: an empty batch is enough.
			b := writeForeign(t, tc.schema, func(*array.RecordBuilder) {})
			if _, err := NewDecoder().Decode(b); !errors.Is(err, ErrSchema) || !errors.As(err, &ce) || ce.Column != tc.column {
				t.Fatalf("Decode: got %v, want ErrSchema naming %q", err, tc.column)
			}
			t.Log(err)
		})
	}
}

// TestCorruptInput: truncation at every byte, trailing bytes and a missing
// end-of-stream marker are errors, never a panic.
func TestCorruptInput(t *testing.T) {
	b := encode(t, edgeRecords())
	for n := range len(b) {
		if _, err := NewDecoder().Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(b), err)
		}
	}
	if _, err := NewDecoder().Decode(append(b[:len(b):len(b)], 0, 0, 0, 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing bytes: %v", err)
	}
	// Flip every byte in turn: an error or a valid decode, never a panic.
	c := make([]byte, len(b))
	for i := range b {
		copy(c, b)
		c[i] ^= 0xff
		if batches, err := NewDecoder().Decode(c); err == nil {
			for _, bt := range batches {
				touch(bt)
			}
			ReleaseAll(batches)
		}
	}
}

// touch reads every field of every row, as a producer would.
func touch(b *Batch) int {
	var n int
	for i := range b.Len() {
		n += len(b.Topic(i)) + int(b.Partition(i)) + int(b.Offset(i)) + int(b.TimestampMillis(i))
		n += len(b.Key(i)) + len(b.Value(i))
		for j := range b.NumHeaders(i) {
			k, v := b.Header(i, j)
			n += len(k) + len(v)
		}
	}
	b.ProduceRecords(nil, ProduceOptions{Partition: true, Timestamp: true})
	b.Records()
	return n
}

func TestTooLarge(t *testing.T) {
	// Arrow's 32-bit offsets: more than 2 GiB - 1 of values in one batch.
	// Shares one 1 GiB slice three times, so nothing big is allocated.
	if testing.Short() {
		t.Skip("allocates 1 GiB")
	}
	big := make([]byte, 1<<30)
	recs := []*kgo.Record{rec("t", 0, 0, nil, big), rec("t", 0, 1, nil, big), rec("t", 0, 2, nil, big)}
	_, err := NewEncoder().Build(recs)
	var ce *ColumnError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &ce) || ce.Column != FieldValue {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeAllocationLimit(t *testing.T) {
	// An LZ4-compressed stream decompresses into allocated memory, which the
	// limit bounds.
	recs := valueRecords(100, 1000)
	rb, err := NewEncoder().Build(recs)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(Schema), ipc.WithLZ4())
	if err := w.Write(rb); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDecoder().Decode(buf.Bytes()); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "LZ4_FRAME") {
		t.Fatalf("compressed input without WithCompressedInput: %v", err)
	}
	got, err := NewDecoder(WithCompressedInput()).DecodeRecords(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	requireSameRecords(t, recs, got)
	if _, err := NewDecoder(WithCompressedInput(), WithMaxDecodedBytes(10_000)).Decode(buf.Bytes()); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
}

// TestSlicedRecord: a view of a slice of a batch (array offsets != 0), and
// the slice written as IPC.
func TestSlicedRecord(t *testing.T) {
	mem := newChecked(t)
	recs := edgeRecords()
	rb, err := NewEncoder(EncoderAllocator(mem)).Build(recs)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Release()
	for _, span := range [][2]int{{0, 0}, {1, 4}, {3, 9}, {5, 6}, {8, 9}} {
		s := rb.NewSlice(int64(span[0]), int64(span[1]))
		v, err := NewBatch(s)
		if err != nil {
			t.Fatal(span, err)
		}
		requireSameRecords(t, recs[span[0]:span[1]], v.Records())
		v.Release()
		b, err := AppendIPC(nil, s, mem)
		s.Release()
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewDecoder().DecodeRecords(b)
		if err != nil {
			t.Fatal(span, err)
		}
		requireSameRecords(t, recs[span[0]:span[1]], got)
	}
}

// TestInputUntouched: decoding reads the input in place and never writes
// to it; an input at an odd address is copied once to keep Arrow's
// alignment.
func TestInputUntouched(t *testing.T) {
	recs := edgeRecords()
	b := encode(t, recs)
	orig := bytes.Clone(b)
	batches, err := NewDecoder().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	touch(batches[0])
	ReleaseAll(batches)
	if !bytes.Equal(b, orig) {
		t.Fatal("Decode wrote to its input")
	}
	odd := append(make([]byte, 1, len(b)+1), b...)[1:]
	got, err := NewDecoder().DecodeRecords(odd)
	if err != nil {
		t.Fatal(err)
	}
	requireSameRecords(t, recs, got)
}

// TestMultiBatchStream: a stream of several record batches, each with its
// own topic dictionary (arrow-go writes a replacement dictionary between
// them), decodes into one Batch each; a bad later batch fails the whole
// stream, so the output can treat a message as one atomic unit.
func TestMultiBatchStream(t *testing.T) {
	enc := NewEncoder()
	parts := [][]*kgo.Record{
		{rec("a", 0, 1, nil, []byte("1")), rec("b", 1, 1, nil, []byte("2"))},
		{rec("c", 0, 2, []byte("k"), nil)},
		nil,
		{rec("b", 4, 9, nil, []byte{}), rec("a", 4, 10, nil, []byte("x"))},
	}
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(Schema))
	var want []*kgo.Record
	for _, p := range parts {
		rb, err := enc.Build(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(rb); err != nil {
			t.Fatal(err)
		}
		rb.Release()
		want = append(want, p...)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	batches, err := NewDecoder().Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != len(parts) {
		t.Fatalf("%d batches", len(batches))
	}
	var got []*kgo.Record
	for i, b := range batches {
		if b.Len() != len(parts[i]) {
			t.Fatalf("batch %d: %d rows", i, b.Len())
		}
		got = append(got, b.Records()...)
	}
	ReleaseAll(batches)
	requireSameRecords(t, want, got)

	// The same with a null partition in the second batch.
	schema := arrow.NewSchema(foreignFields(arrow.BinaryTypes.String, true), nil)
	buf.Reset()
	w = ipc.NewWriter(&buf, ipc.WithSchema(schema))
	for _, bad := range []bool{false, true} {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		buildForeign(rb, 3, bad)
		r := rb.NewRecordBatch()
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		r.Release()
		rb.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	batches, err = NewDecoder().Decode(buf.Bytes())
	if batches != nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "record batch 1") {
		t.Fatalf("got %d batches, %v", len(batches), err)
	}
	t.Log(err)
}

// TestConcurrentDecode: one Decoder, one input, several goroutines; the
// race detector proves decoding only reads the shared bytes.
func TestConcurrentDecode(t *testing.T) {
	recs := randomRecords(rand.New(rand.NewPCG(5, 6)), 500, 32)
	in := encode(t, recs)
	dec := NewDecoder()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			batches, err := dec.Decode(in)
			if err == nil {
				touch(batches[0])
				ReleaseAll(batches)
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
