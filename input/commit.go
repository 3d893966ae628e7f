package input

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/Jeffail/shutdown"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
)

// OffsetCommitter stores the positions the pipeline acknowledged: per topic
// and partition the next offset to read, never past a partition's stop. Calls
// never overlap.
//
// The default, groupCommitter, commits them to the consumer group with an
// OffsetCommit request. A kafka_eos output that commits the group's offsets
// inside its transactions takes the commit step over instead (see
// handover.CommitTakeover).
type OffsetCommitter interface {
	CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error
}

// groupCommitter commits to a consumer group through kadm, outside any group
// membership (the input assigns partitions itself; the group is an offset
// store, as in Flink's KafkaSource). Generation -1 and an empty member id
// are what the broker accepts for such "simple" commits.
type groupCommitter struct {
	adm   *kadm.Client
	group string
}

func (g *groupCommitter) CommitOffsets(ctx context.Context, offsets map[string]map[int32]int64) error {
	var os kadm.Offsets
	for topic, ps := range offsets {
		for p, at := range ps {
			os.AddOffset(topic, p, at, -1)
		}
	}
	resp, err := g.adm.CommitOffsets(ctx, g.group, os)
	if err != nil {
		return err
	}
	return resp.Error()
}

func byTopic(offs map[tp]int64) map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	for p, at := range offs {
		if out[p.Topic] == nil {
			out[p.Topic] = map[int32]int64{}
		}
		out[p.Topic][p.Partition] = at
	}
	return out
}

// commitStep is the one way offsets are committed: the bookkeeper's periodic
// commit, the final commit of a bounded read, the commit on Close and the
// revoke of group_membership all go through it. Calls never overlap, and each
// reads the positions to commit under the step's lock: positions read before
// another commit that finished in between (a revoke that committed further and
// gave the partition up) would move an offset backwards, or commit a partition
// this member no longer owns.
type commitStep struct {
	mu        sync.Mutex
	cfg       *config
	tr        *tracker
	committer OffsetCommitter // nil without a consumer group
	met       *inputMetrics
	log       *service.Logger
}

// commit commits what was acknowledged since the last commit, of the
// partitions in only (all if nil). A failure is counted and logged and
// returned; the next commit carries the same or newer positions.
func (c *commitStep) commit(ctx context.Context, only map[tp]bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commitLocked(ctx, only)
}

func (c *commitStep) commitLocked(ctx context.Context, only map[tp]bool) error {
	if c.committer == nil {
		return nil
	}
	offs := c.tr.toCommitOf(only)
	if len(offs) == 0 {
		return nil
	}
	if err := c.committer.CommitOffsets(ctx, byTopic(offs)); err != nil {
		c.met.commitFailed()
		c.log.Warnf("Committing offsets of group %s failed (will retry): %v", c.cfg.group, err)
		return err
	}
	c.met.commitSucceeded()
	c.tr.markCommitted(offs)
	return nil
}

// revoke commits what was acknowledged of parts (unless commit is false) and
// stops tracking them, both under the lock: no commit that read their
// positions earlier can follow.
func (c *commitStep) revoke(ctx context.Context, parts []tp, commit bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if commit {
		only := map[tp]bool{}
		for _, p := range parts {
			only[p] = true
		}
		err = c.commitLocked(ctx, only)
	}
	c.tr.remove(parts)
	return err
}

// bookkeeper is the loop that commits acknowledged offsets every
// commit_period, publishes the per-partition gauges and logs the progress of
// a bounded read. It is stopped through shut and signals has-stopped.
type bookkeeper struct {
	cfg  *config
	tr   *tracker
	step *commitStep
	met  *inputMetrics
	log  *service.Logger
	shut *shutdown.Signaller
	prog *progress
	adm  *kadm.Client // for the stall check; nil in tests that build one by hand
	disc *discoverer  // nil unless an unbounded read with direct assignment discovers partitions
}

func (b *bookkeeper) run(ctx context.Context) {
	defer b.shut.TriggerHasStopped()
	ctx, cancel := b.shut.SoftStopCtx(ctx)
	defer cancel()
	commitTick := time.NewTicker(b.cfg.commitPeriod)
	defer commitTick.Stop()
	var progC, stallC <-chan time.Time
	if b.prog != nil && b.cfg.progressLogInterval > 0 {
		t := time.NewTicker(b.cfg.progressLogInterval)
		defer t.Stop()
		progC = t.C
	}
	var discC <-chan time.Time
	if b.disc != nil {
		t := time.NewTicker(b.cfg.discovery)
		defer t.Stop()
		discC = t.C
	}
	if b.cfg.stallWarning > 0 {
		t := time.NewTicker(max(b.cfg.stallWarning/4, 100*time.Millisecond))
		defer t.Stop()
		stallC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-commitTick.C:
			_ = b.commit(ctx)
			b.met.publish(b.tr.snapshots)
		case <-progC:
			b.prog.report(b.tr.snapshots(), false)
		case now := <-stallC:
			b.checkStalls(ctx, now)
		case <-discC:
			b.disc.discover(ctx)
		}
	}
}

// commit commits what was acknowledged since the last commit. A failure is
// counted and logged and otherwise ignored: the committed offset is
// monitoring and restart state, and the next commit carries the same or newer
// positions.
func (b *bookkeeper) commit(ctx context.Context) error { return b.step.commit(ctx, nil) }

// finalCommitRetry bounds the final commit of a bounded read: how long it
// retries a retriable error, and the deadline handed to the committer (a
// kafka_eos output that commits the group's offsets in its transactions
// returns once they are committed only when its context carries a deadline).
// After a broker restart, Kafka 4.3 answered offset commits with
// UNKNOWN_TOPIC_OR_PARTITION for 15-40s (the chaos suite saw it), so 30s was
// too short. A variable for tests.
var finalCommitRetry = 2 * time.Minute

// errStopped wraps the context's error when the final commit was cut short by
// a stop (Close, SIGTERM): the operator's stop, never fatal.
type errStopped struct{ err, last error }

func (e *errStopped) Error() string {
	return fmt.Sprintf("stopped before the final offset commit succeeded: %v (last error: %v)", e.err, e.last)
}
func (e *errStopped) Unwrap() error { return e.err }

// finalCommit commits the stops of a bounded read synchronously, under a
// deadline of finalCommitRetry, retrying a retriable error until then. A
// permanent failure, or one that outlasts the deadline, is returned as
// *CommitError (the caller makes it fatal, so a job whose offsets were not
// stored does not exit 0). If ctx ends first (the input is closed), the
// error wraps ctx's and is no *CommitError: stopping is not failing.
func (b *bookkeeper) finalCommit(ctx context.Context) error {
	if b.step.committer == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, finalCommitRetry)
	defer cancel()
	var err error
	backoff := 100 * time.Millisecond
	for {
		if err = b.commit(cctx); err == nil {
			if len(b.tr.toCommit()) == 0 {
				return nil
			}
			continue
		}
		if ctx.Err() != nil {
			return &errStopped{err: ctx.Err(), last: err}
		}
		if isFatal(err) || cctx.Err() != nil {
			return &CommitError{Group: b.cfg.group, Err: err}
		}
		select {
		case <-cctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
