package output

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A record the broker never answers (here a Produce request held by the
// broker) does not hold the commit past commit_timeout: produceWithin aborts
// the buffered records and returns an error naming the timeout. ProduceSync,
// which the positions write used, waits for the answer however long it
// takes; franz-go can also leave a record buffered and never sent after a
// fence, which only such a bound ends.
func TestProduceWithinBound(t *testing.T) {
	c := newCluster(t)
	release := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if held.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	defer close(release)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("within"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- produceWithin(ctx, cl, 300*time.Millisecond, []*kgo.Record{{Topic: testTopic, Value: []byte("v")}})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "commit_timeout") {
			t.Fatalf("produceWithin with the broker holding the request: %v, want an error naming commit_timeout", err)
		}
		if !held.Load() {
			t.Fatal("the broker never saw the Produce request")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("produceWithin waited 30s for a request the broker holds, past its 300ms budget")
	}
}
