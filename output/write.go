package output

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/txnstate"
)

// write is one WriteBatch call on its way through the output: the batch, its
// records, the messages that are not written and why, and what the mode reads
// of it.
type write struct {
	batch service.MessageBatch
	recs  []*kgo.Record
	// msgOf[i] is the message recs[i] comes from (an Arrow message gives
	// several records, a failed message none).
	msgOf []int
	// arrow are the decoded Arrow batches the records alias, released once
	// the batch was written.
	arrow []*kafkaarrow.Batch
	// failed holds, per message not written, why: a *MessageError (it can
	// never be written) or the error of a message held back behind one.
	failed map[int]error
	// done holds the messages written before, in an epoch that committed:
	// acknowledged without being written again (skipWritten).
	done map[int]bool

	// What the mode read: the spans to commit with the batch
	// (Kafka-to-Kafka) and the positions it writes (dedupe).
	spans []handover.Span
	keep  []txnstate.KeyPos
	// pos is every message's key and position (dedupe).
	pos []txnstate.KeyPos

	// handed are the spans k2k.hand registered for the call.
	handed []handover.Span

	ref *batchRef // once joined
	// turn is the WriteBatch call's turn to write (Kafka-to-Kafka): given
	// up while the batch waits for its predecessor.
	turn *turn
}

// fail marks message i as not written with err (the first reason stays).
func (w *write) fail(i int, err error) {
	if w.failed == nil {
		w.failed = make(map[int]error)
	}
	if _, ok := w.failed[i]; !ok {
		w.failed[i] = err
	}
}

// unwritten reports whether message i is not written.
func (w *write) unwritten(i int) bool {
	_, ok := w.failed[i]
	return ok
}

// dropRecords removes the records of messages not written (marked after
// toRecords: held back, or replays) and of the messages drop says.
func (w *write) dropRecords(drop func(i int) bool) {
	kept := 0
	for j, r := range w.recs {
		if m := w.msgOf[j]; !w.unwritten(m) && (drop == nil || !drop(m)) {
			w.recs[kept], w.msgOf[kept] = r, m
			kept++
		}
	}
	clear(w.recs[kept:])
	w.recs, w.msgOf = w.recs[:kept], w.msgOf[:kept]
}

func (w *write) release() { kafkaarrow.ReleaseAll(w.arrow) }

// ErrCannotWrite is wrapped by the error of a message that can never be
// written as it is (a *MessageError): too large, a topic, key or partition
// that cannot be computed or is out of range, an Arrow body that does not
// decode. The output never acknowledges it: it fails alone (its batch-mates
// are written, or held back behind it when they cannot be committed past it),
// so that a `fallback` output can route it to a dead-letter output. Its
// error text begins with "kafka_eos: message cannot be written", which is
// what such a route matches on. Sent back a second time (nacked and
// replayed), it stops the output: replaying it cannot help.
var ErrCannotWrite = errors.New("kafka_eos: message cannot be written")

// MessageError is the error of one message that can never be written. It
// names where the message came from and the field whose value for it cannot
// be written.
type MessageError struct {
	// Source is where the message was read: "topic t partition p offset
	// o" for a message of kafka_native (or any input setting kafka_topic,
	// kafka_partition and kafka_offset), its span or dedupe key and
	// position otherwise, else its index in the batch.
	Source string
	// Field is the kafka_eos field whose value for this message cannot be
	// written (topic, key, partition, max_message_bytes, input_format,
	// dedupe.key, dedupe.position; consumer_group for a message of a source
	// record the group's offset is held at).
	Field string
	Err   error
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("%v (%s): field %s: %v", ErrCannotWrite, e.Source, e.Field, e.Err)
}

func (e *MessageError) Unwrap() []error { return []error{ErrCannotWrite, e.Err} }

// errHeldBack is wrapped by the error of a message not written because a
// message before it from the same source partition (Kafka-to-Kafka) or of the
// same key (dedupe) cannot be written: committing it would commit the
// source's position past the failed one. It is replayed (nacked), after the
// failed one was routed away.
var errHeldBack = errors.New("kafka_eos: not written: held back behind a message of the same source that cannot be written; nacked to be replayed after it")

// msgSource names where message i of batch came from, for errors: its source
// topic, partition and offset from the metadata kafka_native sets (kafka_topic,
// kafka_partition, kafka_offset, or kafka_first_offset and kafka_last_offset
// for an Arrow message), else its span, else its index in the batch.
func msgSource(batch service.MessageBatch, i int) string {
	m := batch[i]
	var parts []string
	add := func(k, name string) {
		if v, ok := m.MetaGetMut(k); ok {
			parts = append(parts, fmt.Sprintf("%s %v", name, v))
		}
	}
	add("kafka_topic", "topic")
	add("kafka_partition", "partition")
	add("kafka_offset", "offset")
	if f, ok := m.MetaGetMut("kafka_first_offset"); ok {
		l, _ := m.MetaGetMut("kafka_last_offset")
		parts = append(parts, fmt.Sprintf("offsets %v..%v", f, l))
	}
	if len(parts) > 0 {
		return strings.Join(parts, " ")
	}
	if s, ok := handover.SpanOf(m); ok {
		return fmt.Sprintf("message %d of the batch of topic %s partition %d offsets [%d, %d)", i, s.Topic, s.Partition, s.From, s.To)
	}
	return fmt.Sprintf("message %d of the batch", i)
}

// sourceOffset returns the source offset of message m (kafka_offset, or the
// first offset of an Arrow message, or the offset of the source record a
// mirror-mode message carries), if it carries one.
func sourceOffset(m *service.Message) (int64, bool) {
	if off, ok := metaSourceOffset(m); ok {
		return off, true
	}
	// Mirror mode: the source record travels with the message.
	if r, ok := handover.RecordOf(m); ok {
		return r.Offset, true
	}
	return 0, false
}

func metaSourceOffset(m *service.Message) (int64, bool) {
	for _, k := range []string{"kafka_offset", "kafka_first_offset"} {
		v, ok := m.MetaGetMut(k)
		if !ok {
			continue
		}
		switch v := v.(type) {
		case int64:
			return v, true
		case int:
			return int64(v), true
		case string:
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// poisons remembers the messages reported as unwritable (ErrCannotWrite), so
// that one sent back (nacked and replayed: no route took it) stops the output
// instead of looping, and the messages whose records the broker or the client
// refused for good (learned: the epoch holding them aborted), so that their
// replay fails before anything is produced. Bounded: the oldest entries go
// first.
//
// It also remembers the batch-mates of a message reported unwritable that
// were written, in an epoch that committed (mates): Benthos may send them
// back to the input (under output batching every message of an input batch
// gets the first error of that batch, and a fallback route that dead-letters
// only the unwritable message rejects the others), and the input replays
// them; their replay is acknowledged without writing them again (see
// output.skipWritten).
type poisons struct {
	mu       sync.Mutex
	seed     maphash.Seed
	reported map[uint64]int
	learned  map[uint64]*MessageError
	order    []uint64

	mates     map[uint64]struct{}
	mateOrder []uint64
	// matesAt is when the last mates were remembered: after mateTTL
	// without more, they are forgotten, and WriteBatch stops looking
	// messages up (skipWritten costs a hash per message).
	matesAt time.Time
}

// maxPoisons bounds the messages remembered (about 100 bytes each).
const maxPoisons = 4096

// maxMates bounds the written batch-mates remembered (about 40 bytes each).
// A replay of one forgotten is written again (a duplicate), never lost.
const maxMates = 1 << 16

// mateTTL is how long written batch-mates are remembered after the last
// ones: Benthos sends them back and the input replays them within seconds
// (its retry backoff is capped at a second).
const mateTTL = 10 * time.Minute

func newPoisons() *poisons {
	return &poisons{seed: maphash.MakeSeed(), reported: map[uint64]int{}, learned: map[uint64]*MessageError{}, mates: map[uint64]struct{}{}}
}

// mateID identifies a message read by kafka_native across a replay: its
// source (topic, partition, offset), the assignment and generation its batch
// was read under (a partition read again after a rebalance is a new
// delivery), and its body (a processor that makes several messages of one
// record makes them different). A message without a source has none: its
// replay is written again.
func (p *poisons) mateID(m *service.Message) (uint64, bool) {
	t, tok := m.MetaGetMut("kafka_topic")
	pa, pok := m.MetaGetMut("kafka_partition")
	off, ook := sourceOffset(m)
	if !tok || !pok || !ook {
		return 0, false
	}
	b, err := m.AsBytes()
	if err != nil {
		return 0, false
	}
	var h maphash.Hash
	h.SetSeed(p.seed)
	var buf [64]byte
	num := func(n int64) {
		_, _ = h.Write(strconv.AppendInt(buf[:0], n, 10))
		_ = h.WriteByte(0)
	}
	if ts, ok := t.(string); ok {
		_, _ = h.WriteString(ts)
	} else {
		fmt.Fprint(&h, t)
	}
	_ = h.WriteByte(0)
	if pn, ok := pa.(int64); ok {
		num(pn)
	} else {
		fmt.Fprintf(&h, "%v\x00", pa)
	}
	num(off)
	if s, ok := handover.SpanOf(m); ok {
		num(int64(s.Assignment))
		num(int64(s.Generation))
		_, _ = h.WriteString(s.MemberID)
	}
	_ = h.WriteByte(0)
	_, _ = h.Write(b)
	return h.Sum64(), true
}

// wrote remembers messages written in an epoch that committed.
func (p *poisons) wrote(ids []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(ids) > 0 {
		p.matesAt = time.Now()
	}
	for _, id := range ids {
		if _, ok := p.mates[id]; ok {
			continue
		}
		if len(p.mateOrder) >= maxMates {
			delete(p.mates, p.mateOrder[0])
			p.mateOrder = p.mateOrder[1:]
		}
		p.mates[id] = struct{}{}
		p.mateOrder = append(p.mateOrder, id)
	}
}

// written reports whether message id was remembered as written.
func (p *poisons) written(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.mates[id]
	return ok
}

// anyWritten reports whether any written message is remembered, forgetting
// them all mateTTL after the last ones.
func (p *poisons) anyWritten() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.mates) > 0 && time.Since(p.matesAt) > mateTTL {
		clear(p.mates)
		p.mateOrder = nil
	}
	return len(p.mates) > 0
}

// id identifies a message across a replay: its source (topic, partition,
// offset, and the assignment it was read under) when it carries one, else
// its content (body and metadata).
func (p *poisons) id(m *service.Message) uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	t, tok := m.MetaGetMut("kafka_topic")
	pa, pok := m.MetaGetMut("kafka_partition")
	off, ook := sourceOffset(m)
	if tok && pok && ook {
		fmt.Fprintf(&h, "src\x00%v\x00%v\x00%d", t, pa, off)
		if s, ok := handover.SpanOf(m); ok {
			// Read again under a new assignment of its partition (a
			// rebalance), it is a new delivery, not one sent back.
			fmt.Fprintf(&h, "\x00%d\x00%d", s.Assignment, s.Generation)
		}
		return h.Sum64()
	}
	if s, ok := handover.SpanOf(m); ok {
		fmt.Fprintf(&h, "span\x00%s\x00%d\x00%d\x00%d\x00", s.Topic, s.Partition, s.From, s.To)
	}
	b, _ := m.AsBytes()
	h.Write(b)
	var keys []string
	_ = m.MetaWalkMut(func(k string, _ any) error { keys = append(keys, k); return nil })
	slices.Sort(keys)
	for _, k := range keys {
		v, _ := m.MetaGetMut(k)
		fmt.Fprintf(&h, "\x00%s=%v", k, v)
	}
	return h.Sum64()
}

func (p *poisons) remember(id uint64) {
	if _, ok := p.reported[id]; ok {
		return
	}
	if _, ok := p.learned[id]; ok {
		return
	}
	if len(p.order) >= maxPoisons {
		old := p.order[0]
		p.order = p.order[1:]
		delete(p.reported, old)
		delete(p.learned, old)
	}
	p.order = append(p.order, id)
}

// learn records that message id's record was refused for good.
func (p *poisons) learn(id uint64, e *MessageError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remember(id)
	p.learned[id] = e
}

// known returns the error learned for message id, if any.
func (p *poisons) known(id uint64) (*MessageError, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.learned[id]
	return e, ok
}

// any reports whether anything was learned (the ids are computed only then).
func (p *poisons) any() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.learned) > 0
}

// report counts one more report of message id to Benthos with its own
// error.
func (p *poisons) report(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remember(id)
	p.reported[id]++
}

// reports returns how often message id was reported.
func (p *poisons) reports(id uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reported[id]
}

// sentBack returns the error to stop the output with if a message of w that
// cannot be written was reported to Benthos with its own error before: it was
// sent back (nacked and replayed: no route took it), and replaying it again
// cannot help. (A message reported behind an earlier failed one of its input
// batch is not counted: see result.) Checked before anything of w is written, so that a replay of
// its batch-mates (Benthos replays a whole input batch under output
// batching) is never written twice.
func (o *output) sentBack(w *write) error {
	for i := range w.batch {
		e, ok := w.failed[i]
		if !ok || !errors.Is(e, ErrCannotWrite) {
			continue
		}
		if o.poison.reports(o.poison.id(w.batch[i])) > 0 {
			return fmt.Errorf("%w; it was sent back to the output (nacked, and no fallback output took it): route such messages to a dead-letter output (a fallback matching %q), or fix them upstream", e, ErrCannotWrite.Error())
		}
	}
	return nil
}

// result is what WriteBatch returns for w once its fate is known: err is the
// epoch's outcome (nil: committed, or nothing was written) or why the batch
// did not join one.
//
// With err nil, the messages not written get their own error in a BatchError
// and the others none: they are written and committed, acknowledged. Each
// message that cannot be written is then reported (counted and logged):
// Benthos gives it its own error, to a fallback output too, so that a route
// can take it. (Under output batching Benthos gives every message of an input
// batch the first error of the batch, which is then this one.)
//
// With err set, every message gets err, the unwritable ones too: the batch is
// replayed whole, and they are reported on a later attempt. A batch nacked
// after waiting for its predecessor (ErrOutOfOrder) is the exception: the
// messages acknowledged without writing them (done) are acknowledged. (Their own error
// here could be hidden behind err under output batching, a nack taken for a
// route.) A record refused for good by the broker or the client aborted its
// epoch: its message is remembered, and fails with its own error before
// anything is produced when the input replays it.
func (o *output) result(w *write, err error) error {
	if w.ref != nil && err != nil {
		w.ref.mu.Lock()
		for i, e := range w.ref.errs {
			if me, ok := e.(*MessageError); ok {
				o.poison.learn(o.poison.id(w.batch[i]), me)
			}
		}
		w.ref.mu.Unlock()
	}
	if err != nil && w.ref == nil && len(w.done) > 0 && errors.Is(err, ErrOutOfOrder) {
		// Nacked after waiting for its predecessor: only what is still
		// to be written is. The messages acknowledged without writing
		// them (written in an epoch that committed, or by the previous
		// owner as its committed offset's metadata says) are
		// acknowledged: their input batch may be the one this batch
		// waits for (an offset held at an unwritable record does not
		// move until the input hands that batch over), and nacked with
		// it they came back merged the same way, for good.
		berr := service.NewBatchError(w.batch, err)
		for i := range w.batch {
			if !w.done[i] {
				berr = berr.Failed(i, err)
			}
		}
		return berr
	}
	if len(w.failed) == 0 || err != nil {
		return err
	}
	if w.ref != nil && o.conf.mode != txnstate.Dedupe {
		// Written and committed beside a failed message: remembered, so
		// that a replay of them is acknowledged without writing them again
		// (skipWritten). Dedupe mode drops such replays by their position.
		var ids []uint64
		last := -1
		for _, i := range w.msgOf {
			if i == last {
				continue
			}
			last = i
			if id, ok := o.poison.mateID(w.batch[i]); ok {
				ids = append(ids, id)
			}
		}
		o.poison.wrote(ids)
	}
	var headline error
	// The spans (input batches) whose first failed message was seen: under
	// output batching Benthos gives every message of an input batch that
	// one's error, so a later one of the same input batch may be sent back
	// by a route that keeps only the message its error names. Its own error
	// was never shown: it is not counted as reported, and is reported again
	// when it comes back (at most once more per earlier failed message).
	var shown map[handover.Span]bool
	for i := range w.batch {
		e, ok := w.failed[i]
		if !ok {
			continue
		}
		shadowed := false
		if s, ok := handover.SpanOf(w.batch[i]); ok {
			if shown == nil {
				shown = map[handover.Span]bool{}
			}
			shadowed = shown[s]
			shown[s] = true
		}
		if errors.Is(e, ErrCannotWrite) {
			if !shadowed {
				o.poison.report(o.poison.id(w.batch[i]))
			}
			o.m.tally.add("message_cannot_be_written", 1)
			o.log.Errorf("%v", e)
		}
		if headline == nil || (errors.Is(e, ErrCannotWrite) && !errors.Is(headline, ErrCannotWrite)) {
			headline = e
		}
	}
	berr := service.NewBatchError(w.batch, headline)
	for i, e := range w.failed {
		berr = berr.Failed(i, e)
	}
	return berr
}

// skipWritten acknowledges without writing them the messages of w written
// before in an epoch that committed, beside a message that could not be
// written (poisons.mates): Benthos sent them back with it and the input
// replays them. Writing them again would copy them twice. Not in dedupe mode,
// whose positions drop such replays (and whose positions must be read from
// every message).
func (o *output) skipWritten(w *write) {
	if o.conf.mode == txnstate.Dedupe || !o.poison.anyWritten() {
		return
	}
	n := 0
	for i, msg := range w.batch {
		if w.unwritten(i) {
			continue
		}
		if id, ok := o.poison.mateID(msg); ok && o.poison.written(id) {
			if w.done == nil {
				w.done = map[int]bool{}
			}
			w.done[i] = true
			n++
		}
	}
	if n == 0 {
		return
	}
	w.dropRecords(func(i int) bool { return w.done[i] })
	o.m.tally.add("replays_already_written", int64(n))
	o.log.Debugf("kafka_eos: %d of %d messages of the batch were written in an epoch that committed (sent back with a message that cannot be written): acknowledged without writing them again", n, len(w.batch))
}

// toRecords turns a batch into records: one per plain message, one per row
// of an Arrow message (see input_format). A message whose topic, key or
// partition cannot be computed, too large for max_message_bytes, whose Arrow
// body does not decode, or whose record was refused for good before, is not
// written: it fails alone with a *MessageError naming its source and the
// field, before anything is produced.
func (o *output) toRecords(batch service.MessageBatch) *write {
	w := &write{batch: batch}
	recs := make([]*kgo.Record, 0, len(batch))
	msgOf := make([]int, 0, len(batch))
	// One allocation for the records of the plain messages, not one each.
	slab := make([]kgo.Record, len(batch))
	fail := func(i int, field string, err error) {
		w.fail(i, &MessageError{Source: msgSource(batch, i), Field: field, Err: err})
	}
	// The fields' fast paths (fastfield.go); topic is nil when mirror
	// names the topics.
	var topicX, keyX, partX fieldExec
	if f := current(o.conf.topicF, o.conf.topic); f != nil {
		topicX = f.over(batch)
	}
	if f := current(o.conf.keyF, o.conf.key); f != nil {
		keyX = f.over(batch)
	}
	if f := current(o.conf.partF, o.conf.partition); f != nil {
		partX = f.over(batch)
	}
	learned := o.poison.any()
	for i, msg := range batch {
		if learned {
			if me, ok := o.poison.known(o.poison.id(msg)); ok {
				w.fail(i, me)
				continue
			}
		}
		var topic string
		var err error
		if o.conf.mirror != nil {
			if topic, err = mirrorTopic(o.conf.mirror, msg); err != nil {
				fail(i, keoFieldMirror, err)
				continue
			}
		} else if topic, err = topicX.str(i); err != nil || topic == "" {
			fail(i, keoFieldTopic, fmt.Errorf("%v (topic %q)", err, topic))
			continue
		}
		body, err := msg.AsBytes()
		if err != nil {
			fail(i, "value", err)
			continue
		}
		if o.isArrow(msg) {
			n := len(recs)
			recs, err = o.arrowRecords(recs, w, topic, body)
			if err != nil {
				field := keoFieldInputFormat
				var re *RecordError
				if errors.As(err, &re) {
					field = keoFieldMaxMessageBytes
				}
				fail(i, field, err)
				recs = recs[:n]
				continue
			}
			for range recs[n:] {
				msgOf = append(msgOf, i)
			}
			continue
		}
		r := &slab[i]
		r.Topic, r.Value = topic, body
		if o.conf.mirror != nil {
			if err := mirrorRecord(r, msg); err != nil {
				fail(i, keoFieldMirror, err)
				continue
			}
		}
		if o.conf.key != nil {
			k, err := keyX.bytes(i)
			if err != nil {
				fail(i, keoFieldKey, err)
				continue
			}
			r.Key = k
		}
		if o.conf.partition != nil {
			p, err := partX.int32(i)
			if err == nil && p < 0 {
				err = fmt.Errorf("negative partition %d", p)
			}
			r.Partition = p
			if err != nil {
				fail(i, keoFieldPartition, err)
				continue
			}
		}
		if o.conf.metadata != nil {
			_ = o.conf.metadata.WalkMut(msg, func(k string, v any) error {
				r.Headers = appendHeaders(r.Headers, k, v)
				return nil
			})
		}
		if sz := recordSize(r); sz > o.conf.maxMessageBytes {
			fail(i, keoFieldMaxMessageBytes, &RecordError{Topic: topic, Partition: r.Partition, Size: sz, Err: fmt.Errorf("larger than %s %d", keoFieldMaxMessageBytes, o.conf.maxMessageBytes)})
			continue
		}
		msgOf = append(msgOf, i)
		recs = append(recs, r)
	}
	w.recs, w.msgOf = recs, msgOf
	return w
}

// recordHeap is what the output keeps on the heap for a record from
// WriteBatch until the call returns, besides the message's bytes, which the
// record references: the kgo.Record, the pointer to it and the index of its
// message in the write, and franz-go's entry for it in its buffered batch.
// Measured by TestInputBudgetBoundsOutputRecords: kafka_native's count with
// it tracks the heap of a kafka_native -> kafka_eos pipeline holding its
// records.
const recordHeap = 280

// holdInInput adds what w's records keep on the heap (recordHeap each, and
// their keys and headers, which the output makes for them) to the budget of
// the kafka_native batches their messages were read in (handover.Holder),
// and returns the function that takes them back, called when WriteBatch
// returns: from then on the output keeps nothing of the batch, and the input
// releases the rest once the batch is acknowledged. Without it the input's
// max_buffered_bytes would count the messages but not the records, and the
// heap of a kafka_native -> kafka_eos pipeline would pass the budget.
func holdInInput(w *write) (undo func()) {
	type held struct {
		h handover.Holder
		n int64
	}
	var (
		hs      []held
		lastCtx context.Context
		last    = -1 // index in hs of lastCtx's holder; -1: none
	)
	for i, r := range w.recs {
		// The messages of a kafka_native batch share one context: one
		// look-up for a run of them.
		ctx := w.batch[w.msgOf[i]].Context()
		if i == 0 || !sameContext(ctx, lastCtx) {
			lastCtx, last = ctx, -1
			if h := handover.HolderOf(ctx); h != nil {
				last = len(hs)
				hs = append(hs, held{h: h})
			}
		}
		if last < 0 {
			continue
		}
		n := int64(recordHeap + len(r.Key))
		for _, h := range r.Headers {
			n += int64(headerHeap + len(h.Key) + len(h.Value))
		}
		hs[last].n += n
	}
	for _, x := range hs {
		x.h(x.n)
	}
	return func() {
		for _, x := range hs {
			x.h(-x.n)
		}
	}
}

// headerHeap is a record header's entry (kgo.RecordHeader) besides its key
// and value.
const headerHeap = 40

// sameContext reports whether a and b are the same context value. A context
// of a type that cannot be compared (== would panic) is never the same.
func sameContext(a, b context.Context) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}
