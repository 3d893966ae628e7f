package input

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recCommitter records the commits it is asked for, in order.
type recCommitter struct {
	mu      sync.Mutex
	commits []map[string]map[int32]int64
}

func (r *recCommitter) CommitOffsets(_ context.Context, offs map[string]map[int32]int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string]map[int32]int64{}
	for t, ps := range offs {
		c[t] = maps.Clone(ps)
	}
	r.commits = append(r.commits, c)
	return nil
}

// gateCommitter holds its first call until open is closed (arrived is closed
// when it got there): a commit step slowed down at the worst moment.
type gateCommitter struct {
	once    sync.Once
	arrived chan struct{}
	open    chan struct{}
	c       OffsetCommitter
}

func (g *gateCommitter) CommitOffsets(ctx context.Context, offs map[string]map[int32]int64) error {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.arrived)
		<-g.open
	}
	return g.c.CommitOffsets(ctx, offs)
}

// With group_membership, a periodic commit racing a revoke never moves the
// group's offset backwards: positions are read under the commit lock, and a
// partition given up is not committed again. Here the periodic commit read
// offset 5 and is slowed down before committing; meanwhile the partition is
// acknowledged to 8 and revoked (the revoke commits 8 and drops it). The
// committed sequence must never go from 8 back to 5.
func TestPeriodicCommitNeverMovesBackAfterRevoke(t *testing.T) {
	p := tp{"t", 0}
	now := time.Now()
	tr := newTracker([]*partPlan{{tp: p, start: 0, stop: noStop, committed: -1}}, now)
	tr.ack(p, tr.advance(p, 5, 1, true, now))

	res := service.MockResources()
	cfg := &config{group: "g", revokeTimeout: time.Second, commitPeriod: time.Hour}
	met := newInputMetrics(res.Metrics())
	rec := &recCommitter{}
	gate := &gateCommitter{arrived: make(chan struct{}), open: make(chan struct{}), c: rec}
	step := &commitStep{cfg: cfg, tr: tr, committer: gate, met: met, log: res.Logger()}
	book := &bookkeeper{cfg: cfg, tr: tr, step: step, met: met, log: res.Logger()}
	member := &groupMember{cfg: cfg, res: res, tr: tr, met: met, log: res.Logger()}
	member.step.Store(step)

	ctx := context.Background()
	bookDone := make(chan struct{})
	go func() {
		defer close(bookDone)
		_ = book.commit(ctx)
	}()
	<-gate.arrived
	tr.ack(p, tr.advance(p, 8, 1, true, time.Now()))
	revokeDone := make(chan struct{})
	go func() {
		defer close(revokeDone)
		member.revoked(ctx, nil, map[string][]int32{"t": {0}})
	}()
	// The revoke either finishes (it did not wait for the commit in
	// flight) or waits for it; let it get as far as it can.
	select {
	case <-revokeDone:
	case <-time.After(500 * time.Millisecond):
	}
	close(gate.open)
	<-bookDone
	<-revokeDone

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.commits)
	var seq []int64
	for _, c := range rec.commits {
		seq = append(seq, c["t"][0])
	}
	for i := 1; i < len(seq); i++ {
		assert.GreaterOrEqual(t, seq[i], seq[i-1], "commits %v: an offset moved backwards", seq)
	}
	assert.Equal(t, int64(8), seq[len(seq)-1], "commits %v", seq)
}
