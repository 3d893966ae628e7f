package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// rcInput and rcOutput put a block of Redpanda Connect's kafka_franz /
// redpanda fields (as their docs' examples write them) under kafka_native or
// kafka_eos, with what the other side needs to make a config.
func rcInput(block string) string {
	return "input:\n  kafka_native:\n" + indentBlock(block, 4) + `
output:
  drop: {}
`
}

func rcOutput(block string) string {
	return `input:
  generate: { mapping: 'root = "x"', count: 1 }
output:
  kafka_eos:
` + indentBlock(block, 4) + `    transactional_id: rc
    state_cache: state
cache_resources:
  - label: state
    kafka_state: { seed_brokers: [ localhost:9092 ], topic: rc_state }
`
}

func indentBlock(s string, n int) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(strings.Repeat(" ", n) + l + "\n")
	}
	return b.String()
}

// TestRedpandaConnectConfigs is the table of the configs in Redpanda
// Connect's kafka_franz and redpanda docs examples that use the connection,
// partitioning, byte-size, metadata-age, rack, timestamp and SASL fields:
// each one lints, builds and starts with connect-eos (want ""), or fails lint with a
// message saying what to write instead (want: a part of it).
func TestRedpandaConnectConfigs(t *testing.T) {
	bin := kafkatest.Binary(t)
	for _, tc := range []struct {
		name, conf, want string
	}{
		// kafka_franz / redpanda input.
		{"input seed_brokers", rcInput("seed_brokers:\n  - localhost:9092\ntopics: [ foo ]"), ""},
		{"input seed_brokers list", rcInput("seed_brokers:\n  - foo:9092\n  - bar:9092\ntopics: [ foo ]"), ""},
		{"input seed_brokers comma", rcInput("seed_brokers:\n  - foo:9092,bar:9092\ntopics: [ foo ]"), ""},
		{"input topics", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - foo\n  - bar"), ""},
		{"input topics comma", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - foo,bar"), ""},
		{"input topic partitions", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - foo:0\n  - bar:1\n  - bar:3"), ""},
		{"input topic partitions comma", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - foo:0,bar:1,bar:3"), ""},
		{"input partition range", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - foo:0-5"), ""},
		{"input topic pattern", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - things.*\nregexp_topics: true"), ""},
		{"input start offset in topics", rcInput("seed_brokers: [ localhost:9092 ]\ntopics:\n  - foo:0:10"),
			`"foo:0:10": a start offset in the entry (Redpanda Connect's form) is not supported: write the partition (topic:P) in topics and its offset in start_offsets with start_offset: specific`},
		{"input consumer group", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nconsumer_group: cg"), ""},
		{"input metadata_max_age", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nmetadata_max_age: 5m"), ""},
		{"input rack_id", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nrack_id: rack-a"), ""},
		{"input fetch_max_partition_bytes", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nfetch_max_partition_bytes: 1MiB"), ""},
		{"input sasl list", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nsasl:\n  - mechanism: SCRAM-SHA-512\n    password: bar\n    username: foo"),
			"field sasl: a list of mechanisms (Redpanda Connect's form) is not supported: write one object, e.g. sasl: { mechanism: SCRAM-SHA-512, username: ..., password: ... }"},
		{"input sasl list with extensions", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nsasl:\n  - mechanism: OAUTHBEARER\n    token: tok\n    extensions:\n      logicalCluster: lkc-1"),
			"field sasl: a list of mechanisms (Redpanda Connect's form) is not supported: write one object, e.g. sasl: { mechanism: OAUTHBEARER, token: ..., extensions: { key: value } }"},
		{"input sasl object with extensions", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\ntls: { enabled: true }\nsasl:\n  mechanism: OAUTHBEARER\n  token: tok\n  extensions:\n    logicalCluster: lkc-1"), ""},
		{"input sasl list of two", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nsasl:\n  - mechanism: SCRAM-SHA-256\n    username: foo\n    password: bar\n  - mechanism: PLAIN\n    username: foo\n    password: bar"),
			"write one object (one mechanism: the one the brokers accept), e.g. sasl: { mechanism: SCRAM-SHA-256, username: ..., password: ... }"},
		{"input sasl AWS_MSK_IAM", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nsasl:\n  - mechanism: AWS_MSK_IAM\n    aws:\n      region: eu-west-1"),
			"AWS_MSK_IAM is not supported; the mechanisms are none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER"},
		{"input start_from_oldest", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nstart_from_oldest: true"),
			"field start_from_oldest (Redpanda Connect's): use start_offset: earliest (true) or latest (false)"},
		{"input multi_header", rcInput("seed_brokers: [ localhost:9092 ]\ntopics: [ foo ]\nmulti_header: true"),
			"field multi_header (Redpanda Connect's): remove it: a header repeated in one record is always read as a list"},
		// kafka_franz / redpanda output.
		{"output common", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nkey: '${! meta(\"key\") }'\nmetadata:\n  include_prefixes: [ foo_, bar_ ]\nmax_in_flight: 10"), ""},
		{"output metadata patterns", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nmetadata:\n  include_patterns: [ .* ]"), ""},
		{"output manual partition", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\npartitioner: manual\npartition: ${! meta(\"partition\") }"), ""},
		{"output partition without manual", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\npartition: ${! meta(\"partition\") }"),
			"field partition: only used when partitioner is manual"},
		{"output murmur2_hash", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\npartitioner: murmur2_hash"), ""},
		{"output round_robin", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\npartitioner: round_robin"), ""},
		{"output least_backup", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\npartitioner: least_backup"),
			"field partitioner: value least_backup is not one of: murmur2, manual, round_robin, murmur2_hash"},
		{"output compression", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\ncompression: lz4"), ""},
		{"output max_message_bytes 100MB", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nmax_message_bytes: 100MB"), ""},
		{"output max_message_bytes 50mib", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nmax_message_bytes: 50mib"), ""},
		{"output max_message_bytes 1MB", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nmax_message_bytes: 1MB"), ""},
		{"output metadata_max_age", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nmetadata_max_age: 5m"), ""},
		{"output timestamp_ms now", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\ntimestamp_ms: ${! timestamp_unix_milli() }"),
			"field timestamp_ms (Redpanda Connect's): not supported: records get the produce time"},
		{"output timestamp_ms source", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\ntimestamp_ms: ${! metadata(\"kafka_timestamp_ms\") }"),
			"field timestamp_ms (Redpanda Connect's): not supported"},
		{"output timestamp", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\ntimestamp: ${! timestamp_unix() }"),
			"field timestamp (Redpanda Connect's): not supported: records get the produce time"},
		{"output sasl list", rcOutput("seed_brokers: [ localhost:9092 ]\ntopic: foo\nsasl:\n  - mechanism: SCRAM-SHA-512\n    password: bar\n    username: foo"),
			"kafka_eos: field sasl: a list of mechanisms (Redpanda Connect's form) is not supported"},
		{"output kafka_franz", "input:\n  generate: { mapping: root = 1 }\noutput:\n  kafka_franz:\n    seed_brokers: [ localhost:9092 ]\n    topic: foo\n",
			"kafka_franz is Redpanda Connect's: use kafka_native as the input and kafka_eos as the output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.conf)
			out, err := exec.Command(bin, "lint", path).CombinedOutput()
			if tc.want != "" {
				require.Error(t, err, "lint passed:\n%s", tc.conf)
				require.Contains(t, string(out), tc.want)
				return
			}
			require.NoError(t, err, "%s\n%s", out, tc.conf)
			// Build and start it: the components are constructed (their
			// config checks run) before anything connects; then it retries
			// connecting to a broker that is not there until the context ends.
			sb := binaryEnvironment().NewStreamBuilder()
			require.NoError(t, sb.SetYAML(tc.conf))
			require.NoError(t, sb.SetLoggerYAML("level: none"))
			stream, err := sb.Build()
			require.NoError(t, err, "built:\n%s", tc.conf)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = stream.Run(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded, "the stream failed to start:\n%s", tc.conf)
		})
	}
}

// TestRedpandaConnectFieldsRun runs a Kafka-to-Kafka copy written with the
// Redpanda Connect forms that carry over (comma-separated seed brokers and
// topics, metadata_max_age, rack_id, byte sizes as strings, murmur2_hash) on
// the embedded broker: the copy is exact.
func TestRedpandaConnectFieldsRun(t *testing.T) {
	conf := writeConfig(t, fmt.Sprintf(`
http: { address: %s }
input:
  kafka_native:
    seed_brokers: [ "${KAFKA_BROKERS},${KAFKA_BROKERS}" ]
    topics: [ "orders,more" ]
    consumer_group: rc-copy
    start_offset: committed
    reset_offset: earliest
    stop_offset: latest
    metadata_max_age: 1m
    rack_id: rack-a
    fetch_max_partition_bytes: 64KiB
output:
  kafka_eos:
    seed_brokers: [ "${KAFKA_BROKERS}" ]
    topic: orders_copy
    key: '${! metadata("kafka_key") }'
    partitioner: murmur2_hash
    max_message_bytes: 1MiB
    metadata_max_age: 1m
    transactional_id: rc-copy
    consumer_group: rc-copy
    state_cache: state
cache_resources:
  - label: state
    kafka_state: { seed_brokers: [ "${KAFKA_BROKERS}" ], topic: rc_state, metadata_max_age: 1m }
`, freeAddr(t)))
	p := startBin(t, "dev", "--topic", "orders:2", "--topic", "more:1", "--fill", "orders:3000", "--topic", "orders_copy:2",
		"--report", "orders_copy", conf)
	require.Equal(t, 0, p.wait(t))
	require.Contains(t, p.output(), "dev: records out (read_committed) in orders_copy: 3000, duplicates: 0, missing: 0")
}

// TestRackIDSentWithFetches: kafka_native's rack_id goes with every fetch
// request (KIP-392's rack_id), which is what lets a broker with a rack-aware
// replica selector send the fetches to a replica in that rack; without it
// the fetches carry no rack and go to the leaders.
func TestRackIDSentWithFetches(t *testing.T) {
	for _, rack := range []string{"rack-a", ""} {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
		require.NoError(t, err)
		t.Cleanup(cluster.Close)
		fetched := make(chan string, 1)
		cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
			select {
			case fetched <- req.(*kmsg.FetchRequest).Rack:
			default:
			}
			return nil, nil, false
		})
		field := ""
		if rack != "" {
			field = "\n    rack_id: " + rack
		}
		sb := binaryEnvironment().NewStreamBuilder()
		require.NoError(t, sb.SetLoggerYAML("level: none"))
		require.NoError(t, sb.SetYAML(fmt.Sprintf(`
input:
  kafka_native:
    seed_brokers: [ %q ]
    topics: [ orders ]%s
output:
  drop: {}
`, cluster.ListenAddrs()[0], field)))
		stream, err := sb.Build()
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		go func() { _ = stream.Run(ctx) }()
		select {
		case got := <-fetched:
			require.Equal(t, rack, got, "the rack of the first fetch request")
		case <-ctx.Done():
			t.Fatal("no fetch request within a minute")
		}
		require.NoError(t, stream.StopWithin(10*time.Second))
		cancel()
	}
}
