package txnstate

import (
	"fmt"
	"slices"
	"strings"
)

// Runs computes the source offsets an epoch may commit in Kafka-to-Kafka
// mode (invariant I8). Batches reach the output out of order (max_in_flight,
// pipeline threads, nacked batches replayed separately), and whole batches
// can be filtered out and acked without reaching it; the group coordinator
// keeps the most recently written offset, not the largest. So the input
// stamps each batch with its per-partition span [From, To) (contiguous with
// the previous batch of the partition, markers and gaps included) and reports
// spans acked without reaching the output; Runs holds the spans and, per
// partition, yields only the end of the contiguous run starting at the
// committed offset, never less than what is committed.
//
// Runs is not safe for concurrent use.
type Runs struct {
	parts map[runKey]*partRuns
}

type runKey struct {
	topic     string
	partition int32
}

type partRuns struct {
	committed int64 // -1: unknown (nothing committed yet)
	spans     [][2]int64
}

// ErrSpan is wrapped by Add for a span that cannot be right.
var ErrSpan = fmt.Errorf("txnstate: invalid source span")

func (r *Runs) part(topic string, partition int32) *partRuns {
	if r.parts == nil {
		r.parts = map[runKey]*partRuns{}
	}
	k := runKey{topic, partition}
	p, ok := r.parts[k]
	if !ok {
		p = &partRuns{committed: -1}
		r.parts[k] = p
	}
	return p
}

// SetCommitted records offset as committed for the partition (the group's
// committed offset at start, or what a commit wrote); it only moves forward.
func (r *Runs) SetCommitted(topic string, partition int32, offset int64) {
	p := r.part(topic, partition)
	p.committed = max(p.committed, offset)
	p.spans = slices.DeleteFunc(p.spans, func(s [2]int64) bool { return s[1] <= p.committed })
}

// Add holds the span [from, to) of the partition: acked by the output's
// epoch or acked without reaching it. A span that overlaps a held one
// without being equal to it is an error (the input's spans tile the log).
func (r *Runs) Add(topic string, partition int32, from, to int64) error {
	if from < 0 || to <= from {
		return fmt.Errorf("%w: %s/%d [%d, %d)", ErrSpan, topic, partition, from, to)
	}
	p := r.part(topic, partition)
	if p.committed >= 0 && to <= p.committed {
		return nil // already committed: a replay
	}
	i, found := slices.BinarySearchFunc(p.spans, from, func(s [2]int64, f int64) int { return int(s[0] - f) })
	if found {
		if p.spans[i][1] == to {
			return nil // the same span again (a replayed batch)
		}
		return fmt.Errorf("%w: %s/%d [%d, %d) overlaps [%d, %d)", ErrSpan, topic, partition, from, to, p.spans[i][0], p.spans[i][1])
	}
	if (i > 0 && p.spans[i-1][1] > from) || (i < len(p.spans) && p.spans[i][0] < to) {
		return fmt.Errorf("%w: %s/%d [%d, %d) overlaps a held span", ErrSpan, topic, partition, from, to)
	}
	p.spans = slices.Insert(p.spans, i, [2]int64{from, to})
	return nil
}

// Next returns, for every partition whose contiguous run from the committed
// offset reaches further, the offset to commit: the end of that run. A
// partition with nothing committed yet starts its run at its lowest span.
// Next does not change what is held; call SetCommitted once the offsets are
// committed.
func (r *Runs) Next() []SourceOffset {
	var out []SourceOffset
	for k, p := range r.parts {
		if len(p.spans) == 0 {
			continue
		}
		next := p.committed
		if next < 0 {
			next = p.spans[0][0]
		}
		start := next
		for _, s := range p.spans {
			if s[0] > next {
				break
			}
			next = max(next, s[1])
		}
		if next > start {
			out = append(out, SourceOffset{Topic: k.topic, Partition: k.partition, Offset: next})
		}
	}
	slices.SortFunc(out, func(a, b SourceOffset) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// Held is the number of spans held, for the memory budget (I7).
func (r *Runs) Held() int {
	n := 0
	for _, p := range r.parts {
		n += len(p.spans)
	}
	return n
}
