package input

import (
	"reflect"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// recordMeta are the metadata values of one record that differ from record
// to record: its key, offset and timestamp (kafka_key, kafka_offset,
// kafka_timestamp_ms, kafka_timestamp_unix).
//
// Its fields are exported only because reflect hands out no unexported
// field's value as an interface (metaBoxes).
type recordMeta struct {
	Key                        string
	Offset, TimestampMs, TsSec int64
}

// boxedMeta are a record's recordMeta as the interface values Benthos keeps
// in a message's metadata: the same dynamic types and values as the plain
// conversions (string, int64), so nothing downstream can tell them apart.
type boxedMeta struct {
	key, offset, timestampMs, tsSec any
}

// metaBoxes boxes the recordMeta of a fetch's records a chunk of records at a
// time. Converting a string or an int64 to an interface allocates (four
// allocations per record here, five with the key's bytes copied into a
// string); a chunk is one array of recordMeta converted to an interface once,
// and reflect hands out its elements' fields as interfaces that point into
// that array without copying them (a field of an array that is not
// addressable). Its keys are substrings of one string per chunk. So a chunk
// costs two allocations however many records it holds, and the chunk's
// memory is what the separate values took. The values are copies, read from
// the records when the chunk is made: nothing references the consumer's
// buffers.
//
// A chunk covers the next records of the fetch whether they become messages
// or not (markers, dropped tombstones, records below the position or at the
// stop): their slots are wasted, a few bytes each.
type metaBoxes struct {
	recs  []*kgo.Record
	chunk reflect.Value // an array of recordMeta, as an interface
	from  int           // recs[from] is the chunk's first record
	n     int           // records in the chunk
}

// maxChunkKeys bounds the bytes of a chunk's keys: every key of a chunk stays
// in memory while any message of the chunk does. Larger keys are copied one
// by one.
const maxChunkKeys = 16 << 10

// newMetaBoxes boxes the metadata of recs, the records of one fetch of one
// partition, as of is called for them.
func newMetaBoxes(recs []*kgo.Record) metaBoxes {
	return metaBoxes{recs: recs}
}

// of returns the boxed metadata of recs[i].
func (b *metaBoxes) of(i int) boxedMeta {
	if !b.chunk.IsValid() || i < b.from || i >= b.from+b.n {
		b.fill(i)
	}
	e := b.chunk.Index(i - b.from)
	return boxedMeta{
		key:         e.Field(0).Interface(),
		offset:      e.Field(1).Interface(),
		timestampMs: e.Field(2).Interface(),
		tsSec:       e.Field(3).Interface(),
	}
}

// fill makes the chunk that begins at recs[i]: as many of the records left as
// the largest of the chunk sizes that they fill (so that a partition fetched a
// few records at a time does not allocate a large chunk for them).
func (b *metaBoxes) fill(i int) {
	left := len(b.recs) - i
	switch {
	case left >= 64:
		var a [64]recordMeta
		fillMeta(a[:], b.recs[i:])
		b.chunk = reflect.ValueOf(a)
	case left >= 16:
		var a [16]recordMeta
		fillMeta(a[:], b.recs[i:])
		b.chunk = reflect.ValueOf(a)
	case left >= 4:
		var a [4]recordMeta
		fillMeta(a[:], b.recs[i:])
		b.chunk = reflect.ValueOf(a)
	default:
		var a [1]recordMeta
		fillMeta(a[:], b.recs[i:])
		b.chunk = reflect.ValueOf(a)
	}
	b.from, b.n = i, b.chunk.Len()
}

// fillMeta fills s with the metadata of the first len(s) records of recs.
// The array s slices is then converted to an interface by value
// (reflect.ValueOf of an array value is not addressable, which is what lets
// its fields be handed out without copies).
func fillMeta(s []recordMeta, recs []*kgo.Record) {
	keyBytes := 0
	for j := range s {
		keyBytes += len(recs[j].Key)
	}
	var keys string
	if keyBytes <= maxChunkKeys && keyBytes > 0 {
		var sb strings.Builder
		sb.Grow(keyBytes)
		for j := range s {
			sb.Write(recs[j].Key)
		}
		keys = sb.String()
	}
	at := 0
	for j := range s {
		r := recs[j]
		m := &s[j]
		switch {
		case len(r.Key) == 0:
			// "", as string(r.Key) of a nil or empty key.
		case keys != "":
			m.Key = keys[at : at+len(r.Key)]
			at += len(r.Key)
		default:
			m.Key = string(r.Key)
		}
		m.Offset = r.Offset
		m.TimestampMs = r.Timestamp.UnixMilli()
		m.TsSec = r.Timestamp.Unix()
	}
}
