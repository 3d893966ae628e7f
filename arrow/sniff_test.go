package kafkaarrow

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestIsKafkaIPC(t *testing.T) {
	for i, s := range seedStreams(t) {
		if !IsKafkaIPC(s) {
			t.Errorf("seed stream %d not detected", i)
		}
	}
	good := encode(t, edgeRecords())
	// Only the schema message is read: a damaged stream that declares the
	// Kafka schema is detected (and then fails Decode, loudly).
	if !IsKafkaIPC(good[:len(good)-20]) {
		t.Error("a truncated Kafka stream is still a Kafka stream")
	}
	if _, err := NewDecoder().Decode(good[:len(good)-20]); err == nil {
		t.Error("truncated stream decoded")
	}

	// An Arrow stream of another schema is an opaque value.
	other := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, other)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(7)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(other))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string][]byte{
		"other schema": buf.Bytes(),
		"nil":          nil,
		"json":         []byte(`{"a":1}`),
		"token only":   {0xff, 0xff, 0xff, 0xff},
		"token+junk":   append([]byte{0xff, 0xff, 0xff, 0xff, 0x10, 0, 0, 0}, bytes.Repeat([]byte{0xab}, 40)...),
		"schema cut":   good[:12],
	} {
		if IsKafkaIPC(p) {
			t.Errorf("%s detected as a Kafka stream", name)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		p := append([]byte{0xff, 0xff, 0xff, 0xff}, make([]byte, r.IntN(300))...)
		for i := 4; i < len(p); i++ {
			p[i] = byte(r.Uint32())
		}
		if IsKafkaIPC(p) {
			t.Fatalf("random bytes detected: %x", p)
		}
	}
}

// FuzzIsKafkaIPC: never panics, and whatever Decode accepts is detected.
func FuzzIsKafkaIPC(f *testing.F) {
	for _, s := range seedStreams(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		det := IsKafkaIPC(b)
		batches, err := NewDecoder(WithMaxDecodedBytes(64 << 20)).Decode(b)
		if err == nil {
			ReleaseAll(batches)
			if !det {
				t.Fatal("decodable stream not detected")
			}
		}
	})
}
