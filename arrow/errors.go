package kafkaarrow

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by the decoder wraps exactly one of
// ErrSchema, ErrCorrupt or ErrTooLarge, so callers can tell a producer that
// sent the wrong columns (a configuration error) from damaged bytes (a data
// error) with errors.Is, without matching strings.
var (
	// ErrSchema is returned when an Arrow schema is not the Kafka record
	// schema of this package: a missing or unexpected column, a wrong type,
	// or an unsupported format version. The message names the column.
	ErrSchema = errors.New("kafkaarrow: schema mismatch")

	// ErrCorrupt is returned when Arrow IPC bytes or Arrow buffers are
	// malformed: truncated input, a missing end-of-stream marker, bad
	// framing, offsets out of bounds, nulls in a non-nullable column, or a
	// panic recovered from arrow-go while reading untrusted bytes.
	ErrCorrupt = errors.New("kafkaarrow: corrupt arrow data")

	// ErrTooLarge is returned when encoding would overflow a 32-bit Arrow
	// offset (more than 2 GiB - 1 of keys, values or header bytes in one
	// batch: split the batch), or when decoding would allocate more than the
	// decoder's limit (see WithMaxDecodedBytes).
	ErrTooLarge = errors.New("kafkaarrow: too large")
)

// ColumnError names the column (a dotted path such as "headers.value") at
// fault; Column is empty for a schema-wide problem (format version,
// endianness). It wraps one of the sentinels above.
type ColumnError struct {
	Column string
	Err    error // ErrSchema, ErrCorrupt or ErrTooLarge
	Detail string
}

func (e *ColumnError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%v: %s", e.Err, e.Detail)
	}
	return fmt.Sprintf("%v: column %q: %s", e.Err, e.Column, e.Detail)
}

func (e *ColumnError) Unwrap() error { return e.Err }

func colErr(sentinel error, column, format string, args ...any) error {
	return &ColumnError{Column: column, Err: sentinel, Detail: fmt.Sprintf(format, args...)}
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
