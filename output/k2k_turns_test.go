package output

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Two pipeline threads and max_in_flight 1 (Kafka-to-Kafka, no output
// batching): a thread's batch that overtakes the other thread's batch of the
// same partition reaches the output first and waits for it. The waiting
// batch gives its turn up: the batch before it still reaches the output (a
// spare call Benthos may make), joins, and the waiting one follows, with no
// nack. Holding the output's only call instead, it kept the batch before it
// out until it was nacked after a second (and a bounded copy crawled a
// second or more per batch, past its bound); this test counts those nacks.
func TestK2KWaitingBatchLetsItsPredecessorIn(t *testing.T) {
	const in = "in1" // one partition: every batch continues the one before it
	c := newCluster(t, kfake.SeedTopics(1, in))
	brokers := c.ListenAddrs()
	const n = 12
	fillInput(t, brokers, in, n)
	var (
		mu   sync.Mutex
		outs []*output
	)
	testOutputHook = func(o *output) {
		mu.Lock()
		defer mu.Unlock()
		outs = append(outs, o)
	}
	defer func() { testOutputHook = nil }()
	// One record per input batch; the even-numbered ones sleep, so that the
	// other thread's odd-numbered successor overtakes them.
	e := k2kTopics{brokers, in, testTopic, k2kGroup}
	yaml := copyStreamYAML(e, "k2k-turns", copyOpts{batch: 1, k2k: true, proc: `
    - sleep:
        duration: '${! if content().string().trim_prefix("v-").number() % 2 == 0 { "50ms" } else { "0ms" } }'`})
	yaml = strings.Replace(yaml, "pipeline:\n", "pipeline:\n  threads: 2\n", 1)
	yaml = strings.Replace(yaml, "max_in_flight: 4", "max_in_flight: 1", 1)
	if !strings.Contains(yaml, "threads: 2") || !strings.Contains(yaml, "max_in_flight: 1") {
		t.Fatalf("the copy stream is not what this test needs:\n%s", yaml)
	}
	runStream(t, yaml, 120*time.Second)
	checkCopyOf(t, e, n, func(int) bool { return true })
	mu.Lock()
	defer mu.Unlock()
	if len(outs) != 1 {
		t.Fatalf("%d kafka_eos outputs built, want 1", len(outs))
	}
	if got := outs[0].m.tally.get(metricK2KOutOfOrder); got != 0 {
		t.Fatalf("%d batches nacked after waiting for the batch before them, want 0 (it can reach the output while they wait)", got)
	}
}

// In Kafka-to-Kafka mode Benthos may call WriteBatch spareCalls times more
// than max_in_flight at once, but only max_in_flight calls write at a time:
// with max_in_flight 1, a batch of another partition (nothing to wait for)
// does not join while the first one writes, and follows once it returned.
// Plain mode tells Benthos max_in_flight and keeps no turns.
func TestK2KOnlyMaxInFlightCallsWrite(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	plain := newTestOutput(t, newResources(), baseYAML(brokers, "k2k-turns-plain", "max_in_flight: 3\n"))
	if plain.calls != 3 || plain.turns != nil {
		t.Fatalf("plain mode: %d calls, turns %v; want 3 calls and no turns", plain.calls, plain.turns)
	}
	o := newTestOutput(t, newResources(), baseYAML(brokers, "k2k-turns", "consumer_group: "+k2kGroup+"\nmax_in_flight: 1\npartitioner: manual\npartition: '0'\n"))
	if o.calls != 1+spareCalls || cap(o.turns) != 1 {
		t.Fatalf("Kafka-to-Kafka mode: %d calls, %d turns; want %d calls, 1 turn", o.calls, cap(o.turns), 1+spareCalls)
	}
	entered, release := make(chan string, 2), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free() // a failure below must not leave a-0 waiting: Close waits for its epoch
	o.hooks = &testHooks{beforeProduce: func(_ uint64, b service.MessageBatch) {
		v, _ := b[0].AsBytes()
		entered <- string(v)
		if string(v) == "a-0" {
			<-release
		}
	}}
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0, 1: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- o.WriteBatch(ctx, spanBatch("a", 0, 0, 10, 1)) }()
	if got := <-entered; got != "a-0" {
		t.Fatalf("%s produced first, want a-0", got)
	}
	go func() { errB <- o.WriteBatch(ctx, spanBatch("b", 1, 0, 10, 1)) }()
	time.Sleep(300 * time.Millisecond)
	select {
	case got := <-entered:
		t.Fatalf("%s joined while a-0 held the only turn", got)
	case err := <-errB:
		t.Fatalf("[0, 10) of partition 1 returned %v while a-0 held the only turn", err)
	default:
	}
	free()
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	if got := <-entered; got != "b-0" {
		t.Fatalf("%s produced second, want b-0", got)
	}
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] != 10 || got[1] != 10 {
		t.Fatalf("committed %v, want 0:10 1:10", got)
	}
}

// A batch that waited admitWait for the batch before it is not nacked while a
// call waits for a turn to write: that call may hold the batch before it, and
// the calls that write finish on their own. Nacked instead (as every batch in
// the spare calls was while an epoch flushed for seconds), it would only come
// back behind its predecessor. Here both turns of max_in_flight 2 are held by
// batches of other partitions held before they produce, past admitWait.
func TestK2KWaitOutlastsTheTurnsOfWritingBatches(t *testing.T) {
	c := newK2KCluster(t)
	brokers := c.ListenAddrs()
	o := newTestOutput(t, newResources(), baseYAML(brokers, "k2k-turn-wait", "consumer_group: "+k2kGroup+"\nmax_in_flight: 2\npartitioner: manual\npartition: '0'\n"))
	held, release := make(chan string, 4), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	o.hooks = &testHooks{beforeProduce: func(_ uint64, b service.MessageBatch) {
		v, _ := b[0].AsBytes()
		if s := string(v); s == "a-0" || s == "b-0" {
			held <- s
			<-release
		}
	}}
	o.StartAt(map[string]map[int32]int64{k2kIn: {0: 0, 1: 0, 2: 0}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := o.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 30s", what)
			}
		}
	}
	errs := make(chan error, 4)
	write := func(b service.MessageBatch) { go func() { errs <- o.WriteBatch(ctx, b) }() }
	write(spanBatch("a", 0, 0, 10, 1)) // holds a turn
	<-held
	write(spanBatch("w", 1, 10, 20, 1)) // waits for [0, 10) of partition 1
	waitFor("waiting batch", func() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.admitWaiting == 1 })
	write(spanBatch("b", 2, 0, 10, 1)) // holds the other turn
	<-held
	write(spanBatch("p", 1, 0, 10, 1)) // the batch w waits for: no turn left
	waitFor("call waiting for a turn", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.unadmitted.Load() == int64(o.admitWaiting)+1
	})
	time.Sleep(admitWait + 500*time.Millisecond)
	free()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := o.m.tally.get(metricK2KOutOfOrder); got != 0 {
		t.Fatalf("%d batches nacked after waiting for the batch before them, want 0", got)
	}
	if got := groupOffsets(t, brokers, k2kGroup, k2kIn); got[0] != 10 || got[1] != 20 || got[2] != 10 {
		t.Fatalf("committed %v, want 0:10 1:20 2:10", got)
	}
}
