package kafkaarrow

import (
	"encoding/binary"
	"fmt"
)

// Limits of checkMeta. The Kafka schema has 10 fields, nested 3 deep; a
// schema beyond these limits cannot be one this package decodes anyway.
const (
	maxMetaFields = 64
	maxMetaDepth  = 8
)

// checkMeta walks the flatbuffer metadata of one IPC message the way
// arrow-go's reader will, before arrow-go sees it, and rejects metadata that
// would make arrow-go allocate far more than the message's size. arrow-go
// recovers panics while reading, but not these, which are fatal:
//
//   - it calls make() with vector lengths read from the metadata (schema
//     fields, field children, custom metadata), so one flipped byte can ask
//     for hundreds of gigabytes: "fatal error: runtime: out of memory";
//   - flatbuffer offsets are added as uint32 and wrap around, so a field's
//     children can point back at the field: unbounded recursion, a fatal
//     stack overflow; shared children also give exponential work;
//   - strings are copied per reference, so many metadata entries pointing at
//     one long string allocate (entries x length) bytes.
//
// So every vector must lie inside the buffer, at most maxMetaFields fields
// nested at most maxMetaDepth deep are visited, and the strings read add up
// to at most the buffer's size. Offsets are computed with the same uint32
// arithmetic as github.com/google/flatbuffers/go. Field numbers follow
// Message.fbs and Schema.fbs of the Arrow format.
//
// It returns the compression codec of a record or dictionary batch body
// (codecNone when uncompressed).
func checkMeta(meta []byte) (codec int, err error) {
	c := &fbCheck{b: meta, codec: codecNone}
	err = c.message()
	return c.codec, err
}

// Body compression codecs of the Arrow format (CompressionType), and
// codecNone for an uncompressed body.
const (
	codecNone = -1
	codecLZ4  = 0
	codecZSTD = 1
)

func codecName(c int) string {
	switch c {
	case codecLZ4:
		return "LZ4_FRAME"
	case codecZSTD:
		return "ZSTD"
	}
	return fmt.Sprintf("codec %d", c)
}

func (c *fbCheck) message() error {
	root, err := c.u32(0)
	if err != nil {
		return err
	}
	// Message: 0 version, 1 header_type, 2 header, 3 bodyLength, 4 custom_metadata.
	if err := c.keyValues(root, 4); err != nil {
		return err
	}
	htype, err := c.byteField(root, 1)
	if err != nil {
		return err
	}
	header, ok, err := c.ref(root, 2)
	if err != nil || !ok {
		return err
	}
	switch htype {
	case 1: // Schema
		return c.schema(header)
	case 2: // DictionaryBatch: 0 id, 1 data, 2 isDelta
		data, ok, err := c.ref(header, 1)
		if err != nil || !ok {
			return err
		}
		return c.recordBatch(data)
	case 3: // RecordBatch
		return c.recordBatch(header)
	}
	return nil // Tensor and others: arrow-go's stream reader rejects them
}

type fbCheck struct {
	b        []byte
	fields   int
	strBytes uint64
	codec    int
}

func (c *fbCheck) errf(format string, args ...any) error {
	return fmt.Errorf("flatbuffer metadata: "+format, args...)
}

func (c *fbCheck) u32(pos uint32) (uint32, error) {
	if uint64(pos)+4 > uint64(len(c.b)) {
		return 0, c.errf("offset %d beyond %d bytes", pos, len(c.b))
	}
	return binary.LittleEndian.Uint32(c.b[pos:]), nil
}

func (c *fbCheck) u16(pos uint32) (uint16, error) {
	if uint64(pos)+2 > uint64(len(c.b)) {
		return 0, c.errf("offset %d beyond %d bytes", pos, len(c.b))
	}
	return binary.LittleEndian.Uint16(c.b[pos:]), nil
}

// field returns the position of field k of the table at tab, as
// flatbuffers' Table.Offset + Pos does.
func (c *fbCheck) field(tab uint32, k int) (uint32, bool, error) {
	so, err := c.u32(tab)
	if err != nil {
		return 0, false, err
	}
	vtable := uint32(int32(tab) - int32(so))
	vsize, err := c.u16(vtable)
	if err != nil {
		return 0, false, err
	}
	vo := uint16(4 + 2*k)
	if vo >= vsize {
		return 0, false, nil
	}
	fo, err := c.u16(vtable + uint32(vo))
	if err != nil || fo == 0 {
		return 0, false, err
	}
	return tab + uint32(fo), true, nil
}

func (c *fbCheck) byteField(tab uint32, k int) (byte, error) {
	pos, ok, err := c.field(tab, k)
	if err != nil || !ok {
		return 0, err
	}
	if uint64(pos) >= uint64(len(c.b)) {
		return 0, c.errf("offset %d beyond %d bytes", pos, len(c.b))
	}
	return c.b[pos], nil
}

// ref follows the offset in field k (a table, union, vector or string).
func (c *fbCheck) ref(tab uint32, k int) (uint32, bool, error) {
	pos, ok, err := c.field(tab, k)
	if err != nil || !ok {
		return 0, false, err
	}
	off, err := c.u32(pos)
	return pos + off, err == nil, err
}

// vector returns the start and length of the vector in field k, checked to
// lie inside the buffer with elem bytes per element.
func (c *fbCheck) vector(tab uint32, k int, elem uint64) (uint32, int, error) {
	at, ok, err := c.ref(tab, k)
	if err != nil || !ok {
		return 0, 0, err
	}
	n, err := c.u32(at)
	if err != nil {
		return 0, 0, err
	}
	start := at + 4
	if uint64(start)+uint64(n)*elem > uint64(len(c.b)) {
		return 0, 0, c.errf("vector of %d elements at offset %d beyond %d bytes", n, at, len(c.b))
	}
	return start, int(n), nil
}

// table returns element j of a vector of tables.
func (c *fbCheck) table(start uint32, j int) (uint32, error) {
	p := start + 4*uint32(j)
	off, err := c.u32(p)
	return p + off, err
}

func (c *fbCheck) str(tab uint32, k int) error {
	_, n, err := c.vector(tab, k, 1)
	if err != nil {
		return err
	}
	c.strBytes += uint64(n)
	if c.strBytes > uint64(len(c.b)) {
		return c.errf("strings referenced more than once (%d bytes read from %d)", c.strBytes, len(c.b))
	}
	return nil
}

// keyValues checks a [KeyValue] custom_metadata vector (0 key, 1 value).
func (c *fbCheck) keyValues(tab uint32, k int) error {
	start, n, err := c.vector(tab, k, 4)
	if err != nil {
		return err
	}
	for j := range n {
		kv, err := c.table(start, j)
		if err != nil {
			return err
		}
		if err := c.str(kv, 0); err != nil {
			return err
		}
		if err := c.str(kv, 1); err != nil {
			return err
		}
	}
	return nil
}

// schema: 0 endianness, 1 fields, 2 custom_metadata, 3 features.
func (c *fbCheck) schema(tab uint32) error {
	if err := c.keyValues(tab, 2); err != nil {
		return err
	}
	if _, _, err := c.vector(tab, 3, 8); err != nil {
		return err
	}
	return c.fieldVector(tab, 1, 0)
}

func (c *fbCheck) fieldVector(tab uint32, k, depth int) error {
	start, n, err := c.vector(tab, k, 4)
	if err != nil {
		return err
	}
	if depth >= maxMetaDepth {
		if n > 0 {
			return c.errf("fields nested more than %d deep", maxMetaDepth)
		}
		return nil
	}
	for j := range n {
		if c.fields++; c.fields > maxMetaFields {
			return c.errf("more than %d fields", maxMetaFields)
		}
		f, err := c.table(start, j)
		if err != nil {
			return err
		}
		if err := c.fieldTable(f, depth); err != nil {
			return err
		}
	}
	return nil
}

// fieldTable: 0 name, 1 nullable, 2 type_type, 3 type, 4 dictionary,
// 5 children, 6 custom_metadata.
func (c *fbCheck) fieldTable(tab uint32, depth int) error {
	if err := c.str(tab, 0); err != nil {
		return err
	}
	if err := c.keyValues(tab, 6); err != nil {
		return err
	}
	tt, err := c.byteField(tab, 2)
	if err != nil {
		return err
	}
	if tt == 14 { // Union: 0 mode, 1 typeIds
		u, ok, err := c.ref(tab, 3)
		if err != nil {
			return err
		}
		if ok {
			if _, _, err := c.vector(u, 1, 4); err != nil {
				return err
			}
		}
	}
	return c.fieldVector(tab, 5, depth+1)
}

// recordBatch: 0 length, 1 nodes (16-byte structs), 2 buffers (16-byte
// structs), 3 compression (BodyCompression: 0 codec, 1 method),
// 4 variadicBufferCounts.
func (c *fbCheck) recordBatch(tab uint32) error {
	comp, ok, err := c.ref(tab, 3)
	if err != nil {
		return err
	}
	if ok {
		codec, err := c.byteField(comp, 0)
		if err != nil {
			return err
		}
		c.codec = int(codec)
	}
	for _, v := range []struct {
		k    int
		elem uint64
	}{{1, 16}, {2, 16}, {4, 8}} {
		if _, _, err := c.vector(tab, v.k, v.elem); err != nil {
			return err
		}
	}
	return nil
}
