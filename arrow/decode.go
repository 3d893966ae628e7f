package kafkaarrow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// DefaultMaxDecodedBytes is the default of WithMaxDecodedBytes: 256 MiB,
// the same as arrow-go's default IPC body size limit.
const DefaultMaxDecodedBytes = 256 << 20

// DecoderOpt configures a Decoder.
type DecoderOpt func(*Decoder)

// DecoderAllocator sets the allocator for the memory a decode allocates,
// overriding the default memory.DefaultAllocator (the Go heap). An
// uncompressed stream, which is what the Encoder writes, allocates almost
// nothing: the batches alias the input bytes. Compressed streams (LZ4 or
// ZSTD, written by other Arrow implementations; see WithCompressedInput)
// are decompressed into buffers from this allocator, freed when the Batch is
// released.
func DecoderAllocator(mem memory.Allocator) DecoderOpt {
	return func(d *Decoder) { d.mem = mem }
}

// WithMaxDecodedBytes bounds the bytes one Decode call may allocate
// (decompressed buffers, dictionary concatenation), overriding the default
// DefaultMaxDecodedBytes. Beyond it, Decode returns an error wrapping
// ErrTooLarge. The bound exists because a compressed IPC buffer declares its
// own uncompressed size: without it, a few hostile bytes could ask for
// terabytes, which is a fatal out-of-memory, not a recoverable panic.
// n <= 0 removes the bound (only for trusted input).
func WithMaxDecodedBytes(n int64) DecoderOpt {
	return func(d *Decoder) { d.maxAlloc = n }
}

// WithCompressedInput lets the decoder read IPC bodies compressed with LZ4
// or ZSTD (as other Arrow writers may produce; the Encoder never compresses,
// since Kafka compresses on the wire). It is off by default because a
// compressed stream is a larger attack surface: the decompressed sizes are
// bounded by WithMaxDecodedBytes, but the ZSTD decoder's own window buffer
// is not: a 20-byte ZSTD frame declaring the largest window makes
// klauspost/compress allocate 512 MiB, outside any allocator given here.
// Enable it only for producers you trust.
func WithCompressedInput() DecoderOpt {
	return func(d *Decoder) { d.compressed = true }
}

// Decoder reads Arrow IPC streams in [Schema] into validated Batches.
// A Decoder holds only its options: it is safe for concurrent use, and
// cheap enough to create per call.
type Decoder struct {
	mem        memory.Allocator
	maxAlloc   int64
	compressed bool
}

// NewDecoder returns a Decoder.
func NewDecoder(opts ...DecoderOpt) *Decoder {
	d := &Decoder{mem: memory.DefaultAllocator, maxAlloc: DefaultMaxDecodedBytes}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Decode reads an Arrow IPC stream (schema message, optional dictionary
// batches, record batches, end-of-stream marker) and returns one Batch per
// record batch, each validated against [Schema] and checked for consistency
// down to every offset, so that no accessor of the Batch can panic later.
//
// The whole stream is checked before anything is returned: a message with a
// bad third batch fails as a whole, which lets the output treat one message
// as one atomic unit. Errors wrap ErrSchema (wrong columns, with the column
// named), ErrCorrupt (truncated or damaged bytes, a missing end-of-stream
// marker, trailing bytes, or a panic recovered from arrow-go) or ErrTooLarge.
// Untrusted bytes never make Decode panic.
//
// The batches alias b (the IPC body is not copied): b must not be modified
// until every returned Batch is released. Release them with ReleaseAll.
func (d *Decoder) Decode(b []byte) (batches []*Batch, err error) {
	defer func() {
		if r := recover(); r != nil {
			ReleaseAll(batches)
			batches = nil
			err = recovered(r)
		}
	}()
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		// Arrow buffers are read through unsafe casts to []int32 and
		// []int64; keep them aligned on every platform.
		b = append(alignedBytes(len(b))[:0], b...)
	}
	mem := d.mem
	if d.maxAlloc > 0 {
		mem = &limitAllocator{mem: d.mem, left: d.maxAlloc}
	}
	mr := &bytesMessageReader{b: b, compressed: d.compressed}
	mr.refs.Store(1) // owned by the ipc.Reader, which releases it, also on error
	rdr, err := ipc.NewReaderFromMessageReader(mr,
		ipc.WithAllocator(mem),
		// The default would byte-swap a big-endian stream's buffers in
		// place, i.e. write into b. checkSchema rejects such streams.
		ipc.WithEnsureNativeEndian(false),
	)
	if err != nil {
		return nil, wrapReadErr(mr, err)
	}
	defer rdr.Release()
	l, err := checkSchema(rdr.Schema())
	if err != nil {
		return nil, err
	}
	for rdr.Next() {
		rec := rdr.RecordBatch()
		batch, err := newBatch(rec, l)
		if err != nil {
			ReleaseAll(batches)
			return nil, fmt.Errorf("record batch %d: %w", len(batches), err)
		}
		batches = append(batches, batch)
	}
	if err := rdr.Err(); err != nil {
		ReleaseAll(batches)
		return nil, wrapReadErr(mr, fmt.Errorf("record batch %d: %w", len(batches), err))
	}
	if !mr.eos {
		ReleaseAll(batches)
		if mr.err != nil {
			return nil, mr.err
		}
		return nil, corruptf("arrow/ipc reader stopped before the end-of-stream marker at byte %d of %d", mr.pos, len(b))
	}
	return batches, nil
}

// ReleaseAll releases every batch.
func ReleaseAll(batches []*Batch) {
	for _, b := range batches {
		if b != nil {
			b.Release()
		}
	}
}

// wrapReadErr classifies an error that came out of arrow-go's reader: our
// own framing error if there was one (it is the most precise), ErrTooLarge
// if the allocation limit was hit, ErrCorrupt otherwise.
func wrapReadErr(mr *bytesMessageReader, err error) error {
	if mr.err != nil {
		return mr.err
	}
	if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrSchema) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

func recovered(r any) error {
	if err, ok := r.(error); ok {
		if errors.Is(err, ErrTooLarge) {
			return err
		}
		return fmt.Errorf("%w: recovered panic: %w", ErrCorrupt, err)
	}
	return fmt.Errorf("%w: recovered panic: %v", ErrCorrupt, r)
}

// bytesMessageReader is an ipc.MessageReader over a byte slice whose
// messages alias the slice instead of copying each body, as arrow-go's
// io.Reader-based reader does. It is also stricter than arrow-go's: it
// requires the continuation token of the IPC format since Arrow 0.15, an
// 8-byte aligned body, and the end-of-stream marker with nothing after it,
// so a stream truncated exactly at a message boundary (which arrow-go takes
// for a clean end) is an error. Its bounds checks also replace arrow-go's
// metadata and body size limits, which ipc.NewReader does not apply.
type bytesMessageReader struct {
	b          []byte
	compressed bool // accept compressed bodies
	pos        int
	eos        bool
	err        error // the first framing error, more precise than arrow-go's wrapping
	msg        *ipc.Message
	refs       atomic.Int64
}

const continuationToken = 0xFFFFFFFF

func (r *bytesMessageReader) fail(format string, args ...any) (*ipc.Message, error) {
	if r.err == nil {
		r.err = corruptf(format, args...)
	}
	return nil, r.err
}

func (r *bytesMessageReader) Message() (msg *ipc.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			msg = nil
			err = corruptf("invalid IPC message metadata at byte %d: %v", r.pos, p)
			if r.err == nil {
				r.err = err
			}
		}
	}()
	if r.msg != nil {
		r.msg.Release()
		r.msg = nil
	}
	if r.eos {
		return nil, io.EOF
	}
	rest := r.b[r.pos:]
	switch {
	case len(rest) == 0:
		return r.fail("stream truncated: no end-of-stream marker after %d bytes", r.pos)
	case len(rest) < 8:
		return r.fail("stream truncated: %d bytes at byte %d, a message prefix is 8", len(rest), r.pos)
	case binary.LittleEndian.Uint32(rest) != continuationToken:
		return r.fail("no IPC continuation token at byte %d (legacy pre-0.15 framing or damaged bytes)", r.pos)
	}
	metaLen := int64(int32(binary.LittleEndian.Uint32(rest[4:])))
	if metaLen == 0 {
		r.eos = true
		r.pos += 8
		if r.pos != len(r.b) {
			return r.fail("%d bytes after the end-of-stream marker at byte %d", len(r.b)-r.pos, r.pos-8)
		}
		return nil, io.EOF
	}
	if metaLen < 8 || metaLen > int64(len(rest)-8) {
		return r.fail("message metadata length %d at byte %d, %d bytes left", metaLen, r.pos, len(rest)-8)
	}
	start := r.pos + 8
	bodyStart := start + int(metaLen)
	if bodyStart%8 != 0 {
		return r.fail("message body at byte %d is not 8-byte aligned", bodyStart)
	}
	codec, err := checkMeta(r.b[start:bodyStart])
	if err != nil {
		return r.fail("message at byte %d: %v", r.pos, err)
	}
	if codec != codecNone && !r.compressed {
		return r.fail("message at byte %d: body compressed with %s; the Encoder never compresses, and decoding compressed input must be enabled with WithCompressedInput", r.pos, codecName(codec))
	}
	meta := memory.NewBufferBytes(r.b[start:bodyStart:bodyStart])
	probe := ipc.NewMessage(meta, memory.NewBufferBytes(nil))
	bodyLen := probe.BodyLen()
	probe.Release()
	if bodyLen < 0 || bodyLen > int64(len(r.b)-bodyStart) {
		return r.fail("message body length %d at byte %d, %d bytes left", bodyLen, bodyStart, len(r.b)-bodyStart)
	}
	end := bodyStart + int(bodyLen)
	r.msg = ipc.NewMessage(meta, memory.NewBufferBytes(r.b[bodyStart:end:end]))
	r.pos = end
	return r.msg, nil
}

func (r *bytesMessageReader) Retain() { r.refs.Add(1) }

func (r *bytesMessageReader) Release() {
	if r.refs.Add(-1) == 0 && r.msg != nil {
		r.msg.Release()
		r.msg = nil
	}
}

// limitAllocator panics with an error wrapping ErrTooLarge once more than
// its budget has been allocated; arrow-go's reader recovers the panic and
// returns it as an error. Freed bytes are not credited back: the budget is
// for one Decode call, and Free may run later on another goroutine.
type limitAllocator struct {
	mem  memory.Allocator
	left int64
}

func (a *limitAllocator) take(n int) {
	if n < 0 || int64(n) > a.left {
		panic(fmt.Errorf("%w: decoding needs an allocation of %d bytes, over the limit of the decoder (WithMaxDecodedBytes)", ErrTooLarge, n))
	}
	a.left -= int64(n)
}

func (a *limitAllocator) Allocate(n int) []byte {
	a.take(n)
	return a.mem.Allocate(n)
}

func (a *limitAllocator) Reallocate(n int, b []byte) []byte {
	if n > len(b) {
		a.take(n - len(b))
	}
	return a.mem.Reallocate(n, b)
}

func (a *limitAllocator) Free(b []byte) { a.mem.Free(b) }

// IsKafkaIPC reports whether b begins with an Arrow IPC stream whose schema
// is the Kafka record schema (as ValidateSchema checks it). Only the schema
// message is read, with the same checks as Decode; the record batches are
// not, so a true result does not mean Decode will succeed: a stream that
// declares the Kafka schema and is then damaged must fail loudly rather than
// be taken for an opaque value. Anything else (text, JSON, Arrow streams of
// other schemas, random bytes) gives false. It never panics.
//
// It is the auto-detection of the kafka_eos output: bytes that do not start
// with the IPC continuation token (0xFFFFFFFF) are rejected after four
// bytes, so plain payloads cost nothing.
func IsKafkaIPC(b []byte) (ok bool) {
	if len(b) < 8 || binary.LittleEndian.Uint32(b) != continuationToken {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	mr := &bytesMessageReader{b: b}
	mr.refs.Store(1)
	rdr, err := ipc.NewReaderFromMessageReader(mr, ipc.WithEnsureNativeEndian(false), ipc.WithAllocator(&limitAllocator{mem: memory.DefaultAllocator, left: 1 << 20}))
	if err != nil {
		return false
	}
	defer rdr.Release()
	return ValidateSchema(rdr.Schema()) == nil
}
