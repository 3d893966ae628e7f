package kafkatest

import (
	"context"
	"testing"
	"time"
)

// TestTopicKeepsOldRecords: a test topic on Apache Kafka (skipped without
// KAFKA_BROKERS_TV2) has no time retention, so records with timestamps years
// in the past (as the mirror tests copy them) are not deleted by the broker's
// retention check while a test reads them.
func TestTopicKeepsOldRecords(t *testing.T) {
	brokers := Brokers(t, 2)
	topic := Topic(t, brokers, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcs, err := Admin(t, brokers).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			if got := c.MaybeValue(); got != "-1" {
				t.Fatalf("retention.ms of %s is %q (%v), want -1", topic, got, c.Source)
			}
			return
		}
	}
	t.Fatalf("%s: no retention.ms in its description", topic)
}
