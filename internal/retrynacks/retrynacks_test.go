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
// four is rejected whole as a BatchError (the output refused the batch, the
// route rejected every message). Benthos' AutoRetryNacksBatched then replays
// m0, m1, m4: m3 is dropped, and acknowledged with the batch once the replay
// is. Wrap replays all four.
func TestSecondNarrowingKeepsEveryMessage(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		second func(service.MessageBatch) error
	}{
		{"every message rejected", func(b service.MessageBatch) error { return reject(b, -1) }},
		{"one message rejected", func(b service.MessageBatch) error { return rejectOnly(b, 2) }},
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
			if got, want := values(t, b), []string{"m0", "m1", "m3", "m4"}; !slices.Equal(got, want) {
				t.Fatalf("second replay %v, want %v (a message missing here is acknowledged with the batch, never written)", got, want)
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

// The cost per message of stamping a batch as read (the context value and
// the message copy Wrap adds to every message).
func BenchmarkStamp(b *testing.B) {
	batch := make(service.MessageBatch, 100)
	for i := range batch {
		batch[i] = service.NewMessage([]byte("value"))
	}
	s := &stamp{BatchInput: nil}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.stampBatch(slices.Clone(batch))
	}
}
