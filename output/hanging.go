package output

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/connect-eos/connect-eos/txnstate"
)

// Hanging transactions of our own slots.
//
// A transaction hangs when its coordinator completed it (CompleteCommit or
// CompleteAbort: every marker written, as far as it knows) while a partition
// it wrote still holds it open: Kafka's marker sender skips a partition it
// finds without a leader endpoint, taking it for deleted (KAFKA-5202), which a
// broker restart can cause. The partition's last stable offset then stays
// below the transaction for good: read_committed readers stop there, and in
// the offsets topic the group's committed offsets stay unstable. Worse, the
// same producer's next transaction that writes the partition joins the open
// one (Kafka keeps one open transaction per producer and partition, checked
// on the real broker: TestKafkaHangingJoinsNextTransaction), and that
// transaction's marker then closes both with its own outcome: a committed,
// acknowledged epoch closed by a later abort is lost.
//
// So after every epoch that reached the broker (committed or aborted), before
// its slot carries another epoch, the checker looks at the partitions the
// epoch wrote (DescribeProducers): a partition where the slot's producer id
// still has a transaction open from at or before the epoch's first offset is
// this epoch's transaction (the slot is still held: nothing later of it can
// be there). Markers are normally in flight for a moment after EndTxn, so it
// is hanging only once DescribeTransactions shows the coordinator done with
// it (not Prepare*) and a DescribeProducers after that still shows it open,
// in a partition that is not one of a transaction the coordinator has
// Ongoing (whose marker will close it).
// The same check runs at start for each slot's last decided record (the
// state cache's COMMITTED or ABORTED), before the slot carries an epoch.
//
// The action: the decision is known (COMMITTED or ABORTED, in the cache
// before the slot was released), so the checker writes that marker itself
// (WriteTxnMarkers, as `kafka-transactions.sh abort` does, with the producer
// epoch and coordinator epoch DescribeProducers shows) to exactly the
// partitions still open, unless repair_hanging_transactions is false. That
// needs the ClusterAction permission; without it the transaction is reported
// (log line, metric kafka_eos_hanging_transactions{action="left"}) with what
// an operator can do (docs/exactly-once.md). A check that cannot finish within
// transaction_timeout (coordinator moving, DescribeProducers failing) releases
// the slot and is retried every hangingRecheck with the slot held; it acts
// then only if the slot carried no later epoch.
const (
	metricHanging       = "kafka_eos_hanging_transactions"
	metricLabelAction   = "action"
	hangingFound        = "found"
	hangingRepaired     = "repaired"
	hangingLeft         = "left"
	hangingRecheck      = 30 * time.Second
	keoFieldRepairHangs = "repair_hanging_transactions"
	offsetsTopic        = "__consumer_offsets"
)

// repairHangingField is the spec field of repair_hanging_transactions.
func repairHangingField() *service.ConfigField {
	return service.NewBoolField(keoFieldRepairHangs).
		Description("After every epoch, before its slot carries another one, the output checks that no partition the epoch wrote still holds its transaction open once the transaction coordinator completed it (a hanging transaction: Kafka's marker sender can skip a partition around a broker restart). Such a transaction is always reported (an error log line and the metric `kafka_eos_hanging_transactions`). With this set, the output also closes it with the outcome it decided (the COMMIT or ABORT marker, written with WriteTxnMarkers as `kafka-transactions.sh abort` does), which needs the ClusterAction permission on the cluster; without the permission it is reported as left open. Checking needs Read on the output topics (DescribeProducers), and in Kafka-to-Kafka mode Read on `__consumer_offsets` to check the group's offsets partition too; without it that part is not checked (one warning). Default true.").
		Default(true).
		Advanced()
}

// endedTxn is a transaction of a slot whose outcome the output decided.
type endedTxn struct {
	slot   *slot
	epoch  uint64
	pid    int64
	pepoch int16
	tv     txnstate.TxnVersion
	commit bool
	// parts are the output partitions it wrote, with their first offsets.
	parts []txnstate.PartitionWrite
	// offsets: it may have committed source offsets (Kafka-to-Kafka), so
	// the group's partition of __consumer_offsets is checked too.
	offsets bool
}

func (t endedTxn) String() string {
	how := "aborted"
	if t.commit {
		how = "committed"
	}
	return fmt.Sprintf("epoch %d on %q (producer id %d, epoch %d, %s)", t.epoch, t.slot.id, t.pid, t.pepoch, how)
}

// openPart is a partition where the transaction is still open.
type openPart struct {
	topic     string
	partition int32
	start     int64
	pepoch    int16 // the producer epoch the partition has
	coordEp   int32 // the coordinator epoch of the producer's last marker there (-1: none)
}

func (p openPart) String() string {
	return fmt.Sprintf("%s/%d from offset %d", p.topic, p.partition, p.start)
}

// hangingJob is an ended transaction to check; release: the slot is held
// for the check and released after it.
type hangingJob struct {
	t       endedTxn
	release bool
}

// hangingChecker runs the checks in order on one goroutine.
type hangingChecker struct {
	o       *output
	sig     *shutdown.Signaller
	queue   chan hangingJob
	counter *service.MetricCounter
	repair  bool

	mu sync.Mutex
	// off: DescribeProducers is refused on the output topic (no Read):
	// nothing is checked.
	off error
	// offsetsPart is the group's partition of __consumer_offsets, -1 until
	// known; offsetsOff: it cannot be described (no Read).
	offsetsPart int32
	offsetsOff  bool
	// pending are checks that could not finish; last is each slot's last
	// ended transaction (a pending check acts only if it still is).
	pending []endedTxn
	last    map[*slot]uint64
}

func newHangingChecker(o *output) *hangingChecker {
	h := &hangingChecker{
		o:           o,
		sig:         shutdown.NewSignaller(),
		queue:       make(chan hangingJob, len(o.slots)+1),
		counter:     o.res.Metrics().NewCounter(metricHanging, metricLabelAction),
		repair:      o.conf.repairHanging,
		offsetsPart: -1,
		last:        map[*slot]uint64{},
	}
	for _, a := range []string{hangingFound, hangingRepaired, hangingLeft} {
		h.counter.Incr(0, a)
	}
	return h
}

func (h *hangingChecker) count(action string, n int) {
	h.counter.Incr(int64(n), action)
	h.o.m.tally.add(metricHanging+"/"+action, int64(n))
}

// startHanging checks each slot's last decided record (the slots are idle:
// called from Connect before the output accepts batches), then starts the
// checker. Errors are logged: a start never fails on a check.
func (o *output) startHanging(ctx context.Context) {
	h := newHangingChecker(o)
	o.hanging = h
	for _, s := range o.slots {
		r, ok, err := o.store.readSlot(ctx, s.n)
		if err != nil || !ok || (r.State != txnstate.Committed && r.State != txnstate.Aborted) {
			continue
		}
		t := endedTxn{slot: s, epoch: r.Epoch, pid: r.ProducerID, pepoch: r.ProducerEpoch, tv: r.TxnVersion,
			commit: r.State == txnstate.Committed, parts: r.Partitions, offsets: r.Group != ""}
		h.last[s] = t.epoch
		cctx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
		if !h.check(cctx, t) {
			h.addPending(t)
		}
		cancel()
	}
	go h.run(o.runCtx)
}

// releaseChecked releases the slot of an epoch that ended (committed or
// aborted on the broker) once the checker has looked at the partitions it
// wrote.
func (o *output) releaseChecked(ep *epoch, commit bool, rec txnstate.Record) {
	h := o.hanging
	parts := rec.Partitions
	if rec.TransactionalID == "" {
		parts = ep.partitions()
	}
	if h == nil || h.disabled() || (len(parts) == 0 && o.k2k == nil) {
		o.releaseSlot(ep.slot)
		return
	}
	pid, pepoch := ep.pid, ep.pepoch
	if rec.TransactionalID != "" {
		pid, pepoch = rec.ProducerID, rec.ProducerEpoch
	}
	t := endedTxn{slot: ep.slot, epoch: ep.n, pid: pid, pepoch: pepoch, tv: ep.slot.tv, commit: commit, parts: parts, offsets: o.k2k != nil}
	select {
	case h.queue <- hangingJob{t: t, release: true}:
	case <-h.sig.HardStopChan():
		o.releaseSlot(ep.slot)
	}
}

// recordOf is abortEpoch's optional record, or the zero record.
func recordOf(rec []txnstate.Record) txnstate.Record {
	if len(rec) > 0 {
		return rec[0]
	}
	return txnstate.Record{}
}

// maxPending bounds the checks kept for a later try; the oldest goes first.
const maxPending = 256

func (h *hangingChecker) addPending(t endedTxn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending) >= maxPending {
		h.o.log.Warnf("kafka_eos: more than %d checks for hanging transactions could not finish; %v is no longer checked", maxPending, h.pending[0])
		h.pending = h.pending[1:]
	}
	h.pending = append(h.pending, t)
}

func (h *hangingChecker) disabled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.off != nil
}

func (h *hangingChecker) run(runCtx context.Context) {
	defer h.sig.TriggerHasStopped()
	ctx, cancel := h.sig.HardStopCtx(runCtx)
	defer cancel()
	tick := time.NewTicker(hangingRecheck)
	defer tick.Stop()
	for {
		select {
		case j := <-h.queue:
			h.mu.Lock()
			h.last[j.t.slot] = j.t.epoch
			h.mu.Unlock()
			// As long as a transaction may take: while its coordinator
			// moves (the usual reason a check cannot finish) the slot
			// could not carry an epoch anyway.
			wait := max(h.o.conf.commitBudget, h.o.conf.txnTimeout)
			cctx, ccancel := context.WithTimeout(ctx, wait)
			if !h.check(cctx, j.t) && ctx.Err() == nil {
				h.o.log.Warnf("kafka_eos: could not establish within %v whether %v left a partition with its transaction open; its slot goes on, checked again every %v", wait, j.t, hangingRecheck)
				h.addPending(j.t)
			}
			ccancel()
			if j.release {
				h.o.releaseSlot(j.t.slot)
			}
		case <-tick.C:
			h.recheck(ctx)
		case <-ctx.Done():
			h.sig.TriggerHardStop()
			for {
				select {
				case j := <-h.queue:
					if j.release {
						h.o.releaseSlot(j.t.slot)
					}
				default:
					return
				}
			}
		}
	}
}

// recheck runs the pending checks, each with its slot held, for at most
// commit_timeout in all (the epochs' checks wait meanwhile); what is left
// waits for the next tick.
func (h *hangingChecker) recheck(ctx context.Context) {
	h.mu.Lock()
	pending := h.pending
	h.pending = nil
	h.mu.Unlock()
	rctx, rcancel := context.WithTimeout(ctx, h.o.conf.commitBudget)
	defer rcancel()
	for i, t := range pending {
		if rctx.Err() != nil {
			for _, t := range pending[i:] {
				h.addPending(t)
			}
			return
		}
		if !h.hold(rctx, t.slot) {
			h.addPending(t)
			continue
		}
		h.mu.Lock()
		latest := h.last[t.slot] == t.epoch
		h.mu.Unlock()
		var ok bool
		if latest {
			ok = h.check(rctx, t)
		} else {
			ok = h.reportOnly(rctx, t)
		}
		h.o.releaseSlot(t.slot)
		if !ok && ctx.Err() == nil {
			h.addPending(t)
		}
	}
}

// hold takes the slot as an epoch would (busy), waiting up to a second for
// it to be free; false if it stays busy or the output stopped.
func (h *hangingChecker) hold(ctx context.Context, s *slot) bool {
	o := h.o
	deadline := time.After(time.Second)
	for {
		o.mu.Lock()
		if o.stopErr != nil || !o.connected {
			o.mu.Unlock()
			return false
		}
		if !s.busy {
			s.busy = true
			s.freeCh = make(chan struct{})
			o.mu.Unlock()
			return true
		}
		ch := s.freeCh
		o.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// check establishes whether t left a partition with its transaction open
// after its coordinator completed it, and acts: true once that is settled
// (nothing open, or reported and acted on), false if it could not be
// established before ctx ended.
func (h *hangingChecker) check(ctx context.Context, t endedTxn) bool {
	return h.settle(ctx, t, true)
}

// reportOnly is check for a transaction whose slot carried later epochs:
// whatever is open now may hold those too, so nothing is written.
func (h *hangingChecker) reportOnly(ctx context.Context, t endedTxn) bool {
	return h.settle(ctx, t, false)
}

func (h *hangingChecker) settle(ctx context.Context, t endedTxn, act bool) bool {
	backoff := 5 * time.Millisecond
	h.o.m.tally.add("hanging_checks", 1)
	for {
		open, err := h.openOf(ctx, t)
		if (err == nil && len(open) == 0) || h.disabled() {
			return true
		}
		h.o.m.tally.add("hanging_check_waits", 1)
		if err == nil {
			st, derr := h.describe(ctx, t.slot.id)
			if derr == nil && !inFlight(st) {
				// The coordinator is done with it: whatever is still
				// open now is hanging (its markers would have landed
				// before the coordinator completed it), except in a
				// partition of the transaction it has Ongoing, which
				// gets that transaction's marker when it ends.
				open, err = h.openOf(ctx, t)
				if err == nil {
					if len(open) == 0 {
						return true
					}
					if hung := slices.DeleteFunc(slices.Clone(open), func(p openPart) bool { return ongoingIn(st, p) }); len(hung) > 0 {
						h.hung(ctx, t, st, hung, act)
						return true
					}
					err = fmt.Errorf("still open in %v, partitions of the transaction the coordinator has Ongoing", open)
				}
			}
			err = cmp.Or(derr, err)
		}
		select {
		case <-ctx.Done():
			if err != nil {
				h.o.log.Debugf("kafka_eos: checking %v for a hanging transaction: %v", t, err)
			}
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// ongoingIn says whether the coordinator's current transaction is Ongoing
// with p among its partitions: that transaction's marker will close p.
func ongoingIn(st kadm.DescribedTransaction, p openPart) bool {
	if st.State != txnstate.BrokerOngoing {
		return false
	}
	_, ok := st.Topics[p.topic][p.partition]
	return ok
}

// inFlight says whether the coordinator may still be writing markers.
func inFlight(d kadm.DescribedTransaction) bool {
	switch d.State {
	case txnstate.BrokerPrepareCommit, txnstate.BrokerPrepareAbort, txnstate.BrokerPrepareEpochFence:
		return true
	}
	return false
}

func (h *hangingChecker) describe(ctx context.Context, id string) (kadm.DescribedTransaction, error) {
	ds, err := kadm.NewClient(h.o.admin).DescribeTransactions(ctx, id)
	if err != nil {
		return kadm.DescribedTransaction{}, err
	}
	d, ok := ds[id]
	if !ok {
		return kadm.DescribedTransaction{}, fmt.Errorf("describe transactions %q: no answer", id)
	}
	if d.Err != nil && !errors.Is(d.Err, kerr.TransactionalIDNotFound) {
		return kadm.DescribedTransaction{}, d.Err
	}
	return d, nil
}

// openOf lists the partitions t wrote where its producer id still has a
// transaction open that t's is part of: in an output partition one that began
// at or before t's first offset there, in the group's offsets partition any.
func (h *hangingChecker) openOf(ctx context.Context, t endedTxn) ([]openPart, error) {
	set := kadm.TopicsSet{}
	first := map[string]map[int32]int64{}
	for _, w := range t.parts {
		set.Add(w.Topic, w.Partition)
		if first[w.Topic] == nil {
			first[w.Topic] = map[int32]int64{}
		}
		first[w.Topic][w.Partition] = w.FirstOffset
	}
	if t.offsets {
		if p, ok := h.offsetsPartition(ctx); ok {
			set.Add(offsetsTopic, p)
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	ds, err := kadm.NewClient(h.o.admin).DescribeProducers(ctx, set)
	if err != nil && !onlyUnknownTopics(err) {
		return nil, h.refused(err)
	}
	var open []openPart
	var errs []error
	ds.EachPartition(func(p kadm.DescribedProducersPartition) {
		if p.Err != nil {
			if p.Topic == offsetsTopic && errors.Is(p.Err, kerr.TopicAuthorizationFailed) {
				h.offsetsRefused(p.Err)
				return
			}
			if errors.Is(p.Err, kerr.UnknownTopicOrPartition) {
				return // deleted since (a start's old record): nothing can hang there
			}
			errs = append(errs, fmt.Errorf("%s/%d: %w", p.Topic, p.Partition, p.Err))
			return
		}
		for _, ap := range p.ActiveProducers {
			if ap.ProducerID != t.pid || ap.CurrentTxnStartOffset < 0 {
				continue
			}
			if f, ok := first[p.Topic][p.Partition]; ok && ap.CurrentTxnStartOffset > f {
				continue // a later transaction (not while the slot is held)
			}
			open = append(open, openPart{topic: p.Topic, partition: p.Partition, start: ap.CurrentTxnStartOffset, pepoch: ap.ProducerEpoch, coordEp: ap.CoordinatorEpoch})
		}
	})
	if err := errors.Join(errs...); err != nil {
		for _, e := range errs {
			if errors.Is(e, kerr.TopicAuthorizationFailed) {
				return nil, h.refused(e)
			}
		}
		return nil, err
	}
	slices.SortFunc(open, func(a, b openPart) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	return open, nil
}

// onlyUnknownTopics says whether every shard of a failed request failed on a
// topic or partition that does not exist (deleted since a start's old
// record): nothing can hang there, and the other shards answered.
func onlyUnknownTopics(err error) bool {
	var se *kadm.ShardErrors
	if !errors.As(err, &se) || len(se.Errs) == 0 {
		return false
	}
	for _, e := range se.Errs {
		if !errors.Is(e.Err, kerr.UnknownTopicOrPartition) {
			return false
		}
	}
	return true
}

// refused turns the checks off for good when the brokers refuse them (no
// Read on the output topic, or a broker without DescribeProducers): one
// warning, and the slots are released at once from then on.
func (h *hangingChecker) refused(err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) && (ke == kerr.TopicAuthorizationFailed || ke == kerr.ClusterAuthorizationFailed || ke == kerr.UnsupportedVersion) {
		h.mu.Lock()
		if h.off == nil {
			h.off = err
			h.o.log.Warnf("kafka_eos: hanging transactions are not checked: DescribeProducers on the output topic was refused (%v); it needs Read on the topic", err)
		}
		h.mu.Unlock()
	}
	return err
}

func (h *hangingChecker) offsetsRefused(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.offsetsOff {
		h.offsetsOff = true
		h.o.log.Warnf("kafka_eos: the group's partition of %s is not checked for hanging transactions: %v (it needs Read on %s)", offsetsTopic, err, offsetsTopic)
	}
}

// offsetsPartition returns the group's partition of __consumer_offsets
// (Kafka's: abs(Java hashCode of the group id) modulo the partition count).
func (h *hangingChecker) offsetsPartition(ctx context.Context) (int32, bool) {
	h.mu.Lock()
	p, off := h.offsetsPart, h.offsetsOff
	h.mu.Unlock()
	if off || h.o.k2k == nil {
		return 0, false
	}
	if p >= 0 {
		return p, true
	}
	md, err := kadm.NewClient(h.o.admin).Metadata(ctx, offsetsTopic)
	if err != nil {
		return 0, false
	}
	td, ok := md.Topics[offsetsTopic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		if ok && errors.Is(td.Err, kerr.TopicAuthorizationFailed) {
			h.offsetsRefused(td.Err)
		}
		return 0, false
	}
	p = groupPartition(h.o.k2k.group, int32(len(td.Partitions)))
	h.mu.Lock()
	h.offsetsPart = p
	h.mu.Unlock()
	return p, true
}

// groupPartition is Kafka's partitionFor(groupId): Utils.abs(groupId.hashCode())
// % partitions, with Java's String.hashCode over UTF-16 code units.
func groupPartition(group string, partitions int32) int32 {
	var hc int32
	for _, u := range utf16Units(group) {
		hc = 31*hc + int32(u)
	}
	if hc == -1<<31 {
		hc = 0
	} else if hc < 0 {
		hc = -hc
	}
	return hc % partitions
}

func utf16Units(s string) []uint16 {
	var out []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
			continue
		}
		out = append(out, uint16(r))
	}
	return out
}

// hung reports a hanging transaction and, if allowed, closes it with the
// decided outcome.
func (h *hangingChecker) hung(ctx context.Context, t endedTxn, st kadm.DescribedTransaction, open []openPart, act bool) {
	o := h.o
	h.count(hangingFound, len(open))
	coord := fmt.Sprintf("%s, producer id %d, epoch %d", st.State, st.ProducerID, st.ProducerEpoch)
	o.log.Errorf("kafka_eos: hanging transaction: %v is complete at its coordinator (%s) but still open in %v", t, coord, open)
	marker := "ABORT"
	if t.commit {
		marker = "COMMIT"
	}
	why := ""
	switch {
	case !act:
		why = "its slot carried later transactions since, which may have joined it"
	case contradicts(t, st):
		why = fmt.Sprintf("the coordinator shows %s for it, not the output's decision", st.State)
	case !h.repair:
		why = keoFieldRepairHangs + " is false"
	}
	if why == "" {
		// A marker can fail for a moment (a leader moving, the
		// coordinator epoch the partition saw moving on): retried with
		// what the partitions show now, until the check's deadline.
		var err error
		meanwhile := false
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
			if err = h.writeMarkers(ctx, t, open); err == nil || errors.Is(err, kerr.ClusterAuthorizationFailed) {
				var still []openPart
				if still, err = h.openOf(ctx, t); err == nil && len(still) > 0 {
					err = fmt.Errorf("still open after the markers: %v", still)
				}
				if err == nil || errors.Is(err, kerr.ClusterAuthorizationFailed) {
					break
				}
			}
			o.log.Debugf("kafka_eos: closing the hanging transaction of %v: %v", t, err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			if ctx.Err() != nil {
				break
			}
			var now []openPart
			if now, err = h.openOf(ctx, t); err == nil && len(now) == 0 {
				meanwhile = true // a marker landed after all
				break
			} else if err == nil {
				open = now
			}
		}
		if err == nil && meanwhile {
			o.log.Warnf("kafka_eos: the hanging transaction of %v was closed by another marker while the output retried its own", t)
			return
		}
		if err == nil {
			h.count(hangingRepaired, len(open))
			o.log.Warnf("kafka_eos: hanging transaction of %v closed: wrote its %s marker to %v", t, marker, open)
			return
		}
		why = err.Error()
		if errors.Is(err, kerr.ClusterAuthorizationFailed) {
			why = "writing transaction markers needs the ClusterAction permission on the cluster: " + why
		}
	}
	h.count(hangingLeft, len(open))
	o.log.Errorf("kafka_eos: hanging transaction of %v left open (%s): it needs its %s marker on %v (docs/exactly-once.md, hanging transactions)", t, why, marker, open)
}

// contradicts says whether the coordinator's own record of t's transaction
// (same producer id, the epoch t's EndTxn leaves) names the other outcome.
func contradicts(t endedTxn, st kadm.DescribedTransaction) bool {
	if st.ProducerID != t.pid {
		return false
	}
	want := t.pepoch
	if t.tv == txnstate.TV2 {
		want++
	}
	if st.ProducerEpoch != want {
		return false
	}
	switch st.State {
	case txnstate.BrokerCompleteCommit:
		return !t.commit
	case txnstate.BrokerCompleteAbort:
		return t.commit
	}
	return false
}

// writeMarkers writes t's decided marker to every open partition, with the
// producer epoch and coordinator epoch each partition holds.
func (h *hangingChecker) writeMarkers(ctx context.Context, t endedTxn, open []openPart) error {
	type key struct {
		pepoch  int16
		coordEp int32
	}
	byKey := map[key]*kadm.TopicsSet{}
	for _, p := range open {
		k := key{p.pepoch, max(p.coordEp, 0)}
		if byKey[k] == nil {
			byKey[k] = &kadm.TopicsSet{}
		}
		byKey[k].Add(p.topic, p.partition)
	}
	var markers []kadm.TxnMarkers
	for k, set := range byKey {
		markers = append(markers, kadm.TxnMarkers{ProducerID: t.pid, ProducerEpoch: k.pepoch, Commit: t.commit, CoordinatorEpoch: k.coordEp, Topics: *set})
	}
	resp, err := kadm.NewClient(h.o.admin).WriteTxnMarkers(ctx, markers...)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range resp {
		for _, tr := range m.Topics {
			for _, pr := range tr.Partitions {
				if pr.Err != nil {
					errs = append(errs, fmt.Errorf("%s/%d: %w", pr.Topic, pr.Partition, pr.Err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
