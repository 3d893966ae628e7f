package output

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/txnstate"
)

// Kafka-to-Kafka mode (consumer_group set): the output is the group's
// handover.CommitTakeover. Every epoch commits, at step 2 of the commit sequence
// (after its records are flushed, before PREPARE), the source offsets it may
// commit (invariant I8) with AddOffsetsToTxn + TxnOffsetCommit on its slot's
// transaction, so that they commit or abort with its records (I3).
//
// What may be committed, per partition, is computed by txnstate.Runs from:
//   - the group's committed offset (fetched at Connect, after recovery and the
//     slots' InitProducerID, then what our commits wrote);
//   - the base: where the input starts reading each partition (StartAt,
//     before any batch of it), so that a partition's run has a known start
//     from its first epoch on, committed offset or not. Offsets below it are
//     not this input's; the base itself is never committed on its own;
//   - the floor: positions the input hands over (CommitOffsets) for ranges
//     acknowledged downstream. Everything below such a position is acked:
//     filtered out, a marker, a stop, or in an epoch that already committed
//     (an ack follows the commit, I2). So the floor may always be committed;
//   - the spans (handover.SpanOf) of epochs that committed without their run
//     being contiguous yet (out-of-order batches), and those of the epoch
//     being committed. Spans of an epoch enter the held set only once it
//     committed: an aborted epoch's ranges are never part of a run.
type k2k struct {
	group string

	mu sync.Mutex
	// committed is the group's committed offset per partition (absent:
	// nothing committed, or unknown).
	committed map[topicPartition]int64
	floor     map[topicPartition]int64
	base      map[topicPartition]int64
	held      []handover.Span
	topicIDs  map[string][16]byte // TxnOffsetCommit v6+ names topics by id
	// admitted is, per partition, the end of the ranges that joined an
	// epoch not aborted (admitLocked).
	admitted map[topicPartition]int64
	// nacked holds, per partition, where the spans this output nacked
	// (refused, aborted with their epoch, or past a gap) start, until a
	// batch reaching past them is admitted: Benthos replays them, after
	// what it already holds.
	nacked  map[topicPartition]map[int64]bool
	changed chan struct{} // closed and replaced when committed moves
	// member is the input's group state when it reads with
	// group_membership (nil otherwise): offsets are then committed only
	// for partitions this member owns, under the assignment their records
	// were read in, with the generation and member id of commit time.
	member handover.GroupState
	// unstarted holds the partitions already warned about: their records
	// came without a start handed over by a kafka_native input of the
	// group (plan).
	unstarted map[topicPartition]bool
	// stampless: the offsets are not committed to a group with a
	// generation (mirror mode writes them to its positions topic), so a
	// member rejoining its group does not hold them back, and the group's
	// committed offsets carry no metadata of this output; ownership is
	// still checked.
	stampless bool
	// unacked holds, per partition, the source offsets of messages that
	// cannot be written (failed back to Benthos for a dead-letter route)
	// until the input hands a position past them over (the route took
	// them). The group's offset is not committed past one (noteUnacked).
	unacked map[topicPartition][]int64
	// through is, per partition, where the last offset committed at an
	// unacknowledged message says the copy reaches (its metadata): every
	// record below it is written or acknowledged, but the unacked ones.
	through map[topicPartition]int64
	// skip holds, per partition, what the group's committed offset said
	// at Connect (its metadata, see heldMeta): records the previous owner
	// wrote past an unacknowledged message, which a replay acknowledges
	// without writing them again, until the input hands a position at
	// or past their end over (the offset may move past them before the
	// replay of the last ones reaches the output).
	skip map[topicPartition]heldMeta
	// handed holds the input batches (spans) a WriteBatch call holds now
	// or one returned nil for, until the committed offset and the input's
	// hand-over passed them; splitErr is set once one reached the output
	// in a second call (a processor split it: see hand).
	handed   map[handover.Span]*handedSpan
	splitErr error
	split    atomic.Bool // splitErr is set
}

func newK2K(group string) *k2k {
	return &k2k{group: group, unacked: map[topicPartition][]int64{}, through: map[topicPartition]int64{}, skip: map[topicPartition]heldMeta{}, topicIDs: map[string][16]byte{}, admitted: map[topicPartition]int64{}, nacked: map[topicPartition]map[int64]bool{}, committed: map[topicPartition]int64{}, floor: map[topicPartition]int64{}, base: map[topicPartition]int64{}, changed: make(chan struct{})}
}

// plannedOffsets is what one epoch commits: the offsets, and per offset the
// group generation and member id to send it with.
type plannedOffset struct {
	txnstate.SourceOffset
	generation int32
	memberID   string
	// assignment is the member's assignment of the partition the offset
	// was planned under (group_membership; 0 otherwise).
	assignment uint64
	// metadata is committed with the offset: empty, or (held at an
	// unacknowledged message) what the copy reaches past it (heldMeta).
	metadata string
	// through is where the copy reaches (the end of the contiguous run),
	// the offset or past it when held.
	through int64
}

// errRevoked is the cause of an epoch aborted because it holds records of a
// partition this member no longer owns under the assignment they were read
// in: committing them without their offsets would copy them twice (the next
// owner reads them again), and with them would commit offsets of a partition
// that is not ours.
var errRevoked = errors.New("kafka_eos: the epoch holds records of a partition this group member no longer owns (revoked or lost)")

// errRejoining is the cause of an epoch aborted because it holds records of
// a partition whose offsets cannot be stamped now: the group member is
// rejoining its group (no member id). Its batches are replayed.
var errRejoining = errors.New("kafka_eos: the group member is rejoining its group; the epoch's offsets cannot be committed now")

// currentLocked reports whether span s was read under the member's current
// assignment of its partition (always true without group_membership).
func (k *k2k) currentLocked(s handover.Span) bool {
	if k.member == nil {
		return true
	}
	id, _, _, ok := k.member.Assignment(s.Topic, s.Partition)
	return ok && id == s.Assignment
}

// staleSpans returns the spans read under an assignment this member no
// longer holds.
func (k *k2k) staleSpans(spans []handover.Span) map[handover.Span]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	var stale map[handover.Span]bool
	for _, s := range spans {
		if !k.currentLocked(s) {
			if stale == nil {
				stale = map[handover.Span]bool{}
			}
			stale[s] = true
		}
	}
	return stale
}

// warnUnstartedLocked says once per partition that its records reached the
// output with no start handed over: in another Benthos build (the
// connect-eos binary refuses such a config at start) this is how a
// consumer_group that names no kafka_native input of the stream shows.
func (k *k2k) warnUnstartedLocked(tp topicPartition, log *service.Logger) {
	if k.unstarted == nil {
		k.unstarted = map[topicPartition]bool{}
	}
	if k.unstarted[tp] || log == nil {
		return
	}
	k.unstarted[tp] = true
	log.Warnf("kafka_eos: consumer group %s: records of %s/%d reached the output, but no kafka_native input of this stream handed over where it reads that partition for group %s (does the input's consumer_group name the same group?): no source offset of it is committed, and the copy is at-least-once", k.group, tp.topic, tp.partition, k.group)
}

// plan computes the offsets epoch spans let us commit now. It changes
// nothing: commitDone does, once the epoch committed.
func (k *k2k) plan(spans []handover.Span, log *service.Logger) ([]plannedOffset, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	// The member's state is read once per partition: the input changes it
	// concurrently, and the check of the epoch's spans and the stamping of
	// their offsets must see the same answer (a partition found owned for
	// its spans and not owned for its offsets would commit records
	// without offsets).
	type ownership struct {
		id    uint64
		gen   int32
		mem   string
		owned bool
	}
	owners := map[topicPartition]ownership{}
	ownerOf := func(tp topicPartition) ownership {
		o, ok := owners[tp]
		if !ok {
			o.id, o.gen, o.mem, o.owned = k.member.Assignment(tp.topic, tp.partition)
			owners[tp] = o
		}
		return o
	}
	if k.member != nil {
		for _, s := range spans {
			if o := ownerOf(topicPartition{s.Topic, s.Partition}); !o.owned || o.id != s.Assignment {
				return nil, fmt.Errorf("%w: %s/%d [%d, %d)", errRevoked, s.Topic, s.Partition, s.From, s.To)
			}
		}
	}
	var r txnstate.Runs
	for tp, c := range k.committed {
		r.SetCommitted(tp.topic, tp.partition, c)
	}
	for tp, f := range k.floor {
		r.SetCommitted(tp.topic, tp.partition, f)
	}
	for tp, b := range k.base {
		r.SetCommitted(tp.topic, tp.partition, b)
	}
	for tp, t := range k.through {
		// Everything below is written or acknowledged, but the
		// unacknowledged messages, which hold the offset instead.
		r.SetCommitted(tp.topic, tp.partition, t)
	}
	for _, s := range k.held {
		if err := r.Add(s.Topic, s.Partition, s.From, s.To); err != nil {
			log.Warnf("kafka_eos: group %s: %v (held span ignored: its partition's offset stays put until the input reports past it)", k.group, err)
		}
	}
	// The generation and member id stamped on the epoch's batches at fetch
	// time (KIP-447); the latest generation wins within a partition.
	type gm struct {
		gen int32
		mem string
	}
	stamp := map[topicPartition]gm{}
	for _, s := range spans {
		if err := r.Add(s.Topic, s.Partition, s.From, s.To); err != nil {
			log.Warnf("kafka_eos: group %s: %v (span ignored: its partition's offset stays put until the input reports past it)", k.group, err)
			continue
		}
		tp := topicPartition{s.Topic, s.Partition}
		if cur, ok := stamp[tp]; !ok || s.Generation > cur.gen {
			stamp[tp] = gm{s.Generation, s.MemberID}
		}
	}
	targets := map[topicPartition]int64{}
	for _, so := range r.Next() {
		targets[topicPartition{so.Topic, so.Partition}] = so.Offset
	}
	for tp, f := range k.floor {
		if t, ok := targets[tp]; !ok || f > t {
			targets[tp] = f
		}
	}
	for tp, th := range k.through {
		// Held at an unacknowledged message, the copy reached th: once
		// it is acknowledged, the offset moves there, never to a
		// floor below it (the records between would be written again
		// after a crash).
		if t, ok := targets[tp]; (!ok || th > t) && th > k.committed[tp] {
			targets[tp] = th
		}
	}
	var out []plannedOffset
	for tp, off := range targets {
		c, known := k.committed[tp]
		if _, ok := k.floor[tp]; ok {
			known = true
		}
		if _, ok := k.base[tp]; ok {
			known = true
		}
		if !known {
			// Nothing committed, no start and nothing handed over:
			// where the input started is unknown, and the lowest span
			// held may not be it (batches arrive out of order). Wait
			// for a hand-over rather than skip a range. (kafka_native
			// hands its starts over before any batch: this is a
			// message stamped by something else.)
			k.warnUnstartedLocked(tp, log)
			continue
		}
		// An unacknowledged message below the run's end holds the
		// offset at it: the copy's reach past it goes in the metadata.
		end, meta := off, ""
		if held := k.heldLocked(tp, c, end); len(held) > 0 {
			if len(held) > maxHeldListed {
				end, held = held[maxHeldListed], held[:maxHeldListed]
			}
			off, meta = held[0], heldMeta{from: held[0], through: end, unacked: held}.String()
			if off <= c && end <= k.through[tp] {
				continue // nothing new
			}
		} else if off <= c {
			continue // never backwards, nothing new
		}
		// A partition advanced only by the floor (or by spans of earlier
		// epochs) carries no stamp of this epoch: it is sent without
		// group metadata (generation -1, no member id), which the
		// coordinator accepts for transactional commits.
		st, ok := stamp[tp]
		if !ok {
			st = gm{-1, ""}
		}
		var assignment uint64
		if k.member != nil {
			// KIP-447 with the group state of commit time: a
			// partition of this member is committed with the current
			// generation (a batch fetched before a rebalance that kept
			// the partition carries a stale one, which the coordinator
			// rejects with ILLEGAL_GENERATION); one it does not own is
			// not committed at all (an unstamped commit would bypass
			// the coordinator's fencing and could move the offset
			// behind the new owner).
			o := ownerOf(tp)
			id, gen, mem := o.id, o.gen, o.mem
			if !o.owned {
				continue
			}
			if (gen < 0 || mem == "") && !k.stampless {
				// The member is rejoining: nothing can be stamped.
				// A partition with records in this epoch aborts it
				// (replayed later, never records without offsets);
				// one only handed over waits for a later epoch.
				if _, ok := stamp[tp]; ok {
					return nil, fmt.Errorf("%w: %s/%d", errRejoining, tp.topic, tp.partition)
				}
				continue
			}
			st, assignment = gm{gen, mem}, id
		}
		out = append(out, plannedOffset{SourceOffset: txnstate.SourceOffset{Topic: tp.topic, Partition: tp.partition, Offset: off}, generation: st.gen, memberID: st.mem, assignment: assignment, metadata: meta, through: end})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// restamp returns offs with the generation and member id of now, if the
// member still owns every partition of offs under the assignment they were
// planned in and the generation moved; false otherwise. An epoch whose
// TxnOffsetCommit met a rebalance (ILLEGAL_GENERATION) that left its
// partitions with this member is committed under the new generation rather
// than aborted.
func (k *k2k) restamp(offs []plannedOffset) ([]plannedOffset, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.member == nil {
		return nil, false
	}
	out := slices.Clone(offs)
	moved := false
	for i, po := range out {
		id, gen, mem, owned := k.member.Assignment(po.Topic, po.Partition)
		if !owned || id != po.assignment {
			return nil, false
		}
		if gen < 0 || mem == "" {
			return out, false // rejoining: ask again
		}
		if gen != po.generation || mem != po.memberID {
			moved = true
		}
		out[i].generation, out[i].memberID = gen, mem
	}
	return out, moved
}

// forget drops what is held for partitions this member gave up: their
// offsets are another member's to commit now, and if they come back the
// input hands their new starts over.
func (k *k2k) forget(parts map[string][]int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	gone := map[topicPartition]bool{}
	for t, ps := range parts {
		for _, p := range ps {
			tp := topicPartition{t, p}
			gone[tp] = true
			delete(k.floor, tp)
			delete(k.base, tp)
			delete(k.admitted, tp)
			delete(k.nacked, tp)
			delete(k.committed, tp)
			delete(k.unacked, tp)
			delete(k.through, tp)
			delete(k.skip, tp)
		}
	}
	for s := range k.handed {
		if gone[topicPartition{s.Topic, s.Partition}] {
			delete(k.handed, s)
		}
	}
	k.held = slices.DeleteFunc(k.held, func(s handover.Span) bool { return gone[topicPartition{s.Topic, s.Partition}] })
	k.signalLocked()
}

// holds reports whether any of spans belongs to parts.
func holds(spans []handover.Span, parts map[string][]int32) bool {
	for _, s := range spans {
		if slices.Contains(parts[s.Topic], s.Partition) {
			return true
		}
	}
	return false
}

// commitDone records a committed epoch: its spans are held (until the
// committed offsets pass them) and its offsets are the group's.
func (k *k2k) commitDone(spans []handover.Span, offs []plannedOffset) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, o := range offs {
		tp := topicPartition{o.Topic, o.Partition}
		if c, ok := k.committed[tp]; !ok || o.Offset > c {
			k.committed[tp] = o.Offset
		}
		if o.through > k.through[tp] {
			k.through[tp] = o.through
		}
		// What the offset's metadata said at Connect (skip) stays
		// when the offset moves past it: the input may still replay
		// records below it (read before the route took the message
		// that held the offset), which the previous owner wrote.
		// addFloor drops it once the input hands its end over.
	}
	k.held = append(k.held, spans...)
	kept := k.held[:0]
	for _, s := range k.held {
		c, ok := k.committed[topicPartition{s.Topic, s.Partition}]
		f, fok := k.floor[topicPartition{s.Topic, s.Partition}]
		b, bok := k.base[topicPartition{s.Topic, s.Partition}]
		t, tok := k.through[topicPartition{s.Topic, s.Partition}]
		if (ok && s.To <= c) || (fok && s.To <= f) || (bok && s.To <= b) || (tok && s.To <= t) {
			continue
		}
		kept = append(kept, s)
	}
	clear(k.held[len(kept):])
	k.held = kept
	if len(offs) > 0 {
		k.signalLocked()
	}
}

func (k *k2k) signalLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *k2k) resetAdmitted() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.admitted)
	k.signalLocked()
}

// admissible reports whether every span starts at or below where its
// partition's contiguous run can reach (committed, handed over, or admitted
// into a live epoch, or reached by the batch's own earlier spans: output
// batching puts consecutive input batches of a partition in one batch), and
// admits them if so. A partition with nothing known admits anything (see
// plan).
func (k *k2k) admissible(spans []handover.Span) (bool, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, blocked := k.reachLocked(spans); len(blocked) > 0 {
		return false, k.changed
	}
	k.admitLocked(spans)
	return true, k.changed
}

// reachable reports, per span, whether it starts at or below where its
// partition's run reaches with the batch's own earlier spans (admissible):
// a span past a gap is not, nor is any later one of its partition. It admits
// nothing. queued reports whether every gap the batch waits on starts where
// a span this output nacked starts: Benthos replays that span after the
// batches it already holds, so with none of those able to reach the output
// meanwhile, waiting for it cannot help.
func (k *k2k) reachable(spans []handover.Span) (ok []bool, queued bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ok, blocked := k.reachLocked(spans)
	queued = len(blocked) > 0
	for tp, r := range blocked {
		queued = queued && k.nacked[tp][r]
	}
	return ok, queued
}

// reachLocked returns reachable's answer per span, and where the run of each
// partition with a span past a gap ends (the gap's start).
func (k *k2k) reachLocked(spans []handover.Span) ([]bool, map[topicPartition]int64) {
	ok := make([]bool, len(spans))
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(spans[a].From, spans[b].From) })
	reach := map[topicPartition]int64{}
	var blocked map[topicPartition]int64
	for _, i := range order {
		s := spans[i]
		tp := topicPartition{s.Topic, s.Partition}
		if _, past := blocked[tp]; past {
			continue
		}
		r, seen := reach[tp]
		if !seen {
			c, known := k.committed[tp]
			f, fok := k.floor[tp]
			b, bok := k.base[tp]
			if !known && !fok && !bok {
				ok[i] = true
				continue
			}
			r = max(c, f, b, k.admitted[tp])
		}
		if s.From > r {
			if blocked == nil {
				blocked = map[topicPartition]int64{}
			}
			blocked[tp] = r
			continue
		}
		ok[i] = true
		reach[tp] = max(r, s.To)
	}
	return ok, blocked
}

// admit records spans as admitted into a live epoch.
func (k *k2k) admit(spans []handover.Span) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.admitLocked(spans)
}

func (k *k2k) admitLocked(spans []handover.Span) {
	for _, s := range spans {
		tp := topicPartition{s.Topic, s.Partition}
		k.admitted[tp] = max(k.admitted[tp], s.To)
		for from := range k.nacked[tp] {
			if from < s.To {
				delete(k.nacked[tp], from)
			}
		}
	}
	k.signalLocked()
}

// nack records spans as nacked (see k2k.nacked).
func (k *k2k) nack(spans []handover.Span) {
	if len(spans) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range spans {
		tp := topicPartition{s.Topic, s.Partition}
		if k.nacked[tp] == nil {
			k.nacked[tp] = map[int64]bool{}
		}
		k.nacked[tp][s.From] = true
	}
	k.signalLocked()
}

// dropStaleLocked drops of w the input batches (spans) read under an
// assignment this member no longer holds (group_membership: revoked or lost,
// possibly assigned again since): their messages are acknowledged without
// being written (marked done, their records and spans removed), and it
// reports whether nothing of w is left to join (every span stale). That is
// safe: the input ignores the ack (it stopped tracking that assignment before
// the output learned of the revoke), so no offset is ever committed on its
// strength; the group's committed offset is either at or below the span's
// From, and the partition's next owner (another member, or this one under a
// new assignment, which starts from the committed offset) reads it again, or
// above it, which by I8 means an epoch committed those records with their
// offsets already. Writing it instead would commit records without their
// offsets (the next owner copies them again). A batch that merges input
// batches of partitions still owned with stale ones (output batching, or a
// processor merging partitions) writes the owned ones: nacked whole, it came
// back merged the same way, for good (the input's retry list replays the
// rejected input batches together, and the owned partition stalled). mask, when not nil, is admitLocked's per span and is
// returned for the spans kept. Called with o.mu held.
func (o *output) dropStaleLocked(w *write, mask []bool) ([]bool, bool) {
	stale := o.k2k.staleSpans(w.spans)
	if len(stale) == 0 {
		return mask, false
	}
	o.m.k2kRebalanceEvent(k2kDroppedBatch)
	for s := range stale {
		o.log.Debugf("kafka_eos: group %s: batch of %s/%d [%d, %d) read under an assignment this member no longer holds: dropped (the partition's owner reads it again)", o.k2k.group, s.Topic, s.Partition, s.From, s.To)
	}
	for i, msg := range w.batch {
		if s, ok := handover.SpanOf(msg); ok && stale[s] {
			if w.done == nil {
				w.done = make(map[int]bool)
			}
			w.done[i] = true
		}
	}
	var keep []handover.Span
	var keepMask []bool
	for i, s := range w.spans {
		if stale[s] {
			continue
		}
		keep = append(keep, s)
		if mask != nil {
			keepMask = append(keepMask, mask[i])
		}
	}
	w.spans = keep
	w.dropRecords(func(i int) bool { return w.done[i] })
	return keepMask, len(keep) == 0
}

// admitWait bounds how long a batch ahead of its partition's run waits for
// its predecessor. The waiting batch gives its turn to write up meanwhile
// (see spareCalls), so that the predecessor can reach the output; Benthos
// may still hold it behind the waiting batch when every call it may make at
// once (max_in_flight plus spareCalls) waits.
const admitWait = 5 * time.Second

// admitWaitFull is the wait instead of admitWait when every other
// WriteBatch call Benthos may make at once (max_in_flight plus spareCalls)
// already waits: no other batch can bring the predecessor then, only a
// hand-over of positions (a range filtered out upstream) can.
const admitWaitFull = time.Second

// admitWaitQueued is the wait instead of admitWaitFull when every gap the
// batch waits on starts at a batch this output nacked (see admitLocked): long
// enough for the pipeline to hand the replayed batch over next, short enough
// that a batch for each one read meanwhile does not add up to seconds.
const admitWaitQueued = 100 * time.Millisecond

// ErrOutOfOrder is wrapped by the error of a batch that waited admitWait for
// the batch before it in its partition, or of the messages of a batch that
// lie past a gap its other messages do not fill (admitLocked): they are
// nacked, not written, so that Benthos replays them after their predecessor
// (its retry queue is in nack order). Joining out of order
// instead would break per-partition order and let an epoch commit records
// past the offsets it commits (a crash then copies them again): both were
// seen in the chaos suite.
var ErrOutOfOrder = errors.New("kafka_eos: batch ahead of its partition's committed run")

// admitLocked makes a batch whose ranges are ahead of their partition's run
// (several pipeline threads, batches in flight or a replayed nack reorder
// them) wait until its predecessor joined an epoch, was handed over, or
// committed, so that an epoch never commits records past the offsets it
// commits. After admitWait the batch is nacked with ErrOutOfOrder (counted
// and logged). A batch of which some spans continue their partition's run
// and others lie past a gap (output batching merges input batches) does not
// wait: those join, the others are nacked (the mask says which spans may
// join; they are not admitted yet: see k2kMode.admit). Called with o.mu
// held, after joinLocked; it returns the epoch to join (the open one may
// have changed while it waited), and a nil mask when every span joins.
func (o *output) admitLocked(ctx context.Context, spans []handover.Span, ep *epoch, t *turn) (*epoch, []bool, error) {
	var (
		timer   *time.Timer
		waited  time.Duration
		started time.Time
		short   bool // the wait was cut to admitWaitQueued
	)
	for {
		ok, ch := o.k2k.admissible(spans)
		if ok {
			return ep, nil, nil
		}
		mask, queued := o.k2k.reachable(spans)
		if slices.Contains(mask, true) {
			// Some of its input batches continue their partitions'
			// runs, others lie past a gap (output batching merges
			// what Benthos replays one by one with what it read
			// meanwhile). Waiting helps nobody: the batches that
			// would fill the gap may continue the ones this batch
			// holds, which join only once it does (and with
			// max_in_flight 1 they cannot even reach the output
			// while it waits). What continues its run joins now;
			// the rest is nacked, to come back after the gap.
			o.m.k2kOutOfOrder()
			o.log.Debugf("kafka_eos: group %s: a batch holds input batches past a gap in their partition: those are nacked, to be replayed after the batches before them; the others are written", o.k2k.group)
			return ep, mask, nil
		}
		others := o.admitWaiting // the other batches that wait
		if timer != nil {
			others--
		}
		full := others+1 >= o.calls
		if timer == nil {
			waited = admitWait
			if full {
				// Every other WriteBatch Benthos may run at once
				// already waits: the predecessor may be queued
				// behind us (seen on a loaded machine with two
				// pipeline threads and max_in_flight 1, before
				// the spare calls: bursts of admitWait stalls).
				// Wait admitWaitFull only: what these waits need
				// most of the time (a hand-over of a range filtered
				// out upstream, a predecessor in another slot)
				// arrives well within it. Not nacked at once: every
				// nack is a replay by the input's retry list after a
				// growing wait (internal/retrynacks), and a storm of
				// immediate nacks stalled a filtered copy for
				// minutes (behind Benthos' list, which slept half a
				// second per replay with its lock held).
				waited = admitWaitFull
			}
			o.admitWaiting++
			defer func() { o.admitWaiting-- }() // o.mu is held at every return
			started = time.Now()
			timer = time.NewTimer(waited)
			defer timer.Stop()
		}
		if full && queued && !short {
			// Every gap starts at a batch this output nacked, which
			// Benthos replays after what it already holds, and no
			// other WriteBatch can bring it meanwhile: waiting longer
			// than the pipeline needs to hand the next batch over
			// only delays the replay (after an aborted epoch with
			// max_in_flight 1, a second for each batch read
			// meanwhile made the copy crawl past its bound).
			short = true
			if admitWaitQueued < waited {
				timer.Reset(max(admitWaitQueued-time.Since(started), 0))
				waited = admitWaitQueued
			}
		}
		// Give the turn up while waiting: the batch waited for may
		// need it (with max_in_flight 1 always; see spareCalls).
		t.give()
		o.mu.Unlock()
		forced := false
		select {
		case <-ch:
		case <-timer.C:
			forced = true
		case <-ctx.Done():
			o.mu.Lock()
			return nil, nil, ctx.Err()
		case <-o.closedCh:
		}
		if err := t.take(ctx); err != nil {
			o.mu.Lock()
			return nil, nil, err
		}
		o.mu.Lock()
		var err error
		if ep, err = o.joinLocked(ctx); err != nil {
			return nil, nil, err
		}
		if forced {
			if ok, _ := o.k2k.admissible(spans); ok {
				return ep, nil, nil
			}
			if o.turns != nil && o.unadmitted.Load() > int64(o.admitWaiting) {
				// A call that does not wait for its predecessor
				// has not joined yet: it waits for a turn to
				// write, behind batches that write (they finish
				// on their own, within the transaction timeout),
				// or is about to join, and may hold the batch
				// this one waits for. Nacked, this one would
				// only come back behind it (seen with an epoch
				// flushing for seconds: every batch then in the
				// spare calls was nacked).
				timer.Reset(waited)
				continue
			}
			o.m.k2kOutOfOrder()
			if mask, _ := o.k2k.reachable(spans); slices.Contains(mask, true) {
				return ep, mask, nil // partly admissible now: see above
			}
			if short {
				o.log.Debugf("kafka_eos: group %s: a batch lies past a batch the output nacked, which Benthos replays after what it holds: nacked after %v", o.k2k.group, waited)
				return nil, nil, fmt.Errorf("%w: the batch before it was nacked and is replayed after it; waited %v, nacked to be replayed after that one", ErrOutOfOrder, waited)
			}
			o.log.Warnf("kafka_eos: group %s: a batch waited %v for the batch before it; nacked so that it is replayed after it", o.k2k.group, waited)
			return nil, nil, fmt.Errorf("%w: waited %v for the batch before it, nacked to be replayed after it", ErrOutOfOrder, waited)
		}
	}
}

// startAt records where the input starts partitions (replacing what an
// earlier assignment said).
func (k *k2k) startAt(starts map[string]map[int32]int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for t, ps := range starts {
		for p, off := range ps {
			tp := topicPartition{t, p}
			k.base[tp] = off
			// A new assignment (or the first): what an earlier one
			// admitted or handed over says nothing about this one's
			// batches.
			delete(k.admitted, tp)
			delete(k.floor, tp)
			delete(k.nacked, tp)
			// What the group's offset's metadata said (at Connect, or
			// fetched for this assignment) holds for the records the
			// input reads below its reach; the unacknowledged
			// messages below the start are not read again.
			if h, ok := k.skip[tp]; ok && off < h.through {
				keep := func(x int64) bool { return x < off }
				h.unacked = slices.DeleteFunc(slices.Clone(h.unacked), keep)
				k.skip[tp] = h
				k.unacked[tp] = slices.DeleteFunc(k.unacked[tp], keep)
			} else {
				delete(k.skip, tp)
				delete(k.through, tp)
				delete(k.unacked, tp)
			}
		}
	}
	k.signalLocked()
}

// addFloor takes acknowledged positions (max with what is held) and reports
// whether any is not committed yet.
func (k *k2k) addFloor(offsets map[string]map[int32]int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	pending := false
	for t, ps := range offsets {
		for p, off := range ps {
			tp := topicPartition{t, p}
			if k.member != nil {
				if _, _, _, owned := k.member.Assignment(t, p); !owned {
					continue // a late hand-over of a partition given up
				}
			}
			if f, ok := k.floor[tp]; !ok || off > f {
				k.floor[tp] = off
				k.signalLocked()
			}
			// Acknowledged: a dead-letter route took the messages
			// below it that could not be written.
			if u := k.unacked[tp]; len(u) > 0 {
				k.unacked[tp] = slices.DeleteFunc(u, func(x int64) bool { return x < k.floor[tp] })
			}
			// Every replay of the records the previous owner wrote
			// past its held offset is acknowledged: none comes again.
			if h, ok := k.skip[tp]; ok && k.floor[tp] >= h.through {
				delete(k.skip, tp)
			}
			// Nothing committed reads as 0: nothing lies below it.
			if k.floor[tp] > k.committed[tp] {
				pending = true
			}
		}
	}
	k.pruneHandedLocked()
	return pending
}

// covered reports whether every position of offsets is committed, and the
// channel closed at the next change.
func (k *k2k) covered(offsets map[string]map[int32]int64) (bool, <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for t, ps := range offsets {
		for p, off := range ps {
			if k.member != nil {
				if _, _, _, owned := k.member.Assignment(t, p); !owned {
					continue // given up: the new owner commits it
				}
			}
			if k.committed[topicPartition{t, p}] < off {
				return false, k.changed
			}
		}
	}
	return true, k.changed
}

// fetchStableOffsets fetches the group's committed offsets, pending
// transactional commits resolved (RequireStable), retrying retriable errors
// until ctx ends.
func (o *output) fetchStableOffsets(ctx context.Context) (kadm.OffsetResponses, error) {
	var resp kadm.OffsetResponses
	err := retryRetriable(ctx, func() error {
		var err error
		resp, err = kadm.NewClient(o.admin).FetchOffsets(kadm.RequireStable(ctx), o.k2k.group)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	return resp, err
}

// loadCommitted reads the group's committed offsets (stable: pending
// transactional commits resolved) at Connect, after recovery.
func (o *output) loadCommitted(ctx context.Context) error {
	k := o.k2k
	// A fresh group's coordinator may not be available yet: retried.
	resp, err := o.fetchStableOffsets(ctx)
	if err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil
		}
		return fmt.Errorf("kafka_eos: fetching the committed offsets of group %s: %w", k.group, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	resp.Each(func(r kadm.OffsetResponse) { k.takeCommittedLocked(r) })
	return nil
}

// takeCommittedLocked records a committed offset of the group read from the
// broker, and what its metadata says when it is held at an unacknowledged
// message (heldMeta).
func (k *k2k) takeCommittedLocked(r kadm.OffsetResponse) {
	if r.At < 0 {
		return
	}
	tp := topicPartition{r.Topic, r.Partition}
	if c, ok := k.committed[tp]; ok && r.At < c {
		return
	}
	k.committed[tp] = r.At
	if h, ok := parseHeldMeta(r.Metadata, r.At); ok && !k.stampless {
		k.takeHeldLocked(tp, h)
	}
}

// takeHeldLocked takes what a committed offset (or mirror position) held at
// an unacknowledged message says: the records written past it are skipped,
// and the offset stays held at the unacknowledged ones.
func (k *k2k) takeHeldLocked(tp topicPartition, h heldMeta) {
	k.skip[tp] = h
	k.through[tp] = h.through
	k.unacked[tp] = slices.Clone(h.unacked)
}

// loadHeld reads, for partitions a group member was just assigned, the
// group's committed offsets and their metadata (an offset held at an
// unacknowledged message by their previous owner): read at Connect, they may
// have moved since. Without group_membership the partitions are the ones
// Connect read. A failure is logged: the records the previous owner wrote
// past such a message are then written again (never lost).
func (o *output) loadHeld(starts map[string]map[int32]int64) {
	k := o.k2k
	k.mu.Lock()
	member := k.member != nil && !k.stampless
	k.mu.Unlock()
	if !member || len(starts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := o.fetchStableOffsets(ctx)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		o.log.Warnf("kafka_eos: group %s: reading the committed offsets of the partitions assigned (%v): %v; records written past a message a dead-letter route had not acknowledged are written again", k.group, starts, err)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	resp.Each(func(r kadm.OffsetResponse) {
		if _, ok := starts[r.Topic][r.Partition]; !ok {
			return
		}
		if _, held := parseHeldMeta(r.Metadata, r.At); held {
			k.takeCommittedLocked(r)
		}
	})
}

// Ready implements handover.CommitTakeover: it returns once the output's
// Connect-time recovery finished (and the group's committed offsets are
// final).
func (o *output) Ready(ctx context.Context) error {
	select {
	case <-o.readyCh:
		return nil
	case <-o.closedCh:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StartAt implements handover.CommitTakeover: where the input starts reading
// partitions, handed over before any batch of them. It makes every epoch's
// offsets committable from the partition's first batch on, committed offset or
// not (before it, such epochs committed records without offsets).
func (o *output) StartAt(starts map[string]map[int32]int64) {
	if o.mirror != nil {
		if err := o.mirror.checkStarts(starts); err != nil {
			o.log.Errorf("%v", err)
			_ = o.stop(err, true)
			return
		}
	}
	if o.k2k != nil {
		o.loadHeld(starts)
		o.k2k.startAt(starts)
	}
}

// Member implements handover.CommitTakeover: the input reads as a group member.
func (o *output) Member(m handover.GroupState) {
	if k := o.k2k; k != nil {
		k.mu.Lock()
		k.member = m
		k.mu.Unlock()
	}
}

// Revoked implements handover.CommitTakeover: the member gave parts up. What
// this output held for them is forgotten; the open epoch is sealed if it holds
// their records, and Revoked waits (up to ctx) until every epoch that holds
// their records or is already committing has finished, so that nothing of
// ours commits offsets of them once the member rejoins the group. Epochs past
// their TxnOffsetCommit commit (under the generation still current); the
// others abort at their commit (errRevoked), and batches of the partitions
// that arrive later are dropped (WriteBatch). It needs nothing from the input.
func (o *output) Revoked(ctx context.Context, parts map[string][]int32) {
	k := o.k2k
	if k == nil || len(parts) == 0 {
		return
	}
	k.forget(parts)
	o.mu.Lock()
	var waits []*epoch
	for _, ep := range o.live {
		if !holds(ep.spans(), parts) && !ep.sealed {
			continue
		}
		if !ep.sealed {
			o.sealLocked(ep)
		}
		waits = append(waits, ep)
	}
	o.mu.Unlock()
	for _, ep := range waits {
		select {
		case <-ep.done:
		case <-o.closedCh:
			return
		case <-ctx.Done():
			o.m.k2kRebalanceEvent(k2kRevokeWaitTimeout)
			o.log.Warnf("kafka_eos: group %s: revoke of %v: epoch %d still not finished (%v); the rebalance goes on", k.group, parts, ep.n, ctx.Err())
			return
		}
	}
	o.log.Debugf("kafka_eos: group %s: revoke of %v: %d epochs finished", k.group, parts, len(waits))
	if o.mirror != nil {
		// No epoch holds their records any more, and none will:
		// say so in the positions topic, so that their next owner
		// need not fence this process.
		o.mirror.release(ctx, parts)
	}
}

// CommitOffsets implements handover.CommitTakeover: positions acknowledged
// downstream, committed with the next epoch (one of offsets only if no epoch
// is open). With a deadline on ctx it returns once they are committed.
func (o *output) CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error {
	k := o.k2k
	if k == nil {
		return errors.New("kafka_eos: no consumer_group")
	}
	if !k.addFloor(offsets) {
		_ = o.stopIfSplitDrained() // committed already
		return nil
	}
	defer func() { _ = o.stopIfSplitDrained() }()
	_, wait := ctx.Deadline()
	for {
		if err := o.ensureEpoch(ctx); err != nil {
			return err
		}
		if !wait {
			return nil
		}
		ok, ch := k.covered(offsets)
		if ok {
			return nil
		}
		// Re-check now and then: the epoch that was to carry the
		// offsets may have aborted (then another one is opened).
		select {
		case <-ch:
		case <-time.After(o.conf.epochInterval + 50*time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("kafka_eos: committing the offsets of group %s: %w", k.group, ctx.Err())
		case <-o.closedCh:
			return ErrClosed
		}
		if ok, _ := k.covered(offsets); ok {
			return nil
		}
	}
}

// ensureEpoch makes sure an epoch that has not reached its commit yet will
// carry the pending offsets: the open one, or a new one (sealed at once if no
// batch is in flight: an epoch of offsets only).
func (o *output) ensureEpoch(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopErr != nil {
		return o.stopErr
	}
	if o.open != nil {
		return nil
	}
	ep, err := o.joinLocked(ctx)
	if err != nil {
		return err
	}
	if o.shouldSealLocked(ep) {
		o.sealLocked(ep)
	}
	return nil
}

// k2kMode is the Kafka-to-Kafka mode's side of the write path (see mode):
// every batch carries the spans of its source ranges (handover.SpanOf); a
// batch joins an epoch only once its predecessor in each partition did
// (admitLocked), so that an epoch never commits records past the offsets it
// commits, and each epoch commits, inside its transaction, the offsets its
// spans and what the input handed over let it commit (k2k.plan).
type k2kMode struct {
	o *output
	k *k2k
}

func (m *k2kMode) connect(ctx context.Context) error { return m.o.loadCommitted(ctx) }

// read takes the spans of the batch's messages, of every message: a message
// that cannot be written does not hold its partition's records back (holding
// them back would send them to a dead-letter output with it, since Benthos
// reports errors per input batch under output batching). It holds the
// partition's offset back instead: the message itself is never acknowledged,
// so that a dead-letter output takes it (see ErrCannotWrite), and until the
// input hands a position past it over (the route took it) the group's offset
// is committed at it, with what the copy reaches past it in its metadata
// (noteUnacked, heldMeta). A replay of a record written past such a message
// (the next owner reads from it again) is acknowledged without being written
// again (skipHeld).
//
// The records are put in source order: per source partition by span, each
// input batch's in its own order. A batch that merges input batches (output
// batching) holds them in the order Benthos merged them, which after a nack
// is the order the input's retry list replays them in (the order read among
// the batches due together, internal/retrynacks), not always theirs.
func (m *k2kMode) read(w *write) {
	m.k.skipHeld(w, m.o)
	m.k.noteUnacked(w)
	m.k.failSiblings(w)
	sorted := true
	for i, msg := range w.batch {
		if w.done[i] {
			continue // committed already, with its span
		}
		s, ok := handover.SpanOf(msg)
		if !ok {
			continue
		}
		n := len(w.spans)
		if n > 0 && w.spans[n-1] == s {
			continue
		}
		for _, e := range slices.Backward(w.spans) {
			if e.Partition == s.Partition && e.Topic == s.Topic {
				sorted = sorted && e.From <= s.From
				break
			}
		}
		w.spans = append(w.spans, s)
	}
	if !sorted {
		sortBySource(w)
	}
	w.handed = m.k.hand(w, m.o)
}

// sortBySource reorders w's records (a stable sort: each input batch's stay
// in their order) by source partition (records of messages without a span
// first), and within one by span.
func sortBySource(w *write) {
	spanOf := make([]handover.Span, len(w.batch))
	for i, msg := range w.batch {
		spanOf[i], _ = handover.SpanOf(msg)
	}
	idx := make([]int, len(w.recs))
	for j := range idx {
		idx[j] = j
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		sa, sb := spanOf[w.msgOf[a]], spanOf[w.msgOf[b]]
		return cmp.Or(cmp.Compare(sa.Topic, sb.Topic), cmp.Compare(sa.Partition, sb.Partition), cmp.Compare(sa.From, sb.From))
	})
	recs := make([]*kgo.Record, len(idx))
	msgOf := make([]int, len(idx))
	for j, k := range idx {
		recs[j], msgOf[j] = w.recs[k], w.msgOf[k]
	}
	w.recs, w.msgOf = recs, msgOf
}

func (m *k2kMode) skip(*write) (bool, error) { return false, nil }

// admit drops the input batches read under an assignment this member no
// longer holds (dropStaleLocked: the batch, or those merged into it) and
// makes a batch ahead of its partition's run wait for its predecessor
// (admitLocked). When only some of the batch's spans may
// join, the messages of the others fail with ErrOutOfOrder (nacked: an input
// batch is one span, so each is written or nacked whole) and their spans are
// neither admitted nor committed.
func (m *k2kMode) admit(ctx context.Context, w *write, ep *epoch) (*epoch, error) {
	o := m.o
	if len(w.spans) == 0 {
		return ep, nil
	}
	if _, none := o.dropStaleLocked(w, nil); none {
		return nil, nil
	}
	ep, mask, err := o.admitLocked(ctx, w.spans, ep, w.turn)
	if err != nil {
		return nil, err
	}
	// admitLocked may have waited without o.mu: a revoke in between is
	// seen here, before the batch joins.
	mask, none := o.dropStaleLocked(w, mask)
	if none {
		return nil, nil
	}
	if mask != nil {
		m.joinPart(w, mask)
	}
	return ep, nil
}

// joinPart keeps of w the spans mask admits (and admits them) and fails the
// messages of the others with ErrOutOfOrder. With no record left (the
// admitted spans' messages all unwritable) nothing is admitted: the batch
// does not join, as a batch of unwritable messages never does.
func (m *k2kMode) joinPart(w *write, mask []bool) {
	nacked := map[handover.Span]bool{}
	var keep []handover.Span
	for i, s := range w.spans {
		if mask[i] {
			keep = append(keep, s)
		} else {
			nacked[s] = true
		}
	}
	for i, msg := range w.batch {
		if w.done[i] {
			continue // committed already: acknowledged
		}
		if s, ok := handover.SpanOf(msg); ok && nacked[s] {
			// A message that cannot be written gets this error too
			// (it is reported when its batch is written): under
			// output batching Benthos gives every message of an
			// input batch the first error among them, and a route
			// taking "cannot be written" would take the whole input
			// batch, never written, away (lost).
			if w.failed == nil {
				w.failed = make(map[int]error)
			}
			w.failed[i] = fmt.Errorf("%w: %s/%d [%d, %d) lies past a range not written yet, nacked to be replayed after it", ErrOutOfOrder, s.Topic, s.Partition, s.From, s.To)
		}
	}
	w.dropRecords(nil)
	w.spans = keep
	if len(w.recs) > 0 {
		m.k.admit(keep)
	}
	m.k.nack(slices.Collect(maps.Keys(nacked)))
}

// refused: the batch is nacked whole; Benthos replays it.
func (m *k2kMode) refused(w *write, _ error) { m.k.nack(w.spans) }
func (m *k2kMode) unjoined(*write)           {}

// prepare plans the source offsets the epoch commits and sends them into its
// transaction (AddOffsetsToTxn, TxnOffsetCommit): step 2 of the commit
// sequence.
func (m *k2kMode) prepare(ctx context.Context, ep *epoch, rec *txnstate.Record) error {
	o := m.o
	offs, err := m.k.plan(ep.spans(), o.log)
	if err != nil {
		if errors.Is(err, errRejoining) {
			o.m.k2kRebalanceEvent(k2kRejoiningEpoch)
		} else {
			o.m.k2kRebalanceEvent(k2kRevokedEpoch)
		}
		return err
	}
	if len(offs) == 0 {
		return nil
	}
	o.mu.Lock()
	records := ep.records
	o.mu.Unlock()
	if records == 0 {
		// franz-go does not know of this transaction: its TryAbort
		// would send nothing. Should the epoch abort, the slot's
		// re-initialisation (InitProducerID) aborts it on the broker.
		ep.slot.broken = true
	}
	if err := o.sendOffsets(ctx, ep, offs); err != nil {
		return fmt.Errorf("source offsets: %w", err)
	}
	ep.offs = offs
	rec.Group = m.k.group
	rec.SourceOffsets = sourceOffsets(offs)
	return nil
}

func (m *k2kMode) committed(ep *epoch, _ txnstate.Record) { m.k.commitDone(ep.spans(), ep.offs) }

func (m *k2kMode) settled(context.Context, txnstate.Record) bool { return true }

// aborting: every live epoch from n on aborts; the ranges they admitted will
// be replayed, and nothing may join past them.
func (m *k2kMode) aborting(uint64, []*epoch) { m.k.resetAdmitted() }

// nacked: the aborted epoch's batches are replayed.
func (m *k2kMode) nacked(ep *epoch) {
	m.k.nack(ep.spans())
	if m.k.floorPending() {
		m.o.carryFloorLater()
	}
}

// floorPending reports whether a position the input handed over (floor) of a
// partition this member owns is past what is committed.
func (k *k2k) floorPending() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for tp, f := range k.floor {
		if k.member != nil {
			if _, _, _, owned := k.member.Assignment(tp.topic, tp.partition); !owned {
				continue
			}
		}
		if f > k.committed[tp] {
			return true
		}
	}
	return false
}

// carryFloorLater opens, an epoch interval (at least 100ms) after an epoch
// aborted or could not stamp them (the group member was rejoining), an epoch
// to carry the positions handed over that are not committed yet. An aborted
// epoch's batches are replayed and carry them again, but an epoch of offsets
// only (positions past records that produce no message: transaction markers,
// aborted records, a message a dead-letter route took) has none, and the
// input's periodic hand-over does not wait for its commit, so it never hands
// the same positions over again: without another epoch the group's offset
// would stay behind until a new record reaches this output, which on an idle
// partition may be never.
func (o *output) carryFloorLater() {
	time.AfterFunc(max(o.conf.epochInterval, 100*time.Millisecond), func() {
		if o.runCtx.Err() != nil || !o.k2k.floorPending() {
			return
		}
		if err := o.ensureEpoch(o.runCtx); errors.Is(err, service.ErrNotConnected) {
			o.carryFloorLater() // after the reconnect
		}
	})
}

func (m *k2kMode) stopped([]*epoch) {}

// sendOffsets adds the group to the slot's open transaction and commits the
// offsets in it (one TxnOffsetCommit per generation and member id), with the
// producer id and epoch the transaction began with. The requests go through
// the slot's client, which routes them to the transaction and group
// coordinators; franz-go is not told (its EndTransaction still sends EndTxn
// when records were produced; an epoch of offsets only ends with a raw
// EndTxn).
func (o *output) sendOffsets(ctx context.Context, ep *epoch, offs []plannedOffset) error {
	s := ep.slot
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID = s.id
	add.ProducerID = ep.pid
	add.ProducerEpoch = ep.pepoch
	add.Group = o.k2k.group
	if err := retryRetriable(ctx, func() error {
		resp, err := add.RequestWith(ctx, s.cl)
		if err != nil {
			return err
		}
		return kerr.ErrorForCode(resp.ErrorCode)
	}); err != nil {
		return fmt.Errorf("AddOffsetsToTxn(%s): %w", o.k2k.group, err)
	}
	ids, err := o.topicIDs(ctx, offs)
	if err != nil {
		return err
	}
	type gm struct {
		gen int32
		mem string
	}
	// One request per generation and member id; a rejected generation
	// queues the offsets again under the current one (restampAfter).
	type request struct {
		gm
		offs []plannedOffset
	}
	var queue []request
	for _, po := range offs {
		g := gm{po.generation, po.memberID}
		i := slices.IndexFunc(queue, func(r request) bool { return r.gm == g })
		if i < 0 {
			queue = append(queue, request{gm: g})
			i = len(queue) - 1
		}
		queue[i].offs = append(queue[i].offs, po)
	}
	restamps := 0
	for len(queue) > 0 {
		g, batch := queue[0].gm, queue[0].offs
		queue = queue[1:]
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.TransactionalID = s.id
		req.Group = o.k2k.group
		req.ProducerID = ep.pid
		req.ProducerEpoch = ep.pepoch
		req.Generation = g.gen
		req.MemberID = g.mem
		idx := map[string]int{}
		for _, po := range batch {
			i, ok := idx[po.Topic]
			if !ok {
				i = len(req.Topics)
				idx[po.Topic] = i
				t := kmsg.NewTxnOffsetCommitRequestTopic()
				t.Topic = po.Topic
				t.TopicID = ids[po.Topic]
				req.Topics = append(req.Topics, t)
			}
			p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			p.Partition = po.Partition
			p.Offset = po.Offset
			p.LeaderEpoch = -1
			if po.metadata != "" {
				p.Metadata = kmsg.StringPtr(po.metadata)
			}
			req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
		}
		if err := retryRetriable(ctx, func() error {
			resp, err := req.RequestWith(ctx, s.cl)
			if err != nil {
				return err
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						return fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err)
					}
				}
			}
			return nil
		}); err != nil {
			if restamped, ok := o.restampAfter(err, batch); ok && restamps < maxRestamps {
				// Same partitions, same assignments, a newer
				// generation: commit them under it.
				restamps++
				o.m.k2kRebalanceEvent(k2kRestamped)
				o.log.Debugf("kafka_eos: group %s: TxnOffsetCommit under generation %d: %v; the member still owns the partitions, committing them under generation %d", o.k2k.group, g.gen, err, restamped[0].generation)
				queue = append(queue, request{gm: gm{restamped[0].generation, restamped[0].memberID}, offs: restamped})
				continue
			}
			return fmt.Errorf("TxnOffsetCommit(%s, generation %d, member %q): %w", o.k2k.group, g.gen, g.mem, err)
		}
	}
	return nil
}

// maxRestamps bounds how often one epoch's offsets are committed again under a
// newer generation (each time a rebalance moved the generation between the
// plan and the TxnOffsetCommit).
const maxRestamps = 5

// restampAfter returns offs stamped with the current generation if err is the
// coordinator rejecting their generation or member id and the member still
// owns all of them under the same assignments.
func (o *output) restampAfter(err error, offs []plannedOffset) ([]plannedOffset, bool) {
	if !errors.Is(err, kerr.IllegalGeneration) && !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.RebalanceInProgress) {
		return nil, false
	}
	// The member learns of the new generation shortly after the
	// coordinator: give it a moment.
	for range 20 {
		if out, moved := o.k2k.restamp(offs); moved {
			return out, true
		} else if out == nil {
			return nil, false // no longer owned as planned
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, false
}

// topicIDs returns the ids of the topics of offs (cached: an id does not
// change while the topic lives).
func (o *output) topicIDs(ctx context.Context, offs []plannedOffset) (map[string][16]byte, error) {
	k := o.k2k
	k.mu.Lock()
	var missing []string
	for _, po := range offs {
		if _, ok := k.topicIDs[po.Topic]; !ok && !slices.Contains(missing, po.Topic) {
			missing = append(missing, po.Topic)
		}
	}
	k.mu.Unlock()
	if len(missing) > 0 {
		tds, err := kadm.NewClient(o.admin).ListTopics(ctx, missing...)
		if err != nil {
			return nil, fmt.Errorf("topic ids of %v: %w", missing, err)
		}
		k.mu.Lock()
		for _, td := range tds {
			if td.Err == nil {
				k.topicIDs[td.Topic] = td.ID
			}
		}
		k.mu.Unlock()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.topicIDs), nil
}

// retryRetriable retries fn while it fails with a retriable Kafka error code
// (a coordinator loading or moving) or CONCURRENT_TRANSACTIONS (the previous
// EndTxn of the slot still writing its markers; franz-go does not mark it
// retriable; seen on Kafka 4.3.1 TV2 after an offsets-only epoch) until ctx
// ends.
func retryRetriable(ctx context.Context, fn func() error) error {
	backoff := 20 * time.Millisecond
	for {
		err := fn()
		var ke *kerr.Error
		if err == nil || !errors.As(err, &ke) || !(ke.Retriable || ke == kerr.ConcurrentTransactions) {
			return err
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer %v)", ctx.Err(), err)
		}
	}
}

func sourceOffsets(offs []plannedOffset) []txnstate.SourceOffset {
	if len(offs) == 0 {
		return nil
	}
	out := make([]txnstate.SourceOffset, len(offs))
	for i, o := range offs {
		out[i] = o.SourceOffset
	}
	return out
}
