package statecache

import (
	"errors"
	"fmt"
)

// Errors returned by the cache. Compare with errors.Is; the typed errors below
// wrap the matching sentinel.
var (
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("kafka_state: cache is closed")

	// ErrTTLUnsupported is returned by Set and Add when a TTL is passed.
	// A compacted topic keeps the last value of a key until it is deleted;
	// silently ignoring a TTL would keep values a caller expects to expire,
	// so the cache refuses instead.
	ErrTTLUnsupported = errors.New("kafka_state: TTLs are not supported (values live until deleted)")

	// ErrValueTooLarge is wrapped by *TooLargeError.
	ErrValueTooLarge = errors.New("kafka_state: value too large")

	// ErrTopicNotCompacted is wrapped by *TopicPolicyError.
	ErrTopicNotCompacted = errors.New("kafka_state: topic is not compacted")

	// ErrReservedKey is returned for keys holding the cache's reserved
	// marker (a NUL byte and "kafka_state/"), which starts the keys the
	// cache writes for itself and the fence suffix of record keys.
	ErrReservedKey = errors.New("kafka_state: key is reserved")

	// ErrTopicChanged is wrapped by *TopicChangedError.
	ErrTopicChanged = errors.New("kafka_state: topic changed under the cache")

	// ErrFenced is wrapped by *FencedError: a write with a fence token
	// (WithFence) lower than one already written for the key.
	ErrFenced = errors.New("kafka_state: write fenced by a higher token")
)

// FencedError is returned by Set, Add and Delete when the write's fence token
// (WithFence; 0 without one) is lower than the highest token this process has
// seen for the key. Nothing was written, unless Written says the write
// landed before a concurrent read showed the higher token; such a record
// loses to the higher token at every read.
type FencedError struct {
	Topic   string
	Key     string
	Token   uint64 // the write's token
	Current uint64 // the highest token seen for the key
	Written bool
}

func (e *FencedError) Error() string {
	what := "nothing written"
	if e.Written {
		what = "the record was written and loses to the higher token at every read"
	}
	return fmt.Sprintf("kafka_state: key %q of topic %q: write with fence token %d refused, token %d was already written for the key (%s)",
		e.Key, e.Topic, e.Token, e.Current, what)
}

// Unwrap returns ErrFenced.
func (*FencedError) Unwrap() error { return ErrFenced }

// TooLargeError is returned when a key and value would not fit in one record
// batch the cache can write and read back: the topic's max.message.bytes, and
// never more than 100 MiB less 64 KiB (a write is one produce request, which
// Apache Kafka refuses over socket.request.max.bytes, default 100 MiB, and a
// read gets the batch in one fetch response, which franz-go refuses over 100
// MiB). The cache never splits a value across records: a split value could be
// read half-written after a crash.
type TooLargeError struct {
	Topic      string
	Key        string
	ValueBytes int // len(value)
	BatchBytes int // the record batch the broker would see, header included
	Limit      int // the largest batch the cache writes to the topic
	TopicLimit int // the topic's max.message.bytes
}

func (e *TooLargeError) Error() string {
	if e.Limit < e.TopicLimit {
		return fmt.Sprintf("kafka_state: value for key %q is %d bytes (a %d byte record batch), over the %d bytes kafka_state can write in one request and read back in one response (the topic %q allows %d, but Kafka's default socket.request.max.bytes and franz-go's response limit are 100 MiB); values are never split across records, store less",
			e.Key, e.ValueBytes, e.BatchBytes, e.Limit, e.Topic, e.TopicLimit)
	}
	return fmt.Sprintf("kafka_state: value for key %q is %d bytes (a %d byte record batch), over max.message.bytes %d of topic %q; values are never split across records, raise max.message.bytes on the topic or store less",
		e.Key, e.ValueBytes, e.BatchBytes, e.Limit, e.Topic)
}

// Unwrap returns ErrValueTooLarge.
func (*TooLargeError) Unwrap() error { return ErrValueTooLarge }

// TopicPolicyError is returned when an existing topic's cleanup policy could
// lose values: without compaction a value disappears with its segment after
// retention, and "compact,delete" with a finite retention does the same to
// any key that is not rewritten within the retention.
type TopicPolicyError struct {
	Topic  string
	Policy string // cleanup.policy as described by the broker
	Reason string
}

func (e *TopicPolicyError) Error() string {
	return fmt.Sprintf("kafka_state: topic %q has cleanup.policy=%q: %s", e.Topic, e.Policy, e.Reason)
}

// Unwrap returns ErrTopicNotCompacted.
func (*TopicPolicyError) Unwrap() error { return ErrTopicNotCompacted }

// TopicChangedError stops the cache when its topic is no longer the one it
// loaded: deleted, deleted and created again (a new topic id), or given more
// partitions. Every later call returns it: the values the cache holds are no
// longer in the topic (or no longer ordered by it), and writing on would mix
// them with whatever the new topic holds.
type TopicChangedError struct {
	Topic  string
	Reason string // what changed
	Keys   int    // keys the cache held when it stopped
}

func (e *TopicChangedError) Error() string {
	return fmt.Sprintf("kafka_state: topic %q %s; the cache held %d keys (with their values as of the last read) and stops: restart to start over from what the topic holds now", e.Topic, e.Reason, e.Keys)
}

// Unwrap returns ErrTopicChanged.
func (*TopicChangedError) Unwrap() error { return ErrTopicChanged }
