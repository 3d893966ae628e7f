package output

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/txnstate"
)

// dedupeChildYAML: generate replays the same ordered sequence at every start
// (counter() from 1: a replayable source without any offset store), values
// "<run>:<n>", key n mod 3, position n; the output runs in dedupe mode with
// the kafka_state cache.
func dedupeChildYAML(brokers []string, topic, txnID, stateTopic, run string, count int) string {
	return fmt.Sprintf(`
logger: { level: info }
input:
  generate:
    count: %d
    interval: 10ms
    batch_size: 20
    mapping: |
      let n = counter()
      root = "%s:" + $n.string()
      meta dk = ($n %% 3).string()
      meta dp = $n.string()
output:
  kafka_eos:
    seed_brokers: [ %s ]
    topic: %s
    transactional_id: %s
    state_cache: state
    epoch: { interval: 20ms }
    max_in_flight: 1
    dedupe:
      key: ${! meta("dk") }
      position: ${! meta("dp") }
cache_resources:
  - label: state
    kafka_state:
      seed_brokers: [ %s ]
      topic: %s
`, count, run, strings.Join(brokers, ","), topic, txnID, strings.Join(brokers, ","), stateTopic)
}

// SIGKILL of a real process copying a replayable source in dedupe mode,
// three times mid-copy (each once a read_committed reader saw the copy move
// past another fifth of the input), then a run to the end: every value
// exactly once.
func TestDedupeKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	c := newCluster(t)
	testDedupeKillNine(t, c.ListenAddrs(), testTopic, "ddkill", "ddkill-state")
}

// The same on Apache Kafka, both transaction versions.
func TestKafkaDedupeKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testDedupeKillNine(t, env.brokers, env.topic, env.txnID, env.stateTopic(t))
	})
}

// The crash tests of the kfake suite on Apache Kafka: between PREPARE and
// EndTxn (resume-commit with the positions under TV2, abort-open and replayed
// under TV0), after EndTxn (found committed), before PREPARE (aborted,
// replayed).
func TestKafkaDedupeCrash(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		for _, step := range []commitStep{stepPrepared, stepEnded, stepProduced} {
			t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) {
				topic := kafkatest.Topic(t, strings.Join(env.brokers, ","), 3)
				testDedupeCrash(t, env.brokers, topic, fmt.Sprintf("%s-%d", env.txnID, step), step, env.tv == txnstate.TV0)
			})
		}
	})
}

func testDedupeKillNine(t *testing.T, brokers []string, topic, txnID, stateTopic string) {
	const n = 4000
	const run = "dd"
	seen := func() (map[string]int, int) {
		got := map[string]int{}
		dups := 0
		for _, v := range readCommitted(t, brokers, topic) {
			if strings.HasPrefix(v, run+":") {
				got[v]++
				if got[v] > 1 {
					dups++
				}
			}
		}
		return got, dups
	}
	prog := newProgress(t, brokers, topic)
	for round := range 3 {
		target := int64((round + 1) * n / 5)
		killChild(t, fmt.Sprintf("round %d", round), dedupeChildYAML(brokers, topic, txnID, stateTopic, run, n),
			func() bool { return prog.count() >= target }, 2*time.Minute, 0, 150*time.Millisecond)
		got, dups := seen()
		t.Logf("round %d: killed past %d records, %d distinct values visible, %d duplicates", round, target, len(got), dups)
		if dups != 0 {
			t.Fatalf("round %d: %d duplicates", round, dups)
		}
		if len(got) >= n {
			t.Fatalf("round %d: the copy finished before the SIGKILL", round)
		}
	}
	runChildToEnd(t, dedupeChildYAML(brokers, topic, txnID, stateTopic, run, n), 3*time.Minute)
	got, dups := seen()
	missing := 0
	for i := 1; i <= n; i++ {
		if got[fmt.Sprintf("%s:%d", run, i)] == 0 {
			missing++
		}
	}
	t.Logf("final: %d distinct values of %d, %d duplicates, %d missing", len(got), n, dups, missing)
	if dups != 0 || missing != 0 || len(got) != n {
		t.Fatalf("dedupe copy across 3 SIGKILLs: %d duplicates, %d missing, %d distinct (want 0, 0, %d)", dups, missing, len(got), n)
	}
}

// progress counts the records a read_committed reader sees in topic, as they
// come.
type progress struct {
	n    atomic.Int64
	stop context.CancelFunc
}

func newProgress(t *testing.T, brokers []string, topic string) *progress {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &progress{stop: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			p.n.Add(int64(fs.NumRecords()))
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return p
}

func (p *progress) count() int64 { return p.n.Load() }

// TestDedupeCommitReportedButAborted on Apache Kafka: the check reads the
// broker's state, CompleteAbort/PrepareAbort at the stored epoch (TV0) or at
// the bumped one (TV2; the client's epoch bump alone was taken for a commit
// before, and this test failed under TV2: the aborted epoch was acked).
func TestKafkaDedupeCommitReportedButAborted(t *testing.T) {
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testDedupeCommitReportedButAborted(t, env.brokers, env.topic, env.txnID)
	})
}
