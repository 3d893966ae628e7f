package kafkaarrow

import (
	"io"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EncoderOpt configures an Encoder.
type EncoderOpt func(*Encoder)

// EncoderAllocator sets the allocator of the record batches returned by
// [Encoder.Build], overriding the default memory.DefaultAllocator (the Go
// heap). Use a memory.CheckedAllocator in tests to prove every batch is
// released, or a pooling allocator when batches are built and released at a
// high rate.
//
// [Encoder.AppendIPC] does not use it: it writes the stream into dst (or one
// fresh slice) and allocates nothing else per call.
func EncoderAllocator(mem memory.Allocator) EncoderOpt {
	return func(e *Encoder) { e.mem = mem }
}

// Encoder turns []*kgo.Record into Arrow record batches in [Schema] and into
// Arrow IPC stream bytes.
//
// The encoder writes the column buffers itself (two passes over the records:
// sizes, then bytes) rather than through arrow-go's builders, so that each
// column is allocated once at its final size; AppendIPC writes the columns
// straight into the IPC stream (see ipcwrite.go): encoding a fetch costs one
// allocation, the stream, not a number per record.
//
// An Encoder is not safe for concurrent use; keep one per reader loop (or in
// a sync.Pool). The zero value is not usable: call NewEncoder.
type Encoder struct {
	mem memory.Allocator

	// Scratch column buffers for AppendIPC, 8-byte aligned, reused.
	scratch [numSlots][]byte
	// Buffers of the batch being built; released after the arrays hold them.
	bufs [numSlots]*memory.Buffer

	dict     []string
	dictIdx  map[string]int32
	topicIdx []int32 // the direct IPC writer's topic indices, reused
	lastSize int     // bytes of the column buffers (or the stream) of the last batch
}

// NewEncoder returns an Encoder.
func NewEncoder(opts ...EncoderOpt) *Encoder {
	e := &Encoder{mem: memory.DefaultAllocator, dictIdx: make(map[string]int32)}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Build returns the records as one Arrow record batch in [Schema], with
// buffers from the encoder's allocator. The caller owns the batch and must
// Release it. The record bytes are copied: recs may be reused afterwards.
//
// A batch with more than 2 GiB - 1 bytes of keys, of values, of header keys
// or of header values (or more than 2^31 - 1 headers) cannot be expressed
// with Arrow's 32-bit offsets; Build returns an error wrapping ErrTooLarge
// naming the column, and the caller should split the batch.
func (e *Encoder) Build(recs []*kgo.Record) (arrow.RecordBatch, error) {
	return e.build(recs, false)
}

// AppendIPC appends the records, encoded as one Arrow IPC stream (schema
// message, dictionary batch, one record batch, end-of-stream marker), to dst
// and returns the extended slice. With dst == nil the result is a fresh slice
// of exactly the right size class, which the caller owns (e.g. as a Benthos
// message body).
//
// Nothing else is allocated: the record bytes are written into the stream
// once. An empty recs gives a valid stream with one record batch of zero
// rows.
func (e *Encoder) AppendIPC(dst []byte, recs []*kgo.Record) ([]byte, error) {
	return e.appendDirect(dst, recs)
}

// appendViaArrowGo is AppendIPC through arrow-go's IPC writer: the reference
// the direct writer is tested against.
func (e *Encoder) appendViaArrowGo(dst []byte, recs []*kgo.Record) ([]byte, error) {
	rec, err := e.build(recs, true)
	if err != nil {
		return dst, err
	}
	defer rec.Release()
	return appendIPC(dst, rec, e.mem, e.estimate())
}

// AppendIPC appends rec, encoded as an Arrow IPC stream, to dst. rec may be
// any record batch whose schema passes [ValidateSchema]; it is written with
// its own schema. mem is used for arrow-go's scratch buffers; nil means
// memory.DefaultAllocator.
func AppendIPC(dst []byte, rec arrow.RecordBatch, mem memory.Allocator) ([]byte, error) {
	if err := ValidateSchema(rec.Schema()); err != nil {
		return dst, err
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return appendIPC(dst, rec, mem, 0)
}

// WriteIPC writes rec as an Arrow IPC stream to w.
func WriteIPC(w io.Writer, rec arrow.RecordBatch, mem memory.Allocator) error {
	b, err := AppendIPC(nil, rec, mem)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func appendIPC(dst []byte, rec arrow.RecordBatch, mem memory.Allocator, sizeHint int) ([]byte, error) {
	if sizeHint > 0 && cap(dst)-len(dst) < sizeHint {
		grown := make([]byte, len(dst), len(dst)+sizeHint)
		copy(grown, dst)
		dst = grown
	}
	sw := &sliceWriter{b: dst}
	w := ipc.NewWriter(sw, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		_ = w.Close()
		return dst, err
	}
	if err := w.Close(); err != nil {
		return dst, err
	}
	return sw.b, nil
}

type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// slot names one column buffer.
type slot int

const (
	sTopicIdx slot = iota
	sDictOff
	sDictData
	sPartition
	sOffset
	sTimestamp
	sKeyValid
	sKeyOff
	sKeyData
	sValValid
	sValOff
	sValData
	sHdrOff
	sHKeyOff
	sHKeyData
	sHValValid
	sHValOff
	sHValData
	numSlots
)

// estimate is the IPC size of the batch built last: its buffers, padding,
// and room for the schema, dictionary and record batch metadata.
func (e *Encoder) estimate() int { return e.lastSize + 2048 }

// alloc returns an n-byte buffer for slot s, 8-byte aligned, and keeps its
// memory.Buffer for the arrays. With scratch, the slot's scratch slice is
// reused (grown when too small); otherwise it comes from the allocator. The
// contents are not zeroed: every caller writes every byte.
func (e *Encoder) alloc(s slot, n int, scratch bool) []byte {
	if scratch {
		b := e.scratch[s]
		if cap(b) < n {
			b = alignedBytes(n + n/4)
			e.scratch[s] = b
		}
		b = b[:n]
		e.bufs[s] = memory.NewBufferBytes(b)
		return b
	}
	b := e.mem.Allocate(n)[:n]
	e.bufs[s] = memory.NewBufferWithAllocator(b, e.mem)
	return b
}

func alignedBytes(n int) []byte {
	u := make([]uint64, (n+7)/8)
	if len(u) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(u))), len(u)*8)
}

func (e *Encoder) i32(s slot, n int, scratch bool) []int32 {
	return arrow.Int32Traits.CastFromBytes(e.alloc(s, 4*n, scratch))
}

func (e *Encoder) i64(s slot, n int, scratch bool) []int64 {
	return arrow.Int64Traits.CastFromBytes(e.alloc(s, 8*n, scratch))
}

// bitmap returns a cleared validity bitmap for n values, or nil (no buffer:
// all valid) when there is no null.
func (e *Encoder) bitmap(s slot, n int, anyNull, scratch bool) []byte {
	if !anyNull {
		e.bufs[s] = nil
		return nil
	}
	b := e.alloc(s, int(bitutil.BytesForBits(int64(n))), scratch)
	clear(b)
	return b
}

type sizes struct {
	key, val, hdrs, hkey, hval    int64
	keyNulls, valNulls, hvalNulls int
}

func (e *Encoder) build(recs []*kgo.Record, scratch bool) (rec arrow.RecordBatch, err error) {
	for i := range e.bufs {
		e.bufs[i] = nil
	}
	defer func() {
		e.lastSize = 0
		for i, b := range e.bufs {
			if b != nil {
				e.lastSize += b.Len() + 8
				b.Release() // the arrays hold their own references
				e.bufs[i] = nil
			}
		}
	}()

	// Pass 1: sizes and null counts, so every buffer is allocated once.
	n := len(recs)
	var sz sizes
	for _, r := range recs {
		if r.Key == nil {
			sz.keyNulls++
		}
		if r.Value == nil {
			sz.valNulls++
		}
		sz.key += int64(len(r.Key))
		sz.val += int64(len(r.Value))
		sz.hdrs += int64(len(r.Headers))
		for _, h := range r.Headers {
			sz.hkey += int64(len(h.Key))
			sz.hval += int64(len(h.Value))
			if h.Value == nil {
				sz.hvalNulls++
			}
		}
	}
	for _, c := range []struct {
		col string
		n   int64
	}{{"", int64(n)}, {FieldKey, sz.key}, {FieldValue, sz.val}, {FieldHeaders, sz.hdrs},
		{FieldHeaders + "." + FieldHeaderKey, sz.hkey}, {FieldHeaders + "." + FieldHeaderValue, sz.hval}} {
		if c.n > math.MaxInt32 {
			return nil, colErr(ErrTooLarge, c.col, "%d bytes or items in one batch, more than a 32-bit Arrow offset allows; split the batch", c.n)
		}
	}
	h := int(sz.hdrs)

	// Pass 2: fill.
	topicIdx := e.i32(sTopicIdx, n, scratch)
	partitions := e.i32(sPartition, n, scratch)
	offsets := e.i64(sOffset, n, scratch)
	timestamps := e.i64(sTimestamp, n, scratch)
	keyValid := e.bitmap(sKeyValid, n, sz.keyNulls > 0, scratch)
	keyOff := e.i32(sKeyOff, n+1, scratch)
	keyData := e.alloc(sKeyData, int(sz.key), scratch)
	valValid := e.bitmap(sValValid, n, sz.valNulls > 0, scratch)
	valOff := e.i32(sValOff, n+1, scratch)
	valData := e.alloc(sValData, int(sz.val), scratch)
	hdrOff := e.i32(sHdrOff, n+1, scratch)
	hkeyOff := e.i32(sHKeyOff, h+1, scratch)
	hkeyData := e.alloc(sHKeyData, int(sz.hkey), scratch)
	hvalValid := e.bitmap(sHValValid, h, sz.hvalNulls > 0, scratch)
	hvalOff := e.i32(sHValOff, h+1, scratch)
	hvalData := e.alloc(sHValData, int(sz.hval), scratch)

	e.dict = e.dict[:0]
	clear(e.dictIdx)
	var (
		lastTopic string
		lastIdx   int32 = -1
		ko, vo    int32
		hi        int
		hko, hvo  int32
	)
	keyOff[0], valOff[0], hdrOff[0], hkeyOff[0], hvalOff[0] = 0, 0, 0, 0, 0
	for i, r := range recs {
		if lastIdx < 0 || r.Topic != lastTopic {
			idx, ok := e.dictIdx[r.Topic]
			if !ok {
				idx = int32(len(e.dict))
				e.dict = append(e.dict, r.Topic)
				e.dictIdx[r.Topic] = idx
			}
			lastTopic, lastIdx = r.Topic, idx
		}
		topicIdx[i] = lastIdx
		partitions[i] = r.Partition
		offsets[i] = r.Offset
		timestamps[i] = r.Timestamp.UnixMilli()

		if r.Key != nil && keyValid != nil {
			bitutil.SetBit(keyValid, i)
		}
		ko += int32(copy(keyData[ko:], r.Key))
		keyOff[i+1] = ko
		if r.Value != nil && valValid != nil {
			bitutil.SetBit(valValid, i)
		}
		vo += int32(copy(valData[vo:], r.Value))
		valOff[i+1] = vo

		for _, hd := range r.Headers {
			hko += int32(copy(hkeyData[hko:], hd.Key))
			hkeyOff[hi+1] = hko
			if hd.Value != nil && hvalValid != nil {
				bitutil.SetBit(hvalValid, hi)
			}
			hvo += int32(copy(hvalData[hvo:], hd.Value))
			hvalOff[hi+1] = hvo
			hi++
		}
		hdrOff[i+1] = int32(hi)
	}

	// The dictionary of distinct topics, in order of first appearance.
	var dictBytes int
	for _, t := range e.dict {
		dictBytes += len(t)
	}
	dictOff := e.i32(sDictOff, len(e.dict)+1, scratch)
	dictData := e.alloc(sDictData, dictBytes, scratch)
	dictOff[0] = 0
	var do int32
	for i, t := range e.dict {
		do += int32(copy(dictData[do:], t))
		dictOff[i+1] = do
	}

	b := &e.bufs
	dictValues := array.NewData(arrow.BinaryTypes.String, len(e.dict), []*memory.Buffer{nil, b[sDictOff], b[sDictData]}, nil, 0, 0)
	defer dictValues.Release()
	hkey := array.NewData(arrow.BinaryTypes.String, h, []*memory.Buffer{nil, b[sHKeyOff], b[sHKeyData]}, nil, 0, 0)
	defer hkey.Release()
	hval := array.NewData(arrow.BinaryTypes.Binary, h, []*memory.Buffer{b[sHValValid], b[sHValOff], b[sHValData]}, nil, sz.hvalNulls, 0)
	defer hval.Release()
	hstruct := array.NewData(headerType, h, []*memory.Buffer{nil}, []arrow.ArrayData{hkey, hval}, 0, 0)
	defer hstruct.Release()

	data := [...]arrow.ArrayData{
		array.NewDataWithDictionary(topicType, n, []*memory.Buffer{nil, b[sTopicIdx]}, 0, 0, dictValues),
		array.NewData(arrow.PrimitiveTypes.Int32, n, []*memory.Buffer{nil, b[sPartition]}, nil, 0, 0),
		array.NewData(arrow.PrimitiveTypes.Int64, n, []*memory.Buffer{nil, b[sOffset]}, nil, 0, 0),
		array.NewData(timestampType, n, []*memory.Buffer{nil, b[sTimestamp]}, nil, 0, 0),
		array.NewData(arrow.BinaryTypes.Binary, n, []*memory.Buffer{b[sKeyValid], b[sKeyOff], b[sKeyData]}, nil, sz.keyNulls, 0),
		array.NewData(arrow.BinaryTypes.Binary, n, []*memory.Buffer{b[sValValid], b[sValOff], b[sValData]}, nil, sz.valNulls, 0),
		array.NewData(headersType, n, []*memory.Buffer{nil, b[sHdrOff]}, []arrow.ArrayData{hstruct}, 0, 0),
	}
	var cols [len(data)]arrow.Array
	for i, d := range data {
		cols[i] = array.MakeFromData(d)
		d.Release()
	}
	rec = array.NewRecordBatch(Schema, cols[:], int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec, nil
}
