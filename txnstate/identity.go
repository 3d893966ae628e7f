package txnstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TxnVersion is the transaction protocol version a transaction ran under:
// TV0 is the classic protocol (EndTxn v0..v4, the producer epoch is stable
// across transactions), TV2 is KIP-890 part 2 (EndTxn v5+, every EndTxn bumps
// the producer epoch and returns the new one). Brokers from Kafka 4.0
// advertise EndTxn v5 even when the finalized transaction.version is 0, so the
// version is stored with the epoch and a resumed EndTxn is pinned to it.
type TxnVersion int8

const (
	TV0 TxnVersion = 0
	TV2 TxnVersion = 2
)

// Valid reports whether v is 0 or 2 (transaction.version 1 changes nothing on
// the producer's wire and is stored as 0).
func (v TxnVersion) Valid() bool { return v == TV0 || v == TV2 }

// EndTxnMaxVersion is the highest EndTxn request version that may carry a
// transaction begun under v: 4 for TV0, 5 for TV2.
func (v TxnVersion) EndTxnMaxVersion() int16 {
	if v == TV2 {
		return 5
	}
	return 4
}

// State is the durable state of one epoch in the state cache.
type State string

const (
	// Prepared: the recovery identity is durable and EndTxn(commit) may
	// have been sent. Nothing about the outcome is known.
	Prepared State = "PREPARED"
	// Committed: EndTxn(commit) succeeded, or recovery found it committed.
	Committed State = "COMMITTED"
	// Aborted: the epoch was aborted, or recovery found or made it aborted.
	Aborted State = "ABORTED"
)

// Valid reports whether s is one of the three states.
func (s State) Valid() bool { return s == Prepared || s == Committed || s == Aborted }

// PartitionWrite is one partition an epoch wrote to: the offset of its first
// record there and the producer id that wrote it. The Fetch probe checks that
// the batch at FirstOffset carries ProducerID before it believes anything.
type PartitionWrite struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	FirstOffset int64  `json:"first_offset"`
	ProducerID  int64  `json:"pid"`
}

// SourceOffset is a consumer-group offset committed inside the epoch's
// transaction (Kafka-to-Kafka mode): Offset is the next offset to consume.
// The group generation and member id the TxnOffsetCommit is sent with are not
// stored: they belong to the batch (stamped at fetch time) and are not needed
// to resume, since a resumed EndTxn applies pending offsets whatever the
// group generation now is.
type SourceOffset struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	LeaderEpoch int32  `json:"leader_epoch,omitempty"`
}

// DedupePosition is a dedupe-mode position: the highest position of Key
// written by the epoch. Positions only advance (invariant I4).
type DedupePosition struct {
	Key      string `json:"key"`
	Position int64  `json:"position"`
}

// Record is the recovery identity of one epoch, the value stored in the state
// cache under the key of the slot that carried it. Its JSON encoding is stable
// (fixed field order, sorted slices), so equal records encode to equal bytes
// and a cache with compare-and-set semantics can compare values.
type Record struct {
	// Format is the encoding version: 1, or 2 for a record with a Fence.
	// Decode refuses newer ones.
	Format int `json:"format"`
	// TransactionalID is the slot's transactional.id, "<prefix>-<n>".
	TransactionalID string `json:"transactional_id"`
	// Epoch is the epoch number: epochs of one transactional_id prefix are
	// numbered in commit order across every slot and across restarts.
	Epoch uint64 `json:"epoch"`
	// ProducerID and ProducerEpoch are the ones the EndTxn(commit) was, or
	// was about to be, sent with.
	ProducerID    int64      `json:"producer_id"`
	ProducerEpoch int16      `json:"producer_epoch"`
	TxnVersion    TxnVersion `json:"txn_version"`
	State         State      `json:"state"`
	// Partitions written by the epoch, sorted by topic then partition.
	Partitions []PartitionWrite `json:"partitions,omitempty"`

	// Group and SourceOffsets are set in Kafka-to-Kafka mode only.
	Group         string         `json:"group,omitempty"`
	SourceOffsets []SourceOffset `json:"source_offsets,omitempty"`
	// Positions are set in dedupe mode only.
	Positions []DedupePosition `json:"positions,omitempty"`
	// Reason says why a record was marked ABORTED or COMMITTED by recovery
	// ("found committed", "timed out", ...), for operators reading the cache.
	Reason string `json:"reason,omitempty"`
	// Fence is the owner token the record is written with (FenceToken):
	// a state cache that fences (kafka_state) keeps, per key, the record of
	// the highest token, so that an instance replaced by a later one (a
	// zombie that stalled and wakes up) cannot overwrite the later one's
	// records. 0: written without a token (format 1).
	Fence uint64 `json:"fence,omitempty"`
}

// FenceToken is the owner token of a slot's records: gen in the high 48
// bits, the producer epoch in the low 16. The transaction coordinator gives
// every InitProducerID of a transactional id a higher epoch than any before
// it under the same producer id, so a later owner of the slot always holds a
// higher token than the one it fenced. gen counts the producer ids the slot
// went through (a new one at the epoch limit under transaction version 2,
// whose value says nothing about order: kfake draws them at random): the
// owner after a change of producer id takes the previous record's gen plus
// one (FenceGen), whatever the new id's epoch.
func FenceToken(gen uint64, epoch int16) uint64 {
	return gen<<16 | uint64(uint16(epoch))
}

// FenceGen returns the gen of a token (FenceToken).
func FenceGen(token uint64) uint64 { return token >> 16 }

// FormatVersion is the newest Record encoding version: 2 adds Fence. A
// record without a Fence is still written as format 1.
const FormatVersion = 2

// Sentinel errors of the encoding.
var (
	// ErrBadRecord is wrapped by every Decode and Validate failure.
	ErrBadRecord = errors.New("txnstate: invalid state record")
)

// Validate checks the fields every record needs.
func (r *Record) Validate() error {
	var errs []string
	if r.Format < 1 || r.Format > FormatVersion {
		errs = append(errs, fmt.Sprintf("format %d not in 1..%d", r.Format, FormatVersion))
	}
	if r.TransactionalID == "" {
		errs = append(errs, "transactional_id is empty")
	}
	if r.Fence != 0 && r.Format < 2 {
		errs = append(errs, fmt.Sprintf("fence %d in a format %d record", r.Fence, r.Format))
	}
	if r.ProducerID < 0 || r.ProducerEpoch < 0 {
		errs = append(errs, fmt.Sprintf("producer id/epoch %d/%d negative", r.ProducerID, r.ProducerEpoch))
	}
	if !r.TxnVersion.Valid() {
		errs = append(errs, fmt.Sprintf("txn_version %d not 0 or 2", r.TxnVersion))
	}
	if !r.State.Valid() {
		errs = append(errs, fmt.Sprintf("state %q unknown", r.State))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrBadRecord, strings.Join(errs, "; "))
	}
	return nil
}

// Normalize sorts the slices so the encoding is stable.
func (r *Record) Normalize() {
	slices.SortFunc(r.Partitions, func(a, b PartitionWrite) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	slices.SortFunc(r.SourceOffsets, func(a, b SourceOffset) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	slices.SortFunc(r.Positions, func(a, b DedupePosition) int { return strings.Compare(a.Key, b.Key) })
}

// Encode validates, normalises and encodes r (as JSON, field order fixed by
// the struct).
func (r Record) Encode() ([]byte, error) {
	if r.Format == 0 {
		r.Format = 1
	}
	if r.Fence != 0 {
		r.Format = max(r.Format, 2)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	r.Partitions = slices.Clone(r.Partitions)
	r.SourceOffsets = slices.Clone(r.SourceOffsets)
	r.Positions = slices.Clone(r.Positions)
	r.Normalize()
	return json.Marshal(r)
}

// Decode parses and validates a record. Unknown fields are refused: a record
// written by a newer version must not be half-understood by an older one.
func Decode(b []byte) (Record, error) {
	var r Record
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// WithState returns a copy of r in state s with reason.
func (r Record) WithState(s State, reason string) Record {
	r.State = s
	r.Reason = reason
	return r
}
