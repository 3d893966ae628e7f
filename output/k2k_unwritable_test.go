package output

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/handover"
)

// k2kSourced is the batch kafka_native makes of source offsets [from, to) of
// partition p of the input topic (k2kIn): one message per offset, named "<prefix>-<offset>",
// each with its source metadata and the batch's span; the messages at the
// offsets in big are larger than max_message_bytes.
func k2kSourced(prefix string, p int32, from, to int64, big ...int64) service.MessageBatch {
	return sourcedOf(k2kIn, prefix, p, from, to, big...)
}

// sourcedOf is k2kSourced for input topic in.
func sourcedOf(in, prefix string, p int32, from, to int64, big ...int64) service.MessageBatch {
	var b service.MessageBatch
	for off := from; off < to; off++ {
		m := service.NewMessage([]byte(prefix + "-" + strconv.FormatInt(off, 10)))
		for _, x := range big {
			if x == off {
				m.SetBytes(make([]byte, 1000))
			}
		}
		m.MetaSetMut("kafka_topic", in)
		m.MetaSetMut("kafka_partition", int64(p))
		m.MetaSetMut("kafka_offset", off)
		b = append(b, m)
	}
	handover.WithSpan(b, handover.Span{Topic: in, Partition: p, From: from, To: to, Generation: -1})
	return b
}

// TestK2KUnwritableCrashBeforeDeadLetter: a message that cannot be written
// fails back to Benthos (for a dead-letter route) while its batch-mates are
// written and committed. The process dies before the dead-letter output
// acknowledged it (the input never hands its offset over): the group's
// offset must not have passed it, so that the next owner reads it again, and
// the batch-mates written with it (and a later batch of its partition) are
// not written twice by the next owner. On the code before, the epoch
// committed the source offset past the unwritable record with its
// batch-mates': the crash lost it for good.
func TestK2KUnwritableCrashBeforeDeadLetter(t *testing.T) {
	c := newK2KCluster(t)
	unwritableCrashBeforeDeadLetter(t, k2kTopics{brokers: c.ListenAddrs(), in: k2kIn, out: testTopic, grp: k2kGroup}, "k2k-dlq")
}

// TestK2KKafkaUnwritableCrashBeforeDeadLetter:
// TestK2KUnwritableCrashBeforeDeadLetter on Apache Kafka (the held offset's
// metadata committed in the transaction, read back by the next owner).
func TestK2KKafkaUnwritableCrashBeforeDeadLetter(t *testing.T) {
	forEachK2KKafka(t, unwritableCrashBeforeDeadLetter)
}

func unwritableCrashBeforeDeadLetter(t *testing.T, e k2kTopics, txnID string) {
	brokers := e.brokers
	res := newResources()
	yaml := yamlFor(brokers, e.out, txnID, "consumer_group: "+e.grp+"\nmax_message_bytes: 600\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, res, yaml, e.in, 0)
	// Offsets 0 to 3; offset 1 is too large.
	b1 := sourcedOf(e.in, "a", 0, 0, 4, 1)
	err := a.WriteBatch(ctx, b1)
	if !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("first batch: %v, want offset 1 failed", err)
	}
	if got := blamed(b1, err); len(got) != 1 || got[1] == nil {
		t.Fatalf("first batch: blamed %v, want offset 1 alone", got)
	}
	// A later batch of the partition commits while the dead-letter route
	// has not acknowledged offset 1 yet.
	if err := a.WriteBatch(ctx, sourcedOf(e.in, "a", 0, 4, 6)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a-0": 1, "a-2": 1, "a-3": 1, "a-4": 1, "a-5": 1}
	if got := countsIn(t, brokers, e.out); !maps.Equal(got, want) {
		t.Fatalf("before the crash: visible %v, want %v", got, want)
	}
	committed := groupOffsets(t, brokers, e.grp, e.in)[0]
	if committed > 1 {
		t.Fatalf("the group's offset of %s/0 is %d, past offset 1, which no output holds yet: a crash now loses it", e.in, committed)
	}

	// The process dies: the dead-letter output never took offset 1. The
	// next owner reads the partition again from the group's offset.
	handover.ReleaseCommitTakeover(res, e.grp, a)
	b := startK2K(ctx, t, res, yaml, e.in, committed)
	replay := sourcedOf(e.in, "a", 0, committed, 6, 1)
	err = b.WriteBatch(ctx, replay)
	got := blamed(replay, err)
	if len(got) != 1 || !errors.Is(got[int(1-committed)], ErrCannotWrite) {
		t.Fatalf("the next owner's replay from %d: blamed %v, want offset 1 failed alone (for the dead-letter route)", committed, got)
	}
	if got := countsIn(t, brokers, e.out); !maps.Equal(got, want) {
		t.Fatalf("after the replay: visible %v, want %v (each once)", got, want)
	}
	// The dead-letter route took offset 1: the input hands the batch over.
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{e.in: {0: 6}}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, e.grp, e.in)[0]; got != 6 {
		t.Fatalf("after the dead-letter route's ack: committed %d, want 6", got)
	}
}

// TestK2KUnwritableAckedThenCommitted: without a crash, the offset held at
// an unwritable message moves once the dead-letter route acknowledged it (the
// input hands its batch's end over), in an epoch of offsets only.
func TestK2KUnwritableAckedThenCommitted(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	yaml := baseYAML(brokers, "k2k-dlq2", "consumer_group: "+k2kGroup+"\nmax_message_bytes: 600\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, newResources(), yaml, k2kIn, 0)
	if err := a.WriteBatch(ctx, k2kSourced("a", 0, 0, 4, 2)); !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("%v, want offset 2 failed", err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 2 {
		t.Fatalf("committed %d before the dead-letter route's ack, want 2 (held at the unwritable record)", got)
	}
	// A later batch commits while the offset is still held.
	if err := a.WriteBatch(ctx, k2kSourced("a", 0, 4, 7)); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 2 {
		t.Fatalf("committed %d after a later batch, want 2 (still held)", got)
	}
	// The route took offset 2: the input hands its batch's end over. The
	// offset moves to where the copy reached (7), not to that position
	// alone (a crash would write [4, 7) again).
	if err := a.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 4}}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 7 {
		t.Fatalf("committed %d after the ack, want 7", got)
	}
	if got, want := counts(t, brokers), map[string]int{"a-0": 1, "a-1": 1, "a-3": 1, "a-4": 1, "a-5": 1, "a-6": 1}; !maps.Equal(got, want) {
		t.Fatalf("visible %v, want %v", got, want)
	}
}

// TestK2KMemberUnwritableReassigned: with group_membership, a partition
// whose offset is held at an unacknowledged message is revoked and assigned
// again (an eager rebalance): the output reads the offset's metadata for the
// new assignment, so the replay from the held offset fails the message again
// for the route and does not write the records past it twice.
func TestK2KMemberUnwritableReassigned(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), baseYAML(brokers, "k2k-dlq-member", "consumer_group: "+k2kGroup+"\nmax_message_bytes: 600\n"))
	// A real member of the group (a franz-go consumer), so that the
	// coordinator takes the transactional commits of its generation.
	cl, mem, gen := joinGroup(t, brokers, k2kGroup, k2kIn)
	defer cl.Close()
	fg := &fakeGroup{owned: map[int32]uint64{0: 1}, gen: gen, member: mem}
	o.Member(fg)
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	read := func(from, to int64, id uint64, big ...int64) service.MessageBatch {
		b := k2kSourced("a", 0, from, to, big...)
		handover.WithSpan(b, memberSpan(0, from, to, id))
		return b
	}
	if err := o.WriteBatch(ctx, read(0, 4, 1, 1)); !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("%v, want offset 1 failed", err)
	}
	if err := o.WriteBatch(ctx, read(4, 6, 1)); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 1 {
		t.Fatalf("committed %d, want 1 (held at the unwritable record)", got)
	}
	// The rebalance: revoked, then assigned again (assignment 2), read
	// from the group's offset.
	fg.revoke(0)
	o.Revoked(ctx, map[string][]int32{k2kIn: {0}})
	fg.mu.Lock()
	fg.owned[0] = 2
	fg.mu.Unlock()
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 1}})
	replay := read(1, 6, 2, 1)
	err := o.WriteBatch(ctx, replay)
	if got := blamed(replay, err); len(got) != 1 || !errors.Is(got[0], ErrCannotWrite) {
		t.Fatalf("replay: blamed %v, want offset 1 failed alone", got)
	}
	want := map[string]int{"a-0": 1, "a-2": 1, "a-3": 1, "a-4": 1, "a-5": 1}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("visible %v, want %v (each once)", got, want)
	}
	if err := o.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 6}}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 6 {
		t.Fatalf("after the route's ack: committed %d, want 6", got)
	}
}

// splitSourced is sourcedOf where a processor split the record at offset
// split into n messages ("<prefix>-<split>.<j>", each with the record's
// source metadata), of which message bad is larger than max_message_bytes.
func splitSourced(in, prefix string, p int32, from, to, split int64, n, bad int) service.MessageBatch {
	var b service.MessageBatch
	for _, m := range sourcedOf(in, prefix, p, from, to) {
		off, _ := sourceOffset(m)
		if off != split {
			b = append(b, m)
			continue
		}
		for j := range n {
			s := m.Copy()
			s.SetBytes([]byte(prefix + "-" + strconv.FormatInt(off, 10) + "." + strconv.Itoa(j)))
			if j == bad {
				s.SetBytes(make([]byte, 1000))
			}
			b = append(b, s)
		}
	}
	return b
}

// TestK2KUnwritableSiblingsCrashBeforeDeadLetter: a processor split the
// source record at offset 1 into three messages, of which the second cannot
// be written. None of the three is written: they all fail for the
// dead-letter route. The process dies before the route took them: the next
// owner reads from the held offset, the processor splits the record again,
// and the three fail again, nothing written twice. On the code before, the
// two others were written beside the failed one, and written again by the
// next owner (the offset's metadata names records, not messages).
func TestK2KUnwritableSiblingsCrashBeforeDeadLetter(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := yamlFor(brokers, testTopic, "k2k-dlq-siblings", "consumer_group: "+k2kGroup+"\nmax_message_bytes: 600\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, res, yaml, k2kIn, 0)
	// Messages 1 to 3 of the batch are the pieces of offset 1.
	pieces := func(b service.MessageBatch, err error, first int) {
		t.Helper()
		got := blamed(b, err)
		if len(got) != 3 {
			t.Fatalf("blamed %v, want the three pieces of offset 1 (messages %d to %d) failed", got, first, first+2)
		}
		for i := first; i < first+3; i++ {
			if !errors.Is(got[i], ErrCannotWrite) {
				t.Fatalf("message %d (a piece of offset 1): %v, want it failed for the dead-letter route", i, got[i])
			}
		}
	}
	b1 := splitSourced(k2kIn, "a", 0, 0, 4, 1, 3, 1)
	err := a.WriteBatch(ctx, b1)
	pieces(b1, err, 1)
	if err := a.WriteBatch(ctx, sourcedOf(k2kIn, "a", 0, 4, 6)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a-0": 1, "a-2": 1, "a-3": 1, "a-4": 1, "a-5": 1}
	if got := countsIn(t, brokers, testTopic); !maps.Equal(got, want) {
		t.Fatalf("before the crash: visible %v, want %v", got, want)
	}
	committed := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]
	if committed != 1 {
		t.Fatalf("the group's offset is %d, want 1 (held at the unwritable record)", committed)
	}

	// The process dies before the dead-letter route took the record.
	handover.ReleaseCommitTakeover(res, k2kGroup, a)
	b := startK2K(ctx, t, res, yaml, k2kIn, committed)
	replay := splitSourced(k2kIn, "a", 0, committed, 6, 1, 3, 1)
	err = b.WriteBatch(ctx, replay)
	pieces(replay, err, 0)
	if got := countsIn(t, brokers, testTopic); !maps.Equal(got, want) {
		t.Fatalf("after the replay: visible %v, want %v (each once)", got, want)
	}
	// The route took the record: the input hands the batch over.
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 6}}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 6 {
		t.Fatalf("after the route's ack: committed %d, want 6", got)
	}
}

// TestK2KUnwritableZombieBeforeDeadLetter: the shape of the simulation's
// seeds 8161861579037314397 and 1327419902656170225 (several pipeline threads,
// a zombie). An instance's epoch commits a batch holding a message that
// cannot be written, and the instance freezes right after the EndTxn, before
// its batch is acknowledged, so before a dead-letter route could take the
// message. A rival with the same transactional_id starts meanwhile: its
// recovery finds the epoch committed, and it reads the partition again from
// the group's offset. That offset must not have passed the message: the
// rival fails it again for the route, writes nothing twice, and the frozen
// instance, woken, commits nothing more. On the code before the held offset
// the epoch committed the offset past the message with its batch-mates', the
// rival started past it, and the frozen instance (fenced, stopped in doubt)
// never handed it to the route: it was in neither output.
func TestK2KUnwritableZombieBeforeDeadLetter(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := baseYAML(brokers, "k2k-dlq-zombie", "consumer_group: "+k2kGroup+"\nmax_message_bytes: 600\n")
	a := newUnconnected(t, res, yaml)
	ended := make(chan struct{})
	release := make(chan struct{})
	a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
		if s == stepEnded && n == 1 {
			close(ended)
			<-release // frozen after the EndTxn, before the ack
		}
		return nil
	}}
	// Registered after newUnconnected's Close: runs before it.
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	a.StartAt(map[string]map[int32]int64{k2kIn: {0: 0}})
	// Offsets 0 to 3; offset 1 is too large.
	errA := make(chan error, 1)
	go func() { errA <- a.WriteBatch(ctx, k2kSourced("a", 0, 0, 4, 1)) }()
	select {
	case <-ended:
	case err := <-errA:
		t.Fatalf("the first batch returned %v before its epoch committed", err)
	case <-ctx.Done():
		t.Fatal("epoch 1 never committed")
	}
	want := map[string]int{"a-0": 1, "a-2": 1, "a-3": 1}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("epoch 1 committed: visible %v, want %v", got, want)
	}
	committed := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]
	if committed > 1 {
		t.Fatalf("the group's offset of %s/0 is %d, past offset 1, which no dead-letter route took yet (the instance is frozen before its ack): lost if it never wakes", k2kIn, committed)
	}

	// The rival: same transactional_id, same state cache, the frozen
	// instance still running. Its start fences the frozen one's slots.
	handover.ReleaseCommitTakeover(res, k2kGroup, a)
	b := startK2K(ctx, t, res, yaml, k2kIn, committed)
	replay := k2kSourced("a", 0, committed, 4, 1)
	err := b.WriteBatch(ctx, replay)
	if got := blamed(replay, err); len(got) != 1 || !errors.Is(got[int(1-committed)], ErrCannotWrite) {
		t.Fatalf("the rival's replay from %d: blamed %v, want offset 1 failed alone (for the dead-letter route)", committed, got)
	}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("after the rival's replay: visible %v, want %v (each once)", got, want)
	}

	// The frozen instance wakes: whatever it answers its batch, it
	// commits nothing more (its slots are fenced).
	close(release)
	select {
	case <-errA:
	case <-ctx.Done():
		t.Fatal("the woken instance's batch never returned")
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != committed {
		t.Fatalf("after the frozen instance woke: committed %d, want %d (held)", got, committed)
	}
	// The route took offset 1 from the rival: its input hands the batch
	// over, and the offset moves to where the copy reached.
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 4}}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 4 {
		t.Fatalf("after the dead-letter route's ack: committed %d, want 4", got)
	}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("at the end: visible %v, want %v", got, want)
	}
}

// writePastUnwritable has a (the owner of partition 0 of k2kIn from offset 0)
// write offsets 0 to 3, of which offset 1 is too large and fails (for the
// dead-letter route), then [4, 8), written while the group's offset is held
// at 1: the previous owner's copy that the next owner's replay meets.
func writePastUnwritable(ctx context.Context, t *testing.T, a *output) {
	t.Helper()
	if err := a.WriteBatch(ctx, k2kSourced("a", 0, 0, 4, 1)); !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("first batch: %v, want offset 1 failed", err)
	}
	if err := a.WriteBatch(ctx, k2kSourced("a", 0, 4, 8)); err != nil {
		t.Fatal(err)
	}
}

// TestK2KUnwritableReplayPastHeldOffsetMoved: the next owner of a partition
// whose offset was held at an unwritable message replays the records the
// previous owner wrote past it. The route takes the message early in the
// replay (the input hands a position past it over), and the offset moves at
// once to where the previous owner's copy reached: those records are
// committed. The replay of the records past that position, still on its way
// through the pipeline, must then be acknowledged without being written
// again. On the code before, the commit of the moved offset dropped what the
// offset's metadata said, and the rest of the replay was written twice
// (simulation seed 7547191673214153196: output batching, max_in_flight 64,
// a SIGTERM while the offset was held).
func TestK2KUnwritableReplayPastHeldOffsetMoved(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := baseYAML(brokers, "k2k-dlq-moved", "consumer_group: "+k2kGroup+"\nmax_message_bytes: 600\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, res, yaml, k2kIn, 0)
	writePastUnwritable(ctx, t, a)
	want := map[string]int{"a-0": 1, "a-2": 1, "a-3": 1, "a-4": 1, "a-5": 1, "a-6": 1, "a-7": 1}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("before the stop: visible %v, want %v", got, want)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 1 {
		t.Fatalf("the group's offset of %s/0 is %d, want 1 (held at the unwritable record)", k2kIn, got)
	}

	// The instance stops before the route took offset 1; the next owner
	// reads the partition again from the held offset.
	handover.ReleaseCommitTakeover(res, k2kGroup, a)
	b := startK2K(ctx, t, res, yaml, k2kIn, 1)
	replay := k2kSourced("a", 0, 1, 4, 1)
	err := b.WriteBatch(ctx, replay)
	if got := blamed(replay, err); len(got) != 1 || !errors.Is(got[0], ErrCannotWrite) {
		t.Fatalf("the replay of [1, 4): blamed %v, want offset 1 failed alone (for the dead-letter route)", got)
	}
	// The route took offset 1: the input hands [1, 4) over, and the
	// offset moves to where the previous owner's copy reached.
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 4}}); err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 8 {
		t.Fatalf("after the dead-letter route's ack: committed %d, want 8", got)
	}
	// The replay of [4, 8) comes after: written by the previous owner.
	if err := b.WriteBatch(ctx, k2kSourced("a", 0, 4, 8)); err != nil {
		t.Fatalf("the replay of [4, 8): %v", err)
	}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("after the replay of [4, 8): visible %v, want %v (each once)", got, want)
	}
	// The copy goes on past the previous owner's reach.
	if err := b.WriteBatch(ctx, k2kSourced("a", 0, 8, 10)); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 10}}); err != nil {
		t.Fatal(err)
	}
	want["a-8"], want["a-9"] = 1, 1
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("at the end: visible %v, want %v", got, want)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 10 {
		t.Fatalf("at the end: committed %d, want 10", got)
	}
}

// TestK2KWaitingBatchAcksTheRecordsThePreviousOwnerWrote: the next owner
// reads from the offset held at an unwritable record; the replay of that
// record's batch-mates (written by the previous owner, named by the offset's
// metadata) comes merged (output batching) with records past the previous
// owner's reach, which wait for the input to hand over the batches before
// them. Nacked after the wait, the batch nacks only the records still to be
// written: the ones the previous owner wrote are acknowledged, so that the
// input hands their batch over and the offset moves. Nacked whole, the
// batch-mates were never acknowledged, the offset stayed held, and the
// replays came back merged the same way: the copy cycled for good.
func TestK2KWaitingBatchAcksTheRecordsThePreviousOwnerWrote(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	res := newResources()
	yaml := baseYAML(brokers, "k2k-dlq-merged", "consumer_group: "+k2kGroup+"\nmax_message_bytes: 600\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startK2K(ctx, t, res, yaml, k2kIn, 0)
	writePastUnwritable(ctx, t, a)
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 1 {
		t.Fatalf("the group's offset of %s/0 is %d, want 1 (held at the unwritable record)", k2kIn, got)
	}

	// The next owner reads from the held offset. The dead-letter route took
	// offset 1 and sent its batch-mates 2 and 3 back; their replay merges
	// with [4, 10): [4, 8) written by the previous owner, [8, 10) not.
	handover.ReleaseCommitTakeover(res, k2kGroup, a)
	b := newTestOutput(t, res, yaml)
	b.calls = 1 // the only call Benthos may make waits: a short wait
	if err := b.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	b.StartAt(map[string]map[int32]int64{k2kIn: {0: 1}})
	merged := append(k2kSourced("a", 0, 1, 4, 1)[1:], k2kSourced("a", 0, 4, 10)...)
	err := b.WriteBatch(ctx, merged)
	if !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("the merged batch: %v, want ErrOutOfOrder ([8, 10) waits for the input to hand [1, 8) over)", err)
	}
	got := blamed(merged, err)
	for i := range merged {
		off, _ := sourceOffset(merged[i])
		switch e := got[i]; {
		case off < 8 && e != nil:
			t.Errorf("offset %d (written by the previous owner): %v, want acknowledged", off, e)
		case off >= 8 && !errors.Is(e, ErrOutOfOrder):
			t.Errorf("offset %d (not written yet): %v, want ErrOutOfOrder", off, e)
		}
	}
	// Acknowledged, the batch of offsets 1 to 3 is handed over (the route
	// took offset 1), then [4, 10) is replayed and written.
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 4}}); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteBatch(ctx, k2kSourced("a", 0, 4, 10)); err != nil {
		t.Fatalf("the replay of [4, 10): %v", err)
	}
	if err := b.CommitOffsets(ctx, map[string]map[int32]int64{k2kIn: {0: 10}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a-0": 1, "a-2": 1, "a-3": 1, "a-4": 1, "a-5": 1, "a-6": 1, "a-7": 1, "a-8": 1, "a-9": 1}
	if got := counts(t, brokers); !maps.Equal(got, want) {
		t.Fatalf("at the end: visible %v, want %v (each once)", got, want)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn)[0]; got != 10 {
		t.Fatalf("at the end: committed %d, want 10", got)
	}
}
