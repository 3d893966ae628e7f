package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// crossConfig is a Kafka-to-Kafka config with the input's group, the
// output's group and the state cache as parameters.
func crossConfig(inGroup, outGroup, cache string) string {
	in := ""
	if inGroup != "" {
		in = "\n    consumer_group: " + inGroup
	}
	out := ""
	if outGroup != "" {
		out = "\n    consumer_group: " + outGroup
	}
	return fmt.Sprintf(`
http: { enabled: false }
input:
  kafka_native:
    seed_brokers: [ 127.0.0.1:1 ]
    topics: [ orders ]%s
output:
  kafka_eos:
    seed_brokers: [ 127.0.0.1:1 ]
    topic: orders_copy
    transactional_id: copy%s
    state_cache: state
cache_resources:
  - label: state
%s
`, in, out, cache)
}

// orderConfig is a config with the given pipeline section and extra
// kafka_eos fields (lines indented by 4), reading with consumer_group copy.
func orderConfig(pipeline, outExtra string) string {
	return fmt.Sprintf(`
input:
  kafka_native: { seed_brokers: [ 127.0.0.1:1 ], topics: [ orders ], consumer_group: copy }
%s
output:
  kafka_eos:
    seed_brokers: [ 127.0.0.1:1 ]
    topic: orders_copy
    transactional_id: copy
    state_cache: state
%s
cache_resources:
  - label: state
    kafka_state: { seed_brokers: [ 127.0.0.1:1 ], topic: copy_state }
`, pipeline, outExtra)
}

const (
	procs1      = "pipeline:\n  processors: [ { mapping: 'root = this' } ]"
	procsThread = "pipeline:\n  threads: 1\n  processors: [ { mapping: 'root = this' } ]"
	procs4      = "pipeline:\n  threads: 4\n  processors: [ { mapping: 'root = this' } ]"
	noProcs4    = "pipeline:\n  threads: 4"
	k2kBatching = "    consumer_group: copy\n    batching: { count: 100, period: 50ms }"
	dedupeMode  = "    max_in_flight: 1\n    dedupe: { key: '${! meta(\"kafka_partition\") }', position: '${! meta(\"kafka_offset\") }' }"
)

const (
	durableCache = "    kafka_state: { seed_brokers: [ 127.0.0.1:1 ], topic: copy_state }"
	memoryCache  = "    memory: {}"
	fileCache    = "    file: { directory: /tmp/state }"
	plainCache   = "    kafka_state: { seed_brokers: [ 127.0.0.1:1 ], topic: s, sasl: { mechanism: PLAIN, username: u, password: p } }"
)

// TestCheckConfig is the table of the checks across a whole config.
func TestCheckConfig(t *testing.T) {
	for _, tc := range []struct {
		name, conf  string
		errs, warns []string
	}{
		{"kafka-to-kafka", crossConfig("copy", "copy", durableCache), nil, nil},
		{"plain", crossConfig("", "", durableCache), nil, nil},
		{"plain from a group", crossConfig("copy", "", durableCache), nil, nil},
		{"group typo", crossConfig("orders-copy", "order-copy", durableCache),
			[]string{`kafka_eos "copy": consumer_group "order-copy" (Kafka-to-Kafka mode) names no kafka_native input of this config, and the kafka_native inputs of this config read with consumer_group "orders-copy"`}, nil},
		{"output group, input without", crossConfig("", "copy", durableCache),
			[]string{`kafka_eos "copy": consumer_group "copy" (Kafka-to-Kafka mode) names no kafka_native input of this config, and this config has no kafka_native input with a consumer_group`}, nil},
		{"memory cache", crossConfig("copy", "copy", memoryCache), nil,
			[]string{`kafka_eos "copy": state_cache "state" is a memory cache: a restart of the process loses it, with the recovery identity of the epoch being committed: an epoch in doubt at a crash cannot be resumed, the restart's InitProducerID aborts it if it is still open (only without a restart under this transactional_id is it left to transaction_timeout)`}},
		{"file cache", crossConfig("copy", "copy", fileCache), nil,
			[]string{`state_cache "state" is a file cache, not synced to disk: a crash of the machine can lose it`}},
		{"kafka_state in clear text", crossConfig("copy", "copy", plainCache), nil,
			[]string{`kafka_state "state": sasl.mechanism PLAIN without tls.enabled: the password is sent in clear text`}},
		{"k2k batching, default threads", orderConfig(procs1, k2kBatching),
			[]string{`kafka_eos "copy": Kafka-to-Kafka mode (consumer_group "copy") with batching needs the input batches in order, and pipeline.threads is -1 (one thread per CPU) with 1 processor(s): set pipeline.threads: 1, or remove kafka_eos.batching`}, nil},
		{"k2k batching, 4 threads", orderConfig(procs4, k2kBatching),
			[]string{`pipeline.threads is 4 with 1 processor(s): set pipeline.threads: 1`}, nil},
		{"k2k batching inside a fallback", `
input:
  kafka_native: { seed_brokers: [ b:1 ], topics: [ t ], consumer_group: copy }
pipeline:
  threads: 2
  processors: [ { mapping: 'root = this' } ]
output:
  fallback:
    - kafka_eos: { seed_brokers: [ b:1 ], topic: u, transactional_id: x, consumer_group: copy, state_cache: s, batching: { byte_size: 1000 } }
    - drop: {}
`,
			[]string{`kafka_eos "x": Kafka-to-Kafka mode (consumer_group "copy") with batching`}, nil},
		{"k2k batching, one thread", orderConfig(procsThread, k2kBatching), nil, nil},
		{"k2k batching, no processors", orderConfig(noProcs4, k2kBatching), nil, nil},
		{"k2k batching of one message", orderConfig(procs4, "    consumer_group: copy\n    batching: { count: 1 }"), nil, nil},
		{"k2k without batching", orderConfig(procs4, "    consumer_group: copy"), nil, nil},
		{"plain with batching", orderConfig(procs4, "    batching: { count: 100 }"), nil, nil},
		{"dedupe, default threads", orderConfig(procs1, dedupeMode),
			[]string{`kafka_eos "copy": dedupe mode needs the messages in the order the input emitted them, and pipeline.threads is -1 (one thread per CPU) with 1 processor(s): set pipeline.threads: 1`}, nil},
		{"dedupe, 4 threads", orderConfig(procs4, dedupeMode),
			[]string{`pipeline.threads is 4 with 1 processor(s): set pipeline.threads: 1`}, nil},
		{"dedupe, one thread", orderConfig(procsThread, dedupeMode), nil, nil},
		{"dedupe, no processors", orderConfig(noProcs4, dedupeMode), nil, nil},
		{"k2k with split", orderConfig("pipeline:\n  threads: 1\n  processors: [ { split: { size: 2 } } ]", "    consumer_group: copy"),
			[]string{`kafka_eos "copy": Kafka-to-Kafka mode (consumer_group "copy") needs every input batch to reach the output as one batch, and the split processor at pipeline.processors[0] hands a batch on as several: ` +
				`each part commits the source offsets of the whole input batch, so a crash after the first part committed and before the others did loses their records; remove it`}, nil},
		{"plain with split", orderConfig("pipeline:\n  processors: [ { split: { size: 2 } } ]", "    max_in_flight: 1"), nil, nil},
		{"k2k with splits nested and in resources", `
input:
  kafka_native: { seed_brokers: [ b:1 ], topics: [ t ], consumer_group: copy }
  processors:
    - try: [ { group_by_value: { value: '${! meta("k") }' } } ]
pipeline:
  threads: 1
  processors:
    - label: merged
      for_each: [ { split: { size: 1 } } ]
    - switch: [ { check: 'true', processors: [ { split: {} } ] } ]
    - branch: { processors: [ { split: {} } ] }
    - while: { check: 'false', processors: [ { resource: cutter } ] }
processor_resources:
  - label: cutter
    group_by: [ { check: 'true' } ]
output:
  fallback:
    - kafka_eos: { seed_brokers: [ b:1 ], topic: u, transactional_id: x, consumer_group: copy, state_cache: s, batching: { count: 1, processors: [ { catch: [ { split: {} } ] } ] } }
      processors: [ { label: cut, split: { size: 2 } } ]
    - drop: {}
      processors: [ { split: {} } ]
`,
			[]string{
				`kafka_eos "x": Kafka-to-Kafka mode (consumer_group "copy") needs every input batch to reach the output as one batch, and the group_by_value processor at input.processors[0].try[0] hands`,
				`the group_by processor at pipeline.processors[3].while.processors[0] (processor resource "cutter") hands`,
				`the split processor at output.fallback[0].processors[0] (label "cut") hands`,
				`the split processor at the output's batching.processors[0].catch[0] hands`,
			}, nil},
		{"inside a fallback", `
input:
  kafka_native: { seed_brokers: [ b:1 ], topics: [ t ], consumer_group: a }
output:
  fallback:
    - kafka_eos: { seed_brokers: [ b:1 ], topic: u, transactional_id: x, consumer_group: b, state_cache: s }
    - drop: {}
`,
			[]string{`consumer_group "b" (Kafka-to-Kafka mode) names no kafka_native input`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := checkConfigYAML([]byte(tc.conf))
			require.NoError(t, err)
			require.Len(t, f.errors, len(tc.errs), "%q", f.errors)
			for i, e := range tc.errs {
				require.Contains(t, f.errors[i], e)
			}
			require.Len(t, f.warnings, len(tc.warns), "%q", f.warnings)
			for i, w := range tc.warns {
				require.Contains(t, f.warnings[i], w)
			}
		})
	}
}

// TestCheckConfigInCLI: the built binary's lint fails on a consumer_group
// that names no input of the config, naming both values; run refuses to
// start on it (before, it ran a plain at-least-once copy with no sign of
// it); and a non-durable state cache and a kafka_state cache's connection
// warnings are logged at start (before, a cache resource's warnings showed
// only when it was first used).
func TestCheckConfigInCLI(t *testing.T) {
	bin := kafkatest.Binary(t)
	typo := writeConfig(t, crossConfig("orders-copy", "order-copy", durableCache))
	out, err := exec.Command(bin, "lint", typo).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `consumer_group "order-copy" (Kafka-to-Kafka mode) names no kafka_native input of this config, and the kafka_native inputs of this config read with consumer_group "orders-copy"`)

	p := startBin(t, "run", typo)
	require.Equal(t, 1, p.wait(t))
	require.Contains(t, p.output(), `consumer_group "order-copy"`)
	require.NotContains(t, p.output(), "Launching a connect-eos instance")

	out, err = exec.Command(bin, "lint", writeConfig(t, crossConfig("copy", "copy", memoryCache))).CombinedOutput()
	require.NoError(t, err, "a warning does not fail lint: %s", out)
	require.Contains(t, string(out), "warning: kafka_eos \"copy\": state_cache \"state\" is a memory cache")

	p = startBin(t, "run", writeConfig(t, crossConfig("copy", "copy", plainCache)))
	p.waitOutput(t, `kafka_state \"state\": sasl.mechanism PLAIN without tls.enabled`)

	// Kafka-to-Kafka mode with output batching on several pipeline threads
	// never finishes a copy: lint fails and run refuses to start, naming
	// the field and the value to use.
	batching := writeConfig(t, "http: { enabled: false }\n"+orderConfig(procs4, k2kBatching))
	out, err = exec.Command(bin, "lint", batching).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "pipeline.threads is 4 with 1 processor(s): set pipeline.threads: 1, or remove kafka_eos.batching")
	p = startBin(t, "run", batching)
	require.Equal(t, 1, p.wait(t))
	require.Contains(t, p.output(), "pipeline.threads is 4 with 1 processor(s): set pipeline.threads: 1")
	require.NotContains(t, p.output(), "Launching a connect-eos instance")
	p = startBin(t, "run", writeConfig(t, "http: { enabled: false }\n"+orderConfig(procs1, dedupeMode)))
	require.Equal(t, 1, p.wait(t))
	require.Contains(t, p.output(), "dedupe mode needs the messages in the order the input emitted them, and pipeline.threads is -1 (one thread per CPU)")

	// Kafka-to-Kafka mode behind a processor that splits batches (here
	// through a processor resource, which run sees as Benthos parsed it)
	// can lose records on a crash: lint fails and run refuses to start.
	split := writeConfig(t, "http: { enabled: false }\n"+orderConfig("pipeline:\n  threads: 1\n  processors: [ { resource: cut } ]\nprocessor_resources:\n  - label: cut\n    split: { size: 2 }", "    consumer_group: copy"))
	const splitErr = `kafka_eos "copy": Kafka-to-Kafka mode (consumer_group "copy") needs every input batch to reach the output as one batch, and the split processor at pipeline.processors[0] (processor resource "cut") hands a batch on as several`
	out, err = exec.Command(bin, "lint", split).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), splitErr)
	p = startBin(t, "run", split)
	require.Equal(t, 1, p.wait(t))
	require.Contains(t, p.output(), splitErr)
	require.NotContains(t, p.output(), "Launching a connect-eos instance")
}

// TestMissingOutputTopicFatal: records to a topic that does not exist abort
// their epochs; after unknown_topic_grace_period of that the pipeline stops
// with exit code 3 and an error naming the topic (it used to retry forever,
// while the input stops after its own grace period).
func TestMissingOutputTopicFatal(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	p := startBin(t, "run", writeConfig(t, fmt.Sprintf(`
http: { enabled: false }
input:
  generate: { mapping: 'root = "x"', interval: 50ms }
output:
  kafka_eos:
    seed_brokers: [ %q ]
    topic: no_such_topic
    transactional_id: missing
    state_cache: state
    unknown_topic_grace_period: 2s
cache_resources:
  - label: state
    memory: {}
`, cluster.ListenAddrs()[0])))
	require.Equal(t, ExitFatal, p.wait(t))
	exit := scanLines(p.output(), "connect-eos: exit code 3 after a fatal error:")
	require.Len(t, exit, 1)
	require.Contains(t, exit[0], `topic "no_such_topic"`)
	require.Contains(t, exit[0], "UNKNOWN_TOPIC_OR_PARTITION")
	require.Contains(t, exit[0], "for longer than unknown_topic_grace_period 2s")
}

// TestGroupTypoWarnedInOtherBuilds: inside another Benthos build (a stream
// built with the Go API, where the binary's check at start does not run) a
// kafka_eos consumer_group that names no kafka_native input of the stream
// shows as a warning naming the group and each partition, once, when the
// first records arrive.
func TestGroupTypoWarnedInOtherBuilds(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "orders_copy"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("orders"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	for i := range 50 {
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	sb := binaryEnvironment().NewStreamBuilder()
	var logs syncBuffer
	sb.SetLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	require.NoError(t, sb.SetYAML(strings.ReplaceAll(crossConfig("orders-copy", "order-copy", memoryCache), "127.0.0.1:1", cluster.ListenAddrs()[0])+
		"\n"))
	s, err := sb.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	defer func() { _ = s.StopWithin(10 * time.Second) }()
	deadline := time.Now().Add(time.Minute)
	const warning = "no kafka_native input of this stream handed over where it reads that partition for group order-copy"
	for !strings.Contains(logs.String(), warning) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 50 {
		// More records, more epochs: still one warning per partition.
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Value: fmt.Appendf(nil, "w%d", i)}).FirstErr())
	}
	time.Sleep(2 * time.Second)
	out := logs.String()
	for _, p := range []string{"orders/0", "orders/1"} {
		require.LessOrEqual(t, strings.Count(out, "records of "+p+" reached the output"), 1, out)
	}
	require.Contains(t, out, "consumer group order-copy: records of orders/")
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
