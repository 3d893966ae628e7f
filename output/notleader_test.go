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

// Produce requests refused NOT_LEADER_FOR_PARTITION a few times in a row,
// with no hint of another leader (the partition's leader is being elected,
// or a broker before KIP-951): franz-go retries a refused batch only after
// a metadata refresh, and refreshes at most once per MetadataMinAge (5s by
// default). With that default every refusal after the first cost 5s: an
// epoch could not ride out two refusals under a transaction_timeout of 3s
// (nor a few more under 10s) and aborted at its deadline, every epoch after
// it too while the refusals lasted; under 10s the abort waited on the next
// refresh, lost the race with the coordinator's own abort for the timeout,
// and kfake answered that like a fence by another producer. The slot clients
// refresh their metadata well within the transaction timeout's margin: the
// epoch commits.
func TestEpochRidesOutRepeatedNotLeader(t *testing.T) {
	fc, restore := catchFatal()
	defer restore()
	c := newCluster(t)
	brokers := c.ListenAddrs()
	yaml := strings.Replace(baseYAML(brokers, "notleader", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: 3s", 1)
	a := newTestOutput(t, newResources(), yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	writeReplaying(ctx, t, a, batchOf("a", 2))

	const refusals = 3
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if refused.Load() >= refusals {
			return nil, nil, false
		}
		refused.Add(1)
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = p.Partition
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	start := time.Now()
	writeReplaying(ctx, t, a, batchOf("b", 2))
	if n := refused.Load(); n < refusals {
		t.Fatalf("%d Produce requests refused, want %d", n, refusals)
	}
	if fc.err() != nil {
		t.Fatalf("the output stopped: %v", fc.err())
	}
	t.Logf("committed %v after the first of %d refusals", time.Since(start).Round(time.Millisecond), refusals)
	checkBatchesOnce(t, brokers, map[string]int{"a": 2, "b": 2})
}
