package statecache

import (
	"errors"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// TestRefreshAfterTombstoneCompactedAway: a reader that does not refresh for
// longer than delete.retention.ms can find the tombstone of a key it holds
// removed by compaction, together with the value it deleted. Reading on from
// where it stopped, it would serve the deleted value forever; it must read
// the topic again from the start instead.
func TestRefreshAfterTombstoneCompactedAway(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	const retention = time.Second
	b.createTopic(t, topic, 1, "cleanup.policy", "compact", "delete.retention.ms", "1000")
	ctx := testCtx(t)

	writer := b.newCache(t, topic)
	mustSet(t, writer, "gone", "v")
	mustSet(t, writer, "kept", "v")
	reader := b.newCache(t, topic)
	wantValue(t, reader, "gone", "v")
	// franz-go fetches ahead of the polls: a client that happened to
	// fetch the tombstone before compaction holds it. A busy topic
	// (a buffered fetch of other records) or a reconnect does not;
	// pausing the partition drops what the client buffered.
	reader.cl.PauseFetchPartitions(map[string][]int32{topic: {0}})

	if err := writer.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	mustSet(t, writer, "later", "v") // compaction keeps the last batch whatever it is
	time.Sleep(retention + 500*time.Millisecond)
	b.kfake.Compact()
	// Compaction removed the tombstone and the value it deleted.
	if _, err := b.newCache(t, topic).Get(ctx, "gone"); !errors.Is(err, service.ErrKeyNotFound) {
		t.Fatalf("a new process after compaction: %v, want ErrKeyNotFound", err)
	}

	reader.cl.ResumeFetchPartitions(map[string][]int32{topic: {0}})
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := reader.Get(ctx, "gone"); !errors.Is(err, service.ErrKeyNotFound) {
		t.Fatalf("Get of a key deleted while the reader slept past delete.retention.ms: %q, %v; want ErrKeyNotFound", v, err)
	}
	wantValue(t, reader, "kept", "v")
	wantValue(t, reader, "later", "v")
}

// TestDeletedKeysForgotten: a deleted key leaves memory once a read has
// passed its tombstone (nothing older of the key can be read after that),
// unless the delete carried a fence token, which must keep fencing.
func TestDeletedKeysForgotten(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	ctx := testCtx(t)
	c := b.newCache(t, topic)
	held := func() int {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return len(c.v.entries)
	}
	for i := 0; i < 100; i++ {
		k := "k" + string(rune('0'+i%10)) + string(rune('0'+i/10))
		mustSet(t, c, k, "v")
		if err := c.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(WithFence(ctx, 5), "fenced"); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 1 {
		t.Fatalf("%d keys held after 100 keys were deleted and read past, want 1 (the fenced delete)", n)
	}
	if err := c.Set(WithFence(ctx, 4), "fenced", []byte("x"), nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("Set with token 4 after a delete with token 5: %v, want ErrFenced", err)
	}
	// A deleted key can be written again, and a new process agrees.
	mustSet(t, c, "k00", "again")
	wantValue(t, b.newCache(t, topic), "k00", "again")
	if _, err := b.newCache(t, topic).Get(ctx, "k01"); !errors.Is(err, service.ErrKeyNotFound) {
		t.Fatalf("Get of a deleted key in a new process: %v", err)
	}
}
