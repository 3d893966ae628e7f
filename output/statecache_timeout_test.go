package output

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// stateFaults answers the Produce requests to the state topic with
// REQUEST_TIMED_OUT while on is set (the broker appended, or not, and
// replication did not finish: franz-go cannot tell whether the record landed
// and, by default, retries it past its context), or with code if set, and
// records the time of every EndTxn the output sends, by outcome.
type stateFaults struct {
	on   atomic.Bool
	hit  atomic.Int64
	code atomic.Int32 // the error code answered; 0: REQUEST_TIMED_OUT

	mu      sync.Mutex
	aborts  []time.Time
	commits []time.Time
}

func (f *stateFaults) endTxns() (aborts, commits []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time{}, f.aborts...), append([]time.Time{}, f.commits...)
}

func injectStateFaults(t *testing.T, c *kfake.Cluster, stateTopic string) *stateFaults {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, stateTopic); err != nil {
		t.Fatal(err)
	}
	tds, err := kadm.NewClient(cl).ListTopics(ctx, stateTopic)
	if err != nil || tds[stateTopic].Err != nil {
		t.Fatalf("describing %s: %v %v", stateTopic, err, tds[stateTopic].Err)
	}
	id := tds[stateTopic].ID

	f := &stateFaults{}
	c.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		ours := false
		for _, rt := range req.Topics {
			ours = ours || rt.Topic == stateTopic || rt.TopicID == id
		}
		if !ours || !f.on.Load() {
			return nil, nil, false
		}
		f.hit.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.RequestTimedOut.Code
				if code := int16(f.code.Load()); code != 0 {
					sp.ErrorCode = code
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	c.ControlKey(kmsg.EndTxn.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		f.mu.Lock()
		if kreq.(*kmsg.EndTxnRequest).Commit {
			f.commits = append(f.commits, time.Now())
		} else {
			f.aborts = append(f.aborts, time.Now())
		}
		f.mu.Unlock()
		return nil, nil, false
	})
	return f
}

// TestStateCacheTimeoutPrepare: the state topic answers REQUEST_TIMED_OUT
// when the epoch writes its PREPARE. The output must abort the epoch before
// its transaction deadline (the coordinator would abort it at
// transaction_timeout otherwise, fencing the slot), nack the batch, and
// nothing of the batch may become visible.
func TestStateCacheTimeoutPrepare(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	const stateTopic = "eos-state"
	f := injectStateFaults(t, c, stateTopic)
	const txnTimeout = 30 * time.Second
	yaml := strings.Replace(yamlFor(brokers, testTopic, "app", ""), "commit_timeout: 5s", "commit_timeout: 2s", 1)
	o := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, batchOf("ok1", 2)); err != nil {
		t.Fatal(err)
	}

	f.on.Store(true)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- o.WriteBatch(ctx, batchOf("lost", 3)) }()

	// The local abort must come before the transaction's deadline, which
	// is at most txnTimeout - margin after the call (the epoch opens
	// after it). On a write that ignored its deadline it never came
	// while the fault was on.
	budget := txnTimeout - timeoutMargin(txnTimeout)
	var abortedAt time.Time
	for deadline := start.Add(budget); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if aborts, _ := f.endTxns(); len(aborts) > 0 {
			abortedAt = aborts[0]
			break
		}
	}
	if f.hit.Load() == 0 {
		t.Fatal("no state-topic produce reached the fault")
	}
	if abortedAt.IsZero() {
		f.on.Store(false)
		t.Fatalf("no EndTxn(abort) within %v of the batch while the state topic answered REQUEST_TIMED_OUT", budget)
	}
	if _, commits := f.endTxns(); len(commits) != 1 {
		t.Fatalf("%d commits, want only the first epoch's", len(commits))
	}
	t.Logf("EndTxn(abort) %v after the batch was written", abortedAt.Sub(start).Round(time.Millisecond))

	// The nack waits for ABORTED to be durable (a PREPARED record left
	// behind would let a later start commit nacked batches): the state
	// topic answers again.
	f.on.Store(false)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the batch whose PREPARE timed out was acked")
		}
		t.Logf("batch nacked: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the batch was neither acked nor nacked 60s after the state topic recovered")
	}
	if r, _ := slotRecord(t, o, 0); r.State == txnstate.Prepared {
		t.Fatalf("slot record %+v: PREPARED left for an aborted epoch", r)
	}

	if err := o.WriteBatch(ctx, batchOf("ok2", 2)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range readCommitted(t, brokers, testTopic) {
		if strings.HasPrefix(v, "lost") {
			t.Fatalf("%s of the nacked batch is visible", v)
		}
		got = append(got, v)
	}
	if len(got) != 4 {
		t.Fatalf("visible %v, want ok1-0, ok1-1, ok2-0, ok2-1", got)
	}
}

// TestStateCacheTimeoutCommitted: the state topic answers REQUEST_TIMED_OUT
// once the epoch's EndTxn(commit) went out, so the COMMITTED write cannot
// finish. The batch committed: it is acked within the commit budget and
// visible, and COMMITTED is written once the state topic answers again.
func TestStateCacheTimeoutCommitted(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	const stateTopic = "eos-state"
	f := injectStateFaults(t, c, stateTopic)
	yaml := strings.Replace(yamlFor(brokers, testTopic, "app", ""), "commit_timeout: 5s", "commit_timeout: 2s", 1)
	o := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, batchOf("ok1", 2)); err != nil {
		t.Fatal(err)
	}
	// The fault starts with the second commit.
	c.ControlKey(kmsg.EndTxn.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if kreq.(*kmsg.EndTxnRequest).Commit {
			f.on.Store(true)
			c.DropControl()
		}
		return nil, nil, false
	})

	done := make(chan error, 1)
	go func() { done <- o.WriteBatch(ctx, batchOf("kept", 3)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a committed batch nacked: %v", err)
		}
	case <-time.After(30 * time.Second):
		f.on.Store(false)
		t.Fatal("the committed batch was not acked within 30s while the state topic answered REQUEST_TIMED_OUT")
	}
	if f.hit.Load() == 0 {
		t.Fatal("no state-topic produce reached the fault")
	}
	n := 0
	for _, v := range readCommitted(t, brokers, testTopic) {
		if strings.HasPrefix(v, "kept") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d of the acked batch visible, want 3", n)
	}

	// COMMITTED lands once the state topic answers again.
	f.on.Store(false)
	wait(t, 60*time.Second, "COMMITTED of epoch 2", func() bool {
		r, _ := slotRecord(t, o, 0)
		return r.Epoch >= 2 && r.State == txnstate.Committed
	})
}
