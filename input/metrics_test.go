package input

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captureMetrics is a metrics exporter that keeps the last value of every
// series, keyed `name{v1,v2}` (Benthos prepends the label and path values).
type captureMetrics struct {
	mu   sync.Mutex
	vals map[string]int64
}

type captureSeries struct {
	m   *captureMetrics
	key string
}

func (s captureSeries) Incr(n int64) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.vals[s.key] += n
}
func (s captureSeries) Set(n int64) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.vals[s.key] = n
}
func (captureSeries) Timing(int64) {}

func (m *captureMetrics) key(name string, lvs []string) string {
	return name + "{" + strings.Join(lvs, ",") + "}"
}
func (m *captureMetrics) NewCounterCtor(name string, _ ...string) service.MetricsExporterCounterCtor {
	return func(lvs ...string) service.MetricsExporterCounter { return captureSeries{m, m.key(name, lvs)} }
}
func (m *captureMetrics) NewTimerCtor(name string, _ ...string) service.MetricsExporterTimerCtor {
	return func(lvs ...string) service.MetricsExporterTimer { return captureSeries{m, m.key(name, lvs)} }
}
func (m *captureMetrics) NewGaugeCtor(name string, _ ...string) service.MetricsExporterGaugeCtor {
	return func(lvs ...string) service.MetricsExporterGauge { return captureSeries{m, m.key(name, lvs)} }
}
func (*captureMetrics) Close(context.Context) error { return nil }

func (m *captureMetrics) get(k string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[k]
	return v, ok
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureStream builds a stream of the input YAML into consume, with its
// metrics captured and its logs (info) kept.
func captureStream(t *testing.T, input string, consume func(context.Context, service.MessageBatch) error) (*service.Stream, *captureMetrics, *syncBuf) {
	t.Helper()
	capture := &captureMetrics{vals: map[string]int64{}}
	senv := service.NewEnvironment()
	require.NoError(t, senv.RegisterMetricsExporter("capture", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Logger) (service.MetricsExporter, error) { return capture, nil }))
	b := senv.NewStreamBuilder()
	require.NoError(t, b.SetMetricsYAML("capture: {}"))
	logs := &syncBuf{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, b.AddInputYAML(input))
	require.NoError(t, b.AddBatchConsumerFunc(consume))
	s, err := b.Build()
	require.NoError(t, err)
	return s, capture, logs
}

// The metrics and the progress log of a bounded read: per-partition position,
// committed offset and lag (0 at the end), bytes in, commits succeeded, and a
// progress line with done/total plus a summary.
func TestMetricsAndProgress(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 10)...) // 10 x ("kN" + "aN") = 40 bytes
	x := e.beginTxn(t)
	x.produce(topic, 1, vals("b", 3)...)
	x.end(true)
	e.waitEnd(t, topic, 1, 4)

	s, capture, logs := captureStream(t, fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  consumer_group: %s
  stop_offset: latest
  commit_period: 20ms
  progress_log_interval: 50ms
  max_batch_records: 1
`, strings.Join(e.brokers, ","), topic, uniq(t, "g")), func(context.Context, service.MessageBatch) error {
		time.Sleep(20 * time.Millisecond) // slow enough for a progress line
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx))

	for _, tc := range []struct {
		key  string
		want int64
	}{
		{"kafka_native_position{,root.input," + topic + ",0}", 10},
		{"kafka_native_position{,root.input," + topic + ",1}", 4},
		{"kafka_native_committed_offset{,root.input," + topic + ",0}", 10},
		{"kafka_native_committed_offset{,root.input," + topic + ",1}", 4},
		{"kafka_native_lag{,root.input," + topic + ",0}", 0},
		{"kafka_native_lag{,root.input," + topic + ",1}", 0},
		{"kafka_native_bytes_in{,root.input," + topic + ",0}", 40},
	} {
		v, ok := capture.get(tc.key)
		assert.True(t, ok, "%s not set", tc.key)
		assert.Equal(t, tc.want, v, tc.key)
	}
	ok, _ := capture.get("kafka_native_commits_succeeded{,root.input}")
	assert.Positive(t, ok)
	batches, _ := capture.get("kafka_native_client_fetch_batches{,root.input," + topic + "}")
	assert.Positive(t, batches, "franz-go hook metrics")
	connects, _ := capture.get("kafka_native_client_connects{,root.input}")
	assert.Positive(t, connects)
	out := logs.String()
	assert.Contains(t, out, "Reading 2 partitions")
	assert.Contains(t, out, "Progress: ")
	assert.Contains(t, out, "/14 offsets")
	assert.Contains(t, out, "Bounded read finished: 14 offsets of 2 partitions read (13 messages emitted")
}

// The group metrics: a member's assigned-partitions gauge follows the
// rebalances, the rebalances are counted per event, and a partition given up
// reports lag 0 on the member that gave it up (its new owner reports the
// real lag), so that the lag summed over the members counts it once. Member
// A blocks on its first batches, so its lag is above 0 on every partition
// when B joins.
func TestGroupMetrics(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 4)
	for p := int32(0); p < 4; p++ {
		e.produce(t, topic, p, vals(fmt.Sprintf("p%d-", p), 20)...)
	}
	conf := fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  consumer_group: %s
  group_membership: true
  start_offset: committed
  reset_offset: earliest
  commit_period: 20ms
  max_batch_records: 1
  max_buffered_bytes_per_partition: 1
  revoke_ack_timeout: 300ms
`, strings.Join(e.brokers, ","), topic, uniq(t, "g"))
	release := make(chan struct{})
	a, am, _ := captureStream(t, conf, func(ctx context.Context, _ service.MessageBatch) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	b, bm, _ := captureStream(t, conf, func(context.Context, service.MessageBatch) error { return nil })
	key := func(name string, lvs ...string) string {
		return name + "{" + strings.Join(append([]string{"", "root.input"}, lvs...), ",") + "}"
	}
	lag := func(m *captureMetrics, p int32) int64 {
		v, _ := m.get(key("kafka_native_lag", topic, fmt.Sprint(p)))
		return v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(s *service.Stream) chan error {
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		return done
	}
	aDone := run(a)
	waitFor(t, 30*time.Second, func() string {
		n, _ := am.get(key("kafka_native_assigned_partitions"))
		for p := int32(0); p < 4; p++ {
			if n != 4 || lag(am, p) == 0 {
				return fmt.Sprintf("A: %d partitions assigned, lag of partition %d: %d", n, p, lag(am, p))
			}
		}
		return ""
	})
	bDone := run(b)
	waitFor(t, 30*time.Second, func() string {
		na, _ := am.get(key("kafka_native_assigned_partitions"))
		nb, _ := bm.get(key("kafka_native_assigned_partitions"))
		if na+nb != 4 || na == 0 || nb == 0 {
			return fmt.Sprintf("assigned: A %d, B %d", na, nb)
		}
		return ""
	})
	moved := 0
	for p := int32(0); p < 4; p++ {
		if _, ok := bm.get(key("kafka_native_position", topic, fmt.Sprint(p))); ok {
			moved++
			assert.Zero(t, lag(am, p), "A gave partition %d up: its lag there is 0", p)
		}
	}
	assert.Positive(t, moved)
	revoked, _ := am.get(key("kafka_native_rebalances", "revoked"))
	assert.Positive(t, revoked, "A counted the revoke")
	assigned, _ := bm.get(key("kafka_native_rebalances", "assigned"))
	assert.Positive(t, assigned, "B counted its assignment")

	close(release)
	for _, s := range []*service.Stream{a, b} {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.Stop(sctx); err != nil {
			t.Logf("stop: %v", err)
		}
		scancel()
	}
	for _, done := range []chan error{aDone, bDone} {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("a stream did not stop")
		}
	}
}

// Every start that falls back to reset_offset is logged, per partition, with
// the reason and where the partition starts.
func TestStartFallbackLogged(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 3)...)
	e.produce(t, topic, 1, vals("b", 2)...)
	group := uniq(t, "g")
	e.commit(t, group, topic, 1, 100)
	s, _, logs := captureStream(t, fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  consumer_group: %s
  start_offset: committed
  reset_offset: earliest
  stop_offset: latest
`, strings.Join(e.brokers, ","), topic, group), func(context.Context, service.MessageBatch) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx))
	out := logs.String()
	assert.Contains(t, out, fmt.Sprintf("Partition %s:0: start_offset committed: no committed offset; starting at 0 (reset_offset earliest)", topic))
	assert.Contains(t, out, fmt.Sprintf("Partition %s:1: start_offset committed: offset 100 is outside the log [0, 2]; starting at 0 (reset_offset earliest)", topic))
}

// TestBufferedBytesGauge: kafka_native_buffered_bytes is what
// max_buffered_bytes bounds, the bytes handed to the pipeline and not yet
// acknowledged (key + value + 1000 per record, heldBytes): while the output
// holds the first batches it is a positive multiple of one record's 1004
// bytes, and once they are acknowledged it returns to 0.
func TestBufferedBytesGauge(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 10)...) // 10 x ("kN" + "aN") = 40 bytes
	release := make(chan struct{})
	s, capture, _ := captureStream(t, fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  max_batch_records: 1
`, strings.Join(e.brokers, ","), topic), func(ctx context.Context, _ service.MessageBatch) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	const key = "kafka_native_buffered_bytes{,root.input}"
	const perRecord = messageOverhead + 4
	waitFor(t, 30*time.Second, func() string {
		if v, _ := capture.get(key); v <= 0 || v%perRecord != 0 || v > 10*perRecord {
			return fmt.Sprintf("buffered bytes %d while the output holds the first batch", v)
		}
		return ""
	})
	close(release)
	waitFor(t, 30*time.Second, func() string {
		if v, _ := capture.get(key); v != 0 {
			return fmt.Sprintf("buffered bytes %d after every batch was acknowledged", v)
		}
		return ""
	})
	require.NoError(t, s.StopWithin(30*time.Second))
	<-done
}
