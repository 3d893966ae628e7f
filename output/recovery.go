package output

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/connect-eos/connect-eos/txnstate"
)

// recovered is what recovery learnt: the next epoch number and which slots
// it looked at (the orphan cleanup touches only those).
type recovered struct {
	nextEpoch uint64
	looked    map[int]bool
	// openOrphans are slots beyond the pool whose epoch recovery decided to
	// abort: their InitProducerID does it.
	openOrphans []int
	// orphans are the slots beyond the pool that hold a record: a
	// previous owner with a larger pool used them, and may still run.
	orphans []int
	// decided are recovery's decisions by slot, written by afterFence once
	// the slots are fenced, if the slot still holds the record read.
	decided map[int]decided
}

// decided is recovery's decision on the record it read from a slot.
type decided struct {
	read   txnstate.Record // as read from the slot
	action txnstate.Action // MarkCommitted, MarkAborted, AbortOpen or ResumeCommit (done)
	write  txnstate.Record // the record that states the decision
}

// recover runs before any slot is initialised (an InitProducerID would abort
// what recovery may want to resume):
//
//  1. Read the stored pool high-water mark and every slot's record (slots
//     beyond the current pool included), and raise the mark to this pool.
//  2. For every PREPARED record, observe: DescribeTransactions, matched
//     exactly on (pid, epoch, version) by txnstate.Decide; if that says
//     unknown, the exact Fetch probe at the stored first offsets.
//  3. txnstate.Resolve decides in epoch order; a resume is a raw
//     EndTxn(commit) pinned to the stored version, done here; an open epoch
//     to abort is aborted by the slot's InitProducerID.
//  4. Unknown stops the start with an *InDoubtError (Benthos retries Connect,
//     so a transient broker problem resolves itself; recovery_override is
//     the operator's way out).
//
// The decisions are written to the state cache by afterFence, not here: until
// its slot is fenced, a previous owner still running can write the slot's
// record again, and under transaction version 0 (the producer epoch does not
// move between a slot's transactions) its later epoch's record carries the
// owner token of the record read here. A decision written now could land
// over that later record and lose it (in dedupe mode its positions: the
// input's replay of its records would be written again). Nothing is lost by
// waiting: the acts done before the write leave the broker in a state a
// later start observes the same way (a resumed epoch committed, an aborted
// one aborted), and a crash before the write leaves the record PREPARED, to
// be observed again.
func (o *output) recover(ctx context.Context) (recovered, error) {
	rec := recovered{looked: map[int]bool{}, nextEpoch: 1}
	hw, err := o.store.slotsHighWater(ctx)
	if err != nil {
		return rec, err
	}
	limit := max(hw, o.conf.poolSize)
	if limit != hw {
		if err := o.store.setSlotsHighWater(ctx, limit); err != nil {
			return rec, err
		}
	}
	type slotRec struct {
		n int
		r txnstate.Record
	}
	var recs []slotRec
	for n := 0; ; n++ {
		r, ok, err := o.store.readSlot(ctx, n)
		if err != nil {
			return rec, err
		}
		rec.looked[n] = true
		if !ok {
			if n >= limit {
				break
			}
			continue
		}
		recs = append(recs, slotRec{n, r})
		if n >= o.conf.poolSize {
			rec.orphans = append(rec.orphans, n)
		}
		if r.Epoch >= rec.nextEpoch {
			rec.nextEpoch = r.Epoch + 1
		}
	}

	if o.hooks != nil && o.hooks.beforeObserve != nil {
		o.hooks.beforeObserve()
	}
	var inDoubt []txnstate.InDoubt
	slotOf := map[uint64]int{}
	obsErr := map[uint64]error{} // why an epoch was not identified
	for _, sr := range recs {
		if sr.r.State != txnstate.Prepared {
			continue
		}
		out, err := o.observe(ctx, sr.r)
		if err != nil {
			o.log.Warnf("kafka_eos: recovery of epoch %d on %q: %v", sr.r.Epoch, sr.r.TransactionalID, err)
			obsErr[sr.r.Epoch] = err
		}
		o.log.Infof("kafka_eos: recovery: epoch %d on %q (producer id %d, epoch %d, TV%d) is in doubt; observed %v", sr.r.Epoch, sr.r.TransactionalID, sr.r.ProducerID, sr.r.ProducerEpoch, sr.r.TxnVersion, out)
		inDoubt = append(inDoubt, txnstate.InDoubt{Record: sr.r, Outcome: out})
		slotOf[sr.r.Epoch] = sr.n
	}
	o.decideOffsetsOnly(ctx, inDoubt, obsErr)
	o.markReplayed(ctx, inDoubt)
	decisions, cerr := txnstate.Resolve(o.conf.mode, inDoubt, o.conf.override)
	rec.decided = map[int]decided{}
	for _, d := range decisions {
		n := slotOf[d.Record.Epoch]
		o.log.Infof("kafka_eos: recovery: epoch %d on %q: %v (%s)", d.Record.Epoch, d.Record.TransactionalID, d.Action, d.Reason)
		switch d.Action {
		case txnstate.MarkCommitted:
			rec.decided[n] = decided{read: d.Record, action: d.Action, write: d.Record.WithState(txnstate.Committed, d.Reason)}
			if d.Outcome == txnstate.Unknown {
				o.m.resolved(outcomeForcedCommitted)
			} else {
				o.m.resolved(outcomeFoundCommitted)
			}
		case txnstate.MarkAborted:
			rec.decided[n] = decided{read: d.Record, action: d.Action, write: d.Record.WithState(txnstate.Aborted, d.Reason)}
			if d.Outcome == txnstate.Unknown {
				o.m.resolved(outcomeForcedAborted)
			} else {
				o.m.resolved(outcomeFoundAborted)
			}
		case txnstate.AbortOpen:
			// The slot's InitProducerID (in Connect, or the orphan
			// cleanup) aborts the transaction.
			rec.decided[n] = decided{read: d.Record, action: d.Action, write: d.Record.WithState(txnstate.Aborted, d.Reason)}
			o.m.resolved(outcomeAborted)
			if n >= o.conf.poolSize {
				rec.openOrphans = append(rec.openOrphans, n)
			}
		case txnstate.ResumeCommit:
			// A crash before the EndTxn leaves the record PREPARED and
			// the epoch open: the next start resumes it again.
			res, err := o.rawEndTxn(ctx, d.Record)
			if res != txnstate.RetryOK {
				return rec, &InDoubtError{TransactionalID: d.Record.TransactionalID, Epoch: d.Record.Epoch, ProducerID: d.Record.ProducerID, ProducerEpoch: d.Record.ProducerEpoch, Detail: fmt.Sprintf("resuming the commit failed: %v", err)}
			}
			rec.decided[n] = decided{read: d.Record, action: d.Action, write: d.Record.WithState(txnstate.Committed, "resumed at restart")}
			o.m.resolved(outcomeResumed)
		case txnstate.Stop:
			detail := d.Reason
			if cerr != nil {
				detail += ": " + cerr.Error()
			}
			return rec, &InDoubtError{TransactionalID: d.Record.TransactionalID, Epoch: d.Record.Epoch, ProducerID: d.Record.ProducerID, ProducerEpoch: d.Record.ProducerEpoch, Detail: detail, Cause: obsErr[d.Record.Epoch]}
		}
	}
	return rec, nil
}

// decideOffsetsOnly decides, in Kafka-to-Kafka mode, each in-doubt epoch of
// offsets only (positions handed over past records that make no message: it
// wrote no record) that the coordinator answered on without identifying it.
// The Fetch probe has no record to read for it, and the answer can fail to
// identify a finished transaction: kfake shows Empty at the bumped epoch
// after a transaction version 2 commit and abort alike, and Apache Kafka
// forgets a transactional id left idle past transactional.id.expiration.ms.
// Either way the transaction is over (one still open shows Ongoing at the
// stored producer epoch, and observe returns it as still open).
//
// The epoch's only writes were its source offsets, in its own transaction,
// so the group's committed offsets say what it became: every source offset
// reached, committed (or aborted and carried again since by a later epoch,
// which leaves nothing of it to decide: no record of it exists, and its
// positions are committed); one not reached, aborted (offsets never move
// back in this mode: a commit would have left them at or past it). An epoch
// whose observation failed, or whose group offsets cannot be read, stays
// Unknown.
func (o *output) decideOffsetsOnly(ctx context.Context, in []txnstate.InDoubt, obsErr map[uint64]error) {
	if o.conf.mode != txnstate.KafkaToKafka || o.k2k == nil {
		return
	}
	var todo []int
	for i, d := range in {
		r := d.Record
		if d.Outcome == txnstate.Unknown && obsErr[r.Epoch] == nil && len(r.Partitions) == 0 && len(r.SourceOffsets) > 0 && r.Group == o.k2k.group {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}
	resp, err := o.groupCommitted(ctx)
	if err != nil {
		o.log.Warnf("kafka_eos: recovery: fetching the committed offsets of group %s (to decide an epoch of offsets only): %v", o.k2k.group, err)
		return
	}
	for _, i := range todo {
		r := in[i].Record
		if sourceOffsetsReached(resp, r.SourceOffsets) {
			in[i].Outcome = txnstate.FoundCommitted
			o.log.Infof("kafka_eos: recovery: epoch %d on %q wrote offsets only, and group %s has committed at or past them: committed", r.Epoch, r.TransactionalID, o.k2k.group)
		} else {
			in[i].Outcome = txnstate.FoundAborted
			o.log.Infof("kafka_eos: recovery: epoch %d on %q wrote offsets only, and group %s has not committed them: aborted", r.Epoch, r.TransactionalID, o.k2k.group)
		}
	}
}

// groupCommitted reads the offsets the group of this output committed (none
// for a group the coordinator does not know),
// without RequireStable: only committed ones count, and an open in-doubt
// epoch's pending ones would make a stable read wait.
func (o *output) groupCommitted(ctx context.Context) (kadm.OffsetResponses, error) {
	fctx, cancel := context.WithTimeout(ctx, max(o.conf.commitBudget, 5*time.Second))
	defer cancel()
	var resp kadm.OffsetResponses
	err := retryRetriable(fctx, func() error {
		var err error
		resp, err = kadm.NewClient(o.admin).FetchOffsets(fctx, o.k2k.group)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		// kfake's answer for a group that committed nothing.
		return kadm.OffsetResponses{}, nil
	}
	return resp, err
}

// sourceOffsetsReached reports whether the group's committed offsets are at or
// past every one of sos.
func sourceOffsetsReached(resp kadm.OffsetResponses, sos []txnstate.SourceOffset) bool {
	for _, so := range sos {
		r, ok := resp.Lookup(so.Topic, so.Partition)
		if !ok || r.Err != nil || r.At < so.Offset {
			return false
		}
	}
	return true
}

// markReplayed sets, in Kafka-to-Kafka mode, Rereads on each in-doubt epoch
// that stored source offsets for the group this output commits (its abort
// moved none of them: whatever the group committed since, a later epoch found
// committed contradicts nothing, txnstate.Resolve), and Replayed on each
// in-doubt epoch
// found aborted before a later one found committed whose batches were
// committed again since: the group's committed offsets are at or past every
// source offset it would have committed. Offsets move only over a contiguous
// committed run (I8), so its records were written again in a committed
// epoch, and its abort leaves no gap for the later commit to contradict
// (txnstate.Resolve). Its record is stale, not a sign of a broken order: a
// PREPARE whose write timed out can land after the ABORTED written once the
// epoch aborted (or after the slot's later epochs), while the instance went
// on and replayed the epoch. An epoch that stored no source offsets, or
// whose offsets the group has not reached, is not Replayed: a later open
// epoch is aborted after it. (An epoch whose offset
// was held at a message a dead-letter route had not taken yet stored the
// held offset, which says nothing of the records it wrote past it: a group
// still at exactly that offset passes the check without showing them
// committed again.)
//
// A read of the group's offsets that fails leaves every epoch as it is.
func (o *output) markReplayed(ctx context.Context, in []txnstate.InDoubt) {
	if o.conf.mode != txnstate.KafkaToKafka || o.k2k == nil {
		return
	}
	for i, d := range in {
		if len(d.Record.SourceOffsets) > 0 && d.Record.Group == o.k2k.group {
			in[i].Rereads = true
		}
	}
	var lastCommitted uint64
	for _, d := range in {
		if d.Outcome == txnstate.FoundCommitted {
			lastCommitted = max(lastCommitted, d.Record.Epoch)
		}
	}
	need := false
	for _, d := range in {
		if d.Outcome == txnstate.FoundAborted && d.Record.Epoch < lastCommitted && len(d.Record.SourceOffsets) > 0 && d.Record.Group == o.k2k.group {
			need = true
		}
	}
	if !need {
		return
	}
	resp, err := o.groupCommitted(ctx)
	if err != nil {
		o.log.Warnf("kafka_eos: recovery: fetching the committed offsets of group %s (to tell whether an aborted epoch was replayed since): %v", o.k2k.group, err)
		return
	}
	for i, d := range in {
		if d.Outcome != txnstate.FoundAborted || d.Record.Epoch >= lastCommitted || len(d.Record.SourceOffsets) == 0 || d.Record.Group != o.k2k.group {
			continue
		}
		if sourceOffsetsReached(resp, d.Record.SourceOffsets) {
			o.log.Infof("kafka_eos: recovery: epoch %d on %q aborted, and group %s has committed past its source offsets since: its batches were written again", d.Record.Epoch, d.Record.TransactionalID, o.k2k.group)
			in[i].Replayed = true
		}
	}
}

// observe establishes what one in-doubt epoch became, exactly or Unknown.
func (o *output) observe(ctx context.Context, r txnstate.Record) (txnstate.Outcome, error) {
	obs, err := o.describe(ctx, r.TransactionalID)
	if err != nil {
		return txnstate.Unknown, err
	}
	out := txnstate.Decide(r, obs)
	if out == txnstate.StillOpen && r.TxnVersion == txnstate.TV0 && o.conf.mode != txnstate.Plain {
		// Under TV0 a slot keeps its producer epoch from one transaction
		// to the next, so Ongoing at the stored one does not say which
		// epoch is open: a previous owner still running (a zombie that
		// woke up) may have committed r's epoch since this record was
		// read, and opened a later one on the slot. The probe tells r's
		// own records apart: committed or aborted is exact; still
		// undecided, r's epoch is the open one, and Resolve aborts it
		// (resuming could commit a later epoch without its offsets, its
		// dedupe positions or its mirror positions; the zombie may still
		// commit r's epoch
		// before the fence, which afterFence then finds).
		if p, err := o.probe(ctx, r); err == nil && p != txnstate.Unknown {
			return p, nil
		}
		return out, nil
	}
	if out != txnstate.Unknown {
		return out, nil
	}
	return o.probe(ctx, r)
}

// afterFence runs once every slot of the pool is initialised and the orphaned
// slots' transactions aborted: from then on no earlier owner of the
// transactional_id can commit anything. Until then it could: an instance
// that stalled and wakes up while this one starts (a zombie not fenced yet)
// goes on preparing and committing epochs after recover read the state cache,
// on each slot until this instance's InitProducerID of that slot. recover saw
// none of them; their epoch numbers and, in dedupe mode, their positions must
// count (else the input's replay of what they wrote is written again).
//
// So the state cache is read again, to its current end (a PREPARE is durable
// before its EndTxn, and that EndTxn came before the fence), and the next
// epoch is raised past every stored one. A slot that still holds the record
// recover decided on gets the decision written, with this instance's token
// of the slot (an epoch decided abort-open is probed again first: the zombie
// may have committed it before the fence). A slot whose record changed keeps
// the previous owner's record: it is newer than what recover read (a later
// epoch, or the epoch's own COMMITTED or ABORTED), and in dedupe mode a record
// still PREPARED is resolved as recovery does, in epoch order. Nothing is
// open on the pool's slots any more, so the outcome is committed or aborted
// (or unknown, which stops the start as in recover); its decision is written
// with this instance's token of the slot, so the zombie's later writes lose.
func (o *output) afterFence(ctx context.Context, rec *recovered, slots []*slot) error {
	if err := o.store.sync(ctx); err != nil {
		return err
	}
	hw, err := o.store.slotsHighWater(ctx)
	if err != nil {
		return err
	}
	limit := max(hw, o.conf.poolSize)
	var inDoubt []txnstate.InDoubt
	slotOf := map[uint64]int{}
	obsErr := map[uint64]error{} // why an epoch was not identified
	for n := 0; ; n++ {
		r, ok, err := o.store.readSlot(ctx, n)
		if err != nil {
			return err
		}
		if !ok {
			if n >= limit {
				break
			}
			continue
		}
		if r.Epoch >= rec.nextEpoch {
			rec.nextEpoch = r.Epoch + 1
		}
		if d, ok := rec.decided[n]; ok {
			if sameDecision(d.read, r) {
				if err := o.writeDecided(ctx, n, d, slots); err != nil {
					return err
				}
				continue
			}
			o.log.Infof("kafka_eos: recovery: slot %q holds epoch %d %s, written by its previous owner after recovery read epoch %d there: the decision on epoch %d is not written over it", txnstate.SlotID(o.conf.transactionalID, n), r.Epoch, r.State, d.read.Epoch, d.read.Epoch)
		}
		if r.State != txnstate.Prepared || o.conf.mode != txnstate.Dedupe {
			continue
		}
		out, err := o.observe(ctx, r)
		if out == txnstate.StillOpen {
			// Not on a slot this instance initialised (one beyond
			// the pool): resuming it now would race its owner.
			out, err = o.probe(ctx, r)
			if out == txnstate.StillOpen {
				out = txnstate.Unknown
			}
		}
		if err != nil {
			o.log.Warnf("kafka_eos: recovery of epoch %d on %q: %v", r.Epoch, r.TransactionalID, err)
			obsErr[r.Epoch] = err
		}
		o.log.Infof("kafka_eos: recovery: epoch %d on %q (producer id %d, epoch %d, TV%d) was prepared by a previous owner after this instance read the state cache; observed %v", r.Epoch, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.TxnVersion, out)
		inDoubt = append(inDoubt, txnstate.InDoubt{Record: r, Outcome: out})
		slotOf[r.Epoch] = n
	}
	decisions, cerr := txnstate.Resolve(o.conf.mode, inDoubt, o.conf.override)
	for _, d := range decisions {
		n := slotOf[d.Record.Epoch]
		o.log.Infof("kafka_eos: recovery: epoch %d on %q: %v (%s)", d.Record.Epoch, d.Record.TransactionalID, d.Action, d.Reason)
		var r txnstate.Record
		switch d.Action {
		case txnstate.MarkCommitted:
			r = d.Record.WithState(txnstate.Committed, d.Reason)
		case txnstate.MarkAborted, txnstate.AbortOpen:
			r = d.Record.WithState(txnstate.Aborted, d.Reason)
		default:
			detail := d.Reason
			if cerr != nil {
				detail += ": " + cerr.Error()
			}
			return &InDoubtError{TransactionalID: d.Record.TransactionalID, Epoch: d.Record.Epoch, ProducerID: d.Record.ProducerID, ProducerEpoch: d.Record.ProducerEpoch, Detail: detail, Cause: obsErr[d.Record.Epoch]}
		}
		if n < len(slots) {
			r.Fence = max(r.Fence, slots[n].lastFence)
		}
		if err := o.store.writeSlot(ctx, n, r); err != nil {
			return err
		}
		if d.Action == txnstate.MarkCommitted {
			o.m.resolved(outcomeFoundCommitted)
		} else {
			o.m.resolved(outcomeFoundAborted)
		}
	}
	return nil
}

// sameDecision reports whether a and b describe the same epoch in the same state.
func sameDecision(a, b txnstate.Record) bool {
	return a.Epoch == b.Epoch && a.State == b.State && a.ProducerID == b.ProducerID && a.ProducerEpoch == b.ProducerEpoch
}

// writeDecided writes recovery's decision d on slot n, which still holds the
// record d was made on, with this instance's token of the slot. An epoch
// decided abort-open is probed again first: its previous owner, still
// running, may have committed it between the observation and this
// instance's InitProducerID of its slot (which aborts only what is still
// open then). The probe is exact now that nothing of the slot is open; found
// committed, the epoch is recorded committed (its positions then count in
// dedupe mode; the decision is logged again, the later line is the one that
// holds).
func (o *output) writeDecided(ctx context.Context, n int, d decided, slots []*slot) error {
	w := d.write
	if d.action == txnstate.AbortOpen {
		out, err := o.probe(ctx, d.read)
		if err != nil {
			o.log.Warnf("kafka_eos: recovery of epoch %d on %q: %v", d.read.Epoch, d.read.TransactionalID, err)
		}
		if out == txnstate.FoundCommitted {
			reason := "found committed after the fence: its previous owner, still running, committed it after it was observed open"
			o.log.Warnf("kafka_eos: recovery: epoch %d on %q: %v (%s)", d.read.Epoch, d.read.TransactionalID, txnstate.MarkCommitted, reason)
			w = d.read.WithState(txnstate.Committed, reason)
			o.m.resolved(outcomeFoundCommitted)
		}
	}
	if n < len(slots) {
		w.Fence = max(w.Fence, slots[n].lastFence)
	}
	return o.store.writeSlot(ctx, n, w)
}

// abortOrphans fences the slots this pool does not use, which aborts their
// lingering transactions: every slot beyond the pool that holds a record (a
// previous owner with a larger pool used it, and may still be running: a
// zombie could otherwise go on committing epochs there after this instance
// read the state cache, until it met one of the slots this pool fences),
// slots recovery decided to abort, and Ongoing transactions ListTransactions
// shows for ids matching `^<transactional_id>-(\d+)$` with n >= pool size,
// exactly (never a bare prefix: that could fence another deployment whose id
// extends ours). A listed slot recovery has not looked at is looked at first;
// if its record is in doubt, the start stops rather than abort it unseen.
// Each costs an InitProducerID at every start (the pool's high-water mark
// never comes down).
func (o *output) abortOrphans(ctx context.Context, rec recovered) error {
	m := txnstate.NewSlotMatcher(o.conf.transactionalID)
	abort := map[int]bool{}
	for _, n := range rec.openOrphans {
		abort[n] = true
	}
	for _, n := range rec.orphans {
		abort[n] = true
	}
	lt, err := kadm.NewClient(o.admin).ListTransactions(ctx, nil, []string{txnstate.BrokerOngoing})
	if err != nil {
		o.log.Warnf("kafka_eos: listing transactions for orphaned slots: %v", err)
	}
	for id := range lt {
		n, ok := m.Orphan(id, o.conf.poolSize)
		if !ok {
			continue
		}
		if !rec.looked[n] {
			r, found, err := o.store.readSlot(ctx, n)
			if err != nil {
				return err
			}
			if found && r.State == txnstate.Prepared {
				return &InDoubtError{TransactionalID: id, Epoch: r.Epoch, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Detail: "orphaned slot beyond the stored pool size holds a PREPARED epoch"}
			}
		}
		abort[n] = true
	}
	for n := range abort {
		id := txnstate.SlotID(o.conf.transactionalID, n)
		cl, err := o.newSlotClient(ctx, id)
		if err != nil {
			return fmt.Errorf("aborting the transaction of orphaned slot %q: %w", id, err)
		}
		cl.Close()
		o.log.Infof("kafka_eos: fenced orphaned slot %q (beyond producer_pool_size %d), aborting what it had open", id, o.conf.poolSize)
	}
	return nil
}
