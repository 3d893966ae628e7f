package kafkaarrow

import (
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Batch is a read-only, validated view of one Arrow record batch in
// [Schema]: row i is one Kafka record. It reads the Arrow buffers directly,
// so its accessors neither copy nor allocate (except the first time a topic
// or header key string is seen in the batch, see below), and, because every
// offset was checked when the Batch was made, they never panic for a row
// index in [0, Len()).
//
// Lifetime: the []byte results alias the Arrow buffers (and, for a Batch
// from Decoder.Decode, the decoded input bytes). They are valid until
// Release and must not be modified. Their capacity equals their length, so
// an append copies instead of overwriting the next value. Strings (topics,
// header keys) are copies, interned per Batch: they stay valid after Release.
//
// A Batch is not safe for concurrent use (the interning table is not locked).
type Batch struct {
	rec arrow.RecordBatch
	n   int

	topicIdx  []int32  // row -> entry of topics (dictionary-encoded topic column)
	topics    []string // dictionary entries, copied
	topicText binCol   // plain utf8 topic column (when topics == nil)

	partition []int32
	offset    []int64
	timestamp []int64
	key       binCol
	value     binCol
	hdrOff    []int32 // row i has header elements [hdrOff[i], hdrOff[i+1])
	hdrKey    binCol  // indexed by header element
	hdrValue  binCol

	intern map[string]string
}

// maxInterned bounds the interning table of a Batch; strings beyond it are
// copied on every access.
const maxInterned = 1024

// empty is returned for an empty, non-null key or value, so that it stays
// distinguishable from a null one (nil) even when the column has no data
// bytes at all.
var empty = []byte{}

// binCol is a validated binary or utf8 column.
type binCol struct {
	valid []byte // validity bitmap, nil when no value is null
	vOff  int    // bit of row 0 in valid
	offs  []int32
	data  []byte
}

func (c *binCol) isNull(i int) bool {
	return c.valid != nil && !bitutil.BitIsSet(c.valid, c.vOff+i)
}

func (c *binCol) bytes(i int) []byte {
	lo, hi := c.offs[i], c.offs[i+1]
	if lo == hi {
		return empty
	}
	return c.data[lo:hi:hi]
}

func (c *binCol) get(i int) []byte {
	if c.isNull(i) {
		return nil
	}
	return c.bytes(i)
}

// NewBatch validates rec (its schema as ValidateSchema does, and its
// buffers) and returns a view of it. The Batch retains rec; the caller keeps
// its own reference and releases it as usual.
func NewBatch(rec arrow.RecordBatch) (b *Batch, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, recovered(r)
		}
	}()
	l, err := checkSchema(rec.Schema())
	if err != nil {
		return nil, err
	}
	return newBatch(rec, l)
}

func newBatch(rec arrow.RecordBatch, l layout) (*Batch, error) {
	rows := rec.NumRows()
	if rows < 0 || rows > int64(^uint32(0)>>1) {
		return nil, corruptf("record batch of %d rows", rows)
	}
	if rec.NumCols() != int64(len(rec.Schema().Fields())) {
		return nil, corruptf("record batch has %d columns for a schema of %d", rec.NumCols(), len(rec.Schema().Fields()))
	}
	b := &Batch{rec: rec, n: int(rows)}
	col := func(i int, name string) (arrow.ArrayData, error) {
		d := rec.Column(i).Data()
		if d.Len() != b.n {
			return nil, colErr(ErrCorrupt, name, "%d values in a batch of %d rows", d.Len(), b.n)
		}
		return d, nil
	}
	var err error
	d, err := col(l.topic, FieldTopic)
	if err != nil {
		return nil, err
	}
	if err := b.loadTopic(d); err != nil {
		return nil, err
	}
	if d, err = col(l.partition, FieldPartition); err != nil {
		return nil, err
	}
	if b.partition, err = int32Col(d, FieldPartition); err != nil {
		return nil, err
	}
	if d, err = col(l.offset, FieldOffset); err != nil {
		return nil, err
	}
	if b.offset, err = int64Col(d, FieldOffset); err != nil {
		return nil, err
	}
	if d, err = col(l.timestamp, FieldTimestamp); err != nil {
		return nil, err
	}
	if b.timestamp, err = int64Col(d, FieldTimestamp); err != nil {
		return nil, err
	}
	if d, err = col(l.key, FieldKey); err != nil {
		return nil, err
	}
	if b.key, err = binaryCol(d, FieldKey, true); err != nil {
		return nil, err
	}
	if d, err = col(l.value, FieldValue); err != nil {
		return nil, err
	}
	if b.value, err = binaryCol(d, FieldValue, true); err != nil {
		return nil, err
	}
	if d, err = col(l.headers, FieldHeaders); err != nil {
		return nil, err
	}
	if err := b.loadHeaders(d, l); err != nil {
		return nil, err
	}
	rec.Retain()
	return b, nil
}

// checkSpan checks the offset and length of d and returns them.
func checkSpan(d arrow.ArrayData, col string) (off, n int, err error) {
	off, n = d.Offset(), d.Len()
	if off < 0 || n < 0 || off > int(^uint32(0)>>1) || n > int(^uint32(0)>>1) {
		return 0, 0, colErr(ErrCorrupt, col, "array offset %d, length %d", off, n)
	}
	return off, n, nil
}

// validity checks the validity bitmap of d and returns it (nil when every
// value is valid) with the number of nulls, counted from the bitmap: the
// declared null count of untrusted data is not believed.
func validity(d arrow.ArrayData, col string, nullable bool) ([]byte, int, error) {
	off, n, err := checkSpan(d, col)
	if err != nil {
		return nil, 0, err
	}
	bufs := d.Buffers()
	if len(bufs) == 0 {
		return nil, 0, colErr(ErrCorrupt, col, "no buffers")
	}
	if bufs[0] == nil || n == 0 {
		return nil, 0, nil
	}
	need := int(bitutil.BytesForBits(int64(off + n)))
	bm := bufs[0].Bytes()
	if len(bm) < need {
		return nil, 0, colErr(ErrCorrupt, col, "validity bitmap of %d bytes for %d values at offset %d", len(bm), n, off)
	}
	nulls := n - bitutil.CountSetBits(bm, off, n)
	if nulls == 0 {
		return nil, 0, nil
	}
	if !nullable {
		return nil, 0, colErr(ErrCorrupt, col, "%d nulls in a non-nullable column", nulls)
	}
	return bm, nulls, nil
}

// fixedBuf checks the value buffer of a fixed-width column of width bytes
// and returns its bytes from the array offset on.
func fixedBuf(d arrow.ArrayData, col string, width int, nullable bool) ([]byte, error) {
	off, n, err := checkSpan(d, col)
	if err != nil {
		return nil, err
	}
	if _, _, err := validity(d, col, nullable); err != nil {
		return nil, err
	}
	bufs := d.Buffers()
	if len(bufs) < 2 {
		return nil, colErr(ErrCorrupt, col, "%d buffers, want 2", len(bufs))
	}
	if n == 0 {
		return nil, nil
	}
	if bufs[1] == nil {
		return nil, colErr(ErrCorrupt, col, "no value buffer")
	}
	v := bufs[1].Bytes()
	if len(v)/width < off+n {
		return nil, colErr(ErrCorrupt, col, "value buffer of %d bytes for %d values of %d bytes at offset %d", len(v), n, width, off)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(v)))%uintptr(width) != 0 {
		return nil, colErr(ErrCorrupt, col, "value buffer not aligned to %d bytes", width)
	}
	return v[off*width : (off+n)*width], nil
}

func int32Col(d arrow.ArrayData, col string) ([]int32, error) {
	v, err := fixedBuf(d, col, 4, false)
	if err != nil || v == nil {
		return nil, err
	}
	return arrow.Int32Traits.CastFromBytes(v), nil
}

func int64Col(d arrow.ArrayData, col string) ([]int64, error) {
	v, err := fixedBuf(d, col, 8, false)
	if err != nil || v == nil {
		return nil, err
	}
	return arrow.Int64Traits.CastFromBytes(v), nil
}

// offsetsCol checks the 32-bit offsets buffer (buffer 1) of a binary, utf8
// or list array: n+1 offsets from the array offset on, non-negative,
// non-decreasing and at most limit.
func offsetsCol(d arrow.ArrayData, col string, limit int) ([]int32, error) {
	off, n, err := checkSpan(d, col)
	if err != nil {
		return nil, err
	}
	bufs := d.Buffers()
	if len(bufs) < 2 {
		return nil, colErr(ErrCorrupt, col, "%d buffers, want at least 2", len(bufs))
	}
	if n == 0 {
		return []int32{0}, nil
	}
	if bufs[1] == nil {
		return nil, colErr(ErrCorrupt, col, "no offsets buffer")
	}
	raw := bufs[1].Bytes()
	if len(raw)/4 < off+n+1 {
		return nil, colErr(ErrCorrupt, col, "offsets buffer of %d bytes for %d values at offset %d", len(raw), n, off)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%4 != 0 {
		return nil, colErr(ErrCorrupt, col, "offsets buffer not aligned to 4 bytes")
	}
	offs := arrow.Int32Traits.CastFromBytes(raw[:(off+n+1)*4])[off:]
	prev := offs[0]
	if prev < 0 {
		return nil, colErr(ErrCorrupt, col, "negative first offset %d", prev)
	}
	for i, o := range offs[1:] {
		if o < prev {
			return nil, colErr(ErrCorrupt, col, "offsets decrease at value %d (%d < %d)", i, o, prev)
		}
		prev = o
	}
	if int64(prev) > int64(limit) {
		return nil, colErr(ErrCorrupt, col, "offset %d beyond the %d bytes or items it indexes", prev, limit)
	}
	return offs, nil
}

func binaryCol(d arrow.ArrayData, col string, nullable bool) (binCol, error) {
	var c binCol
	valid, _, err := validity(d, col, nullable)
	if err != nil {
		return c, err
	}
	bufs := d.Buffers()
	if len(bufs) < 3 {
		return c, colErr(ErrCorrupt, col, "%d buffers, want 3", len(bufs))
	}
	if bufs[2] != nil {
		c.data = bufs[2].Bytes()
	}
	if c.offs, err = offsetsCol(d, col, len(c.data)); err != nil {
		return c, err
	}
	c.valid, c.vOff = valid, d.Offset()
	return c, nil
}

func (b *Batch) loadTopic(d arrow.ArrayData) error {
	dt, ok := d.DataType().(*arrow.DictionaryType)
	if !ok {
		c, err := binaryCol(d, FieldTopic, false)
		b.topicText = c
		return err
	}
	const name = FieldTopic + " (dictionary)"
	fw, ok := dt.IndexType.(arrow.FixedWidthDataType)
	if !ok {
		return colErr(ErrSchema, FieldTopic, "index type %v", dt.IndexType)
	}
	width := fw.BitWidth() / 8
	raw, err := fixedBuf(d, FieldTopic, width, false)
	if err != nil {
		return err
	}
	dict := d.Dictionary()
	if dict == nil {
		return colErr(ErrCorrupt, name, "no dictionary")
	}
	dc, err := binaryCol(dict, name, true)
	if err != nil {
		return err
	}
	b.topics = make([]string, dict.Len())
	for i := range b.topics {
		if !dc.isNull(i) {
			b.topics[i] = string(dc.bytes(i))
		}
	}
	if dt.IndexType.ID() == arrow.INT32 {
		b.topicIdx = arrow.Int32Traits.CastFromBytes(raw)
	} else {
		// Other index widths (e.g. uint32 from Polars) are converted once
		// per batch, so that the accessor stays a plain slice read.
		b.topicIdx = make([]int32, b.n)
		signed := arrow.IsSignedInteger(dt.IndexType.ID())
		for i := range b.topicIdx {
			var v int64
			switch width {
			case 1:
				v = int64(raw[i])
				if signed {
					v = int64(int8(raw[i]))
				}
			case 2:
				u := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
				v = int64(u)
				if signed {
					v = int64(int16(u))
				}
			case 4:
				u := arrow.Uint32Traits.CastFromBytes(raw)[i]
				v = int64(u)
				if signed {
					v = int64(int32(u))
				}
			case 8:
				v = arrow.Int64Traits.CastFromBytes(raw)[i]
				if !signed && v < 0 {
					v = -1 // beyond any dictionary
				}
			default:
				return colErr(ErrSchema, FieldTopic, "index type %v", dt.IndexType)
			}
			if v < 0 || v >= int64(len(b.topics)) {
				v = -1
			}
			b.topicIdx[i] = int32(v)
		}
	}
	for i, v := range b.topicIdx {
		if v < 0 || int(v) >= len(b.topics) {
			return colErr(ErrCorrupt, name, "row %d: index %d outside a dictionary of %d topics", i, v, len(b.topics))
		}
		if dc.isNull(int(v)) {
			return colErr(ErrCorrupt, name, "row %d: null topic", i)
		}
	}
	return nil
}

func (b *Batch) loadHeaders(d arrow.ArrayData, l layout) error {
	const (
		name  = FieldHeaders
		sname = FieldHeaders + ".item"
		kname = FieldHeaders + "." + FieldHeaderKey
		vname = FieldHeaders + "." + FieldHeaderValue
	)
	if _, _, err := validity(d, name, false); err != nil {
		return err
	}
	ch := d.Children()
	if len(ch) != 1 {
		return colErr(ErrCorrupt, name, "%d child arrays, want 1", len(ch))
	}
	s := ch[0]
	sOff, sLen, err := checkSpan(s, sname)
	if err != nil {
		return err
	}
	if b.hdrOff, err = offsetsCol(d, name, sLen); err != nil {
		return err
	}
	if _, _, err := validity(s, sname, false); err != nil {
		return err
	}
	sch := s.Children()
	if len(sch) != 2 {
		return colErr(ErrCorrupt, sname, "%d child arrays, want 2", len(sch))
	}
	// Element e of the struct is element sOff+e of its children.
	kd, vd := sch[l.hdrKey], sch[l.hdrValue]
	if kd.Len() < sOff+sLen || vd.Len() < sOff+sLen {
		return colErr(ErrCorrupt, sname, "children of %d and %d values for %d headers at offset %d", kd.Len(), vd.Len(), sLen, sOff)
	}
	if b.hdrKey, err = binaryCol(kd, kname, false); err != nil {
		return err
	}
	if b.hdrValue, err = binaryCol(vd, vname, true); err != nil {
		return err
	}
	b.hdrKey.offs, b.hdrKey.vOff = b.hdrKey.offs[sOff:], b.hdrKey.vOff+sOff
	b.hdrValue.offs, b.hdrValue.vOff = b.hdrValue.offs[sOff:], b.hdrValue.vOff+sOff
	return nil
}

// str returns a Go-owned copy of p, interned per Batch.
func (b *Batch) str(p []byte) string {
	if s, ok := b.intern[string(p)]; ok { // no allocation for the lookup
		return s
	}
	s := string(p)
	if b.intern == nil {
		b.intern = make(map[string]string)
	}
	if len(b.intern) < maxInterned {
		b.intern[s] = s
	}
	return s
}

// Record returns the underlying Arrow record batch (not retained).
func (b *Batch) Record() arrow.RecordBatch { return b.rec }

// Release releases the underlying record batch. Slices obtained from the
// Batch must not be used afterwards.
func (b *Batch) Release() {
	if b.rec != nil {
		b.rec.Release()
		b.rec = nil
	}
}

// Len returns the number of rows (records).
func (b *Batch) Len() int { return b.n }

// Topic returns the topic of row i.
func (b *Batch) Topic(i int) string {
	if b.topics != nil {
		return b.topics[b.topicIdx[i]]
	}
	return b.str(b.topicText.bytes(i))
}

// Partition returns the partition of row i.
func (b *Batch) Partition(i int) int32 { return b.partition[i] }

// Offset returns the offset of row i.
func (b *Batch) Offset(i int) int64 { return b.offset[i] }

// TimestampMillis returns the timestamp of row i in milliseconds since the
// Unix epoch.
func (b *Batch) TimestampMillis(i int) int64 { return b.timestamp[i] }

// Timestamp returns the timestamp of row i, as time.UnixMilli (the same
// representation kgo gives fetched records).
func (b *Batch) Timestamp(i int) time.Time { return time.UnixMilli(b.timestamp[i]) }

// Key returns the key of row i: nil for a null key, a non-nil empty slice
// for an empty key. It aliases the batch (see Batch).
func (b *Batch) Key(i int) []byte { return b.key.get(i) }

// Value returns the value of row i: nil for a tombstone, a non-nil empty
// slice for an empty value. It aliases the batch (see Batch).
func (b *Batch) Value(i int) []byte { return b.value.get(i) }

// IsTombstone reports whether row i has a null value.
func (b *Batch) IsTombstone(i int) bool { return b.value.isNull(i) }

// NumHeaders returns the number of headers of row i.
func (b *Batch) NumHeaders(i int) int { return int(b.hdrOff[i+1] - b.hdrOff[i]) }

// Header returns header j of row i (0 <= j < NumHeaders(i); otherwise it
// panics, like a slice index), in the order of the record. The value is nil
// for a null header value and aliases the batch (see Batch).
func (b *Batch) Header(i, j int) (key string, value []byte) {
	e := int(b.hdrOff[i]) + j
	if j < 0 || e >= int(b.hdrOff[i+1]) {
		panic("kafkaarrow: header index out of range")
	}
	return b.str(b.hdrKey.bytes(e)), b.hdrValue.get(e)
}

// AppendHeaders appends the headers of row i to dst, in order, duplicates
// kept. Values alias the batch (see Batch).
func (b *Batch) AppendHeaders(dst []kgo.RecordHeader, i int) []kgo.RecordHeader {
	for e := int(b.hdrOff[i]); e < int(b.hdrOff[i+1]); e++ {
		dst = append(dst, kgo.RecordHeader{Key: b.str(b.hdrKey.bytes(e)), Value: b.hdrValue.get(e)})
	}
	return dst
}

// ProduceOptions selects what [Batch.ProduceRecord] copies from a row into
// a record to produce. Key, value and headers are always set; the zero value
// produces to the row's topic and leaves partition and timestamp to kgo.
type ProduceOptions struct {
	// Topic, if not empty, replaces the row's topic (a mirror usually
	// writes to a topic of its own).
	Topic string

	// Partition copies the row's partition into Record.Partition. kgo only
	// honours it with kgo.RecordPartitioner(kgo.ManualPartitioner()) (or a
	// partitioner that reads it); with the default partitioner the client
	// chooses by key, which is what a target topic with a different
	// partition count needs.
	Partition bool

	// Timestamp copies the row's timestamp into Record.Timestamp. Without
	// it the timestamp is zero and kgo stamps the produce time.
	Timestamp bool
}

// ProduceRecord fills r (which must not be in flight in kgo) with row i for
// producing, overwriting Topic, Key,
// Value and Headers (reusing the capacity of r.Headers), and Partition and
// Timestamp as o asks. Key, Value and header values alias the batch, so the
// batch must stay unreleased until kgo has called the record's promise.
// Offset and the other fields are left alone.
func (b *Batch) ProduceRecord(i int, r *kgo.Record, o ProduceOptions) {
	if o.Topic != "" {
		r.Topic = o.Topic
	} else {
		r.Topic = b.Topic(i)
	}
	r.Key = b.key.get(i)
	r.Value = b.value.get(i)
	r.Headers = b.AppendHeaders(r.Headers[:0], i)
	if len(r.Headers) == 0 {
		r.Headers = nil
	}
	if o.Partition {
		r.Partition = b.partition[i]
	}
	if o.Timestamp {
		r.Timestamp = time.UnixMilli(b.timestamp[i])
	}
}

// ProduceRecords appends one record per row, filled by ProduceRecord, to dst
// and returns it. The records and their headers are carved out of two slabs
// allocated once per batch, so the cost is three allocations per batch
// whatever the number of rows, and no value is copied. The batch must stay
// unreleased until every record's promise has run.
func (b *Batch) ProduceRecords(dst []*kgo.Record, o ProduceOptions) []*kgo.Record {
	if b.n == 0 {
		return dst
	}
	recs := make([]kgo.Record, b.n)
	var hdrs []kgo.RecordHeader
	if nh := int(b.hdrOff[b.n] - b.hdrOff[0]); nh > 0 {
		hdrs = make([]kgo.RecordHeader, 0, nh)
	}
	if cap(dst)-len(dst) < b.n {
		grown := make([]*kgo.Record, len(dst), len(dst)+b.n)
		copy(grown, dst)
		dst = grown
	}
	for i := range recs {
		r := &recs[i]
		nh := b.NumHeaders(i)
		r.Headers = hdrs[len(hdrs) : len(hdrs) : len(hdrs)+nh]
		b.ProduceRecord(i, r, o)
		hdrs = hdrs[:len(hdrs)+nh]
		dst = append(dst, r)
	}
	return dst
}

// Records returns the rows as records that own their memory (one slab for
// all bytes, copied), valid after Release: Topic, Partition, Offset,
// Timestamp, Key, Value and Headers set as they were encoded, null and
// empty kept apart. Use the view accessors or ProduceRecords on hot paths.
func (b *Batch) Records() []*kgo.Record {
	if b.n == 0 {
		return nil
	}
	var total int
	for i := 0; i < b.n; i++ {
		total += len(b.key.get(i)) + len(b.value.get(i))
		for e := int(b.hdrOff[i]); e < int(b.hdrOff[i+1]); e++ {
			total += len(b.hdrValue.get(e))
		}
	}
	slab := make([]byte, 0, total)
	cp := func(p []byte) []byte {
		if p == nil {
			return nil
		}
		if len(p) == 0 {
			return []byte{}
		}
		start := len(slab)
		slab = append(slab, p...)
		return slab[start:len(slab):len(slab)]
	}
	recs := make([]kgo.Record, b.n)
	out := make([]*kgo.Record, b.n)
	for i := range recs {
		r := &recs[i]
		r.Topic = b.Topic(i)
		r.Partition = b.partition[i]
		r.Offset = b.offset[i]
		r.Timestamp = time.UnixMilli(b.timestamp[i])
		r.Key = cp(b.key.get(i))
		r.Value = cp(b.value.get(i))
		if nh := b.NumHeaders(i); nh > 0 {
			r.Headers = make([]kgo.RecordHeader, 0, nh)
			for e := int(b.hdrOff[i]); e < int(b.hdrOff[i+1]); e++ {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: b.str(b.hdrKey.bytes(e)), Value: cp(b.hdrValue.get(e))})
			}
		}
		out[i] = r
	}
	return out
}

// DecodeRecords decodes an IPC stream into records that own their memory
// (see Batch.Records), all batches concatenated. A convenience for tests and
// cold paths.
func (d *Decoder) DecodeRecords(p []byte) ([]*kgo.Record, error) {
	batches, err := d.Decode(p)
	if err != nil {
		return nil, err
	}
	defer ReleaseAll(batches)
	var out []*kgo.Record
	for _, b := range batches {
		out = append(out, b.Records()...)
	}
	return out, nil
}
