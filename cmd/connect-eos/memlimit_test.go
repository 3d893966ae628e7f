package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// memLimitConfig is a Kafka-to-Kafka copy whose brokers cannot be reached
// (the limit is set and logged when the config is parsed, before anything
// connects), with the input's max_buffered_bytes and the pipeline's lines.
func memLimitConfig(t *testing.T, budget, pipeline string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`
http:
  enabled: false
input:
  kafka_native:
    seed_brokers: [ 127.0.0.1:1 ]
    topics: [ orders ]
    consumer_group: copy
    max_buffered_bytes: %s
%s
output:
  kafka_eos:
    seed_brokers: [ 127.0.0.1:1 ]
    topic: orders_copy
    transactional_id: copy
    consumer_group: copy
    state_cache: state
cache_resources:
  - label: state
    kafka_state:
      seed_brokers: [ 127.0.0.1:1 ]
      topic: copy_state
`, budget, pipeline))
}

// TestMemoryLimitApplied: `run` sets the Go memory limit derived from
// kafka_native's max_buffered_bytes and logs the value the runtime then
// reports, with GOGC 400; a GOMEMLIMIT or GOGC in the environment wins; a
// pipeline with processors gets none, and says why.
func TestMemoryLimitApplied(t *testing.T) {
	t.Run("derived", func(t *testing.T) {
		// An empty GOMEMLIMIT or GOGC is unset, for the Go runtime as for the
		// binary (and hides the test runner's own, if it has any).
		p := startBinEnv(t, []string{"GOMEMLIMIT=", "GOGC="}, "run", memLimitConfig(t, "512MiB", ""))
		p.waitOutput(t, `; GOGC 400 (the heap may grow to five times its live data below the limit); GOMEMLIMIT and GOGC override them`)
		// The limit is the budget plus 64 MiB less the binary's resident
		// code, as it logs it, and 16 MiB.
		m := regexp.MustCompile(`Go memory limit: (\d+) bytes \([0-9.]+ MiB\) from kafka_native's max_buffered_bytes \(512 MiB\) \+ 64 MiB, .*, less the binary's resident code \(([0-9.]+) MiB\) and 16 MiB`).FindStringSubmatch(p.output())
		require.NotNil(t, m, p.output())
		limit, err := strconv.ParseInt(m[1], 10, 64)
		require.NoError(t, err)
		code, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err)
		require.Greater(t, code, 1.0, "a Go binary has MiBs of code resident")
		require.InDelta(t, float64(576-16)-code, float64(limit)/(1<<20), 0.06)
	})
	t.Run("GOGC wins", func(t *testing.T) {
		p := startBinEnv(t, []string{"GOMEMLIMIT=", "GOGC=150"}, "run", memLimitConfig(t, "512MiB", ""))
		p.waitOutput(t, `MiB) from kafka_native's max_buffered_bytes (512 MiB) + 64 MiB`)
		p.waitOutput(t, "; GOGC=150 from the environment, kept;")
	})
	t.Run("GOMEMLIMIT wins", func(t *testing.T) {
		p := startBinEnv(t, []string{"GOMEMLIMIT=100MiB"}, "run", memLimitConfig(t, "512MiB", ""))
		p.waitOutput(t, "Go memory limit: GOMEMLIMIT=100MiB from the environment, kept (the runtime reports 104857600 bytes)")
	})
	t.Run("processors", func(t *testing.T) {
		p := startBinEnv(t, []string{"GOMEMLIMIT="}, "run", memLimitConfig(t, "512MiB", "pipeline:\n  processors: [ { mapping: 'root = this' } ]"))
		p.waitOutput(t, "Go memory limit: none set (the pipeline has processors")
	})
}

// TestMemoryLimitOnlyForRun: the limit is derived for `run` (and a config
// given without a subcommand), not for streams mode.
func TestMemoryLimitOnlyForRun(t *testing.T) {
	for args, want := range map[string]bool{
		"run c.yaml":                   true,
		"-c c.yaml":                    true,
		"--log.level debug run c.yaml": true,
		"streams a.yaml b.yaml":        false,
		"-c c.yaml streams a.yaml":     false,
		"lint c.yaml":                  false,
	} {
		if got := runsOneStream(append([]string{"connect-eos"}, strings.Fields(args)...)); got != want {
			t.Errorf("runsOneStream(%q) = %v, want %v", args, got, want)
		}
	}
}
