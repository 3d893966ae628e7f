package output

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/txnstate"
)

// batchRef is one WriteBatch call's batch inside an epoch.
type batchRef struct {
	// after is closed once the batch that joined the epoch before this one
	// handed its records over, handedCh once this one did: batches produce
	// in the order they joined (o.mu.Unlock() and Produce are apart).
	// before are the acked channels of the epochs live when the first
	// batch of this epoch joined (per-partition order across epochs).
	after, handedCh chan struct{}
	before          []chan struct{}
	batch           service.MessageBatch
	recs            []*kgo.Record
	// msgOf[i] is the message of recs[i] (an Arrow message gives several
	// records, a message not written none).
	msgOf []int
	mu    sync.Mutex
	errs  map[int]error // guarded by mu: messages whose record was refused for good
	// spans are the source ranges of the batch (Kafka-to-Kafka mode).
	spans []handover.Span
	// kps are the keys and positions of the messages written (dedupe
	// mode; replays dropped).
	kps []txnstate.KeyPos
}

// msgOfRecord returns the message of record r of the batch (found by
// pointer: on the failure path only).
func (b *batchRef) msgOfRecord(r *kgo.Record) int {
	for j, x := range b.recs {
		if x == r {
			return b.msgOf[j]
		}
	}
	return -1
}

type topicPartition struct {
	topic     string
	partition int32
}

// epoch is one Kafka transaction holding whole batches, carried by one slot.
// Its lifecycle is txnstate.Phase; the committer is the only goroutine that
// moves it past Sealed.
type epoch struct {
	n      uint64
	slot   *slot
	opened time.Time
	// pid and pepoch are the producer id and epoch the transaction began
	// with, to tell a zombie fence from our own timeout if it fails.
	pid    int64
	pepoch int16

	// Guarded by output.mu.
	batches []*batchRef
	records int
	bytes   int
	sealed  bool
	timer   *time.Timer
	// cause, when set before the committer reaches the epoch, aborts it: an
	// earlier epoch failed (cascade, invariant I5) or the output stops.
	cause error
	// ending is set by the committer just before EndTxn(commit): from then
	// on only the committer settles the epoch (never nacked blindly).
	ending bool

	// producing counts WriteBatch calls still handing records to the
	// client; the committer waits for it before Flush, so a flush covers
	// every record of the epoch.
	producing sync.WaitGroup

	mu    sync.Mutex // guards the fields the promises write
	parts map[topicPartition]txnstate.PartitionWrite
	// The partition of the record acknowledged last and the first offset
	// kept for it in parts (recordWritten). lastPart is -1 before any.
	lastTopic string
	lastPart  int32
	lastFirst int64
	failed    bool
	firstErr  error
	// Per-partition order (invariant I8): the epoch's records are all
	// acknowledged (acked closed) once it is sealed, every batch joined
	// handed its records over (handing 0) and every record's promise
	// ran (pending 0); a later epoch produces only after that. Guarded by
	// mu.
	handing    int
	pending    int
	ackSealed  bool
	acked      chan struct{}
	ackedDone  bool
	lastHanded chan struct{} // closed once the last batch joined handed its records over (guarded by output.mu)

	phase txnstate.Phase // committer only
	// offs are the source offsets the epoch commits (Kafka-to-Kafka;
	// committer only).
	offs []plannedOffset
	// mirror is what the epoch wrote to the positions topic (mirror mode;
	// committer only).
	mirror *epochMirror
	done   chan struct{}
	result error // set before done is closed
	// held is set for an in-doubt epoch: its batches are never nacked nor
	// acked; the waiters are released only by Close.
	held bool
}

func newEpoch(n uint64, s *slot) *epoch {
	return &epoch{
		n:        n,
		slot:     s,
		opened:   time.Now(),
		parts:    make(map[topicPartition]txnstate.PartitionWrite),
		lastPart: -1,
		done:     make(chan struct{}),
		acked:    make(chan struct{}),
	}
}

// advance moves the epoch to phase to; an illegal move is a bug.
func (ep *epoch) advance(to txnstate.Phase) {
	next, err := ep.phase.Next(to)
	if err != nil {
		panic(fmt.Sprintf("kafka_eos: epoch %d: %v", ep.n, err))
	}
	ep.phase = next
}

// promise returns the produce promise of the records of ref (one function
// for the batch, not one per record). It records the first offset and
// producer id per partition (the recovery identity) or the failure, naming
// the topic, partition and size. A record refused for good (too large for the
// topic, invalid for it, a partition the topic does not have) is blamed on its
// message as a *MessageError; any failure aborts the epoch.
func (ep *epoch) promise(ref *batchRef) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if err != nil {
			ep.recordFailed(ref, r, err)
			ep.recordDone()
			return
		}
		ep.recordWritten(r)
	}
}

// recordFailed keeps the failure of record r of ref: the epoch's first
// error, and the message's own error if the record was refused for good.
func (ep *epoch) recordFailed(ref *batchRef, r *kgo.Record, err error) {
	i := ref.msgOfRecord(r)
	rerr := &RecordError{Topic: r.Topic, Partition: r.Partition, Size: recordSize(r), Err: err}
	cause := fmt.Errorf("producing to topic %q: %w", r.Topic, err)
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.RecordListTooLarge) {
		cause = rerr // the record's size and where it went
	}
	if field, ok := refusedForGood(err); ok && i >= 0 {
		source := msgSource(ref.batch, i)
		ref.mu.Lock()
		if ref.errs == nil {
			ref.errs = make(map[int]error)
		}
		ref.errs[i] = &MessageError{Source: source, Field: field, Err: rerr}
		ref.mu.Unlock()
		cause = fmt.Errorf("the record of %s was refused: %w", source, rerr)
	}
	// Otherwise not this message's fault: the epoch fails, but
	// the message is not blamed on its own. The topic is named
	// all the same: TOPIC_AUTHORIZATION_FAILED alone does not
	// say which WRITE ACL is missing.
	ep.mu.Lock()
	if !ep.failed {
		ep.failed, ep.firstErr = true, cause
	}
	ep.mu.Unlock()
}

// recordWritten counts record r acknowledged and keeps the first offset
// written to its partition. franz-go acknowledges records partition batch by
// partition batch, in offset order, so most records are of the partition
// acknowledged just before, at or above the first offset kept for it: those
// change nothing and skip the map.
func (ep *epoch) recordWritten(r *kgo.Record) {
	ep.mu.Lock()
	if r.Partition != ep.lastPart || r.Offset < ep.lastFirst || r.Topic != ep.lastTopic {
		tp := topicPartition{r.Topic, r.Partition}
		w, ok := ep.parts[tp]
		if !ok || r.Offset < w.FirstOffset {
			w = txnstate.PartitionWrite{Topic: r.Topic, Partition: r.Partition, FirstOffset: r.Offset, ProducerID: r.ProducerID}
			ep.parts[tp] = w
		}
		ep.lastTopic, ep.lastPart, ep.lastFirst = r.Topic, r.Partition, w.FirstOffset
	}
	ep.pending--
	ep.checkAckedLocked()
	ep.mu.Unlock()
}

// refusedForGood says whether a produce error is the record's own and final
// (its replay would fail the same way), and which field decides it.
func refusedForGood(err error) (string, bool) {
	switch {
	case errors.Is(err, kerr.MessageTooLarge):
		return keoFieldMaxMessageBytes, true
	case errors.Is(err, kerr.InvalidRecord):
		return "value", true
	case strings.Contains(err.Error(), "invalid record partitioning choice"):
		// franz-go fails a record whose partition the topic does not
		// have before it is buffered (no sentinel error).
		return keoFieldPartition, true
	}
	return "", false
}

func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// spans returns the source spans of every batch (Kafka-to-Kafka mode).
func (ep *epoch) spans() []handover.Span {
	var out []handover.Span
	for _, b := range ep.batches {
		out = append(out, b.spans...)
	}
	return out
}

// partitions returns the partitions written, for the PREPARE record.
func (ep *epoch) partitions() []txnstate.PartitionWrite {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	out := make([]txnstate.PartitionWrite, 0, len(ep.parts))
	for _, w := range ep.parts {
		out = append(out, w)
	}
	return out
}

// wrote records, for the recovery identity, the first offset per partition
// of records produced outside the batches (the positions topic's, mirror
// mode).
func (ep *epoch) wrote(recs []*kgo.Record) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, r := range recs {
		tp := topicPartition{r.Topic, r.Partition}
		if w, ok := ep.parts[tp]; !ok || r.Offset < w.FirstOffset {
			ep.parts[tp] = txnstate.PartitionWrite{Topic: r.Topic, Partition: r.Partition, FirstOffset: r.Offset, ProducerID: r.ProducerID}
		}
	}
}

// failure returns the first record failure, if any.
func (ep *epoch) failure() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.failed {
		return ep.firstErr
	}
	return nil
}

// recordDone counts one record's promise run.
func (ep *epoch) recordDone() {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.pending--
	ep.checkAckedLocked()
}

// handed counts a batch that handed n records over to the client (after
// counting them pending, before producing them) or, with done, one that
// finished handing them over.
func (ep *epoch) handed(n int, done bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.pending += n
	if done {
		ep.handing--
	}
	ep.checkAckedLocked()
}

// sealAcked marks the epoch closed to new batches, for acked; with force the
// epoch is over (finished): acked is closed whatever is still pending.
func (ep *epoch) sealAcked(force bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.ackSealed = true
	if force && !ep.ackedDone {
		ep.ackedDone = true
		close(ep.acked)
	}
	ep.checkAckedLocked()
}

func (ep *epoch) checkAckedLocked() {
	if ep.ackSealed && ep.handing == 0 && ep.pending == 0 && !ep.ackedDone {
		ep.ackedDone = true
		close(ep.acked)
	}
}
