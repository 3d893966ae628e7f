package retrynacks

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// oneBatch reads one batch of the given values, then blocks; it records the
// acknowledgement of the batch.
type oneBatch struct {
	vals []string
	mu   sync.Mutex
	read bool
	acks []error
}

func (o *oneBatch) Connect(context.Context) error { return nil }

func (o *oneBatch) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	o.mu.Lock()
	read := o.read
	o.read = true
	o.mu.Unlock()
	if read {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	var b service.MessageBatch
	for _, v := range o.vals {
		b = append(b, service.NewMessage([]byte(v)))
	}
	return b, func(_ context.Context, err error) error {
		o.mu.Lock()
		o.acks = append(o.acks, err)
		o.mu.Unlock()
		return nil
	}, nil
}

func (o *oneBatch) Close(context.Context) error { return nil }

func (o *oneBatch) acked() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.acks)
}

// reject returns a BatchError over b failing every message but the one at
// index keep (-1: every message).
func reject(b service.MessageBatch, keep int) error {
	berr := service.NewBatchError(b, errors.New("rejected"))
	for i := range b {
		if i != keep {
			berr = berr.Failed(i, errors.New("rejected"))
		}
	}
	return berr
}

// rejectOnly returns a BatchError over b failing only the message at index i.
func rejectOnly(b service.MessageBatch, i int) error {
	return service.NewBatchError(b, errors.New("rejected")).Failed(i, errors.New("rejected"))
}

func values(t *testing.T, b service.MessageBatch) []string {
	t.Helper()
	var out []string
	for _, m := range b {
		v, err := m.AsBytes()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(v))
	}
	return out
}

func read(t *testing.T, in service.BatchInput) (service.MessageBatch, service.AckFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, ack, err := in.ReadBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return b, ack
}

// The path of a record acknowledged but never written (dedupe mode behind a
// dead-letter route, under output batching): the route takes the unwritable
// message m2 and rejects the others (a first narrowing); the replay of the
// four is rejected again as a BatchError (the output refused the batch, the
// route rejected every message; or it rejected one). Benthos'
// AutoRetryNacksBatched then keeps the messages at the first-read indexes of
// the failed ones in the batch it keeps: every message rejected, it replays
// m0, m1, m4 (m3 dropped, and acknowledged with the batch once the replay
// is); m3 alone rejected (first-read index 3), it replays m4. Wrap replays
// the rejected ones.
func TestSecondNarrowingKeepsEveryMessage(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		second func(service.MessageBatch) error
		want   []string
	}{
		{"every message rejected", func(b service.MessageBatch) error { return reject(b, -1) }, []string{"m0", "m1", "m3", "m4"}},
		{"one message rejected", func(b service.MessageBatch) error { return rejectOnly(b, 2) }, []string{"m3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := &oneBatch{vals: []string{"m0", "m1", "m2", "m3", "m4"}}
			in := Wrap(src)
			b, ack := read(t, in)
			if err := ack(ctx, reject(b.Copy(), 2)); err != nil { // m2 taken by the route
				t.Fatal(err)
			}
			b, ack = read(t, in)
			if got, want := values(t, b), []string{"m0", "m1", "m3", "m4"}; !slices.Equal(got, want) {
				t.Fatalf("first replay %v, want %v", got, want)
			}
			if err := ack(ctx, c.second(b.Copy())); err != nil {
				t.Fatal(err)
			}
			b, ack = read(t, in)
			if got := values(t, b); !slices.Equal(got, c.want) {
				t.Fatalf("second replay %v, want %v (a message missing here is acknowledged with the batch, never written)", got, c.want)
			}
			if a := src.acked(); len(a) != 0 {
				t.Fatalf("the batch was acknowledged (%v) before its replay was", a)
			}
			if err := ack(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if a := src.acked(); len(a) != 1 || a[0] != nil {
				t.Fatalf("acknowledgements of the batch %v, want one, nil", a)
			}
		})
	}
}

// Two messages that cannot be written in one input batch, behind a route
// that dead-letters only the message its error names, under output batching
// (every message of the input batch gets the first failed one's error): the
// route takes m1 and rejects the others; on the replay it takes m2 and
// rejects m0, m3, m4. The next replay holds exactly those three: not m2
// (replayed, the route's message would come back to the output, which stops
// as on a message sent back), and none of the rejected ones dropped (Benthos
// replays m0 and m4: its index 3 is m4 here, its index 4 past the end).
func TestSecondNarrowingSkipsTheRoutedMessage(t *testing.T) {
	ctx := context.Background()
	src := &oneBatch{vals: []string{"m0", "m1", "m2", "m3", "m4"}}
	in := Wrap(src)
	b, ack := read(t, in)
	if err := ack(ctx, reject(b.Copy(), 1)); err != nil {
		t.Fatal(err)
	}
	b, ack = read(t, in)
	if got, want := values(t, b), []string{"m0", "m2", "m3", "m4"}; !slices.Equal(got, want) {
		t.Fatalf("first replay %v, want %v", got, want)
	}
	if err := ack(ctx, reject(b.Copy(), 1)); err != nil {
		t.Fatal(err)
	}
	b, ack = read(t, in)
	if got, want := values(t, b), []string{"m0", "m3", "m4"}; !slices.Equal(got, want) {
		t.Fatalf("second replay %v, want %v", got, want)
	}
	// A third narrowing: m3 alone rejected.
	if err := ack(ctx, rejectOnly(b.Copy(), 1)); err != nil {
		t.Fatal(err)
	}
	b, ack = read(t, in)
	if got, want := values(t, b), []string{"m3"}; !slices.Equal(got, want) {
		t.Fatalf("third replay %v, want %v", got, want)
	}
	if a := src.acked(); len(a) != 0 {
		t.Fatalf("the batch was acknowledged (%v) before its replay was", a)
	}
	if err := ack(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if a := src.acked(); len(a) != 1 || a[0] != nil {
		t.Fatalf("acknowledgements of the batch %v, want one, nil", a)
	}
}

// The BatchError comes from what the pipeline made of the batch: an output
// batch holding messages of other input batches, in another order, some
// messages twice. The replay holds the failed messages of this batch, each
// once, in the batch's order.
func TestNarrowingThroughAnOutputBatch(t *testing.T) {
	ctx := context.Background()
	src := &oneBatch{vals: []string{"m0", "m1", "m2", "m3", "m4"}}
	in := Wrap(src)
	b, ack := read(t, in)
	if err := ack(ctx, reject(b.Copy(), 0)); err != nil { // m0 taken by the route
		t.Fatal(err)
	}
	b, ack = read(t, in) // m1 m2 m3 m4
	other := service.MessageBatch{service.NewMessage([]byte("x0")), service.NewMessage([]byte("x1"))}
	out := service.MessageBatch{other[0], b[3].Copy(), b[1].Copy(), other[1], b[3].Copy(), b[0].Copy()}
	berr := service.NewBatchError(out, errors.New("rejected")).
		Failed(0, errors.New("x0")). // another batch's
		Failed(1, errors.New("m4")). // m4
		Failed(2, errors.New("m2")). // m2
		Failed(4, errors.New("m4 again"))
	if err := ack(ctx, berr); err != nil {
		t.Fatal(err)
	}
	b, _ = read(t, in)
	if got, want := values(t, b), []string{"m2", "m4"}; !slices.Equal(got, want) {
		t.Fatalf("replay %v, want %v", got, want)
	}
}

// The pipeline may index the batch itself (a processor or an output that
// makes a Benthos sort group, as service.MessageBatch.Index does) and hand
// the output new messages derived from the ones handed out (their context
// carried over): the replay still holds the failed messages of this batch.
func TestNarrowingThroughAnIndexAndDerivedMessages(t *testing.T) {
	ctx := context.Background()
	src := &oneBatch{vals: []string{"m0", "m1", "m2", "m3"}}
	in := Wrap(src)
	b, ack := read(t, in)
	ix := b.Index()
	derived := service.MessageBatch{
		b[2].WithContext(context.WithValue(b[2].Context(), struct{ k int }{1}, "v")),
		service.NewMessageWithContext(b[0].Context(), []byte("from m0")),
		b[1].Copy(),
	}
	if ix.IndexOf(derived[0]) != 2 || ix.IndexOf(derived[1]) != 0 {
		t.Fatalf("the pipeline's own index lost its messages")
	}
	berr := service.NewBatchError(derived, errors.New("rejected")).
		Failed(0, errors.New("x")).
		Failed(1, errors.New("x"))
	if err := ack(ctx, berr); err != nil {
		t.Fatal(err)
	}
	b, _ = read(t, in)
	if got, want := values(t, b), []string{"m0", "m2"}; !slices.Equal(got, want) {
		t.Fatalf("replay %v, want %v", got, want)
	}
}

// A batch error over the messages of an earlier handout of the same batch
// names none of the replay's (as with a Benthos sort group, which is made
// per handout): the replay is the whole batch again, not a narrowing by the
// earlier handout's indexes. The replay's messages carry only the tag of
// their own handout: what the pipeline did to the earlier ones (metadata
// set) is not in them.
func TestNarrowingIgnoresAnEarlierHandout(t *testing.T) {
	ctx := context.Background()
	src := &oneBatch{vals: []string{"m0", "m1", "m2"}}
	in := Wrap(src)
	first, ack := read(t, in)
	first[1].MetaSetMut("set_by_pipeline", "yes")
	if err := ack(ctx, errors.New("rejected")); err != nil {
		t.Fatal(err)
	}
	b, ack := read(t, in)
	if _, ok := b[1].MetaGetMut("set_by_pipeline"); ok {
		t.Fatal("the replay carries metadata the pipeline set on the first handout")
	}
	if err := ack(ctx, rejectOnly(first.Copy(), 1)); err != nil {
		t.Fatal(err)
	}
	b, _ = read(t, in)
	if got, want := values(t, b), []string{"m0", "m1", "m2"}; !slices.Equal(got, want) {
		t.Fatalf("replay %v, want %v", got, want)
	}
}

// Messages tagged by two handouts (messages of one list read by another)
// are found by either's group.
func TestTagsNest(t *testing.T) {
	msgs := service.MessageBatch{service.NewMessage([]byte("a")), service.NewMessage([]byte("b"))}
	inner, gi := tagged(msgs)
	outer, go_ := tagged(service.MessageBatch{inner[1], inner[0]})
	if indexIn(outer[0], go_) != 0 || indexIn(outer[0], gi) != 1 || indexIn(outer[1], gi) != 0 {
		t.Fatalf("indexes %d %d %d, want 0 1 0", indexIn(outer[0], go_), indexIn(outer[0], gi), indexIn(outer[1], gi))
	}
	if indexIn(msgs[0], gi) != -1 || indexIn(service.NewMessage(nil), gi) != -1 {
		t.Fatal("an untagged message has an index")
	}
}

// A first rejection naming some messages still narrows the replay to them
// (a dead-letter route's messages are not replayed), and a narrowed batch
// whose messages kept their index (only the tail was dropped) narrows too.
func TestNarrowingStillNarrows(t *testing.T) {
	ctx := context.Background()
	src := &oneBatch{vals: []string{"m0", "m1", "m2", "m3", "m4"}}
	in := Wrap(src)
	b, ack := read(t, in)
	berr := service.NewBatchError(b, errors.New("rejected")).Failed(0, errors.New("x")).Failed(1, errors.New("x")).Failed(2, errors.New("x"))
	if err := ack(ctx, berr); err != nil {
		t.Fatal(err)
	}
	b, ack = read(t, in)
	if got, want := values(t, b), []string{"m0", "m1", "m2"}; !slices.Equal(got, want) {
		t.Fatalf("first replay %v, want %v", got, want)
	}
	if err := ack(ctx, rejectOnly(b.Copy(), 1)); err != nil {
		t.Fatal(err)
	}
	b, ack = read(t, in)
	if got, want := values(t, b), []string{"m1"}; !slices.Equal(got, want) {
		t.Fatalf("second replay %v, want %v", got, want)
	}
	if err := ack(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if a := src.acked(); len(a) != 1 || a[0] != nil {
		t.Fatalf("acknowledgements of the batch %v, want one, nil", a)
	}
}

// The Benthos behaviour Wrap works around, shown on
// service.AutoRetryNacksBatched alone: after a first narrowing, a BatchError
// rejecting every message of the replay drops one. If this test fails,
// Benthos maps the second rejection correctly and Wrap can go.
func TestBenthosSecondNarrowingDropsAMessage(t *testing.T) {
	ctx := context.Background()
	in := service.AutoRetryNacksBatched(&oneBatch{vals: []string{"m0", "m1", "m2", "m3", "m4"}})
	b, ack := read(t, in)
	if err := ack(ctx, reject(b.Copy(), 2)); err != nil {
		t.Fatal(err)
	}
	b, ack = read(t, in)
	if err := ack(ctx, reject(b.Copy(), -1)); err != nil {
		t.Fatal(err)
	}
	b, _ = read(t, in)
	if got, want := values(t, b), []string{"m0", "m1", "m4"}; !slices.Equal(got, want) {
		t.Fatalf("Benthos replayed %v; the loss this package works around was %v (m3 dropped)", got, want)
	}
}

// endless reads batches of 100 messages for ever.
type endless struct{ batch service.MessageBatch }

func (e *endless) Connect(context.Context) error { return nil }

func (e *endless) ReadBatch(context.Context) (service.MessageBatch, service.AckFunc, error) {
	return e.batch.Copy(), func(context.Context, error) error { return nil }, nil
}

func (e *endless) Close(context.Context) error { return nil }

// The cost of a batch read and acknowledged the first time, per message:
// Wrap against Benthos' AutoRetryNacksBatched alone (what it adds should be
// per batch only).
func BenchmarkFirstRead(b *testing.B) {
	for _, c := range []struct {
		name string
		wrap func(service.BatchInput) service.BatchInput
	}{{"wrap", Wrap}, {"benthos", service.AutoRetryNacksBatched}} {
		b.Run(c.name, func(b *testing.B) {
			batch := make(service.MessageBatch, 100)
			for i := range batch {
				batch[i] = service.NewMessage([]byte("value"))
			}
			in := c.wrap(&endless{batch: batch})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N / len(batch) {
				_, ack, err := in.ReadBatch(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := ack(ctx, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fixed reads the same batch for ever (no copy: Wrap never changes the
// messages it reads).
type fixed struct{ batch service.MessageBatch }

func (f *fixed) Connect(context.Context) error { return nil }

func (f *fixed) ReadBatch(context.Context) (service.MessageBatch, service.AckFunc, error) {
	return f.batch, func(context.Context, error) error { return nil }, nil
}

func (f *fixed) Close(context.Context) error { return nil }

// What Wrap allocates for a batch read and acknowledged the first time: per
// message its copy (message, part, data) and its tag's context, four
// allocations; the rest is per batch. service.MessageBatch.Index, which it
// used before, cost six more per message (a sort group tag and a copy of the
// batch for the indexer); this keeps them from coming back unnoticed.
func TestFirstReadAllocs(t *testing.T) {
	const n = 100
	batch := make(service.MessageBatch, n)
	for i := range batch {
		batch[i] = service.NewMessage([]byte("value"))
	}
	in := Wrap(&fixed{batch: batch})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(200, func() {
		_, ack, err := in.ReadBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ack(ctx, nil); err != nil {
			t.Fatal(err)
		}
	})
	const perMessage, perBatch = 4, 20
	if allocs > perMessage*n+perBatch {
		t.Fatalf("%.0f allocations for a batch of %d read and acknowledged, want at most %d per message and %d per batch", allocs, n, perMessage, perBatch)
	}
	t.Logf("%.0f allocations for a batch of %d", allocs, n)
}

// batches reads one-message batches b0, b1, ... (n of them), then blocks; it
// records the acknowledgement of each.
type batches struct {
	n    int
	mu   sync.Mutex
	next int
	acks map[string]error
}

func (s *batches) Connect(context.Context) error { return nil }

func (s *batches) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	s.mu.Lock()
	i := s.next
	if i < s.n {
		s.next++
	}
	s.mu.Unlock()
	if i >= s.n {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	v := "b" + string(rune('0'+i))
	return service.MessageBatch{service.NewMessage([]byte(v))}, func(_ context.Context, err error) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.acks == nil {
			s.acks = map[string]error{}
		}
		s.acks[v] = err
		return nil
	}, nil
}

func (s *batches) Close(context.Context) error { return nil }

// Batches nacked in another order than they were read (an aborted epoch
// behind a dead-letter route nacks its batches through the route, shuffled)
// are replayed in the order they were read: per partition, source order.
// Replayed in nack order, output batching merged scattered replays of which
// one continued the partition's run, the output nacked the rest again, and a
// Kafka-to-Kafka copy crawled for minutes.
func TestReplayInReadOrder(t *testing.T) {
	ctx := context.Background()
	src := &batches{n: 4}
	in := Wrap(src)
	acks := map[string]service.AckFunc{}
	for range 4 {
		b, ack := read(t, in)
		acks[values(t, b)[0]] = ack
	}
	for _, v := range []string{"b2", "b0", "b3", "b1"} {
		if err := acks[v](ctx, errors.New("rejected")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for range 4 {
		b, ack := read(t, in)
		got = append(got, values(t, b)...)
		if err := ack(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"b0", "b1", "b2", "b3"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v (the order read)", got, want)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.acks) != 4 {
		t.Fatalf("acknowledged %v, want the 4 batches", src.acks)
	}
	for v, err := range src.acks {
		if err != nil {
			t.Fatalf("%s acknowledged with %v", v, err)
		}
	}
}

// A batch rejected over and over is replayed every time (never dropped) and
// after a growing wait (never retried without backoff): the replays take at
// least the sum of the waits.
func TestReplayBacksOff(t *testing.T) {
	ctx := context.Background()
	src := &oneBatch{vals: []string{"m0"}}
	in := Wrap(src)
	b, ack := read(t, in)
	const n = 8
	var least time.Duration
	start := time.Now()
	for i := 1; i <= n; i++ {
		if err := ack(ctx, errors.New("rejected")); err != nil {
			t.Fatal(err)
		}
		least += replayDelay(i)
		b, ack = read(t, in)
		if got := values(t, b); !slices.Equal(got, []string{"m0"}) {
			t.Fatalf("replay %d: %v", i, got)
		}
	}
	if el := time.Since(start); el < least {
		t.Fatalf("%d replays took %v, less than their waits (%v)", n, el, least)
	}
	if a := src.acked(); len(a) != 0 {
		t.Fatalf("acknowledged %v before a replay was", a)
	}
}

// The wait before a replay starts at a millisecond, grows, and is capped.
func TestReplayDelay(t *testing.T) {
	if d := replayDelay(1); d != time.Millisecond {
		t.Fatalf("first wait %v, want 1ms", d)
	}
	prev := time.Duration(0)
	for i := 1; i < 200; i++ {
		d := replayDelay(i)
		if d < prev || d > maxReplayDelay || d <= 0 {
			t.Fatalf("wait %d: %v after %v (cap %v)", i, d, prev, maxReplayDelay)
		}
		prev = d
	}
	if prev != maxReplayDelay {
		t.Fatalf("wait after 200 rejections %v, want the cap %v", prev, maxReplayDelay)
	}
}

// The Benthos behaviour Wrap replaces, shown on service.AutoRetryNacksBatched
// alone: from its third replay on, a batch waits a backoff meant to start at
// a millisecond that starts at half a second (randomised to 250-750 ms), with
// the list's lock held. If this test fails, Benthos fixed its backoff.
func TestBenthosReplayWaitsHalfASecond(t *testing.T) {
	ctx := context.Background()
	in := service.AutoRetryNacksBatched(&oneBatch{vals: []string{"m0"}})
	_, ack := read(t, in)
	for range 2 {
		if err := ack(ctx, errors.New("rejected")); err != nil {
			t.Fatal(err)
		}
		_, ack = read(t, in)
	}
	if err := ack(ctx, errors.New("rejected")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	read(t, in)
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("Benthos' third replay waited %v; it waited 250-750 ms", el)
	}
}

// A batch rejected over and over waits longer before its replay than one
// rejected once, yet the replays go out in the order read: a rejected batch
// is not handed out before one read earlier that still waits. Handing out
// whichever was due first, an aborted Kafka-to-Kafka epoch's batches (each
// rejected once or twice) went out ahead of the batch before them (rejected
// many times, waiting up to a second), were rejected again as out of order,
// and so on: every batch ended up waiting a second, and a gap of the
// partition was filled about once a second.
func TestReplayWaitsForTheBatchReadBefore(t *testing.T) {
	ctx := context.Background()
	src := &batches{n: 3}
	in := Wrap(src)
	acks := map[string]service.AckFunc{}
	for range 3 {
		b, ack := read(t, in)
		acks[values(t, b)[0]] = ack
	}
	const n = 10 // b0's wait after its 10th rejection: 512 ms (the others wait 1 ms)
	for i := 1; i <= n; i++ {
		if err := acks["b0"](ctx, errors.New("rejected")); err != nil {
			t.Fatal(err)
		}
		if i == n {
			break
		}
		b, ack := read(t, in)
		if got := values(t, b); !slices.Equal(got, []string{"b0"}) {
			t.Fatalf("replay %d of b0: %v", i, got)
		}
		acks["b0"] = ack
	}
	for _, v := range []string{"b1", "b2"} { // each waits a millisecond
		if err := acks[v](ctx, errors.New("rejected")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for range 3 {
		b, ack := read(t, in)
		got = append(got, values(t, b)...)
		if err := ack(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"b0", "b1", "b2"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v (the order read, whatever each waits)", got, want)
	}
}
