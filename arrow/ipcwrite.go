package kafkaarrow

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The direct IPC writer of Encoder.AppendIPC: the schema is fixed, so the
// stream it writes is always the same four messages (schema, the topic
// dictionary, one record batch, end of stream), and the record bytes can be
// written straight into the stream, once, instead of into column buffers
// that arrow-go's IPC writer then copies. The schema message is arrow-go's own
// (written once, see schemaMessage); the dictionary and record batch messages
// are written here, their flatbuffer metadata laid out by hand with every
// scalar, struct and vector aligned to its size, as the Arrow format's
// flatbuffer readers (arrow-go, Arrow C++ / pyarrow with its verifier) expect.
// Layout of the Arrow columnar format, IPC section: an encapsulated message is
// 0xFFFFFFFF, an int32 metadata size (flatbuffer plus padding, so that the
// body starts 8-byte aligned), the flatbuffer Message, then the body: each
// buffer padded to a multiple of 8 bytes.

// Message header types and metadata version of the Arrow format (Message.fbs).
const (
	fbHeaderDictionaryBatch = 2
	fbHeaderRecordBatch     = 3
	fbMetadataV5            = 4
)

// Column buffers of the record batch, in the IPC body's order (a depth-first
// walk of Schema: each array's validity bitmap, then its offsets or values,
// then its data), and its field nodes.
const (
	recBuffers = 23
	recNodes   = 10
)

var schemaMsg struct {
	once sync.Once
	b    []byte
	err  error
}

// schemaMessage is the encapsulated schema message of Schema, as arrow-go
// writes it (the same bytes IsKafkaIPC recognises): the prefix of the
// stream of an empty batch written by arrow-go's IPC writer.
func schemaMessage() ([]byte, error) {
	schemaMsg.once.Do(func() {
		rec, err := NewEncoder().build(nil, false)
		if err != nil {
			schemaMsg.err = err
			return
		}
		defer rec.Release()
		b, err := AppendIPC(nil, rec, nil)
		if err != nil {
			schemaMsg.err = err
			return
		}
		if len(b) < 8 || binary.LittleEndian.Uint32(b) != 0xFFFFFFFF {
			schemaMsg.err = fmt.Errorf("arrow-go's stream does not start with an encapsulated message")
			return
		}
		n := 8 + int(binary.LittleEndian.Uint32(b[4:]))
		if n > len(b) {
			schemaMsg.err = fmt.Errorf("arrow-go's schema message is cut")
			return
		}
		schemaMsg.b = append([]byte(nil), b[:n]...)
	})
	return schemaMsg.b, schemaMsg.err
}

func pad8(n int) int { return (n + 7) &^ 7 }

// makeNoZero returns an empty slice with room for at least n bytes whose
// memory was not cleared, for a caller that writes every byte it then uses
// (appendDirect writes the whole stream, padding included). A make([]byte, n)
// of a stream's size (often megabytes) clears it first, and in a profile of
// 1 KiB records that cost more than copying the values into it.
// strings.Builder's Grow is the standard library's one allocation that skips
// the clearing; its buffer is taken here before anything reads it as a
// string.
func makeNoZero(n int) []byte {
	if n <= 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(0) // String of an empty Builder need not carry its buffer
	s := b.String()
	return unsafe.Slice(unsafe.StringData(s), b.Cap())[:0]
}

// colSizes are the byte sizes of the variable-length columns of a batch and
// its null counts.
type colSizes struct {
	key, val, hdrs, hkey, hval    int
	keyNulls, valNulls, hvalNulls int
}

// appendDirect appends recs as an Arrow IPC stream in Schema to dst.
func (e *Encoder) appendDirect(dst []byte, recs []*kgo.Record) ([]byte, error) {
	schema, err := schemaMessage()
	if err != nil {
		return dst, err
	}
	// Pass 1: sizes and null counts, and the topic dictionary.
	n := len(recs)
	var sz colSizes
	e.dict = e.dict[:0]
	clear(e.dictIdx)
	idx := e.topicIdx[:0]
	var lastTopic string
	var lastIdx int32 = -1
	var dictBytes int
	for _, r := range recs {
		if r.Key == nil {
			sz.keyNulls++
		}
		if r.Value == nil {
			sz.valNulls++
		}
		sz.key += len(r.Key)
		sz.val += len(r.Value)
		sz.hdrs += len(r.Headers)
		for _, h := range r.Headers {
			sz.hkey += len(h.Key)
			sz.hval += len(h.Value)
			if h.Value == nil {
				sz.hvalNulls++
			}
		}
		if lastIdx < 0 || r.Topic != lastTopic {
			i, ok := e.dictIdx[r.Topic]
			if !ok {
				i = int32(len(e.dict))
				e.dict = append(e.dict, r.Topic)
				e.dictIdx[r.Topic] = i
				dictBytes += len(r.Topic)
			}
			lastTopic, lastIdx = r.Topic, i
		}
		idx = append(idx, lastIdx)
	}
	e.topicIdx = idx
	for _, c := range []struct {
		col string
		n   int
	}{{FieldKey, sz.key}, {FieldValue, sz.val}, {FieldHeaders, sz.hdrs},
		{FieldHeaders + "." + FieldHeaderKey, sz.hkey}, {FieldHeaders + "." + FieldHeaderValue, sz.hval}} {
		if c.n > math.MaxInt32 {
			return dst, colErr(ErrTooLarge, c.col, "%d bytes or items in one batch, more than a 32-bit Arrow offset allows; split the batch", c.n)
		}
	}
	h := sz.hdrs
	bits := func(k int) int { return (k + 7) / 8 }
	bitmap := func(k, nulls int) int {
		if nulls == 0 {
			return 0
		}
		return bits(k)
	}

	// The record batch body: buffer lengths in body order.
	lens := [recBuffers]int{
		0, 4 * n, // topic: validity, indices
		0, 4 * n, // partition
		0, 8 * n, // offset
		0, 8 * n, // timestamp
		bitmap(n, sz.keyNulls), 4 * (n + 1), sz.key, // key
		bitmap(n, sz.valNulls), 4 * (n + 1), sz.val, // value
		0, 4 * (n + 1), // headers: validity, offsets
		0,                       // header struct: validity
		0, 4 * (h + 1), sz.hkey, // header key
		bitmap(h, sz.hvalNulls), 4 * (h + 1), sz.hval, // header value
	}
	nodes := [recNodes][2]int{
		{n, 0}, {n, 0}, {n, 0}, {n, 0}, {n, sz.keyNulls}, {n, sz.valNulls}, {n, 0}, {h, 0}, {h, 0}, {h, sz.hvalNulls},
	}
	recBody := 0
	for _, l := range lens {
		recBody += pad8(l)
	}
	dictLens := [3]int{0, 4 * (len(e.dict) + 1), dictBytes}
	dictBody := 0
	for _, l := range dictLens {
		dictBody += pad8(l)
	}
	dictNodes := [1][2]int{{len(e.dict), 0}}

	dictMetaLen := fbRecordMessageLen(1, 3, true)
	recMetaLen := fbRecordMessageLen(recNodes, recBuffers, false)
	total := len(schema) + dictMetaLen + dictBody + recMetaLen + recBody + 8
	if cap(dst)-len(dst) < total {
		grown := makeNoZero(len(dst) + total)[:len(dst)]
		copy(grown, dst)
		dst = grown
	}
	start := len(dst)
	out := dst[:start+total]
	w := out[start:]
	// The bytes are written in full (padding included): a reused dst
	// holds old bytes.
	p := copy(w, schema)

	// Dictionary batch: the distinct topics as utf8.
	p += fbWriteRecordMessage(w[p:], dictMetaLen, fbHeaderDictionaryBatch, int64(len(e.dict)), dictNodes[:], dictLens[:], dictBody)
	body := w[p : p+dictBody]
	q := 0
	q = zeroPad(body, q, 0)
	offs := body[q : q+dictLens[1]]
	do := int32(0)
	dd := q + pad8(dictLens[1])
	binary.LittleEndian.PutUint32(offs, 0)
	for i, t := range e.dict {
		do += int32(copy(body[dd+int(do):], t))
		binary.LittleEndian.PutUint32(offs[4*(i+1):], uint32(do))
	}
	q = zeroPad(body, q, dictLens[1])
	q = zeroPad(body, q, dictLens[2])
	p += dictBody

	// Record batch.
	p += fbWriteRecordMessage(w[p:], recMetaLen, fbHeaderRecordBatch, int64(n), nodes[:], lens[:], recBody)
	body = w[p : p+recBody]
	// Buffer start positions in the body.
	var at [recBuffers]int
	q = 0
	for i, l := range lens {
		at[i] = q
		q += pad8(l)
	}
	// Zero the padding and the bitmaps (bits are set below).
	for i, l := range lens {
		clear(body[at[i]+l : at[i]+pad8(l)])
	}
	for _, i := range []int{8, 11, 20} {
		clear(body[at[i] : at[i]+lens[i]])
	}
	le := binary.LittleEndian
	var ko, vo, hko, hvo uint32
	hi := 0
	le.PutUint32(body[at[9]:], 0)
	le.PutUint32(body[at[12]:], 0)
	le.PutUint32(body[at[15]:], 0)
	le.PutUint32(body[at[18]:], 0)
	le.PutUint32(body[at[21]:], 0)
	for i, r := range recs {
		le.PutUint32(body[at[1]+4*i:], uint32(idx[i]))
		le.PutUint32(body[at[3]+4*i:], uint32(r.Partition))
		le.PutUint64(body[at[5]+8*i:], uint64(r.Offset))
		le.PutUint64(body[at[7]+8*i:], uint64(r.Timestamp.UnixMilli()))
		if r.Key != nil && lens[8] > 0 {
			body[at[8]+i/8] |= 1 << (i % 8)
		}
		ko += uint32(copy(body[at[10]+int(ko):], r.Key))
		le.PutUint32(body[at[9]+4*(i+1):], ko)
		if r.Value != nil && lens[11] > 0 {
			body[at[11]+i/8] |= 1 << (i % 8)
		}
		vo += uint32(copy(body[at[13]+int(vo):], r.Value))
		le.PutUint32(body[at[12]+4*(i+1):], vo)
		for _, hd := range r.Headers {
			hko += uint32(copy(body[at[19]+int(hko):], hd.Key))
			le.PutUint32(body[at[18]+4*(hi+1):], hko)
			if hd.Value != nil && lens[20] > 0 {
				body[at[20]+hi/8] |= 1 << (hi % 8)
			}
			hvo += uint32(copy(body[at[22]+int(hvo):], hd.Value))
			le.PutUint32(body[at[21]+4*(hi+1):], hvo)
			hi++
		}
		le.PutUint32(body[at[15]+4*(i+1):], uint32(hi))
	}
	p += recBody
	// End of stream.
	le.PutUint32(w[p:], 0xFFFFFFFF)
	le.PutUint32(w[p+4:], 0)
	e.lastSize = total
	return out, nil
}

// zeroPad zeroes the padding after a buffer of l bytes at q and returns the
// position of the next buffer.
func zeroPad(body []byte, q, l int) int {
	clear(body[q+l : q+pad8(l)])
	return q + pad8(l)
}

// fbRecordMessageLen is the size of an encapsulated record batch (or, with
// dict, dictionary batch) message's prefix: continuation, metadata size and
// the flatbuffer metadata padded so that the body starts 8-byte aligned,
// without the body.
func fbRecordMessageLen(nodes, buffers int, dict bool) int {
	return fbLayout(nodes, buffers, dict).end
}

// fbPlan is where fbWriteRecordMessage puts each part of the flatbuffer,
// relative to the start of the flatbuffer (8 bytes into the message).
type fbPlan struct {
	msgVT, msg, dictVT, dict, rbVT, rb, nodes, buffers, fbLen, end int
}

// fbLayout lays the flatbuffer out front to back:
//
//	root offset
//	Message vtable, Message table (version, header type, header, bodyLength)
//	[DictionaryBatch vtable and table (data)]
//	RecordBatch vtable and table (nodes, length, buffers)
//	nodes vector (FieldNode structs), buffers vector (Buffer structs)
//
// Tables start 8-byte aligned (their 8-byte fields then are), vector
// elements too (their 4-byte length just before).
func fbLayout(nodes, buffers int, dict bool) fbPlan {
	var l fbPlan
	l.msgVT = 4 // u32 root offset at 0
	l.msg = 16  // vtable: 4 + 2*4 bytes = 12
	p := l.msg + 24
	if dict {
		l.dictVT = p // 4 + 2*2 bytes (id absent, data)
		l.dict = pad8(p + 8)
		p = l.dict + 8
	}
	l.rbVT = p // 4 + 2*3 bytes
	l.rb = pad8(p + 10)
	p = l.rb + 24
	l.nodes = p + 4 // length at p+4 (8k+4), elements at p+8
	if (l.nodes+4)%8 != 0 {
		l.nodes += 4
	}
	p = l.nodes + 4 + 16*nodes
	l.buffers = p + 4
	if (l.buffers+4)%8 != 0 {
		l.buffers += 4
	}
	l.fbLen = l.buffers + 4 + 16*buffers
	l.end = 8 + pad8(l.fbLen)
	return l
}

// fbWriteRecordMessage writes the prefix of an encapsulated record batch or
// dictionary batch message (its length from fbRecordMessageLen) into w: the
// continuation marker, the metadata size, and the flatbuffer Message with a
// RecordBatch of length rows, the field nodes (length, null count) and the
// buffers (8-byte aligned, back to back, of the given lengths) of a body of
// bodyLen bytes; dictionary batches have id 0 and are not deltas. It returns
// the bytes written.
func fbWriteRecordMessage(w []byte, end int, header byte, length int64, nodes [][2]int, lens []int, bodyLen int) int {
	l := fbLayout(len(nodes), len(lens), header == fbHeaderDictionaryBatch)
	if l.end != end {
		panic("kafkaarrow: flatbuffer layout mismatch")
	}
	le := binary.LittleEndian
	clear(w[:end])
	le.PutUint32(w[0:], 0xFFFFFFFF)
	le.PutUint32(w[4:], uint32(end-8))
	fb := w[8:end]
	u16 := func(at, v int) { le.PutUint16(fb[at:], uint16(v)) }
	u32 := func(at, v int) { le.PutUint32(fb[at:], uint32(v)) }
	i64 := func(at int, v int64) { le.PutUint64(fb[at:], uint64(v)) }

	u32(0, l.msg) // root: uoffset to the Message table

	// Message vtable: version @4, header_type @6, header @8, bodyLength @16.
	u16(l.msgVT, 12)
	u16(l.msgVT+2, 24)
	u16(l.msgVT+4, 4)
	u16(l.msgVT+6, 6)
	u16(l.msgVT+8, 8)
	u16(l.msgVT+10, 16)
	u32(l.msg, l.msg-l.msgVT) // soffset to the vtable (before the table)
	u16(l.msg+4, fbMetadataV5)
	fb[l.msg+6] = header
	hdr := l.rb
	if header == fbHeaderDictionaryBatch {
		hdr = l.dict
	}
	u32(l.msg+8, hdr-(l.msg+8))
	i64(l.msg+16, int64(bodyLen))

	if header == fbHeaderDictionaryBatch {
		// DictionaryBatch vtable: id absent (0), data @4.
		u16(l.dictVT, 8)
		u16(l.dictVT+2, 8)
		u16(l.dictVT+4, 0)
		u16(l.dictVT+6, 4)
		u32(l.dict, l.dict-l.dictVT)
		u32(l.dict+4, l.rb-(l.dict+4))
	}

	// RecordBatch vtable: length @8, nodes @4, buffers @16.
	u16(l.rbVT, 10)
	u16(l.rbVT+2, 24)
	u16(l.rbVT+4, 8)
	u16(l.rbVT+6, 4)
	u16(l.rbVT+8, 16)
	u32(l.rb, l.rb-l.rbVT)
	u32(l.rb+4, l.nodes-(l.rb+4))
	i64(l.rb+8, length)
	u32(l.rb+16, l.buffers-(l.rb+16))

	u32(l.nodes, len(nodes))
	for i, nd := range nodes {
		i64(l.nodes+4+16*i, int64(nd[0]))
		i64(l.nodes+4+16*i+8, int64(nd[1]))
	}
	u32(l.buffers, len(lens))
	off := 0
	for i, n := range lens {
		i64(l.buffers+4+16*i, int64(off))
		i64(l.buffers+4+16*i+8, int64(n))
		off += pad8(n)
	}
	return end
}
