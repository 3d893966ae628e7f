package statecache

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestWritesRecoverFromRetriableAnswersQuickly: a few Produce answers in a
// row that franz-go retries after a metadata refresh (NOT_ENOUGH_REPLICAS,
// NOT_LEADER_FOR_PARTITION: the broker wrote nothing) must cost a write
// about a refresh each, not franz-go's default MetadataMinAge (5s) each: the
// kafka_eos output writes with a deadline of commit_timeout (1s at the
// shortest) and retries, and its committer waits for the committed dedupe
// positions to land before the next epoch commits, so every answer that
// cost 5s held the next epochs open past their transaction timeout.
func TestWritesRecoverFromRetriableAnswersQuickly(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.NotEnoughReplicas, kerr.NotLeaderForPartition} {
		t.Run(code.Message, func(t *testing.T) {
			b := newKfake(t)
			topic := topicName(t)
			b.createTopic(t, topic, 1, "cleanup.policy", "compact")
			c := b.newCache(t, topic)
			mustSet(t, c, "k", "before") // loads

			const answers = 3
			h := b.kfake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: code, Count: answers})
			t.Cleanup(h.Remove)

			// The output's retry loop: 1s per attempt, a short pause.
			start := time.Now()
			attempts := 0
			for {
				attempts++
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				err := c.Set(ctx, "k", []byte("after"), nil)
				cancel()
				if err == nil {
					break
				}
				if time.Since(start) > 30*time.Second {
					t.Fatalf("no write landed within 30s (%d attempts, %d faulted answers): %v", attempts, h.Hits(), err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			took := time.Since(start)
			if h.Hits() != answers {
				t.Fatalf("%d faulted answers, want %d", h.Hits(), answers)
			}
			// A refresh each, with room for a loaded machine; 5s each
			// (the default MetadataMinAge) is far past it.
			if took > 4*time.Second {
				t.Fatalf("the write landed %v after %d %s answers (%d attempts), want within 4s", took.Round(time.Millisecond), answers, code.Message, attempts)
			}
			wantValue(t, c, "k", "after")
		})
	}
}
