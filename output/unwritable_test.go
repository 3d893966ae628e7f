package output

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/handover"
)

// blamed returns, per message of batch, the error err gives it: a BatchError
// names messages one by one, any other error blames the whole batch.
func blamed(batch service.MessageBatch, err error) map[int]error {
	out := map[int]error{}
	if err == nil {
		return out
	}
	var be *service.BatchError
	if !errors.As(err, &be) || be.IndexedErrors() == 0 {
		for i := range batch {
			out[i] = err
		}
		return out
	}
	be.WalkMessages(func(i int, _ *service.Message, e error) bool {
		if e != nil {
			out[i] = e
		}
		return true
	})
	return out
}

// ackedMustBeVisible checks invariant I2 for one WriteBatch: every message
// err does not blame is acknowledged, so its value must be visible (once) to
// a read_committed reader.
func ackedMustBeVisible(t *testing.T, batch service.MessageBatch, err error, visible map[string]int) {
	t.Helper()
	b := blamed(batch, err)
	for i, m := range batch {
		if _, nacked := b[i]; nacked {
			continue
		}
		v, _ := m.AsBytes()
		if visible[string(v)] != 1 {
			t.Errorf("message %d (%s) acknowledged (not blamed by %v) but visible %d times", i, v, err, visible[string(v)])
		}
	}
}

// sourced sets the metadata kafka_native sets on a message of topic "src"
// partition p at offset off.
func sourced(m *service.Message, p int32, off int64) *service.Message {
	m.MetaSetMut("kafka_topic", "src")
	m.MetaSetMut("kafka_partition", int64(p))
	m.MetaSetMut("kafka_offset", off)
	return m
}

// One message that can never be written (too large, a partition that is not
// a number) in a batch of several, as output batching makes them: its
// batch-mates are written and committed or blamed, never acknowledged
// unwritten (invariant I2), in every mode; the failed message is blamed alone
// with an error naming its source and the field. On the original code
// toRecords returned a BatchError naming only the bad message and wrote
// nothing: Benthos acknowledged the others.
func TestAckedImpliesWritten(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		spoil       func(m *service.Message)
		field       string
	}{
		{"too-large", "max_message_bytes: 600\n", func(m *service.Message) { m.SetBytes(make([]byte, 1000)) }, "max_message_bytes"},
		{"bad-partition", "partitioner: manual\npartition: ${! meta(\"p\").or(\"0\") }\n", func(m *service.Message) { m.MetaSetMut("p", "x") }, "partition"},
	} {
		t.Run("plain/"+tc.name, func(t *testing.T) {
			c := newCluster(t)
			o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "acked", tc.extra))
			b := batchOf("plain", 4)
			for i, m := range b {
				sourced(m, 0, int64(100+i))
			}
			tc.spoil(b[1])
			err := o.WriteBatch(context.Background(), b)
			got := counts(t, c.ListenAddrs())
			ackedMustBeVisible(t, b, err, got)
			bl := blamed(b, err)
			if !errors.Is(bl[1], ErrCannotWrite) || !strings.Contains(bl[1].Error(), "topic src partition 0 offset 101") || !strings.Contains(bl[1].Error(), "field "+tc.field) {
				t.Fatalf("message 1: %v, want ErrCannotWrite naming its source and field %s", bl[1], tc.field)
			}
			if len(bl) != 1 {
				t.Fatalf("blamed %v, want message 1 alone (plain mode writes the others)", bl)
			}
		})
		t.Run("k2k/"+tc.name, func(t *testing.T) {
			c := newK2KCluster(t)
			o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "acked", tc.extra+"consumer_group: "+k2kGroup+"\n"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0, 1: 0}})
			// Two input batches in one output batch: partition 0
			// [0, 4) with its message at offset 1 spoiled, and
			// partition 1 [0, 2).
			p0, p1 := batchOf("p0", 4), batchOf("p1", 2)
			for i, m := range p0 {
				m.MetaSetMut("kafka_offset", int64(i))
			}
			for i, m := range p1 {
				m.MetaSetMut("kafka_offset", int64(i))
			}
			handover.WithSpan(p0, handover.Span{Topic: k2kIn, Partition: 0, From: 0, To: 4, Generation: -1})
			handover.WithSpan(p1, handover.Span{Topic: k2kIn, Partition: 1, From: 0, To: 2, Generation: -1})
			tc.spoil(p0[1])
			b := append(p0, p1...)
			err := o.WriteBatch(ctx, b)
			got := counts(t, c.ListenAddrs())
			ackedMustBeVisible(t, b, err, got)
			bl := blamed(b, err)
			if !errors.Is(bl[1], ErrCannotWrite) || !strings.Contains(bl[1].Error(), "field "+tc.field) {
				t.Fatalf("message 1: %v, want ErrCannotWrite naming field %s", bl[1], tc.field)
			}
			if len(bl) != 1 {
				t.Fatalf("blamed %v, want message 1 alone (the others are written)", bl)
			}
			// It is never acknowledged (a dead-letter output takes
			// it): partition 0's offset is held at it, not committed
			// past it with its batch-mates', until the input hands a
			// position past it over.
			wait(t, 10*time.Second, "offsets 0:1 1:2", func() bool {
				g := groupOffsets(t, c.ListenAddrs(), k2kGroup, k2kIn)
				return g[0] == 1 && g[1] == 2
			})
			// Benthos replays the whole input batch of a failed
			// message under output batching: the output stops before
			// writing anything of it again.
			fc, restore := catchFatal(t)
			defer restore()
			if err := o.WriteBatch(ctx, b); err == nil || fc.err() == nil || !strings.Contains(fc.err().Error(), "sent back") {
				t.Fatalf("replay: %v (fatal %v), want a stop naming the message sent back", err, fc.err())
			}
			got = counts(t, c.ListenAddrs())
			for v, n := range got {
				if n != 1 {
					t.Fatalf("%s visible %d times after the replay", v, n)
				}
			}
		})
		t.Run("dedupe/"+tc.name, func(t *testing.T) {
			c := newCluster(t)
			o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "acked", tc.extra+dedupeExtra))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b := append(posBatch("a", 1, 3), posBatch("b", 1, 2)...)
			tc.spoil(b[1]) // a@2
			err := o.WriteBatch(ctx, b)
			got := counts(t, c.ListenAddrs())
			ackedMustBeVisible(t, b, err, got)
			bl := blamed(b, err)
			if !errors.Is(bl[1], ErrCannotWrite) || bl[2] == nil || errors.Is(bl[2], ErrCannotWrite) || len(bl) != 2 {
				t.Fatalf("blamed %v, want a@2 unwritable and a@3 held back behind it", bl)
			}
			// a@3 is owed until replayed: a later a@4 waits for it.
			if err := o.WriteBatch(ctx, posBatch("a", 4, 4)); !errors.Is(err, ErrAwaitingReplay) {
				t.Fatalf("a@4 before the replay of a@3: %v, want ErrAwaitingReplay", err)
			}
			if err := o.WriteBatch(ctx, posBatch("a", 3, 4)); err != nil {
				t.Fatal(err)
			}
			got = counts(t, c.ListenAddrs())
			wantExactly(t, got, "a", 3, 4)
		})
	}
}

// A message reported unwritable and sent back (nacked, no route took it)
// stops the output with an error naming it, instead of looping.
func TestUnwritableSentBackStops(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "sentback", "max_message_bytes: 600\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := func() service.MessageBatch {
		return service.MessageBatch{sourced(service.NewMessage(make([]byte, 1000)), 2, 7)}
	}
	if err := o.WriteBatch(ctx, big()); !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("%v, want ErrCannotWrite", err)
	}
	if fc.err() != nil {
		t.Fatalf("stopped at the first report: %v", fc.err())
	}
	if err := o.WriteBatch(ctx, big()); err == nil {
		t.Fatal("acked")
	}
	if err := fc.err(); err == nil || !strings.Contains(err.Error(), "topic src partition 2 offset 7") || !strings.Contains(err.Error(), "sent back") {
		t.Fatalf("fatal %v, want a stop naming the message", err)
	}
	if err := o.WriteBatch(ctx, batchOf("after", 1)); err == nil {
		t.Fatal("a write after the stop was acked")
	}
}

var _ = fmt.Sprint

// Plain mode: the batch-mates of a message that cannot be written are
// written; sent back with it (a route that keeps only the failed message and
// rejects the others) and replayed, they are acknowledged without being
// written again. A message of the same source with another body (a
// processor that made several messages of one record) and a message not yet
// written are written.
func TestWrittenMatesReplayedNotWrittenAgain(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "mates", "max_message_bytes: 600\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := batchOf("m", 3)
	for i, m := range b {
		sourced(m, 0, int64(10+i))
	}
	b[1].SetBytes(make([]byte, 1000))
	if err := o.WriteBatch(ctx, b); !errors.Is(err, ErrCannotWrite) {
		t.Fatalf("%v, want message 1 failed", err)
	}
	// The replay: the two written ones, one more of offset 10 with another
	// body, and a new one.
	sibling := sourced(service.NewMessage([]byte("m-0-sibling")), 0, 10)
	replay := service.MessageBatch{sourced(service.NewMessage([]byte("m-0")), 0, 10), sourced(service.NewMessage([]byte("m-2")), 0, 12), sibling, sourced(service.NewMessage([]byte("m-3")), 0, 13)}
	if err := o.WriteBatch(ctx, replay); err != nil {
		t.Fatal(err)
	}
	got := counts(t, c.ListenAddrs())
	want := map[string]int{"m-0": 1, "m-2": 1, "m-0-sibling": 1, "m-3": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("visible %v, want %v", got, want)
	}
	if n := o.m.tally.get("replays_already_written"); n != 2 {
		t.Fatalf("replays_already_written %d, want 2", n)
	}
}
