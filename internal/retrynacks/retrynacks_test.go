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
