// Package memlimit derives the Go memory limit (runtime/debug.SetMemoryLimit)
// that the connect-eos binary sets for a stream config from its byte budgets,
// when the user has not set GOMEMLIMIT.
//
// Without a limit Go lets the heap grow to about twice the live data
// (GOGC=100), so a process holding its budget of records peaks far above it. A
// limit fixes that only where the live data stays below it; where it does not,
// the collector runs constantly and takes the CPU the pipeline needed (a
// kafka_eos output fed by an input that bounds nothing ran at a fraction of
// its throughput under a limit of its budget plus 64 MiB, and still peaked
// above it). So a limit is derived only for a pipeline whose live data the
// config bounds:
//
//   - the input is one kafka_native: it pauses every partition while the
//     bytes it handed to the pipeline and had not acknowledged pass its
//     max_buffered_bytes (default 256 MiB), counted as keys and values plus
//     the message around each record. Everything the pipeline holds came from
//     it and is counted until acknowledged;
//   - the output is one kafka_eos: its records reference the messages' bytes
//     (no copy), it adds what it keeps for them (a kgo.Record each) to the
//     input's count while it holds them (handover.Holder), and it
//     acknowledges a batch once its epoch committed, so what it holds is in
//     what the input counts;
//   - there is no buffer (a buffer acknowledges messages to the input before
//     the output took them, so the input's count no longer bounds them) and no
//     processor anywhere (a processor can create data the input never counted:
//     a parsed JSON document is several times its bytes, split, unarchive and
//     decompress make more of it, caches and branches hold copies);
//   - there is no output batching (it makes batches that hold messages of
//     several input batches; the count would still bound them, but a limit
//     is derived only for the pipeline measured).
//
// The input counts a record as what it takes on the heap (its key, value and
// headers, about 1 KiB for the Benthos message around it, and the output's
// record while the output holds it): output's
// TestInputBudgetBoundsOutputRecords holds that count within 15 % of the heap
// of a kafka_native -> kafka_eos pipeline holding its records. The budget
// plus Headroom (320 MiB at the defaults) is what the process's resident set
// may take. The Go limit is that less the binary's code pages resident at
// start (about 29 MiB) and Overshoot, about 275 MiB at the defaults: the
// resident set holds the code besides the memory the limit bounds, and the
// collector lets the heap pass the limit while it marks. GOGC is GCPercent
// (400) unless the user set GOGC: the heap may then grow to the limit before
// the collector runs, and the collection work per record falls. Under any Go
// limit the input holds at most two thirds of it (InputShare: about 184 MiB
// at the defaults), below its max_buffered_bytes where that is more: the
// process holds more than the input counts, and with the live data near the
// limit the collector would run constantly.
//
// Any other pipeline gets no limit, with the reason logged: its live data is
// bounded by max_in_flight x the bytes of a batch, which no budget in the
// config states, and a limit below it would make the collector run
// constantly. A limit is at least MinLimit, and a GOMEMLIMIT in the
// environment, "off" included, always wins, as does a GOGC.
package memlimit

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// Headroom is what the process's resident set may take above the input's
// budget: the binary's code pages and what the collector lets the heap pass
// the limit by (both left out of the limit, see Apply), the consumer's
// fetched records not handed over yet (up to one fetch per partition past the
// budget), the producers' request buffers, the clients, the state cache and
// Benthos itself.
const Headroom = 64 << 20

// MinLimit is the least limit derived: a copy pipeline's fixed cost (clients,
// connection buffers, the state cache, Benthos) is tens of MiB whatever the
// budget, and a limit near it would make the collector run constantly.
const MinLimit = 128 << 20

// DefaultInputBudget is kafka_native's max_buffered_bytes default.
const DefaultInputBudget = 256 << 20

// GCPercent is the garbage collector's target (GOGC) set beside a limit
// derived from the input's budget: the heap may grow to five times its live
// data before a collection instead of twice, and never past the limit. The
// collection work per record falls with it (about a quarter of the CPU of a
// message-mode copy at GOGC 100: benchmarks.md, "Where the CPU goes"), and
// the memory the process may take is the limit either way.
const GCPercent = 400

// InputShare is what a kafka_native input may hold (the bytes it handed to
// the pipeline and has not had acknowledged, all partitions together) under
// the Go memory limit set now: two thirds of it, or math.MaxInt64 without a
// limit. The process holds more than the input counts (fetched records not
// handed over yet, the producers' request buffers, the clients), and the
// collector runs each time the heap reaches the limit: with the live data at
// two thirds of the limit a collection frees at least half its worth, where
// near the limit the collector would run constantly and take the CPU the
// pipeline needs.
func InputShare() int64 {
	l := debug.SetMemoryLimit(-1)
	if l <= 0 || l == math.MaxInt64 {
		return math.MaxInt64
	}
	return l / 3 * 2
}

// Decision is the limit derived for a config (0: none) and why.
type Decision struct {
	Limit  int64
	Reason string
	// FromBudget: the limit is the input's max_buffered_bytes plus
	// Headroom, the budget the user chose for the process, so the heap may
	// grow up to it (Apply raises GOGC). Every limit Derive returns is;
	// Apply leaves GOGC alone for any other.
	FromBudget bool
}

// none is a Decision without a limit.
func none(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}

// Derive returns the limit for a stream config, given the generic values
// (maps, lists, scalars, as decoded from YAML; nil when absent) of its input,
// buffer, pipeline and output sections.
func Derive(input, buffer, pipeline, output any) Decision {
	in, d := only(input, "input", "kafka_native")
	if in == nil {
		return d
	}
	out, d := only(output, "output", "kafka_eos")
	if out == nil {
		return d
	}
	if b, ok := buffer.(map[string]any); ok {
		for k := range b {
			if k != "none" && k != "label" {
				return none("the config has a %s buffer, which acknowledges messages to the input before the output took them: the input's max_buffered_bytes does not bound them", k)
			}
		}
	}
	for _, s := range []struct {
		name string
		v    any
	}{{"input", input}, {"pipeline", pipeline}, {"output", output}} {
		if m, ok := s.v.(map[string]any); ok {
			if l, ok := m["processors"].([]any); ok && len(l) > 0 {
				return none("the %s has processors, which can create data the input's max_buffered_bytes does not count", s.name)
			}
		}
	}
	if b, ok := out["batching"].(map[string]any); ok {
		for _, k := range []string{"count", "byte_size", "period", "check"} {
			if v, ok := b[k]; ok && v != nil && v != "" && v != 0 {
				return none("kafka_eos has output batching, which makes batches kafka_native's max_batch_records and max_batch_bytes do not size")
			}
		}
	}
	budget := int64(DefaultInputBudget)
	if v, ok := in["max_buffered_bytes"]; ok && v != nil {
		n, err := bytesValue(v)
		if err != nil {
			return none("kafka_native's field max_buffered_bytes: %v", err)
		}
		budget = n
	}
	limit := max(budget+Headroom, MinLimit)
	return Decision{Limit: limit, FromBudget: true, Reason: fmt.Sprintf("kafka_native's max_buffered_bytes (%s) + %s, the input bounding everything kafka_eos holds (the messages, and the output's records for them while it holds them)", mib(budget), mib(Headroom))}
}

// only returns the block of component name when section v is that component
// and nothing else (a label and processors aside); otherwise nil and why.
func only(v any, section, name string) (map[string]any, Decision) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, none("the config has no %s %s", name, section)
	}
	var others []string
	for k := range m {
		if k != name && k != "label" && k != "processors" {
			others = append(others, k)
		}
	}
	if len(others) > 0 {
		sort.Strings(others)
		return nil, none("the %s is %s, not %s alone: only a kafka_native input feeding a kafka_eos output bounds what the pipeline holds", section, strings.Join(others, ", "), name)
	}
	raw, present := m[name]
	if !present {
		return nil, none("the config has no %s %s", name, section)
	}
	block, _ := raw.(map[string]any)
	if block == nil { // "kafka_native: {}" written as "kafka_native:"
		block = map[string]any{}
	}
	return block, Decision{}
}

// bytesValue reads a byte size as YAML decodes it: an integer or a string
// with a unit.
func bytesValue(v any) (int64, error) {
	switch t := v.(type) {
	case int:
		return int64(t), nil
	case int64:
		return t, nil
	case uint64:
		return int64(t), nil
	case float64:
		return int64(t), nil
	case string:
		return kafkaconf.ParseBytes(t)
	}
	return 0, fmt.Errorf("%v is not a byte size", v)
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// approxMiB is n in MiB, to a tenth where it is not a whole number.
func approxMiB(n int64) string {
	if n%(1<<20) == 0 {
		return mib(n)
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

// FromYAML derives the limit for a stream config's text.
func FromYAML(conf string) (Decision, error) {
	spec := service.NewConfigSpec()
	for _, s := range []string{"input", "buffer", "pipeline", "output"} {
		spec = spec.Field(service.NewAnyField(s).Optional())
	}
	pc, err := spec.ParseYAML(conf, nil)
	if err != nil {
		return Decision{}, err
	}
	section := func(name string) any {
		if !pc.Contains(name) {
			return nil
		}
		v, _ := pc.FieldAny(name)
		return v
	}
	return Derive(section("input"), section("buffer"), section("pipeline"), section("output")), nil
}

// Env is what the Go runtime read from the environment at start: GOMEMLIMIT
// and GOGC, "" when unset (the runtime reads an empty value as unset); and
// the process's resident code.
type Env struct {
	GoMemLimit string
	GOGC       string
	// CodePages is the binary's code and other file pages resident now
	// (RssFile in /proc/self/status; 0 where it cannot be read): memory
	// in the resident set that the Go limit does not bound.
	CodePages int64
}

// OSEnv reads Env from the process's environment and /proc.
func OSEnv() Env {
	return Env{GoMemLimit: os.Getenv("GOMEMLIMIT"), GOGC: os.Getenv("GOGC"), CodePages: rssFile()}
}

// rssFile reads RssFile from /proc/self/status, in bytes; 0 if it cannot.
func rssFile() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "RssFile:" && f[2] == "kB" {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return n << 10
			}
		}
	}
	return 0
}

// Overshoot is what a limit from the budget leaves, besides the code pages
// resident at start, for the resident set to pass it: the collector lets
// the heap grow past the limit while it marks (19 MiB measured in a
// saturated copy), and code first run after start adds pages (about 6 MiB).
const Overshoot = 16 << 20

// Apply sets d's limit as the Go runtime's memory limit unless the user set
// GOMEMLIMIT (the runtime read it at start and it wins), and, for a limit
// from the input's budget, GCPercent as the collector's target unless the
// user set GOGC. It returns the line to log, which names the limit the
// runtime then reports.
func Apply(d Decision, env Env) string {
	switch {
	case env.GoMemLimit != "":
		return fmt.Sprintf("Go memory limit: GOMEMLIMIT=%s from the environment, kept (the runtime reports %d bytes)", env.GoMemLimit, debug.SetMemoryLimit(-1))
	case d.Limit <= 0:
		return fmt.Sprintf("Go memory limit: none set (%s); set GOMEMLIMIT to bound the heap", d.Reason)
	}
	limit, reason := d.Limit, d.Reason
	if d.FromBudget && env.CodePages > 0 {
		// The budget plus Headroom is what the resident set may take;
		// the code pages are in it and not under the Go limit.
		limit = max(limit-env.CodePages-Overshoot, MinLimit)
		reason = fmt.Sprintf("%s, less the binary's resident code (%s) and %s the collector and code first run may add", reason, approxMiB(env.CodePages), mib(Overshoot))
	}
	debug.SetMemoryLimit(limit)
	gc := "GOGC left at its default"
	switch {
	case env.GOGC != "":
		gc = "GOGC=" + env.GOGC + " from the environment, kept"
	case d.FromBudget:
		debug.SetGCPercent(GCPercent)
		gc = fmt.Sprintf("GOGC %d (the heap may grow to five times its live data below the limit)", GCPercent)
	}
	return fmt.Sprintf("Go memory limit: %d bytes (%s) from %s; %s; GOMEMLIMIT and GOGC override them", debug.SetMemoryLimit(-1), approxMiB(limit), reason, gc)
}
