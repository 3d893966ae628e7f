package input

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// ErrClosed is returned by ReadBatch after Close.
var ErrClosed = errors.New("kafka_native: input closed")

// UnknownTopicError is a topic or partition the brokers do not know. It is
// retried for unknown_topic_grace_period (metadata settles after a topic is
// created) and fatal afterwards.
type UnknownTopicError struct {
	Topic     string
	Partition int32 // -1 for the whole topic
	Err       error
}

func (e *UnknownTopicError) Error() string {
	if e.Partition < 0 {
		return fmt.Sprintf("topic %s does not exist: %v", e.Topic, e.Err)
	}
	return fmt.Sprintf("partition %s:%d does not exist: %v", e.Topic, e.Partition, e.Err)
}
func (e *UnknownTopicError) Unwrap() error { return e.Err }

// OffsetResetError is a committed or specific start that is missing or out of
// range under reset_offset none.
type OffsetResetError struct {
	TP     tp
	Start  string // the start_offset (stop_offset if Stop) value
	Stop   bool   // a committed stop
	Reason string
	// Implicit: reset_offset was not written (none is the default of a
	// committed start and the only way of a committed stop).
	Implicit bool
}

func (e *OffsetResetError) Error() string {
	field, verb := knFieldStartOffset, "start"
	if e.Stop {
		field, verb = knFieldStopOffset, "stop"
	}
	if e.Implicit {
		return fmt.Sprintf("partition %s: %s %s: %s, and reset_offset is not set (set reset_offset earliest or latest to %s such partitions there)", e.TP, field, e.Start, e.Reason, verb)
	}
	return fmt.Sprintf("partition %s: %s %s: %s, and reset_offset is none", e.TP, field, e.Start, e.Reason)
}

// ConfigError is a config that only the brokers' view shows to be unusable.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("field %s: %v", e.Field, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// OpenTransactionError is stop_at_high_watermark giving up on transactions
// that stayed open below the stops.
type OpenTransactionError struct {
	Waited   time.Duration
	Blocking string
}

func (e *OpenTransactionError) Error() string {
	return fmt.Sprintf("stop_at_high_watermark: transactions still open after %v: %s", e.Waited, e.Blocking)
}

// DataLossError is a range of offsets deleted (retention, compaction of a
// whole range, DeleteRecords, unclean leader election) before it was read.
// It is fatal under reset_offset none and a counted warning otherwise.
type DataLossError struct {
	TP       tp
	From, To int64 // [From, To) was lost
}

func (e *DataLossError) Error() string {
	return fmt.Sprintf("partition %s: offsets [%d, %d) were deleted before they were read (data loss)", e.TP, e.From, e.To)
}

// CommitError is the final commit of a bounded read failing for good.
type CommitError struct {
	Group string
	Err   error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("committing the final offsets of group %s: %v", e.Group, e.Err)
}
func (e *CommitError) Unwrap() error { return e.Err }

// fatalKafkaErrs are broker errors that no retry fixes.
var fatalKafkaErrs = []error{
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	kerr.IllegalSaslState,
	kerr.TopicAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.InvalidGroupID,
	kerr.UnsupportedVersion,
}

// isFatal reports whether err is one that no retry fixes; the caller stops the
// stream with it (fatal.Raise). Everything else is retried with backoff.
func isFatal(err error) bool {
	if err == nil {
		return false
	}
	var (
		reset  *OffsetResetError
		conf   *ConfigError
		open   *OpenTransactionError
		commit *CommitError
	)
	if errors.As(err, &reset) || errors.As(err, &conf) || errors.As(err, &open) || errors.As(err, &commit) {
		return true
	}
	for _, f := range fatalKafkaErrs {
		if errors.Is(err, f) {
			return true
		}
	}
	return isTLSConfigErr(err)
}

// isTLSConfigErr reports a TLS handshake that fails on certificates: ours not
// trusting the broker's (unknown authority, wrong host name, expired), or the
// broker rejecting ours (mTLS). No retry fixes those.
func isTLSConfigErr(err error) bool { return kafkaconf.IsCertificateError(err) }

// isUnknownTopic reports whether err says a topic or partition does not exist.
func isUnknownTopic(err error) bool {
	var ut *UnknownTopicError
	return errors.As(err, &ut) || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)
}
