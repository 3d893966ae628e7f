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

	capture := &captureMetrics{vals: map[string]int64{}}
	senv := service.NewEnvironment()
	require.NoError(t, senv.RegisterMetricsExporter("capture", service.NewConfigSpec(),
		func(*service.ParsedConfig, *service.Logger) (service.MetricsExporter, error) { return capture, nil }))
	b := senv.NewStreamBuilder()
	require.NoError(t, b.SetMetricsYAML("capture: {}"))
	logs := &syncBuf{}
	b.SetLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  consumer_group: %s
  stop_offset: latest
  commit_period: 20ms
  progress_log_interval: 50ms
  max_batch_records: 1
`, strings.Join(e.brokers, ","), topic, uniq(t, "g"))))
	require.NoError(t, b.AddBatchConsumerFunc(func(context.Context, service.MessageBatch) error {
		time.Sleep(20 * time.Millisecond) // slow enough for a progress line
		return nil
	}))
	s, err := b.Build()
	require.NoError(t, err)
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
