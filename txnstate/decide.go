package txnstate

import (
	"fmt"
	"math"
)

// Broker transaction states as DescribeTransactions and ListTransactions name
// them (Kafka's TransactionState).
const (
	BrokerEmpty             = "Empty"
	BrokerOngoing           = "Ongoing"
	BrokerPrepareCommit     = "PrepareCommit"
	BrokerPrepareAbort      = "PrepareAbort"
	BrokerCompleteCommit    = "CompleteCommit"
	BrokerCompleteAbort     = "CompleteAbort"
	BrokerDead              = "Dead"
	BrokerPrepareEpochFence = "PrepareEpochFence"
)

// Outcome is what an observation says about one in-doubt epoch.
type Outcome uint8

const (
	// Unknown: the observation does not identify the epoch's fate. Never
	// read as aborted.
	Unknown Outcome = iota
	// FoundCommitted: the epoch's transaction committed.
	FoundCommitted
	// FoundAborted: the epoch's transaction aborted (or is aborting).
	FoundAborted
	// StillOpen: the transaction is still ongoing at the stored producer
	// id and epoch; it can be resumed (committed) or aborted.
	StillOpen
)

var outcomeNames = [...]string{"unknown", "committed", "aborted", "open"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// Observation is one DescribeTransactions answer for the slot's
// transactional.id. Found is false on TRANSACTIONAL_ID_NOT_FOUND.
type Observation struct {
	Found         bool
	State         string
	ProducerID    int64
	ProducerEpoch int16
}

func (o Observation) String() string {
	if !o.Found {
		return "transactional id not found"
	}
	return fmt.Sprintf("%s at producer id %d epoch %d", o.State, o.ProducerID, o.ProducerEpoch)
}

// Decide maps the broker's state for the record's transactional.id to an
// outcome, matching exactly on (producer id, producer epoch, transaction
// version), as the brief's recovery table says:
//
//	Ongoing at (pid, e)                                   still open
//	CompleteCommit at e (TV0) / e+1 (TV2)                 committed
//	TV2: a new pid at epoch 0 once e overflowed           committed
//	PrepareCommit at e (TV0) / e+1 (TV2)                  committed (the
//	    coordinator has durably decided; markers are being written)
//	CompleteAbort at e+1 (TV0) / e+1 or e+2 (TV2)         aborted (timed out)
//	PrepareAbort at the pid, epoch e..e+2                 aborted
//	anything else, not found, a later transaction         unknown: probe
//
// e is r.ProducerEpoch. The rows are exact only with the slot invariant of the
// package doc: no transaction began on the slot after the one r describes.
func Decide(r Record, o Observation) Outcome {
	if !o.Found {
		return Unknown
	}
	e := int32(r.ProducerEpoch)
	oe := int32(o.ProducerEpoch)
	samePID := o.ProducerID == r.ProducerID
	// The epoch the commit leaves the producer at: unchanged under TV0,
	// bumped by the EndTxn itself under TV2.
	endEpoch := e
	if r.TxnVersion == TV2 {
		endEpoch = e + 1
	}
	switch o.State {
	case BrokerOngoing:
		if samePID && oe == e {
			return StillOpen
		}
	case BrokerCompleteCommit, BrokerPrepareCommit:
		if samePID && oe == endEpoch {
			return FoundCommitted
		}
		// KIP-890: an EndTxn that would bump the epoch to MaxInt16 returns
		// a new producer id at epoch 0 instead.
		if r.TxnVersion == TV2 && o.State == BrokerCompleteCommit && !samePID && oe == 0 && e >= math.MaxInt16-1 {
			return FoundCommitted
		}
	case BrokerCompleteAbort:
		// A timeout abort fences first (epoch +1) and, under TV2, the
		// abort marker may bump again: the brief says e+2, and Apache
		// Kafka 4.3.1 was measured ending a timed-out TV2 transaction at
		// CompleteAbort e+1 as well. Either is an abort of the slot's
		// newest transaction, ours by the slot invariant.
		if samePID && (oe == e+1 || (r.TxnVersion == TV2 && oe == e+2)) {
			return FoundAborted
		}
	case BrokerPrepareAbort:
		if samePID && oe >= e && oe <= e+2 {
			return FoundAborted
		}
	}
	return Unknown
}

// FetchObservation is what a raw Fetch (isolation read_committed) at a
// partition's stored first offset returned, reduced to what the probe needs.
type FetchObservation struct {
	// LogStartOffset and LastStableOffset of the partition.
	LogStartOffset   int64
	LastStableOffset int64
	// BatchFound: a data batch containing the first offset was returned;
	// BatchProducerID is its producer id.
	BatchFound      bool
	BatchProducerID int64
	// AbortedListed: the response's aborted transactions list the producer
	// id with a first offset at or below the stored first offset.
	AbortedListed bool
	// AbortMarker / CommitMarker: a control batch of the producer id with
	// an ABORT / COMMIT marker follows the first offset.
	AbortMarker  bool
	CommitMarker bool
}

// ProbePartition is the three-valued, exact Fetch probe for one partition the
// epoch wrote: ABORTED if the pid is listed aborted or an ABORT marker for it
// follows; COMMITTED if the LSO is past the first offset (or a COMMIT marker
// follows) and the pid is not aborted; otherwise UNKNOWN (offset below the
// log start, compacted away, another producer's batch there, LSO not past it).
func ProbePartition(w PartitionWrite, f FetchObservation) Outcome {
	if w.FirstOffset < f.LogStartOffset {
		return Unknown
	}
	if !f.BatchFound || f.BatchProducerID != w.ProducerID {
		return Unknown
	}
	if f.AbortedListed || f.AbortMarker {
		if f.CommitMarker {
			return Unknown // contradictory; never guess
		}
		return FoundAborted
	}
	if f.CommitMarker || f.LastStableOffset > w.FirstOffset {
		return FoundCommitted
	}
	return Unknown
}

// CombineProbes folds the per-partition probe outcomes of one epoch: a
// transaction is atomic, so one exact answer decides it; contradicting
// answers (some committed, some aborted) are Unknown.
func CombineProbes(outs []Outcome) Outcome {
	var committed, aborted bool
	for _, o := range outs {
		switch o {
		case FoundCommitted:
			committed = true
		case FoundAborted:
			aborted = true
		}
	}
	switch {
	case committed && aborted:
		return Unknown
	case committed:
		return FoundCommitted
	case aborted:
		return FoundAborted
	}
	return Unknown
}

// RetryResult classifies the answer to a raw EndTxn(commit) retried with the
// stored producer id and epoch.
type RetryResult uint8

const (
	// RetryOK: NONE. The transaction is committed (a retry of a completed
	// commit succeeds, under TV2 even after the epoch bump).
	RetryOK RetryResult = iota
	// RetryRejected: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH or
	// INVALID_TXN_STATE: DescribeTransactions decides.
	RetryRejected
	// RetryFailed: a transport error, a timeout, anything else: unknown.
	RetryFailed
)

// RetryOutcome is the outcome a retried EndTxn(commit) gives on its own:
// FoundCommitted on RetryOK, Unknown otherwise (the caller then asks
// DescribeTransactions and, if still unknown, stops).
func RetryOutcome(r RetryResult) Outcome {
	if r == RetryOK {
		return FoundCommitted
	}
	return Unknown
}

// FenceKind tells a fence caused by our own transaction timing out from one
// caused by another instance taking the transactional.id (a zombie fence).
type FenceKind uint8

const (
	// FenceOwnTimeout: our transaction was aborted by the coordinator (or
	// the error came with no epoch change at all): abort the epoch, nack
	// its batches, re-initialise the slot. Not fatal.
	FenceOwnTimeout FenceKind = iota
	// FenceZombie: another producer initialised the transactional.id.
	// Fatal: stop every slot.
	FenceZombie
)

// ClassifyFence decides, from DescribeTransactions after PRODUCER_FENCED,
// INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE on a live epoch run with (pid,
// e, tv), whether we were fenced by another instance. Another instance's
// InitProducerID bumps the epoch and leaves Empty or Ongoing; the
// coordinator's timeout abort leaves PrepareAbort or CompleteAbort at our pid
// (CompleteAbort at e+1 under TV0, e+1..e+2 under TV2). A transactional id
// that is gone or a new producer id is treated as a zombie: the safe side.
func ClassifyFence(pid int64, e int16, tv TxnVersion, o Observation) FenceKind {
	if !o.Found || o.ProducerID != pid {
		return FenceZombie
	}
	oe := int32(o.ProducerEpoch)
	ee := int32(e)
	if oe == ee {
		return FenceOwnTimeout // nobody bumped the epoch
	}
	maxBump := ee + 1
	if tv == TV2 {
		maxBump = ee + 2
	}
	if (o.State == BrokerPrepareAbort || o.State == BrokerCompleteAbort || o.State == BrokerPrepareEpochFence) && oe > ee && oe <= maxBump {
		return FenceOwnTimeout
	}
	return FenceZombie
}
