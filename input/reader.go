package input

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
)

// Metadata keys set on every message.
const (
	metaKey       = "kafka_key"
	metaTopic     = "kafka_topic"
	metaPartition = "kafka_partition"
	metaOffset    = "kafka_offset"
	metaTimestamp = "kafka_timestamp_ms"
	// metaTimestampUnix is the timestamp in seconds, under Redpanda
	// Connect's name.
	metaTimestampUnix = "kafka_timestamp_unix"
	metaTombstone     = "kafka_tombstone_message"

	// With format: arrow, instead of the per-record keys above (the
	// records are rows of the body).
	metaFirstOffset = "kafka_first_offset"
	metaLastOffset  = "kafka_last_offset"
	metaRecordCount = "kafka_record_count"

	// metaHeaderPrefix: a record header named like one of the keys above
	// (message format) is kept under this prefix and its name, e.g.
	// kafka_header_kafka_offset.
	metaHeaderPrefix = "kafka_header_"
)

// headerMetaKey is the metadata key of a record header: its own name, unless
// that is one of the keys the input sets itself.
func headerMetaKey(k string) string {
	switch k {
	case metaKey, metaTopic, metaPartition, metaOffset, metaTimestamp, metaTimestampUnix, metaTombstone:
		return metaHeaderPrefix + k
	}
	return k
}

// setHeaders sets the record headers hs as metadata of msg, which holds no
// metadata yet. A header whose name repeats in the record keeps every value:
// the metadata value is then a list of the values, in record order (a name
// that appears once is a string, as usual).
func setHeaders(msg *service.Message, hs []kgo.RecordHeader) {
	for _, h := range hs {
		k, v := headerMetaKey(h.Key), string(h.Value)
		prev, ok := msg.MetaGetMut(k)
		switch {
		case !ok:
			msg.MetaSetMut(k, v)
		default:
			if l, isList := prev.([]any); isList {
				msg.MetaSetMut(k, append(l, v))
			} else {
				msg.MetaSetMut(k, []any{prev, v})
			}
		}
	}
}

// pollTimeout bounds one PollFetches so that the loop re-evaluates pauses and
// probes even when every partition is paused or idle (PollFetches blocks
// until data arrives or its context ends).
const pollTimeout = 250 * time.Millisecond

// readyBatch is one Benthos batch: records of one fetch of one partition, cut
// at the batch caps, with the span to acknowledge.
type readyBatch struct {
	msgs service.MessageBatch
	tp   tp
	sp   *span
}

// fetchLoop is the one goroutine that polls the consumer client. It turns
// fetches into batches (dropping control records, applying the tombstone
// policy, cutting at the stops), tracks positions, pauses partitions that are
// finished or hold too many unacknowledged bytes, probes idle partitions below
// their stops, and classifies fetch errors. It is stopped through shut (soft
// stop) and signals has-stopped when it returns.
type fetchLoop struct {
	cfg    *config
	cl     *kgo.Client
	tr     *tracker
	probe  *prober
	met    *inputMetrics
	log    *service.Logger
	shut   *shutdown.Signaller
	out    chan<- readyBatch
	done   chan<- struct{} // closed once every partition is finished and its batches were sent
	onFail func(error)     // raises a fatal error
	// memShare is what all partitions' unacknowledged bytes may take
	// under the Go memory limit set now (memlimit.InputShare; tests set
	// their own); nil: no such bound.
	memShare func() int64
	// enc encodes the Arrow messages of format: arrow (nil otherwise);
	// only this loop's goroutine uses it.
	enc *kafkaarrow.Encoder

	unknown outages
	// topicIDs are the IDs of the topics read, as listed at start: a
	// topic of the same name with another ID is not the one read.
	topicIDs   map[string][16]byte
	lastErrLog map[string]time.Time
	// oorAt is when the consumer last reported OFFSET_OUT_OF_RANGE, per
	// partition (the probe tells a deletion the consumer had skipped
	// from one it is below).
	oorAt map[tp]time.Time
	// keepRecords puts each message's record in its context
	// (handover.WithRecord): the group's takeover is a kafka_eos output in
	// mirror mode, which copies the record's key, headers and timestamp
	// exactly.
	keepRecords bool
}

func (f *fetchLoop) run(ctx context.Context) {
	defer f.shut.TriggerHasStopped()
	ctx, cancel := f.shut.SoftStopCtx(ctx)
	defer cancel()

	for {
		if f.cfg.bounded() && f.tr.allFinished() {
			close(f.done)
			return
		}
		f.flowControl()
		pollCtx, pollCancel := context.WithTimeout(ctx, pollTimeout)
		f.tr.beginPoll()
		fetches := f.cl.PollFetches(pollCtx)
		seq := f.tr.endPoll()
		pollCancel()
		if ctx.Err() != nil {
			return
		}
		if err := f.handleErrors(ctx, fetches); err != nil {
			// Stop fetching: an authorization error would otherwise
			// be fetched again thousands of times a second until the
			// stream shuts down.
			var parts []tp
			for _, s := range f.tr.snapshots() {
				parts = append(parts, s.tp)
			}
			f.cl.PauseFetchTopics(topicsOf(parts)...)
			f.onFail(err)
			return
		}
		now := time.Now()
		var stopped bool
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if stopped || len(ftp.Records) == 0 {
				return
			}
			p := tp{ftp.Topic, ftp.Partition}
			// Only the current tracking's own fetches (the fetch
			// fence, see tracker): not a partition given up, nor
			// one assigned again since this poll.
			id, ok := f.tr.ownerFor(p, seq)
			if !ok {
				if _, tracked := f.tr.assignmentOf(p); tracked {
					f.log.Debugf("Partition %s: dropped %d records [%d, %d] fetched under an earlier assignment of it", p, len(ftp.Records), ftp.Records[0].Offset, ftp.Records[len(ftp.Records)-1].Offset)
				}
				return
			}
			end := ftp.HighWatermark
			if f.cfg.readCommitted {
				end = ftp.LastStableOffset
			}
			f.tr.update(p, func(ps *partState) {
				if end > ps.end {
					ps.end = end
				}
			})
			f.unknown.clear(p)
			if !f.process(ctx, p, id, ftp.Records, now) {
				stopped = true
			}
		})
		if stopped {
			return
		}
		if f.cfg.bounded() {
			if err := f.probeIdle(ctx, now); err != nil {
				f.onFail(err)
				return
			}
		}
	}
}

// process turns one partition's fetched records, fetched under its tracking
// (assignment) id, into batches. It returns false if the loop was stopped
// while handing a batch over. If the partition is revoked or lost while it
// runs (send waits for the pipeline), the rest of the records are dropped:
// they belong to no assignment now, and the next one starts from the
// committed offset with a fetch of its own.
func (f *fetchLoop) process(ctx context.Context, p tp, id uint64, recs []*kgo.Record, now time.Time) bool {
	pos, stop, finished, current := f.tr.positionAs(p, id)
	if finished || !current {
		return true
	}
	var (
		msgs  service.MessageBatch
		rows  []*kgo.Record // format: arrow: the records of the next Arrow message
		bytes int64         // the batch's keys and values (max_batch_bytes)
		held  int64         // what the batch takes on the heap (heldBytes)
		last  int64         = -1
		gone  bool          // the tracking is no longer id
		// bctx is the context the batch's messages are made in: it
		// holds the batch's slot, where flush sets the batch's
		// Holder and, with commits, its span once the batch is cut
		// (one context for the batch, not one per message).
		bctx context.Context
		slot *handover.SpanSlot
	)
	arrow := f.enc != nil
	// The topic and partition as metadata values, boxed once for the
	// fetch instead of once per record; the key, offset and timestamps a
	// chunk of records at a time.
	pm := partMeta{topic: p.Topic, partition: int64(p.Partition)}
	boxes := newMetaBoxes(recs)
	flush := func(to int64) bool {
		if to < 0 || gone {
			return true
		}
		emitted := int64(len(msgs))
		if arrow && len(rows) > 0 {
			bctx, slot = handover.WithSpanSlot(context.Background())
			msg, err := f.toArrowMessage(bctx, p, rows)
			if err != nil {
				f.onFail(err)
				return false
			}
			msgs, emitted = service.MessageBatch{msg}, int64(len(rows))
		}
		pending := len(msgs) > 0
		// What the batch holds on the heap until acknowledged: the sum
		// of heldBytes over its records.
		if !pending {
			held = 0
		}
		sp, current := f.tr.advanceAs(p, id, to, held, pending, now)
		if !current {
			gone = true
			f.log.Debugf("Partition %s: revoked or lost while its records up to %d were handed over; the rest of the fetch (to offset %d) is dropped", p, to, recs[len(recs)-1].Offset)
			return true
		}
		if pending && sp != nil {
			f.tr.update(p, func(ps *partState) { ps.emitted += emitted })
			// What the output keeps for the batch's records counts
			// against the budgets too, until the batch is acknowledged.
			slot.SetHolder(func(n int64) { f.tr.hold(p, sp, n) })
			if f.cfg.commits() {
				s := handover.Span{Topic: p.Topic, Partition: p.Partition, From: sp.from, To: sp.to, Generation: -1}
				if f.cfg.membership {
					s.MemberID, s.Generation = f.cl.GroupMetadata()
					s.Assignment = sp.owner.assignment
				}
				slot.Set(s)
			}
			if !f.send(ctx, readyBatch{msgs: msgs, tp: p, sp: sp}) {
				return false
			}
		}
		msgs, rows, bytes, held, last = nil, rows[:0], 0, 0, -1
		bctx, slot = nil, nil
		return true
	}
	// kafka_native_bytes_in counts the fetched records below the stop as
	// they arrive, before any batch of them waits for the pipeline: a slow
	// pipeline shows as a lag, not as a fetch rate of zero.
	var inBytes int64
	for _, r := range recs {
		if r.Offset < pos {
			continue
		}
		if stop != noStop && r.Offset >= stop {
			break
		}
		inBytes += int64(len(r.Key) + len(r.Value))
	}
	f.met.bytesIn(p, inBytes)
	for i, r := range recs {
		if r.Offset < pos {
			// Already accounted for: a probe advanced past it.
			continue
		}
		if stop != noStop && r.Offset >= stop {
			// kgo returns whole batches: whatever lies at or beyond
			// the stop is not ours, and proves [pos, stop) holds
			// nothing more.
			if !flush(last) {
				return false
			}
			f.tr.advanceAs(p, id, stop, 0, false, now)
			break
		}
		size := int64(len(r.Key) + len(r.Value))
		if n := len(msgs) + len(rows); n > 0 && (n >= f.cfg.maxBatchRecords || bytes+size > int64(f.cfg.maxBatchBytes)) {
			if !flush(last) {
				return false
			}
			if gone {
				return true
			}
		}
		last = r.Offset + 1
		pos = last
		if r.Attrs.IsControl() {
			// Transaction markers take an offset and carry no
			// application data; kept (KeepControlRecords) only so
			// that the position moves past them.
			continue
		}
		if r.Value == nil && f.cfg.tombstones == tombstonesDrop {
			continue
		}
		if arrow {
			rows = append(rows, r)
		} else {
			if msgs == nil {
				// Sized for the batch this record starts, rather
				// than grown to it by doubling.
				msgs = make(service.MessageBatch, 0, batchCap(len(recs)-i, f.cfg.maxBatchRecords, f.cfg.maxBatchBytes, size))
				bctx, slot = handover.WithSpanSlot(context.Background())
			}
			msgs = append(msgs, f.toMessage(bctx, r, &pm, boxes.of(i)))
		}
		bytes += size
		held += heldBytes(r, arrow, f.keepRecords)
	}
	return flush(last)
}

// send hands a batch to ReadBatch. While downstream is slow it keeps applying
// flow control, so that the partitions over their bound are paused even while
// the loop waits here (kgo keeps fetching for unpaused partitions meanwhile).
func (f *fetchLoop) send(ctx context.Context, b readyBatch) bool {
	tick := time.NewTicker(pollTimeout)
	defer tick.Stop()
	for {
		select {
		case f.out <- b:
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
			f.flowControl()
		}
	}
}

// partMeta are the metadata values shared by every record of a partition.
type partMeta struct {
	topic, partition any
}

// batchCap is the capacity of a batch whose first record's key and value take
// size bytes, with left records of the fetch from it on: at most
// maxRecords, and the records of that size max_batch_bytes holds.
func batchCap(left, maxRecords, maxBytes int, size int64) int {
	n := min(left, maxRecords)
	if size > 0 {
		n = int(min(int64(n), int64(maxBytes)/size+1))
	}
	return max(n, 1)
}

// toMessage makes the message of record r in the context ctx; pm and bm are
// its metadata values boxed (partMeta, metaBoxes).
func (f *fetchLoop) toMessage(ctx context.Context, r *kgo.Record, pm *partMeta, bm boxedMeta) *service.Message {
	tomb := r.Value == nil
	msg := service.NewMessageWithContext(ctx, r.Value)
	// Headers first, the input's own keys last: whoever produces to the
	// input topic chooses the headers, and must not choose what the input
	// says about the record (a forged kafka_offset would make a dedupe
	// keyed on it drop every later record of the partition; a forged
	// kafka_partition would redirect a copy partitioned by it).
	setHeaders(msg, r.Headers)
	msg.MetaSetMut(metaKey, bm.key)
	msg.MetaSetMut(metaTopic, pm.topic)
	msg.MetaSetMut(metaPartition, pm.partition)
	msg.MetaSetMut(metaOffset, bm.offset)
	msg.MetaSetMut(metaTimestamp, bm.timestampMs)
	msg.MetaSetMut(metaTimestampUnix, bm.tsSec)
	msg.MetaSetMut(metaTombstone, tomb)
	if tomb && f.cfg.tombstones == tombstonesFail {
		msg.SetError(fmt.Errorf("tombstone (null value) at %s:%d offset %d", r.Topic, r.Partition, r.Offset))
	}
	if f.keepRecords {
		msg = handover.WithRecord(msg, r)
	}
	return msg
}

// toArrowMessage encodes the records of one partition (markers and dropped
// tombstones already left out) as one message holding an Arrow IPC stream
// (kafkaarrow.Schema), with the partition and the offsets of its first and
// last record in metadata. The body is a fresh slice: the encoder's scratch
// buffers are reused by the next call, the body is not.
func (f *fetchLoop) toArrowMessage(ctx context.Context, p tp, rows []*kgo.Record) (*service.Message, error) {
	body, err := f.enc.AppendIPC(nil, rows)
	if err != nil {
		// Only ErrTooLarge: more than 2 GiB of keys, values or headers in
		// one batch, which max_batch_bytes prevents for keys and values.
		return nil, fmt.Errorf("encoding %d records of %s [%d, %d] as Arrow: %w (lower %s)", len(rows), p, rows[0].Offset, rows[len(rows)-1].Offset, err, knFieldMaxBatchBytes)
	}
	msg := service.NewMessageWithContext(ctx, body)
	msg.MetaSetMut(metaTopic, p.Topic)
	msg.MetaSetMut(metaPartition, int64(p.Partition))
	msg.MetaSetMut(metaFirstOffset, rows[0].Offset)
	msg.MetaSetMut(metaLastOffset, rows[len(rows)-1].Offset)
	msg.MetaSetMut(metaRecordCount, int64(len(rows)))
	// The mark (not the body) tells kafka_eos's input_format auto that
	// the body is Arrow: a record's value never can.
	return handover.MarkArrow(msg), nil
}

// What a record handed to the pipeline and not yet acknowledged takes on the
// heap besides its key, value and headers, measured by BenchmarkHeapPerRecord
// (and held to by TestBufferedBytesTrackHeap): 150,000 records held by an
// output that acknowledges nothing, the heap after a collection.
const (
	// messageOverhead is a message's: the Benthos message and its
	// metadata map with the kafka_* keys (the key copied into it), the
	// transaction and sort group Benthos wraps a batch in, the span that
	// acknowledges it, and the record's framing in the consumer's fetch
	// buffer, which its value references. Measured: 1,000 bytes (100-byte and 1 KiB values).
	messageOverhead = 1000
	// headerOverhead is a header's, as a message's metadata: its value
	// copied into a string, its map entry and the map's growth. Measured:
	// 160-165 bytes per 25-byte header (4 headers), its key and value
	// included.
	headerOverhead = 144
	// keptRecordOverhead is the consumer's record a message carries for a
	// kafka_eos output in mirror mode (handover.WithRecord): the kgo.Record
	// and the context that carries it. From their sizes, not measured.
	keptRecordOverhead = 320
	// rowOverhead is an Arrow row's share of its message's body besides
	// its key and value bytes: offset, timestamp, the offsets of its key,
	// value and headers, validity bits and the body's spare capacity.
	// Measured: about 40 bytes (the body is 145 bytes per 100-byte row).
	rowOverhead = 48
	// rowHeaderOverhead is a header's in an Arrow row, besides its key and
	// value: its offsets in the headers' key and value columns.
	rowHeaderOverhead = 16
)

// heldBytes is what the input counts (max_buffered_bytes,
// kafka_native_buffered_bytes) for record r handed to the pipeline and not
// yet acknowledged: what it takes on the heap, as a message (with the
// consumer's record kept for mirror mode) or as a row of an Arrow message.
func heldBytes(r *kgo.Record, arrow, keep bool) int64 {
	n := int64(len(r.Key) + len(r.Value))
	per := int64(headerOverhead)
	if arrow {
		n += rowOverhead
		per = rowHeaderOverhead
	} else {
		n += messageOverhead
		if keep {
			n += keptRecordOverhead
		}
	}
	for _, h := range r.Headers {
		n += int64(len(h.Key)+len(h.Value)) + per
	}
	return n
}

// flowControl pauses finished partitions (so kgo stops fetching past their
// stops), partitions whose unacknowledged bytes exceed their bound, and every
// partition while all of them together exceed max_buffered_bytes or, under a
// Go memory limit, their share of it (memlimit.InputShare); it resumes them
// once acks brought them below. kgo drops the buffered data of a paused
// partition and fetches it again on resume, from its own cursor, so nothing
// is lost.
func (f *fetchLoop) flowControl() {
	pause := map[string][]int32{}
	resume := map[string][]int32{}
	f.tr.mu.Lock()
	var total int64
	for _, p := range f.tr.order {
		total += f.tr.parts[p].unackedBytes
	}
	share := int64(math.MaxInt64)
	if f.memShare != nil {
		share = f.memShare()
	}
	f.tr.memShare = share
	overTotal := total > min(f.cfg.maxBufferedTotal, share)
	f.met.buffered.Set(total)
	for _, p := range f.tr.order {
		ps := f.tr.parts[p]
		want := ps.finished || ps.unackedBytes > f.cfg.maxBufferedBytes || overTotal
		switch {
		case want && !ps.paused:
			pause[p.Topic] = append(pause[p.Topic], p.Partition)
			ps.paused = true
		case !want && ps.paused:
			resume[p.Topic] = append(resume[p.Topic], p.Partition)
			ps.paused = false
		}
	}
	f.tr.mu.Unlock()
	if len(pause) > 0 {
		f.cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		f.cl.ResumeFetchPartitions(resume)
	}
}

// unknownGap: two unknown-topic errors of one partition further apart than
// this belong to two outages. During an outage kgo repeats the error at every
// fetch of the partition and every metadata refresh (at least every 5s, its
// MetadataMinAge), well within it.
const unknownGap = 15 * time.Second

// outages measures, per partition (-1: a whole topic), how long unknown-topic
// errors have come without a gap of unknownGap: an idle partition that saw one
// such error long ago (a topic being created) and another now (a broker
// restart) is not in a long outage.
type outages struct {
	m map[tp]outage
}

type outage struct{ first, last time.Time }

// observe records an error of p at now and returns how long the outage has
// lasted.
func (o *outages) observe(p tp, now time.Time) time.Duration {
	if o.m == nil {
		o.m = map[tp]outage{}
	}
	u, ok := o.m[p]
	if !ok || now.Sub(u.last) > unknownGap {
		u.first = now
	}
	u.last = now
	o.m[p] = u
	return now.Sub(u.first)
}

// clear ends p's outage (records arrived, or the metadata lists it).
func (o *outages) clear(p tp) { delete(o.m, p) }

// exists asks the brokers' metadata whether p's topic (and partition, unless
// -1) exists.
func (f *fetchLoop) exists(ctx context.Context, p tp) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	meta, err := f.probe.adm.Metadata(ctx, p.Topic)
	if err != nil {
		return false, err
	}
	td, ok := meta.Topics[p.Topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) || errors.Is(td.Err, kerr.UnknownTopicID) {
		return false, nil
	}
	if td.Err != nil {
		return false, td.Err
	}
	if id, known := f.topicIDs[p.Topic]; known && id != ([16]byte{}) && td.ID != id {
		// Deleted and created again: the topic read is gone, and the
		// consumer never adopts the new one.
		return false, nil
	}
	if p.Partition < 0 {
		return true, nil
	}
	_, ok = td.Partitions[p.Partition]
	return ok, nil
}

// handleErrors classifies fetch errors: fatal ones are returned, an unknown
// topic is fatal once it outlived the grace period, data loss is fatal under
// reset none and a counted warning otherwise, and the rest is retried by kgo
// and logged at most every few seconds per kind.
func (f *fetchLoop) handleErrors(ctx context.Context, fetches kgo.Fetches) error {
	var (
		fatalErr   error
		outOfRange = map[tp]bool{}
	)
	fetches.EachError(func(topic string, partition int32, err error) {
		if fatalErr != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		p := tp{topic, partition}
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(err, kerr.InvalidSessionTimeout):
			// The group refused the join (kgo reports group errors
			// as a fetch error of no partition); kgo would rejoin
			// with the same timeout forever.
			fatalErr = &ConfigError{Field: knFieldSessionTimeout, Err: fmt.Errorf("group %s refused session_timeout %v (the broker's group.min.session.timeout.ms and group.max.session.timeout.ms bound it): %w", f.cfg.group, f.cfg.session, err)}
		case isFatal(err):
			fatalErr = fmt.Errorf("fetching %s: %w", p, err)
		case errors.Is(err, kerr.OffsetOutOfRange):
			outOfRange[p] = true
			f.oorAt[p] = time.Now()
		case isUnknownTopic(err):
			if f.unknown.observe(p, time.Now()) <= f.cfg.unknownTopicGrace {
				return
			}
			// The outage outlived the grace: raise it only if the
			// brokers' metadata confirms it.
			switch exists, merr := f.exists(ctx, p); {
			case merr != nil:
				f.log.Debugf("Confirming that %s is unknown: %v", p, merr)
			case exists:
				f.unknown.clear(p)
				f.log.Warnf("Fetches of %s answered %v for longer than %s %v, but the brokers' metadata lists it: reading on", p, err, knFieldUnknownTopicGrace, f.cfg.unknownTopicGrace)
			default:
				if errors.Is(err, kerr.UnknownTopicID) {
					err = fmt.Errorf("%w (deleted, or deleted and created again)", err)
				}
				fatalErr = &UnknownTopicError{Topic: topic, Partition: partition, Err: err}
				fatalErr = &ConfigError{Field: knFieldTopics, Err: fatalErr}
			}
		case errors.As(err, &loss):
			dl := &DataLossError{TP: p, From: loss.ResetTo, To: loss.ConsumedTo}
			f.met.dataLoss(p, loss.ConsumedTo-loss.ResetTo)
			if f.cfg.reset == offsetNone {
				fatalErr = &ConfigError{Field: knFieldResetOffset, Err: dl}
				return
			}
			f.log.Warnf("%v; continuing from offset %d", dl, loss.ResetTo)
		default:
			var tooLarge *kgo.ErrDecompressTooLarge
			if errors.As(err, &tooLarge) {
				// kgo stops the partition for good: reading the
				// batch again fails the same way.
				fatalErr = &ConfigError{Field: knFieldMaxDecompressed, Err: fmt.Errorf(
					"partition %s: the batch at offset %d (to %d) decompresses to more than %d bytes; raise %s, or start after it",
					p, tooLarge.Offset, tooLarge.NextOffset-1, f.cfg.maxDecompressed, knFieldMaxDecompressed)}
				return
			}
			now := time.Now()
			f.tr.update(p, func(ps *partState) { ps.lastErr, ps.lastErrAt = err.Error(), now })
			key := p.String() + " " + strconv.Quote(err.Error())
			if t, ok := f.lastErrLog[key]; !ok || now.Sub(t) > 10*time.Second {
				f.lastErrLog[key] = now
				pos, _, _ := f.tr.position(p)
				f.log.Warnf("Fetching %s at offset %d: %v (retried; repeated at most every 10s)", p, pos, err)
			}
		}
	})
	if fatalErr != nil {
		return fatalErr
	}
	for p := range outOfRange {
		if err := f.outOfRange(ctx, p); err != nil {
			if isFatal(err) {
				return err
			}
			f.log.Debugf("Handling OFFSET_OUT_OF_RANGE on %s: %v", p, err)
		}
	}
	return nil
}

// outOfRange handles OFFSET_OUT_OF_RANGE. Starts are exact and validated, so
// it means the log start moved past the position while reading (retention,
// DeleteRecords) or the log was truncated below it. The client runs with
// NoResetOffset, which keeps the error rather than resetting silently (its
// resets log a warning at most and, below the log start, report nothing), so
// the loss is measured here: fatal under reset_offset none, counted and logged
// otherwise, and the consumer is moved to the log start (or, after a
// truncation, to the end).
func (f *fetchLoop) outOfRange(ctx context.Context, p tp) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	pos, stop, finished := f.tr.position(p)
	if finished {
		return nil
	}
	starts, err := listOK(f.probe.adm.ListStartOffsets(ctx, p.Topic))
	if err != nil {
		return err
	}
	ends, err := listOK(f.probe.adm.ListEndOffsets(ctx, p.Topic))
	if err != nil {
		return err
	}
	logStart, err := lookup(starts, p)
	if err != nil {
		return err
	}
	hwm, err := lookup(ends, p)
	if err != nil {
		return err
	}
	to := pos
	switch {
	case pos < logStart:
		to = logStart
		if stop != noStop {
			to = min(to, stop)
		}
		dl := &DataLossError{TP: p, From: pos, To: to}
		f.met.dataLoss(p, to-pos)
		f.tr.update(p, func(ps *partState) { ps.lost += to - pos })
		if f.cfg.reset == offsetNone {
			return &ConfigError{Field: knFieldResetOffset, Err: dl}
		}
		f.log.Warnf("%v; continuing from offset %d", dl, to)
		f.tr.advance(p, to, 0, false, time.Now())
	case pos > hwm:
		dl := fmt.Errorf("partition %s: the log was truncated to %d below the position %d (unclean leader election?)", p, hwm, pos)
		if f.cfg.reset == offsetNone {
			return &ConfigError{Field: knFieldResetOffset, Err: dl}
		}
		// The offsets [hwm, pos) now hold records written after the
		// truncation: read them, as the Java consumer does once it
		// finds where the log diverged. Those read before it are gone
		// from the log.
		f.log.Warnf("%v; reading on from offset %d (the records now at offsets [%d, %d) are read)", dl, hwm, hwm, pos)
		f.tr.rewind(p, hwm, time.Now())
		to = hwm
	default:
		// The position is in the log, the consumer's cursor was not: a
		// leader change, or a cursor that fell behind the position (the
		// probe moved the position past offsets that were then
		// deleted). The consumer follows the position.
	}
	f.setOffset(p, to)
	return nil
}

// probeIdle probes the partitions below their stops that delivered nothing
// for idle_probe_interval and are not paused, in one round. See prober.
func (f *fetchLoop) probeIdle(ctx context.Context, now time.Time) error {
	var (
		targets []probeTarget
		run     bool
	)
	for _, s := range f.tr.snapshots() {
		if s.finished || s.stop == noStop || s.position >= s.stop || s.paused {
			continue
		}
		if must, may := f.probe.due(s.tp, s.position, s.lastAdvance, now); may {
			run = run || must
			targets = append(targets, probeTarget{tp: s.tp, pos: s.position, stop: s.stop})
		}
	}
	if !run {
		return nil
	}
	err := f.probe.round(ctx, targets, func(p tp) time.Time { return f.oorAt[p] }, f.setOffset)
	f.probe.probed(targets, now)
	return err
}

// setOffset moves the consumer's cursor of p to at, so that it agrees with
// the tracked position (kgo drops what it buffered for p).
func (f *fetchLoop) setOffset(p tp, at int64) {
	f.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.Topic: {p.Partition: {Epoch: -1, Offset: at}}})
}
