package input

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/connect-eos/connect-eos/handover"
)

// fakeTakeover stands in for a kafka_eos output that commits the group's
// offsets in its transactions.
type fakeTakeover struct {
	mu      sync.Mutex
	ready   bool
	offsets map[string]map[int32]int64
	calls   int
	starts  map[string]map[int32]int64
	member  handover.GroupState
	revoked []map[string][]int32
	// ownedAtRevoke records, per revoked partition, whether the member
	// still said it owned it when Revoked was called.
	ownedAtRevoke map[int32]bool
}

func (f *fakeTakeover) StartAt(starts map[string]map[int32]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.starts == nil {
		f.starts = map[string]map[int32]int64{}
	}
	for t, ps := range starts {
		if f.starts[t] == nil {
			f.starts[t] = map[int32]int64{}
		}
		for p, o := range ps {
			f.starts[t][p] = o
		}
	}
}

func (f *fakeTakeover) Member(m handover.GroupState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.member = m
}

func (f *fakeTakeover) Revoked(_ context.Context, parts map[string][]int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, parts)
	if f.ownedAtRevoke == nil {
		f.ownedAtRevoke = map[int32]bool{}
	}
	for t, ps := range parts {
		for _, p := range ps {
			_, _, _, owned := f.member.Assignment(t, p)
			f.ownedAtRevoke[p] = owned
		}
	}
}

func (f *fakeTakeover) startsOf(topic string) map[int32]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.starts[topic])
}

func (f *fakeTakeover) Ready(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = true
	return nil
}

func (f *fakeTakeover) CommitOffsets(_ context.Context, offs map[string]map[int32]int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	for t, ps := range offs {
		if f.offsets[t] == nil {
			f.offsets[t] = map[int32]int64{}
		}
		for p, o := range ps {
			f.offsets[t][p] = max(f.offsets[t][p], o)
		}
	}
	return nil
}

func TestCommitTakeover(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 3)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("aborted", 2)...)
	x.end(false)
	e.produce(t, topic, 0, vals("b", 2)...)
	x = e.beginTxn(t)
	x.produce(topic, 0, vals("aborted-tail", 1)...)
	x.end(false) // p0: a0..a2, 2 aborted, marker, b0, b1, 1 aborted, marker = 10
	e.waitEnd(t, topic, 0, 10)
	group := uniq(t, "g")

	res := service.MockResources()
	ft := &fakeTakeover{offsets: map[string]map[int32]int64{}}
	require.NoError(t, handover.RegisterCommitTakeover(res, group, ft))
	require.Error(t, handover.RegisterCommitTakeover(res, group, ft), "one takeover per group")

	h := e.newInputWith(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
stop_offset: latest
max_batch_records: 2
commit_period: 10ms
`, topic, group), res)
	h.mustConnect()
	assert.True(t, ft.ready, "Ready is called before the committed offsets are read")

	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	// Nothing committed: the starts (reset_offset earliest) are handed
	// over at Connect, before any batch.
	assert.Equal(t, map[int32]int64{0: 0, 1: 0}, ft.startsOf(topic), "starts handed over at Connect")
	var spans []handover.Span
	for {
		b, ack, err := h.in.ReadBatch(ctx)
		if err != nil {
			require.ErrorIs(t, err, service.ErrEndOfInput)
			break
		}
		s, ok := handover.SpanOf(b[0])
		require.True(t, ok)
		for _, m := range b {
			s2, _ := handover.SpanOf(m)
			assert.Equal(t, s, s2, "one span per batch")
			off, _ := m.MetaGetMut(metaOffset)
			assert.GreaterOrEqual(t, off.(int64), s.From)
			assert.Less(t, off.(int64), s.To)
		}
		spans = append(spans, s)
		require.NoError(t, ack(ctx, nil))
	}
	// Spans are contiguous from the start; the gaps (aborted records,
	// markers) between them are inside the next span or acked on their own.
	require.NotEmpty(t, spans)
	assert.Equal(t, int64(0), spans[0].From)
	for i := 1; i < len(spans); i++ {
		assert.GreaterOrEqual(t, spans[i].From, spans[i-1].To)
	}
	assert.Equal(t, map[int32]int64{0: 10, 1: 0}, ft.offsets[topic], "the takeover got the stops, trailing marker included")
	assert.Equal(t, int64(-1), e.committed(t, group, topic, 0), "the input never commits itself")
}

// TestCommitTakeoverMembership: with group_membership the input tells the
// takeover it is a member and where the assigned partitions start before their
// first batch; every span carries the assignment it was read under, which the
// member confirms with the generation and member id to commit with; a revoke
// reaches the takeover after the partition stopped being tracked.
func TestCommitTakeoverMembership(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 10)...)
	e.produce(t, topic, 1, vals("b", 10)...)
	group := uniq(t, "g")
	e.commit(t, group, topic, 1, 4)
	res := service.MockResources()
	ft := &fakeTakeover{offsets: map[string]map[int32]int64{}}
	require.NoError(t, handover.RegisterCommitTakeover(res, group, ft))
	conf := fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
max_batch_records: 5
commit_period: 20ms
revoke_ack_timeout: 300ms
`, topic, group)
	h := e.newInputWith(t, conf, res)
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	seen := map[int32]bool{}
	for len(seen) < 2 {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		s, ok := handover.SpanOf(b[0])
		require.True(t, ok)
		if !seen[s.Partition] {
			// The first batch of the partition: its start was handed
			// over before it.
			want := map[int32]int64{0: 0, 1: 4}[s.Partition]
			assert.Equal(t, want, ft.startsOf(topic)[s.Partition], "start of partition %d", s.Partition)
			assert.Equal(t, want, s.From)
		}
		seen[s.Partition] = true
		ft.mu.Lock()
		m := ft.member
		ft.mu.Unlock()
		require.NotNil(t, m, "Member before the first batch")
		id, gen, mem, owned := m.Assignment(s.Topic, s.Partition)
		assert.True(t, owned)
		assert.NotZero(t, s.Assignment)
		assert.Equal(t, s.Assignment, id, "the span's assignment is the current one")
		assert.Equal(t, s.Generation, gen)
		assert.Equal(t, s.MemberID, mem)
		require.NoError(t, ack(ctx, nil))
	}

	// A second member takes one partition over.
	h2 := e.newInput(t, conf)
	h2.mustConnect()
	wait(t, 30*time.Second, func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		return len(ft.revoked) > 0
	})
	ft.mu.Lock()
	revoked := ft.revoked[0][topic]
	owned := maps.Clone(ft.ownedAtRevoke)
	m := ft.member
	ft.mu.Unlock()
	require.Len(t, revoked, 1)
	assert.False(t, owned[revoked[0]], "the partition is no longer tracked when the takeover hears of the revoke")
	_, _, _, still := m.Assignment(topic, revoked[0])
	assert.False(t, still)
	_, _, _, kept := m.Assignment(topic, 1-revoked[0])
	assert.True(t, kept, "the other partition stays")
}

// syncTakeover models a kafka_eos output's CommitOffsets: a call without a
// deadline only hands the offsets over (a later epoch commits them); a call
// with one returns once they are committed, or with the commit's error.
type syncTakeover struct {
	fakeTakeover
	fail error
}

func (s *syncTakeover) CommitOffsets(ctx context.Context, offs map[string]map[int32]int64) error {
	if _, ok := ctx.Deadline(); !ok {
		return nil
	}
	if s.fail != nil {
		return s.fail
	}
	return s.fakeTakeover.CommitOffsets(ctx, offs)
}

// The final commit of a bounded read through a takeover is waited for: the
// input ends only once the stops are committed, and a commit that keeps
// failing is reported (fatal), not left behind.
func TestFinalCommitWaitsForTakeover(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", failing), func(t *testing.T) {
			if failing {
				old := finalCommitRetry
				finalCommitRetry = time.Second
				t.Cleanup(func() { finalCommitRetry = old })
			}
			e := newKfakeEnv(t)
			topic := e.topic(t, 1)
			e.produce(t, topic, 0, vals("a", 3)...)
			group := uniq(t, "g")
			res := service.MockResources()
			st := &syncTakeover{fakeTakeover: fakeTakeover{offsets: map[string]map[int32]int64{}}}
			if failing {
				st.fail = errors.New("the epoch carrying the offsets aborted")
			}
			require.NoError(t, handover.RegisterCommitTakeover(res, group, st))
			h := e.newInputWith(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\ncommit_period: 1h\n", topic, group), res)
			h.mustConnect()
			gs, err := h.readUntilEnd(readTimeout)
			assert.Len(t, gs, 3)
			if failing {
				var ce *CommitError
				require.ErrorAs(t, err, &ce)
				requireFatal(t, h, err, nil)
				return
			}
			require.NoError(t, err)
			st.mu.Lock()
			defer st.mu.Unlock()
			assert.Equal(t, map[int32]int64{0: 3}, st.offsets[topic], "the stops were committed before the input ended")
		})
	}
}

// recordingCommitter is a direct committer that records its calls.
type recordingCommitter struct {
	mu    sync.Mutex
	calls []map[string]map[int32]int64
}

func (r *recordingCommitter) CommitOffsets(_ context.Context, offs map[string]map[int32]int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, offs)
	return nil
}

// TestReleasedTakeoverCommitsNothing: once the output that commits the group's
// offsets in its transactions closed (a fatal error stopped it while the input
// still ran), the input commits nothing itself. A woken zombie whose output
// stopped on an in-doubt epoch read its partition to the stop with nothing
// acknowledged and, on Close, committed where it had started (offset 0)
// directly to the group: a plain commit with generation -1 that Kafka takes
// from anyone, overwriting what its successor had committed in its
// transactions.
func TestReleasedTakeoverCommitsNothing(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 3)...)
	group := uniq(t, "g")
	res := service.MockResources()
	ft := &fakeTakeover{offsets: map[string]map[int32]int64{}}
	require.NoError(t, handover.RegisterCommitTakeover(res, group, ft))
	h := e.newInputWith(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\ncommit_period: 10ms\n", topic, group), res)
	h.mustConnect()

	// The whole partition is read, nothing is acknowledged (the output
	// failed the epoch that held it).
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	for n := 0; n < 3; {
		b, _, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		n += len(b)
	}
	// The successor committed the partition's end in its transactions;
	// then this instance's output closed.
	e.commit(t, group, topic, 0, 3)
	handover.ReleaseCommitTakeover(res, group, ft)
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	require.NoError(t, h.in.Close(cctx)) // commits on close
	assert.Equal(t, int64(3), e.committed(t, group, topic, 0), "the input committed to the group itself after its takeover closed")

	// The committer: direct when no takeover was ever registered, nothing
	// once one was released.
	direct := &recordingCommitter{}
	offs := map[string]map[int32]int64{topic: {0: 0}}
	hc := &handoverCommitter{res: service.MockResources(), group: group, direct: direct}
	require.NoError(t, hc.CommitOffsets(ctx, offs))
	assert.Len(t, direct.calls, 1, "no takeover: the input commits to the group")
	hc = &handoverCommitter{res: res, group: group, direct: direct}
	require.ErrorIs(t, hc.CommitOffsets(ctx, offs), errTakeoverReleased)
	assert.Len(t, direct.calls, 1, "a released takeover: nothing committed directly")
	ft2 := &fakeTakeover{offsets: map[string]map[int32]int64{}}
	require.NoError(t, handover.RegisterCommitTakeover(res, group, ft2))
	require.NoError(t, hc.CommitOffsets(ctx, offs))
	assert.Equal(t, 1, ft2.calls, "a takeover registered again takes the commits")
	assert.Len(t, direct.calls, 1)
}
