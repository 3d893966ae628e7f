package statecache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// recreateTopic deletes topic and creates it again, empty, with the same
// name, waiting until the broker lists the new one.
func (b *backend) recreateTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	adm := b.admin(t)
	ctx := testCtx(t)
	before, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	wait(t, 30*time.Second, func() bool {
		_, err := adm.CreateTopic(ctx, partitions, -1, map[string]*string{"cleanup.policy": &compact}, topic)
		return err == nil // TOPIC_ALREADY_EXISTS while the deletion completes
	})
	wait(t, 30*time.Second, func() bool {
		tds, err := adm.ListTopics(ctx, topic)
		return err == nil && tds[topic].Err == nil && tds[topic].ID != before[topic].ID && len(tds[topic].Partitions) == int(partitions)
	})
}

// testRecreatedTopic: the topic is deleted and created again under the same
// name while a process uses it. The process must stop with an error naming
// the topic and what happened, for writes, Refresh and Get alike; it used to
// fail every write with "the write may or may not have happened" (nothing was
// sent) and serve the old values from Get.
func testRecreatedTopic(t *testing.T, b *backend) {
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	c := b.newCache(t, topic)
	mustSet(t, c, "k", "v")
	mustSet(t, c, "k2", "v2")

	b.recreateTopic(t, topic, 1)

	check := func(what string, err error) {
		t.Helper()
		var tc *TopicChangedError
		if !errors.Is(err, ErrTopicChanged) || !errors.As(err, &tc) || tc.Topic != topic {
			t.Fatalf("%s after the topic was recreated: %v, want a TopicChangedError", what, err)
		}
		for _, want := range []string{topic, "recreated", "2 keys"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: error %q does not say %q", what, err, want)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check("Set", c.Set(ctx, "k3", []byte("x"), nil))
	check("Refresh", c.Refresh(ctx))
	_, err := c.Get(ctx, "k")
	check("Get", err)
	check("Delete", c.Delete(ctx, "k"))

	// Nothing reached the new topic.
	if end := b.endOffset(t, topic); end != 0 {
		t.Fatalf("end offset of the new topic %d, want 0", end)
	}
}

// testRecreatedTopicRefresh: a process that only reads learns of the
// recreation at its next Refresh.
func testRecreatedTopicRefresh(t *testing.T, b *backend) {
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	mustSet(t, b.newCache(t, topic), "k", "v")
	reader := b.newCache(t, topic)
	wantValue(t, reader, "k", "v")

	b.recreateTopic(t, topic, 1)
	ctx := testCtx(t)
	if err := reader.Refresh(ctx); !errors.Is(err, ErrTopicChanged) {
		t.Fatalf("Refresh after the topic was recreated: %v, want ErrTopicChanged", err)
	}
	if _, err := reader.Get(ctx, "k"); !errors.Is(err, ErrTopicChanged) {
		t.Fatalf("Get after a Refresh found the topic recreated: %v, want ErrTopicChanged", err)
	}
}

// testPartitionsAdded: partitions added to the topic move keys to other
// partitions, where compaction and the cache no longer order their old and
// new values. A running process refuses the topic at its next Refresh (or
// write), and a new process refuses it at load when a key sits in a
// partition its hash no longer points to.
func testPartitionsAdded(t *testing.T, b *backend) {
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	c := b.newCache(t, topic)
	// A key that hashes to partition 1 of 2: after the change, a writer
	// using the default partitioner puts it there.
	var moved string
	two := topicMeta{topic: topic, partitions: 2}
	for i := 0; moved == ""; i++ {
		if k := "key" + string(rune('a'+i)); two.partitionFor([]byte(k)) == 1 {
			moved = k
		}
	}
	mustSet(t, c, moved, "old")

	ctx := testCtx(t)
	if _, err := b.admin(t).UpdatePartitions(ctx, 2, topic); err != nil {
		t.Fatal(err)
	}
	wait(t, 30*time.Second, func() bool {
		tds, err := b.admin(t).ListTopics(ctx, topic)
		return err == nil && len(tds[topic].Partitions) == 2
	})
	cl := b.client(t, kgo.DefaultProduceTopic(topic))
	if err := cl.ProduceSync(ctx, kgo.KeyStringRecord(moved, "new")).FirstErr(); err != nil {
		t.Fatal(err)
	}

	wantChanged := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrTopicChanged) || !strings.Contains(err.Error(), "partition") {
			t.Fatalf("%s after partitions were added: %v, want ErrTopicChanged naming the partitions", what, err)
		}
	}
	wantChanged("Refresh", c.Refresh(ctx))
	_, err := c.Get(ctx, moved)
	wantChanged("Get", err)

	_, err = b.newCache(t, topic).Get(ctx, moved)
	wantChanged("a new process's Get", err)
}
