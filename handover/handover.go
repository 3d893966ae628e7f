// Package handover is the seam between a kafka_native input and a kafka_eos
// output of the same stream: the span each message carries (SpanOf), and the
// CommitTakeover through which the output commits the input's consumer group
// offsets inside its transactions. Both packages import it; neither imports
// the other.
package handover

import (
	"context"
	"fmt"
	"sync"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The seam for the end-to-end exactly-once mode: a kafka_eos output in the same process that commits the consumer group's
// offsets inside its transactions takes the commit step over from the input.
//
// A plain OffsetCommit from the input would race the output's transactions
// and, since the group coordinator keeps the most recently written offset and
// not the largest, could move the group's offset backwards. So:
//
//   - The output registers a CommitTakeover for the group with
//     RegisterCommitTakeover when it is constructed (Benthos constructs every
//     component before any of them connects or reads).
//   - The input calls Ready in Connect before it reads the group's committed
//     offsets, so the output's recovery finishes first.
//   - Once it resolved where partitions start (the committed offset, or
//     start_offset / start_offsets / start_timestamp / reset_offset when
//     nothing is committed), and before any batch of them is delivered, the
//     input hands the starts over (StartAt), so that the output knows where
//     each partition's contiguous run begins from the first epoch on, even
//     when batches arrive out of order and nothing is committed yet.
//   - The input never commits to that group itself: every commit step (the
//     periodic one, the one on Close and the synchronous final one of a bounded
//     read) hands the acknowledged positions to the takeover instead. They
//     include what never reached the output: transaction markers, aborted
//     ranges, dropped tombstones, batches filtered out downstream, and a
//     finished partition's stop, so the group's lag reaches 0.
//   - Each message carries the span of its batch (SpanOf): the per-partition
//     range [From, To) the batch covers, contiguous with the previous batch of
//     that partition, so the output can commit the end of the contiguous run
//     of ranges it holds rather than the largest offset it wrote.
//   - With group_membership (KIP-447), the input tells the takeover how to
//     ask which partitions it owns now (Member: the assignment a span was read
//     under, and the generation and member id to commit with at commit time),
//     and, from the group's revoke and lost callbacks, after it stopped
//     tracking the partitions (so that acks of their batches are ignored),
//     which partitions it gave up (Revoked), so that the epochs holding their
//     records finish before the rebalance goes on.

// Span is the range of offsets one batch covers in one partition: from the
// end of the previous batch of that partition (From) to one past its last
// record (To). It covers records that produced no message (markers, aborted
// records, dropped tombstones).
type Span struct {
	Topic     string
	Partition int32
	From, To  int64
	// Generation and MemberID are the group generation and member id when
	// the batch was fetched with group_membership (KIP-447: a transaction
	// commits the offsets with them, so a revoked member's are rejected);
	// -1 and "" otherwise.
	Generation int32
	MemberID   string
	// Assignment identifies the assignment of the partition to this
	// member that the batch was read under (group_membership; 0
	// otherwise): a partition revoked and assigned again gets a new one.
	// GroupState.Assignment tells whether it is still the current one.
	Assignment uint64
}

type spanKey struct{}

// SpanOf returns the span of the batch msg was read in, if it was read by a
// kafka_native input with a consumer group. The span travels in the message's
// context, so it survives processors that keep the message (not ones that
// build new messages from scratch).
func SpanOf(msg *service.Message) (Span, bool) {
	switch v := msg.Context().Value(spanKey{}).(type) {
	case Span:
		return v, true
	case *SpanSlot:
		if v.set {
			return v.span, true
		}
	}
	return Span{}, false
}

// SpanSlot is the span of a batch whose messages are made before its range is
// known (the input learns where a batch ends once it cut it): they are made in
// the context of WithSpanSlot, one for the whole batch, and the span is Set
// before the batch is handed over. That is what WithSpan does without a
// context and a copy of every message. It also carries the batch's Holder
// (SetHolder), with or without a span.
type SpanSlot struct {
	span Span
	set  bool
	hold Holder
}

// Holder adds n bytes (n < 0: takes them back) to what a kafka_native input
// counts against max_buffered_bytes for one batch it handed over, until the
// batch is acknowledged. An output calls it for what it keeps for the batch's
// messages while it has not acknowledged them (kafka_eos: a kgo.Record per
// record), so that the input's budget bounds the heap they take together,
// and takes the bytes back when it lets them go. Safe for concurrent use;
// once the batch was acknowledged, or its partition revoked, a call does
// nothing.
type Holder func(n int64)

// SetHolder sets the slot's Holder. Like Set, call it before the messages
// reach anything that reads it.
func (s *SpanSlot) SetHolder(h Holder) { s.hold = h }

// HolderOf returns the Holder of the batch a message whose context is ctx
// was read in, or nil (a message not read by a kafka_native input, or built
// anew by a processor). The output reads it from msg.Context(): the messages
// of one batch share one context, so one look-up serves a run of them.
func HolderOf(ctx context.Context) Holder {
	if v, ok := ctx.Value(spanKey{}).(*SpanSlot); ok {
		return v.hold
	}
	return nil
}

// WithSpanSlot returns parent with a new, empty SpanSlot, and the slot. A
// message made in the returned context (service.NewMessageWithContext) has
// the span given to Set as its span (SpanOf), and none before.
func WithSpanSlot(parent context.Context) (context.Context, *SpanSlot) {
	slot := &SpanSlot{}
	return context.WithValue(parent, spanKey{}, slot), slot
}

// Set sets the slot's span. It is not synchronised: call it once, before the
// messages reach anything that reads their span (a channel send orders it).
func (s *SpanSlot) Set(sp Span) { s.span, s.set = sp, true }

// WithSpan stamps every message of msgs with the span s, as the input does:
// for a processor that builds new messages from read ones (copy the span of
// the originals over) and for tests of a CommitTakeover.
func WithSpan(msgs service.MessageBatch, s Span) {
	for i, m := range msgs {
		msgs[i] = m.WithContext(context.WithValue(m.Context(), spanKey{}, s))
	}
}

// CommitTakeover is implemented by an output that commits a consumer group's
// offsets inside its own transactions.
type CommitTakeover interface {
	// Ready blocks until the output's start-up recovery finished, so that
	// the committed offsets the input starts from are final.
	Ready(ctx context.Context) error
	// CommitOffsets takes acknowledged positions to commit with the next
	// transaction (an offsets-only one if there is nothing else); it must
	// take the max with what it holds, and return once they are committed
	// if ctx carries a deadline the caller waits on (the final commit of a
	// bounded read is synchronous).
	CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error
	// StartAt tells where the input starts reading partitions (by topic
	// and partition): every offset below a start is not this input's to
	// copy, and the first batch of the partition begins there. It is
	// called before any batch of those partitions is delivered (at
	// Connect, or in the group's assignment callback) and replaces what an
	// earlier call said for them (a partition assigned again). It must not
	// block.
	StartAt(starts map[string]map[int32]int64)
	// Member tells the takeover that the input reads as a member of the
	// group (group_membership) and how to ask which partitions it owns.
	// Called before the first batch is delivered.
	Member(m GroupState)
	// Revoked tells the takeover that the member gave parts up (revoked,
	// lost, or leaving on close). The input calls it from the group's
	// callback after it stopped tracking them: their batches that reach
	// the takeover from now on belong to no current assignment. It returns
	// once no epoch holding records of them is left to commit, or when ctx
	// ends; it must not wait for anything the input does (the group's
	// callback goroutine is blocked on it).
	Revoked(ctx context.Context, parts map[string][]int32)
}

// GroupState is what a member (group_membership) tells its takeover about
// the partitions it owns now. It never blocks.
type GroupState interface {
	// Assignment returns the id of the member's current assignment of the
	// partition (what Span.Assignment carries for batches read under it)
	// and the group generation and member id to commit its offsets with
	// now; ok is false if the member does not own the partition (then an
	// acknowledgement of its batches is ignored by the input). While the
	// member is rejoining the group, ok may be true with generation -1
	// and no member id: its offsets cannot be committed until it rejoined.
	Assignment(topic string, partition int32) (id uint64, generation int32, memberID string, ok bool)
}

type takeoverKey struct{ group string }

// RegisterCommitTakeover registers t as the committer of group's offsets for
// every kafka_native input of the stream that res belongs to. It fails if the
// group already has one.
func RegisterCommitTakeover(res *service.Resources, group string, t CommitTakeover) error {
	takeoverMu.Lock()
	defer takeoverMu.Unlock()
	if v, loaded := res.GetOrSetGeneric(takeoverKey{group}, t); loaded {
		if _, live := v.(CommitTakeover); live {
			return fmt.Errorf("consumer group %s: another output already commits its offsets", group)
		}
		res.SetGeneric(takeoverKey{group}, t)
	}
	return nil
}

// ReleaseCommitTakeover undoes RegisterCommitTakeover of t (an output that
// closed, or a test modelling a new process on the same resources); it does
// nothing if another takeover is registered. The group's inputs then commit
// nothing (Released) until another takeover registers.
func ReleaseCommitTakeover(res *service.Resources, group string, t CommitTakeover) {
	takeoverMu.Lock()
	defer takeoverMu.Unlock()
	if v, ok := res.GetGeneric(takeoverKey{group}); ok && v == t {
		res.SetGeneric(takeoverKey{group}, released{})
	}
}

// takeoverMu makes register and release atomic (Resources has no
// compare-and-swap).
var takeoverMu sync.Mutex

// released marks a group whose takeover closed.
type released struct{}

// Lookup returns the CommitTakeover registered for group on the resources
// of res's stream, if one is registered and not released.
func Lookup(res *service.Resources, group string) (CommitTakeover, bool) {
	v, ok := res.GetGeneric(takeoverKey{group})
	if !ok {
		return nil, false
	}
	t, ok := v.(CommitTakeover)
	return t, ok
}

// Released reports whether a CommitTakeover was registered for group on the
// resources of res's stream and has since been released (its output closed,
// for instance after a fatal error). The input must then not commit the
// group's offsets itself: a plain OffsetCommit is fenced by nothing, so the
// positions of a stopped instance (even where it started) would overwrite what
// a successor committed since in its transactions, moving the group's offsets
// backwards.
func Released(res *service.Resources, group string) bool {
	v, ok := res.GetGeneric(takeoverKey{group})
	if !ok {
		return false
	}
	_, r := v.(released)
	return r
}

type arrowKey struct{}

// MarkArrow returns m marked as an Arrow IPC stream of Kafka records written
// by a kafka_native input (format: arrow) of this process. The mark travels
// in the message's context, like the span: record content cannot set it, so
// a kafka_eos output with input_format auto unpacks a body into records only
// when its input made it, never because a producer of the input topic wrote a
// value that looks like one.
func MarkArrow(m *service.Message) *service.Message {
	return m.WithContext(context.WithValue(m.Context(), arrowKey{}, true))
}

// IsArrow reports whether m carries the mark of MarkArrow.
func IsArrow(m *service.Message) bool {
	v, _ := m.Context().Value(arrowKey{}).(bool)
	return v
}
