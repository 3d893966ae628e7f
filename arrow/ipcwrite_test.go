package kafkaarrow

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDirectIPCMatchesArrowGo: the stream the direct writer gives
// (Encoder.AppendIPC) reads, through arrow-go's own IPC reader, as the same
// record batch as the one arrow-go's writer gives for the same records
// (array.RecordEqual: types, lengths, null counts, values), starts with the
// same schema message, and the reused destination slice gives the same bytes.
func TestDirectIPCMatchesArrowGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	cases := map[string][]*kgo.Record{
		"edge":     edgeRecords(),
		"empty":    nil,
		"one":      {rec("t", 0, 0, []byte("k"), []byte("v"))},
		"all null": {rec("t", 0, 0, nil, nil), rec("t", 0, 1, nil, nil)},
		"topics":   {rec("a", 1, 5, nil, []byte("x")), rec("b", 2, 6, []byte{}, nil), rec("a", 3, 7, []byte("k"), []byte{})},
	}
	for i := range 20 {
		cases["random"+string(rune('a'+i))] = randomRecords(rng, 1+rng.IntN(3000), 1+rng.IntN(200))
	}
	for name, recs := range cases {
		t.Run(name, func(t *testing.T) {
			enc := NewEncoder()
			direct, err := enc.AppendIPC(nil, recs)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := NewEncoder().appendViaArrowGo(nil, recs)
			if err != nil {
				t.Fatal(err)
			}
			schema, err := schemaMessage()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(direct, schema) || !bytes.HasPrefix(ref, schema) {
				t.Fatal("the streams do not start with the schema message")
			}
			if len(direct)%8 != 0 {
				t.Fatalf("stream of %d bytes, not a multiple of 8", len(direct))
			}
			a, b := readOne(t, direct), readOne(t, ref)
			defer a.Release()
			defer b.Release()
			if !array.RecordEqual(a, b) {
				t.Fatalf("direct and arrow-go streams differ:\n%v\n%v", a, b)
			}
			// Into a reused slice holding other bytes: the same stream.
			dirty := bytes.Repeat([]byte{0xAB}, len(direct)+64)
			again, err := enc.AppendIPC(dirty[:3], recs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again[3:], direct) {
				t.Fatal("a reused destination gives other bytes")
			}
			if IsKafkaIPC(direct) != IsKafkaIPC(ref) || !IsKafkaIPC(direct) {
				t.Fatal("IsKafkaIPC does not recognise the direct stream")
			}
		})
	}
}

// readOne reads the one record batch of an IPC stream with arrow-go's reader.
func readOne(t *testing.T, b []byte) arrow.RecordBatch {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if !r.Next() {
		t.Fatalf("no record batch: %v", r.Err())
	}
	rec := r.RecordBatch()
	rec.Retain()
	if r.Next() {
		t.Fatal("more than one record batch")
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestMakeNoZero: room for n bytes, empty, its own memory (two calls never
// share it), and writable to its capacity; appendDirect's stream into it is
// the one TestDirectIPCMatchesArrowGo checks against a dirty destination.
func TestMakeNoZero(t *testing.T) {
	if makeNoZero(0) != nil || makeNoZero(-1) != nil {
		t.Fatal("no room asked, none given")
	}
	for _, n := range []int{1, 7, 4096, 1 << 20, 5<<20 + 3} {
		a, b := makeNoZero(n), makeNoZero(n)
		if len(a) != 0 || cap(a) < n {
			t.Fatalf("n=%d: len %d cap %d", n, len(a), cap(a))
		}
		a = a[:cap(a)]
		b = b[:cap(b)]
		for i := range a {
			a[i] = 1
		}
		for i := range b {
			b[i] = 2
		}
		if a[0] != 1 || a[len(a)-1] != 1 {
			t.Fatalf("n=%d: two calls share memory", n)
		}
	}
}
