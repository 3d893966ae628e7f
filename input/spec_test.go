package input

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/connect-eos/connect-eos/internal/fatal"

	"github.com/connect-eos/connect-eos/internal/docgen"
)

func TestSpecLintRules(t *testing.T) {
	tests := []struct {
		name, conf, wantErr string
	}{
		{"minimal", "topics: [ a ]", ""},
		{"committed without group", "topics: [ a ]\nstart_offset: committed", "start_offset committed needs a consumer_group"},
		{"committed with group", "topics: [ a ]\nstart_offset: committed\nconsumer_group: g\nreset_offset: none", ""},
		{"reset none with earliest", "topics: [ a ]\nreset_offset: none", "reset_offset none applies only"},
		{"committed without reset", "topics: [ a ]\nstart_offset: committed\nconsumer_group: g", ""},
		{"stop committed without group", "topics: [ a ]\nstop_offset: committed", "stop_offset committed needs a consumer_group"},
		{"stop and start committed", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\nstop_offset: committed", "start_offset committed with stop_offset committed reads nothing"},
		{"stop committed", "topics: [ a ]\nconsumer_group: g\nstop_offset: committed", ""},
		{"reset none with timestamp", "topics: [ a ]\nstart_offset: timestamp\nstart_timestamp_ms: 1\nreset_offset: none", "reset_offset none applies only"},
		{"specific without offsets", "topics: [ a ]\nstart_offset: specific", "start_offset specific needs start_offsets"},
		{"stop specific without offsets", "topics: [ a ]\nstop_offset: specific", "stop_offset specific needs stop_offsets"},
		{"start timestamp without ms", "topics: [ a ]\nstart_offset: timestamp", "start_offset timestamp needs start_timestamp_ms"},
		{"stop timestamp without ms", "topics: [ a ]\nstop_offset: timestamp", "stop_offset timestamp needs stop_timestamp_ms"},
		{"hwm without latest", "topics: [ a ]\nstop_at_high_watermark: true", "stop_at_high_watermark applies only"},
		{"membership bounded", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nstop_offset: latest", "field group_membership: needs stop_offset none"},
		{"membership pinned", "topics: [ 'a:0' ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true", "group_membership reads whole topics"},
		{"membership ok", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true", ""},
		{"membership timeouts ok", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nsession_timeout: 6s\nheartbeat_interval: 2s\nrebalance_timeout: 30s\nrevoke_ack_timeout: 14s", ""},
		{"heartbeat not below session", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nsession_timeout: 6s\nheartbeat_interval: 6s", "heartbeat_interval must be shorter than session_timeout"},
		{"revoke too long for rebalance", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nrebalance_timeout: 20s", "revoke_ack_timeout must be less than half of rebalance_timeout"},
		{"sasl plain without password", "topics: [ a ]\nsasl: { mechanism: PLAIN, username: u }", "sasl.password is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := service.NewStreamBuilder()
			err := b.AddInputYAML(fmt.Sprintf("kafka_native:\n  seed_brokers: [ localhost:9092 ]\n  %s\n",
				strings.ReplaceAll(tt.conf, "\n", "\n  ")))
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// The same rules hold for a config that is not linted (built in code).
func TestConfigValidation(t *testing.T) {
	for _, tt := range []struct{ conf, wantErr string }{
		{"topics: [ a ]\nstart_offset: committed", "committed needs a consumer_group"},
		{"topics: [ a, 'a:1' ]", "listed both whole and with pinned partitions"},
		{"topics: [ 'a:x' ]", "is not a non-negative number"},
		{"topics: [ 'a:0' ]\nstart_offset: specific\nstart_offsets: { 'b:0': 1 }", "b:0 is not among the partitions read"},
		{"topics: [ ]", "at least one topic"},
		{"topics: [ a ]\nmax_batch_records: 0", "must be at least 1"},
		{"topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nsession_timeout: 3s", "heartbeat_interval (3s) must be shorter than session_timeout (3s)"},
		{"topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nrevoke_ack_timeout: 30s", "revoke_ack_timeout (30s) must be less than half of rebalance_timeout (1m0s)"},
	} {
		pc, err := Spec().ParseYAML("seed_brokers: [ x:1 ]\n"+tt.conf, nil)
		require.NoError(t, err, tt.conf)
		_, err = newInputFromParsed(pc, service.MockResources())
		require.Error(t, err, tt.conf)
		assert.Contains(t, err.Error(), tt.wantErr, tt.conf)
	}
}

func TestParseTopics(t *testing.T) {
	pc, err := Spec().ParseYAML("seed_brokers: [ x:1 ]\ntopics: [ b, 'a:2', 'a:0', 'my.topic-1:3' ]", nil)
	require.NoError(t, err)
	c, err := configFromParsed(pc)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "my.topic-1"}, c.topicOrder)
	assert.True(t, c.topics["b"].all)
	assert.Equal(t, map[int32]bool{0: true, 2: true}, c.topics["a"].partitions)
	assert.Equal(t, map[int32]bool{3: true}, c.topics["my.topic-1"].partitions)
}

// A bounded read run as a Benthos stream ends by itself (the stream's Run
// returns nil, so `connect-eos run` exits 0) after emitting exactly the
// committed records below the stops.
func TestStreamBoundedReadEnds(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 3)
	for p := int32(0); p < 3; p++ {
		e.produce(t, topic, p, vals(fmt.Sprintf("p%d-", p), 10*int(p))...)
	}
	x := e.beginTxn(t)
	x.produce(topic, 1, vals("aborted", 3)...)
	x.end(false)
	e.waitEnd(t, topic, 1, 14)
	group := uniq(t, "g")

	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  consumer_group: %s
  stop_offset: latest
  max_batch_records: 3
`, strings.Join(e.brokers, ","), topic, group)))
	var (
		mu  sync.Mutex
		got = map[string][]string{}
	)
	require.NoError(t, b.AddBatchConsumerFunc(func(_ context.Context, mb service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range mb {
			p, _ := m.MetaGet(metaPartition)
			v, _ := m.AsBytes()
			got[p] = append(got[p], string(v))
		}
		return nil
	}))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx))
	assert.Empty(t, got["0"])
	assert.Equal(t, strs(vals("p1-", 10)), got["1"])
	assert.Equal(t, strs(vals("p2-", 20)), got["2"])
	assert.Equal(t, int64(14), e.committed(t, group, topic, 1), "lag 0 behind the ABORT marker")
	assert.Equal(t, int64(20), e.committed(t, group, topic, 2))
}

// The shipped kafka_native examples lint clean (cmd/connect-eos lints them
// too, with the whole binary).
func TestExampleConfigsLint(t *testing.T) {
	files, err := filepath.Glob("../config/examples/kafka_native_*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, service.NewStreamBuilder().SetYAML(string(raw)))
		})
	}
}

// A bounded read through a stream with concurrent processing and an output
// that rejects a third of its writes: every record arrives at least once,
// the stream still ends, and the group's offsets are the stops.
func TestStreamWithRejectsAndConcurrency(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 3)
	total := 0
	for p := int32(0); p < 3; p++ {
		e.produce(t, topic, p, vals(fmt.Sprintf("p%d-", p), 60)...)
		total += 60
	}
	group := uniq(t, "g")
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: none"))
	b.SetThreads(4)
	require.NoError(t, b.AddInputYAML(fmt.Sprintf(`
kafka_native:
  seed_brokers: [ %s ]
  topics: [ %s ]
  consumer_group: %s
  stop_offset: latest
  max_batch_records: 4
  commit_period: 10ms
`, strings.Join(e.brokers, ","), topic, group)))
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		calls int
	)
	require.NoError(t, b.AddBatchConsumerFunc(func(_ context.Context, mb service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%3 == 0 {
			return fmt.Errorf("rejected write %d", calls)
		}
		for _, m := range mb {
			v, _ := m.AsBytes()
			seen[string(v)]++
		}
		return nil
	}))
	s, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, s.Run(ctx))
	assert.Len(t, seen, total)
	for p := int32(0); p < 3; p++ {
		assert.Equal(t, int64(60), e.committed(t, group, topic, p))
	}
}

// The docs generator (internal/docgen) renders this input's reference from
// the spec without error once the binary registers it.
func TestSpecRendersDocs(t *testing.T) {
	docs, err := docgen.Render(service.GlobalEnvironment())
	require.NoError(t, err)
	md, ok := docs["inputs/kafka_native.md"]
	require.True(t, ok)
	for _, want := range []string{"stop_offset", "group_membership", "kafka_tombstone_message", "seed_brokers", "Bounded copy of a topic"} {
		assert.Contains(t, string(md), want)
	}
}

// The group example runs on a new group: with start_offset committed and no
// committed offset, its reset_offset (earliest) starts every partition at
// the log start (without it the committed start fails, by design).
func TestExampleGroupRunsOnNewGroup(t *testing.T) {
	e := newKfakeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := e.adm.CreateTopic(ctx, 2, 1, nil, "orders")
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	e.produce(t, "orders", 0, vals("a", 3)...)
	e.produce(t, "orders", 1, vals("b", 2)...)
	raw, err := os.ReadFile("../config/examples/kafka_native_group.yaml")
	require.NoError(t, err)
	conf := string(raw)
	in := conf[strings.Index(conf, "input:\n")+len("input:\n") : strings.Index(conf, "\noutput:")]
	in = strings.ReplaceAll(in, "\n  ", "\n")
	in = strings.TrimPrefix(in, "  ")
	t.Setenv("KAFKA_BROKERS", strings.Join(e.brokers, ","))

	raised := make(chan error, 1)
	t.Cleanup(fatal.SetHandler(func(err error) {
		select {
		case raised <- err:
		default:
		}
	}))
	b := service.NewStreamBuilder()
	require.NoError(t, b.SetLoggerYAML("level: warn"))
	require.NoError(t, b.AddInputYAML(in))
	var (
		mu  sync.Mutex
		got []string
	)
	require.NoError(t, b.AddBatchConsumerFunc(func(_ context.Context, mb service.MessageBatch) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range mb {
			v, _ := m.AsBytes()
			got = append(got, string(v))
		}
		return nil
	}))
	s, err := b.Build()
	require.NoError(t, err)
	go func() { _ = s.Run(ctx) }()
	t.Cleanup(func() { _ = s.StopWithin(5 * time.Second) })
	waitFor(t, 20*time.Second, func() string {
		select {
		case err := <-raised:
			t.Fatalf("fatal: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 5 {
			return fmt.Sprintf("read %v", got)
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	assert.ElementsMatch(t, append(strs(vals("a", 3)), strs(vals("b", 2))...), got)
}
