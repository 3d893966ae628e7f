package output

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/connect-eos/connect-eos/statecache"
	"github.com/connect-eos/connect-eos/txnstate"
)

// kafkaStateResources builds resources holding a kafka_state cache "state" on
// topic, as a fresh process would (it reads the topic on first use).
func kafkaStateResources(t *testing.T, brokers []string, topic string) *service.Resources {
	t.Helper()
	rb := service.NewResourceBuilder()
	if err := rb.AddCacheYAML(fmt.Sprintf("label: state\nkafka_state:\n  seed_brokers: [ %s ]\n  topic: %s\n", strings.Join(brokers, ","), topic)); err != nil {
		t.Fatal(err)
	}
	res, closeFn, err := rb.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = closeFn(ctx)
	})
	return res
}

// The project's durable cache as state_cache: an epoch crashed after its
// EndTxn is found committed by a new process reading the state topic.
func TestKafkaStateCacheRecovery(t *testing.T) {
	c := newCluster(t)
	testKafkaStateRecovery(t, c.ListenAddrs(), testTopic, "app", "eos-state")
}

func testKafkaStateRecovery(t *testing.T, brokers []string, topic, txnID, stateTopic string) {
	yaml := yamlFor(brokers, topic, txnID, "")
	a := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, batchOf("ks1", 2)); err != nil {
		t.Fatal(err)
	}
	a.hooks = crashAt(stepEnded, 2)
	_ = a.WriteBatch(ctx, batchOf("ks2", 2))

	b := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)
	if r, _ := slotRecord(t, b, 0); r.Epoch != 2 || r.State != txnstate.Committed {
		t.Fatalf("epoch 2 after restart: %+v", r)
	}
	if b.m.tally.get(metricInDoubtResolved+"/"+outcomeFoundCommitted) != 1 {
		t.Fatal("in-doubt metric")
	}
	if err := b.WriteBatch(ctx, batchOf("ks3", 2)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range readCommitted(t, brokers, topic) {
		if strings.HasPrefix(v, "ks") {
			n++
		}
	}
	if n != 6 {
		t.Fatalf("visible %d, want 6", n)
	}
}
