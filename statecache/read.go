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
func (c *Cache) readToEnd(ctx context.Context) error {
	topic := c.cfg.Topic
	starts, err := listOffsets(ctx, c.adm.ListStartOffsets, topic)
	if err != nil {
		return fmt.Errorf("kafka_state: listing start offsets of topic %q: %w", topic, err)
	}
	ends, err := listOffsets(ctx, c.listEnd, topic)
	if err != nil {
		return fmt.Errorf("kafka_state: listing end offsets of topic %q: %w", topic, err)
	}

	target := make(map[int32]int64)
	c.mu.Lock()
	for p := int32(0); p < c.meta.partitions; p++ {
		start, end := starts[p], ends[p]
		if c.next[p] < start {
			c.next[p] = start // records below the log start are gone
		}
		if end > c.next[p] {
			target[p] = end
		}
	}
	c.mu.Unlock()

	barriers := make(map[int32]bool)
	for len(target) > 0 {
		if c.closed.Load() {
			return ErrClosed // Close waits for this read; do not keep it
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
			if err := c.apply(r); err != nil {
				c.breakLocked(err)
			}
		})
		for p, t := range target {
			if c.next[p] >= t {
				delete(target, p)
			}
		}
		broken := c.broken
		c.mu.Unlock()
		if broken != nil {
			return broken
		}

		if err := ctx.Err(); err != nil {
			return fmt.Errorf("kafka_state: reading topic %q to its end: %w", topic, err)
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
			return ferr
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
				return err
			}
			barriers[p] = true
			target[p] = off + 1
			c.logWarnf("kafka_state: topic %s partition %d: no record read up to its end offset for %v; wrote a barrier at offset %d and read up to it", topic, p, stallAfter, off)
		}
	}
	return nil
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
// An error (a malformed fence header) stops the cache: the record cannot be
// ordered against the others of its key.
func (c *Cache) apply(r *kgo.Record) error {
	if r.Offset+1 > c.next[r.Partition] {
		c.next[r.Partition] = r.Offset + 1
	}
	pp := producerPartition{r.ProducerID, r.Partition}
	switch {
	case r.Attrs.IsControl():
		held := c.open[pp]
		delete(c.open, pp)
		if isCommitMarker(r.Key) {
			for _, h := range held {
				c.put(h.r, h.token)
			}
		}
	case isReserved(r.Key):
	default:
		if err := c.checkPlacementLocked(r); err != nil {
			return err
		}
		token, err := tokenOf(r)
		if err != nil {
			return err
		}
		if r.Attrs.IsTransactional() {
			c.open[pp] = append(c.open[pp], heldRecord{copyRecord(r), token})
		} else {
			c.put(r, token)
		}
	}
	return nil
}

// heldRecord is a record of an open transaction with its fence token.
type heldRecord struct {
	r     *kgo.Record
	token uint64
}

// isCommitMarker reads a control record key: int16 version, int16 type, where
// type 0 is ABORT and 1 is COMMIT.
func isCommitMarker(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 1
}

// put sets the key of r to its value (nil: a tombstone) unless the map holds
// a record of a higher fence token, or of the same token and partition at an
// equal or later offset. c.mu is held.
func (c *Cache) put(r *kgo.Record, token uint64) {
	if isReserved(r.Key) {
		return
	}
	key := string(r.Key)
	if e, ok := c.entries[key]; ok {
		if e.token > token || e.token == token && e.partition == r.Partition && e.offset >= r.Offset {
			return
		}
	}
	// Copied: a fetched value aliases its whole fetch buffer.
	c.entries[key] = entry{value: cloneBytes(r.Value), token: token, partition: r.Partition, offset: r.Offset}
}

func copyRecord(r *kgo.Record) *kgo.Record {
	cp := *r
	cp.Key = append([]byte{}, r.Key...)
	cp.Value = cloneBytes(r.Value)
	cp.Headers = nil
	return &cp
}
