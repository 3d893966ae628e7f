package statecache

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// TestCacheKafka runs the suite against Apache Kafka brokers started by
// integration/kafka/up.sh, one per transaction version (the cache's reads of
// transactional records depend on the markers each version writes). Each
// skips unless KAFKA_BROKERS_TV<n> is set; see kafkatest.
func TestCacheKafka(t *testing.T) {
	for _, tv := range []int{0, 2} {
		t.Run("tv"+string(rune('0'+tv)), func(t *testing.T) {
			brokers := kafkatest.Brokers(t, tv)
			for _, s := range suite {
				t.Run(s.name, func(t *testing.T) {
					s.fn(t, &backend{brokers: strings.Split(brokers, ",")})
				})
			}
		})
	}
}

// deleteTopicAtEnd removes a topic a test made on a real broker, which
// outlives the test (kfake dies with it).
func (b *backend) deleteTopicAtEnd(t testing.TB, topic string) {
	if b.kfake != nil {
		return
	}
	adm := b.admin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, topic); err != nil {
			t.Logf("deleting topic %s: %v", topic, err)
		}
	})
}
