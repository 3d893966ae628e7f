package output

import (
	"regexp"
	"strconv"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// field is one interpolated field of the output (topic, key, partition) with
// the two shapes that need no Bloblang per message: a static string, and an
// expression that only reads one metadata key (${! meta("kafka_key") },
// ${! @kafka_partition }, ${! metadata("k") }), which a copy from kafka_native
// writes for every record. Anything else, and a metadata value of another
// type or a missing key, goes through Benthos' interpolation, so the result
// is always the one Benthos gives.
type field struct {
	is *service.InterpolatedString
	// static is the value of a static field (isStatic).
	static   string
	isStatic bool
	// metaKey is the one metadata key the expression reads ("" if not
	// that shape); legacy: it reads it with meta(), which gives null (the
	// string "null") for an empty value.
	metaKey string
	legacy  bool
}

// metaOnly matches an interpolation that is exactly one metadata read.
var metaOnly = regexp.MustCompile(`^\$\{!\s*(?:(meta|metadata)\("([^"\\]+)"\)|@([A-Za-z0-9_]+))\s*\}$`)

// newField analyses the raw expression expr of is.
func newField(is *service.InterpolatedString, expr string) *field {
	f := &field{is: is}
	if s, ok := is.Static(); ok {
		f.static, f.isStatic = s, true
		return f
	}
	if m := metaOnly.FindStringSubmatch(expr); m != nil {
		f.metaKey, f.legacy = m[2]+m[3], m[1] == "meta"
	}
	return f
}

// current returns f when it is still the field of is (the config's
// InterpolatedString may be replaced after parsing, as tests do), else a
// field of is without a metadata fast path (its expression is not known).
func current(f *field, is *service.InterpolatedString) *field {
	if is == nil {
		return nil
	}
	if f == nil || f.is != is {
		return newField(is, "")
	}
	return f
}

// fieldExec evaluates one field over one batch, building Benthos' executor
// only when a message needs it.
type fieldExec struct {
	f     *field
	batch service.MessageBatch
	x     *service.MessageBatchInterpolationExecutor
}

func (f *field) over(batch service.MessageBatch) fieldExec {
	return fieldExec{f: f, batch: batch}
}

func (e *fieldExec) exec() *service.MessageBatchInterpolationExecutor {
	if e.x == nil {
		e.x = e.batch.InterpolationExecutor(e.f.is)
	}
	return e.x
}

// meta returns message i's value of the field's metadata key when it has a
// type whose string form is plain (a string, bytes, an integer).
func (e *fieldExec) meta(i int) (any, bool) {
	if e.f.metaKey == "" {
		return nil, false
	}
	v, ok := e.batch[i].MetaGetImmut(e.f.metaKey) // read only: no copy
	if !ok {
		return nil, false
	}
	// v itself is returned, not the typed value of the switch, which
	// would be boxed again.
	switch t := v.(type) {
	case string:
		if t == "" && e.f.legacy {
			return nil, false // meta() gives null for it
		}
		return v, true
	case []byte:
		if len(t) == 0 && e.f.legacy {
			return nil, false
		}
		return v, true
	case int64, int, int32:
		return v, true
	}
	return nil, false
}

// str is the field of message i as a string.
func (e *fieldExec) str(i int) (string, error) {
	if e.f.isStatic {
		return e.f.static, nil
	}
	if v, ok := e.meta(i); ok {
		switch v := v.(type) {
		case string:
			return v, nil
		case []byte:
			return string(v), nil
		case int64:
			return strconv.FormatInt(v, 10), nil
		case int:
			return strconv.Itoa(v), nil
		case int32:
			return strconv.FormatInt(int64(v), 10), nil
		}
	}
	return e.exec().TryString(i)
}

// bytes is the field of message i as bytes (a record key).
func (e *fieldExec) bytes(i int) ([]byte, error) {
	if e.f.isStatic {
		return []byte(e.f.static), nil
	}
	if v, ok := e.meta(i); ok {
		switch v := v.(type) {
		case string:
			return []byte(v), nil
		case []byte:
			return append([]byte(nil), v...), nil
		}
		s, err := e.str(i)
		return []byte(s), err
	}
	return e.exec().TryBytes(i)
}

// int is the field of message i as a base-10 integer (a partition), parsed
// from its string form, as strconv.ParseInt(s, 10, 32) does, or taken from an
// integer metadata value in range.
func (e *fieldExec) int32(i int) (int32, error) {
	if v, ok := e.meta(i); ok {
		var n int64
		switch v := v.(type) {
		case int64:
			n = v
		case int:
			n = int64(v)
		case int32:
			n = int64(v)
		default:
			s, _ := e.str(i)
			return parseInt32(s)
		}
		if n >= -1<<31 && n < 1<<31 {
			return int32(n), nil
		}
		return parseInt32(strconv.FormatInt(n, 10)) // the same range error
	}
	s, err := e.str(i)
	if err != nil {
		return 0, err
	}
	return parseInt32(s)
}

func parseInt32(s string) (int32, error) {
	p, err := strconv.ParseInt(s, 10, 32)
	return int32(p), err
}
