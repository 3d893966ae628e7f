package output

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Produce answered with a retriable error (NOT_ENOUGH_REPLICAS: the leader
// is still the leader) is retried by franz-go only after a metadata refresh,
// and franz-go refreshes at most every MetadataMinAge (5 s by default): two
// such answers held an epoch's records for up to 10 s, past a short
// transaction_timeout, so the epoch aborted at its local deadline (or kfake's
// coordinator aborted it first, which the output took for a fence) although
// the broker took the retry at once. The slot clients refresh on a retriable
// error within a fraction of a second: the epoch commits well within its
// transaction_timeout.
func TestRetriableProduceErrorRetriedWithinEpoch(t *testing.T) {
	fc, restore := catchFatal()
	defer restore()
	c := newCluster(t)
	brokers := c.ListenAddrs()
	yaml := strings.Replace(baseYAML(brokers, "produce-retry", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: 4s", 1)
	a := newTestOutput(t, newResources(), yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A first epoch, so that the slots' metadata is fresh when the fault
	// starts (as in a running pipeline).
	if err := a.WriteBatch(ctx, batchOf("a", 3)); err != nil {
		t.Fatal(err)
	}

	// The next two Produce requests of the output are answered
	// NOT_ENOUGH_REPLICAS, not applied.
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if req.TransactionID == nil || refused.Add(1) > 2 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = p.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	start := time.Now()
	err := a.WriteBatch(ctx, batchOf("b", 3))
	took := time.Since(start)
	if err != nil || fc.err() != nil {
		t.Fatalf("epoch whose first two produce answers were NOT_ENOUGH_REPLICAS: %v (fatal %v) after %v, want it committed within transaction_timeout (4s)", err, fc.err(), took)
	}
	if refused.Load() < 2 {
		t.Fatalf("only %d produce requests refused, want 2", refused.Load())
	}
	if took > 2*time.Second {
		t.Errorf("the epoch committed after %v, want well within transaction_timeout (4s)", took)
	}
	checkBatchesOnce(t, brokers, map[string]int{"a": 3, "b": 3})
}
