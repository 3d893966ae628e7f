package main

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/memlimit"
)

// applyMemoryLimit sets the Go memory limit derived from the config's byte
// budgets (package internal/memlimit) when `run` parsed the config, unless
// GOMEMLIMIT is set, and logs the limit chosen (or why none). With a limit
// from the input's budget it also sets GOGC to memlimit.GCPercent (400)
// unless GOGC is set: the heap may then grow to the limit before the
// collector runs, which is the budget the user chose for the process.
//
// A limit is derived only for a kafka_native input feeding a kafka_eos output
// with no processor, no buffer and no output batching: the input's
// max_buffered_bytes then bounds everything the process holds (the output's
// records for the messages included), and the limit is that budget plus
// 64 MiB less the binary's resident code and 16 MiB (at least 128 MiB), so
// that the resident set stays near the budget plus 64 MiB. Other pipelines
// get none: what they hold is
// max_in_flight x the bytes of a batch, which no budget bounds, and a limit
// below the live data would make the garbage collector run constantly.
// Streams mode gets none either (each stream has its own budgets, and streams
// come and go).
func applyMemoryLimit(pc *service.ParsedConfig, log *service.Logger) {
	section := func(name string) any {
		if !pc.Contains(name) {
			return nil
		}
		v, _ := pc.FieldAny(name)
		return plainValue(v)
	}
	d := memlimit.Derive(section("input"), section("buffer"), section("pipeline"), section("output"))
	msg := memlimit.Apply(d, memlimit.OSEnv())
	if log != nil {
		log.Info(msg)
	}
}

// runsOneStream tells whether args run one stream (run, or no subcommand),
// not streams mode.
func runsOneStream(args []string) bool {
	i := subcommand(args)
	return i >= len(args) || args[i] == "run"
}
