package statecache

import (
	"context"
	"errors"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// endOffset returns the end offset of partition 0 of topic.
func (b *backend) endOffset(t testing.TB, topic string) int64 {
	t.Helper()
	los, err := b.admin(t).ListEndOffsets(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := los.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %v", topic, o.Err)
	}
	return o.Offset
}

// testFenceZombieWriteLoses plays the zombie: the live owner writes a key
// with token 5; a replaced owner, which loaded the topic before and never
// saw token 5, wakes up and writes the key with token 3, at a later offset.
// Every reader (the live owner refreshing, a new process loading) keeps the
// token 5 value, and the live owner's own writes with a lower token fail
// with ErrFenced without writing anything.
func testFenceZombieWriteLoses(t *testing.T, b *backend) {
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	ctx := testCtx(t)

	zombie := b.newCache(t, topic)
	if err := zombie.Set(WithFence(ctx, 3), "slot", []byte("zombie-old"), nil); err != nil {
		t.Fatal(err)
	}
	live := b.newCache(t, topic)
	if err := live.Set(WithFence(ctx, 5), "slot", []byte("live"), nil); err != nil {
		t.Fatal(err)
	}
	// The zombie has not read token 5: its write goes through, later.
	if err := zombie.Set(WithFence(ctx, 3), "slot", []byte("zombie"), nil); err != nil {
		t.Fatalf("the zombie's write (it has not seen token 5): %v", err)
	}

	if err := live.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, live, "slot", "live")
	wantValue(t, b.newCache(t, topic), "slot", "live")
	if err := zombie.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, zombie, "slot", "live")

	// Lower tokens, and no token at all, are refused before anything is
	// written; the key keeps its value.
	end := b.endOffset(t, topic)
	for _, w := range []struct {
		name string
		fn   func() error
	}{
		{"Set token 4", func() error { return live.Set(WithFence(ctx, 4), "slot", []byte("x"), nil) }},
		{"Set without a token", func() error { return live.Set(ctx, "slot", []byte("x"), nil) }},
		{"Delete token 4", func() error { return live.Delete(WithFence(ctx, 4), "slot") }},
		{"zombie Set token 3", func() error { return zombie.Set(WithFence(ctx, 3), "slot", []byte("x"), nil) }},
	} {
		err := w.fn()
		var fe *FencedError
		if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || fe.Key != "slot" || fe.Current != 5 {
			t.Fatalf("%s: %v, want ErrFenced naming key slot and token 5", w.name, err)
		}
	}
	if got := b.endOffset(t, topic); got != end {
		t.Fatalf("end offset %d after fenced writes, want %d (nothing written)", got, end)
	}
	wantValue(t, live, "slot", "live")

	// Equal and higher tokens write; among equal tokens the later wins.
	if err := live.Set(WithFence(ctx, 5), "slot", []byte("live-2"), nil); err != nil {
		t.Fatal(err)
	}
	wantValue(t, b.newCache(t, topic), "slot", "live-2")

	// A fenced delete: a later lower-token write does not bring the key
	// back.
	if err := live.Delete(WithFence(ctx, 6), "slot"); err != nil {
		t.Fatal(err)
	}
	other := b.newCache(t, topic)
	if err := other.Set(WithFence(ctx, 5), "slot", []byte("late"), nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("Set with token 5 after a delete with token 6: %v, want ErrFenced", err)
	}
	if err := zombie.Set(WithFence(ctx, 5), "slot", []byte("late"), nil); err != nil {
		t.Fatal(err) // the zombie still has not seen token 6
	}
	if _, err := b.newCache(t, topic).Get(ctx, "slot"); !errors.Is(err, service.ErrKeyNotFound) {
		t.Fatalf("Get after a delete with token 6 and a later write with token 5: %v, want ErrKeyNotFound", err)
	}
	// And a higher token writes it again.
	if err := other.Add(WithFence(ctx, 7), "slot", []byte("new-owner"), nil); err != nil {
		t.Fatal(err)
	}
	wantValue(t, b.newCache(t, topic), "slot", "new-owner")

	// Keys are fenced one by one.
	if err := live.Set(ctx, "other", []byte("plain"), nil); err != nil {
		t.Fatal(err)
	}
	wantValue(t, live, "other", "plain")
}

// TestFenceThroughResources checks that the context a Benthos component
// passes to a cache resource (Resources.AccessCache, as the kafka_eos output
// calls it) reaches the cache with its fence, and that ErrFenced comes back
// through the wrappers.
func TestFenceThroughResources(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	ctx := testCtx(t)

	rb := service.NewResourceBuilder()
	if err := rb.AddYAML(`
cache_resources:
  - label: state
    kafka_state:
      seed_brokers: [ "` + b.brokers[0] + `" ]
      topic: ` + topic + `
`); err != nil {
		t.Fatal(err)
	}
	res, stop, err := rb.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop(context.Background()) })

	set := func(ctx context.Context, v string) error {
		t.Helper()
		var serr error
		if err := res.AccessCache(ctx, "state", func(c service.Cache) { serr = c.Set(ctx, "slot", []byte(v), nil) }); err != nil {
			t.Fatal(err)
		}
		return serr
	}
	if err := set(WithFence(ctx, 5), "live"); err != nil {
		t.Fatal(err)
	}
	err = set(WithFence(ctx, 4), "stale")
	var fe *FencedError
	if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || fe.Token != 4 || fe.Current != 5 {
		t.Fatalf("Set with token 4 after token 5, through Resources: %v, want a FencedError (4 < 5)", err)
	}
	// The token went with the record: another process reading the topic
	// refuses token 4 too.
	if err := b.newCache(t, topic).Set(WithFence(ctx, 4), "slot", []byte("x"), nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("another process's Set with token 4: %v, want ErrFenced", err)
	}
}
