package input

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkaarrow "github.com/connect-eos/connect-eos/arrow"
	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/internal/memlimit"
)

// closeTimeout bounds how long Close waits for the loops and a last commit.
const closeTimeout = time.Second

// kafkaInput is the kafka_native service.BatchInput.
//
// Connect runs the preflight (metadata, offset listings, the group's
// offsets) under connect_timeout, resolves every partition's start and stop,
// and starts two loops: the fetchLoop, which polls and hands batches to
// ReadBatch through a channel, and the bookkeeper, which commits. ReadBatch
// returns those batches with an ack function that acknowledges the batch's
// span in the tracker; once a bounded read finished and everything was
// acknowledged, it commits synchronously and returns service.ErrEndOfInput.
type kafkaInput struct {
	cfg *config
	mgr *service.Resources
	log *service.Logger
	met *inputMetrics

	// newCommitter builds the commit step once the admin client exists.
	// It is the seam for an output that commits inside its transactions
	// (see OffsetCommitter); nil without a consumer group.
	newCommitter func(adm *kadm.Client) OffsetCommitter
	// memShare is what all partitions together may hold under the Go
	// memory limit; nil: memlimit.InputShare (tests set their own).
	memShare func() int64

	connMu sync.Mutex // serializes Connect
	mu     sync.Mutex // guards the fields below
	// unknownSince is when the connection attempts began to find a topic
	// or partition unknown, without another failure in between (guarded
	// by connMu).
	unknownSince  time.Time
	conn          *connection // nil until connected
	closed        bool
	cancelConnect context.CancelFunc // cancels a Connect in progress
}

// connection is everything Connect started; Close tears it down.
type connection struct {
	admCl     *kgo.Client
	consumeCl *kgo.Client // nil if every partition was finished at start
	tr        *tracker
	book      *bookkeeper
	prog      *progress
	fetchShut *shutdown.Signaller
	bookShut  *shutdown.Signaller
	batches   chan readyBatch
	member    *groupMember  // nil unless group_membership
	done      chan struct{} // closed by the fetch loop at the end of a bounded read
	failed    chan struct{} // closed on the first fatal error of this input
	failOnce  sync.Once
	failErr   error
	ended     atomic.Bool // the bounded read ended and committed its stops
}

func newInputFromParsed(conf *service.ParsedConfig, mgr *service.Resources) (*kafkaInput, error) {
	cfg, err := configFromParsed(conf)
	if err != nil {
		return nil, err
	}
	cfg.conn.LogWarnings(mgr.Logger())
	in := &kafkaInput{cfg: cfg, mgr: mgr, log: mgr.Logger(), met: newInputMetrics(mgr.Metrics())}
	if cfg.commits() {
		in.newCommitter = func(adm *kadm.Client) OffsetCommitter {
			return &handoverCommitter{res: mgr, group: cfg.group, direct: &groupCommitter{adm: adm, group: cfg.group}, log: mgr.Logger()}
		}
	}
	return in, nil
}

func (in *kafkaInput) Connect(ctx context.Context) error {
	// connMu serializes Connect calls; mu is not held while connecting
	// (the preflight and the high watermark wait can take a while), so
	// that Close never waits for a Connect: it cancels it.
	in.connMu.Lock()
	defer in.connMu.Unlock()
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return ErrClosed
	}
	if in.conn != nil {
		in.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	in.cancelConnect = cancel
	in.mu.Unlock()
	defer cancel()
	if err := fatal.Err(); err != nil {
		return err
	}

	c, err := in.connect(ctx)
	if err == nil {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.closed {
			c.teardown(context.Background())
			return ErrClosed
		}
		in.conn = c
		return nil
	}
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if !isUnknownTopic(err) {
		in.unknownSince = time.Time{}
	} else if in.unknownSince.IsZero() {
		in.unknownSince = time.Now()
	}
	switch {
	case isFatal(err):
		return fatal.Raise(fmt.Errorf("kafka_native: %w", err))
	case isUnknownTopic(err) && time.Since(in.unknownSince) > in.cfg.unknownTopicGrace:
		// Every attempt since unknownSince found it unknown in the
		// brokers' metadata.
		return fatal.Raise(fmt.Errorf("kafka_native: %w (for longer than %s %v)", err, knFieldUnknownTopicGrace, in.cfg.unknownTopicGrace))
	}
	// A broker that is down, a leader election, a topic being created:
	// Benthos retries Connect with backoff.
	in.log.Warnf("Connecting: %v", err)
	return err
}

func (in *kafkaInput) connect(ctx context.Context) (_ *connection, err error) {
	cfg := in.cfg
	admCl, err := kgo.NewClient(cfg.conn.Opts()...)
	if err != nil {
		return nil, &ConfigError{Field: "seed_brokers", Err: err}
	}
	defer func() {
		if err != nil {
			admCl.Close()
		}
	}()
	adm := kadm.NewClient(admCl)
	plans, err := in.preflight(ctx, adm)
	if err != nil {
		return nil, err
	}

	now := time.Now()
	c := &connection{
		admCl:     admCl,
		tr:        newTracker(plans, now),
		fetchShut: shutdown.NewSignaller(),
		bookShut:  shutdown.NewSignaller(),
		batches:   make(chan readyBatch, 4),
		done:      make(chan struct{}),
		failed:    make(chan struct{}),
	}
	consume := map[string]map[int32]kgo.Offset{}
	for _, pp := range plans {
		in.log.Debugf("Partition %s: start %d, stop %d (log start %d, end %d, committed %d)", pp.tp, pp.start, pp.stop, pp.logStart, pp.end, pp.committed)
		pp.logFallback(in.log, cfg)
		if pp.stop != noStop && pp.start >= pp.stop {
			continue // finished before any fetch
		}
		if consume[pp.Topic] == nil {
			consume[pp.Topic] = map[int32]kgo.Offset{}
		}
		consume[pp.Topic][pp.Partition] = kgo.NewOffset().At(pp.start)
	}
	// Before the first fetch: the output that commits this group's
	// offsets learns where every partition's run begins.
	if cfg.commits() {
		handOverStarts(in.mgr, cfg.group, plans)
	}
	if cfg.membership {
		c.member = &groupMember{cfg: cfg, res: in.mgr, adm: adm, tr: c.tr, met: in.met, log: in.log, fail: func(err error) { c.fail(err) }}
	}
	if len(consume) > 0 || c.member != nil || cfg.discovers() {
		if c.consumeCl, err = kgo.NewClient(in.consumerOpts(consume, c.member)...); err != nil {
			return nil, &ConfigError{Field: "seed_brokers", Err: err}
		}
	}
	in.start(c, adm, plans, now)
	return c, nil
}

// preflight runs the checks of Connect under connect_timeout (the high
// watermark wait excepted) and resolves every partition's start and stop;
// with group_membership the starts are resolved per assignment instead.
func (in *kafkaInput) preflight(ctx context.Context, adm *kadm.Client) ([]*partPlan, error) {
	cfg := in.cfg
	t, takeover := handover.Lookup(in.mgr, cfg.group)
	if takeover && cfg.group != "" {
		// The output that commits this group's offsets recovers
		// first, so the committed offsets read below are final.
		if err := t.Ready(ctx); err != nil {
			return nil, fmt.Errorf("waiting for the output that commits group %s: %w", cfg.group, err)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
	defer cancel()
	l, parts, err := cfg.list(pctx, adm, in.log)
	if err != nil || cfg.membership {
		return nil, err
	}
	rctx := pctx
	if cfg.stopAtHWM {
		rctx = ctx // bounded by high_watermark_wait_timeout instead
	}
	if cfg.commits() {
		// Mirror mode: the output's positions, not the group's offsets.
		// Not under connect_timeout: an earlier owner's transaction
		// may have to end first (the output bounds the wait).
		if err := keptStarts(ctx, in.mgr, adm, cfg.group, l, parts, -1); err != nil {
			return nil, err
		}
	}
	plans, err := cfg.resolve(rctx, adm, l, parts)
	if err != nil {
		return nil, err
	}
	if cfg.commits() && !l.groupReadKnown && !takeover && len(plans) > 0 {
		// A new group: prove the commits will be allowed before
		// reading, rather than at the final commit.
		if err := checkCommitAccess(pctx, adm, cfg.group, plans[0]); err != nil {
			return nil, err
		}
	}
	return plans, nil
}

// consumerOpts are the options of the consuming client: direct assignment of
// consume, or group membership.
func (in *kafkaInput) consumerOpts(consume map[string]map[int32]kgo.Offset, member *groupMember) []kgo.Opt {
	cfg := in.cfg
	iso := kgo.ReadUncommitted()
	if cfg.readCommitted {
		iso = kgo.ReadCommitted()
	}
	opts := cfg.conn.Opts()
	if cfg.rack != "" {
		opts = append(opts, kgo.Rack(cfg.rack))
	}
	if member != nil {
		opts = append(opts, member.opts()...)
	} else {
		opts = append(opts, kgo.ConsumePartitions(consume))
	}
	return append(opts,
		kgo.WithHooks(clientHooks{in.met}),
		kgo.FetchIsolationLevel(iso),
		// Markers take offsets: keep them so the position moves past
		// them (they are dropped before emitting).
		kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(cfg.maxPartitionBytes),
		kgo.MaxDecompressBatchBytes(cfg.maxDecompressed),
		kgo.FetchMaxWait(500*time.Millisecond),
		// Show UNKNOWN_TOPIC_OR_PARTITION, which kgo strips and retries
		// silently by default, so that a deleted topic fails after the
		// grace period.
		kgo.KeepRetryableFetchErrors(),
		// Our starts are exact and validated, so OFFSET_OUT_OF_RANGE
		// means the log start moved past the position mid-read. kgo
		// would resume at the log start silently; keep the error and
		// measure the loss (fetchLoop.outOfRange).
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
}

// start builds the commit step and starts the fetch loop and the bookkeeper.
func (in *kafkaInput) start(c *connection, adm *kadm.Client, plans []*partPlan, now time.Time) {
	cfg := in.cfg
	step := &commitStep{cfg: cfg, tr: c.tr, met: in.met, log: in.log}
	switch {
	case c.member != nil:
		step.committer = &handoverCommitter{res: in.mgr, group: cfg.group, direct: &memberCommitter{cl: c.consumeCl, g: c.member}, log: in.log}
		c.member.step.Store(step) // after its fields: the callbacks read them
		c.member.cl.Store(c.consumeCl)
		// Before the fetch loop starts: no batch reaches the output
		// before it can ask which partitions this member owns.
		handOverMember(in.mgr, cfg.group, c.member)
	case in.newCommitter != nil:
		step.committer = in.newCommitter(adm)
	}
	if cfg.bounded() {
		c.prog = newProgress(in.log, plans, now)
	}
	c.book = &bookkeeper{cfg: cfg, tr: c.tr, step: step, met: in.met, log: in.log, shut: c.bookShut, prog: c.prog, adm: adm}
	if cfg.discovers() {
		c.book.disc = &discoverer{cfg: cfg, adm: adm, cl: c.consumeCl, tr: c.tr, res: in.mgr, log: in.log}
	}
	if c.consumeCl != nil {
		loop := &fetchLoop{
			cfg: cfg, cl: c.consumeCl, tr: c.tr, met: in.met, log: in.log,
			shut: c.fetchShut, out: c.batches, done: c.done,
			onFail:     func(err error) { c.fail(err) },
			lastErrLog: map[string]time.Time{},
			oorAt:      map[tp]time.Time{},
			topicIDs:   map[string][16]byte{},
			probe:      &prober{cfg: cfg, cl: c.admCl, adm: adm, tr: c.tr, met: in.met, log: in.log},
			memShare:   in.memShare,
		}
		for _, pp := range plans {
			loop.topicIDs[pp.Topic] = pp.topicID
		}
		if cfg.commits() {
			_, loop.keepRecords = handover.LookupKeeper(in.mgr, cfg.group)
		}
		if loop.memShare == nil {
			loop.memShare = memlimit.InputShare
		}
		if cfg.format == formatArrow {
			loop.enc = kafkaarrow.NewEncoder()
		}
		go loop.run(context.Background())
	} else {
		close(c.done) // every partition was finished at start
		c.fetchShut.TriggerHasStopped()
	}
	go c.book.run(context.Background())
	switch {
	case cfg.bounded():
		in.log.Infof("Reading %d partitions of %v to their stops (%d offsets)", len(plans), cfg.topicOrder, c.prog.total)
	case c.member != nil:
		in.log.Infof("Reading %v as a member of group %s", cfg.topicOrder, cfg.group)
	default:
		in.log.Infof("Reading %d partitions of %v", len(plans), cfg.topicOrder)
	}
}

// fail records the first fatal error of this connection and raises it.
func (c *connection) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = fatal.Raise(fmt.Errorf("kafka_native: %w", err))
		close(c.failed)
	})
}

func (in *kafkaInput) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	in.mu.Lock()
	c, closed := in.conn, in.closed
	in.mu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	if c == nil {
		return nil, nil, service.ErrNotConnected
	}
	select {
	case <-c.failed:
		return nil, nil, c.failErr
	default:
	}
	if c.ended.Load() {
		return nil, nil, service.ErrEndOfInput
	}
	select {
	case b := <-c.batches:
		return in.deliver(c, b)
	case <-c.done:
		// The loop closes done after its last send: drain first.
		select {
		case b := <-c.batches:
			return in.deliver(c, b)
		default:
		}
		return nil, nil, in.finish(ctx, c)
	case <-c.failed:
		return nil, nil, c.failErr
	case <-c.fetchShut.SoftStopChan():
		return nil, nil, ErrClosed
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (in *kafkaInput) deliver(c *connection, b readyBatch) (service.MessageBatch, service.AckFunc, error) {
	return b.msgs, func(_ context.Context, err error) error {
		if err != nil {
			// Without the auto-replay wrapper a rejected batch
			// would be lost; keep its span pending so that the
			// committed offset never passes it.
			in.log.Errorf("Batch of %s [%d, %d) rejected: %v; its offsets will not be committed", b.tp, b.sp.from, b.sp.to, err)
			return nil
		}
		c.tr.ack(b.tp, b.sp)
		return nil
	}, nil
}

// finish ends a bounded read: it waits until every batch was acknowledged,
// commits the stops synchronously, logs the summary and returns
// service.ErrEndOfInput, or the fatal error of a final commit that failed.
func (in *kafkaInput) finish(ctx context.Context, c *connection) error {
	for !c.tr.allAcked() {
		select {
		case <-c.tr.changedChan():
		case <-time.After(100 * time.Millisecond):
		case <-c.failed:
			return c.failErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := c.book.finalCommit(ctx); err != nil {
		var stopped *errStopped
		if errors.As(err, &stopped) {
			// Stopped (SIGTERM: Benthos closes the input, which ends
			// ctx) while the final commit retried: the operator's
			// stop, not a failure. Everything emitted was
			// acknowledged downstream; the next run starts from the
			// offsets committed so far, as after any stop.
			in.log.Warnf("Group %s: %v", c.book.cfg.group, err)
			return ctx.Err()
		}
		c.fail(err)
		return c.failErr
	}
	in.met.publish(c.tr.snapshots)
	if c.prog != nil {
		c.prog.report(c.tr.snapshots(), true)
	}
	c.ended.Store(true)
	return service.ErrEndOfInput
}

// Close stops the loops, commits what was acknowledged (best effort, within
// the close timeout) and closes the clients. It returns within about a second.
func (in *kafkaInput) Close(ctx context.Context) error {
	in.mu.Lock()
	c := in.conn
	in.closed = true
	in.conn = nil
	if in.cancelConnect != nil {
		in.cancelConnect()
	}
	in.mu.Unlock()
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	c.teardown(ctx)
	return nil
}

// teardown stops the loops, commits what was acknowledged (unless a bounded
// read already committed its stops) and closes the clients.
func (c *connection) teardown(ctx context.Context) {
	c.fetchShut.TriggerSoftStop()
	c.bookShut.TriggerSoftStop()
	if c.member != nil {
		// The commit below covers the acknowledged offsets; the revoke
		// that leaving the group triggers must not wait for acks that
		// will not come.
		c.member.closing.Store(true)
	}
	if c.consumeCl != nil {
		// Unblocks a PollFetches in flight and leaves the group.
		defer c.consumeCl.Close()
	}
	for _, s := range []*shutdown.Signaller{c.fetchShut, c.bookShut} {
		select {
		case <-s.HasStoppedChan():
		case <-ctx.Done():
		}
	}
	if !c.ended.Load() {
		if err := c.book.commit(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			c.book.log.Warnf("Committing offsets on close: %v", err)
		}
	}
	c.admCl.Close()
}
