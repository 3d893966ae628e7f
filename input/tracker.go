package input

import (
	"math"
	"sync"
	"time"
)

// span is a consumed range [from, to) of one partition. Emitted batches enter
// as pending; ranges that produce no message (transaction markers, aborted
// records, dropped tombstones, gaps left by compaction or deletion) enter as
// already acked.
type span struct {
	from, to int64
	bytes    int64
	acked    bool
	owner    *partState // an ack for a partition since revoked and reassigned is ignored
}

// partState is the bookkeeping of one partition. All fields are guarded by
// the tracker's mutex.
type partState struct {
	tp
	start int64
	stop  int64 // noStop when unbounded
	// assignment identifies this tracking of the partition (unique per
	// tracker): a partition revoked and assigned again gets a new one, so
	// that spans read under the old assignment are told apart (Span.Assignment).
	assignment uint64

	// position is the next offset the consumer delivers: every offset
	// below it was handed to the pipeline, dropped, or found empty. It never
	// passes the stop: kgo returns whole batches, so its own cursor may.
	position int64
	// ackedTo is the end of the longest acknowledged prefix of spans: the
	// offset to commit. It never passes position, so never the stop.
	ackedTo int64
	spans   []*span // FIFO in offset order, contiguous from ackedTo

	unackedBytes int64
	finished     bool
	paused       bool
	lastAdvance  time.Time

	committed     int64 // the last offset committed (or handed over) by this run, -1 if none
	committedSeen int64 // the group's committed offset at start, -1 if none
	end           int64 // the latest end (LSO or HWM) seen, for lag
	emitted       int64
	lost          int64
	probed        int64 // offsets the probe found empty and consumed

	// lastErr is the last fetch error of the partition and when it came
	// (for the stall warning); stallWarned is when that last warned.
	lastErr     string
	lastErrAt   time.Time
	stallWarned time.Time

	// fencedAt is the tracker's pollSeq when this tracking began: data
	// of a PollFetches numbered at or below it was fetched before it
	// (under an earlier assignment of the partition) and is not its own.
	fencedAt uint64
}

// tracker holds every partition's position and ack FIFO. The fetch loop
// appends spans, ack functions (any goroutine) acknowledge them, the commit
// step reads the acknowledged prefixes, and ReadBatch asks whether a bounded
// read is complete.
type tracker struct {
	mu    sync.Mutex
	parts map[tp]*partState
	order []tp
	// changed is closed and replaced whenever an ack lands or a partition
	// finishes, so that waiters (the end of a bounded read) wake up.
	changed chan struct{}
	// assignments numbers the partitions' trackings (partState.assignment).
	assignments uint64

	// The fetch fence (group_membership). A fetch the loop got from
	// PollFetches before a partition was revoked or lost and then
	// assigned to this member again holds records of the old
	// assignment, from the old position; taken for the new tracking,
	// whose position is the (lower) committed offset, they would make a
	// span [committed, end of the stale records) that the output commits
	// while the records between were never delivered (loss; the new
	// session's fetch of them is then skipped as already consumed). kgo
	// discards its buffered data when it invalidates a partition, before
	// the partition can be assigned again, but not a fetch already
	// returned to the loop (which may hold it for long: send blocks
	// while the pipeline is full, as it is while the broker is down). So
	// the loop numbers its polls (pollSeq), add never runs while a poll
	// is in flight (polling; adding holds the next poll back meanwhile),
	// and a tracking only takes fetches of polls numbered after it
	// began (partState.fencedAt): those polls started after kgo
	// invalidated the old assignment's data.
	pollSeq  uint64
	polling  bool
	adding   int
	pollCond *sync.Cond // on mu: signals polling and adding changes

	// memShare is what the fetch loop's last flow control let all
	// partitions' unacknowledged bytes take under the Go memory limit
	// (math.MaxInt64 without one); the stall check names it.
	memShare int64
}

func newTracker(plans []*partPlan, now time.Time) *tracker {
	t := &tracker{parts: map[tp]*partState{}, changed: make(chan struct{}), memShare: math.MaxInt64}
	t.pollCond = sync.NewCond(&t.mu)
	t.add(plans, now)
	return t
}

// beginPoll marks a PollFetches of the fetch loop in flight; it waits while
// an add waits for the previous poll to end.
func (t *tracker) beginPoll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.adding > 0 {
		t.pollCond.Wait()
	}
	t.polling = true
}

// endPoll marks the poll returned and numbers it: the fetches it returned
// belong to the partitions' trackings that ownerFor accepts for that number.
func (t *tracker) endPoll() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.polling = false
	t.pollSeq++
	t.pollCond.Broadcast()
	return t.pollSeq
}

// ownerFor returns the assignment of p's current tracking if the fetch of
// poll seq belongs to it (fetched after the tracking began); false if p is
// not tracked or the fetch predates its tracking.
func (t *tracker) ownerFor(p tp, seq uint64) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok || seq <= ps.fencedAt {
		return 0, false
	}
	return ps.assignment, true
}

// add starts tracking the partitions of plans, replacing any state they had
// (a partition assigned again after a revoke starts over).
func (t *tracker) add(plans []*partPlan, now time.Time) { t.addWith(plans, now, nil) }

// addWith is add, calling quiet (if not nil) once no poll is in flight and
// before the next one can start: there the consumer's cursor can be moved to
// the plans' starts without a poll returning records from either side of
// the move.
func (t *tracker) addWith(plans []*partPlan, now time.Time, quiet func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Never while a poll is in flight (the fetch fence): PollFetches
	// returns within pollTimeout.
	t.adding++
	for t.polling {
		t.pollCond.Wait()
	}
	if quiet != nil {
		quiet()
	}
	t.adding--
	t.pollCond.Broadcast()
	for _, pp := range plans {
		t.assignments++
		ps := &partState{
			tp:            pp.tp,
			assignment:    t.assignments,
			start:         pp.start,
			stop:          pp.stop,
			position:      pp.start,
			ackedTo:       pp.start,
			committed:     -1,
			committedSeen: pp.committed,
			end:           pp.end,
			lastAdvance:   now,
			fencedAt:      t.pollSeq,
		}
		if pp.stop != noStop && pp.start >= pp.stop {
			// start >= stop: finished before any fetch. The position
			// stays at the start, so nothing beyond it is committed.
			ps.finished = true
		}
		if _, ok := t.parts[pp.tp]; !ok {
			t.order = append(t.order, pp.tp)
		}
		t.parts[pp.tp] = ps
	}
	t.notifyLocked()
}

// remove stops tracking partitions (revoked or lost): later acks of their
// spans are ignored.
func (t *tracker) remove(ps []tp) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gone := map[tp]bool{}
	for _, p := range ps {
		if _, ok := t.parts[p]; ok {
			delete(t.parts, p)
			gone[p] = true
		}
	}
	order := t.order[:0]
	for _, p := range t.order {
		if !gone[p] {
			order = append(order, p)
		}
	}
	t.order = order
	t.notifyLocked()
}

// assignmentOf returns the id of p's current tracking, false if p is not
// tracked (never assigned, revoked or lost).
func (t *tracker) assignmentOf(p tp) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok {
		return 0, false
	}
	return ps.assignment, true
}

// pendingIn reports whether any of ps has unacknowledged spans.
func (t *tracker) pendingIn(ps []tp) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range ps {
		if st, ok := t.parts[p]; ok && len(st.spans) > 0 {
			return true
		}
	}
	return false
}

func (t *tracker) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// changedChan returns a channel closed at the next change.
func (t *tracker) changedChan() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// advance records that [position, to) was consumed; pending spans await an
// ack. It caps to at the stop and finishes the partition on reaching it, and
// returns the span (nil if it was empty).
func (t *tracker) advance(p tp, to int64, bytes int64, pending bool, now time.Time) *span {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok {
		return nil // revoked meanwhile
	}
	return t.advanceLocked(ps, to, bytes, pending, now)
}

// advanceAs is advance for the fetch loop: only if p's tracking is still
// assignment id (current false otherwise: the records were fetched under an
// assignment since revoked or lost, and belong to none now).
func (t *tracker) advanceAs(p tp, id uint64, to int64, bytes int64, pending bool, now time.Time) (s *span, current bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok || ps.assignment != id {
		return nil, false
	}
	return t.advanceLocked(ps, to, bytes, pending, now), true
}

func (t *tracker) advanceLocked(ps *partState, to int64, bytes int64, pending bool, now time.Time) *span {
	if ps.stop != noStop && to > ps.stop {
		to = ps.stop
	}
	if to <= ps.position {
		return nil
	}
	s := &span{from: ps.position, to: to, bytes: bytes, acked: !pending, owner: ps}
	ps.position = to
	ps.lastAdvance = now
	ps.spans = append(ps.spans, s)
	if pending {
		ps.unackedBytes += bytes
	}
	if ps.stop != noStop && ps.position >= ps.stop {
		ps.finished = true
	}
	t.popLocked(ps)
	t.notifyLocked()
	return s
}

// rewind moves p's position back to to after the log was truncated below it
// (an unclean leader election): the offsets from to on now hold records
// written after the truncation, which are read next. Spans at or beyond to
// are dropped (late acks of their batches are ignored) and one straddling it
// ends there; the acknowledged prefix (so the offset to commit) ends at to at
// most.
func (t *tracker) rewind(p tp, to int64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok || to >= ps.position {
		return
	}
	keep := ps.spans[:0]
	for _, s := range ps.spans {
		switch {
		case s.from >= to:
			if !s.acked {
				ps.unackedBytes -= s.bytes
			}
			s.owner = nil
		default:
			s.to = min(s.to, to)
			keep = append(keep, s)
		}
	}
	clear(ps.spans[len(keep):])
	ps.spans = keep
	ps.position = to
	ps.ackedTo = min(ps.ackedTo, to)
	if ps.stop == noStop || to < ps.stop {
		ps.finished = false
	}
	ps.lastAdvance = now
	t.popLocked(ps)
	t.notifyLocked()
}

// hold adds n to what s counts (max_buffered_bytes) until it is acknowledged:
// what the output keeps for the batch's records (handover.Holder). Nothing
// once s was acknowledged, or dropped with p's tracking or a rewind.
func (t *tracker) hold(p tp, s *span, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.acked || s.owner == nil {
		return
	}
	if ps, ok := t.parts[p]; !ok || ps != s.owner {
		return // from a revoked assignment
	}
	s.bytes += n
	s.owner.unackedBytes += n
}

// ack marks s acknowledged and moves the partition's acked prefix.
func (t *tracker) ack(p tp, s *span) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.acked {
		return
	}
	s.acked = true
	ps, ok := t.parts[p]
	if !ok || ps != s.owner {
		return // from a revoked assignment
	}
	ps.unackedBytes -= s.bytes
	t.popLocked(ps)
	t.notifyLocked()
}

func (t *tracker) popLocked(ps *partState) {
	i := 0
	for ; i < len(ps.spans) && ps.spans[i].acked; i++ {
		ps.ackedTo = ps.spans[i].to
	}
	if i > 0 {
		ps.spans = append(ps.spans[:0], ps.spans[i:]...)
	}
}

// positionAs is position for the fetch loop: current is false if p's
// tracking is no longer assignment id.
func (t *tracker) positionAs(p tp, id uint64) (pos, stop int64, finished, current bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok || ps.assignment != id {
		return 0, noStop, true, false
	}
	return ps.position, ps.stop, ps.finished, true
}

// position returns p's position and stop.
func (t *tracker) position(p tp) (pos, stop int64, finished bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.parts[p]
	if !ok {
		return 0, noStop, true // revoked: nothing more to do for it
	}
	return ps.position, ps.stop, ps.finished
}

// allFinished reports whether every partition reached its stop.
func (t *tracker) allFinished() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ps := range t.parts {
		if !ps.finished {
			return false
		}
	}
	return true
}

// allAcked reports whether every partition reached its stop and every span
// was acknowledged.
func (t *tracker) allAcked() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ps := range t.parts {
		if !ps.finished || len(ps.spans) > 0 {
			return false
		}
	}
	return true
}

// toCommit returns the acknowledged positions that differ from what this run
// last committed. A partition that never moved (start >= stop, or nothing
// consumed yet) is left out unless it was finished, so that a run never
// commits an offset it did not reach, and never moves the group's offset
// backwards by merely starting.
func (t *tracker) toCommit() map[tp]int64 { return t.toCommitOf(nil) }

// toCommitOf is toCommit restricted to only (all partitions if nil).
func (t *tracker) toCommitOf(only map[tp]bool) map[tp]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[tp]int64{}
	for _, ps := range t.parts {
		if only != nil && !only[ps.tp] {
			continue
		}
		at := ps.ackedTo
		if at == ps.committed {
			continue
		}
		if at == ps.start && !ps.finished {
			continue
		}
		if at == ps.committedSeen && ps.committed < 0 {
			continue
		}
		if ps.stop != noStop && ps.start > ps.stop {
			continue
		}
		out[ps.tp] = at
	}
	return out
}

// committed records a successful commit.
func (t *tracker) markCommitted(offs map[tp]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, o := range offs {
		if ps, ok := t.parts[p]; ok {
			ps.committed = o
			ps.committedSeen = o
		}
	}
}

// snapshot is a copy of one partition's counters, for metrics and progress.
type snapshot struct {
	tp
	start, stop, position, ackedTo, committed, end int64
	unackedBytes                                   int64
	finished, paused                               bool
	lastAdvance                                    time.Time
	emitted, lost, probed                          int64
	lastErr                                        string
	lastErrAt, stallWarned                         time.Time
}

func (t *tracker) snapshots() []snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]snapshot, 0, len(t.order))
	for _, p := range t.order {
		ps := t.parts[p]
		out = append(out, snapshot{
			tp: p, start: ps.start, stop: ps.stop, position: ps.position, ackedTo: ps.ackedTo,
			committed: ps.committedSeen, end: ps.end, unackedBytes: ps.unackedBytes,
			finished: ps.finished, paused: ps.paused, lastAdvance: ps.lastAdvance,
			emitted: ps.emitted, lost: ps.lost, probed: ps.probed,
			lastErr: ps.lastErr, lastErrAt: ps.lastErrAt, stallWarned: ps.stallWarned,
		})
	}
	return out
}

func (t *tracker) update(p tp, fn func(ps *partState)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ps, ok := t.parts[p]; ok {
		fn(ps)
	}
}
