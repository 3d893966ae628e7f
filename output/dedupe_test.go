package output

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

const dedupeExtra = `max_in_flight: 1
dedupe:
  key: ${! meta("dk") }
  position: ${! meta("dp") }
`

// posBatch returns messages "<key>@<pos>" for positions from..to of key, with
// the dedupe metadata set.
func posBatch(key string, from, to int64) service.MessageBatch {
	var b service.MessageBatch
	for p := from; p <= to; p++ {
		m := service.NewMessage([]byte(fmt.Sprintf("%s@%d", key, p)))
		m.MetaSetMut("dk", key)
		m.MetaSetMut("dp", fmt.Sprint(p))
		m.MetaSetMut("key", key)
		b = append(b, m)
	}
	return b
}

// counts returns how often each value is visible to a read_committed reader.
func counts(t testing.TB, brokers []string) map[string]int {
	t.Helper()
	return countsIn(t, brokers, testTopic)
}

// countsIn counts each value visible read_committed in topic.
func countsIn(t testing.TB, brokers []string, topic string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, v := range readCommitted(t, brokers, topic) {
		out[v]++
	}
	return out
}

func wantExactly(t testing.TB, got map[string]int, key string, from, to int64) {
	t.Helper()
	for p := from; p <= to; p++ {
		v := fmt.Sprintf("%s@%d", key, p)
		if got[v] != 1 {
			t.Errorf("%s visible %d times, want once", v, got[v])
		}
	}
}

// wantOnly checks that topic shows the records key@from to key@to
// (posBatch's values) each exactly once, and nothing else.
func wantOnly(t testing.TB, brokers []string, topic, key string, from, to int64) {
	t.Helper()
	got := countsIn(t, brokers, topic)
	wantExactly(t, got, key, from, to)
	if int64(len(got)) != to-from+1 {
		t.Fatalf("visible %v", got)
	}
}

// Replays at or below the committed position are acked and dropped, in the
// same process and after a restart (the positions come from the state cache).
func TestDedupeDropsAtOrBelow(t *testing.T) {
	c := newCluster(t)
	res := newResources()
	yaml := baseYAML(c.ListenAddrs(), "app", dedupeExtra)
	a := newTestOutput(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []service.MessageBatch{posBatch("a", 1, 3), posBatch("b", 10, 12), posBatch("a", 2, 5), posBatch("a", 1, 5)} {
		if err := a.WriteBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.m.tally.get(metricDedupeDropped); got != 2+5 {
		t.Fatalf("dropped %d, want 7", got)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pos, err := a.store.readPositions(ctx)
	if err != nil || pos["a"] != 5 || pos["b"] != 12 || len(pos) != 2 {
		t.Fatalf("stored positions %v (%v), want a=5 b=12", pos, err)
	}

	b := newTestOutput(t, res, yaml)
	for _, bt := range []service.MessageBatch{posBatch("a", 1, 7), posBatch("b", 12, 12), posBatch("c", 0, 0)} {
		if err := b.WriteBatch(ctx, bt); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.m.tally.get(metricDedupeDropped); got != 5+1 {
		t.Fatalf("dropped after restart %d, want 6", got)
	}
	got := counts(t, c.ListenAddrs())
	wantExactly(t, got, "a", 1, 7)
	wantExactly(t, got, "b", 10, 12)
	wantExactly(t, got, "c", 0, 0)
	if len(got) != 7+3+1 {
		t.Fatalf("visible %v", got)
	}
}

// A replay of positions held by an epoch still in flight is dropped; if that
// epoch then aborts, its batch is nacked and its replay is produced again.
// A batch above the aborted positions that arrives before their replay is
// nacked (and produced once replayed after them), and so is a batch above
// that nacked batch's positions before its replay.
func TestDedupeInFlightThenAbort(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("abort=%v", abort), func(t *testing.T) {
			c := newCluster(t)
			o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", dedupeExtra))
			o.conf.topic = mustInterp(t, `${! meta("topic").or("out") }`)
			hold := make(chan struct{})
			o.hooks = &testHooks{beforeCommit: func(n uint64) {
				if n == 1 {
					<-hold
				}
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first := posBatch("a", 1, 3)
			if abort {
				first[2].MetaSetMut("topic", "missing")
			}
			var wg sync.WaitGroup
			var err1 error
			wg.Go(func() { err1 = o.WriteBatch(ctx, first) })
			wait(t, 5*time.Second, "epoch 1 sealed", func() bool {
				o.mu.Lock()
				defer o.mu.Unlock()
				return o.nextEpoch == 2 && o.open == nil
			})
			// The same positions while epoch 1 is in flight: dropped.
			if err := o.WriteBatch(ctx, posBatch("a", 1, 3)); err != nil {
				t.Fatalf("replay of in-flight positions: %v", err)
			}
			if got := o.m.tally.get(metricDedupeDropped); got != 3 {
				t.Fatalf("dropped %d, want 3", got)
			}
			close(hold)
			wg.Wait()
			if !abort {
				if err1 != nil {
					t.Fatal(err1)
				}
				wantExactly(t, counts(t, c.ListenAddrs()), "a", 1, 3)
				return
			}
			if !errors.Is(err1, ErrEpochAborted) {
				t.Fatalf("epoch 1: %v, want aborted", err1)
			}
			// A later batch before the replay of the aborted positions.
			if err := o.WriteBatch(ctx, posBatch("a", 4, 5)); !errors.Is(err, ErrAwaitingReplay) {
				t.Fatalf("batch above the owed positions: %v, want ErrAwaitingReplay", err)
			}
			if err := o.WriteBatch(ctx, posBatch("a", 1, 3)); err != nil {
				t.Fatalf("replay after the abort: %v", err)
			}
			// The batch read after the nacked one arrives before the
			// nacked one's replay (Benthos' retry list re-queues a
			// batch nacked again behind others): it must wait too, or
			// the replay of 4..5 would be dropped as a duplicate.
			if err := o.WriteBatch(ctx, posBatch("a", 6, 7)); !errors.Is(err, ErrAwaitingReplay) {
				t.Fatalf("batch above a nacked batch's positions: %v, want ErrAwaitingReplay", err)
			}
			if err := o.WriteBatch(ctx, posBatch("a", 4, 5)); err != nil {
				t.Fatal(err)
			}
			if err := o.WriteBatch(ctx, posBatch("a", 6, 7)); err != nil {
				t.Fatal(err)
			}
			wantOnly(t, c.ListenAddrs(), testTopic, "a", 1, 7)
			if o.m.tally.get(metricDedupeOutOfOrder) != 2 {
				t.Fatal("out-of-order metric")
			}
		})
	}
}

// A crash between PREPARE and EndTxn leaves the epoch open; dedupe mode
// resumes its commit at restart under transaction version 2 and its positions
// are applied: the replay is dropped; under version 0 it aborts it (the open
// transaction could be a later epoch of a previous owner still running) and
// the replay is written. (After EndTxn: found committed, positions applied;
// before PREPARE: aborted by InitProducerID, replayed.)
func TestDedupeCrashAfterPrepareResumes(t *testing.T) {
	for _, tv := range kfakeTVs {
		for _, step := range []commitStep{stepPrepared, stepEnded, stepProduced} {
			t.Run(fmt.Sprintf("%s/step%d", tv.name, step), func(t *testing.T) {
				c := newCluster(t, tv.opts...)
				testDedupeCrash(t, c.ListenAddrs(), testTopic, "app", step, tv.name == "tv0")
			})
		}
	}
}

func testDedupeCrash(t *testing.T, brokers []string, topic, txnID string, step commitStep, tv0 bool) {
	res := newResources()
	yaml := yamlFor(brokers, topic, txnID, dedupeExtra)
	a := newTestOutput(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	writeReplaying(ctx, t, a, posBatch("a", 1, 2))
	a.hooks = crashAtStep(step) // the next epoch, whatever its number after a replay
	err := a.WriteBatch(ctx, posBatch("a", 3, 5))
	if errors.Is(err, errCommitAborted) {
		// A fresh slot's first transaction, ended with an abort by
		// franz-go (see writeReplaying): replayed, as Benthos would.
		t.Logf("nacked, replaying: %v", err)
		err = a.WriteBatch(ctx, posBatch("a", 3, 5))
	}
	if !errors.Is(err, errCrash) {
		t.Fatalf("crash: %v", err)
	}

	b := newTestOutput(t, res, yaml)
	want := map[commitStep]string{stepPrepared: outcomeResumed, stepEnded: outcomeFoundCommitted}[step]
	if tv0 && step == stepPrepared {
		want = outcomeAborted
	}
	if want != "" && b.m.tally.get(metricInDoubtResolved+"/"+want) != 1 {
		t.Fatalf("in-doubt outcome %s not counted", want)
	}
	b.mu.Lock()
	p, _ := b.dd.CommittedOf("a")
	b.mu.Unlock()
	wantPos := int64(5)
	switch {
	case step == stepProduced:
		wantPos = 2 // never PREPAREd: aborted by InitProducerID
	case step == stepPrepared && tv0:
		wantPos = 2 // open at restart: aborted under TV0
	}
	if p != wantPos {
		t.Fatalf("committed position of a after restart %d, want %d", p, wantPos)
	}
	// The input replays everything from the start.
	writeReplaying(ctx, t, b, posBatch("a", 1, 6))
	wantOnly(t, brokers, topic, "a", 1, 6)
}

// A position that does not parse fails the batch, naming the message and
// the value; nothing of it is written or acknowledged.
func TestDedupeBadPosition(t *testing.T) {
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", dedupeExtra))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := posBatch("a", 1, 3)
	b[1].MetaSetMut("dp", "12x")
	err := o.WriteBatch(ctx, b)
	var be *service.BatchError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), `message 1`) || !strings.Contains(err.Error(), `"12x"`) {
		t.Fatalf("%v, want a BatchError naming message 1 and its value", err)
	}
	if failed := be.IndexedErrors(); failed != 3 {
		t.Fatalf("%d messages failed, want all 3 (none may be acked unwritten)", failed)
	}
	if got := counts(t, c.ListenAddrs()); len(got) != 0 {
		t.Fatalf("visible %v", got)
	}
}

// The key bound: a new key beyond max_keys stops the output with a fatal
// error naming the key, dedupe.max_keys, its value and what to raise it to;
// nothing of the batch is acknowledged, and nothing after it. (Before, the
// batch was nacked and Benthos replayed it for ever: a silent stall.)
// Forgetting a key instead would write its replays again (I4).
func TestDedupeMaxKeys(t *testing.T) {
	fc, restore := catchFatal(t)
	defer restore()
	c := newCluster(t)
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "app", dedupeExtra+"  max_keys: 2\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range []string{"a", "b"} {
		if err := o.WriteBatch(ctx, posBatch(k, 1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	err := o.WriteBatch(ctx, posBatch("c", 1, 1))
	if !errors.Is(err, txnstate.ErrTooManyKeys) {
		t.Fatalf("third key: %v, want ErrTooManyKeys", err)
	}
	ferr := fc.err()
	if ferr == nil {
		t.Fatalf("third key: %v, and no fatal stop (the batch is replayed for ever)", err)
	}
	for _, want := range []string{`"c"`, "dedupe.max_keys", "2", "at least 3"} {
		if !strings.Contains(ferr.Error(), want) {
			t.Fatalf("fatal %q does not name %s", ferr, want)
		}
	}
	// Stopped: a known key is not written either.
	if err := o.WriteBatch(ctx, posBatch("a", 2, 1)); err == nil {
		t.Fatal("a write after the stop was acked")
	}
	if got := readCommittedNow(t, c.ListenAddrs(), testTopic); len(got) != 2 {
		t.Fatalf("%d records, want the 2 of keys a and b", len(got))
	}
}

func TestDedupeLint(t *testing.T) {
	for _, tc := range []struct{ name, extra, want string }{
		{"with consumer_group", "max_in_flight: 1\nconsumer_group: g\ndedupe: { key: a, position: '1' }\n", "mutually exclusive"},
		{"max_in_flight default", "dedupe: { key: a, position: '1' }\n", "max_in_flight: 1"},
		{"arrow messages", "max_in_flight: 1\ninput_format: arrow\ndedupe: { key: a, position: '1' }\n", "input_format arrow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := service.NewStreamBuilder()
			err := sb.AddOutputYAML("kafka_eos:\n  seed_brokers: [ localhost:9092 ]\n  topic: out\n  transactional_id: app\n  state_cache: state\n" + indent(tc.extra))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("lint: %v, want %q", err, tc.want)
			}
			_, cerr := configFromParsed(parse(t, "seed_brokers: [ localhost:9092 ]\ntopic: out\ntransactional_id: app\nstate_cache: state\n"+tc.extra), newResources())
			if cerr == nil || !strings.Contains(cerr.Error(), tc.want) {
				t.Fatalf("config: %v, want %q", cerr, tc.want)
			}
		})
	}
	sb := service.NewStreamBuilder()
	if err := sb.AddOutputYAML("kafka_eos:\n  seed_brokers: [ localhost:9092 ]\n  topic: out\n  transactional_id: app\n  state_cache: state\n  max_in_flight: 1\n  dedupe: { key: a, position: '1' }\n"); err != nil {
		t.Fatal(err)
	}
}

// A replaying input as Benthos drives it, simulated: batches are read ahead
// (readAhead wait in the pipeline while the output writes one), a nacked batch goes
// to a retry list that is served (in any order) before new reads, and a restart reads from
// the beginning again. Some first deliveries fail (a record for a missing
// topic aborts the epoch), so aborted positions are owed while later batches
// arrive first; the output must end with every (key, position) exactly once.
func TestDedupeReplaySimulation(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { testDedupeReplaySimulation(t, seed) })
	}
}

func testDedupeReplaySimulation(t *testing.T, seed uint64) {
	c := newCluster(t)
	res := newResources()
	yaml := baseYAML(c.ListenAddrs(), "app", dedupeExtra)
	const perKey, batchSize, readAhead = 120, 10, 6
	type src struct {
		key  string
		from int64
	}
	var all []src // in input order: keys interleaved
	for from := int64(0); from < perKey; from += batchSize {
		for _, k := range []string{"a", "b"} {
			all = append(all, src{k, from})
		}
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	failFirst := map[int]bool{} // batch index -> its first delivery fails
	for len(failFirst) < 5 {
		failFirst[rng.IntN(len(all))] = true
	}
	restartAt := map[int]bool{} // write number -> restart there
	for len(restartAt) < 3 {
		restartAt[1+rng.IntN(40)] = true
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	newOut := func() *output {
		o := newTestOutput(t, res, yaml)
		o.conf.topic = mustInterp(t, `${! meta("topic").or("out") }`)
		return o
	}
	o := newOut()
	type item struct{ idx int }
	var (
		next     int    // next batch the input reads
		retry    []item // nacked, served first
		pipeline []item // read ahead, in order
		steps    int
		nacks    int
		failed   = map[int]bool{}
	)
	shift := func() {
		if len(retry) > 0 {
			// Any nacked batch may come back first: Benthos' retry
			// list re-queues a batch nacked again behind the others
			// (the chaos suite's dedupe loss needed that order).
			j := rng.IntN(len(retry))
			pipeline = append(pipeline, retry[j])
			retry = append(retry[:j], retry[j+1:]...)
		} else if next < len(all) {
			pipeline = append(pipeline, item{next})
			next++
		}
	}
	for range readAhead {
		shift()
	}
	for len(pipeline) > 0 {
		steps++
		if steps > 2000 {
			t.Fatal("no end after 2000 writes")
		}
		if restartAt[steps] {
			_ = o.Close(ctx)
			o = newOut()
			next, retry, pipeline = 0, nil, nil
			for range readAhead {
				shift()
			}
			continue
		}
		it := pipeline[0]
		pipeline = pipeline[1:]
		b := posBatch(all[it.idx].key, all[it.idx].from, all[it.idx].from+batchSize-1)
		if failFirst[it.idx] && !failed[it.idx] {
			failed[it.idx] = true
			b[len(b)/2].MetaSetMut("topic", "missing")
		}
		if err := o.WriteBatch(ctx, b); err != nil {
			nacks++
			retry = append(retry, it)
		}
		shift()
	}
	got := counts(t, c.ListenAddrs())
	wantExactly(t, got, "a", 0, perKey-1)
	wantExactly(t, got, "b", 0, perKey-1)
	if len(got) != 2*perKey {
		t.Fatalf("visible %d values, want %d", len(got), 2*perKey)
	}
	t.Logf("%d writes, %d nacked, %d failing first deliveries", steps, nacks, len(failed))
}

// EndTransaction(commit) returns nil, yet the broker did not commit: the
// transaction ended aborted at the stored producer id and epoch (here franz-go
// is made to abort it; in the wild, a nil without an EndTxn over a transaction
// that ended otherwise). Acking that epoch would make its positions committed
// and its records lost: the restarted output would drop their replay. The
// commit check must see the abort and take the in-doubt path (the epoch is
// then decided aborted, now or at the next start), and the replay is written
// exactly once. kfake TV0 and TV2 (under TV2 kfake shows Empty at the bumped
// epoch after a commit and an abort alike; the read_committed probe finds the
// abort, see verifyCommit). On Apache Kafka, TV0 and TV2:
// TestKafkaDedupeCommitReportedButAborted.
func TestDedupeCommitReportedButAborted(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c := newCluster(t, tv.opts...)
			testDedupeCommitReportedButAborted(t, c.ListenAddrs(), testTopic, "app")
		})
	}
}

// On kfake TV2 the broker shows Empty at the bumped epoch after a commit and an
// abort alike; the commit check asks the read_committed probe at the epoch's
// first offsets there, which finds the abort. The epoch is then a definite
// abort: its WriteBatch returns an error (Benthos replays the batch), the
// output goes on, its positions are not committed, and the replay is written
// exactly once.
func TestDedupeCommitReportedButAbortedKfakeTV2(t *testing.T) {
	c := newCluster(t, kfakeTVs[0].opts...)
	fc, restore := catchFatal(t)
	defer restore()
	res := newResources()
	yaml := yamlFor(c.ListenAddrs(), testTopic, "app", dedupeExtra)
	a := newTestOutput(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, posBatch("a", 1, 3)); err != nil {
		t.Fatal(err)
	}
	a.endTxn = func(cl *kgo.Client, ctx context.Context, how kgo.TransactionEndTry) error {
		return cl.EndTransaction(ctx, kgo.TryAbort) // franz-go's abort of a commit, reported as success
	}
	err := a.WriteBatch(ctx, posBatch("a", 4, 6))
	var ee *EpochError
	if !errors.As(err, &ee) {
		t.Fatalf("WriteBatch of the epoch franz-go aborted: %v, want an *EpochError (nacked)", err)
	}
	if fc.err() != nil {
		t.Fatalf("the output stopped on a definite abort: %v", fc.err())
	}
	a.mu.Lock()
	p, _ := a.dd.CommittedOf("a")
	a.mu.Unlock()
	if p != 3 {
		t.Fatalf("committed position of a %d, want 3 (the aborted epoch's positions are not committed)", p)
	}
	// Benthos replays the nacked batch.
	a.endTxn = (*kgo.Client).EndTransaction
	if err := a.WriteBatch(ctx, posBatch("a", 4, 6)); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, c.ListenAddrs(), testTopic, "a", 1, 6)
	if n := a.m.tally.get("commit_aborted"); n != 1 {
		t.Fatalf("commit_aborted counted %d, want 1", n)
	}
}

func testDedupeCommitReportedButAborted(t *testing.T, brokers []string, topic, txnID string) {
	fc, restore := catchFatal(t)
	defer func() { restore() }()
	res := newResources()
	yaml := yamlFor(brokers, topic, txnID, dedupeExtra)
	a := newTestOutput(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := a.WriteBatch(ctx, posBatch("a", 1, 3)); err != nil {
		t.Fatal(err)
	}
	writeCommitTurnedAbort(ctx, t, a, posBatch("a", 4, 6), fc, "an epoch the broker aborted was acknowledged as committed")
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	_ = a.Close(cctx)
	restore()
	restore = fatal.SetHandler(nil)

	// The restarted output, the input replaying from the start.
	b := newTestOutput(t, res, yaml)
	b.mu.Lock()
	p, _ := b.dd.CommittedOf("a")
	b.mu.Unlock()
	if p != 3 {
		t.Fatalf("committed position of a after restart %d, want 3 (the aborted epoch's positions are not committed)", p)
	}
	if err := b.WriteBatch(ctx, posBatch("a", 1, 6)); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, brokers, topic, "a", 1, 6)
}
