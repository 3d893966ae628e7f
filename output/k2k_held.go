package output

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/connect-eos/connect-eos/handover"
)

// Kafka-to-Kafka mode with a dead-letter route: a message that cannot be
// written fails back to Benthos, and a fallback route hands it to a
// dead-letter output after its batch-mates were written and committed. Its
// source offset must not be committed before that output took it: a crash in
// between would lose it (the input would not read it again). So the epochs
// commit the partition's offset at the first such message not acknowledged
// yet, and the records written past it are named in the offset's metadata
// (committed in the same transaction): the next owner reads from the held
// offset, writes nothing the metadata says is written, and fails the
// unacknowledged messages again for the route (which may then get one of
// them twice: the route is at-least-once across a crash). Once the input
// hands a position past the message over (the route took it), the next epoch
// commits the offset past it.

// maxHeldListed bounds the unacknowledged messages of one partition named in
// its offset's metadata (about 20 bytes each; Kafka keeps up to
// offset.metadata.max.bytes, 4096 by default). With more, the metadata names
// the copy's reach up to the first one not listed: a crash before the route
// took them writes the records past it again.
const maxHeldListed = 64

// heldMetaPrefix starts the metadata of an offset held at an unacknowledged
// message.
const heldMetaPrefix = "connect-eos held v1"

// heldMeta is what an offset held at an unacknowledged message says: from
// (the offset committed) to through, every source record was written or
// acknowledged, but those at the offsets in unacked (sorted, the first is
// from).
type heldMeta struct {
	from, through int64
	unacked       []int64
}

// String encodes m as "connect-eos held v1 through=<n> unacked=<a>,<b>,...".
func (m heldMeta) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s through=%d unacked=", heldMetaPrefix, m.through)
	for i, u := range m.unacked {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(u, 10))
	}
	return b.String()
}

// parseHeldMeta decodes the metadata of a committed offset at, or reports
// false if it is not one this output wrote (or does not hold together).
func parseHeldMeta(s string, at int64) (heldMeta, bool) {
	rest, ok := strings.CutPrefix(s, heldMetaPrefix+" through=")
	if !ok {
		return heldMeta{}, false
	}
	th, list, ok := strings.Cut(rest, " unacked=")
	if !ok {
		return heldMeta{}, false
	}
	through, err := strconv.ParseInt(th, 10, 64)
	if err != nil || through <= at {
		return heldMeta{}, false
	}
	m := heldMeta{from: at, through: through}
	for _, f := range strings.Split(list, ",") {
		u, err := strconv.ParseInt(f, 10, 64)
		if err != nil || u < at || u >= through || (len(m.unacked) > 0 && u <= m.unacked[len(m.unacked)-1]) {
			return heldMeta{}, false
		}
		m.unacked = append(m.unacked, u)
	}
	if len(m.unacked) == 0 || m.unacked[0] != at {
		return heldMeta{}, false
	}
	return m, true
}

// covers reports whether the records [off, off+n) were all written or
// acknowledged, none of them unacknowledged.
func (m heldMeta) covers(off, n int64) bool {
	if off < m.from || off+n > m.through {
		return false
	}
	i, _ := slices.BinarySearch(m.unacked, off)
	return i == len(m.unacked) || m.unacked[i] >= off+n
}

// heldLocked returns the unacknowledged offsets of tp at or past the
// committed offset c (and the input's start) and below end.
func (k *k2k) heldLocked(tp topicPartition, c, end int64) []int64 {
	u := k.unacked[tp]
	if len(u) == 0 {
		return nil
	}
	lo := c
	if b, ok := k.base[tp]; ok && b > lo {
		lo = b
	}
	var out []int64
	for _, x := range u {
		if x >= lo && x < end {
			out = append(out, x)
		}
	}
	return out
}

// recordCount is how many source records message i of w stands for (an
// Arrow message of kafka_native packs several).
func recordCount(w *write, i int) int64 {
	if v, ok := w.batch[i].MetaGetMut("kafka_record_count"); ok {
		if n, ok := v.(int64); ok && n > 1 {
			return n
		}
	}
	return 1
}

// noteUnacked records the source offsets of w's messages that cannot be
// written: the group's offset is held at them until the input hands a
// position past them over.
func (k *k2k) noteUnacked(w *write) {
	if len(w.failed) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, e := range w.failed {
		if !errors.Is(e, ErrCannotWrite) || w.done[i] {
			continue
		}
		s, ok := handover.SpanOf(w.batch[i])
		if !ok {
			continue
		}
		off, ok := sourceOffset(w.batch[i])
		if !ok || off < s.From || off >= s.To {
			off = s.From // hold the whole span
		}
		tp := topicPartition{s.Topic, s.Partition}
		if f, ok := k.floor[tp]; ok && off < f {
			continue // acknowledged already
		}
		u := k.unacked[tp]
		if j, found := slices.BinarySearch(u, off); !found {
			k.unacked[tp] = slices.Insert(u, j, off)
		}
	}
}

// sourcedMsg is a message of a write with its source: the span of its input
// batch, its partition, and its source offset (hasOff false: it has none).
type sourcedMsg struct {
	span   handover.Span
	tp     topicPartition
	off    int64
	hasOff bool
}

// pendingSourced yields, by index, the messages of w still to be written
// (neither acknowledged already nor failed) that carry a span.
func pendingSourced(w *write) iter.Seq2[int, sourcedMsg] {
	return func(yield func(int, sourcedMsg) bool) {
		for i, msg := range w.batch {
			if w.done[i] || w.unwritten(i) {
				continue
			}
			s, ok := handover.SpanOf(msg)
			if !ok {
				continue
			}
			off, hasOff := sourceOffset(msg)
			if !yield(i, sourcedMsg{span: s, tp: topicPartition{s.Topic, s.Partition}, off: off, hasOff: hasOff}) {
				return
			}
		}
	}
}

// errSibling is why a message is not written whose source record (the same
// topic, partition and offset) also made a message that cannot be written.
var errSibling = errors.New("another message of its source record cannot be written, and none of a record's messages is written while the group's offset is held at the record")

// failSiblings fails, as unwritable, the messages of w whose source record
// the group's offset is held at (noteUnacked, or the offset's metadata read
// at Connect): a processor made several messages of the record and one of
// them cannot be written. Writing the others would copy them twice after a
// crash before the dead-letter route took the record: the next owner reads
// the record again, and the metadata names records, not messages. So the
// dead-letter route takes every message of the record the output sees from
// then on. Called after noteUnacked, before anything of w is produced.
func (k *k2k) failSiblings(w *write) {
	k.mu.Lock()
	if len(k.unacked) == 0 {
		k.mu.Unlock()
		return
	}
	n := 0
	for i, m := range pendingSourced(w) {
		if !m.hasOff || m.off < m.span.From || m.off >= m.span.To {
			continue
		}
		if f, ok := k.floor[m.tp]; ok && m.off < f {
			continue // the route took it
		}
		if _, found := slices.BinarySearch(k.unacked[m.tp], m.off); !found {
			continue
		}
		w.fail(i, &MessageError{Source: msgSource(w.batch, i), Field: keoFieldConsumerGroup, Err: errSibling})
		n++
	}
	k.mu.Unlock()
	if n > 0 {
		w.dropRecords(nil)
	}
}

// skipHeld acknowledges without writing them the messages of w whose records
// the group's committed offset (read at Connect) says were written past an
// unacknowledged message (heldMeta).
func (k *k2k) skipHeld(w *write, o *output) {
	k.mu.Lock()
	if len(k.skip) == 0 {
		k.mu.Unlock()
		return
	}
	n := 0
	for i, m := range pendingSourced(w) {
		h, ok := k.skip[m.tp]
		if !ok || !m.hasOff || !h.covers(m.off, recordCount(w, i)) {
			continue
		}
		if w.done == nil {
			w.done = map[int]bool{}
		}
		w.done[i] = true
		n++
	}
	k.mu.Unlock()
	if n == 0 {
		return
	}
	w.dropRecords(func(i int) bool { return w.done[i] })
	o.m.tally.add("replays_already_written", int64(n))
	o.log.Debugf("kafka_eos: group %s: %d of %d messages of the batch were written by the previous owner past a message a dead-letter route had not acknowledged: acknowledged without writing them again", k.group, n, len(w.batch))
}
