package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// countRecords counts, per partition of topic, the records a read_committed
// reader sees from the log start up to upTo[partition] (exclusive; the last
// stable offset where upTo is nil or has no entry): data records of committed
// or non-transactional batches, without transaction markers and without the
// records of aborted transactions. It reads batch headers only (the records
// are not decoded), so that a topic of millions of records is counted in
// about the time the broker takes to send it: the harness asserts with it
// that every contender wrote, read or copied exactly the records it claims.
func countRecords(ctx context.Context, cl *kgo.Client, topic string, upTo map[int32]int64) (map[int32]int64, error) {
	return countInto(ctx, cl, topic, upTo, nil)
}

// countIndex keeps, per partition, the read_committed count of every record
// batch of a topic from its log start to the last stable offset when it was
// counted, so that a count below any bound inside that span is a lookup, not
// a read of the topic again. The consume rows' topic changes only when it is
// filled (which counts it anew), and eight readers and four copies are checked
// against it per size.
type countIndex struct {
	parts map[int32]*partIndex
}

type partIndex struct {
	from, end int64 // the span indexed: [log start, last stable offset)
	batches   []indexedBatch
}

// indexedBatch is one batch of the log: n is the records a read_committed
// reader takes from it (0 for a marker and for an aborted transaction's
// batch); dense says its records hold every offset of [base, last], so that a
// bound inside it cuts it at bound-base records.
type indexedBatch struct {
	base, last, n int64
	dense         bool
}

// countIndexed counts the whole topic (as countRecords with no bound) and
// returns the index of what it read.
func countIndexed(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, *countIndex, error) {
	idx := &countIndex{parts: map[int32]*partIndex{}}
	counts, err := countInto(ctx, cl, topic, nil, idx)
	if err != nil {
		return nil, nil, err
	}
	return counts, idx, nil
}

// below answers countRecords(topic, upTo) from the index; ok is false where it
// cannot (a partition it does not hold, a bound outside its span, a bound
// inside a batch that is not dense), and the caller reads the topic instead.
func (x *countIndex) below(upTo map[int32]int64) (map[int32]int64, bool) {
	if x == nil {
		return nil, false
	}
	out := map[int32]int64{}
	for p, pi := range x.parts {
		end, bounded := upTo[p]
		if !bounded {
			end = pi.end
		}
		if end < pi.from || end > pi.end {
			return nil, false
		}
		var n int64
		for _, b := range pi.batches {
			if b.base >= end {
				break
			}
			switch {
			case b.last < end:
				n += b.n
			case b.n == 0:
			case !b.dense:
				return nil, false
			default:
				n += end - b.base
			}
		}
		out[p] = n
	}
	for p := range upTo {
		if _, ok := x.parts[p]; !ok {
			return nil, false
		}
	}
	return out, true
}

func countInto(ctx context.Context, cl *kgo.Client, topic string, upTo map[int32]int64, idx *countIndex) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("count %s: metadata: %v", topic, td.Err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	began := time.Now()
	defer func() {
		if d := time.Since(began); d > 2*time.Second {
			logf("counted %d records of %s in %.1fs", sum(out), topic, d.Seconds())
		}
	}()
	// The partitions are counted at once: the broker sends each from the
	// page cache, and one connection at a time leaves the cores idle.
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	type span struct{ from, end int64 }
	spans := map[int32]span{}
	for p := range td.Partitions {
		from, ok1 := starts.Lookup(topic, p)
		lso, ok2 := stable.Lookup(topic, p)
		if !ok1 || !ok2 || from.Err != nil || lso.Err != nil {
			return nil, fmt.Errorf("count %s[%d]: no start or stable offset", topic, p)
		}
		end := lso.Offset
		if b, ok := upTo[p]; ok {
			if b > end {
				return nil, fmt.Errorf("count %s[%d]: bound %d is past the last stable offset %d", topic, p, b, end)
			}
			end = b
		}
		spans[p] = span{from.Offset, end}
		if idx != nil {
			idx.parts[p] = &partIndex{from: from.Offset, end: end}
		}
	}
	for p, pd := range td.Partitions {
		sp := spans[p]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pi *partIndex
			if idx != nil {
				pi = idx.parts[p]
			}
			n, err := countPartition(ctx, cl.Broker(int(pd.Leader)), topic, td.ID, p, sp.from, sp.end, pi)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("count %s[%d]: %w", topic, p, err)
			}
			out[p] = n
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// sum adds the per-partition counts.
func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// Record batch v2 header layout (Kafka's DefaultRecordBatch).
const (
	rbBaseOffset      = 0
	rbLength          = 8
	rbMagic           = 16
	rbAttributes      = 21
	rbLastOffsetDelta = 23
	rbProducerID      = 43
	rbRecordCount     = 57
	rbHeaderSize      = 61
	attrCompression   = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20
)

// countPartition counts the read_committed data records in [from, end), and
// appends every batch read to pi (when not nil).
func countPartition(ctx context.Context, br *kgo.Broker, topic string, id [16]byte, p int32, from, end int64, pi *partIndex) (int64, error) {
	var n int64
	off := from
	// Producers whose aborted transaction is open at the current batch
	// (the standard read_committed filter: a producer enters at the first
	// offset of its aborted transaction and leaves at its abort marker).
	abortedOpen := map[int64]bool{}
	var pending []kmsg.FetchResponseTopicPartitionAbortedTransaction
	empty := 0
	for off < end {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 100
		req.MinBytes = 1
		req.MaxBytes = 64 << 20
		req.IsolationLevel = 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 32<<20
		rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, br)
		if err != nil {
			return 0, err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, errors.New("fetch answered another topic or partition")
		}
		rp2 := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(rp2.ErrorCode); err != nil {
			return 0, err
		}
		pending = append(pending, rp2.AbortedTransactions...)
		sort.Slice(pending, func(i, j int) bool { return pending[i].FirstOffset < pending[j].FirstOffset })
		b := rp2.RecordBatches
		progressed := false
		for len(b) >= rbHeaderSize && off < end {
			length := int(binary.BigEndian.Uint32(b[rbLength:]))
			if length < rbHeaderSize-12 || 12+length > len(b) {
				break // a partial batch at the end of the response
			}
			batch := b[:12+length]
			b = b[12+length:]
			if batch[rbMagic] != 2 {
				return 0, fmt.Errorf("record batch magic %d at offset %d", batch[rbMagic], off)
			}
			base := int64(binary.BigEndian.Uint64(batch[rbBaseOffset:]))
			last := base + int64(int32(binary.BigEndian.Uint32(batch[rbLastOffsetDelta:])))
			if last < off {
				continue // before the fetch offset (a batch is returned whole)
			}
			attrs := binary.BigEndian.Uint16(batch[rbAttributes:])
			pid := int64(binary.BigEndian.Uint64(batch[rbProducerID:]))
			for len(pending) > 0 && pending[0].FirstOffset <= last {
				abortedOpen[pending[0].ProducerID] = true
				pending = pending[1:]
			}
			ib := indexedBatch{base: base, last: last}
			switch {
			case attrs&attrControl != 0:
				if abortMarker(batch) {
					delete(abortedOpen, pid)
				}
			case attrs&attrTransactional != 0 && abortedOpen[pid]:
				// an aborted transaction's records
			default:
				c, err := recordsBelow(batch, base, last, off, end, attrs)
				if err != nil {
					return 0, err
				}
				n += c
				ib.n = c
				ib.dense = c == last-base+1
			}
			if pi != nil {
				if base < off || last >= end {
					// Cut by a bound: the index ends before it.
					pi.end = min(pi.end, max(base, pi.from))
				} else {
					pi.batches = append(pi.batches, ib)
				}
			}
			off = last + 1
			progressed = true
		}
		if !progressed {
			if empty++; empty > 50 {
				return 0, fmt.Errorf("no records at offset %d below %d", off, end)
			}
		} else {
			empty = 0
		}
	}
	return n, nil
}

// recordsBelow is the number of records of a data batch with offsets in
// [from, end): all of them unless a bound cuts the batch, in which case the
// records' offset deltas are read (uncompressed batches only).
func recordsBelow(batch []byte, base, last, from, end int64, attrs uint16) (int64, error) {
	count := int64(int32(binary.BigEndian.Uint32(batch[rbRecordCount:])))
	if base >= from && last < end {
		return count, nil
	}
	if attrs&attrCompression != 0 {
		return 0, fmt.Errorf("a compressed batch [%d, %d] is cut by the bounds [%d, %d)", base, last, from, end)
	}
	var n int64
	rec := batch[rbHeaderSize:]
	for i := int64(0); i < count; i++ {
		l, k := binary.Varint(rec)
		if k <= 0 || int(l) > len(rec)-k {
			return 0, fmt.Errorf("bad record in batch at %d", base)
		}
		body := rec[k : k+int(l)]
		rec = rec[k+int(l):]
		// attributes int8, timestampDelta varint, offsetDelta varint
		_, k1 := binary.Varint(body[1:])
		d, k2 := binary.Varint(body[1+k1:])
		if k1 <= 0 || k2 <= 0 {
			return 0, fmt.Errorf("bad record header in batch at %d", base)
		}
		if o := base + d; o >= from && o < end {
			n++
		}
	}
	return n, nil
}

// abortMarker says whether a control batch holds an ABORT marker (its one
// record's key: version int16, type int16, 0 = abort, 1 = commit).
func abortMarker(batch []byte) bool {
	rec := batch[rbHeaderSize:]
	_, k := binary.Varint(rec) // record length
	if k <= 0 || len(rec) < k+1 {
		return false
	}
	body := rec[k+1:] // past attributes
	for range 2 {     // timestampDelta, offsetDelta
		_, k = binary.Varint(body)
		if k <= 0 {
			return false
		}
		body = body[k:]
	}
	kl, k := binary.Varint(body)
	if k <= 0 || kl < 4 || len(body) < k+4 {
		return false
	}
	return binary.BigEndian.Uint16(body[k+2:]) == 0
}
