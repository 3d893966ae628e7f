package output

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

// TestInDoubtProbeRefused: recovery meets a PREPARED epoch that
// DescribeTransactions does not identify, and the broker refuses its
// read_committed probe Fetch with TOPIC_AUTHORIZATION_FAILED (the Read ACL
// on the output topic is missing). The start stops in doubt, and the error
// names the refusal (not only "the broker and the probe identify nothing",
// with the refusal in a warning) and does not promise that the next start
// resolves the epoch, which meets the same refusal: it is fatal at the
// first attempt, not retried as a transient doubt. Once the ACL is there,
// the start stops in doubt as before (the ghost epoch's records are not in
// the topic), without the refusal.
func TestInDoubtProbeRefused(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newCluster(t)
	var refuse atomic.Bool
	var hits atomic.Int64
	refuse.Store(true)
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		hits.Add(1)
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	res := newResources()
	yaml := baseYAML(c.ListenAddrs(), "app", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	writeUnknownInDoubt(ctx, t, res)

	o := newUnconnected(t, res, yaml)
	err := o.Connect(ctx)
	if hits.Load() == 0 {
		t.Fatal("no Fetch reached the refusal: recovery did not probe")
	}
	var ide *InDoubtError
	if !errors.As(err, &ide) || ide.Epoch != 7 || ide.TransactionalID != "app-1" {
		t.Fatalf("Connect: %v, want an InDoubtError for epoch 7 of app-1", err)
	}
	msg := err.Error()
	t.Logf("Connect: %s", msg)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(msg, "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("Connect: %q does not name the probe's refusal", msg)
	}
	if strings.Contains(msg, "; the next start resolves it") {
		t.Errorf("Connect: %q promises the next start resolves the epoch, which meets the same refusal", msg)
	}
	if !errors.As(err, new(*fatal.Error)) || fc.err() == nil {
		t.Errorf("Connect: %v is not fatal at the first attempt (a missing ACL fails every attempt alike)", err)
	}
	if r, _ := slotRecord(t, o, 1); r.State != txnstate.Prepared {
		t.Fatalf("an epoch nothing identified was decided: %+v", r)
	}

	// The ACL granted: the probe runs, finds nothing of the ghost epoch,
	// and the start stops in doubt with the usual error.
	refuse.Store(false)
	b := newUnconnected(t, res, yaml)
	err = b.Connect(ctx)
	if !errors.As(err, &ide) || ide.Epoch != 7 {
		t.Fatalf("Connect with the ACL: %v, want an InDoubtError for epoch 7", err)
	}
	msg = err.Error()
	if errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(msg, "the broker and the probe identify nothing; the next start resolves it") {
		t.Errorf("Connect with the ACL: %q, want the plain in-doubt stop", msg)
	}
	if errors.As(err, new(*fatal.Error)) {
		t.Errorf("Connect with the ACL: %v is fatal at the first attempt, want it retried (inDoubtAttempts)", err)
	}
}
