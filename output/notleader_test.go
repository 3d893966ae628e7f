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

// Produce requests refused a few times in a row, applied nothing, with no
// hint of another leader: NOT_LEADER_FOR_PARTITION (the partition's leader is
// being elected, or a broker before KIP-951) or NOT_ENOUGH_REPLICAS (the
// leader is still the leader). franz-go retries a refused batch only after a
// metadata refresh, and refreshes at most once per MetadataMinAge (5s by
// default). With that default every refusal after the first cost 5s: an epoch
// could not ride out two refusals under a short transaction_timeout and
// aborted at its deadline, every epoch after it too while the refusals
// lasted; under a longer one the abort waited on the next refresh, lost the
// race with the coordinator's own abort for the timeout, and kfake answered
// that like a fence by another producer. The slot clients refresh their
// metadata well within the transaction timeout's margin: the epoch commits.
func TestEpochRidesOutRefusedProduce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     int16
		refusals int32
		timeout  string // transaction_timeout
	}{
		{"not leader", kerr.NotLeaderForPartition.Code, 3, "3s"},
		{"not enough replicas", kerr.NotEnoughReplicas.Code, 2, "4s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, restore := catchFatal(t)
			defer restore()
			c := newCluster(t)
			brokers := c.ListenAddrs()
			yaml := strings.Replace(baseYAML(brokers, "refused", "commit_timeout: 1s\n"), "transaction_timeout: 30s", "transaction_timeout: "+tc.timeout, 1)
			a := newTestOutput(t, newResources(), yaml)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// A first epoch, so that the slots' metadata is fresh
			// when the refusals start (as in a running pipeline).
			writeReplaying(ctx, t, a, batchOf("a", 2))

			var refused atomic.Int32
			c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				req := kreq.(*kmsg.ProduceRequest)
				if req.TransactionID == nil || refused.Load() >= tc.refusals {
					return nil, nil, false
				}
				refused.Add(1)
				return refusedProduce(req, tc.code), nil, true
			})
			start := time.Now()
			err := a.WriteBatch(ctx, batchOf("b", 2))
			took := time.Since(start)
			if err != nil || fc.err() != nil {
				t.Fatalf("epoch whose first %d produce answers were refused: %v (fatal %v) after %v, want it committed within transaction_timeout (%s)", tc.refusals, err, fc.err(), took, tc.timeout)
			}
			if n := refused.Load(); n < tc.refusals {
				t.Fatalf("%d Produce requests refused, want %d", n, tc.refusals)
			}
			t.Logf("committed %v after the first of %d refusals", took.Round(time.Millisecond), tc.refusals)
			checkBatchesOnce(t, brokers, map[string]int{"a": 2, "b": 2})
		})
	}
}
