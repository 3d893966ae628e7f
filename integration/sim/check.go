package sim

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
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
func readCommitted(cl *kgo.Client, addr, topic string) (*logView, error) {
	byPart, err := readAll(cl, addr, topic)
	if err != nil {
		return nil, err
	}
	view := &logView{ends: map[int32]map[int64]txnEnd{}}
	for _, p := range sortedKeys(byPart) {
		recs := byPart[p]
		visible := map[int64]bool{}
		ends := map[int64]txnEnd{}
		view.ends[p] = ends
		txn := map[int64][]*kgo.Record{} // producer id -> records awaiting a marker
		for _, rec := range recs {
			switch {
			case rec.Attrs.IsControl():
				commit := len(rec.Key) >= 4 && binary.BigEndian.Uint16(rec.Key[2:4]) == 1
				end := txnEnd{pid: rec.ProducerID, outcome: "aborted"}
				if commit {
					end.outcome = "committed"
				}
				for _, x := range txn[rec.ProducerID] {
					visible[x.Offset] = commit
					ends[x.Offset] = end
				}
				delete(txn, rec.ProducerID)
			case rec.Attrs.IsTransactional():
				txn[rec.ProducerID] = append(txn[rec.ProducerID], rec)
			default:
				visible[rec.Offset] = true
			}
		}
		for pid, xs := range txn {
			view.open = append(view.open, fmt.Sprintf("%s/%d: producer %d, %d records from offset %d", topic, p, pid, len(xs), xs[0].Offset))
			for _, x := range xs {
				ends[x.Offset] = txnEnd{pid: pid, outcome: "open"}
			}
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
			view.visible = append(view.visible, o)
		}
	}
	sort.Strings(view.open)
	return view, nil
}

// readAll reads every record of topic (read_uncommitted, control records
// included) up to the high watermarks, per partition in offset order.
func readAll(cl *kgo.Client, addr, topic string) (map[int32][]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
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
	byPart := map[int32][]*kgo.Record{}
	if left == 0 {
		return byPart, nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(offs), kgo.KeepControlRecords(),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	next := map[int32]int64{}
	for left > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w (at %v of %v)", topic, err, next, hwm)
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
	return byPart, nil
}

// logView is the output topic as the broker holds it.
type logView struct {
	visible []outRecord // what a read_committed reader sees, in partition then offset order
	open    []string    // transactions with records and no marker
	// ends says, per partition and offset of a transactional record, how
	// its transaction ended there.
	ends map[int32]map[int64]txnEnd
}

type txnEnd struct {
	pid     int64
	outcome string // committed, aborted, open
}

// outcome is how the transaction of producer pid holding the record at
// partition p, offset o ended ("" if the log holds no such record).
func (v *logView) outcome(p int32, o, pid int64) string {
	e, ok := v.ends[p][o]
	if !ok || e.pid != pid {
		return ""
	}
	return e.outcome
}

// check reads the broker's state after the run and checks the invariants.
func (r *runner) check() {
	p := r.p
	view, err := readCommitted(r.adm, r.addr, outTopic)
	if err != nil {
		r.fail("reading the output: %v", err)
		return
	}
	out := view.visible
	if len(view.open) > 0 {
		r.fail("transactions left open on the output after every instance stopped: %v", view.open)
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
		if n == 0 && r.wasDeleted(i) {
			continue // retention deleted it, perhaps before it was read
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
			if id := "r" + strconv.Itoa(i); dlq[id] == 0 && count[id] == 0 && !r.wasDeleted(i) {
				r.fail("the oversized record %s reached neither the output nor the dead-letter output", id)
			}
		}
	}
	if p.Mode.kafkaInput() && complete {
		if _, err := r.pollOffsets(); err != nil {
			r.fail("reading the group's offsets: %v", err)
		} else if !r.lag0() {
			r.fail("the group's committed offsets %v are not the input's ends %v", r.committed, r.ends)
		}
	}
	r.checkKept(out)
	r.checkOrder(out)
	r.checkBatches(out)
	r.checkRecovery(view)
}

// recoveryLine is the output's log line of a recovery decision (logfmt, the
// quotes escaped).
var recoveryLine = regexp.MustCompile(`kafka_eos: recovery: epoch (\d+) on \\"([^"\\]+)\\": ([a-z-]+) \(`)

// notWrittenLine is the output's log line of a recovery decision it did not
// write: once the slots were fenced, the slot held a newer record of its
// previous owner (the epoch's own COMMITTED or ABORTED, or a later epoch).
// The decision then holds nothing (an abort-open it made is not probed again
// either): the previous owner's record is the slot's.
var notWrittenLine = regexp.MustCompile(`kafka_eos: recovery: slot \\"([^"\\]+)\\" holds epoch \d+ [A-Z]+, written by its previous owner after recovery read epoch (\d+) there`)

// readyLine ends a connect attempt that wrote its recovery decisions (they
// are written once the slots are fenced, before this line); connectFailedLine
// ends one that may not have (Benthos's line for a failed Connect).
var (
	readyLine         = regexp.MustCompile(`kafka_eos: \d+ slots of \\"[^"\\]+\\" ready`)
	connectFailedLine = regexp.MustCompile(`Failed to connect to kafka_eos`)
)

// slotRecord is the part of a slot record (the state cache's recovery
// identity of an epoch) the checker reads.
type slotRecord struct {
	TransactionalID string `json:"transactional_id"`
	Epoch           uint64 `json:"epoch"`
	ProducerID      int64  `json:"producer_id"`
	State           string `json:"state"`
	Partitions      []struct {
		Topic       string `json:"topic"`
		Partition   int32  `json:"partition"`
		FirstOffset int64  `json:"first_offset"`
		ProducerID  int64  `json:"pid"`
	} `json:"partitions"`
}

// checkRecovery checks every recovery decision the instances logged against
// the broker's log: an epoch marked or resumed committed must have committed
// there, one marked or left aborted must have aborted, at each first offset
// its PREPARE record names.
func (r *runner) checkRecovery(view *logView) {
	r.st.mu.Lock()
	writes := r.st.slotWrites
	r.st.mu.Unlock()
	if r.p.StateCache == "kafka_state" {
		// The cache's records, in the order they were written (the
		// slot keys all live in one partition per key).
		writes = nil
		byPart, err := readAll(r.adm, r.addr, stateTopic)
		if err != nil {
			r.fail("reading the state topic: %v", err)
			return
		}
		for _, p := range sortedKeys(byPart) {
			for _, rec := range byPart[p] {
				if strings.Contains(string(rec.Key), "/slot/") {
					writes = append(writes, rec.Value)
				}
			}
		}
	}
	var prepared []slotRecord
	for _, b := range writes {
		var rec slotRecord
		if json.Unmarshal(b, &rec) == nil && rec.State == "PREPARED" {
			prepared = append(prepared, rec)
		}
	}
	for _, in := range r.all {
		b, err := os.ReadFile(in.logf)
		if err != nil {
			continue
		}
		// An instance can decide an epoch twice: recovery's decision to
		// abort an epoch still open is corrected once the slot is fenced
		// if its previous owner, still running, committed it meanwhile.
		// The last decision holds.
		type decided struct {
			epoch uint64
			id    string
		}
		// A decision the instance then says it did not write (the
		// slot's record changed before the fence) is not checked: the
		// previous owner's record is the slot's (an abort-open whose
		// epoch that owner committed is not probed again then).
		type line struct {
			at     int
			k      decided
			action string
		}
		var lines []line
		for _, m := range recoveryLine.FindAllStringSubmatchIndex(string(b), -1) {
			epoch, _ := strconv.ParseUint(string(b[m[2]:m[3]]), 10, 64)
			lines = append(lines, line{m[0], decided{epoch, string(b[m[4]:m[5]])}, string(b[m[6]:m[7]])})
		}
		for _, m := range notWrittenLine.FindAllStringSubmatchIndex(string(b), -1) {
			epoch, _ := strconv.ParseUint(string(b[m[4]:m[5]]), 10, 64)
			lines = append(lines, line{m[0], decided{epoch, string(b[m[2]:m[3]])}, "not-written"})
		}
		// A decision of a connect attempt that did not get its slots
		// ready (killed, or failed and retried, before the fence) was
		// never written: the previous owner, still running, may commit
		// the epoch it decided to abort. It is not checked (nor one
		// written by an attempt that failed after the fence, rare).
		for _, m := range readyLine.FindAllStringIndex(string(b), -1) {
			lines = append(lines, line{at: m[0], action: "ready"})
		}
		for _, m := range connectFailedLine.FindAllStringIndex(string(b), -1) {
			lines = append(lines, line{at: m[0], action: "failed"})
		}
		sort.Slice(lines, func(i, j int) bool { return lines[i].at < lines[j].at })
		var pending []line
		kept := lines[:0:0]
		for _, l := range lines {
			switch l.action {
			case "ready":
				kept = append(kept, pending...)
				pending = nil
			case "failed":
				pending = nil
			default:
				pending = append(pending, l)
			}
		}
		lines = kept
		var order []decided
		last := map[decided]string{}
		for _, l := range lines {
			if _, ok := last[l.k]; !ok {
				order = append(order, l.k)
			}
			last[l.k] = l.action
		}
		for _, k := range order {
			epoch, id, action := k.epoch, k.id, last[k]
			want := ""
			switch action {
			case "mark-committed", "resume-commit":
				want = "committed"
			case "mark-aborted", "abort-open":
				want = "aborted"
			default:
				continue
			}
			r.res.Stats.Recoveries++
			// A zombie and its rival can both write a PREPARE for
			// the same epoch of a slot: the decision must match
			// one of them (the one recovery read).
			var problems []string
			matched, candidates := false, 0
			for i := range prepared {
				rec := &prepared[i]
				if rec.TransactionalID != id || rec.Epoch != epoch {
					continue
				}
				candidates++
				ok := true
				for _, pw := range rec.Partitions {
					if pw.Topic != outTopic {
						continue
					}
					pid := pw.ProducerID
					if pid == 0 {
						pid = rec.ProducerID
					}
					got := view.outcome(pw.Partition, pw.FirstOffset, pid)
					switch {
					case got == "":
						ok = false
						problems = append(problems, fmt.Sprintf("no record of producer %d at %s/%d offset %d (its first offset)", pid, outTopic, pw.Partition, pw.FirstOffset))
					case got != want:
						ok = false
						problems = append(problems, fmt.Sprintf("the broker's log says %s (%s/%d offset %d)", got, outTopic, pw.Partition, pw.FirstOffset))
					}
				}
				if ok {
					matched = true
				}
			}
			if candidates > 0 && !matched {
				r.fail("%s: recovery decided epoch %d on %q: %s, but %s", in.name, epoch, id, action, strings.Join(problems, "; "))
			}
		}
	}
}

// wasDeleted reports whether a retention event deleted input record i.
func (r *runner) wasDeleted(i int) bool {
	if !r.p.Mode.kafkaInput() {
		return false
	}
	o, ok := r.offsetOf[i]
	return ok && o < r.deleted[recordPartition(r.p, i)]
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

// checkKept checks that a Kafka-to-Kafka copy keeps each record's partition
// and key (whatever headers the record carries), and that a copy keyed by
// kafka_key (plain-kafka) keeps the key.
func (r *runner) checkKept(out []outRecord) {
	p := r.p
	if !p.Mode.kafkaInput() {
		return
	}
	for _, o := range out {
		i := recordIndex(o.id)
		if i < 0 {
			continue
		}
		if want := recordKey(p, i); o.key != want {
			r.fail("%s written with key %q, its input key is %q", o.id, o.key, want)
			return
		}
		if want := recordPartition(p, i); p.Mode.k2k() && o.partition != want {
			r.fail("%s copied to partition %d, its input partition is %d", o.id, o.partition, want)
			return
		}
	}
}

// checkOrder checks the order the docs promise: Kafka-to-Kafka (and Arrow)
// keep each partition's records in source order; dedupe keeps each key's
// positions increasing. Plain mode promises no order: a nacked batch is
// replayed from the input's retry list, possibly after batches read later.
func (r *runner) checkOrder(out []outRecord) {
	p := r.p
	var by func(o outRecord) string
	switch {
	case p.Mode.k2k():
		by = func(o outRecord) string { return "partition " + strconv.Itoa(int(o.partition)) }
	case p.Mode == ModeDedupe:
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
		// A message kafka_eos cannot write fails alone (and, in dedupe
		// mode, so do the later messages of its key): with oversized
		// records, a batch may be written short of them.
		short := len(p.Oversized) == 0 && len(ids) < size
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
