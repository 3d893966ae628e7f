package statecache

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// largestValue returns the size of the largest value of key whose record
// batch (headers included) fits in limit.
func largestValue(key string, limit int) int {
	n := limit - 100
	for recordBatchSize([]byte(key), make([]byte, n+1)) <= limit {
		n++
	}
	for recordBatchSize([]byte(key), make([]byte, n)) > limit {
		n--
	}
	return n
}

// testLargeValues: values near and above 100 MiB. The cache accepts what it
// can write in one produce request and read back in one fetch response
// (maxBatchBytes, under Kafka's default socket.request.max.bytes and
// franz-go's default response limit, both 100 MiB), whatever the topic's
// max.message.bytes allows. It used to fail every call on a topic allowing
// 100 MiB (the batch limit it set exceeded franz-go's write limit), and to
// acknowledge a 101 MiB value on a topic allowing more, which no process
// could load afterwards (on Apache Kafka the request itself is over the
// broker's limit and the write hung).
func testLargeValues(t *testing.T, b *backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact", "max.message.bytes", "104857600")
	c := b.newCache(t, topic)
	mustSet(t, c, "small", "v")
	n := largestValue("big", maxBatchBytes)
	big := bytes.Repeat([]byte{'x'}, n)
	big[n-1] = 'y'
	if err := c.Set(ctx, "big", big, nil); err != nil {
		t.Fatalf("Set of a %d byte value (its batch is the cache's limit %d): %v", n, maxBatchBytes, err)
	}
	got, err := b.newCache(t, topic).Get(ctx, "big")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("a new process reading the %d byte value: %d bytes, %v", n, len(got), err)
	}
	got = nil

	err = c.Set(ctx, "big", append(big, 'z'), nil)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != maxBatchBytes || tl.TopicLimit != 104857600 || !strings.Contains(err.Error(), "read back") {
		t.Fatalf("Set one byte over the cache's limit: %v, want a TooLargeError naming the cache's limit", err)
	}

	// A topic allowing 200 MiB: a 101 MiB value is refused before
	// anything is sent, and the topic stays readable.
	topic2 := topicName(t)
	b.createTopic(t, topic2, 1, "cleanup.policy", "compact", "max.message.bytes", "209715200")
	c2 := b.newCache(t, topic2)
	mustSet(t, c2, "small", "v")
	err = returnsWithin(t, 60*time.Second, "Set of 101 MiB", func() error {
		return c2.Set(ctx, "huge", make([]byte, 101<<20), nil)
	})
	if !errors.As(err, &tl) || tl.Limit != maxBatchBytes || tl.TopicLimit != 209715200 {
		t.Fatalf("Set of 101 MiB on a topic allowing 200 MiB: %v, want a TooLargeError", err)
	}
	wantValue(t, b.newCache(t, topic2), "small", "v")
	if _, err := b.newCache(t, topic2).Get(ctx, "huge"); err == nil {
		t.Fatal("the refused value is in the topic")
	}
}
