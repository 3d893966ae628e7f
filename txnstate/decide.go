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
//	CompleteAbort at e (TV0)                              aborted (our abort)
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
		// Our own EndTxn(abort) under TV0 keeps the epoch (an abort
		// whose ABORTED record was not written before a crash): by the
		// slot invariant the newest transaction at (pid, e) is r's.
		if samePID && r.TxnVersion == TV0 && oe == e {
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
//
// Another instance's InitProducerID on our open transaction leaves the same
// states as a timeout until its retry bumps the epoch again (Apache Kafka
// fences the open transaction at e+1, aborts it and answers
// CONCURRENT_TRANSACTIONS: PrepareEpochFence, PrepareAbort, then CompleteAbort
// at e+1). Only the clock tells them apart: the coordinator aborts a
// transaction transaction_timeout after its first partition was added, never
// sooner, so timedOut says whether the epoch has been open that long (it
// opened before its first partition was added). Before that, an abort at
// e+1 is another instance's fence: a zombie.
func ClassifyFence(pid int64, e int16, tv TxnVersion, o Observation, timedOut bool) FenceKind {
	if !o.Found || o.ProducerID != pid {
		return FenceZombie
	}
	oe := int32(o.ProducerEpoch)
	ee := int32(e)
	if oe == ee {
		return FenceOwnTimeout // nobody bumped the epoch
	}
	if !timedOut {
		return FenceZombie
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

// AbortCheck is what the broker's state says about who holds a transactional
// id after an abort whose EndTxn got no answer (a timeout, a transport error,
// a retriable error that outlived its retries): the client does not know
// whether another producer fenced it meanwhile (ClassifyAbort).
type AbortCheck uint8

const (
	// AbortNoRival: nothing shows another producer: the epoch our abort
	// leaves (or the one our transaction began at: the EndTxn never
	// arrived), or the coordinator's own timeout abort. Re-initialising
	// the slot takes the id from nobody.
	AbortNoRival AbortCheck = iota
	// AbortUnclear: a state our own abort leaves as well as another
	// producer's InitProducerID (TV2: our abort bumps to e+1, and so does
	// another producer's first InitProducerID on the open transaction
	// until its retry bumps again; kfake's single bump shows the same),
	// a new producer id where the epoch can have overflowed, or the id
	// gone. The caller keeps re-initialising the slot, which takes the id
	// back if it was another producer's.
	AbortUnclear
	// AbortRival: another producer initialised the transactional id
	// after our epoch began: we are a zombie.
	AbortRival
)

var abortCheckNames = [...]string{"no rival", "unclear", "rival"}

func (c AbortCheck) String() string {
	if int(c) < len(abortCheckNames) {
		return abortCheckNames[c]
	}
	return fmt.Sprintf("abort(%d)", c)
}

// ClassifyAbort decides, from DescribeTransactions after an abort of the
// transaction begun at (pid, e) under tv whose EndTxn got no answer, whether
// another producer initialised the id meanwhile. Under TV0 our abort leaves
// the epoch at e; under TV2 it bumps it to e+1. The coordinator's timeout
// abort fences e+1 (TV0) or up to e+2 (TV2) and leaves PrepareEpochFence,
// PrepareAbort or CompleteAbort, but only once the epoch has been open
// transaction_timeout (timedOut, as in ClassifyFence): before that those
// states above what our abort leaves are another producer's. Another
// producer's InitProducerID leaves Empty or Ongoing at a bumped epoch (Apache
// Kafka: e+2 once its retry after CONCURRENT_TRANSACTIONS went through).
func ClassifyAbort(pid int64, e int16, tv TxnVersion, o Observation, timedOut bool) AbortCheck {
	if !o.Found {
		return AbortUnclear
	}
	if o.ProducerID != pid {
		// An abort or a timeout at the last epochs moves the id to a
		// new producer id at epoch 0.
		if e >= math.MaxInt16-2 && o.ProducerEpoch <= 1 {
			return AbortUnclear
		}
		return AbortRival
	}
	oe, ee := int32(o.ProducerEpoch), int32(e)
	own := ee // the epoch our abort leaves
	maxTimeout := ee + 1
	if tv == TV2 {
		own, maxTimeout = ee+1, ee+2
	}
	timeoutState := o.State == BrokerPrepareAbort || o.State == BrokerCompleteAbort || o.State == BrokerPrepareEpochFence
	switch {
	case oe < ee:
		return AbortUnclear
	case oe == ee:
		return AbortNoRival // the EndTxn did not arrive or left e (TV0)
	case timedOut && timeoutState && oe <= maxTimeout:
		return AbortNoRival
	case oe > own:
		return AbortRival
	}
	// TV2 at e+1: our abort leaves PrepareAbort or CompleteAbort there
	// (kfake: Empty). A transaction open at e+1 is not ours (our client
	// never learnt e+1), nor is an epoch fence before transaction_timeout.
	if o.State == BrokerOngoing || o.State == BrokerPrepareEpochFence {
		return AbortRival
	}
	return AbortUnclear
}

// ReinitAfterRival says, from DescribeTransactions before a slot's
// re-initialisation (before: the check that found no other producer) and the
// producer id and epoch the one InitProducerID that re-initialisation sent
// got back, whether another producer initialised the transactional id between
// the two. From Empty, CompleteCommit or CompleteAbort an InitProducerID bumps
// the epoch by exactly one (Apache Kafka and kfake, under both transaction
// versions), and no transaction is open for the coordinator's timeout to
// abort; so a later epoch at the same producer id is another InitProducerID's,
// and that producer has just been fenced by ours. From any other state the
// InitProducerID aborts or waits for a transaction itself, and a new producer
// id (the epoch overflowed, or the id expired) tells nothing: false.
//
// The caller must have sent exactly one InitProducerID: a retried one whose
// first answer was lost bumps twice on its own.
func ReinitAfterRival(before Observation, pid int64, e int16) bool {
	if !before.Found || pid != before.ProducerID {
		return false
	}
	switch before.State {
	case BrokerEmpty, BrokerCompleteCommit, BrokerCompleteAbort:
		return int32(e) > int32(before.ProducerEpoch)+1
	}
	return false
}

// InitSuperseded says, from DescribeTransactions of a transactional id that
// this instance initialised (producer id pid, epoch e) and has opened no
// transaction on since, whether another producer initialised the id after
// it: a later epoch at pid, or another producer id (that producer's
// InitProducerID found the epoch at its limit, or the id expired). Nothing of
// this instance's can move the epoch in between: no transaction of it is
// open for the coordinator's timeout to abort. An id the coordinator does not
// know tells nothing: false.
func InitSuperseded(after Observation, pid int64, e int16) bool {
	if !after.Found {
		return false
	}
	return after.ProducerID != pid || after.ProducerEpoch > e
}

// CommitCheck is what the broker's state right after an EndTxn(commit) that
// the client reported successful says about that commit (CheckCommit).
type CommitCheck uint8

const (
	// CommitConfirmed: PrepareCommit or CompleteCommit at the producer id
	// and the epoch the EndTxn left: e under TV0, e+1 under TV2 (or, TV2
	// at the epoch limit, the new producer id at epoch 0).
	CommitConfirmed CommitCheck = iota
	// CommitEmpty: Empty at that producer id and epoch. Apache Kafka never
	// shows it there (its EndTxn leaves Prepare*/Complete*, measured on
	// 4.3.1 under both versions); kfake shows it after a commit and after
	// an abort alike, so it cannot say. The caller decides (the output: a
	// raw EndTxn(commit) retry with the stored producer id and epoch under
	// TV0, the read_committed probe at the epoch's first offsets under TV2).
	CommitEmpty
	// CommitNotApplied: the transaction is still open at e, ended without
	// a commit (PrepareAbort/CompleteAbort at e or, TV2, e+1), Empty at e
	// after a TV2 bump, or was aborted by the coordinator: the EndTxn did
	// not commit it. The in-doubt path decides.
	CommitNotApplied
	// CommitNotOurs: another producer id, or a later epoch than this
	// EndTxn can have left: another producer initialised the id after it
	// (its next request is fenced). Nothing here tells the commit apart.
	CommitNotOurs
)

var commitCheckNames = [...]string{"confirmed", "empty", "not applied", "not ours"}

func (c CommitCheck) String() string {
	if int(c) < len(commitCheckNames) {
		return commitCheckNames[c]
	}
	return fmt.Sprintf("check(%d)", c)
}

// CheckCommit classifies the broker's state o for r's transactional id right
// after an EndTxn(commit) the client reported successful, before the epoch is
// acked. clientPID/clientEpoch are what the client reports after the EndTxn
// (ok false if it could not say). It also returns the transaction version the
// EndTxn ran under, as the broker shows it (for Confirmed and Empty): a commit
// at e is TV0, at e+1 TV2, whatever r stored (a cluster upgraded or
// downgraded under the slot).
//
// Under TV2 the client's epoch bump alone proves nothing: an abort bumps it
// too (Apache Kafka 4.3.1: CompleteAbort or PrepareAbort at e+1 right after a
// TV2 abort, as CompleteCommit or PrepareCommit at e+1 after a commit). The
// rows, e = r.ProducerEpoch, TV2 meaning the client reported e+1 (or r is TV2):
//
//	PrepareCommit/CompleteCommit at e, no bump        confirmed, TV0
//	PrepareCommit/CompleteCommit at e+1, TV2          confirmed, TV2
//	Empty at e without, or at e+1 after, the bump     empty (kfake only)
//	anything else at e, or at e+1 under TV2           not applied
//	    (under TV2 a commit at e is the previous
//	    transaction's, which ended at our e)
//	Decide says aborted (a coordinator abort)         not applied
//	another producer id, a later epoch                not ours
//
// At the TV2 epoch limit (e >= MaxInt16-1) the EndTxn returns a new producer
// id at epoch 0; the client reporting it, the rows above apply to that id at
// epoch 0 in place of e+1 (Empty there is empty, TV2).
func CheckCommit(r Record, clientPID int64, clientEpoch int16, ok bool, o Observation) (CommitCheck, TxnVersion) {
	e := int32(r.ProducerEpoch)
	oe := int32(o.ProducerEpoch)
	committed := o.State == BrokerCompleteCommit || o.State == BrokerPrepareCommit
	bumped := ok && clientPID == r.ProducerID && int32(clientEpoch) == e+1
	overflow := ok && clientPID != r.ProducerID && clientEpoch == 0 && e >= math.MaxInt16-1
	if o.ProducerID != r.ProducerID {
		if !overflow || o.ProducerID != clientPID || oe != 0 {
			return CommitNotOurs, r.TxnVersion
		}
		switch {
		case committed:
			return CommitConfirmed, TV2
		case o.State == BrokerEmpty:
			// kfake only (Apache Kafka shows CompleteCommit or
			// CompleteAbort at the new id here).
			return CommitEmpty, TV2
		}
		return CommitNotApplied, TV2
	}
	tv2 := bumped || r.TxnVersion == TV2
	switch {
	case committed && oe == e && !bumped:
		return CommitConfirmed, TV0
	case committed && oe == e+1 && tv2:
		return CommitConfirmed, TV2
	case o.State == BrokerEmpty && oe == e && !bumped:
		return CommitEmpty, r.TxnVersion
	case o.State == BrokerEmpty && oe == e+1 && bumped:
		return CommitEmpty, TV2
	case oe == e, oe == e+1 && tv2, Decide(r, o) == FoundAborted:
		return CommitNotApplied, r.TxnVersion
	}
	return CommitNotOurs, r.TxnVersion
}
