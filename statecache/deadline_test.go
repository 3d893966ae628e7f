package statecache

import (
	"context"
	"errors"
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
)

// produceFault answers every Produce request to topic with code (for
// example REQUEST_TIMED_OUT: the broker appended the batch but replication
// did not finish in time, so the producer cannot tell whether it landed)
// while on is set. It counts the requests it answered.
type produceFault struct {
	on   atomic.Bool
	hits atomic.Int64
}

func injectProduceFault(t testing.TB, b *backend, topic string, code int16) *produceFault {
	t.Helper()
	tds, err := b.admin(t).ListTopics(testCtx(t), topic)
	if err != nil || tds[topic].Err != nil {
		t.Fatalf("describing %s: %v %v", topic, err, tds[topic].Err)
	}
	id := tds[topic].ID
	f := &produceFault{}
	f.on.Store(true)
	b.kfake.ControlKey(kmsg.Produce.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.kfake.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		ours := false
		for _, rt := range req.Topics {
			ours = ours || rt.Topic == topic || rt.TopicID == id
		}
		if !f.on.Load() || !ours {
			return nil, nil, false
		}
		f.hits.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return f
}

// returnsWithin runs fn and fails t unless it returns within d: it tells a
// call that waits for its context from one that hangs. d is generous (many
// times the deadline under test); nothing is asserted on how fast.
func returnsWithin(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// TestWriteDeadlineWhenOutcomeUnknown: a write answered REQUEST_TIMED_OUT
// is one franz-go cannot fail without risking a duplicate, so by default it
// retries it until the broker answers otherwise, whatever the record's
// context says. Set, and every write queued behind it, must still return by
// their own deadlines, saying the outcome is unknown.
func TestWriteDeadlineWhenOutcomeUnknown(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	c := b.newCache(t, topic)
	mustSet(t, c, "k", "before") // loads
	f := injectProduceFault(t, b, topic, kerr.RequestTimedOut.Code)

	set := func(key, v string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Set(ctx, key, []byte(v), nil)
	}
	err := returnsWithin(t, 30*time.Second, "Set under REQUEST_TIMED_OUT", func() error { return set("k", "during") })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may or may not have happened") {
		t.Fatalf("Set under REQUEST_TIMED_OUT: %v, want a deadline error saying the outcome is unknown", err)
	}
	if f.hits.Load() == 0 {
		t.Fatal("no produce request reached the fault")
	}
	// A write behind the unresolved one returns by its deadline too.
	err = returnsWithin(t, 30*time.Second, "a second Set", func() error { return set("k2", "v") })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Set: %v, want a deadline error", err)
	}
	// So do Delete and Add.
	err = returnsWithin(t, 30*time.Second, "Delete", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Delete(ctx, "k")
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete: %v, want a deadline error", err)
	}
	// The value did not change in memory: nothing was acknowledged.
	wantValue(t, c, "k", "before")

	// Once the broker answers again, writes go through and every
	// process agrees on the value.
	f.on.Store(false)
	mustSet(t, c, "k", "after")
	wantValue(t, c, "k", "after")
	wantValue(t, b.newCache(t, topic), "k", "after")
}

// TestCloseDuringBarrierWrite: the first Get's load needs a read barrier
// (the end offset is past anything it can read) and the broker never
// acknowledges the barrier. Close must still return, and close the load with
// it: the barrier write used to hold the lock Close waited for.
func TestCloseDuringBarrierWrite(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	old := stallAfter
	stallAfter = 200 * time.Millisecond
	t.Cleanup(func() { stallAfter = old })

	cl := b.client(t)
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := b.newCache(t, topic)
	real := c.listEnd
	c.listEnd = func(ctx context.Context, topics ...string) (kadm.ListedOffsets, error) {
		los, err := real(ctx, topics...)
		for _, ps := range los {
			for p, o := range ps {
				o.Offset++ // a tail the reader cannot reach: it writes a barrier
				ps[p] = o
			}
		}
		return los, err
	}
	f := injectProduceFault(t, b, topic, kerr.RequestTimedOut.Code)

	getErr := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "k") // no deadline: only Close ends it
		getErr <- err
	}()
	wait(t, 30*time.Second, func() bool { return f.hits.Load() > 0 })

	err := returnsWithin(t, 30*time.Second, "Close during the barrier write", func() error {
		return c.Close(context.Background())
	})
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-getErr:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Get interrupted by Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Get did not return after Close")
	}
}

// TestCloseDuringWriteInFlight: a write whose request the broker holds when
// Close runs may land after all; its error must say so, not just "closed".
func TestCloseDuringWriteInFlight(t *testing.T) {
	b := newKfake(t)
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")
	c := b.newCache(t, topic)
	mustSet(t, c, "warm", "up")

	var once sync.Once
	held, release := make(chan struct{}), make(chan struct{})
	b.kfake.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.kfake.KeepControl()
		once.Do(func() {
			close(held)
			b.kfake.SleepControl(func() { <-release })
		})
		return nil, nil, false // then kfake appends it as usual
	})

	setErr := make(chan error, 1)
	go func() { setErr <- c.Set(context.Background(), "k", []byte("landed"), nil) }()
	<-held
	if err := returnsWithin(t, 30*time.Second, "Close with a write in flight", func() error {
		return c.Close(context.Background())
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-setErr:
	case <-time.After(30 * time.Second):
		t.Fatal("Set did not return after Close")
	}
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "may or may not have happened") {
		t.Fatalf("Set interrupted by Close: %v, want ErrClosed saying the outcome is unknown", err)
	}
	close(release)
	// And indeed it landed.
	wait(t, 30*time.Second, func() bool {
		got, err := b.newCache(t, topic).Get(testCtx(t), "k")
		return err == nil && string(got) == "landed"
	})
}

var _ = kfake.NumBrokers
