package txnstate

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Mode is what the epochs carry besides records, and so what recovery does
// with an epoch that is still open.
type Mode uint8

const (
	// Plain: records only. An open in-doubt epoch is aborted; the input
	// replays its batches (at-least-once across a crash, atomic epochs).
	Plain Mode = iota
	// KafkaToKafka: records plus consumer-group offsets in the same
	// transaction. An open in-doubt epoch is resumed (committed) under
	// transaction version 2: it saves the replay, and offsets move only
	// with the commit. Under version 0 it is aborted (see Resolve).
	KafkaToKafka
	// Dedupe: records plus dedupe positions. An open in-doubt epoch is
	// resumed under transaction version 2 (its positions then count and
	// the input's replay of it is dropped); under version 0 it is aborted
	// (see Resolve) and the input replays it.
	Dedupe
	// Mirror: records plus the source positions, produced into the
	// positions topic of the target cluster inside the same transaction
	// (a copy between clusters). An open in-doubt epoch is resumed under
	// transaction version 2 (its positions commit with it); under version
	// 0 it is aborted (see Resolve) and copied again from the positions.
	Mirror
)

func (m Mode) String() string {
	switch m {
	case Plain:
		return "plain"
	case KafkaToKafka:
		return "kafka_to_kafka"
	case Dedupe:
		return "dedupe"
	case Mirror:
		return "mirror"
	}
	return fmt.Sprintf("mode(%d)", m)
}

// Action is what recovery does for one in-doubt epoch. The output writes each
// decision to the state cache once the epoch's slot is fenced (a previous
// owner still running can no longer commit on it), and only if the slot
// still holds the record the decision was made on.
type Action uint8

const (
	// MarkCommitted: the broker says committed; write COMMITTED.
	MarkCommitted Action = iota
	// MarkAborted: the broker says aborted; write ABORTED.
	MarkAborted
	// ResumeCommit: send a raw EndTxn(commit) with the stored id, epoch
	// and version, then write what it returns.
	ResumeCommit
	// AbortOpen: let InitProducerID on the slot abort the transaction
	// that is still open, then write ABORTED.
	AbortOpen
	// Stop: nothing exact is known; do not start. The operator decides,
	// with Override, after looking at the cluster.
	Stop
)

var actionNames = [...]string{"mark-committed", "mark-aborted", "resume-commit", "abort-open", "stop"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// Override forces the decision for in-doubt epochs whose outcome is Unknown.
// It exists for operators only: the probe found nothing exact (the records
// were deleted or compacted away) and someone checked by other means.
type Override uint8

const (
	NoOverride Override = iota
	ForceCommitted
	ForceAborted
)

// InDoubt is one PREPARED record with the outcome observed for it (Decide,
// then, if Unknown, the probe).
type InDoubt struct {
	Record  Record
	Outcome Outcome
	// Replayed: the epoch's batches were written again and committed
	// since it aborted (Kafka-to-Kafka: the group's committed offsets are
	// at or past every source offset the epoch would have committed;
	// offsets move only over a contiguous committed run, invariant I8).
	// Its abort then leaves no gap, and a later epoch found committed is
	// no contradiction. Counts for a FoundAborted epoch only: its record
	// can be stale (a PREPARE whose write timed out lands after the
	// ABORTED written over it, or after the slot's later epochs), while
	// the instance that aborted it went on and replayed it.
	Replayed bool
	// Rereads: Kafka-to-Kafka, the epoch's source offsets were to commit
	// in its own transaction, for the consumer group the output commits
	// now. Aborted, it moved no offset: on each of its source partitions
	// the group's committed offset is past its records (committed again
	// since) or not, and they are read again from there; a later epoch's
	// commit moves the group's offsets only over the records it wrote
	// (invariant I8). A later epoch found committed is then no
	// contradiction. Unlike Replayed, a later open epoch is still aborted:
	// it may have been opened before the abort, with offsets past the
	// aborted epoch's records. Counts in Kafka-to-Kafka mode only.
	Rereads bool
}

// Decision is Resolve's answer for one in-doubt epoch.
type Decision struct {
	Record  Record
	Outcome Outcome
	Action  Action
	// Reason is stored in the record and logged.
	Reason string
}

// ErrContradiction is wrapped when the observations break invariant I5 (an
// epoch committed after an earlier one aborted). Recovery must stop: the
// cluster does not look like anything this output would have written.
var ErrContradiction = errors.New("txnstate: epoch committed after an earlier aborted epoch")

// Resolve decides every in-doubt epoch in epoch order. After the first
// aborted epoch everything later that is not found committed is aborted (a
// later epoch never commits over an earlier failed one); an open epoch is aborted in plain mode and, under
// transaction version 0, in every mode, and resumed otherwise (Kafka-to-Kafka,
// dedupe and mirror under version 2); an unknown one stops recovery unless overridden, and so does
// every later one (its fate depends on the earlier one's). A later epoch
// found committed after an aborted one is a contradiction (Stop and an error
// wrapping ErrContradiction), unless every aborted one before it is
// Replayed (a found-aborted epoch whose batches were committed again since
// aborts nothing after it), Rereads in Kafka-to-Kafka mode, or the mode is
// plain, which keeps no order across a failure.
func Resolve(mode Mode, in []InDoubt, ov Override) ([]Decision, error) {
	in = slices.Clone(in)
	slices.SortStableFunc(in, func(a, b InDoubt) int {
		switch {
		case a.Record.Epoch < b.Record.Epoch:
			return -1
		case a.Record.Epoch > b.Record.Epoch:
			return 1
		}
		return 0
	})
	out := make([]Decision, 0, len(in))
	var (
		abortedAt *uint64
		// gapAt is the first aborted epoch a later commit contradicts:
		// one whose abort may have left records a later epoch's
		// positions moved past.
		gapAt   *uint64
		stopped bool
		errs    []error
	)
	noGap := func(d InDoubt) bool {
		// Plain mode keeps no order across a failure: a later epoch may
		// commit before an aborted one's batches are replayed (the input
		// replays them; nothing of them was acknowledged).
		return mode == Plain || (d.Replayed && d.Outcome == FoundAborted) || (mode == KafkaToKafka && d.Rereads)
	}
	for _, d := range in {
		dec := Decision{Record: d.Record, Outcome: d.Outcome}
		switch {
		case stopped:
			dec.Action, dec.Reason = Stop, "an earlier in-doubt epoch is unknown"
		case abortedAt != nil:
			switch d.Outcome {
			case FoundCommitted:
				if gapAt == nil && mode == Plain {
					dec.Action, dec.Reason = MarkCommitted, fmt.Sprintf("found committed; epoch %d aborted before it (plain mode keeps no order across a failure: the input replays its batches)", *abortedAt)
					break
				}
				if gapAt == nil {
					dec.Action, dec.Reason = MarkCommitted, fmt.Sprintf("found committed; epoch %d aborted before it moved none of the group's offsets past its records", *abortedAt)
					break
				}
				dec.Action, dec.Reason = Stop, fmt.Sprintf("found committed after epoch %d aborted", *gapAt)
				errs = append(errs, fmt.Errorf("%w: epoch %d (%s) committed, epoch %d aborted", ErrContradiction, d.Record.Epoch, d.Record.TransactionalID, *gapAt))
			case FoundAborted:
				dec.Action, dec.Reason = MarkAborted, "found aborted"
			default:
				dec.Action, dec.Reason = AbortOpen, fmt.Sprintf("aborted: epoch %d aborted before it", *abortedAt)
			}
			if (dec.Action == MarkAborted || dec.Action == AbortOpen) && gapAt == nil && !noGap(d) {
				e := d.Record.Epoch
				gapAt = &e
			}
		default:
			switch d.Outcome {
			case FoundCommitted:
				dec.Action, dec.Reason = MarkCommitted, "found committed"
			case FoundAborted:
				dec.Action, dec.Reason = MarkAborted, "found aborted"
				if d.Replayed {
					dec.Reason = "found aborted; its batches were committed again since"
				}
			case StillOpen:
				switch {
				case mode == Plain:
					dec.Action, dec.Reason = AbortOpen, "open at restart; plain mode aborts (the input replays)"
				case mode == KafkaToKafka && d.Record.TxnVersion == TV0:
					// Under TV0 a slot keeps its producer epoch from one
					// transaction to the next: Ongoing at the stored one
					// may be a later epoch of the slot's previous owner,
					// still running (a zombie), opened after this record
					// was read. A raw EndTxn(commit) would commit that
					// epoch's records without its offsets, over the
					// epochs before it. Aborting is exact either way:
					// the offsets move only with a commit.
					dec.Action, dec.Reason = AbortOpen, "open at restart; Kafka-to-Kafka under transaction version 0 aborts (the open transaction may be a later epoch of a previous owner still running; the input replays from the group's offsets)"
				case mode == Dedupe && d.Record.TxnVersion == TV0:
					// The same ambiguity: resuming could commit a later
					// epoch's records (maybe only part of them) that no
					// PREPARE record holds the positions of, and the
					// input's replay would write them again. Aborted, the
					// epoch's positions do not count and the input replays
					// its messages (nothing of it was acknowledged).
					dec.Action, dec.Reason = AbortOpen, "open at restart; dedupe under transaction version 0 aborts (the open transaction may be a later epoch of a previous owner still running; the input replays the unacknowledged messages)"
				case mode == Mirror && d.Record.TxnVersion == TV0:
					// The same ambiguity: resuming could commit a
					// later epoch's records without its positions
					// (written only once the epoch before it
					// committed), over that earlier epoch, which the
					// fence then aborts; the copy from the positions
					// would write them again. Aborted, its positions
					// abort with it and the copy resumes from the
					// committed ones.
					dec.Action, dec.Reason = AbortOpen, "open at restart; mirror under transaction version 0 aborts (the open transaction may be a later epoch of a previous owner still running; the copy resumes from the committed positions)"
				default:
					dec.Action, dec.Reason = ResumeCommit, "open at restart; resumed"
				}
			default:
				switch ov {
				case ForceCommitted:
					dec.Action, dec.Reason = MarkCommitted, "unknown; forced committed by the operator"
				case ForceAborted:
					dec.Action, dec.Reason = MarkAborted, "unknown; forced aborted by the operator"
				default:
					dec.Action, dec.Reason = Stop, "unknown: the broker and the probe identify nothing"
					stopped = true
				}
			}
			replayed := d.Replayed && d.Outcome == FoundAborted
			if (dec.Action == MarkAborted || dec.Action == AbortOpen) && !replayed {
				e := d.Record.Epoch
				abortedAt = &e
				if !noGap(d) {
					gapAt = &e
				}
			}
		}
		out = append(out, dec)
	}
	return out, errors.Join(errs...)
}

// ErrTiming is wrapped by CheckTiming failures.
var ErrTiming = errors.New("txnstate: epoch timing does not fit in the transaction timeout")

// CheckTiming checks that an epoch fits in the transaction timeout: the epoch
// is open for up to interval, then waits for its predecessor's commit and
// commits itself (commitBudget each), and the coordinator aborts it timeout
// after its first partition was added, however busy it is. margin is kept
// free for clock and network slack. Each duration must be positive.
func CheckTiming(interval, commitBudget, timeout, margin time.Duration) error {
	switch {
	case interval <= 0:
		return fmt.Errorf("%w: interval %v must be positive", ErrTiming, interval)
	case commitBudget <= 0:
		return fmt.Errorf("%w: commit budget %v must be positive", ErrTiming, commitBudget)
	case timeout <= 0:
		return fmt.Errorf("%w: timeout %v must be positive", ErrTiming, timeout)
	}
	if need := interval + 2*commitBudget; need >= timeout-margin {
		return fmt.Errorf("%w: interval %v + 2 x commit budget %v = %v, must be below timeout %v - margin %v", ErrTiming, interval, commitBudget, need, timeout, margin)
	}
	return nil
}
