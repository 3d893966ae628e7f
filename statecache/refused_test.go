package statecache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestWriteRefusedNotAuthorized: a write the broker refuses for a missing
// ACL is not an unknown outcome that a retry may settle: Set returns at once
// (well before its deadline) with an error that names the key and the topic,
// says the broker refused the write and wraps the broker's error, so that a
// caller (the kafka_eos output) can stop on it instead of retrying. The
// value in memory does not change, and once the ACL is there the cache
// writes again.
func TestWriteRefusedNotAuthorized(t *testing.T) {
	for _, refusal := range []*kerr.Error{kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed} {
		t.Run(refusal.Message, func(t *testing.T) {
			b := newKfake(t)
			topic := topicName(t)
			b.createTopic(t, topic, 1, "cleanup.policy", "compact")
			c := b.newCache(t, topic)
			mustSet(t, c, "k", "before") // loads
			f := injectProduceFault(t, b, topic, refusal.Code)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := returnsWithin(t, 30*time.Second, "Set refused", func() error { return c.Set(ctx, "k", []byte("during"), nil) })
			if f.hits.Load() == 0 {
				t.Fatal("no produce request reached the fault")
			}
			if !errors.Is(err, refusal) {
				t.Fatalf("Set refused with %s: %v, want an error wrapping it", refusal.Message, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("Set returned at its deadline, want at the refusal: %v", err)
			}
			msg := err.Error()
			for _, want := range []string{`"k"`, `"` + topic + `"`, "refused", refusal.Message} {
				if !strings.Contains(msg, want) {
					t.Errorf("Set refused: %q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, "may or may not have happened") {
				t.Errorf("Set refused: %q calls a refusal an unknown outcome", msg)
			}
			wantValue(t, c, "k", "before")

			f.on.Store(false)
			mustSet(t, c, "k", "after")
			wantValue(t, b.newCache(t, topic), "k", "after")
		})
	}
}
