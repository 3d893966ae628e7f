package output

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

const testTopic = "out"

// newCluster starts a one-broker kfake cluster with testTopic (3 partitions)
// created explicitly: transactional produce to auto-created topics fails.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newResources returns mock resources with a memory cache "state"; share it
// between output instances to model a restart with a durable cache.
func newResources() *service.Resources {
	return service.MockResources(service.MockResourcesOptAddCache("state"))
}

func parse(t testing.TB, yaml string) *service.ParsedConfig {
	t.Helper()
	pc, err := Spec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

func baseYAML(brokers []string, txnID string, extra string) string {
	return yamlFor(brokers, testTopic, txnID, extra)
}

func yamlFor(brokers []string, topic, txnID string, extra string) string {
	return fmt.Sprintf(`
seed_brokers: [ %s ]
topic: %s
key: ${! meta("key") }
transactional_id: %s
state_cache: state
transaction_timeout: 30s
commit_timeout: 5s
epoch:
  interval: 50ms
%s`, strings.Join(brokers, ","), topic, txnID, extra)
}

// newTestOutput builds and connects an output on res.
func newTestOutput(t testing.TB, res *service.Resources, yaml string) *output {
	t.Helper()
	o := newUnconnected(t, res, yaml)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := o.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	return o
}

func newUnconnected(t testing.TB, res *service.Resources, yaml string) *output {
	t.Helper()
	o, err := newOutputFromParsed(parse(t, yaml), res)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = o.Close(ctx)
	})
	return o
}

func batchOf(prefix string, n int) service.MessageBatch {
	b := make(service.MessageBatch, n)
	for i := range b {
		m := service.NewMessage([]byte(fmt.Sprintf("%s-%d", prefix, i)))
		m.MetaSetMut("key", fmt.Sprintf("k%d", i))
		b[i] = m
	}
	return b
}

// checkBatchesOnce checks that each record of the batches want names, a
// batchOf(prefix, n) for each prefix and n in want, is visible exactly once in
// testTopic to a read_committed reader (counts).
func checkBatchesOnce(t testing.TB, brokers []string, want map[string]int) {
	t.Helper()
	got := counts(t, brokers)
	for p, n := range want {
		for i := range n {
			if v := fmt.Sprintf("%s-%d", p, i); got[v] != 1 {
				t.Errorf("%s visible %d times, want once (visible: %v)", v, got[v], got)
			}
		}
	}
}

// readCommitted returns every value a read_committed consumer sees in topic:
// every partition read to its last stable offset, listed before the read
// (after waiting up to 10s for transactions whose markers are still being
// written). The read ends on its positions, never on a quiet period, and a
// read that cannot reach its end fails the test as a failure of the reader.
func readCommitted(t testing.TB, brokers []string, topic string) []string {
	t.Helper()
	return readCommittedFor(t, brokers, topic, 10*time.Second, 2*time.Minute)
}

// readCommittedNow is readCommitted to the last stable offsets as they are
// now, without waiting for open transactions: for polling progress while
// epochs are open.
func readCommittedNow(t testing.TB, brokers []string, topic string) []string {
	t.Helper()
	return readCommittedFor(t, brokers, topic, 0, time.Minute)
}

func readCommittedFor(t testing.TB, brokers []string, topic string, settle, deadline time.Duration) []string {
	t.Helper()
	recs := readCommittedRecords(t, brokers, topic, settle, deadline)
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

// readCommittedRecords reads every partition of topic read_committed from its
// start to its last stable offset (kafkatest.ReadCommitted: positions, not a
// quiet period), after waiting up to settle for the last stable offsets to
// reach the high watermarks. It returns the records partition by partition,
// each in offset order, and fails the test if the read did not reach its end
// within deadline (at least a minute).
func readCommittedRecords(t testing.TB, brokers []string, topic string, settle, deadline time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), max(deadline, time.Minute))
	defer cancel()
	ends, err := kafkatest.SettledEnds(ctx, cl, topic, settle)
	if err != nil {
		t.Fatalf("read_committed reader of %s: %v", topic, err)
	}
	byPart, err := kafkatest.ReadCommittedTo(ctx, cl, topic, ends)
	if err != nil {
		t.Fatalf("read_committed reader of %s: %v", topic, err)
	}
	parts := make([]int32, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	var out []*kgo.Record
	for _, p := range parts {
		out = append(out, byPart[p]...)
	}
	return out
}

// fatalCatch stands in for fatal's handler (which exits the process) and
// keeps the last error raised.
type fatalCatch struct {
	mu     sync.Mutex
	raised error
}

// catchFatal installs a fatalCatch as fatal's handler; restore puts the
// previous handler back and clears the recorded error.
//
// fatal calls its handler for the first raise only, until a restore clears
// it. So a fatal error left recorded by an earlier test (one that raised
// without catching) would keep this test's handler from ever being called,
// and a test waiting for its own fatal stop would fail far from the cause:
// catchFatal fails the test at once instead, naming the error left behind.
func catchFatal(t testing.TB) (fc *fatalCatch, restore func()) {
	t.Helper()
	if err := fatal.Err(); err != nil {
		t.Fatalf("a fatal error is still recorded from an earlier test, which raised it without catchFatal's restore: %v", err)
	}
	fc = &fatalCatch{}
	return fc, fatal.SetHandler(func(err error) {
		fc.mu.Lock()
		fc.raised = err
		fc.mu.Unlock()
	})
}

// err is the last error raised, nil before any.
func (fc *fatalCatch) err() error {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.raised
}

// wait polls cond until it holds or d passes.
func wait(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nextSlot is the slot the output's next epoch runs on: the one a test
// injects its fault on before writing a batch.
func nextSlot(a *output) *slot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slots[txnstate.SlotFor(a.nextEpoch, len(a.slots))]
}

func slotRecord(t testing.TB, o *output, n int) (txnstate.Record, bool) {
	t.Helper()
	r, ok, err := o.store.readSlot(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return r, ok
}

func mustInterp(t testing.TB, s string) *service.InterpolatedString {
	t.Helper()
	is, err := service.NewInterpolatedString(s)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// writeCommitTurnedAbort makes a's EndTransaction(commit) abort the
// transaction while reporting success (franz-go's nil over a transaction the
// broker did not commit), writes batch and waits until its epoch settled:
// WriteBatch returned, or the output raised a fatal stop (fc). An epoch acked
// on that nil fails the test with acked.
func writeCommitTurnedAbort(ctx context.Context, t *testing.T, a *output, batch service.MessageBatch, fc *fatalCatch, acked string) {
	t.Helper()
	a.endTxn = func(cl *kgo.Client, ctx context.Context, how kgo.TransactionEndTry) error {
		if how == kgo.TryCommit {
			return cl.EndTransaction(ctx, kgo.TryAbort)
		}
		return cl.EndTransaction(ctx, how)
	}
	done := make(chan error, 1)
	go func() { done <- a.WriteBatch(ctx, batch) }()
	var werr error
	returned := false
	wait(t, 60*time.Second, "the epoch settled (nacked, or an in-doubt stop)", func() bool {
		select {
		case werr = <-done:
			returned = true
			return true
		default:
		}
		return fc.err() != nil
	})
	if returned && werr == nil {
		t.Fatal(acked)
	}
	t.Logf("settled: returned=%v err=%v stopped=%v", returned, werr, fc.err())
}

// writeReplaying writes batch as Benthos would deliver it: an epoch the commit
// check found aborted after franz-go's EndTransaction(TryCommit) ended it with
// an abort (it does, for a fresh client's first transaction on kfake; see
// verifyCommit) is nacked, and the batch is sent again. Any other error fails
// the test.
func writeReplaying(ctx context.Context, t testing.TB, o *output, batch service.MessageBatch) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := o.WriteBatch(ctx, batch)
		if err == nil {
			return
		}
		if !errors.Is(err, errCommitAborted) || attempt == 5 {
			t.Fatalf("write (attempt %d): %v", attempt, err)
		}
		t.Logf("nacked, replaying: %v", err)
	}
}

// rivalInstance is another instance that took a slot's transactional id from
// the output: its transactional client and the producer id and epoch its
// InitProducerID got.
type rivalInstance struct {
	cl    *kgo.Client
	id    string
	pid   int64
	epoch int16
}

// newRival starts another instance on transactional id id (producing to
// testTopic): its client's InitProducerID fences the output's producer on the
// id, as a second instance started with the same transactional_id would. The
// client is closed at the end of the test.
func newRival(ctx context.Context, t testing.TB, brokers []string, id string) *rivalInstance {
	t.Helper()
	r, err := takeID(ctx, brokers, id)
	if err != nil {
		t.Fatalf("the other instance's InitProducerID: %v", err)
	}
	t.Cleanup(r.cl.Close)
	return r
}

// epochOpened returns when live epoch n of o opened, as the output measures
// its local deadline from (zero if n is not live).
func epochOpened(o *output, n uint64) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ep := range o.live {
		if ep.n == n {
			return ep.opened
		}
	}
	return time.Time{}
}

// takeID is newRival for a goroutine other than the test's (a hook): it
// returns the error, and the caller closes the client.
func takeID(ctx context.Context, brokers []string, id string) (*rivalInstance, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(id),
		kgo.TransactionTimeout(30*time.Second), kgo.DefaultProduceTopic(testTopic))
	if err != nil {
		return nil, err
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &rivalInstance{cl: cl, id: id, pid: pid, epoch: epoch}, nil
}

// countInits counts, from now on, the InitProducerID requests c receives for
// transactional id id.
func countInits(c *kfake.Cluster, id string) *atomic.Int32 {
	var n atomic.Int32
	c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if req := kreq.(*kmsg.InitProducerIDRequest); req.TransactionalID != nil && *req.TransactionalID == id {
			n.Add(1)
		}
		return nil, nil, false
	})
	return &n
}

// checkStillOwns checks that the rival still owns its transactional id
// after the output's epoch ended (an abort, or a commit on a client that is
// replaced): the broker (read through a) shows the rival's
// producer id and epoch, not a re-initialisation by the output, and the rival
// can produce and commit (rivalCommits).
func (r *rivalInstance) checkStillOwns(ctx context.Context, t testing.TB, a *output) {
	t.Helper()
	if obs, err := a.describe(ctx, r.id); err != nil || obs.ProducerID != r.pid || obs.ProducerEpoch != r.epoch {
		t.Errorf("broker shows %+v (%v) after the output's epoch, want the other instance's producer id %d epoch %d: the slot was re-initialised", obs, err, r.pid, r.epoch)
	}
	rivalCommits(ctx, t, r.cl)
}

// rivalCommits checks that rival, the client of another instance that took a
// transactional id from the output, can still begin a transaction, produce in
// it and commit it: an output that took the id back (a fresh InitProducerID)
// would have fenced it.
func rivalCommits(ctx context.Context, t testing.TB, rival *kgo.Client) {
	t.Helper()
	if err := rival.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := rival.ProduceSync(ctx, &kgo.Record{Value: []byte("rival-0")}).FirstErr(); err != nil {
		t.Errorf("the other instance's produce: %v", err)
	}
	if err := rival.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Errorf("the other instance's commit: %v (fenced by the output's re-initialisation)", err)
	}
}

// refusedProduce answers every partition of a Produce request with code,
// applying none of it (a broker refusing the write).
func refusedProduce(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, p := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = p.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// kfakeTVs are kfake's two transaction versions, for tests that run under
// both: 2 (kfake's default) and 0 (a broker capped at Kafka 3.9's request
// versions, where an EndTxn does not bump the producer epoch).
var kfakeTVs = []struct {
	name string
	opts []kfake.Opt
}{{"tv2", nil}, {"tv0", []kfake.Opt{kfake.MaxVersions(kversion.V3_9_0())}}}

// testCaches holds the cache instance each test made for a test cache
// plugin (registerTestCache): Benthos builds a cache from its config, so
// the plugin finds the instance by the test's name in that config.
var (
	testCachesMu sync.Mutex
	testCaches   = map[string]service.Cache{}
)

// registerTestCache registers the cache plugin name, whose config names the
// test whose instance (testCacheResources) it returns.
func registerTestCache(plugin string) {
	spec := service.NewConfigSpec().Field(service.NewStringField("name"))
	err := service.RegisterCache(plugin, spec, func(conf *service.ParsedConfig, _ *service.Resources) (service.Cache, error) {
		name, err := conf.FieldString("name")
		if err != nil {
			return nil, err
		}
		testCachesMu.Lock()
		defer testCachesMu.Unlock()
		return testCaches[plugin+"/"+name], nil
	})
	if err != nil {
		panic(err)
	}
}

// testCacheResources builds resources whose cache "state" is c, through
// the test cache plugin (registerTestCache).
func testCacheResources(t testing.TB, plugin string, c service.Cache) *service.Resources {
	t.Helper()
	key := plugin + "/" + t.Name()
	testCachesMu.Lock()
	testCaches[key] = c
	testCachesMu.Unlock()
	rb := service.NewResourceBuilder()
	if err := rb.AddCacheYAML("label: state\n" + plugin + ":\n  name: " + t.Name() + "\n"); err != nil {
		t.Fatal(err)
	}
	res, closeFn, err := rb.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = closeFn(context.Background())
		testCachesMu.Lock()
		delete(testCaches, key)
		testCachesMu.Unlock()
	})
	return res
}
