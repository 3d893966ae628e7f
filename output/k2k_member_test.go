package output

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/handover"
)

// fakeGroup is the input's group state as a test sets it: which partitions
// the member owns (under which assignment id), and the generation and member
// id to commit with. With stale set, the answers carry the previous
// generation for that long after the first one: the member learns of a
// rebalance that kept its partitions a moment after the coordinator moved on.
type fakeGroup struct {
	mu     sync.Mutex
	owned  map[int32]uint64
	gen    int32
	member string
	stale  time.Duration
	first  time.Time
}

func (f *fakeGroup) Assignment(_ string, p int32) (uint64, int32, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first.IsZero() {
		f.first = time.Now()
	}
	id, ok := f.owned[p]
	if !ok {
		return 0, -1, "", false
	}
	if f.member == "" {
		return id, -1, "", true // rejoining
	}
	if time.Since(f.first) < f.stale {
		return id, f.gen - 1, f.member, true
	}
	return id, f.gen, f.member, true
}

func (f *fakeGroup) revoke(p int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.owned, p)
}

// joinGroup makes a real member of group grp (a franz-go consumer of topic
// in) and waits until it joined, so that the coordinator checks the member id
// and generation an output's transactional offset commits carry. It returns
// the consumer, which the caller closes (the member leaves), and the member
// id and generation to commit with.
func joinGroup(t testing.TB, brokers []string, grp, in string) (cl *kgo.Client, mem string, gen int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(grp), kgo.ConsumeTopics(in), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	gen = -1
	wait(t, 30*time.Second, "a member of the group", func() bool {
		pctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		cl.PollFetches(pctx)
		cancel()
		mem, gen = cl.GroupMetadata()
		return gen >= 1 && mem != ""
	})
	return cl, mem, gen
}

// memberSpan is the span [from, to) of partition p of the input topic read
// under assignment id.
func memberSpan(p int32, from, to int64, id uint64) handover.Span {
	return handover.Span{Topic: k2kIn, Partition: p, From: from, To: to, Generation: 1, MemberID: "m", Assignment: id}
}

// TestK2KMemberRevokedPartitions: with group_membership, a batch read under
// an assignment the member no longer holds is acknowledged without being
// written, and an epoch holding a batch of a partition revoked before its
// commit aborts (its batch nacked; replayed, it is dropped).
func TestK2KMemberRevokedPartitions(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	o := k2kOutput(t, newResources(), brokers, "k2k-member-revoked")
	fg := &fakeGroup{owned: map[int32]uint64{0: 2, 1: 1}, gen: 3, member: "m"}
	o.Member(fg)
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0, 1: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Partition 0 was revoked and assigned again (assignment 2): a batch
	// read under assignment 1 is dropped.
	old := batchOf("old", 3)
	handover.WithSpan(old, memberSpan(0, 0, 10, 1))
	if err := o.WriteBatch(ctx, old); err != nil {
		t.Fatalf("stale batch: %v, want it dropped (acknowledged)", err)
	}
	if got := o.m.tally.get(metricK2KRebalance + "/" + k2kDroppedBatch); got != 1 {
		t.Fatalf("dropped %d batches, want 1", got)
	}

	// Partition 1 is revoked after its batch joined an epoch, before the
	// epoch's commit: the epoch aborts.
	o.hooks = &testHooks{beforeCommit: func(uint64) { fg.revoke(1) }}
	b := batchOf("b", 3)
	handover.WithSpan(b, memberSpan(1, 0, 10, 1))
	if err := o.WriteBatch(ctx, b); !errors.Is(err, errRevoked) {
		t.Fatalf("batch of a partition revoked before its commit: %v, want %v", err, errRevoked)
	}
	o.hooks = nil
	// Benthos replays it: dropped now.
	if err := o.WriteBatch(ctx, b); err != nil {
		t.Fatalf("replayed batch of a revoked partition: %v, want it dropped", err)
	}

	// Partition 0 is still owned but the member is rejoining the group
	// (no member id): its batch is not dropped (the input would count the
	// ack), its epoch aborts and the batch is nacked for a replay.
	fg.mu.Lock()
	fg.member = ""
	fg.mu.Unlock()
	cur := batchOf("cur", 3)
	handover.WithSpan(cur, memberSpan(0, 0, 10, 2))
	if err := o.WriteBatch(ctx, cur); !errors.Is(err, errRejoining) {
		t.Fatalf("batch of an owned partition while rejoining: %v, want %v", err, errRejoining)
	}
	if got := readCommitted(t, brokers, testTopic); len(got) != 0 {
		t.Fatalf("records written without their offsets or of given-up partitions: %v", got)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn); len(got) != 0 {
		t.Fatalf("offsets committed for given-up partitions: %v", got)
	}
}

// restampAfterRebalance: the offsets of an epoch were planned under a
// generation that a rebalance moved on (the member kept the partition): the
// coordinator answers ILLEGAL_GENERATION, and the output commits them under
// the current generation instead of aborting the epoch. The member is a real
// one (a franz-go consumer in the group), so the coordinator checks it.
func restampAfterRebalance(t *testing.T, e k2kTopics, txnID string) {
	cl, mem, gen := joinGroup(t, e.brokers, e.grp, e.in)
	defer cl.Close()
	o := newTestOutput(t, newResources(), yamlFor(e.brokers, e.out, txnID, "consumer_group: "+e.grp))
	fg := &fakeGroup{owned: map[int32]uint64{0: 1}, gen: gen, member: mem, stale: 500 * time.Millisecond}
	o.Member(fg)
	o.StartAt(map[string]map[int32]int64{e.in: {0: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := batchOf("r", 3)
	handover.WithSpan(b, handover.Span{Topic: e.in, Partition: 0, From: 0, To: 10, Generation: gen - 1, MemberID: mem, Assignment: 1})
	if err := o.WriteBatch(ctx, b); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got := o.m.tally.get(metricK2KRebalance + "/" + k2kRestamped); got != 1 {
		t.Fatalf("restamped %d times, want 1 (the first TxnOffsetCommit, under generation %d, should have been rejected)", got, gen-1)
	}
	if got := groupOffsets(t, e.brokers, e.grp, e.in); got[0] != 10 {
		t.Fatalf("committed %v, want 0:10", got)
	}
	if got := readCommitted(t, e.brokers, e.out); len(got) != 3 {
		t.Fatalf("output %v, want 3 records", got)
	}
}

// TestK2KMemberMixedStaleBatch: with group_membership and output batching,
// one output batch merges input batches of a partition this member still
// owns with input batches of one it gave up (read before the revoke, nacked
// by the epoch the revoke aborted, and replayed together by the input's
// retry list). The given-up input batches are acknowledged unwritten, as a
// batch of them alone is (the partition's next owner reads them again), and
// the owned ones are written with their offsets. Nacking the whole batch
// instead stalls the owned partition for good: every replay merges the same
// input batches again (seed 2912630832260719389 hung with in/0 ten records
// short, "a batch mixes records of partitions this member owns and of ones
// it gave up" logged every second).
func TestK2KMemberMixedStaleBatch(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	o := k2kOutput(t, newResources(), brokers, "k2k-member-mixed")
	// A real member of the group, so that the coordinator takes the
	// transactional commits of its generation.
	cl, mem, gen := joinGroup(t, brokers, k2kGroup, k2kIn)
	defer cl.Close()
	fg := &fakeGroup{owned: map[int32]uint64{0: 1, 1: 1}, gen: gen, member: mem}
	o.Member(fg)
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0, 1: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// One input batch per record (in_batch 1), merged by output batching:
	// p0 [0, 3) and p1 [0, 2), each record its own span.
	merged := func() service.MessageBatch {
		var b service.MessageBatch
		for off := int64(0); off < 3; off++ {
			m := k2kSourced("p0", 0, off, off+1)
			handover.WithSpan(m, memberSpan(0, off, off+1, 1))
			b = append(b, m...)
		}
		for off := int64(0); off < 2; off++ {
			m := k2kSourced("p1", 1, off, off+1)
			handover.WithSpan(m, memberSpan(1, off, off+1, 1))
			b = append(b, m...)
		}
		return b
	}
	// Partition 1 is revoked (another member takes it) before the batch
	// reaches the output.
	fg.revoke(1)
	o.Revoked(ctx, map[string][]int32{k2kIn: {1}})
	b := merged()
	if err := o.WriteBatch(ctx, b); err != nil {
		t.Fatalf("batch merging owned and given-up input batches: %v, want the owned written and the given-up dropped", err)
	}
	want := map[string]int{"p0-0": 1, "p0-1": 1, "p0-2": 1}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("visible %v, want %v (the owned partition's records once, nothing of the given-up one)", got, want)
	}
	got := groupOffsets(t, brokers, k2kGroup, k2kIn)
	if got[0] != 3 {
		t.Fatalf("committed offset of partition 0: %d, want 3", got[0])
	}
	if _, ok := got[1]; ok {
		t.Fatalf("an offset committed for the given-up partition 1: %v", got)
	}
}
