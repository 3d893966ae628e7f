package sim

import (
	"fmt"
	"strings"
	"time"
)

// Names shared by the harness and the streams.
const (
	inTopic  = "in"
	outTopic = "out"
	group    = "sim"
	// stateTopic is kafka_state's topic when the plan uses it.
	stateTopic = "sim_state"
	// harnessMarker is a topic name no pipeline asks for: the harness's own
	// requests carry it so that the fault hooks leave them alone.
	harnessMarker = "sim-harness-marker"
)

// Timings of every run: short, so that a run lasts about a second.
const (
	commitTimeout   = time.Second
	shutdownTimeout = 5 * time.Second
	sessionTimeout  = time.Second
	// rebalanceTimeout is the group members' rebalance_timeout.
	rebalanceTimeout = 4 * time.Second
)

// stopGrace is how long past shutdown_timeout an instance's stop may still
// run before the instance is taken for hung (it exits 1 with its goroutines
// dumped). Benthos' CLI allows one second; under -race on a loaded machine
// the stream's own teardown after its deadline can take longer than that,
// and a stop that never returns still shows.
const stopGrace = 10 * time.Second

// stopWait is how long the harness waits for an instance to exit after a
// SIGTERM: past its shutdown_timeout and stopGrace, by which it exited on
// its own or through its watchdog.
const stopWait = shutdownTimeout + stopGrace + 10*time.Second

// txnID is the transactional_id of member m (two members in k2k-members,
// each with its own; a zombie shares its member's).
func txnID(m int) string { return fmt.Sprintf("sim-%d", m) }

// streamYAML is the stream of an instance of member m.
func streamYAML(p Plan, brokers, inst string, m int, logLevel string) string {
	if logLevel == "" {
		logLevel = "info"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "logger: { level: %s, format: logfmt, add_timestamp: true }\nshutdown_timeout: %s\n", logLevel, shutdownTimeout)
	if p.Mode.kafkaInput() {
		fmt.Fprintf(&b, `input:
  kafka_native:
    seed_brokers: [ %q ]
    client_id: %q
    topics: [ %s ]
    consumer_group: %s
    start_offset: committed
    reset_offset: earliest
    max_batch_records: %d
    commit_period: %s
`, brokers, "sim-"+inst, inTopic, group, p.InputBatch, p.CommitPeriod)
		if p.Mode.members() {
			fmt.Fprintf(&b, `    stop_offset: none
    group_membership: true
    session_timeout: %s
    heartbeat_interval: 200ms
    rebalance_timeout: %s
    revoke_ack_timeout: 1500ms
`, sessionTimeout, rebalanceTimeout)
		} else {
			b.WriteString("    stop_offset: latest\n")
		}
		if p.Mode == ModeArrow {
			b.WriteString("    format: arrow\n")
		}
		if p.Retention {
			b.WriteString("    max_buffered_bytes_per_partition: 4096\n    idle_probe_interval: 200ms\n")
		}
	} else {
		b.WriteString("input:\n  sim_source: {}\n")
	}
	fmt.Fprintf(&b, "pipeline:\n  threads: %d\n  processors:\n    - sim_tag: {}\n", p.Threads)

	var o strings.Builder
	fmt.Fprintf(&o, `kafka_eos:
  seed_brokers: [ %q ]
  client_id: %q
  topic: %s
  transactional_id: %s
  state_cache: state
  transaction_timeout: %s
  commit_timeout: %s
  producer_pool_size: %d
  max_in_flight: %d
  max_message_bytes: %d
  epoch: { interval: %s, max_records: %d }
`, brokers, "sim-"+inst, outTopic, txnID(m), p.TxnTimeout, commitTimeout, p.PoolSize, p.MaxInFlight, MaxMessageBytes, p.EpochInterval, p.EpochMaxRecords)
	switch p.Mode {
	case ModeArrow:
		o.WriteString("  input_format: arrow\n  partitioner: manual\n  arrow_timestamps: true\n")
	case ModeK2K, ModeMembers:
		fmt.Fprintf(&o, "  partitioner: manual\n  partition: '${! meta(\"kafka_partition\") }'\n  key: '${! meta(\"kafka_key\") }'\n")
	case ModePlainKafka, ModePlainKafkaMembers:
		o.WriteString("  key: '${! meta(\"kafka_key\") }'\n")
	default:
		o.WriteString("  key: '${! meta(\"sim_key\") }'\n")
	}
	if p.Mode != ModeArrow {
		o.WriteString("  metadata: { include_patterns: [ '^sim_batch$' ] }\n")
	}
	if p.Mode.k2k() {
		fmt.Fprintf(&o, "  consumer_group: %s\n", group)
	}
	if p.Mode == ModeDedupe {
		o.WriteString("  dedupe: { key: '${! meta(\"sim_key\") }', position: '${! meta(\"sim_pos\") }' }\n")
	}
	if p.Batching > 0 {
		fmt.Fprintf(&o, "  batching: { count: %d, period: 20ms }\n", p.Batching)
	}
	b.WriteString("output:\n")
	if len(p.Oversized) > 0 {
		// kafka_eos can never write an oversized record: the dead-letter
		// output takes it (and only it), as a production pipeline would.
		b.WriteString("  fallback:\n    - ")
		b.WriteString(indent(o.String(), "      "))
		b.WriteString("    - sim_dlq: {}\n")
	} else {
		b.WriteString("  ")
		b.WriteString(indent(o.String(), "  "))
	}
	if p.StateCache == "kafka_state" {
		fmt.Fprintf(&b, "cache_resources:\n  - label: state\n    kafka_state: { seed_brokers: [ %q ], client_id: %q, topic: %s }\n", brokers, "sim-"+inst+"-state", stateTopic)
	} else {
		b.WriteString("cache_resources:\n  - label: state\n    sim_cache: {}\n")
	}
	return b.String()
}

// indent indents every line of s but the first.
func indent(s, pre string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := 1; i < len(lines); i++ {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}
