package output

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/connect-eos/connect-eos/txnstate"
)

// mirrorLimit is the output's max_message_bytes in these tests: a message of
// mirrorTooBig cannot be written.
const mirrorLimit = "max_message_bytes: 600\n"

// mirrorTooBig is the value of a message larger than mirrorLimit.
var mirrorTooBig = strings.Repeat("x", 1000)

// mirrorCopyPastUnwritable sets up a position held at an unwritable message:
// writer x (e.id+"x", owning partition 0 of e.src under generation 1) claims
// the partition and copies offsets 0 to 3, of which offset 1 is too large and
// fails alone (for a dead-letter route), then offsets 4 and 5, which commit
// while the route has not acknowledged offset 1 yet. It returns what the
// target shows then (each record but offset 1's, once).
func mirrorCopyPastUnwritable(ctx context.Context, t *testing.T, e mirrorEnv) []string {
	t.Helper()
	x := mirrorOutputWith(t, e, e.id+"x", &fakeGroup{owned: map[int32]uint64{0: 1}, gen: 1, member: "m"}, mirrorLimit)
	claim(t, x, e, 0)
	x.StartAt(map[string]map[int32]int64{e.src: {0: 0}})
	// Offsets 0 to 3; offset 1 is too large.
	b1 := sourceBatch(e, 0, 0, 4)
	b1[1].SetBytes([]byte(mirrorTooBig))
	if got := blamed(b1, x.WriteBatch(ctx, b1)); len(got) != 1 || !errors.Is(got[1], ErrCannotWrite) {
		t.Fatalf("first batch: blamed %v, want offset 1 alone", got)
	}
	// A later batch of the partition commits while the dead-letter route
	// has not acknowledged offset 1 yet.
	if err := x.WriteBatch(ctx, sourceBatch(e, 0, 4, 2)); err != nil {
		t.Fatal(err)
	}
	want := []string{"v-0-0", "v-0-2", "v-0-3", "v-0-4", "v-0-5"}
	if got := readCommitted(t, e.b, e.dst); !slices.Equal(got, want) {
		t.Fatalf("before the crash: target %v, want %v", got, want)
	}
	return want
}

// mirrorTakeOverHeld starts y (e.id+"y"), partition 0's next owner after
// mirrorCopyPastUnwritable's x died: its claim (generation 2) fences x and
// must read the position held at the unwritable offset 1, where y is then
// told the partition starts.
func mirrorTakeOverHeld(t *testing.T, e mirrorEnv) *output {
	t.Helper()
	y := mirrorOutputWith(t, e, e.id+"y", &fakeGroup{owned: map[int32]uint64{0: 1}, gen: 2, member: "n"}, mirrorLimit)
	if got := claim(t, y, e, 0); got[0] != 1 {
		t.Fatalf("y's claim: position %v, want 1 (held at the unwritable record)", got)
	}
	y.StartAt(map[string]map[int32]int64{e.src: {0: 1}})
	return y
}

// TestMirrorUnwritableCrashBeforeDeadLetter: in mirror mode a message that
// cannot be written holds its partition's position at it until the input
// hands a position past it over (a dead-letter route took it), with where the
// copy reached past it in the positions record. The writer dies before the
// route took it; the partition's next owner claims it at the held position,
// fails the message again for its route, and acknowledges the records the
// first writer copied past it without copying them again.
func TestMirrorUnwritableCrashBeforeDeadLetter(t *testing.T) {
	testMirrorUnwritableCrashBeforeDeadLetter(t, newMirrorEnv(t, 3))
}

// The same on Apache Kafka (skipped without KAFKA_BROKERS_TV0/2), both ways
// between the two transaction versions.
func TestMirrorKafkaUnwritableCrashBeforeDeadLetter(t *testing.T) {
	forEachMirrorKafka(t, 3, testMirrorUnwritableCrashBeforeDeadLetter)
}

func testMirrorUnwritableCrashBeforeDeadLetter(t *testing.T, e mirrorEnv) {
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	sp := txnstate.SourcePartition{Topic: e.src, Partition: 0}

	want := mirrorCopyPastUnwritable(ctx, t, e)
	st := positionsOf(t, e)
	if n, _ := st.Next(sp); n > 1 {
		t.Fatalf("the position of %s/0 is %d, past offset 1, which no output holds yet: a crash now loses it", e.src, n)
	}

	// x dies: the dead-letter output never took offset 1. y takes the
	// partition over (fencing x) and reads it again from the position.
	y := mirrorTakeOverHeld(t, e)
	replay := sourceBatch(e, 0, 1, 5)
	replay[0].SetBytes([]byte(mirrorTooBig))
	err := y.WriteBatch(ctx, replay)
	if got := blamed(replay, err); len(got) != 1 || !errors.Is(got[0], ErrCannotWrite) {
		t.Fatalf("y's replay from 1: blamed %v, want offset 1 failed alone (for the dead-letter route)", got)
	}
	if got := readCommitted(t, e.b, e.dst); !slices.Equal(got, want) {
		t.Fatalf("after the replay: target %v, want %v (each once)", got, want)
	}
	// The dead-letter route took offset 1: the input hands the batch over.
	if err := y.CommitOffsets(ctx, map[string]map[int32]int64{e.src: {0: 6}}); err != nil {
		t.Fatal(err)
	}
	wait(t, mirrorDeadline, "the position at 6", func() bool {
		st := positionsOf(t, e)
		n, _ := st.Next(sp)
		return n == 6
	})
	if err := fc.err(); err != nil && !errors.As(err, new(*FencedError)) {
		t.Fatalf("stopped with %v", err)
	}
}

// TestMirrorUnwritableReplayPastHeldPositionMoved: the partition's next owner
// replays from a position held at an unwritable record; the route takes it
// early in the replay and the position moves at once to where the first
// writer's copy reached. The rest of the replay (records the first writer
// copied, still on their way through the pipeline) is acknowledged without
// being copied again.
func TestMirrorUnwritableReplayPastHeldPositionMoved(t *testing.T) {
	e := newMirrorEnv(t, 3)
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	sp := txnstate.SourcePartition{Topic: e.src, Partition: 0}

	want := mirrorCopyPastUnwritable(ctx, t, e)

	// x dies before the route took offset 1; y reads from the position.
	y := mirrorTakeOverHeld(t, e)
	replay := sourceBatch(e, 0, 1, 3)
	replay[0].SetBytes([]byte(mirrorTooBig))
	if got := blamed(replay, y.WriteBatch(ctx, replay)); len(got) != 1 || !errors.Is(got[0], ErrCannotWrite) {
		t.Fatalf("y's replay of [1, 4): blamed %v, want offset 1 failed alone (for the dead-letter route)", got)
	}
	// The route took offset 1: the input hands [1, 4) over, and the
	// position moves to where x's copy reached.
	if err := y.CommitOffsets(ctx, map[string]map[int32]int64{e.src: {0: 4}}); err != nil {
		t.Fatal(err)
	}
	wait(t, mirrorDeadline, "the position at 6", func() bool {
		st := positionsOf(t, e)
		n, _ := st.Next(sp)
		return n == 6
	})
	// The replay of 4 and 5 comes after: copied by x.
	if err := y.WriteBatch(ctx, sourceBatch(e, 0, 4, 2)); err != nil {
		t.Fatalf("y's replay of [4, 6): %v", err)
	}
	if got := readCommitted(t, e.b, e.dst); !slices.Equal(got, want) {
		t.Fatalf("after the replay of [4, 6): target %v, want %v (each once)", got, want)
	}
	if err := fc.err(); err != nil && !errors.As(err, new(*FencedError)) {
		t.Fatalf("stopped with %v", err)
	}
}
