package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outRecord is a record of the output topic as a read_committed reader sees
// it.
type outRecord struct {
	partition int32
	offset    int64
	id        string // "r<i>", or anything else the output holds
	key       string
	batch     string // the sim_batch header
}

// readCommitted reads the whole output topic read_uncommitted with the
// control records, up to its high watermarks, and keeps what a
// read_committed reader sees: non-transactional records, and transactional
// ones whose transaction ended with a commit marker on that partition. It
// also returns the transactions left open (records with no marker yet).
// Reading the markers directly ends the read exactly at the high watermark,
// with no waiting for quiet.
func readCommitted(cl *kgo.Client, addr, topic string) ([]outRecord, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	hwm := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { hwm[o.Partition] = o.Offset })
	offs := map[string]map[int32]kgo.Offset{topic: {}}
	left := 0
	for p, end := range hwm {
		offs[topic][p] = kgo.NewOffset().AtStart()
		if end > 0 {
			left++
		}
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(offs), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	var out []outRecord
	var open []string
	next := map[int32]int64{}
	byPart := map[int32][]*kgo.Record{}
	for left > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("reading %s: %w (at %v of %v)", topic, err, next, hwm)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			byPart[rec.Partition] = append(byPart[rec.Partition], rec)
			before := next[rec.Partition]
			next[rec.Partition] = rec.Offset + 1
			if before < hwm[rec.Partition] && rec.Offset+1 >= hwm[rec.Partition] {
				left--
			}
		})
	}
	for _, p := range sortedKeys(byPart) {
		recs := byPart[p]
		visible := map[int64]bool{}
		txn := map[int64][]*kgo.Record{} // producer id -> records awaiting a marker
		for _, rec := range recs {
			switch {
			case rec.Attrs.IsControl():
				commit := len(rec.Key) >= 4 && binary.BigEndian.Uint16(rec.Key[2:4]) == 1
				if commit {
					for _, x := range txn[rec.ProducerID] {
						visible[x.Offset] = true
					}
				}
				delete(txn, rec.ProducerID)
			case rec.Attrs.IsTransactional():
				txn[rec.ProducerID] = append(txn[rec.ProducerID], rec)
			default:
				visible[rec.Offset] = true
			}
		}
		for pid, xs := range txn {
			open = append(open, fmt.Sprintf("%s/%d: producer %d, %d records from offset %d", topic, p, pid, len(xs), xs[0].Offset))
		}
		for _, rec := range recs {
			if !visible[rec.Offset] {
				continue
			}
			o := outRecord{partition: p, offset: rec.Offset, id: recordID(rec.Value), key: string(rec.Key)}
			for _, h := range rec.Headers {
				if h.Key == "sim_batch" {
					o.batch = string(h.Value)
				}
			}
			out = append(out, o)
		}
	}
	sort.Strings(open)
	return out, open, nil
}

// check reads the broker's state after the run and checks the invariants.
func (r *runner) check() {
	p := r.p
	out, open, err := readCommitted(r.adm, r.addr, outTopic)
	if err != nil {
		r.fail("reading the output: %v", err)
		return
	}
	if len(open) > 0 {
		r.fail("transactions left open on the output after every instance stopped: %v", open)
	}
	r.res.Stats.Out = len(out)
	count := map[string]int{}
	for _, o := range out {
		count[o.id]++
	}
	r.st.mu.Lock()
	dlq := maps.Clone(r.st.dlq)
	acked := maps.Clone(r.st.acked)
	r.st.mu.Unlock()
	r.res.Stats.DLQ = len(dlq)

	var missing, dups, strange, lostAcked, badDLQ, oversizedOut []string
	for i := range p.Records {
		id := "r" + strconv.Itoa(i)
		n := count[id]
		if slices.Contains(p.Oversized, i) {
			if n > 0 {
				oversizedOut = append(oversizedOut, id)
			}
			continue
		}
		if dlq[id] > 0 {
			badDLQ = append(badDLQ, id)
		}
		if n == 0 {
			missing = append(missing, id)
			if acked[i] > 0 {
				lostAcked = append(lostAcked, id)
			}
		}
		if n > 1 && p.Mode.endToEnd() {
			dups = append(dups, fmt.Sprintf("%s x%d", id, n))
		}
	}
	for id := range count {
		if i := recordIndex(id); i < 0 || i >= p.Records {
			strange = append(strange, id)
		}
	}
	r.res.Stats.Missing, r.res.Stats.Dups = len(missing), len(dups)
	complete := r.completed()
	if len(lostAcked) > 0 {
		r.fail("acknowledged but not committed (I2): %d records, e.g. %v", len(lostAcked), head(lostAcked))
	}
	if len(missing) > 0 && complete {
		r.fail("lost: %d input records never reached the output, e.g. %v", len(missing), head(missing))
	}
	if len(dups) > 0 {
		r.fail("duplicated in an end-to-end mode: %d records, e.g. %v", len(dups), head(dups))
	}
	if len(strange) > 0 {
		sort.Strings(strange)
		r.fail("records in the output that are not input records (aborted input read?): %v", head(strange))
	}
	if len(badDLQ) > 0 {
		r.fail("records taken by the dead-letter output that kafka_eos could write: %v", head(badDLQ))
	}
	if len(oversizedOut) > 0 {
		r.fail("oversized records in the output: %v", oversizedOut)
	}
	if complete {
		for _, i := range p.Oversized {
			if id := "r" + strconv.Itoa(i); dlq[id] == 0 && count[id] == 0 {
				r.fail("the oversized record %s reached neither the output nor the dead-letter output", id)
			}
		}
	}
	if p.Mode.k2k() && complete {
		if _, err := r.pollOffsets(); err != nil {
			r.fail("reading the group's offsets: %v", err)
		} else if !r.lag0() {
			r.fail("the group's committed offsets %v are not the input's ends %v", r.committed, r.ends)
		}
	}
	r.checkOrder(out)
	r.checkBatches(out)
}

// completed reports whether the run got to its end (no hang, no run cut
// short by unexpected exits): only then must every record be there.
func (r *runner) completed() bool {
	for _, f := range r.res.Failures {
		if strings.HasPrefix(f, "hang:") {
			return false
		}
	}
	return r.unexpected <= 3
}

// checkOrder checks the order the docs promise: Kafka-to-Kafka (and Arrow)
// keep each partition's records in source order; dedupe keeps each key's
// positions increasing; plain with max_in_flight 1 keeps each key's first
// copies in order.
func (r *runner) checkOrder(out []outRecord) {
	p := r.p
	var by func(o outRecord) string
	switch {
	case p.Mode.k2k():
		by = func(o outRecord) string { return "partition " + strconv.Itoa(int(o.partition)) }
	case p.Mode == ModeDedupe || p.MaxInFlight == 1:
		by = func(o outRecord) string { return "key " + o.key }
	default:
		return
	}
	last := map[string]int{}
	seen := map[string]bool{}
	for _, o := range out {
		i := recordIndex(o.id)
		if i < 0 || seen[o.id] {
			continue
		}
		seen[o.id] = true
		k := by(o)
		if prev, ok := last[k]; ok && i < prev {
			r.fail("order: in %s, r%d comes after r%d (%s/%d at offset %d)", k, i, prev, outTopic, o.partition, o.offset)
			return
		}
		last[k] = i
	}
}

// checkBatches checks that read_committed readers see each batch whole: the
// batch's records (sim_batch "<instance>/<n>/<size>") are all there the
// same number of times. Not with output batching (Benthos regroups the
// messages) nor in Arrow mode (a message is a batch of rows).
func (r *runner) checkBatches(out []outRecord) {
	p := r.p
	if p.Batching > 0 || p.Mode == ModeArrow {
		return
	}
	groups := map[string]map[string]int{}
	for _, o := range out {
		if o.batch == "" {
			continue
		}
		if groups[o.batch] == nil {
			groups[o.batch] = map[string]int{}
		}
		groups[o.batch][o.id]++
	}
	for b, ids := range groups {
		size, _ := strconv.Atoi(b[strings.LastIndexByte(b, '/')+1:])
		n := -1
		same := true
		for _, c := range ids {
			if n >= 0 && c != n {
				same = false
			}
			n = c
		}
		short := len(ids) < size-len(p.Oversized) || (len(p.Oversized) == 0 && len(ids) < size)
		if !same || short {
			r.fail("batch %s seen in part by read_committed readers: %d of %d records, counts %v", b, len(ids), size, ids)
			return
		}
	}
}

func head(xs []string) []string {
	if len(xs) > 8 {
		return append(xs[:8:8], fmt.Sprintf("... %d more", len(xs)-8))
	}
	return xs
}
