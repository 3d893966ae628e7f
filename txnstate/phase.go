package txnstate

import "fmt"

// Phase is where an epoch is in the commit sequence of the brief, in the
// process that runs it (State is what the cache says; Phase is finer and lives
// in memory only).
type Phase uint8

const (
	// PhaseOpen: accepting batches; its records are being produced.
	PhaseOpen Phase = iota
	// PhaseSealed: no more batches; waiting for its records to be acknowledged.
	PhaseSealed
	// PhaseFlushed: every record acknowledged; waiting for the predecessor's
	// EndTxn (step 3).
	PhaseFlushed
	// PhasePrepared: the recovery identity is durable (step 4).
	PhasePrepared
	// PhaseEnding: EndTxn(commit) sent (step 5), no answer yet.
	PhaseEnding
	// PhaseCommitted: EndTxn(commit) succeeded; batches may be acked.
	PhaseCommitted
	// PhaseAborted: aborted before EndTxn(commit); batches are nacked.
	PhaseAborted
	// PhaseInDoubt: the EndTxn(commit) outcome is unknown. Never nacked, never
	// aborted blindly: resolved by a raw EndTxn retry, DescribeTransactions,
	// or the next start.
	PhaseInDoubt
)

var phaseNames = [...]string{"open", "sealed", "flushed", "prepared", "ending", "committed", "aborted", "in-doubt"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// Terminal reports whether nothing follows p.
func (p Phase) Terminal() bool { return p == PhaseCommitted || p == PhaseAborted }

// transitions lists the legal moves. Abort is legal from every phase before
// EndTxn is sent; after it, only the outcome (committed, or aborted when the
// broker says so) or in-doubt is.
var transitions = map[Phase][]Phase{
	PhaseOpen:     {PhaseSealed, PhaseAborted},
	PhaseSealed:   {PhaseFlushed, PhaseAborted},
	PhaseFlushed:  {PhasePrepared, PhaseAborted},
	PhasePrepared: {PhaseEnding, PhaseAborted},
	PhaseEnding:   {PhaseCommitted, PhaseAborted, PhaseInDoubt},
	PhaseInDoubt:  {PhaseCommitted, PhaseAborted},
}

// ErrTransition is returned by Next for an illegal move.
type ErrTransition struct{ From, To Phase }

func (e *ErrTransition) Error() string {
	return fmt.Sprintf("txnstate: illegal epoch transition %s -> %s", e.From, e.To)
}

// Next returns to if p may move there, else an *ErrTransition.
func (p Phase) Next(to Phase) (Phase, error) {
	for _, t := range transitions[p] {
		if t == to {
			return to, nil
		}
	}
	return p, &ErrTransition{From: p, To: to}
}

// MayNack reports whether an epoch in phase p may still nack its batches:
// only before EndTxn(commit) was sent, or after the broker said aborted.
func (p Phase) MayNack() bool {
	return p == PhaseOpen || p == PhaseSealed || p == PhaseFlushed || p == PhasePrepared || p == PhaseAborted
}
