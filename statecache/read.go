package statecache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stallAfter is how long a read waits without any record of a partition that
// is still short of its target before it writes a barrier (see readToEnd).
var stallAfter = 2 * time.Second

// barrierKey is the key of the tombstones readToEnd writes as barriers.
var barrierKey = append(append([]byte{}, reservedPrefix...), "barrier"...)

// readToEnd reads every partition up to the end offset (high watermark)
// listed when it starts. Everything acknowledged before that is below it.
//
// Progress is measured by the offsets of the records read, control records
// included. That can fall short of the end when the last records of a
// partition are gone: compaction removes a tombstone after
// delete.retention.ms, and an aborted transaction's records and markers, once
// their segment is no longer active; franz-go skips such gaps without
// reporting them. So when a partition is short of its target and nothing
// arrives for stallAfter, the reader writes a barrier (a tombstone under a
// reserved key, never returned) to that partition and reads up to it
// instead: any record it sees at or past the barrier is past the old target.
// Tombstones leave nothing behind once compacted.
//
// It reads into the view a reload is building, if one is, else into the view
// Get serves. Once it reached every target it stores when it listed them in
// the view (listedAt) and returns how long after the previous such listing it
// finished.
func (c *Cache) readToEnd(ctx context.Context) (since time.Duration, err error) {
	topic := c.cfg.Topic
	listedAt := time.Now()
	starts, err := listOffsets(ctx, c.adm.ListStartOffsets, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka_state: listing start offsets of topic %q: %w", topic, err)
	}
	ends, err := listOffsets(ctx, c.listEnd, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka_state: listing end offsets of topic %q: %w", topic, err)
	}

	target := make(map[int32]int64)
	c.mu.Lock()
	v := c.target()
	for p := int32(0); p < c.meta.partitions; p++ {
		start, end := starts[p], ends[p]
		if v.next[p] < start {
			v.next[p] = start // records below the log start are gone
		}
		if end > v.next[p] {
			target[p] = end
		}
	}
	c.mu.Unlock()

	barriers := make(map[int32]bool)
	for len(target) > 0 {
		if c.closed.Load() {
			return 0, ErrClosed
		}
		pctx, cancel := context.WithTimeout(ctx, stallAfter)
		fs := c.cl.PollFetches(pctx)
		cancel()

		// Records first, whatever else the poll says: the client has
		// moved past them, so a record not applied now is never read
		// again by this client, and a later read would stall on it.
		progressed := make(map[int32]bool)
		c.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			progressed[r.Partition] = true
			if err := c.apply(v, r); err != nil {
				c.breakLocked(err)
			}
		})
		for p, t := range target {
			if v.next[p] >= t {
				delete(target, p)
			}
		}
		broken := c.broken
		c.mu.Unlock()
		if broken != nil {
			return 0, broken
		}

		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("kafka_state: reading topic %q to its end: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			switch {
			case errors.Is(err, context.DeadlineExceeded) && pctx.Err() != nil:
				// Our stall timer, not an error.
			case errors.Is(err, kgo.ErrClientClosed):
				ferr = ErrClosed
			case ferr == nil:
				ferr = fmt.Errorf("kafka_state: reading topic %q partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return 0, ferr
		}

		if pctx.Err() == nil {
			continue
		}
		for p := range target {
			if progressed[p] || barriers[p] {
				continue
			}
			off, err := c.writeBarrier(ctx, p)
			if err != nil {
				return 0, err
			}
			barriers[p] = true
			target[p] = off + 1
			c.logWarnf("kafka_state: topic %s partition %d: no record read up to its end offset for %v; wrote a barrier at offset %d and read up to it", topic, p, stallAfter, off)
		}
	}
	c.mu.Lock()
	if !v.listedAt.IsZero() {
		since = time.Since(v.listedAt)
	}
	v.listedAt = listedAt
	c.mu.Unlock()
	return since, nil
}

func (c *Cache) writeBarrier(ctx context.Context, p int32) (int64, error) {
	r := &kgo.Record{Topic: c.cfg.Topic, Partition: p, Key: barrierKey}
	if err := c.lockWrite(ctx); err != nil {
		return 0, fmt.Errorf("kafka_state: writing a read barrier to topic %q partition %d: waiting for an earlier write: %w", c.cfg.Topic, p, err)
	}
	switch err := c.produce(ctx, r, nil); {
	case err == nil:
		return r.Offset, nil
	case errors.Is(err, ErrClosed):
		return 0, ErrClosed
	case errors.Is(err, errNoAnswer):
		return 0, fmt.Errorf("kafka_state: writing a read barrier to topic %q partition %d: no answer from the broker: %w", c.cfg.Topic, p, ctx.Err())
	default:
		return 0, fmt.Errorf("kafka_state: writing a read barrier to topic %q partition %d: %w", c.cfg.Topic, p, err)
	}
}

// listOffsets lists start or end offsets of every partition of topic,
// retrying briefly: right after a topic is created, its leaders may not be
// known yet.
func listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string) (map[int32]int64, error) {
	for attempt := 0; ; attempt++ {
		los, err := list(ctx, topic)
		if err == nil {
			err = los.Error()
		}
		if err == nil {
			out := make(map[int32]int64)
			los.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
			return out, nil
		}
		if attempt >= 30 || ctx.Err() != nil {
			return nil, err
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// producerPartition keys the records of an open transaction. Markers are
// written per partition, and partitions are read at different paces, so the
// records held for one producer are kept apart per partition: a marker ends
// exactly the records before it in its own partition, never those of a
// later transaction already read from another partition.
type producerPartition struct {
	producerID int64
	partition  int32
}

// apply folds one record read from the topic into the map. c.mu is held.
//
// Transactions are resolved here (the consumer reads read_uncommitted): a
// transactional record is held per producer and partition until that
// producer's next control record in the partition; a commit marker applies
// the held records, an abort marker drops them. A producer has at most one
// open transaction, so its next marker in a partition ends the records held
// for it there.
//
// An error (a malformed fence suffix, a key in the wrong partition) stops
// the cache: the record cannot be ordered against the others of its key.
func (c *Cache) apply(v *view, r *kgo.Record) error {
	if r.Offset+1 > v.next[r.Partition] {
		v.next[r.Partition] = r.Offset + 1
	}
	pp := producerPartition{r.ProducerID, r.Partition}
	switch {
	case r.Attrs.IsControl():
		held := v.open[pp]
		delete(v.open, pp)
		if isCommitMarker(r.Key) {
			for _, h := range held {
				v.put(h.key, h.token, h.r.Value, h.r.Partition, h.r.Offset)
			}
		}
	case isReserved(r.Key):
	default:
		key, token, err := parseRecordKey(r.Key)
		if err != nil {
			return fmt.Errorf("kafka_state: topic %q partition %d offset %d: %w", c.cfg.Topic, r.Partition, r.Offset, err)
		}
		if err := c.checkPlacementLocked(key, r); err != nil {
			return err
		}
		if r.Attrs.IsTransactional() {
			v.open[pp] = append(v.open[pp], heldRecord{copyRecord(r), key, token})
		} else {
			v.put(key, token, r.Value, r.Partition, r.Offset)
		}
	}
	return nil
}

// heldRecord is a record of an open transaction with its key and fence
// token.
type heldRecord struct {
	r     *kgo.Record
	key   string
	token uint64
}

// isCommitMarker reads a control record key: int16 version, int16 type, where
// type 0 is ABORT and 1 is COMMIT.
func isCommitMarker(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 1
}

// put applies a record of key with token (value nil: a tombstone) read at
// partition and offset. The record with the highest token is the key's
// value; among records of one token (one record key) the one at the later
// offset. A record of a lower token is kept track of in the entry's others,
// for the winner's owner to delete. Records already applied (a refresh
// re-reading this process's own write) change nothing. c.mu is held.
func (v *view) put(key string, token uint64, value []byte, partition int32, offset int64) {
	e, ok := v.entries[key]
	switch {
	case !ok || token > e.token:
		n := entry{value: cloneBytes(value), token: token, partition: partition, offset: offset}
		if ok {
			n.others = e.others
			if e.value != nil { // a tombstone leaves no record behind
				n.others = withOther(n.others, e.token, other{offset: e.offset, live: true})
			}
		}
		// Copied: a fetched value aliases its whole fetch buffer.
		v.entries[key] = n
	case token == e.token:
		if e.partition == partition && e.offset >= offset {
			return
		}
		e.value, e.partition, e.offset = cloneBytes(value), partition, offset
		v.entries[key] = e
	default:
		if o, ok := e.others[token]; ok && o.offset >= offset {
			return
		}
		e.others = withOther(e.others, token, other{offset: offset, live: value != nil})
		v.entries[key] = e
	}
}

func withOther(m map[uint64]other, token uint64, o other) map[uint64]other {
	if m == nil {
		m = make(map[uint64]other)
	}
	m[token] = o
	return m
}

// view is what the cache knows of the topic: the latest value of every key
// and how far each partition has been read. c.mu guards it.
type view struct {
	entries map[string]entry
	open    map[producerPartition][]heldRecord // records of open transactions
	next    map[int32]int64                    // partition -> offset after the last record read
	// listedAt is when the last read that reached its targets listed
	// them (zero before the first).
	listedAt time.Time
}

func newView() *view {
	return &view{
		entries: make(map[string]entry),
		open:    make(map[producerPartition][]heldRecord),
		next:    make(map[int32]int64),
	}
}

// sweep forgets the tombstones the read has passed: nothing older of their
// record key can be read any more. A tombstone with a fence token stays, so
// that a later write with a lower token is still fenced.
func (v *view) sweep() {
	for k, e := range v.entries {
		for t, o := range e.others {
			if !o.live && o.offset < v.next[e.partition] {
				delete(e.others, t)
			}
		}
		if e.value == nil && e.token == 0 && e.offset < v.next[e.partition] {
			delete(v.entries, k) // token 0: there are no others
		}
	}
}

// target returns the view reads go into: the one a reload is building, if
// any, else the one Get serves. c.mu is held.
func (c *Cache) target() *view {
	if c.reload != nil {
		return c.reload
	}
	return c.v
}

// read brings the cache up to the end of the topic (under the load slot): on
// from where the last read stopped, or from the start when reading on could
// miss a deletion. Compaction removes a tombstone delete.retention.ms after
// (at the earliest) it was written, together with the values it deleted;
// every record past where a read stopped was written after that read listed
// its end offsets, so reading on is safe only if it completes within
// delete.retention.ms of that listing. Past that bound (less a tenth for the
// broker's clock and the cleaner's schedule) the cache reads the topic again
// from the start into a view of its own, and serves it once complete; until
// then Get serves the old view. A read from the start has the same bound
// (Kafka's: a consumer reading a compacted topic from its start must finish
// within delete.retention.ms); with the default of a day it is far off.
func (c *Cache) read(ctx context.Context) error {
	bound, err := c.deleteRetention(ctx)
	if err != nil {
		return err
	}
	bound -= bound / 10
	for {
		c.mu.Lock()
		reloading := c.reload != nil
		listedAt := c.v.listedAt
		c.mu.Unlock()
		if !reloading && !listedAt.IsZero() && time.Since(listedAt) > bound {
			if err := c.startReload(ctx, time.Since(listedAt), bound); err != nil {
				return err
			}
			continue
		}
		since, err := c.readToEnd(ctx)
		if err != nil {
			return err
		}
		if !reloading && since > bound {
			// Finished too late to trust: a tombstone past where
			// the previous read stopped may be gone.
			if err := c.startReload(ctx, since, bound); err != nil {
				return err
			}
			continue
		}
		c.mu.Lock()
		if c.reload != nil {
			c.v, c.reload = c.reload, nil
		}
		c.v.sweep()
		c.mu.Unlock()
		if reloading {
			c.logInfof("kafka_state: topic %s read again from the start", c.cfg.Topic)
		}
		return nil
	}
}

// startReload sets the consumer back to the start of every partition and
// starts a view for the read from there.
func (c *Cache) startReload(ctx context.Context, since, bound time.Duration) error {
	topic := c.cfg.Topic
	starts, err := listOffsets(ctx, c.adm.ListStartOffsets, topic)
	if err != nil {
		return fmt.Errorf("kafka_state: listing start offsets of topic %q: %w", topic, err)
	}
	v := newView()
	set := make(map[int32]kgo.EpochOffset)
	for p := int32(0); p < c.meta.partitions; p++ {
		v.next[p] = starts[p]
		set[p] = kgo.EpochOffset{Epoch: -1, Offset: starts[p]}
	}
	// SetOffsets drops what the client buffered for these partitions.
	c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: set})
	c.mu.Lock()
	c.reload = v
	c.mu.Unlock()
	c.logWarnf("kafka_state: topic %s: the last read listed its end %v ago, more than delete.retention.ms less a tenth (%v): tombstones written since may be compacted away; reading the topic again from the start", topic, since.Round(time.Second), bound)
	return nil
}

func copyRecord(r *kgo.Record) *kgo.Record {
	cp := *r
	cp.Key = append([]byte{}, r.Key...)
	cp.Value = cloneBytes(r.Value)
	cp.Headers = nil
	return &cp
}
