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
		{"kafka_native to kafka_eos at the defaults", k2k("", "", ""), 320 * MiB, "kafka_native's max_buffered_bytes (256 MiB) + 64 MiB, the input bounding everything kafka_eos holds (the messages, and the output's records for them while it holds them)"},
		{"a budget with a unit", k2k("    max_buffered_bytes: 1GiB", "", ""), 1088 * MiB, "max_buffered_bytes (1024 MiB) + 64 MiB"},
		{"an integer budget", k2k("    max_buffered_bytes: 536870912", "", ""), 576 * MiB, "512 MiB"},
		{"a budget in decimal units", k2k("    max_buffered_bytes: 400MB", "", ""), 400e6 + 64*MiB, "400000000 bytes"},
		{"a small budget with small batches gets the floor", k2k("    max_buffered_bytes: 16MiB\n    max_batch_records: 10\n    max_batch_bytes: 16KiB", "", ""), MinLimit, "16 MiB"},
		{"empty processor lists", k2k("    max_buffered_bytes: 1GiB", "pipeline:\n  threads: 1\n  processors: []\n", ""), 1088 * MiB, "1024 MiB"},
		{"buffer none", k2k("    max_buffered_bytes: 1GiB", "buffer:\n  none: {}\n", ""), 1088 * MiB, "1024 MiB"},
		{"an output label", k2k("    max_buffered_bytes: 1GiB", "", "  label: out"), 1088 * MiB, "1024 MiB"},

		// The input's budget bounds the output's records too: max_in_flight
		// and the batch sizes do not raise the limit.
		{"a budget below the batches in flight", k2k("    max_buffered_bytes: 128MiB", "", ""), 192 * MiB, "max_buffered_bytes (128 MiB) + 64 MiB"},
		{"a raised max_in_flight", k2k("", "", "    max_in_flight: 512"), 320 * MiB, "max_buffered_bytes (256 MiB) + 64 MiB"},
		{"larger batches", k2k("    max_batch_records: 4096\n    max_batch_bytes: 4MiB", "", ""), 320 * MiB, "max_buffered_bytes (256 MiB) + 64 MiB"},
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
// as it was. A limit from the input's budget raises the collector's target
// to GCPercent unless GOGC is set; any other limit leaves it.
func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	beforeGC := debug.SetGCPercent(100)
	t.Cleanup(func() {
		debug.SetMemoryLimit(before)
		debug.SetGCPercent(beforeGC)
	})
	reset := func() {
		debug.SetMemoryLimit(math.MaxInt64)
		debug.SetGCPercent(100)
	}
	gcPercent := func() int {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}

	reset()
	d := Decision{Limit: 320 << 20, Reason: "kafka_native's max_buffered_bytes (256 MiB) + 64 MiB", FromBudget: true}
	msg := Apply(d, Env{GoMemLimit: "200MiB"})
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1), "a GOMEMLIMIT in the environment wins")
	require.Equal(t, 100, gcPercent(), "GOGC is left alone without a derived limit")
	require.Contains(t, msg, "GOMEMLIMIT=200MiB from the environment, kept")

	reset()
	msg = Apply(Decision{Reason: "the input is generate"}, Env{})
	require.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))
	require.Equal(t, 100, gcPercent())
	require.Contains(t, msg, "none set (the input is generate)")

	reset()
	msg = Apply(d, Env{})
	require.Equal(t, int64(320<<20), debug.SetMemoryLimit(-1))
	require.Equal(t, GCPercent, gcPercent(), "a limit from the budget raises GOGC")
	require.Contains(t, msg, "Go memory limit: 335544320 bytes (320 MiB) from kafka_native's max_buffered_bytes (256 MiB) + 64 MiB")
	require.Contains(t, msg, "; GOGC 400 (the heap may grow to five times its live data below the limit); GOMEMLIMIT and GOGC override them")

	reset()
	msg = Apply(d, Env{CodePages: 28<<20 + 512<<10})
	require.Equal(t, int64(320<<20-28<<20-512<<10-Overshoot), debug.SetMemoryLimit(-1), "the resident code and the overshoot come off a limit from the budget")
	require.Contains(t, msg, "Go memory limit: 288882688 bytes (275.5 MiB) from kafka_native's max_buffered_bytes (256 MiB) + 64 MiB")
	require.Contains(t, msg, ", less the binary's resident code (28.5 MiB) and 16 MiB the collector and code first run may add; GOGC 400")

	reset()
	Apply(Decision{Limit: MinLimit + 8<<20, FromBudget: true}, Env{CodePages: 30 << 20})
	require.Equal(t, int64(MinLimit), debug.SetMemoryLimit(-1), "never below MinLimit")

	reset()
	Apply(inFlightDecision(), Env{CodePages: 30 << 20})
	require.Equal(t, int64(1401<<20), debug.SetMemoryLimit(-1), "a limit not from the budget is not lowered")

	reset()
	msg = Apply(d, Env{GOGC: "150"})
	require.Equal(t, int64(320<<20), debug.SetMemoryLimit(-1))
	require.Equal(t, 100, gcPercent(), "a GOGC in the environment wins (the runtime read it at start)")
	require.Contains(t, msg, "GOGC=150 from the environment, kept")

	reset()
	msg = Apply(inFlightDecision(), Env{})
	require.Equal(t, int64(1401<<20), debug.SetMemoryLimit(-1))
	require.Equal(t, 100, gcPercent(), "a limit not from the budget leaves GOGC at its default")
	require.Contains(t, msg, "GOGC left at its default")
}

// TestDeriveFromBudget: every limit derived is the input's budget's, marked
// so (Apply raises GOGC for it), a raised max_in_flight included; no limit is
// not.
func TestDeriveFromBudget(t *testing.T) {
	d, err := FromYAML(k2k("", "", ""))
	require.NoError(t, err)
	require.True(t, d.FromBudget, d.Reason)
	d, err = FromYAML(k2k("", "", "    max_in_flight: 512"))
	require.NoError(t, err)
	require.Equal(t, int64(320<<20), d.Limit)
	require.True(t, d.FromBudget, d.Reason)
	d, err = FromYAML(k2k("", "pipeline:\n  processors:\n    - mapping: root = this\n", ""))
	require.NoError(t, err)
	require.False(t, d.FromBudget, d.Reason)
}

func inFlightDecision() Decision { return Decision{Limit: 1401 << 20, Reason: "not from a budget"} }

// TestInputShare: under a Go memory limit an input may hold two thirds of it;
// without one, anything.
func TestInputShare(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	debug.SetMemoryLimit(math.MaxInt64)
	require.Equal(t, int64(math.MaxInt64), InputShare())
	debug.SetMemoryLimit(300 << 20)
	require.Equal(t, int64(200<<20), InputShare())
}
