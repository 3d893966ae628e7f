package main

import (
	"fmt"
	"strings"
	"testing"
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
		p.waitOutput(t, `Go memory limit: 603979776 bytes (576 MiB) from kafka_native's max_buffered_bytes (512 MiB) + 64 MiB`)
		p.waitOutput(t, `; GOGC 400 (the heap may grow to five times its live data below the limit); GOMEMLIMIT and GOGC override them`)
	})
	t.Run("GOGC wins", func(t *testing.T) {
		p := startBinEnv(t, []string{"GOMEMLIMIT=", "GOGC=150"}, "run", memLimitConfig(t, "512MiB", ""))
		p.waitOutput(t, `Go memory limit: 603979776 bytes (576 MiB) from kafka_native's max_buffered_bytes (512 MiB) + 64 MiB`)
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
