package statecache

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
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

// liveRecords returns the values of the records of topic that compaction
// would keep for good (not tombstones), by record key, read raw.
func (b *backend) liveRecords(t testing.TB, topic string) map[string]string {
	t.Helper()
	end := b.endOffset(t, topic)
	cl := b.client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	out := make(map[string]string)
	ctx := testCtx(t)
	for next := int64(0); next < end; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if r.Value == nil {
				delete(out, string(r.Key))
			} else {
				out[string(r.Key)] = string(r.Value)
			}
		})
	}
	return out
}

// TestFenceSurvivesCompaction: compaction keeps the last record of each
// record key. The replaced owner's late write must not become the key's only
// record once compaction runs, or every later reader takes its value.
func TestFenceSurvivesCompaction(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	ctx := testCtx(t)

	zombie := b.newCache(t, topic)
	mustSet(t, zombie, "warm", "up") // loads
	live := b.newCache(t, topic)
	if err := live.Set(WithFence(ctx, 5), "slot", []byte("live"), nil); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Set(WithFence(ctx, 3), "slot", []byte("zombie"), nil); err != nil {
		t.Fatal(err)
	}
	mustSet(t, live, "other", "v") // compaction keeps the last batch whatever it is
	b.kfake.Compact()

	wantValue(t, b.newCache(t, topic), "slot", "live")
	if err := live.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, live, "slot", "live")
}

// TestFenceOwnerChangeCleansUp: each owner's records of a key live under a
// record key of their own; the first write of a new owner deletes the
// records of the owners before it (and a replaced owner's late record, once
// read), so a key does not keep one record per owner it ever had.
func TestFenceOwnerChangeCleansUp(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	ctx := testCtx(t)

	c := b.newCache(t, topic)
	mustSet(t, c, "slot", "plain")
	for tok, v := range []string{1: "one", 2: "two", 3: "three"} {
		if tok == 0 {
			continue
		}
		if err := c.Set(WithFence(ctx, uint64(tok)), "slot", []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	// A replaced owner's late write, read by the live owner, which then
	// writes again.
	zombie := b.newCache(t, topic)
	if err := zombie.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	zombie.mu.Lock()
	zombie.v.entries["slot"] = entry{} // it has not seen the others' tokens
	zombie.mu.Unlock()
	if err := zombie.Set(WithFence(ctx, 2), "slot", []byte("late"), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(WithFence(ctx, 3), "slot", []byte("three-again"), nil); err != nil {
		t.Fatal(err)
	}

	live := b.liveRecords(t, topic)
	n := 0
	for k := range live {
		if strings.HasPrefix(k, "slot") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("live records of key slot: %q, want one (the token 3 owner's)", live)
	}
	wantValue(t, b.newCache(t, topic), "slot", "three-again")
}

// TestFenceKeyEncoding: keys holding the reserved marker are refused, and a
// record whose fence suffix is not one kafka_state writes stops the cache
// with an error naming it rather than being ordered by a guess.
func TestFenceKeyEncoding(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	ctx := testCtx(t)
	c := b.newCache(t, topic)
	for _, k := range []string{"a\x00kafka_state/fence/0000000000000001", "\x00kafka_state/x", "a\x00kafka_state/"} {
		if err := c.Set(ctx, k, []byte("v"), nil); !errors.Is(err, ErrReservedKey) {
			t.Fatalf("Set(%q): %v, want ErrReservedKey", k, err)
		}
	}
	for tok, want := range map[uint64]string{1: "k\x00kafka_state/fence/0000000000000001", 1 << 63: "k\x00kafka_state/fence/8000000000000000"} {
		rk := recordKey("k", tok)
		if string(rk) != want {
			t.Fatalf("recordKey(k, %d) = %q, want %q", tok, rk, want)
		}
		if k, got, err := parseRecordKey(rk); err != nil || k != "k" || got != tok {
			t.Fatalf("parseRecordKey(%q) = %q, %d, %v", rk, k, got, err)
		}
	}

	cl := b.client(t)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k\x00kafka_state/fence/12"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, err := b.newCache(t, topic).Get(ctx, "k")
	if err == nil || !strings.Contains(err.Error(), "not written by kafka_state") || !strings.Contains(err.Error(), topic) {
		t.Fatalf("Get from a topic with a malformed fence suffix: %v, want an error naming it", err)
	}
}
