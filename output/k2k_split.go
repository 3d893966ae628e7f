package output

import (
	"errors"
	"fmt"
	"slices"

	"github.com/connect-eos/connect-eos/handover"
)

// A processor that splits one input batch into several batches (Benthos'
// split, group_by, group_by_value) hands each part to the output as a
// WriteBatch of its own, and every part carries the span of the whole input
// batch: the epoch committing the first part commits the group's offset past
// the records of the later parts, and a crash before they commit loses them.
// The connect-eos binary refuses such a config at start; this guard is for
// what config inspection cannot see (another Benthos build, a processor of
// another build). Nothing tells a first part from a whole batch whose other
// messages a processor dropped, so the guard recognises a split at its
// second part: a WriteBatch carrying a span that an earlier WriteBatch still
// in flight, or one that returned nil, carried. Stopping there would lose
// the later parts (their offsets may be committed already), so it drains
// instead: batches of spans the output has seen are still written, those of
// new spans are nacked, and once the group's committed offset and the
// input's hand-over passed every span seen (each input batch begun is
// written whole), the output stops with ErrSplitBatch (the fatal path).

// ErrSplitBatch stops the output when a processor split an input batch.
var ErrSplitBatch = errors.New("a processor split an input batch into several batches (Benthos' split, group_by or group_by_value): in Kafka-to-Kafka mode each part commits the source offsets of the whole input batch, so a crash after the first part committed and before the others did loses their records; every input batch begun was written whole, and the output stopped: remove the processor (kafka_native's max_batch_records and max_batch_bytes make smaller input batches)")

// errSplitRefused fails the messages of an input batch the output has not
// seen once a split was recognised: nacked, replayed after the restart.
var errSplitRefused = errors.New("a processor split an input batch (see the error logged): batches begun after that are not written, the output stops once the batches begun before are written whole")

// handedSpan is what the output knows of an input batch (span) handed to it.
type handedSpan struct {
	inFlight int  // WriteBatch calls holding it now
	acked    bool // a call holding it returned nil
}

// hand registers the spans of w (read: their messages are to be written)
// and recognises a second part of a split input batch. Once a split was
// recognised, the messages of spans not seen before fail with
// errSplitRefused and their spans leave w. It returns the spans registered:
// handDone releases them.
func (k *k2k) hand(w *write, o *output) []handover.Span {
	if len(w.spans) == 0 {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.handed == nil {
		k.handed = map[handover.Span]*handedSpan{}
	}
	var refused map[handover.Span]bool
	var reg []handover.Span
	for _, s := range w.spans {
		tp := topicPartition{s.Topic, s.Partition}
		if _, ok := k.base[tp]; !ok || slices.Contains(reg, s) {
			continue // no start handed over (no offset of it is committed), or parts merged in w
		}
		h := k.handed[s]
		if h == nil {
			if k.splitErr != nil {
				if refused == nil {
					refused = map[handover.Span]bool{}
				}
				refused[s] = true
				continue
			}
			h = &handedSpan{}
			k.handed[s] = h
		} else if k.splitErr == nil {
			k.splitErr = fmt.Errorf("kafka_eos %q: group %s: %s/%d [%d, %d) reached the output in a second batch: %w", o.conf.transactionalID, k.group, s.Topic, s.Partition, s.From, s.To, ErrSplitBatch)
			o.log.Errorf("%v (stopping once the input batches begun are written)", k.splitErr)
			k.split.Store(true)
		}
		h.inFlight++
		reg = append(reg, s)
	}
	if len(refused) == 0 {
		return reg
	}
	for i := range w.batch {
		if w.done[i] || w.unwritten(i) {
			continue
		}
		if s, ok := handover.SpanOf(w.batch[i]); ok && refused[s] {
			w.fail(i, errSplitRefused)
		}
	}
	w.dropRecords(nil)
	keep := w.spans[:0]
	for _, s := range w.spans {
		if !refused[s] {
			keep = append(keep, s)
		}
	}
	w.spans = keep
	return reg
}

// handDone releases the spans hand registered for a WriteBatch call that
// returned err: acknowledged with nil; forgotten on an error unless a call
// acknowledged them before (the input replays a batch nacked whole).
func (k *k2k) handDone(reg []handover.Span, err error) {
	if len(reg) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range reg {
		h := k.handed[s]
		if h == nil {
			continue // its partition was given up
		}
		h.inFlight--
		if err == nil {
			h.acked = true
		}
		if h.inFlight == 0 && !h.acked {
			delete(k.handed, s)
		}
	}
}

// pruneHandedLocked forgets the spans no call holds that the group's
// committed offset and the input's hand-over (every part acknowledged)
// passed: at each hand-over (addFloor), and while draining.
func (k *k2k) pruneHandedLocked() {
	for s, h := range k.handed {
		tp := topicPartition{s.Topic, s.Partition}
		if f, ok := k.floor[tp]; h.inFlight == 0 && ok && f >= s.To && k.committed[tp] >= s.To {
			delete(k.handed, s)
		}
	}
}

// splitDrained returns ErrSplitBatch's error once a split was recognised
// and every input batch begun is written whole and committed.
func (k *k2k) splitDrained() error {
	if !k.split.Load() {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.splitErr == nil {
		return nil
	}
	k.pruneHandedLocked()
	if len(k.handed) > 0 {
		return nil
	}
	return k.splitErr
}

// stopIfSplitDrained stops the output (fatal) once splitDrained says so.
func (o *output) stopIfSplitDrained() error {
	if o.k2k == nil {
		return nil
	}
	err := o.k2k.splitDrained()
	if err == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stopLocked(err, true)
}
