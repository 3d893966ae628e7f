package memlimit

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const k2kInput = `input:
  kafka_native:
    seed_brokers: [ localhost:9092 ]
    topics: [ orders ]
    consumer_group: copy
%s
`

const k2kOutput = `output:
  kafka_eos:
    seed_brokers: [ localhost:9092 ]
    topic: orders_copy
    transactional_id: copy
    consumer_group: copy
    state_cache: state
%s
`

func k2k(inputExtra, middle, outputExtra string) string {
	return strings.Replace(k2kInput, "%s", inputExtra, 1) + middle + "\n" + strings.Replace(k2kOutput, "%s", outputExtra, 1)
}

func TestDerive(t *testing.T) {
	const MiB = 1 << 20
	cases := []struct {
		name   string
		conf   string
		limit  int64
		reason string // a part of the reason
	}{
		{"kafka_native to kafka_eos at the defaults", k2k("", "", ""), 320 * MiB, "kafka_native's max_buffered_bytes (256 MiB) + 64 MiB, the input bounding everything kafka_eos holds (the batches in flight take at most 198836224 bytes on the heap)"},
		{"a budget with a unit", k2k("    max_buffered_bytes: 1GiB", "", ""), 1088 * MiB, "max_buffered_bytes (1024 MiB) + 64 MiB"},
		{"an integer budget", k2k("    max_buffered_bytes: 536870912", "", ""), 576 * MiB, "512 MiB"},
		{"a budget in decimal units", k2k("    max_buffered_bytes: 400MB", "", ""), 400e6 + 64*MiB, "400000000 bytes"},
		{"a small budget with small batches gets the floor", k2k("    max_buffered_bytes: 16MiB\n    max_batch_records: 10\n    max_batch_bytes: 16KiB", "", ""), MinLimit, "16 MiB"},
		{"empty processor lists", k2k("    max_buffered_bytes: 1GiB", "pipeline:\n  threads: 1\n  processors: []\n", ""), 1088 * MiB, "1024 MiB"},
		{"buffer none", k2k("    max_buffered_bytes: 1GiB", "buffer:\n  none: {}\n", ""), 1088 * MiB, "1024 MiB"},
		{"an output label", k2k("    max_buffered_bytes: 1GiB", "", "  label: out"), 1088 * MiB, "1024 MiB"},

		// The batches in flight bound the heap above the budget: the
		// limit follows them, so that it is never below the live data.
		{"a budget below the batches in flight", k2k("    max_buffered_bytes: 128MiB", "", ""), 74*(MiB+1024*1600) + 64*MiB, "(max_in_flight 64 + 10) x (max_batch_bytes 1 MiB + max_batch_records 1024 x 1600 bytes) = 198836224 bytes, + 64 MiB: above kafka_native's max_buffered_bytes (128 MiB)"},
		{"a raised max_in_flight", k2k("", "", "    max_in_flight: 512"), 522*(MiB+1024*1600) + 64*MiB, "(max_in_flight 512 + 10)"},
		{"larger batches", k2k("    max_batch_records: 4096\n    max_batch_bytes: 4MiB", "", ""), 74*(4*MiB+4096*1600) + 64*MiB, "max_batch_records 4096"},
		{"small batches in flight, small budget", k2k("    max_buffered_bytes: 16MiB\n    max_batch_records: 100\n    max_batch_bytes: 64KiB", "", ""), MinLimit, "max_buffered_bytes (16 MiB)"},
		{"output batching", k2k("", "", "    batching: { count: 10000 }"), 0, "output batching"},

		{"pipeline processors", k2k("", "pipeline:\n  processors:\n    - mapping: root = this\n", ""), 0, "the pipeline has processors"},
		{"input processors", k2k("  processors:\n    - mapping: root = this", "", ""), 0, "the input has processors"},
		{"output processors", k2k("", "", "  processors:\n    - mapping: root = this"), 0, "the output has processors"},
		{"a memory buffer", k2k("", "buffer:\n  memory: {}\n", ""), 0, "memory buffer"},
		{"another input", "input:\n  generate:\n    mapping: root = \"x\"\n" + strings.Replace(k2kOutput, "%s", "", 1), 0, "the input is generate"},
		{"kafka_native in a broker", "input:\n  broker:\n    inputs:\n      - kafka_native:\n          topics: [ a ]\n" + strings.Replace(k2kOutput, "%s", "", 1), 0, "the input is broker"},
		{"another output", strings.Replace(k2kInput, "%s", "", 1) + "output:\n  stdout: {}\n", 0, "the output is stdout"},
		{"no output", strings.Replace(k2kInput, "%s", "", 1), 0, "no kafka_eos output"},
		{"a bad budget", k2k("    max_buffered_bytes: lots", "", ""), 0, "not a byte size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := FromYAML(c.conf)
			require.NoError(t, err)
			require.Equal(t, c.limit, d.Limit, d.Reason)
			require.Contains(t, d.Reason, c.reason)
		})
	}
}

// TestApply: the runtime reports the derived limit after Apply, a
// GOMEMLIMIT from the environment is kept, and no limit leaves the runtime's
// as it was.
func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)

	d := Decision{Limit: 320 << 20, Reason: "kafka_native's max_buffered_bytes (256 MiB) + 64 MiB"}
	msg := Apply(d, "200MiB", true)
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "a GOMEMLIMIT in the environment wins")
	require.Contains(t, msg, "GOMEMLIMIT=200MiB from the environment, kept")

	msg = Apply(Decision{Reason: "the input is generate"}, "", false)
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))
	require.Contains(t, msg, "none set (the input is generate)")

	msg = Apply(d, "", false)
	require.Equal(t, int64(320<<20), debug.SetMemoryLimit(-1))
	require.Contains(t, msg, "Go memory limit: 335544320 bytes (320 MiB) from kafka_native's max_buffered_bytes (256 MiB) + 64 MiB")
}
