package kafkaarrow

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/endian"
)

// Column names of [Schema], in column order.
const (
	FieldTopic     = "topic"
	FieldPartition = "partition"
	FieldOffset    = "offset"
	FieldTimestamp = "timestamp"
	FieldKey       = "key"
	FieldValue     = "value"
	FieldHeaders   = "headers"

	// FieldHeaderKey and FieldHeaderValue name the two fields of the
	// struct inside the headers list.
	FieldHeaderKey   = "key"
	FieldHeaderValue = "value"
)

// MetadataKeyFormatVersion is the schema metadata key holding the format
// version (FormatVersion). A decoder rejects any other version with
// ErrSchema, so a future incompatible change of the columns is detected
// instead of misread. A schema without the key (e.g. one written by pyarrow
// from scratch) is accepted if its columns match.
const MetadataKeyFormatVersion = "connect-eos.kafka.format_version"

// FormatVersion is the version of the column layout written by this package.
const FormatVersion = "1"

var (
	topicType  = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	headerType = arrow.StructOf(
		arrow.Field{Name: FieldHeaderKey, Type: arrow.BinaryTypes.String},
		arrow.Field{Name: FieldHeaderValue, Type: arrow.BinaryTypes.Binary, Nullable: true},
	)
	headersType   = arrow.ListOfNonNullable(headerType)
	timestampType = &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}
)

// Schema is the Arrow schema of a batch of Kafka records, one row per record:
//
//	topic      dictionary<int32, utf8>  not null  (one entry per distinct topic)
//	partition  int32                    not null
//	offset     int64                    not null
//	timestamp  timestamp[ms, UTC]       not null  (Record.Timestamp, milliseconds)
//	key        binary                   nullable  (null key != empty key)
//	value      binary                   nullable  (null = tombstone, != empty value)
//	headers    list<item: struct<key: utf8 not null, value: binary nullable>> not null
//	           (order and duplicate keys kept; an empty list when there are none)
//
// The schema metadata carries MetadataKeyFormatVersion = FormatVersion.
//
// The topic is dictionary-encoded because a fetch holds one partition, so
// the column costs four bytes per row instead of the topic name. Header keys
// are written byte for byte: Kafka does not guarantee UTF-8 (only the Java
// client does), and the decoder does not check it, so records round-trip
// exactly; a strict reader in another language may reject such keys.
//
// Decoding is more lenient than this: the topic may also be plain utf8 or a
// dictionary with any integer index type, the timestamp any time zone, the
// columns any order, and nullability flags are not compared (the data is
// checked for nulls instead). Extra or missing columns are rejected, because
// an extra column would be dropped silently when the rows are produced.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: FieldTopic, Type: topicType},
	{Name: FieldPartition, Type: arrow.PrimitiveTypes.Int32},
	{Name: FieldOffset, Type: arrow.PrimitiveTypes.Int64},
	{Name: FieldTimestamp, Type: timestampType},
	{Name: FieldKey, Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: FieldValue, Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: FieldHeaders, Type: headersType},
}, func() *arrow.Metadata {
	md := arrow.NewMetadata([]string{MetadataKeyFormatVersion}, []string{FormatVersion})
	return &md
}())

// layout maps the columns of a validated schema.
type layout struct {
	topic, partition, offset, timestamp, key, value, headers int
	// In the struct of the headers list.
	hdrKey, hdrValue int
}

// ValidateSchema reports whether s can be decoded by this package, with an
// error wrapping ErrSchema that names the first offending column.
func ValidateSchema(s *arrow.Schema) error {
	_, err := checkSchema(s)
	return err
}

func checkSchema(s *arrow.Schema) (layout, error) {
	var l layout
	if s == nil {
		return l, colErr(ErrSchema, "", "no schema")
	}
	if v, ok := s.Metadata().GetValue(MetadataKeyFormatVersion); ok && v != FormatVersion {
		return l, colErr(ErrSchema, "", "format version %q, this decoder reads version %q", v, FormatVersion)
	}
	if s.Endianness() != endian.NativeEndian {
		// arrow-go would byte-swap the buffers in place, i.e. write into
		// the caller's input bytes, which the decoder aliases.
		return l, colErr(ErrSchema, "", "non-native endianness %v", s.Endianness())
	}
	want := []struct {
		name string
		idx  *int
		ok   func(arrow.DataType) bool
		desc string
	}{
		{FieldTopic, &l.topic, isTopicType, "utf8 or dictionary<integer, utf8>"},
		{FieldPartition, &l.partition, isID(arrow.INT32), "int32"},
		{FieldOffset, &l.offset, isID(arrow.INT64), "int64"},
		{FieldTimestamp, &l.timestamp, func(t arrow.DataType) bool {
			ts, ok := t.(*arrow.TimestampType)
			return ok && ts.Unit == arrow.Millisecond
		}, "timestamp[ms]"},
		{FieldKey, &l.key, isID(arrow.BINARY), "binary"},
		{FieldValue, &l.value, isID(arrow.BINARY), "binary"},
		{FieldHeaders, &l.headers, func(t arrow.DataType) bool { return isHeadersType(t, &l) }, "list<struct<key: utf8, value: binary>>"},
	}
	for _, w := range want {
		idx := s.FieldIndices(w.name)
		switch {
		case len(idx) == 0:
			return l, colErr(ErrSchema, w.name, "missing")
		case len(idx) > 1:
			return l, colErr(ErrSchema, w.name, "appears %d times", len(idx))
		}
		f := s.Field(idx[0])
		if !w.ok(f.Type) {
			return l, colErr(ErrSchema, w.name, "type %v, want %s", f.Type, w.desc)
		}
		*w.idx = idx[0]
	}
	if s.NumFields() != len(want) {
		for _, f := range s.Fields() {
			switch f.Name {
			case FieldTopic, FieldPartition, FieldOffset, FieldTimestamp, FieldKey, FieldValue, FieldHeaders:
			default:
				return l, colErr(ErrSchema, f.Name, "unexpected column (it would be dropped when producing)")
			}
		}
	}
	return l, nil
}

func isID(id arrow.Type) func(arrow.DataType) bool {
	return func(t arrow.DataType) bool { return t.ID() == id }
}

func isTopicType(t arrow.DataType) bool {
	switch t := t.(type) {
	case *arrow.StringType:
		return true
	case *arrow.DictionaryType:
		return arrow.IsInteger(t.IndexType.ID()) && t.ValueType.ID() == arrow.STRING
	}
	return false
}

func isHeadersType(t arrow.DataType, l *layout) bool {
	lt, ok := t.(*arrow.ListType)
	if !ok {
		return false
	}
	st, ok := lt.Elem().(*arrow.StructType)
	if !ok || st.NumFields() != 2 {
		return false
	}
	k, okK := st.FieldIdx(FieldHeaderKey)
	v, okV := st.FieldIdx(FieldHeaderValue)
	if !okK || !okV || st.Field(k).Type.ID() != arrow.STRING || st.Field(v).Type.ID() != arrow.BINARY {
		return false
	}
	l.hdrKey, l.hdrValue = k, v
	return true
}
