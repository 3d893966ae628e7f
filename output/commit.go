package output

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/statecache"
	"github.com/connect-eos/connect-eos/txnstate"
)

// committer runs the commit sequence of every sealed epoch, one at a time and
// in epoch order, so "EndTxn(N-1) succeeded before PREPARE of N" (step 3)
// holds by construction. Epoch N+1 keeps producing on its own slot meanwhile.
type committer struct {
	o     *output
	sig   *shutdown.Signaller
	queue chan *epoch
}

func newCommitter(o *output) *committer {
	return &committer{o: o, sig: shutdown.NewSignaller(), queue: make(chan *epoch, len(o.slots)+1)}
}

func (c *committer) run() {
	defer c.sig.TriggerHasStopped()
	ctx, cancel := c.sig.HardStopCtx(context.Background())
	defer cancel()
	for {
		select {
		case ep := <-c.queue:
			c.o.commitEpoch(ctx, ep)
		case <-c.sig.SoftStopChan():
			return
		}
	}
}

// commitStep names the points of the commit sequence where tests inject a
// crash.
type commitStep int

const (
	stepProduced  commitStep = iota // records flushed, before PREPARE
	stepPrepared                    // PREPARE durable, before EndTxn
	stepEnded                       // EndTxn(commit) succeeded, before COMMITTED
	stepCommitted                   // COMMITTED written, before the ack
)

// testHooks lets tests stop the output at a step as a crash would: a non-nil
// error from atStep abandons everything (clients closed without ending their
// transactions, waiters released with the error, nothing written).
type testHooks struct {
	atStep func(step commitStep, epoch uint64) error
	// beforeCommit is called when the committer picks up an epoch.
	beforeCommit func(epoch uint64)
	// beforeProduce is called when a batch that joined epoch is about to
	// wait for its turn to produce (outside o.mu).
	beforeProduce func(epoch uint64, batch service.MessageBatch)
	// handOverTime, if set, is the clock produce stamps records with.
	handOverTime func() time.Time
	// afterRecover is called in Connect once recovery has read the state
	// cache, before the slots are initialised.
	afterRecover func()
	// beforeObserve is called in recovery once the slot records are read,
	// before the in-doubt ones are observed.
	beforeObserve func()
	// afterSlots is called in Connect once every slot is initialised,
	// before the check that no other producer initialised one since.
	afterSlots func()
}

func (o *output) hook(step commitStep, ep *epoch) bool {
	if o.hooks == nil || o.hooks.atStep == nil {
		return false
	}
	err := o.hooks.atStep(step, ep.n)
	if err == nil {
		return false
	}
	o.mu.Lock()
	ep.ending = false
	o.stopLocked(err, false)
	for _, s := range o.slots {
		s.cl.Close()
	}
	o.mu.Unlock()
	o.finish(ep, err)
	return true
}

// commitEpoch is the commit sequence of the brief for one epoch:
//
//  1. wait for every record to be handed to the client, Flush, and check
//     every promise; the epoch aborts if one failed.
//  3. EndTxn(N-1) already succeeded (the committer is sequential).
//  4. PREPARE: the recovery identity goes to the state cache.
//  5. EndTxn(commit), with franz-go (its request version follows the
//     transaction version the client latched at BeginTransaction, the one
//     PREPARE stored).
//  6. COMMITTED to the cache; if that write fails the batches are acked
//     anyway (Kafka is the truth) and the write is retried before the slot
//     carries another epoch.
//  7. ack.
//
// Failures before 5 abort this epoch and every later one (abortEpoch). At 5:
// a definite refusal by the broker is a fence (ours: abort; a zombie's: fatal)
// and anything else is an unknown outcome (resolveInDoubt): never nacked,
// never aborted blindly.
func (o *output) commitEpoch(ctx context.Context, ep *epoch) {
	start := time.Now()
	if o.hooks != nil && o.hooks.beforeCommit != nil {
		o.hooks.beforeCommit(ep.n)
	}
	o.mu.Lock()
	stopped, cause := o.stopErr != nil, ep.cause
	o.mu.Unlock()
	if stopped {
		return
	}
	// The coordinator aborts the transaction transaction_timeout after it
	// began; abort it ourselves before that rather than be fenced.
	deadline := ep.opened.Add(o.conf.txnTimeout - timeoutMargin(o.conf.txnTimeout))
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	ep.producing.Wait()
	if cause != nil {
		o.abortEpoch(ctx, ep, cause, false)
		return
	}
	if err := ep.slot.cl.Flush(dctx); err != nil {
		if errors.Is(dctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w: flush: %v", errEpochDeadline, err)
		}
		o.abortEpoch(ctx, ep, err, false)
		return
	}
	if err := ep.failure(); err != nil {
		o.abortEpoch(ctx, ep, err, false)
		return
	}
	if time.Now().After(deadline) {
		// Flush returns at once when nothing is buffered, whatever its
		// context: check the deadline ourselves.
		o.abortEpoch(ctx, ep, errEpochDeadline, false)
		return
	}
	ep.advance(txnstate.PhaseFlushed)

	pid, pepoch, err := ep.slot.cl.ProducerID(dctx)
	if err == nil && (pid != ep.pid || pepoch != ep.pepoch) {
		// franz-go re-initialised the producer id under the epoch (it
		// does after some errors): the records may not all be in the
		// transaction the EndTxn would commit.
		err = fmt.Errorf("producer id changed from %d/%d to %d/%d during the epoch", ep.pid, ep.pepoch, pid, pepoch)
	}
	if err != nil {
		o.abortEpoch(ctx, ep, fmt.Errorf("producer id: %w", err), false)
		return
	}

	rec := txnstate.Record{
		Format:          1,
		TransactionalID: ep.slot.id,
		Epoch:           ep.n,
		ProducerID:      pid,
		ProducerEpoch:   pepoch,
		TxnVersion:      ep.slot.tv,
		State:           txnstate.Prepared,
		Partitions:      ep.partitions(),
		Fence:           ep.slot.fence(pid, pepoch),
	}
	o.mu.Lock()
	ep.slot.lastFence = rec.Fence
	o.mu.Unlock()
	// Step 2: what the mode commits besides the records (Kafka-to-Kafka:
	// the source offsets, into the transaction; dedupe: the positions).
	if err := o.mode.prepare(dctx, ep, &rec); err != nil {
		o.abortEpoch(ctx, ep, err, false)
		return
	}
	// After prepare: mirror mode produced its positions records there.
	o.mu.Lock()
	records := ep.records
	o.mu.Unlock()
	rec.Partitions = ep.partitions()
	if records == 0 && len(rec.SourceOffsets) == 0 {
		// Nothing to commit (an epoch opened for offsets that an
		// earlier epoch carried): an empty transaction is never
		// committed. franz-go began nothing on the broker.
		if err := ep.slot.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			ep.slot.broken = true
		}
		o.finish(ep, nil)
		o.rewarm(ctx, ep.slot, nil)
		o.releaseSlot(ep.slot)
		if o.k2k != nil && o.k2k.floorPending() {
			// Positions handed over that it could not carry (the
			// group member was rejoining: nothing can be stamped),
			// which the input does not hand over again.
			o.carryFloorLater()
		}
		return
	}
	if o.hook(stepProduced, ep) {
		return
	}
	pctx, pcancel := context.WithTimeout(dctx, o.conf.commitBudget)
	err = o.store.writeSlot(pctx, ep.slot.n, rec)
	pcancel()
	if err != nil {
		// The write may have landed, or may land late, after a later
		// write of the slot: record the abort before reusing the slot,
		// and give the slot a new producer epoch (as after a failed
		// COMMITTED write, below) so that its later writes carry a
		// higher token.
		ep.slot.broken = true
		o.abortEpoch(ctx, ep, fmt.Errorf("prepare: %w", err), true, rec)
		return
	}
	ep.advance(txnstate.PhasePrepared)
	if o.hook(stepPrepared, ep) {
		return
	}

	if time.Now().After(deadline) {
		o.abortEpoch(ctx, ep, errEpochDeadline, true, rec)
		return
	}
	o.mu.Lock()
	if o.stopErr != nil {
		o.mu.Unlock()
		return
	}
	ep.ending = true
	o.mu.Unlock()
	ep.advance(txnstate.PhaseEnding)
	ectx, ecancel := context.WithTimeout(ctx, o.conf.commitBudget)
	if records > 0 {
		err = o.endTxn(ep.slot.cl, ectx, kgo.TryCommit)
		if err == nil {
			err = o.verifyCommit(ctx, ep.slot, rec)
		}
	} else {
		err = o.endOffsetsOnly(ectx, ep, rec)
	}
	ecancel()
	switch {
	case err == nil:
	case errors.Is(err, errCommitAborted):
		// Definite: nothing of the epoch is committed. Its batches are
		// nacked (replayed) as for an abort before the commit; the
		// output goes on. The slot gets a fresh client: after franz-go
		// turned the commit into an abort, the next epoch on the same
		// client was refused OUT_OF_ORDER_SEQUENCE_NUMBER (kfake TV2).
		ep.slot.broken = true
		o.mu.Lock()
		ep.ending = false
		o.mu.Unlock()
		o.abortEpoch(ctx, ep, err, true, rec)
		return
	case errors.Is(err, errCommitNotApplied):
		if !o.resolveInDoubt(ctx, ep, rec, err) {
			return
		}
	case isAuthErr(err):
		o.stopInDoubt(ep, rec, fmt.Errorf("end transaction: %w", err))
		return
	case isDefinite(err) && isFenceErr(err):
		if !o.handleFence(ctx, ep, rec, err) {
			return
		}
	default:
		if !o.resolveInDoubt(ctx, ep, rec, err) {
			return
		}
	}
	ep.advance(txnstate.PhaseCommitted)
	o.unknownTopic.reset()
	o.firstReadCloses.Store(0)
	o.mode.committed(ep, rec)
	if o.hook(stepEnded, ep) {
		return
	}
	o.m.epochCommitted()
	o.m.commitTiming(since(start))

	committed := rec.WithState(txnstate.Committed, "")
	wctx, wcancel := context.WithTimeout(ctx, o.conf.commitBudget)
	err = o.store.writeSlot(wctx, ep.slot.n, committed)
	wcancel()
	if err == nil && o.hook(stepCommitted, ep) {
		return
	}
	o.mu.Lock()
	ep.ending = false
	o.finishLocked(ep, nil)
	o.mu.Unlock()
	if err != nil {
		o.log.Warnf("kafka_eos: epoch %d committed, writing COMMITTED failed (retrying before %q carries another epoch): %v", ep.n, ep.slot.id, err)
		// The failed write may still land, after a later write of the
		// slot (a cache that applies a timed-out write late). Under
		// transaction version 0 the slot's token does not change
		// between its transactions, and a fencing cache would take it:
		// the slot's record would go back to this epoch over a later
		// one's. So the slot gets a new producer epoch before its next
		// epoch (rewarm, below): every later write of the slot carries
		// a higher token, and the late one is refused.
		o.mu.Lock()
		ep.slot.broken = true
		o.mu.Unlock()
		if !o.writeRetry(ctx, ep.slot.n, committed) {
			return
		}
	}
	if !o.mode.settled(ctx, rec) {
		return
	}
	o.m.buffered.Set(o.bufferedBytes())
	var checked *txnstate.Observation
	if ep.slot.broken {
		// The client is spent (an in-doubt commit, offsets only) or
		// the slot needs a new producer epoch (a failed write of its
		// record): before a new client takes the id, is it still ours?
		var rerr error
		if checked, rerr = o.rivalAfterCommit(ctx, ep, rec); rerr != nil {
			o.zombie(ep.slot, rerr)
			return
		}
	}
	o.rewarm(ctx, ep.slot, checked)       // after an in-doubt commit the client is spent
	o.releaseChecked(ep, true, committed) // hanging.go
}

// endOffsetsOnly ends an epoch that carries source offsets and no records.
// franz-go's EndTransaction would send nothing (it only knows of partitions it
// produced to), so the EndTxn is the raw one, pinned to the slot's transaction
// version. The client's local transaction is then ended (no request) and the
// slot re-initialised before its next epoch (under TV2 the broker bumped the
// producer epoch behind the client's back).
func (o *output) endOffsetsOnly(ctx context.Context, ep *epoch, rec txnstate.Record) error {
	res, err := o.rawEndTxn(ctx, rec)
	_ = ep.slot.cl.EndTransaction(ctx, kgo.TryAbort)
	ep.slot.broken = true
	switch res {
	case txnstate.RetryOK:
		return nil
	case txnstate.RetryRejected:
		return err // definite: the fence path decides
	}
	if err == nil {
		err = errors.New("raw EndTxn: no answer")
	}
	return err
}

// writeRetry writes a final state until it lands or the output stops; the
// slot stays busy meanwhile (the slot invariant of txnstate).
func (o *output) writeRetry(ctx context.Context, n int, r txnstate.Record) bool {
	backoff := 100 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
		err := o.store.writeSlot(wctx, n, r)
		cancel()
		if err == nil {
			return true
		}
		// A failed attempt may land late, after a later write of the
		// slot: the slot gets a new producer epoch before its next
		// epoch, so that a fencing cache refuses it then.
		o.mu.Lock()
		o.slots[n].broken = true
		o.mu.Unlock()
		if errors.Is(err, statecache.ErrFenced) {
			o.zombie(o.slots[n], err)
			return false
		}
		if o.stateRefused(fmt.Sprintf("%s of epoch %d", r.State, r.Epoch), err) {
			return false
		}
		o.log.Warnf("kafka_eos: writing %s of epoch %d: %v", r.State, r.Epoch, err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return false
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// stateRefused stops the output (fatal) if err, a state-cache write's, is a
// refusal no retry fixes (an authorization or authentication failure: a
// missing ACL or bad credentials) and reports whether it did. what names the
// write. The writers that retry until the write lands (writeRetry,
// savePositions) would otherwise retry it forever, holding the slot, with
// the pipeline up and writing nothing.
func (o *output) stateRefused(what string, err error) bool {
	if !isAuthErr(err) {
		return false
	}
	o.stop(fmt.Errorf("kafka_eos %q: writing %s to the state cache was refused, the output stops: %w", o.conf.transactionalID, what, err), true)
	return true
}

// errCommitNotApplied: EndTransaction(commit) returned nil, yet the broker
// shows the transaction at the stored producer id and epoch still open, ended
// without a commit, or cannot be asked (verifyCommit).
var errCommitNotApplied = errors.New("EndTransaction returned success but the broker does not show the transaction committed")

// errCommitAborted: EndTransaction(commit) returned nil, yet the epoch's
// transaction is known to have ended aborted (verifyCommit): a definite abort.
var errCommitAborted = errors.New("EndTransaction returned success but the transaction was aborted")

// verifyCommit checks, after franz-go's EndTransaction(commit) returned nil,
// that the broker committed the transaction, before anything is acked
// (invariant I2): DescribeTransactions for the slot's transactional id must
// show PrepareCommit or CompleteCommit at the stored producer id and the epoch
// the EndTxn left, e under TV0 and e+1 under TV2 (txnstate.CheckCommit has the
// rows). Anything else that is ours (still Ongoing at e, PrepareAbort or
// CompleteAbort at e or, TV2, e+1, a coordinator abort) goes to the in-doubt
// path (errCommitNotApplied): a raw EndTxn(commit) with the same id and epoch,
// then DescribeTransactions, then a stop holding the batches.
//
// franz-go's nil is not proof: it can return nil with no EndTxn sent (the
// records left in an open transaction, later aborted), and franz-go v1.22.3
// ends some transactions it was asked to commit with an abort and returns nil
// (it logs "no produce succeeded in this transaction but produces were
// attempted; issuing an abort"; seen on kfake for a fresh client's first
// transaction). Under TV2 the client's epoch bump proves nothing either: an
// abort bumps it as a commit does (TestKafkaEndTxnDescribe). The cost is one
// DescribeTransactions per epoch (docs/benchmarks.md, "TV2 commit check").
//
// kfake shows Empty at the epoch the EndTxn left after a commit and an abort
// alike (TestKfakeEndTxnDescribe); Apache Kafka never shows Empty there, so
// what follows runs on kfake only and costs nothing on Apache Kafka. Under
// TV0, Empty at e is asked of a raw EndTxn(commit) retry with the stored
// producer id and epoch (rawEndTxn; NONE only after a commit). Under TV2
// (Empty at e+1, or at the new producer id after the epoch limit, where kfake
// has forgotten the old one) the read_committed probe at the epoch's first
// offsets decides: committed is accepted; aborted is a definite abort
// (errCommitAborted: the batches are nacked and replayed, the output goes on,
// TestDedupeCommitReportedButAbortedKfakeTV2); anything else goes to the
// in-doubt path.
//
// It also keeps the slot's transaction version honest: the broker showing the
// commit at e means TV0, at e+1 TV2 (a cluster upgraded or downgraded under
// us); later PREPAREs store what was observed.
func (o *output) verifyCommit(ctx context.Context, s *slot, rec txnstate.Record) error {
	cpid, ce, cerr := s.cl.ProducerID(ctx)
	dctx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
	defer cancel()
	obs, derr := o.describe(dctx, s.id)
	for backoff := 50 * time.Millisecond; derr != nil && dctx.Err() == nil; backoff = min(2*backoff, time.Second) {
		// Right after a broker restart the coordinator may still be
		// loading its state.
		select {
		case <-time.After(backoff):
		case <-dctx.Done():
		}
		obs, derr = o.describe(dctx, s.id)
	}
	if derr != nil || !obs.Found {
		// Nothing confirms the commit, and franz-go's nil is not enough:
		// its EndTransaction sends no EndTxn at all when it believes no
		// partition joined the transaction (under TV0 it then returns
		// nil), and an epoch acked on that answer would lose its records
		// to the next InitProducerID. The in-doubt path confirms it (a
		// raw EndTxn(commit) with the same producer id and epoch, then
		// DescribeTransactions) or stops.
		o.m.tally.add("commit_unverified", 1)
		if derr == nil {
			derr = errors.New("transactional id not found")
		}
		return fmt.Errorf("%w: DescribeTransactions could not confirm it: %v", errCommitNotApplied, derr)
	}
	check, tv := txnstate.CheckCommit(rec, cpid, ce, cerr == nil, obs)
	switch check {
	case txnstate.CommitConfirmed:
		o.setTxnVersion(s, rec, tv)
		return nil
	case txnstate.CommitEmpty:
		// kfake only (see above): the probe under TV2, the retry under
		// TV0.
		if tv == txnstate.TV2 {
			out, perr := o.probe(dctx, rec)
			switch out {
			case txnstate.FoundCommitted:
				o.setTxnVersion(s, rec, tv)
				return nil
			case txnstate.FoundAborted:
				o.m.tally.add("commit_aborted", 1)
				o.log.Warnf("kafka_eos: epoch %d on %q: EndTransaction returned success but the broker shows %v and the read_committed probe finds the epoch aborted", rec.Epoch, s.id, obs)
				return fmt.Errorf("%w: the broker shows %v, the read_committed probe finds the epoch aborted", errCommitAborted, obs)
			}
			o.m.tally.add("commit_not_applied", 1)
			o.log.Warnf("kafka_eos: epoch %d on %q: EndTransaction returned success but the broker shows %v and the read_committed probe cannot tell (%v)", rec.Epoch, s.id, obs, perr)
			return fmt.Errorf("%w: the broker shows %v, the read_committed probe cannot tell (%v)", errCommitNotApplied, obs, perr)
		}
		r := rec
		r.TxnVersion = tv
		res, rerr := o.rawEndTxn(dctx, r)
		if res == txnstate.RetryOK {
			o.setTxnVersion(s, rec, tv)
			return nil
		}
		o.m.tally.add("commit_not_applied", 1)
		o.log.Warnf("kafka_eos: epoch %d on %q: EndTransaction returned success but the broker shows %v and a retried commit answers %v", rec.Epoch, s.id, obs, rerr)
		return fmt.Errorf("%w: the broker shows %v, a retried commit answers %v", errCommitNotApplied, obs, rerr)
	case txnstate.CommitNotApplied:
		// Our producer id, and the transaction still open at e, ended
		// without a commit (CompleteAbort, PrepareAbort) or aborted by
		// the coordinator: franz-go's nil did not commit it. Acked, the
		// epoch's positions (dedupe) or source offsets would count as
		// committed and its records be lost. The in-doubt path
		// establishes it (raw EndTxn(commit), DescribeTransactions, the
		// probe at the next start) or aborts it, and its batches are
		// replayed.
		o.m.tally.add("commit_not_applied", 1)
		o.log.Warnf("kafka_eos: epoch %d on %q: EndTransaction returned success but the broker shows %v, not a commit of producer id %d epoch %d", rec.Epoch, s.id, obs, rec.ProducerID, rec.ProducerEpoch)
		return fmt.Errorf("%w: the broker shows %v", errCommitNotApplied, obs)
	}
	// CommitNotOurs: another producer id, or an epoch this EndTxn cannot
	// have left: another producer initialised the id after it. Nothing
	// here says the commit happened (the EndTxn may have been an abort
	// reported as success), so it is not acked: the in-doubt path asks
	// again with the stored producer id and epoch and, if nothing
	// establishes the commit, stops holding the batches.
	o.m.tally.add("commit_not_ours", 1)
	o.log.Warnf("kafka_eos: epoch %d on %q: EndTransaction returned success but the broker shows %v, another producer's state", rec.Epoch, s.id, obs)
	return fmt.Errorf("%w: the broker shows %v, another producer's state", errCommitNotApplied, obs)
}

func (o *output) setTxnVersion(s *slot, rec txnstate.Record, seen txnstate.TxnVersion) {
	if seen != s.tv {
		o.log.Warnf("kafka_eos: %q committed epoch %d under transaction version %d, stored %d; using %d from now on", s.id, rec.Epoch, seen, s.tv, seen)
		s.tv = seen
	}
}

// abortEpoch aborts an epoch before its EndTxn(commit): its batches are
// nacked and every later epoch aborts too. With prepared, ABORTED is written
// (retried) before the slot carries another epoch.
func (o *output) abortEpoch(ctx context.Context, ep *epoch, cause error, prepared bool, rec ...txnstate.Record) {
	if errors.Is(cause, statecache.ErrFenced) {
		// The state cache holds a record of a later owner of the slot:
		// another instance took the transactional_id.
		o.zombie(ep.slot, cause)
		return
	}
	if isAuthErr(cause) {
		o.stop(fmt.Errorf("kafka_eos: %q: %w", ep.slot.id, cause), true)
		return
	}
	if err := o.unknownTopic.observe(cause, time.Now(), o.conf.unknownTopicGrace); err != nil {
		o.stop(err, true)
		return
	}
	s := ep.slot
	actx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
	defer cancel()
	if isFenceErr(cause) && o.fenceKind(actx, ep) == txnstate.FenceZombie {
		o.zombie(s, cause)
		return
	}
	o.poisonAfter(ep.n, cause)
	if s.cl.BufferedProduceRecords() > 0 || ep.failure() != nil {
		// Records of the epoch not written, failing now or failed:
		// franz-go fails a transactional batch once the broker answered
		// an attempt with a definite error, and rewinds the partition's
		// sequence over it, even when an earlier attempt whose answer
		// was lost (the connection closed) had been applied. Under
		// transaction version 0 the abort keeps the producer epoch, and
		// the next transaction on this client would write that sequence
		// again: refused (OUT_OF_ORDER_SEQUENCE_NUMBER, the producer id
		// failed for good) or, with as many records, taken by the broker
		// for a duplicate of the aborted batch and acknowledged without
		// being written. A new client starts a new producer epoch.
		s.broken = true
	}
	if err := s.cl.AbortBufferedRecords(actx); err != nil {
		s.broken = true
	}
	// The EndTxn gets its own budget: an abort of buffered records that
	// waited for all of it would otherwise leave the EndTxn none.
	ectx, ecancel := context.WithTimeout(ctx, o.conf.commitBudget)
	defer ecancel()
	// The producer id and epoch the abort starts from: the epoch's,
	// unless franz-go re-initialised the id since (it does after some
	// errors). EndTransaction loads a dropped id first itself; loaded
	// here, the epoch it leaves is known. A load that failed may have
	// bumped the epoch all the same: then nothing below can tell our bump
	// from another producer's.
	bpid, bepoch, bknown := ep.pid, ep.pepoch, true
	var checked *txnstate.Observation // what the rival check below saw
	var closedErr error               // the client's producer id failed on a first-read close
	if pid, pepoch, perr := s.cl.ProducerID(ectx); perr == nil {
		bpid, bepoch = pid, pepoch
	} else if firstReadClose(perr) {
		// franz-go failed the producer id for good (BeginTransaction
		// would refuse every later epoch) without sending anything: the
		// id is the one it failed, the epoch's unless franz-go
		// re-initialised it under the epoch.
		closedErr = perr
		s.broken = true
		bpid, bepoch = pid, pepoch
	} else if !isFenceErr(perr) {
		bknown = false
	}
	err := s.cl.EndTransaction(ectx, kgo.TryAbort)
	if err != nil {
		o.log.Warnf("kafka_eos: aborting epoch %d on %q: %v", ep.n, s.id, err)
	}
	if !isFenceErr(err) && bknown && (err != nil || s.broken) {
		// The abort's outcome is unknown to the client, which may have
		// been fenced meanwhile without learning it (or the slot gets a
		// new client below, and the client's abort may have sent
		// nothing: franz-go ends nothing when no partition joined the
		// transaction, so it learnt nothing); asked before anything
		// below can send an InitProducerID.
		why := err
		if why == nil {
			why = closedErr
		}
		if why == nil {
			why = cause
		}
		var rerr error
		if checked, rerr = o.rivalAfterAbort(ctx, ep, bpid, bepoch, why); rerr != nil {
			o.zombie(s, rerr)
			return
		}
	}
	if err != nil || s.broken {
		if !isFenceErr(err) {
			// The slot is re-initialised below: if the client's
			// producer id was fenced (the abort timed out, or
			// franz-go ended nothing), that would take the
			// transactional id back from the instance that fenced
			// us. ProducerID sends nothing for an id failed with
			// an error; it returns the failure.
			if _, _, perr := s.cl.ProducerID(ectx); isFenceErr(perr) {
				err = perr
			}
		}
		if isFenceErr(err) {
			if o.fenceKind(ectx, ep) == txnstate.FenceZombie {
				o.zombie(s, err)
				return
			}
		}
		s.broken = true
	}
	ep.advance(txnstate.PhaseAborted)
	if prepared && len(rec) > 0 {
		// ABORTED is durable before the nack: if the abort above did
		// not reach the broker and we crash now, a PREPARED record would
		// let a later start resume-commit batches already nacked.
		wasBroken := s.broken
		if !o.writeRetry(ctx, s.n, rec[0].WithState(txnstate.Aborted, cause.Error())) {
			return
		}
		if !wasBroken && s.broken && checked == nil && bknown && !isFenceErr(err) {
			// The ABORTED write failed before it landed, and the slot
			// gets a new client below (writeRetry): the rival check
			// runs first, as above.
			var rerr error
			if checked, rerr = o.rivalAfterAbort(ctx, ep, bpid, bepoch, cause); rerr != nil {
				o.zombie(s, rerr)
				return
			}
		}
	}
	o.m.epochAborted()
	o.log.Warnf("kafka_eos: epoch %d aborted, its %d batches nacked: %v", ep.n, len(ep.batches), cause)
	o.mu.Lock()
	o.mode.nacked(ep)
	o.finishLocked(ep, &EpochError{Epoch: ep.n, Cause: cause})
	o.mu.Unlock()
	if closedErr != nil && o.firstReadCloseRepeated(s, closedErr) {
		o.releaseSlot(s)
		return
	}
	o.rewarm(ctx, s, checked)
	o.releaseChecked(ep, false, recordOf(rec)) // hanging.go
}

// rivalAfterAbort asks the broker, after an abort from producer id pid, epoch
// e whose EndTxn got no answer (endErr: a timeout, a transport error, a
// retriable error that outlived its retries) or that the client could not
// tell the outcome of (endErr: the first-read close its producer id failed
// on, which may have hidden a fence), whether another producer
// initialised the slot's transactional id meanwhile. The slot is re-initialised next (a new client, a fresh
// InitProducerID), which always succeeds and would take the id back from that
// producer, fencing a live instance. It returns the error to stop with when
// the broker shows another producer (txnstate.ClassifyAbort); otherwise what
// the broker showed (nil if DescribeTransactions failed), for rewarm's check.
//
// Where the broker's state cannot tell another producer from our own abort
// (under transaction version 2 both leave our producer id at e+1 until the
// other producer's retried InitProducerID bumps it again; a new producer id
// where the epoch can have overflowed) or DescribeTransactions fails, the slot
// is re-initialised as before: stopping there would stop every pipeline whose
// abort timed out on a slow broker, and our own timeout must abort and go on.
func (o *output) rivalAfterAbort(ctx context.Context, ep *epoch, pid int64, e int16, endErr error) (*txnstate.Observation, error) {
	return o.rivalAfterEnd(ctx, ep, pid, e, o.mayHaveTimedOut(ep),
		fmt.Sprintf("the abort of epoch %d (producer id %d, epoch %d) left its outcome unknown to the client (%v)", ep.n, pid, e, endErr))
}

// rivalAfterCommit is rivalAfterAbort for a slot whose epoch committed (rec)
// on a client that is spent (the slot gets a new one next): an instance
// frozen since the commit (in the retried COMMITTED write, say) may have been
// fenced by another that took the transactional id meanwhile, and the new
// client's InitProducerID would take it back. A commit leaves the producer id
// at the epoch an abort leaves (e under transaction version 0, e+1 under 2);
// a committed transaction is not aborted by the coordinator's timeout.
func (o *output) rivalAfterCommit(ctx context.Context, ep *epoch, rec txnstate.Record) (*txnstate.Observation, error) {
	return o.rivalAfterEnd(ctx, ep, rec.ProducerID, rec.ProducerEpoch, false,
		fmt.Sprintf("epoch %d committed (producer id %d, epoch %d) on a client that is replaced", ep.n, rec.ProducerID, rec.ProducerEpoch))
}

// rivalAfterEnd is the check of rivalAfterAbort and rivalAfterCommit: what
// says how the transaction of producer id pid, epoch e ended; timedOut whether
// the coordinator can have aborted it for its timeout.
func (o *output) rivalAfterEnd(ctx context.Context, ep *epoch, pid int64, e int16, timedOut bool, what string) (*txnstate.Observation, error) {
	s := ep.slot
	dctx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
	defer cancel()
	obs, err := o.describe(dctx, s.id)
	if err != nil {
		o.log.Warnf("kafka_eos: describing %q after %s, re-initialising it: %v", s.id, what, err)
		return nil, nil
	}
	switch txnstate.ClassifyAbort(pid, e, s.tv, obs, timedOut) {
	case txnstate.AbortRival:
		return nil, fmt.Errorf("%s and the broker shows %v: another producer initialised the transactional id", what, obs)
	case txnstate.AbortUnclear:
		o.log.Warnf("kafka_eos: %s and the broker shows %v on %q, which does not tell another producer from our own: re-initialising it", what, obs, s.id)
	}
	return &obs, nil
}

// rewarm replaces a broken slot's client with a fresh, initialised one.
//
// checked is what DescribeTransactions showed when the rival check before it
// found no other producer (nil when none ran or it failed). Another producer
// can still initialise the id between that check and the new client's
// InitProducerID, which then takes the id from it; the epoch the new client
// got shows it (txnstate.ReinitAfterRival, when the client sent one
// InitProducerID). The output then stops as a zombie with the new client
// unused: it cannot give the id back, but it writes nothing over the other
// instance and leaves no transaction of its own open.
func (o *output) rewarm(ctx context.Context, s *slot, checked *txnstate.Observation) {
	if !s.broken {
		return
	}
	backoff := 100 * time.Millisecond
	var closing time.Time // since when every attempt met a first-read close
	for {
		cl, in, err := o.initSlotClient(ctx, s.id)
		if err == nil && checked != nil && in.sent == 1 && txnstate.ReinitAfterRival(*checked, in.pid, in.epoch) {
			cl.Close()
			o.zombie(s, fmt.Errorf("re-initialising %q: the broker showed %v before its InitProducerID and producer id %d epoch %d after it: another producer initialised the transactional id in between", s.id, *checked, in.pid, in.epoch))
			return
		}
		if err == nil {
			s.cl.Close()
			o.mu.Lock()
			s.cl, s.broken = cl, false
			o.mu.Unlock()
			return
		}
		if isAuthErr(err) || isFenceErr(err) {
			o.stop(err, true)
			return
		}
		// A failed attempt may have bumped the epoch all the same: the
		// next one's cannot be told from another producer's.
		checked = nil
		if !firstReadClose(err) {
			closing = time.Time{}
		} else if closing.IsZero() {
			closing = time.Now()
		} else if time.Since(closing) >= firstReadCloseFor {
			o.stop(fmt.Errorf("kafka_eos: re-initialising %q: the broker closed every new connection at its first request for %v: %w", s.id, firstReadCloseFor, err), true)
			return
		}
		o.log.Warnf("kafka_eos: re-initialising %q: %v", s.id, err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// firstReadCloseLimit is how many epochs in a row may abort on a connection
// the broker closed at its first request before the output stops.
const firstReadCloseLimit = 5

// firstReadCloseFor is how long a slot's re-initialisation may fail on such
// closes, every attempt, before the output stops (a variable for tests).
var firstReadCloseFor = 30 * time.Second

// firstReadClose says whether err is franz-go's kgo.ErrFirstReadEOF: the
// broker closed a connection at the first request on it (after ApiVersions),
// which franz-go does not retry and, under AddPartitionsToTxn, fails the
// client's producer id with for good ("is SASL missing?"). A connection cut
// for any other reason at that moment looks the same: it is transient, and
// the slot gets a new client. Only a close that repeats (firstReadCloseLimit)
// is taken for the misconfiguration franz-go suspects.
func firstReadClose(err error) bool {
	var fre *kgo.ErrFirstReadEOF
	return errors.As(err, &fre)
}

// firstReadCloseRepeated counts one more first-read close (err) and, at
// firstReadCloseLimit in a row without a commit between, stops the output
// (fatal) and returns true.
func (o *output) firstReadCloseRepeated(s *slot, err error) bool {
	n := o.firstReadCloses.Add(1)
	if n < firstReadCloseLimit {
		o.log.Warnf("kafka_eos: %q: the broker closed a new connection at its first request (%d in a row, the output stops at %d); replacing the slot's client: %v", s.id, n, firstReadCloseLimit, err)
		return false
	}
	o.stop(fmt.Errorf("kafka_eos: %q: the broker closed a new connection at its first request %d times in a row (epochs aborted, clients replaced, nothing committed between): %w", s.id, n, err), true)
	return true
}

// fenceKind asks DescribeTransactions whether a fence of ep was another
// producer's.
func (o *output) fenceKind(ctx context.Context, ep *epoch) txnstate.FenceKind {
	s := ep.slot
	obs, err := o.describe(ctx, s.id)
	if err != nil {
		o.log.Warnf("kafka_eos: describing %q after a fence: %v", s.id, err)
		return txnstate.FenceZombie
	}
	return txnstate.ClassifyFence(ep.pid, ep.pepoch, s.tv, obs, o.mayHaveTimedOut(ep))
}

// mayHaveTimedOut says whether the coordinator can have aborted ep for its
// transaction timeout: only once ep has been open transaction_timeout (the
// coordinator counts from the first partition added, after ep opened).
func (o *output) mayHaveTimedOut(ep *epoch) bool {
	return time.Since(ep.opened) >= o.conf.txnTimeout
}

func (o *output) zombie(s *slot, err error) {
	o.m.fence()
	o.stop(&FencedError{TransactionalID: s.id, Err: err}, true)
}

// handleFence handles a definite refusal of EndTxn(commit) (PRODUCER_FENCED,
// INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ...): the commit was not
// applied. Another producer's fence is fatal; our own transaction timing out
// aborts the epoch like any failure before the commit. It returns true only
// if the broker shows the epoch committed after all.
func (o *output) handleFence(ctx context.Context, ep *epoch, rec txnstate.Record, err error) bool {
	s := ep.slot
	obs, derr := o.describe(ctx, s.id)
	if derr == nil && txnstate.Decide(rec, obs) == txnstate.FoundCommitted {
		return true
	}
	if derr != nil || txnstate.ClassifyFence(rec.ProducerID, rec.ProducerEpoch, rec.TxnVersion, obs, o.mayHaveTimedOut(ep)) == txnstate.FenceZombie {
		o.mu.Lock()
		ep.ending = false
		o.mu.Unlock()
		o.zombie(s, err)
		return false
	}
	o.log.Warnf("kafka_eos: epoch %d on %q was aborted by the coordinator (%v, %v): not a zombie; aborting and re-initialising", ep.n, s.id, err, obs)
	s.broken = true
	o.mu.Lock()
	ep.ending = false
	o.mu.Unlock()
	o.abortEpoch(ctx, ep, fmt.Errorf("transaction aborted by the coordinator (timed out?): %w", err), true, rec)
	return false
}

// resolveInDoubt handles an unknown EndTxn(commit) outcome (timeout,
// transport error, UNKNOWN_SERVER_ERROR, a cancelled context): franz-go
// refuses to retry a commit and its TryAbort would re-run InitProducerID, yet
// the commit may have happened. So: a raw EndTxn(commit) with the same
// producer id and epoch, pinned to the stored transaction version (NONE means
// committed); then DescribeTransactions; if still unknown, stop with a clear
// error and let the next start resolve it. It returns true if committed.
func (o *output) resolveInDoubt(ctx context.Context, ep *epoch, rec txnstate.Record, cause error) bool {
	ep.advance(txnstate.PhaseInDoubt)
	s := ep.slot
	s.broken = true // the client failed its producer id; never reuse it
	o.log.Warnf("kafka_eos: EndTxn(commit) of epoch %d on %q: outcome unknown (%v); retrying with the same producer id and epoch", ep.n, s.id, cause)
	rctx, cancel := context.WithTimeout(ctx, o.conf.commitBudget)
	defer cancel()
	res, rerr := o.rawEndTxn(rctx, rec)
	out := txnstate.RetryOutcome(res)
	if out == txnstate.Unknown {
		if obs, err := o.describe(rctx, s.id); err == nil {
			out = txnstate.Decide(rec, obs)
			o.log.Infof("kafka_eos: epoch %d on %q: broker says %v: %v", ep.n, s.id, obs, out)
		}
	}
	switch out {
	case txnstate.FoundCommitted:
		o.m.resolved(outcomeResumed)
		return true
	case txnstate.FoundAborted:
		o.m.resolved(outcomeFoundAborted)
		o.mu.Lock()
		ep.ending = false
		o.mu.Unlock()
		o.abortEpoch(ctx, ep, fmt.Errorf("commit found aborted after an unknown outcome: %w", cause), true, rec)
		return false
	}
	o.stopInDoubt(ep, rec, fmt.Errorf("end transaction: %w; retry: %v", cause, rerr))
	return false
}

// stopInDoubt stops the pipeline, holding the epoch's batches (never acked,
// never nacked before Close).
func (o *output) stopInDoubt(ep *epoch, rec txnstate.Record, err error) {
	ide := &InDoubtError{TransactionalID: rec.TransactionalID, Epoch: rec.Epoch, ProducerID: rec.ProducerID, ProducerEpoch: rec.ProducerEpoch, Detail: err.Error()}
	o.mu.Lock()
	defer o.mu.Unlock()
	ep.held = true
	ep.ending = false
	ferr := o.stopLocked(fmt.Errorf("%w", ide), true)
	o.finishLocked(ep, ferr)
}

var errCrash = errors.New("kafka_eos: test crash")

// errEpochDeadline aborts an epoch locally before the coordinator's
// transaction timeout would (transaction_timeout minus a 10% margin after the
// epoch opened): an abort we choose is cheaper than a fence we must diagnose.
var errEpochDeadline = errors.New("epoch reached transaction_timeout minus margin before its commit")
