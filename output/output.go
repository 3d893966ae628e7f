// Package output is the kafka_eos Benthos output: Kafka transactions
// ("epochs") spanning whole batches, on a pool of pre-warmed transactional
// producers, with crash recovery from a state cache. The protocol is the one
// of shared/design/eos-output.md; txnstate holds its pure decisions and this
// package adapts them to Benthos and franz-go.
//
// Files: spec.go and config.go (the YAML surface), output.go (the Benthos
// methods, the write path and the epoch boundaries), write.go (a batch's
// records, the messages that cannot be written, what WriteBatch returns),
// mode.go (the interface behind which the modes keep their rules; plain
// mode), k2k.go (Kafka-to-Kafka mode), dedupe.go (dedupe mode; its decisions
// are txnstate.DedupeState), slot.go (the producer pool), epoch.go (one
// transaction), commit.go (the commit sequence and its failure paths),
// recovery.go (recovery at Connect), probe.go (the raw requests:
// DescribeTransactions, the Fetch probe, the pinned EndTxn), statecache.go
// (the cache key layout), metrics.go, errors.go.
package output

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/statecache"
	"github.com/connect-eos/connect-eos/txnstate"
)

type output struct {
	conf *config
	// unknownTopic bounds how long epochs may abort on a missing topic.
	unknownTopic unknownTopicClock
	res          *service.Resources
	log          *service.Logger
	m            *metrics
	store        *stateStore

	// firstReadCloses counts the epochs aborted in a row on a connection
	// the broker closed at its first request (firstReadClose); a commit
	// resets it.
	firstReadCloses atomic.Int32

	// clientOpts are appended to every client's options (tests: a logger,
	// kfake versions).
	clientOpts []kgo.Opt
	// hooks, if set, are called at each step of the commit sequence (tests
	// inject crashes there).
	hooks *testHooks
	// endTxn ends a slot's transaction: (*kgo.Client).EndTransaction, or a
	// test double that loses the answer.
	endTxn func(*kgo.Client, context.Context, kgo.TransactionEndTry) error

	// arrowDec decodes Arrow IPC messages (input_format); safe for
	// concurrent use.
	arrowDec *kafkaarrow.Decoder

	admin     *kgo.Client // non-transactional: kadm and raw requests
	clusterTV txnstate.TxnVersion
	committer *committer
	// mode is plainMode, k2kMode or dedupeMode: every rule that differs
	// between the modes.
	mode mode
	// poison remembers the messages reported as unwritable.
	poison  *poisons
	hanging *hangingChecker // hanging.go
	// k2k is the Kafka-to-Kafka state (consumer_group set), nil otherwise.
	// Mirror mode uses it too.
	k2k *k2k
	// mirror is the mirror mode's state, nil otherwise.
	mirror *mirror
	// takeover is what was registered as the group's CommitTakeover (the
	// output, or in mirror mode a PositionKeeper around it).
	takeover handover.CommitTakeover
	// dd holds the dedupe positions (dedupe mode; guarded by mu), loaded
	// at Connect after recovery.
	dd *txnstate.DedupeState
	// readyCh is closed once the first Connect finished its recovery (the
	// CommitTakeover's Ready).
	readyCh   chan struct{}
	readyOnce sync.Once
	runCtx    context.Context // cancelled at Close
	runCancel context.CancelFunc
	closedCh  chan struct{}

	mu        sync.Mutex
	connected bool
	slots     []*slot
	nextEpoch uint64
	// startFence is the highest owner token of the slots Connect
	// initialised, set before the mode's connect: the token of what that
	// writes for the whole instance (dedupe: the committed positions).
	startFence uint64
	open       *epoch   // the epoch accepting batches, nil if none
	live       []*epoch // every unfinished epoch, in epoch order
	inFlight   int      // batches in live epochs
	// admitWaiting counts WriteBatch calls waiting in admitLocked for
	// their predecessor (Kafka-to-Kafka).
	admitWaiting int
	// turns holds a token per WriteBatch call that may write
	// (max_in_flight of them), in Kafka-to-Kafka mode only (not mirror),
	// where Benthos may call WriteBatch spareCalls more times at once: a
	// batch waiting for its predecessor gives its token up (see turn).
	turns chan struct{}
	// calls is how many WriteBatch calls Benthos may make at once (what
	// the output tells it its max_in_flight is).
	calls int
	// unadmitted counts the WriteBatch calls (Kafka-to-Kafka) that have
	// not joined an epoch nor been refused yet: those waiting for their
	// predecessor (admitWaiting), and the others, which may hold the
	// batch one of those waits for (see admitLocked).
	unadmitted atomic.Int64
	stopErr    error // set once the output stops (fatal, crash, close)
	closing    bool
	// inDoubtAttempts counts Connect attempts that found an in-doubt epoch
	// nothing identifies.
	inDoubtAttempts int
}

// testOutputHook, set only in the test binary's child processes (a real
// process to stop, continue and kill), is called with every output built.
var testOutputHook func(*output)

// inDoubtAttempts is how many Connect attempts recovery waits for an unknown
// in-doubt epoch to become identifiable before it stops the pipeline.
const inDoubtAttempts = 5

func newOutputFromParsed(conf *service.ParsedConfig, res *service.Resources) (*output, error) {
	c, err := configFromParsed(conf, res)
	if err != nil {
		return nil, err
	}
	c.conn.LogWarnings(res.Logger())
	res.Logger().Info(c.modeLine())
	o := &output{
		conf:     c,
		res:      res,
		log:      res.Logger(),
		m:        newMetrics(res.Metrics()),
		store:    &stateStore{res: res, cache: c.stateCache, prefix: c.transactionalID},
		closedCh: make(chan struct{}),
		readyCh:  make(chan struct{}),
		endTxn:   (*kgo.Client).EndTransaction,
		arrowDec: kafkaarrow.NewDecoder(),
	}
	o.poison = newPoisons()
	if testOutputHook != nil {
		testOutputHook(o)
	}
	switch {
	case c.mirror != nil:
		o.k2k = newK2K(c.group)
		o.k2k.stampless = true
		o.mirror = newMirror(o, c.mirror, res)
		o.mode = &mirrorMode{k2kMode: k2kMode{o: o, k: o.k2k}, m: o.mirror}
		o.takeover = mirrorKeeper{o}
		if err := handover.RegisterCommitTakeover(res, c.group, o.takeover); err != nil {
			return nil, fieldErr(keoFieldConsumerGroup, err)
		}
	case c.group != "":
		// Benthos constructs every component before any connects: the
		// kafka_native input of this group finds us at its Connect.
		o.k2k = newK2K(c.group)
		o.mode = &k2kMode{o: o, k: o.k2k}
		o.takeover = o
		if err := handover.RegisterCommitTakeover(res, c.group, o); err != nil {
			return nil, fieldErr(keoFieldConsumerGroup, err)
		}
	case c.dedupe != nil:
		o.mode = &dedupeMode{o: o}
	default:
		o.mode = plainMode{}
	}
	o.calls = c.maxInFlight
	if o.k2k != nil && o.mirror == nil {
		o.turns = make(chan struct{}, c.maxInFlight)
		o.calls += spareCalls
	}
	return o, nil
}

// Connect recovers in-doubt epochs from the state cache, then initialises
// every slot (pre-warming the pool), aborts lingering transactions of
// orphaned slots, and reads the state cache again for what a previous owner
// still running committed before that fence (afterFence). Nothing is
// produced before it returns nil.
func (o *output) Connect(ctx context.Context) error {
	ctx, cancel := o.startContext(ctx)
	defer cancel()
	o.mu.Lock()
	err := o.classifyConnectErr(o.connectLocked(ctx))
	o.mu.Unlock()
	if err != nil {
		return err
	}
	if a, ok := o.mode.(afterConnecter); ok {
		// Epochs run now; the input may not start before this is done
		// (Ready). A failure is retried by the next Connect.
		if err := a.afterConnect(ctx); err != nil {
			return o.classifyConnectErr(err)
		}
	}
	o.readyOnce.Do(func() {
		close(o.readyCh)
		o.probeFencing(ctx)
	})
	return nil
}

// checkSlotsCurrent stops the start as fenced if another producer initialised
// one of the pool's transactional ids after this start did. An instance that
// stalled during its start, between its slots' InitProducerIDs, while a later
// instance ran, would otherwise go on with a mix: slots that instance fenced
// and slots initialised again after it. The first fence would stop it with
// the transactions of the others open until their timeout. A slot whose check
// fails (DescribeTransactions refused or unanswered) is not held against the
// start; the check is one DescribeTransactions per slot.
func (o *output) checkSlotsCurrent(ctx context.Context, slots []*slot) error {
	for _, s := range slots {
		pid, e, err := s.cl.ProducerID(ctx)
		if err != nil {
			return fmt.Errorf("transactional id %q: %w", s.id, err)
		}
		obs, err := o.describe(ctx, s.id)
		if err != nil {
			o.log.Warnf("kafka_eos: checking that no other producer initialised %q since this start did: %v", s.id, err)
			continue
		}
		if txnstate.InitSuperseded(obs, pid, e) {
			o.m.fence()
			return fatal.Raise(&FencedError{TransactionalID: s.id, Err: fmt.Errorf("this start initialised it at producer id %d epoch %d, and the broker shows %v: another producer initialised it since", pid, e, obs)})
		}
	}
	return nil
}

// startContext is the context a start (Connect) runs under: ctx, except that
// its cancellation leaves the start one commit_timeout to finish. A
// bounded input with nothing left to read ends the stream as it starts, and
// Benthos, stopping, cancels the context it hands Connect; a start cut short
// there would leave the epoch its predecessor left in doubt PREPARED and its
// transaction open until the transaction timeout (read_committed readers of
// its partitions held back), while the run exits 0. Nothing of ctx is kept
// past Connect.
func (o *output) startContext(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(o.conf.commitBudget)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-sctx.Done():
		}
	})
	return sctx, func() {
		stop()
		cancel()
	}
}

// afterConnecter is a mode with work to do once the output runs, before it is
// ready (the input starts only then).
type afterConnecter interface {
	afterConnect(ctx context.Context) error
}

func (o *output) connectLocked(ctx context.Context) error {
	if o.connected {
		return nil
	}
	if o.stopErr != nil {
		return o.stopErr
	}
	if o.admin == nil {
		admin, err := kgo.NewClient(append(o.conf.conn.Opts(), o.clientOpts...)...)
		if err != nil {
			return err
		}
		o.admin = admin
	}
	tv, err := o.clusterTxnVersion(ctx)
	if err != nil {
		return err
	}
	o.clusterTV = tv
	rec, err := o.recover(ctx)
	if err != nil {
		var ide *InDoubtError
		if errors.As(err, &ide) && !isAuthErr(err) {
			// UNKNOWN never defaults to aborted. Wait (Benthos retries
			// Connect with a backoff: the coordinator may still be
			// writing markers, a broker may be down), then stop with an
			// error an operator can act on (recovery_override). A
			// check the broker refused (a missing ACL) fails every
			// attempt alike: classifyConnectErr stops at once.
			o.inDoubtAttempts++
			o.log.Errorf("%v (attempt %d of %d)", err, o.inDoubtAttempts, inDoubtAttempts)
			if o.inDoubtAttempts >= inDoubtAttempts {
				return fatal.Raise(err)
			}
		}
		return err
	}
	o.inDoubtAttempts = 0
	if o.hooks != nil && o.hooks.afterRecover != nil {
		o.hooks.afterRecover()
	}
	slots := make([]*slot, o.conf.poolSize)
	for n := range slots {
		id := txnstate.SlotID(o.conf.transactionalID, n)
		cl, err := o.newSlotClient(ctx, id)
		if err != nil {
			for _, s := range slots[:n] {
				s.cl.Close()
			}
			return err
		}
		slots[n] = &slot{n: n, id: id, cl: cl, tv: tv, freeCh: make(chan struct{})}
		if err := o.initFence(ctx, slots[n]); err != nil {
			for _, s := range slots[:n+1] {
				s.cl.Close()
			}
			return err
		}
	}
	if err := o.abortOrphans(ctx, rec); err != nil {
		for _, s := range slots {
			s.cl.Close()
		}
		return err
	}
	if o.hooks != nil && o.hooks.afterSlots != nil {
		o.hooks.afterSlots()
	}
	if err := o.checkSlotsCurrent(ctx, slots); err != nil {
		for _, s := range slots {
			s.cl.Close()
		}
		return err
	}
	if err := o.afterFence(ctx, &rec, slots); err != nil {
		for _, s := range slots {
			s.cl.Close()
		}
		return err
	}
	o.startFence = 0
	for _, s := range slots {
		o.startFence = max(o.startFence, s.lastFence)
	}
	// After recovery (a resumed or found-committed epoch moved the
	// source offsets or the dedupe positions) and the slots'
	// InitProducerID (which aborted what was still open).
	if err := o.mode.connect(ctx); err != nil {
		for _, s := range slots {
			s.cl.Close()
		}
		return err
	}
	o.slots = slots
	o.nextEpoch = rec.nextEpoch
	o.runCtx, o.runCancel = context.WithCancel(context.Background())
	o.committer = newCommitter(o)
	go o.committer.run()
	o.startHanging(ctx)
	o.connected = true
	o.log.Infof("kafka_eos: %d slots of %q ready (transaction version %d), next epoch %d", len(slots), o.conf.transactionalID, tv, o.nextEpoch)
	return nil
}

// classifyConnectErr makes authentication and authorization failures fatal:
// Benthos would retry Connect forever.
func (o *output) classifyConnectErr(err error) error {
	var fe *fatal.Error
	if errors.Is(err, statecache.ErrFenced) && !errors.As(err, &fe) {
		// A later instance's records are in the state cache: it owns
		// the transactional_id.
		return fatal.Raise(&FencedError{TransactionalID: o.conf.transactionalID, Err: err})
	}
	if isAuthErr(err) && !errors.As(err, &fe) {
		if errors.As(err, new(*InDoubtError)) {
			return fatal.Raise(err) // it names the slot's transactional id
		}
		return fatal.Raise(fmt.Errorf("kafka_eos %q: %w", o.conf.transactionalID, err))
	}
	return err
}

// WriteBatch writes the batch in the open epoch (opening one on the next slot
// if needed) and returns once the epoch committed (nil) or aborted (the batch
// is nacked). A batch is never split across epochs. A message that can never
// be written (ErrCannotWrite) fails alone; the mode decides what else is not
// written with it (see mode).
func (o *output) WriteBatch(ctx context.Context, batch service.MessageBatch) (err error) {
	if err := o.stopIfSplitDrained(); err != nil {
		return err
	}
	if o.turns != nil {
		o.unadmitted.Add(1)
	}
	t, err := o.takeTurn(ctx) // at most max_in_flight calls past here (Kafka-to-Kafka)
	if err != nil {
		o.unadmitted.Add(-1)
		return err
	}
	defer t.give()
	w := o.toRecords(batch) // one record per message or Arrow row; the unwritable fail
	defer w.release()
	defer holdInInput(w)() // the records count in kafka_native's budget until the call returns
	w.turn = t
	o.skipWritten(w) // replays of messages written beside a failed one
	o.mode.read(w)   // spans, or keys and positions; what is held back
	if o.k2k != nil {
		defer func() {
			o.k2k.handDone(w.handed, err)
			_ = o.stopIfSplitDrained()
		}()
	}
	ep, err := o.admit(ctx, w, o.sentBack(w)) // join an epoch by the mode's rules
	if o.turns != nil {
		o.unadmitted.Add(-1)
	}
	if err != nil || ep == nil {
		return o.result(w, err) // nacked, or nothing to write
	}
	o.produce(ep, w)                     // outside o.mu, on the epoch's slot
	return o.result(w, o.await(ctx, ep)) // the epoch's outcome
}

// spareCalls is how many WriteBatch calls Benthos may make at once beyond
// max_in_flight in Kafka-to-Kafka mode (not mirror mode). A batch ahead of its
// partition's run waits there for the batch before it, which may still be on
// its way from another pipeline thread; were the waiting batch to hold one of
// Benthos' max_in_flight calls, the one before it could not reach the output
// until the waiting one was nacked (with max_in_flight 1 always: a copy with
// two pipeline threads crawled a second or more per batch). So only
// max_in_flight calls hold a turn and write (o.turns), and a waiting batch
// gives its turn up; the spare calls let the batches it waits for in. They
// cost memory only: a call waiting for a turn holds its batch, as Benthos'
// pipeline would.
const spareCalls = 8

// turn is a WriteBatch call's hold of one of o.turns: nil where the output
// has none (every call writes, Benthos bounds them).
type turn struct {
	o    *output
	held bool
}

// takeTurn waits for a turn to write. Once the output is closed it returns
// one not held: admit then finds the output stopped.
func (o *output) takeTurn(ctx context.Context) (*turn, error) {
	if o.turns == nil {
		return nil, nil
	}
	t := &turn{o: o}
	return t, t.take(ctx)
}

// take waits for a turn, unless t already holds one.
func (t *turn) take(ctx context.Context) error {
	if t == nil || t.held {
		return nil
	}
	select {
	case t.o.turns <- struct{}{}:
		t.held = true
	case <-ctx.Done():
		return ctx.Err()
	case <-t.o.closedCh:
	}
	return nil
}

// give gives the turn up, if t holds one.
func (t *turn) give() {
	if t == nil || !t.held {
		return
	}
	t.held = false
	<-t.o.turns
}

// admit joins w to an epoch under the mode's rules and adds it there. It
// returns nil and no error when nothing of w is to be written (every message
// failed, a batch of replays, a batch of a partition given up). With
// sentBack (see output.sentBack) it stops the output instead.
func (o *output) admit(ctx context.Context, w *write, sentBack error) (*epoch, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if sentBack != nil {
		o.log.Errorf("%v", sentBack)
		return nil, o.stopLocked(sentBack, true)
	}
	if o.stopErr != nil {
		// Stopped: nothing is acked any more, not even a batch of
		// replays (its positions may be a stopped epoch's).
		return nil, o.stopErr
	}
	if len(w.recs) == 0 {
		o.mode.unjoined(w)
		return nil, nil // nothing to write: an empty epoch is never committed
	}
	skip, err := o.mode.skip(w)
	if err == nil && skip {
		o.mode.unjoined(w)
		return nil, nil
	}
	var ep *epoch
	if err == nil {
		ep, err = o.joinLocked(ctx)
	}
	if err == nil {
		ep, err = o.mode.admit(ctx, w, ep)
	}
	if err != nil {
		o.mode.refused(w, err)
		return nil, err
	}
	if ep == nil || len(w.recs) == 0 {
		return nil, nil
	}
	ref := &batchRef{batch: w.batch, recs: w.recs, msgOf: w.msgOf, spans: w.spans, kps: w.keep}
	w.ref = ref
	size := 0
	for _, r := range w.recs {
		size += recordSize(r)
	}
	// Batches produce in the order they join (I8): after the batch that
	// joined before this one, and the first batch of an epoch after every
	// record of the epochs before it was acknowledged.
	ref.after, ref.handedCh = ep.lastHanded, make(chan struct{})
	ep.lastHanded = ref.handedCh
	if ref.after == nil {
		for _, l := range o.live {
			if l.n < ep.n {
				ref.before = append(ref.before, l.acked)
			}
		}
	}
	ep.mu.Lock()
	ep.handing++
	ep.mu.Unlock()
	ep.batches = append(ep.batches, ref)
	ep.records += len(w.recs)
	ep.bytes += size
	o.inFlight++
	ep.producing.Add(1)
	if o.shouldSealLocked(ep) {
		o.sealLocked(ep)
	}
	return ep, nil
}

// produce hands w's records to the epoch's slot client. Records are produced
// on the output's run context, not the caller's: they belong to the epoch,
// which other batches share.
func (o *output) produce(ep *epoch, w *write) {
	ref := w.ref
	if o.hooks != nil && o.hooks.beforeProduce != nil {
		o.hooks.beforeProduce(ep.n, w.batch)
	}
	defer func() {
		close(ref.handedCh)
		ep.handed(0, true)
		ep.producing.Done()
	}()
	// In join order, and after the earlier epochs' records are
	// acknowledged (I8). Not abandoned for the caller's context: the batch
	// is the epoch's; only the epoch ending (aborted, stopped) or Close
	// make producing pointless.
	for _, ch := range append([]chan struct{}{ref.after}, ref.before...) {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ep.done:
			return
		case <-o.closedCh:
			return
		}
	}
	ep.handed(len(w.recs), false)
	// One reading of the clock for the batch: franz-go would read it for
	// every record without a timestamp (tens of ns each, a few percent of
	// the CPU per record of a 100 B produce). The batch joined its epoch
	// before this, so no record's delivery timeout, which franz-go counts
	// from the timestamp, ends before the epoch's own deadline.
	now := time.Now()
	if o.hooks != nil && o.hooks.handOverTime != nil {
		now = o.hooks.handOverTime()
	}
	size := 0
	promise := ep.promise(ref)
	for _, r := range w.recs {
		if r.Timestamp.IsZero() {
			r.Timestamp = now
		}
		size += recordSize(r)
		ep.slot.cl.Produce(o.runCtx, r, promise)
	}
	o.m.records.Incr(int64(len(w.recs)))
	o.m.bytes.Incr(int64(size))
	o.m.buffered.Set(o.bufferedBytes())
}

// await waits for ep's outcome: nil once it committed, its abort, or the
// output's stop. An in-doubt epoch's batches are never nacked nor acked: the
// wait lasts until Close.
func (o *output) await(ctx context.Context, ep *epoch) error {
	select {
	case <-ep.done:
	case <-ctx.Done():
		// Benthos gave up on the batch (shutdown). It may still commit;
		// a nack then only means a replay (at-least-once), never a loss.
		return ctx.Err()
	}
	if ep.held {
		select {
		case <-o.closedCh:
		case <-ctx.Done():
		}
	}
	return ep.result
}

// joinLocked returns the open epoch, opening one on the next epoch's slot if
// there is none. If that slot still carries an earlier epoch it waits (the
// epoch-boundary stall, measured): with a pool of 2 that happens only when
// epoch N+1 fills up before N committed.
func (o *output) joinLocked(ctx context.Context) (*epoch, error) {
	var stallStart time.Time
	for {
		if o.stopErr != nil {
			return nil, o.stopErr
		}
		if !o.connected {
			return nil, service.ErrNotConnected
		}
		if o.open != nil {
			return o.open, nil
		}
		s := o.slots[txnstate.SlotFor(o.nextEpoch, len(o.slots))]
		if s.busy {
			if stallStart.IsZero() {
				stallStart = time.Now()
			}
			ch := s.freeCh
			o.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				o.mu.Lock()
				return nil, ctx.Err()
			case <-o.closedCh:
			}
			o.mu.Lock()
			continue
		}
		if !stallStart.IsZero() {
			o.m.stallTiming(since(stallStart))
		} else {
			o.m.stallTiming(0)
		}
		if err := s.cl.BeginTransaction(); err != nil {
			return nil, o.stopLocked(fmt.Errorf("kafka_eos: begin transaction on %q: %w", s.id, err), true)
		}
		// Cached in the client after InitProducerID: no request, unless
		// franz-go dropped the producer id after an error and loads it
		// again. That runs under o.mu, so it is bounded by the commit
		// budget on the output's own context (the caller's may be
		// Background: CommitOffsets' periodic hand-over); a failure nacks
		// the batch, and the next epoch on the slot asks again.
		pctx, cancel := context.WithTimeout(o.runCtx, o.conf.commitBudget)
		pid, pepoch, err := s.cl.ProducerID(pctx)
		cancel()
		if err != nil {
			_ = s.cl.EndTransaction(o.runCtx, kgo.TryAbort) // nothing produced: no request
			return nil, fmt.Errorf("kafka_eos: producer id of %q: %w", s.id, err)
		}
		ep := newEpoch(o.nextEpoch, s)
		ep.pid, ep.pepoch = pid, pepoch
		o.nextEpoch++
		s.busy = true
		s.freeCh = make(chan struct{})
		o.open = ep
		o.live = append(o.live, ep)
		ep.timer = time.AfterFunc(o.conf.epochInterval, func() { o.sealOnTimer(ep) })
		return ep, nil
	}
}

// shouldSealLocked says whether the open epoch closes now (brief, "Words"):
// at its record or byte limit (checked after whole batches), or when every
// in-flight batch is already in it, that is no earlier epoch is still
// committing. The latter is group commit: while epoch N commits, the batches
// that arrive gather in N+1 on the next slot, and N+1 closes the moment N is
// settled (finishLocked), so epochs grow with the commit latency and nobody
// waits for epoch.interval while Benthos has nothing more to send
// (max_in_flight reached).
func (o *output) shouldSealLocked(ep *epoch) bool {
	c := o.conf
	return ep.cause != nil ||
		(c.epochMaxRecords > 0 && ep.records >= c.epochMaxRecords) ||
		(c.epochMaxBytes > 0 && ep.bytes >= c.epochMaxBytes) ||
		o.inFlight == len(ep.batches) ||
		o.inFlight >= c.maxInFlight
}

// sealLocked closes the open epoch to new batches and queues it for the
// committer. Epochs are sealed in epoch order (one is open at a time), so the
// queue is in commit order.
func (o *output) sealLocked(ep *epoch) {
	if ep.sealed {
		return
	}
	ep.sealed = true
	ep.sealAcked(false)
	if ep.timer != nil {
		ep.timer.Stop()
	}
	if o.open == ep {
		o.open = nil
	}
	ep.advance(txnstate.PhaseSealed)
	// Never blocks: an epoch holds a slot, so at most len(slots) are live.
	o.committer.queue <- ep
}

func (o *output) sealOnTimer(ep *epoch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !ep.sealed && o.stopErr == nil {
		o.m.tally.add("sealed_by_timer", 1)
		o.sealLocked(ep)
	}
}

// finish settles an epoch: releases its waiters with result and removes it
// from the live list. The slot is released separately (releaseSlot), only
// once the epoch's final state is in the cache.
func (o *output) finish(ep *epoch, result error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finishLocked(ep, result)
}

func (o *output) finishLocked(ep *epoch, result error) {
	select {
	case <-ep.done:
		return
	default:
	}
	ep.result = result
	for i, l := range o.live {
		if l == ep {
			o.live = append(o.live[:i], o.live[i+1:]...)
			break
		}
	}
	o.inFlight -= len(ep.batches)
	if o.open == ep {
		o.open = nil
	}
	if ep.timer != nil {
		ep.timer.Stop()
	}
	ep.sealAcked(true)
	close(ep.done)
	if o.open != nil && o.stopErr == nil && o.shouldSealLocked(o.open) {
		o.sealLocked(o.open)
	}
}

func (o *output) releaseSlot(s *slot) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s.busy {
		s.busy = false
		close(s.freeCh)
	}
}

// poisonAfter aborts every live epoch after n (invariant I5: a later epoch
// never commits over an earlier failed one). The open one is sealed so no
// batch joins it.
func (o *output) poisonAfter(n uint64, cause error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mode.aborting(n, o.live)
	for _, ep := range o.live {
		if ep.n > n && ep.cause == nil {
			ep.cause = fmt.Errorf("epoch %d before it aborted: %w", n, cause)
			if !ep.sealed {
				o.sealLocked(ep)
			}
		}
	}
}

// stopLocked stops the output for good with err: every waiter is released
// with it (never an ack). With raise, err goes through the fatal-stop path.
func (o *output) stopLocked(err error, raise bool) error {
	if o.stopErr != nil {
		return o.stopErr
	}
	if raise {
		err = fatal.Raise(err)
	}
	o.stopErr = err
	if o.open != nil {
		o.open.sealed = true
		if o.open.timer != nil {
			o.open.timer.Stop()
		}
		o.open = nil
	}
	var released []*epoch
	for _, ep := range o.live {
		if !ep.ending {
			released = append(released, ep)
		}
	}
	o.mode.stopped(released)
	for _, ep := range append([]*epoch(nil), o.live...) {
		if ep.ending {
			// EndTxn(commit) was sent: only the committer, which
			// knows the outcome, may settle it.
			continue
		}
		o.finishLocked(ep, err)
	}
	return err
}

func (o *output) stop(err error, raise bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stopLocked(err, raise)
}

func (o *output) bufferedBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, s := range o.slots {
		if s.cl != nil {
			n += s.cl.BufferedProduceBytes()
		}
	}
	return n
}

// isArrow says whether a message is written as the rows of the Arrow IPC
// stream in its body (input_format): under auto only if a kafka_native input
// of this stream wrote it (handover.IsArrow), never from what the body looks
// like, which whoever produces to the input topic chooses.
func (o *output) isArrow(msg *service.Message) bool {
	switch o.conf.inputFormat {
	case keoInputFormatArrow:
		return true
	case keoInputFormatAuto:
		return handover.IsArrow(msg)
	}
	return false
}

// arrowRecords appends one record per row of the Arrow IPC stream body to
// recs, all to topic. Keys, values and header values alias body (no copy per
// record: Batch.ProduceRecords carves the records out of one slab per Arrow
// batch). The decoded batches are added to out.arrow, to be released once
// the records were produced.
func (o *output) arrowRecords(recs []*kgo.Record, out *write, topic string, body []byte) ([]*kgo.Record, error) {
	batches, err := o.arrowDec.Decode(body)
	if err != nil {
		return recs, fmt.Errorf("Arrow IPC message (input_format %s): %w", o.conf.inputFormat, err)
	}
	out.arrow = append(out.arrow, batches...)
	opts := kafkaarrow.ProduceOptions{
		Topic:     topic,
		Partition: o.conf.partitioner == keoPartitionerManual,
		Timestamp: o.conf.arrowTimestamps,
	}
	n := len(recs)
	for _, b := range batches {
		recs = b.ProduceRecords(recs, opts)
	}
	for j, r := range recs[n:] {
		if sz := recordSize(r); sz > o.conf.maxMessageBytes {
			return recs, &RecordError{Topic: topic, Partition: r.Partition, Size: sz,
				Err: fmt.Errorf("Arrow row %d: larger than %s %d", j, keoFieldMaxMessageBytes, o.conf.maxMessageBytes)}
		}
		if r.Partition < 0 {
			return recs, fmt.Errorf("Arrow row %d: negative partition %d", j, r.Partition)
		}
	}
	return recs, nil
}

// Close commits nothing new: it seals the open epoch, waits (until ctx ends)
// for the live epochs to settle, then stops the committer and the clients.
// Open transactions left behind are aborted by the next start's
// InitProducerID (they never reached PREPARE) or resolved from the cache.
func (o *output) Close(ctx context.Context) error {
	o.mu.Lock()
	if o.closing {
		o.mu.Unlock()
		return nil
	}
	o.closing = true
	if o.open != nil && o.stopErr == nil {
		o.sealLocked(o.open)
	}
	live := append([]*epoch(nil), o.live...)
	o.mu.Unlock()
	for _, ep := range live {
		select {
		case <-ep.done:
		case <-ctx.Done():
		}
	}
	o.mu.Lock()
	o.stopLocked(ErrClosed, false)
	c := o.committer
	o.mu.Unlock()
	if c != nil {
		c.sig.TriggerSoftStop()
		select {
		case <-c.sig.HasStoppedChan():
		case <-ctx.Done():
			c.sig.TriggerHardStop()
			<-c.sig.HasStoppedChan()
		}
	}
	if o.runCancel != nil {
		o.runCancel()
	}
	close(o.closedCh)
	if o.takeover != nil {
		handover.ReleaseCommitTakeover(o.res, o.conf.group, o.takeover)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.slots {
		s.cl.Close()
	}
	if o.admin != nil {
		o.admin.Close()
	}
	o.connected = false
	return nil
}

// appendHeaders appends the record headers of one metadata value: one header,
// or, for a list (kafka_native sets one for a header name repeated in a
// record), one per element in order. Values are rendered as Benthos renders
// metadata as strings.
func appendHeaders(hs []kgo.RecordHeader, k string, v any) []kgo.RecordHeader {
	l, isList := v.([]any)
	if !isList {
		l = []any{v}
	}
	for _, e := range l {
		var b []byte
		switch e := e.(type) {
		case string:
			b = []byte(e)
		case []byte:
			b = e
		default:
			tmp := service.NewMessage(nil)
			tmp.MetaSetMut(k, e)
			s, _ := tmp.MetaGet(k)
			b = []byte(s)
		}
		hs = append(hs, kgo.RecordHeader{Key: k, Value: b})
	}
	return hs
}
