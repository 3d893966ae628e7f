package output

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// Sentinel errors. Every error the output returns for an epoch wraps one of
// these or a kerr error, so callers can errors.Is rather than match strings.
var (
	// ErrEpochAborted is wrapped by the error of every batch whose epoch
	// was aborted before its commit: the batch is nacked and nothing of it
	// is visible to read_committed consumers.
	ErrEpochAborted = errors.New("kafka_eos: epoch aborted")
	// ErrInDoubt is wrapped when the outcome of an EndTxn(commit) could not
	// be established; the output stops, the next start resolves it.
	ErrInDoubt = errors.New("kafka_eos: epoch commit outcome unknown")
	// ErrClosed is returned by writes after Close.
	ErrClosed = errors.New("kafka_eos: output closed")
)

// FencedError says another producer took over a slot's transactional id (a
// zombie fence). It is raised through internal/fatal: every slot stops.
type FencedError struct {
	TransactionalID string
	Err             error
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("kafka_eos: transactional id %q was fenced by another producer (is a second instance running with this transactional_id?): %v", e.TransactionalID, e.Err)
}
func (e *FencedError) Unwrap() error { return e.Err }

// EpochError is the error of a batch in an aborted epoch. Cause is what made
// the epoch abort (possibly in another batch, or an earlier epoch).
type EpochError struct {
	Epoch uint64
	Cause error
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("kafka_eos: epoch %d aborted: %v", e.Epoch, e.Cause)
}
func (e *EpochError) Unwrap() []error { return []error{ErrEpochAborted, e.Cause} }

// RecordError is a record the broker or the client refused: too large, an
// unknown topic or partition, an invalid record. It names where the record
// was going and its size.
type RecordError struct {
	Topic     string
	Partition int32 // -1 if not yet partitioned
	Size      int
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("kafka_eos: record of %d bytes to topic %q partition %d: %v", e.Size, e.Topic, e.Partition, e.Err)
}
func (e *RecordError) Unwrap() error { return e.Err }

// InDoubtError reports an epoch whose commit outcome is unknown.
type InDoubtError struct {
	TransactionalID string
	Epoch           uint64
	ProducerID      int64
	ProducerEpoch   int16
	Detail          string
	// Cause, if set, is why recovery could not identify the epoch: the
	// error of its DescribeTransactions or of its Fetch probe.
	Cause error
}

func (e *InDoubtError) Error() string {
	detail, next := e.Detail, "the next start resolves it from the state cache (or set recovery_override after checking the topic)"
	if e.Cause != nil {
		detail += "; recovery's check of the epoch failed: " + e.Cause.Error()
		if isAuthErr(e.Cause) {
			// The same refusal meets every start: saying the next
			// one resolves it would send the operator round in circles.
			next = "the broker refuses that check (a missing ACL or bad credentials), and every start stops here until it is fixed; then the next start resolves the epoch from the state cache (or set recovery_override after checking the topic)"
		}
	}
	return fmt.Sprintf("kafka_eos: epoch %d on %q (producer id %d, epoch %d) is in doubt: %s; %s", e.Epoch, e.TransactionalID, e.ProducerID, e.ProducerEpoch, detail, next)
}

// Unwrap returns ErrInDoubt, and Cause if set.
func (e *InDoubtError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrInDoubt, e.Cause}
	}
	return []error{ErrInDoubt}
}

// isFenceErr reports errors that mean "this producer id/epoch is no longer
// current": a zombie fence or our own transaction timing out; ClassifyFence
// tells them apart.
func isFenceErr(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.TransactionAbortable)
}

// isAuthErr reports errors no retry fixes: the pipeline stops.
func isAuthErr(err error) bool {
	return errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) || kafkaconf.IsCertificateError(err)
}

// isDefinite reports whether an EndTxn error is the broker's definite answer
// that it did not apply the request (a non-retriable Kafka error other than
// UNKNOWN_SERVER_ERROR). Anything else leaves the outcome unknown.
func isDefinite(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && !ke.Retriable && ke.Code != kerr.UnknownServerError.Code
}
