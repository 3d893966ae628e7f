package output

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/connect-eos/connect-eos/txnstate"
)

// refuseStateAt makes the state topic refuse every write with
// TOPIC_AUTHORIZATION_FAILED (a Write ACL taken away) from the given step of
// the first epoch that reaches it on.
func refuseStateAt(f *stateFaults, step commitStep) *testHooks {
	f.code.Store(int32(kerr.TopicAuthorizationFailed.Code))
	return &testHooks{atStep: func(s commitStep, _ uint64) error {
		if s == step {
			f.on.Store(true)
		}
		return nil
	}}
}

// wantStateRefusedStop waits for the output's fatal stop on the state
// topic's refusal, and checks that it names the state cache, its topic and
// the refusal, and that the output takes no more batches.
func wantStateRefusedStop(t *testing.T, o *output, fc *fatalCatch, f *stateFaults, stateTopic, what string) {
	t.Helper()
	// Before the stop existed the write was retried every 5 s, forever.
	deadline := time.Now().Add(30 * time.Second)
	for fc.err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	err := fc.err()
	if err == nil {
		f.on.Store(false)
		t.Fatalf("no fatal stop 30s after the state topic refused the %s write (%d refusals): retried as an unknown outcome", what, f.hit.Load())
	}
	msg := err.Error()
	t.Logf("fatal stop: %s", msg)
	for _, want := range []string{`state cache "state"`, `"` + stateTopic + `"`, "TOPIC_AUTHORIZATION_FAILED", what} {
		if !strings.Contains(msg, want) {
			t.Errorf("fatal stop %q does not name %q", msg, want)
		}
	}
	if strings.Contains(msg, "may or may not have happened") {
		t.Errorf("fatal stop %q calls the refusal an unknown outcome", msg)
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("fatal stop %v does not wrap TOPIC_AUTHORIZATION_FAILED", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, batchOf("after", 1)); err == nil {
		t.Fatal("a batch was acked after the output stopped")
	}
}

// TestStateCacheRefusedCommitted: the state topic refuses the COMMITTED
// write of an epoch whose EndTxn(commit) succeeded with
// TOPIC_AUTHORIZATION_FAILED. The batch committed, so it is acked; the
// refusal is the broker's definite answer that no retry changes, so the
// output stops (fatal) with an error naming the cache, its topic and the
// refusal, instead of retrying the write as an unknown outcome forever.
func TestStateCacheRefusedCommitted(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	const stateTopic = "eos-state"
	f := injectStateFaults(t, c, stateTopic)
	fc, restore := catchFatal(t)
	defer restore()
	o := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yamlFor(brokers, testTopic, "app", ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, batchOf("ok1", 2)); err != nil {
		t.Fatal(err)
	}

	o.hooks = refuseStateAt(f, stepEnded)
	if err := o.WriteBatch(ctx, batchOf("kept", 3)); err != nil {
		t.Fatalf("a committed batch nacked: %v", err)
	}
	wantStateRefusedStop(t, o, fc, f, stateTopic, "COMMITTED")
	n := 0
	for _, v := range readCommitted(t, brokers, testTopic) {
		if strings.HasPrefix(v, "kept") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d of the acked batch visible, want 3", n)
	}
}

// TestStateCacheRefusedPositions: dedupe mode, the state topic refuses the
// write of the committed positions (after the slot's COMMITTED landed) with
// TOPIC_AUTHORIZATION_FAILED: the output stops (fatal) naming the cache,
// its topic and the refusal, instead of retrying forever.
func TestStateCacheRefusedPositions(t *testing.T) {
	c := newCluster(t)
	brokers := c.ListenAddrs()
	const stateTopic = "eos-state"
	f := injectStateFaults(t, c, stateTopic)
	fc, restore := catchFatal(t)
	defer restore()
	o := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yamlFor(brokers, testTopic, "app", dedupeExtra))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.WriteBatch(ctx, posBatch("a", 1, 2)); err != nil {
		t.Fatal(err)
	}

	o.hooks = refuseStateAt(f, stepCommitted)
	if err := o.WriteBatch(ctx, posBatch("a", 3, 4)); err != nil {
		t.Fatalf("a committed batch nacked: %v", err)
	}
	wantStateRefusedStop(t, o, fc, f, stateTopic, "positions")
	if r, _ := slotRecord(t, o, 0); r.Epoch != 2 || r.State != txnstate.Committed {
		t.Fatalf("slot record %+v, want epoch 2 COMMITTED (written before the refusal)", r)
	}
	wantExactly(t, counts(t, brokers), "a", 1, 4)
}
