package input

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// env is a cluster the scenarios run against: kfake (always) or Apache Kafka
// (kafka_test files, when the broker's address is in the environment).
type env struct {
	name    string
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
	fake    *kfake.Cluster // nil against a real broker
}

var seq atomic.Int64

func newKfakeEnv(t testing.TB) *env {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e := newEnv(t, "kfake", c.ListenAddrs())
	e.fake = c
	return e
}

func newEnv(t testing.TB, name string, brokers []string, opts ...kgo.Opt) *env {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &env{name: name, brokers: brokers, cl: cl, adm: kadm.NewClient(cl)}
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// uniq returns a name unique to this test run.
func uniq(t testing.TB, prefix string) string {
	n := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(n) > 80 {
		n = n[len(n)-80:]
	}
	return fmt.Sprintf("%s-%s-%d-%d", prefix, n, time.Now().UnixNano()%1e9, seq.Add(1))
}

// topic creates a topic explicitly (kfake's auto-created topics have 10
// partitions and refuse transactional produce).
func (e *env) topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := uniq(t, "t")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := e.adm.CreateTopic(ctx, partitions, 1, nil, name)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	// Wait until every partition has a leader and lists offsets.
	wait(t, 20*time.Second, func() bool {
		l, err := e.adm.ListEndOffsets(ctx, name)
		if err != nil || l.Error() != nil {
			return false
		}
		n := 0
		l.Each(func(kadm.ListedOffset) { n++ })
		return n == int(partitions)
	})
	return name
}

// produce writes values to one partition, one record batch per call of
// produce (a nil value is a tombstone). It returns the offsets.
func (e *env) produce(t testing.TB, topic string, partition int32, values ...[]byte) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Key: fmt.Appendf(nil, "k%d", i), Value: v})
	}
	res := e.cl.ProduceSync(ctx, recs...)
	require.NoError(t, res.FirstErr())
	var offs []int64
	for _, r := range res {
		offs = append(offs, r.Record.Offset)
	}
	return offs
}

func vals(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s%d", prefix, i)
	}
	return out
}

// txn is a transactional producer; end(false) aborts.
type txn struct {
	t  testing.TB
	cl *kgo.Client
}

func (e *env) beginTxn(t testing.TB) *txn {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(uniq(t, "txn")), kgo.TransactionTimeout(60*time.Second))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.BeginTransaction())
	return &txn{t: t, cl: cl}
}

func (x *txn) produce(topic string, partition int32, values ...[]byte) []int64 {
	x.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: v})
	}
	res := x.cl.ProduceSync(ctx, recs...)
	require.NoError(x.t, res.FirstErr())
	var offs []int64
	for _, r := range res {
		offs = append(offs, r.Record.Offset)
	}
	return offs
}

func (x *txn) end(commit bool) {
	x.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(x.t, x.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)))
}

func (e *env) endOffset(t testing.TB, topic string, partition int32) int64 {
	t.Helper()
	l, err := e.adm.ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	o, ok := l.Lookup(topic, partition)
	require.True(t, ok)
	return o.Offset
}

func (e *env) committed(t testing.TB, group, topic string, partition int32) int64 {
	t.Helper()
	var (
		resp kadm.OffsetResponses
		err  error
	)
	for range 50 {
		resp, err = e.adm.FetchOffsets(context.Background(), group)
		if !errors.Is(err, kerr.CoordinatorNotAvailable) && !errors.Is(err, kerr.CoordinatorLoadInProgress) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1 // kfake, for a group that never committed
	}
	require.NoError(t, err)
	o, ok := resp.Lookup(topic, partition)
	if !ok || o.Err != nil {
		return -1
	}
	return o.At
}

func (e *env) commit(t testing.TB, group, topic string, partition int32, at int64) {
	t.Helper()
	os := kadm.Offsets{}
	os.AddOffset(topic, partition, at, -1)
	resp, err := e.adm.CommitOffsets(context.Background(), group, os)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// waitEnd waits until the partition's high watermark and last stable offset
// both reach want. Kafka answers EndTxn once the outcome is in the
// transaction log and writes the markers afterwards, so the end offset right
// after EndTransaction may not include the marker yet.
func (e *env) waitEnd(t testing.TB, topic string, partition int32, want int64) {
	t.Helper()
	wait(t, 20*time.Second, func() bool {
		hwm, err1 := e.adm.ListEndOffsets(context.Background(), topic)
		lso, err2 := e.adm.ListCommittedOffsets(context.Background(), topic)
		if err1 != nil || err2 != nil {
			return false
		}
		h, _ := hwm.Lookup(topic, partition)
		l, _ := lso.Lookup(topic, partition)
		return h.Offset == want && l.Offset == want
	})
}

func wait(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	waitFor(t, d, func() string {
		if cond() {
			return ""
		}
		return "condition not met"
	})
}

// waitFor polls cond until it returns "" and fails the test with its last
// answer after d.
func waitFor(t testing.TB, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("within %v: %s", d, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// got is one emitted message.
type got struct {
	Topic     string
	Partition int32
	Offset    int64
	Value     string
	Tombstone bool
	Failed    bool
}

// harness drives one kafka_native input the way Benthos does: through the
// auto-replay wrapper, Connect until it succeeds, then ReadBatch and acks.
type harness struct {
	t     testing.TB
	e     *env
	raw   *kafkaInput
	in    service.BatchInput
	fatal chan error
}

// newInput builds an input from YAML (seed_brokers is prepended).
func (e *env) newInput(t testing.TB, yaml string) *harness {
	t.Helper()
	return e.newInputWith(t, yaml, service.MockResources())
}

// boundedRead connects an input that reads topic to its end (stop_offset
// latest) under a new consumer group, with the extra YAML lines, and returns
// it with the group.
func (e *env) boundedRead(t testing.TB, topic, extra string) (*harness, string) {
	t.Helper()
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\n%s", topic, group, strings.TrimPrefix(extra, "\n")))
	h.mustConnect()
	return h, group
}

// newInputWith builds an input on the given resources.
func (e *env) newInputWith(t testing.TB, yaml string, res *service.Resources) *harness {
	t.Helper()
	h := &harness{t: t, e: e, fatal: make(chan error, 1)}
	restore := fatal.SetHandler(func(err error) {
		select {
		case h.fatal <- err:
		default:
		}
	})
	t.Cleanup(restore)
	conf := fmt.Sprintf("seed_brokers: [ %s ]\n%s", strings.Join(e.brokers, ","), yaml)
	pc, err := Spec().ParseYAML(conf, nil)
	require.NoError(t, err)
	h.raw, err = newInputFromParsed(pc, res)
	require.NoError(t, err)
	h.in = service.AutoRetryNacksBatched(h.raw)
	t.Cleanup(func() {
		// Close must not wait for anything slow (a session timeout, a
		// high watermark wait, a retry loop): 15s tells that apart from
		// a loaded machine's slowness.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		require.NoError(t, h.in.Close(ctx))
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("Close took %v", d)
		}
	})
	return h
}

// requireFatal checks that err stopped the stream through the fatal path:
// it is a *fatal.Error (wrapping want, when given) and the fatal handler was
// called.
func requireFatal(t *testing.T, h *harness, err error, want error) {
	t.Helper()
	require.Error(t, err)
	var fe *fatal.Error
	require.ErrorAs(t, err, &fe, "not raised as fatal: %v", err)
	if want != nil {
		require.ErrorIs(t, err, want)
	}
	select {
	case <-h.fatal:
	case <-time.After(10 * time.Second):
		t.Fatal("the fatal handler was not called")
	}
}

// readError reads until ReadBatch fails (within readTimeout) and returns the
// error.
func (h *harness) readError() error {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	for {
		_, ack, err := h.in.ReadBatch(ctx)
		if err != nil {
			return err
		}
		_ = ack(ctx, nil)
	}
}

// connect calls Connect until it succeeds or fails fatally, as Benthos does
// (a group coordinator still loading answers COORDINATOR_NOT_AVAILABLE).
func (h *harness) connect() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := h.connectOnce()
		var fe *fatal.Error
		if err == nil || errors.As(err, &fe) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *harness) connectOnce() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return h.in.Connect(ctx)
}

func (h *harness) mustConnect() {
	h.t.Helper()
	require.NoError(h.t, h.connect())
}

func toGot(b service.MessageBatch) []got {
	var out []got
	for _, m := range b {
		v, _ := m.AsBytes()
		g := got{Value: string(v), Failed: m.GetError() != nil}
		mv, _ := m.MetaGetMut(metaTopic)
		g.Topic, _ = mv.(string)
		mv, _ = m.MetaGetMut(metaPartition)
		p, _ := mv.(int64)
		g.Partition = int32(p)
		mv, _ = m.MetaGetMut(metaOffset)
		g.Offset, _ = mv.(int64)
		mv, _ = m.MetaGetMut(metaTombstone)
		g.Tombstone, _ = mv.(bool)
		out = append(out, g)
	}
	return out
}

// readAll reads and acks until the input ends, failing the test after d.
func (h *harness) readAll(d time.Duration) []got {
	h.t.Helper()
	out, err := h.readUntilEnd(d)
	require.NoError(h.t, err)
	return out
}

func (h *harness) readUntilEnd(d time.Duration) ([]got, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []got
	for {
		b, ack, err := h.in.ReadBatch(ctx)
		if errors.Is(err, service.ErrEndOfInput) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, toGot(b)...)
		require.NoError(h.t, ack(ctx, nil))
	}
}

// readN reads until n messages arrived, acking them.
func (h *harness) readN(n int, d time.Duration) []got {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []got
	for len(out) < n {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(h.t, err, "after %d of %d messages", len(out), n)
		out = append(out, toGot(b)...)
		require.NoError(h.t, ack(ctx, nil))
	}
	return out
}

func values(gs []got) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Value)
	}
	return out
}

func strs(vs [][]byte) []string {
	var out []string
	for _, v := range vs {
		out = append(out, string(v))
	}
	return out
}

// byPartition groups emitted values by partition, in emission order.
func byPartition(gs []got) map[int32][]string {
	out := map[int32][]string{}
	for _, g := range gs {
		out[g.Partition] = append(out[g.Partition], g.Value)
	}
	return out
}
