package output

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/txnstate"
)

// Mirror mode (the mirror block): the kafka_native input of consumer_group
// reads another cluster (the source); this output writes its own (the
// target). The source offsets cannot commit in the target's transactions to
// the source's group, so the positions live on the target instead: every
// epoch produces, inside its transaction, one record per source partition it
// advanced to the positions topic (txnstate.Positions: per partition and
// writer, the next offset to copy). A position is visible to a read_committed
// reader exactly when the records below it are (I3 across clusters), and the
// input starts every partition from the positions (handover.PositionKeeper),
// never from anything on the source cluster.
//
// Everything Kafka-to-Kafka mode does with the input's spans is the same
// (the k2k state: contiguous runs, the floor of acknowledged positions,
// predecessor waits, ownership under group_membership), except that the
// offsets go to the positions topic instead of a TxnOffsetCommit. What is new
// is who may write a partition's positions: partitions move between the
// mirror's processes (writers), and a new owner must start from what the
// previous owner's last epoch committed, never from a stale position while
// that owner can still commit (Positions):
//
//  1. read the positions topic read_uncommitted (never waits) and fence
//     every other writer whose latest word on a requested partition is a
//     claim or a pos (it did not release it): InitProducerID on each of its
//     slots aborts its open transactions, and none of its producers can
//     commit again (a live one stops, exit 3, as a zombie does);
//  2. read it read_committed to the end listed after the fences (waits for
//     every transaction below it to end), and fence whoever that shows
//     holding a partition too (a release of it that was still open in 1
//     and then aborted); repeat until it shows none;
//  3. write a claim per partition (its position: the largest next offset of
//     any writer) and, for each writer fenced, a release of every partition
//     it held in its name, in an epoch, and wait until that committed;
//  4. read read_committed again: another writer whose latest word on a
//     partition is a claim or a pos claimed it concurrently (only a zombie
//     that missed its revoke can): fence it too and write its releases;
//     whichever of the two reads the other's claim fences it, so at most
//     one of them copies;
//  5. the positions are what that last read says.
//
// A writer releases a partition itself (so that its next owner need not fence
// it) once every epoch holding its records finished: in the group's revoke
// callback (Revoked), and at start for whatever its previous run left claimed
// (its slots' InitProducerID aborted what that run had open, and the slots'
// recovery decided its epochs, before the positions are read). Every record
// names its writer's slot count, so whoever fences it knows its
// transactional ids.
type mirror struct {
	o     *output
	conf  *mirrorConf
	self  string // this writer: the transactional_id
	slots int
	log   *positionsLog
	mm    *mirrorMetrics

	claimMu sync.Mutex // one Positions at a time

	mu sync.Mutex
	// known is this writer's committed next offset per partition (what
	// its release says), and knownHeld what its latest record of the
	// partition said past it (txnstate.PositionRecord.Held).
	known     map[topicPartition]int64
	knownHeld map[topicPartition]string
	// claimed are the partitions this run claimed (committed).
	claimed map[topicPartition]bool
	// pending are the claims and releases to write with the next epoch,
	// by partition and writer (a later one replaces an earlier one).
	pending map[pendingKey]pendingRec
	seq     uint64
	changed chan struct{} // closed and replaced when pending records commit
	// targets maps target topics to their source topic (a rename that
	// maps two source topics to one target is refused).
	targets map[string]string
	// afterFence, if set (tests), is called in Positions once the
	// holders are fenced and the committed positions read, before the
	// claim is written.
	afterFence func()
}

type pendingKey struct {
	tp     topicPartition
	writer string
}

type pendingRec struct {
	rec txnstate.PositionRecord
	seq uint64
}

// epochMirror is what an epoch wrote to the positions topic.
type epochMirror struct {
	recs []txnstate.PositionRecord
	// sent are the pending records it carried, with their sequence.
	sent map[pendingKey]uint64
}

func newMirror(o *output, conf *mirrorConf, res *service.Resources) *mirror {
	return &mirror{
		o: o, conf: conf, self: o.conf.transactionalID, slots: o.conf.poolSize,
		mm:        newMirrorMetrics(res.Metrics()),
		known:     map[topicPartition]int64{},
		knownHeld: map[topicPartition]string{},
		claimed:   map[topicPartition]bool{},
		pending:   map[pendingKey]pendingRec{},
		changed:   make(chan struct{}),
		targets:   map[string]string{},
	}
}

// mirrorKeeper is what mirror mode registers as the group's takeover: the
// output, and Positions (handover.PositionKeeper). The other modes register
// the output itself, which has no Positions: the input then reads the
// group's committed offsets.
type mirrorKeeper struct{ *output }

func (k mirrorKeeper) Positions(ctx context.Context, req handover.PositionsRequest) (map[string]map[int32]int64, error) {
	return k.mirror.positions(ctx, req)
}

// mirrorTopic returns the target topic of a message: its source topic (from
// its span, which only the input sets) renamed.
func mirrorTopic(conf *mirrorConf, msg *service.Message) (string, error) {
	s, ok := handover.SpanOf(msg)
	if !ok {
		return "", errors.New("no source span: mirror mode copies what the kafka_native input of consumer_group read, and this message carries none (a processor built it anew?)")
	}
	return conf.target(s.Topic), nil
}

// mirrorRecord sets r's key, headers, timestamp and partition from the record
// msg was read from, and keeps a tombstone one: the body of a message read
// from a null value is empty, and stays a null value unless a processor gave
// it content.
func mirrorRecord(r *kgo.Record, msg *service.Message) error {
	src, ok := handover.RecordOf(msg)
	if !ok {
		return errors.New("no source record: mirror mode copies the records the kafka_native input of consumer_group read (format: message), and this message carries none (a processor built it anew?)")
	}
	r.Key = src.Key
	r.Headers = src.Headers
	r.Timestamp = src.Timestamp
	r.Partition = src.Partition
	if src.Value == nil && len(r.Value) == 0 {
		r.Value = nil
	}
	return nil
}

// mirrorMode is the mirror mode's side of the write path: the Kafka-to-Kafka
// mode's (spans, runs, ownership), with the positions topic in place of the
// group's offsets.
type mirrorMode struct {
	k2kMode
	m *mirror
}

// connect makes sure the positions topic exists and is compacted, and queues
// a release of every partition this writer's previous run left claimed: the
// slots' InitProducerID (before this call) ended that run's transactions, so
// nothing of it can commit any more, and the committed view holds its last
// positions. afterConnect commits them before the input may claim anything.
func (mm *mirrorMode) connect(ctx context.Context) error {
	m, o := mm.m, mm.o
	if m.log == nil {
		m.log = newPositionsLog(o.admin, m.conf.positionsTopic)
	}
	if err := ensurePositionsTopic(ctx, o.admin, m.conf.positionsTopic); err != nil {
		return err
	}
	st, err := m.log.read(ctx, true)
	if err != nil {
		return err
	}
	held := st.Held(m.self)
	m.mu.Lock()
	for _, r := range held {
		m.enqueueLocked(txnstate.PositionRecord{Topic: r.Topic, Partition: r.Partition, Writer: m.self, Kind: txnstate.PositionRelease, Next: r.Next, Slots: m.slots, Generation: r.Generation})
	}
	m.mu.Unlock()
	if len(held) > 0 {
		o.log.Infof("kafka_eos: mirror: %d partitions left claimed by the previous run of %q, released: %s", len(held), m.self, describeRecords(held))
	}
	return nil
}

// afterConnect commits what connect queued, before the output is ready.
func (mm *mirrorMode) afterConnect(ctx context.Context) error {
	m := mm.m
	m.mu.Lock()
	seqs := map[pendingKey]uint64{}
	for k, p := range m.pending {
		seqs[k] = p.seq
	}
	m.mu.Unlock()
	if len(seqs) == 0 {
		return nil
	}
	if err := m.flush(ctx, seqs); err != nil {
		return fmt.Errorf("kafka_eos: mirror: releasing the partitions the previous run left claimed: %w", err)
	}
	return nil
}

// prepare writes, inside the epoch's transaction, the positions its spans
// and the input's hand-overs let it commit (the same plan as Kafka-to-Kafka
// mode), and the claims and releases queued: step 2 of the commit sequence.
func (mm *mirrorMode) prepare(ctx context.Context, ep *epoch, rec *txnstate.Record) error {
	o, k, m := mm.o, mm.k, mm.m
	offs, err := k.plan(ep.spans(), o.log)
	if err != nil {
		o.m.k2kRebalanceEvent(k2kRevokedEpoch)
		return err
	}
	m.mu.Lock()
	em := &epochMirror{sent: map[pendingKey]uint64{}}
	for key, p := range m.pending {
		em.recs = append(em.recs, p.rec)
		em.sent[key] = p.seq
	}
	m.mu.Unlock()
	// Releases before claims: a partition released and claimed again
	// (one key per writer and partition, so only one of them is pending
	// for this writer) is ordered by kind for those of other writers.
	slices.SortFunc(em.recs, func(a, b txnstate.PositionRecord) int {
		if a.Kind != b.Kind {
			return cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind))
		}
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Writer, b.Writer))
	})
	for _, po := range offs {
		em.recs = append(em.recs, txnstate.PositionRecord{Topic: po.Topic, Partition: po.Partition, Writer: m.self, Kind: txnstate.PositionPos, Next: po.Offset, Slots: m.slots, Generation: po.generation, Held: po.metadata})
	}
	if len(em.recs) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(em.recs))
	for i, pr := range em.recs {
		recs[i] = &kgo.Record{Topic: m.conf.positionsTopic, Partition: 0, Key: pr.Key(), Value: pr.Value()}
	}
	if err := produceWithin(ctx, ep.slot.cl, o.conf.commitBudget, recs); err != nil {
		return fmt.Errorf("writing %d records to the positions topic %s: %w", len(recs), m.conf.positionsTopic, err)
	}
	ep.wrote(recs)
	o.mu.Lock()
	ep.records += len(recs)
	o.mu.Unlock()
	ep.offs = offs
	ep.mirror = em
	rec.Group = k.group
	rec.SourceOffsets = sourceOffsets(offs)
	return nil
}

func kindOrder(k txnstate.PositionKind) int {
	switch k {
	case txnstate.PositionRelease:
		return 0
	case txnstate.PositionClaim:
		return 1
	}
	return 2
}

func (mm *mirrorMode) committed(ep *epoch, rec txnstate.Record) {
	mm.k2kMode.committed(ep, rec)
	mm.m.committed(ep.mirror)
}

// committed takes what an epoch wrote to the positions topic as committed.
func (m *mirror) committed(em *epochMirror) {
	if em == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var pos, claims, releases int
	for _, pr := range em.recs {
		tp := topicPartition{pr.Topic, pr.Partition}
		switch {
		case pr.Kind == txnstate.PositionPos:
			pos++
		case pr.Kind == txnstate.PositionClaim:
			claims++
		case pr.By == "":
			releases++
		}
		if pr.Writer != m.self {
			continue
		}
		if pr.Kind == txnstate.PositionClaim {
			m.claimed[tp] = true
		}
		if pr.Next < 0 {
			continue
		}
		// A position held at a record a dead-letter route has not
		// taken stays put while what was copied past it grows.
		if cur, ok := m.known[tp]; !ok || pr.Next >= cur {
			m.known[tp] = pr.Next
			m.knownHeld[tp] = pr.Held
			m.mm.position.Set(pr.Next, pr.Topic, strconv.Itoa(int(pr.Partition)))
		}
	}
	for key, seq := range em.sent {
		if p, ok := m.pending[key]; ok && p.seq == seq {
			delete(m.pending, key)
		}
	}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mm.positions.Incr(int64(pos))
	m.o.m.tally.add(metricMirrorPositions, int64(pos))
	if claims > 0 {
		m.o.m.mirrorEvent(m.mm, mirrorClaimed, claims)
	}
	if releases > 0 {
		m.o.m.mirrorEvent(m.mm, mirrorReleased, releases)
	}
}

// enqueueLocked queues r to be written with the next epoch and returns its
// sequence number. m.mu is held.
func (m *mirror) enqueueLocked(r txnstate.PositionRecord) (pendingKey, uint64) {
	m.seq++
	key := pendingKey{topicPartition{r.Topic, r.Partition}, r.Writer}
	m.pending[key] = pendingRec{rec: r, seq: m.seq}
	return key, m.seq
}

// flush makes sure an epoch carries the pending records seqs names and waits
// until they committed (or were replaced by later ones), opening an epoch
// again if the one carrying them aborted.
func (m *mirror) flush(ctx context.Context, seqs map[pendingKey]uint64) error {
	o := m.o
	for {
		if err := o.ensureEpoch(ctx); err != nil {
			return err
		}
		m.mu.Lock()
		done := true
		for key, seq := range seqs {
			if p, ok := m.pending[key]; ok && p.seq <= seq {
				done = false
			}
		}
		ch := m.changed
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(o.conf.epochInterval + 50*time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		case <-o.closedCh:
			return ErrClosed
		}
	}
}

// release writes, in the name of this writer, a release of parts (the
// group's revoke callback, once no epoch holds their records), and waits up
// to ctx for it to commit. Without it the partitions' next owner fences this
// process.
func (m *mirror) release(ctx context.Context, parts map[string][]int32) {
	m.mu.Lock()
	seqs := map[pendingKey]uint64{}
	for t, ps := range parts {
		for _, p := range ps {
			tp := topicPartition{t, p}
			next, ok := m.known[tp]
			if !ok {
				if !m.claimed[tp] {
					// Never claimed by this run (its claim failed):
					// its latest word on it is already a release (at
					// start), with the position a release here
					// would lose (one record per writer and
					// partition).
					continue
				}
				next = -1
			}
			key, seq := m.enqueueLocked(txnstate.PositionRecord{Topic: t, Partition: p, Writer: m.self, Kind: txnstate.PositionRelease, Next: next, Slots: m.slots, Generation: -1, Held: m.knownHeld[tp]})
			seqs[key] = seq
		}
	}
	m.mu.Unlock()
	if err := m.flush(ctx, seqs); err != nil {
		m.o.log.Warnf("kafka_eos: mirror: the release of %v did not commit before the rebalance went on (%v): their next owner will fence %q, which then stops", parts, err, m.self)
		return
	}
	m.o.log.Debugf("kafka_eos: mirror: released %v", parts)
}

// positionsWait bounds one Positions call: an earlier owner's transactions
// end within their transaction timeout (when not fenced sooner).
func (m *mirror) positionsWait() time.Duration {
	return 2*m.o.conf.txnTimeout + 2*m.o.conf.commitBudget
}

// maxClaimRounds bounds the verification rounds of a claim (step 4).
const maxClaimRounds = 3

// positions implements handover.PositionKeeper (see mirror).
func (m *mirror) positions(ctx context.Context, req handover.PositionsRequest) (map[string]map[int32]int64, error) {
	o := m.o
	if err := o.Ready(ctx); err != nil {
		return nil, err
	}
	m.claimMu.Lock()
	defer m.claimMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.positionsWait())
	defer cancel()
	var parts []txnstate.SourcePartition
	for t, ps := range req.Partitions {
		for _, p := range ps {
			parts = append(parts, txnstate.SourcePartition{Topic: t, Partition: p})
		}
	}
	slices.SortFunc(parts, func(a, b txnstate.SourcePartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	if len(parts) == 0 {
		return nil, nil
	}
	if err := m.checkTargets(ctx, req); err != nil {
		return nil, err
	}
	fenced := map[string]bool{}
	// Steps 1 and 2: fence every writer that may still commit them, then
	// read what committed.
	var st txnstate.Positions
	for {
		u, err := m.log.read(ctx, false)
		if err != nil {
			return nil, err
		}
		if err := m.fence(ctx, holders(u, parts, m.self), fenced); err != nil {
			return nil, err
		}
		if st, err = m.log.read(ctx, true); err != nil {
			return nil, err
		}
		h := holders(st, parts, m.self)
		for w := range fenced {
			delete(h, w)
		}
		if len(h) == 0 {
			break
		}
		if err := m.fence(ctx, h, fenced); err != nil {
			return nil, err
		}
	}
	if m.afterFence != nil {
		m.afterFence()
	}
	// Step 3: claims, and releases in the name of the writers fenced.
	m.mu.Lock()
	seqs := m.fenceReleasesLocked(st, fenced)
	for _, sp := range parts {
		r, ok := st.Latest(sp)
		if !ok {
			r.Next, r.Held = -1, ""
		}
		key, seq := m.enqueueLocked(txnstate.PositionRecord{Topic: sp.Topic, Partition: sp.Partition, Writer: m.self, Kind: txnstate.PositionClaim, Next: r.Next, Slots: m.slots, Generation: req.Generation, Held: r.Held})
		seqs[key] = seq
	}
	m.mu.Unlock()
	if err := m.flush(ctx, seqs); err != nil {
		return nil, fmt.Errorf("committing the claim of %d partitions: %w", len(parts), err)
	}
	// Step 4: nobody claimed them meanwhile.
	for round := 1; ; round++ {
		var err error
		if st, err = m.log.read(ctx, true); err != nil {
			return nil, err
		}
		h := holders(st, parts, m.self)
		if len(h) == 0 {
			break
		}
		if round == maxClaimRounds {
			return nil, fmt.Errorf("partitions claimed by other writers at the same time: %v", slices.Sorted(maps.Keys(h)))
		}
		o.log.Warnf("kafka_eos: mirror: %v claimed partitions of %v at the same time as %q: fencing them", slices.Sorted(maps.Keys(h)), req.Partitions, m.self)
		again := map[string]bool{}
		if err := m.fence(ctx, h, again); err != nil {
			return nil, err
		}
		if st, err = m.log.read(ctx, true); err != nil {
			return nil, err
		}
		m.mu.Lock()
		seqs := m.fenceReleasesLocked(st, again)
		m.mu.Unlock()
		if err := m.flush(ctx, seqs); err != nil {
			return nil, err
		}
	}
	// Step 5.
	out := map[string]map[int32]int64{}
	var resumes []string
	k := o.k2k
	k.mu.Lock()
	for _, sp := range parts {
		r, ok := st.Latest(sp)
		if !ok {
			resumes = append(resumes, fmt.Sprintf("%s/%d: no position", sp.Topic, sp.Partition))
			continue
		}
		if out[sp.Topic] == nil {
			out[sp.Topic] = map[int32]int64{}
		}
		out[sp.Topic][sp.Partition] = r.Next
		tp := topicPartition{sp.Topic, sp.Partition}
		k.committed[tp] = r.Next
		// Held at a record a dead-letter route had not taken: the
		// input reads from it again, and what was copied past it is
		// acknowledged without being copied twice.
		if h, ok := parseHeldMeta(r.Held, r.Next); ok {
			k.takeHeldLocked(tp, h)
			resumes = append(resumes, fmt.Sprintf("%s/%d: %d (held at a record a dead-letter route had not taken; copied past it to %d)", sp.Topic, sp.Partition, r.Next, h.through))
			continue
		}
		resumes = append(resumes, fmt.Sprintf("%s/%d: %d", sp.Topic, sp.Partition, r.Next))
	}
	k.signalLocked()
	k.mu.Unlock()
	o.log.Infof("kafka_eos: mirror: %q claimed %d partitions (generation %d); committed positions %s", m.self, len(parts), req.Generation, strings.Join(resumes, ", "))
	return out, nil
}

// checkStarts refuses starts below the positions this writer claimed: the
// input did not start from them (its start_offset is not committed), and
// would copy records that are in the target already.
func (m *mirror) checkStarts(starts map[string]map[int32]int64) error {
	k := m.o.k2k
	k.mu.Lock()
	defer k.mu.Unlock()
	for t, ps := range starts {
		for p, at := range ps {
			if c, ok := k.committed[topicPartition{t, p}]; ok && at < c {
				return fmt.Errorf("%w: mirror mode: the kafka_native input of group %s starts %s/%d at offset %d, below the committed position %d: it must start from the positions (start_offset: committed), or it copies records again", ErrConfig, m.o.conf.group, t, p, at, c)
			}
		}
	}
	return nil
}

// holders returns the writers other than self whose latest word on one of
// parts is a claim or a pos, with their slot count (the largest one seen).
func holders(st txnstate.Positions, parts []txnstate.SourcePartition, self string) map[string]int {
	out := map[string]int{}
	for _, sp := range parts {
		for _, r := range st.Holders(sp, self) {
			out[r.Writer] = max(out[r.Writer], r.Slots)
		}
	}
	return out
}

// fenceReleasesLocked queues, for every writer of ws, a release in its name
// of every partition it holds in st. m.mu is held.
func (m *mirror) fenceReleasesLocked(st txnstate.Positions, ws map[string]bool) map[pendingKey]uint64 {
	seqs := map[pendingKey]uint64{}
	for w := range ws {
		for _, r := range st.Held(w) {
			key, seq := m.enqueueLocked(txnstate.PositionRecord{Topic: r.Topic, Partition: r.Partition, Writer: w, Kind: txnstate.PositionRelease, Next: r.Next, Slots: r.Slots, Generation: r.Generation, By: m.self, Held: r.Held})
			seqs[key] = seq
		}
	}
	return seqs
}

// fence makes every writer of ws (by slot count) unable to commit anything
// again: InitProducerID on each of its slots' transactional ids aborts what
// they have open and bumps their producer epochs. A live writer stops (its
// next request on a fenced slot fails) as a zombie does; a restarted one
// initialises its slots again at start. Writers already in done are skipped;
// those fenced are added.
func (m *mirror) fence(ctx context.Context, ws map[string]int, done map[string]bool) error {
	o := m.o
	names := slices.Sorted(maps.Keys(ws))
	for _, w := range names {
		if done[w] {
			continue
		}
		slots := max(ws[w], 1)
		o.log.Warnf("kafka_eos: mirror: writer %q holds partitions %q is about to copy without having released them: fencing its %d transactional ids (%s-0 ..); a running process of it stops", w, m.self, slots, w)
		for n := range slots {
			id := txnstate.SlotID(w, n)
			req := kmsg.NewPtrInitProducerIDRequest()
			req.TransactionalID = &id
			req.TransactionTimeoutMillis = int32(o.conf.txnTimeout.Milliseconds())
			req.ProducerID, req.ProducerEpoch = -1, -1
			err := retryRetriable(ctx, func() error {
				resp, err := req.RequestWith(ctx, o.admin)
				if err != nil {
					return err
				}
				return kerr.ErrorForCode(resp.ErrorCode)
			})
			if err != nil {
				return fmt.Errorf("fencing %q (InitProducerID): %w", id, err)
			}
		}
		done[w] = true
		o.m.mirrorEvent(m.mm, mirrorFenced, 1)
	}
	return nil
}

// checkTargets creates the missing target topics of req (create_topics) and
// checks that each has at least as many partitions as its source: a record
// keeps its partition. A rename that maps two source topics to one target, or
// a target with fewer partitions, stops the pipeline.
func (m *mirror) checkTargets(ctx context.Context, req handover.PositionsRequest) error {
	o := m.o
	adm := kadm.NewClient(o.admin)
	sources := slices.Sorted(maps.Keys(req.Partitions))
	m.mu.Lock()
	for _, src := range sources {
		dst := m.conf.target(src)
		if other, ok := m.targets[dst]; ok && other != src {
			m.mu.Unlock()
			return o.stop(fmt.Errorf("%w: field mirror: source topics %q and %q both map to %q: a target partition would mix two source partitions", ErrConfig, other, src, dst), true)
		}
		m.targets[dst] = src
	}
	m.mu.Unlock()
	var dsts []string
	for _, src := range sources {
		dsts = append(dsts, m.conf.target(src))
	}
	md, err := targetTopics(ctx, o.admin, dsts)
	if err != nil {
		return err
	}
	if m.conf.create {
		var missing []string // sources whose target is missing
		for _, src := range sources {
			if errors.Is(md[m.conf.target(src)].err, kerr.UnknownTopicOrPartition) && req.PartitionCounts[src] > 0 {
				missing = append(missing, src)
			}
		}
		if len(missing) > 0 {
			if err := m.createTargets(ctx, adm, req, missing); err != nil {
				return err
			}
			if md, err = targetTopics(ctx, o.admin, dsts); err != nil {
				return err
			}
		}
	}
	for _, src := range sources {
		dst := m.conf.target(src)
		td := md[dst]
		if td.err != nil {
			o.log.Warnf("kafka_eos: mirror: target topic %s (of %s) does not exist (%v): its records fail until it does (create it with %d partitions, or set mirror.create_topics)", dst, src, td.err, req.PartitionCounts[src])
			continue
		}
		if want := req.PartitionCounts[src]; td.partitions < want {
			return o.stop(fmt.Errorf("kafka_eos: mirror: target topic %s has %d partitions, its source topic %s has %d: every record keeps its partition, so the target needs at least as many", dst, td.partitions, src, want), true)
		}
	}
	return nil
}

// targetTopic is what the target cluster says of a topic: its partition
// count, or the error it answers with (UNKNOWN_TOPIC_OR_PARTITION: missing).
type targetTopic struct {
	partitions int32
	err        error
}

// targetTopics asks the target cluster about topics with a Metadata request of
// its own: the client's metadata cache (what kadm reads) may be seconds old,
// and a topic just created would still look missing there.
func targetTopics(ctx context.Context, cl *kgo.Client, topics []string) (map[string]targetTopic, error) {
	var resp *kmsg.MetadataResponse
	err := retryRetriable(ctx, func() error {
		req := kmsg.NewPtrMetadataRequest()
		for _, t := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(t)
			req.Topics = append(req.Topics, rt)
		}
		var err error
		resp, err = req.RequestWith(ctx, cl)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("metadata of the target topics %v: %w", topics, err)
	}
	out := make(map[string]targetTopic, len(topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		terr := kerr.ErrorForCode(t.ErrorCode)
		if errors.Is(terr, kerr.TopicAuthorizationFailed) {
			return nil, fmt.Errorf("metadata of the target topic %s: %w", *t.Topic, terr)
		}
		out[*t.Topic] = targetTopic{partitions: int32(len(t.Partitions)), err: terr}
	}
	for _, t := range topics {
		if _, ok := out[t]; !ok {
			out[t] = targetTopic{err: fmt.Errorf("not in the metadata answer")}
		}
	}
	return out, nil
}

// mirrorConfigsNotCopied are the topic configs that create_topics does not
// give a target topic although its source topic sets them: they would change
// what is copied (LogAppendTime replaces the copied timestamps; the timestamp
// bounds refuse old records), or belong to the source cluster (its size, its
// brokers).
var mirrorConfigsNotCopied = map[string]bool{
	"message.timestamp.type":                  true,
	"message.timestamp.difference.max.ms":     true,
	"message.timestamp.before.max.ms":         true,
	"message.timestamp.after.max.ms":          true,
	"min.insync.replicas":                     true,
	"unclean.leader.election.enable":          true,
	"leader.replication.throttled.replicas":   true,
	"follower.replication.throttled.replicas": true,
}

// mirrorConfigCopied reports whether create_topics gives a target topic the
// config key its source topic sets: not those of mirrorConfigsNotCopied, and
// not the configs only Confluent's or Redpanda's brokers know.
func mirrorConfigCopied(key string) bool {
	return !mirrorConfigsNotCopied[key] && !strings.HasPrefix(key, "confluent.") && !strings.HasPrefix(key, "redpanda.")
}

// createTargets creates the target topics of sources (create_topics), each
// with its source's partition count and the configs set on the source topic
// that mirrorConfigCopied keeps: records keep their source timestamps, so a
// target left at the broker's default retention would delete copied records
// older than it at its next retention check, and a compacted source would
// become a target that is not.
func (m *mirror) createTargets(ctx context.Context, adm *kadm.Client, req handover.PositionsRequest, sources []string) error {
	o := m.o
	var srcConfigs map[string]map[string]string
	if req.SourceConfigs != nil {
		var err error
		if srcConfigs, err = req.SourceConfigs(ctx, sources); err != nil {
			return fmt.Errorf("mirror.create_topics: the target topics are created with their source topics' configs, and those could not be read (the input's user needs DescribeConfigs on the source topics; or create the targets yourself): %w", err)
		}
	}
	for _, src := range sources {
		dst, n := m.conf.target(src), req.PartitionCounts[src]
		configs := map[string]*string{}
		for _, k := range slices.Sorted(maps.Keys(srcConfigs[src])) {
			if mirrorConfigCopied(k) {
				configs[k] = kadm.StringPtr(srcConfigs[src][k])
			}
		}
		err := retryRetriable(ctx, func() error {
			resp, err := adm.CreateTopic(ctx, n, -1, configs, dst)
			if err == nil {
				err = resp.Err
			}
			if errors.Is(err, kerr.TopicAlreadyExists) {
				return nil
			}
			if err == nil {
				o.log.Infof("kafka_eos: mirror: created topic %s with %d partitions and the configs of %s on the source (%s)", dst, n, src, configList(configs))
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("creating the target topic %s (%d partitions, configs of %s: %s): %w", dst, n, src, configList(configs), err)
		}
	}
	return nil
}

// configList lists configs as "k=v, ..." in key order, or "none set".
func configList(configs map[string]*string) string {
	if len(configs) == 0 {
		return "none set"
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(configs)) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k + "=" + *configs[k])
	}
	return b.String()
}

// describeRecords names the partitions and positions of rs for a log line.
func describeRecords(rs []txnstate.PositionRecord) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s/%d at %d", r.Topic, r.Partition, r.Next))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// produceWithin produces recs and waits for every one's answer, at most
// budget (commit_timeout). franz-go's ProduceSync waits for the answers
// alone, and a record can stay buffered with no request sent for it: after
// an AddPartitionsToTxn refused PRODUCER_FENCED, a record buffered to a topic
// new to the client during that refusal was neither sent nor failed (seen
// under transaction version 0 on kfake); the commit then waited for the
// epoch's deadline (franz-go's own flush did not send it either). Past the
// budget: a producer id that failed (a fence) is returned as the error;
// otherwise the client's buffered records are aborted and the records'
// errors are returned.
func produceWithin(ctx context.Context, cl *kgo.Client, budget time.Duration, recs []*kgo.Record) error {
	answers := make(chan error, len(recs))
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) { answers <- err })
	}
	timer := time.NewTimer(budget)
	defer timer.Stop()
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for got := 0; got < len(recs); got++ {
		select {
		case err := <-answers:
			note(err)
			continue
		case <-timer.C:
		}
		// A failed producer id (fenced) never sends them: say so at once.
		// ProducerID sends nothing then, it returns the failure.
		pctx, pcancel := context.WithTimeout(ctx, budget)
		_, _, perr := cl.ProducerID(pctx)
		pcancel()
		if perr != nil {
			return fmt.Errorf("no answer for %d of %d records within commit_timeout %v, the producer id failed: %w", len(recs)-got, len(recs), budget, perr)
		}
		actx, cancel := context.WithTimeout(ctx, budget)
		aerr := cl.AbortBufferedRecords(actx)
		cancel()
		// The abort returns once nothing is buffered: every answer is in.
		for ; got < len(recs); got++ {
			select {
			case err := <-answers:
				note(err)
			default:
				return fmt.Errorf("no answer for %d of %d records within commit_timeout %v, and aborting them: %v", len(recs)-got, len(recs), budget, aerr)
			}
		}
		if first != nil {
			return fmt.Errorf("no answer within commit_timeout %v, the buffered records aborted: %w", budget, first)
		}
		return nil
	}
	return first
}
