package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
	"github.com/connect-eos/connect-eos/statecache"
)

// Checks across the whole config, which no component can make on its own
// (Benthos builds each from its own block, and cache resources only when
// first used). `connect-eos run` makes them when the config is parsed and
// `connect-eos lint` after its own lint; a failed check is an error at both.
//
//   - kafka_eos.consumer_group names the group of a kafka_native input of the
//     same config (Kafka-to-Kafka mode). Otherwise nothing hands the output
//     any source offset: it would commit none and copy at-least-once. (In
//     another Benthos build the output warns when the first records of a
//     partition arrive without a start handed over.)
//   - kafka_eos.state_cache names a cache that survives a crash: a warning
//     for Benthos' memory and file caches, saying what a crash loses.
//   - a kafka_state cache resource's connection warnings (TLS verification
//     off, credentials in clear text) are logged at start, not at its first
//     use.
//   - kafka_eos in dedupe mode, or in Kafka-to-Kafka mode with output
//     batching, needs the messages in the order the input emitted them: a
//     pipeline with processors must run them on one thread
//     (pipeline.threads: 1). Several threads hand batches on out of order;
//     dedupe then takes the earlier positions for replays and drops them, and
//     output batches that each wait for a range the other holds are nacked
//     again and again (the copy never finishes). Without processors Benthos
//     builds no pipeline and threads does not matter.
//   - kafka_eos in Kafka-to-Kafka mode (consumer_group set, mirror mode
//     too) needs every input batch to reach it as one batch: a processor
//     that hands a batch on as several (split, group_by, group_by_value,
//     anywhere in the input's, the pipeline's or the output's processors,
//     inside try, catch, while, processors or a processor resource) makes
//     each part commit the whole input batch's source offsets, and a crash
//     between the parts loses the later ones. Processors that merge what
//     their children make into one batch again (for_each, switch, branch,
//     workflow, parallel, retry, cached) are not looked into.

// configFinding is the result of checkConfig.
type configFinding struct {
	errors   []string
	warnings []string
}

// checkConfig checks a whole config, given as the generic values of its
// input, pipeline, output and cache_resources sections (what Benthos parsed,
// or the YAML file decoded).
func checkConfig(input, pipeline, output, caches, procResources any) configFinding {
	var f configFinding
	// The processors every kafka_eos of the config is fed through, but
	// those of outputs around it (found per output below).
	var feeding []namedProcs
	findProcessors(input, "input", &feeding)
	if m, ok := pipeline.(map[string]any); ok && m["processors"] != nil {
		feeding = append(feeding, namedProcs{"pipeline.processors", m["processors"]})
	}
	procRes := map[string]any{} // label -> the processor resource's block
	if list, ok := procResources.([]any); ok {
		for _, r := range list {
			if m, ok := r.(map[string]any); ok {
				if l, _ := m["label"].(string); l != "" {
					procRes[l] = m
				}
			}
		}
	}
	threads, procs, parallel := pipelineThreads(pipeline)
	var groups []string
	walkComponents(input, "kafka_native", func(conf map[string]any) {
		if g, _ := conf["consumer_group"].(string); g != "" {
			groups = append(groups, g)
		}
	})
	resources := map[string]map[string]any{} // label -> the resource's block
	if list, ok := caches.([]any); ok {
		for _, r := range list {
			if m, ok := r.(map[string]any); ok {
				if l, _ := m["label"].(string); l != "" {
					resources[l] = m
				}
			}
		}
	}
	walkOutputs(output, "output", "kafka_eos", nil, func(conf map[string]any, around []namedProcs) {
		id, _ := conf["transactional_id"].(string)
		if g, _ := conf["consumer_group"].(string); g != "" {
			var found []string
			lists := append(slices.Clip(feeding), around...)
			if b, ok := conf["batching"].(map[string]any); ok && b["processors"] != nil {
				lists = append(lists, namedProcs{"the output's batching.processors", b["processors"]})
			}
			for _, np := range lists {
				splittingProcessors(np.list, np.path, procRes, map[string]bool{}, &found)
			}
			for _, p := range found {
				f.errors = append(f.errors, fmt.Sprintf(
					"kafka_eos %q: Kafka-to-Kafka mode (consumer_group %q) needs every input batch to reach the output as one batch, and %s hands a batch on as several: "+
						"each part commits the source offsets of the whole input batch, so a crash after the first part committed and before the others did loses their records; "+
						"remove it (kafka_native's max_batch_records and max_batch_bytes make smaller input batches)",
					id, g, p))
			}
		}
		if g, _ := conf["consumer_group"].(string); g != "" && !contains(groups, g) {
			have := "this config has no kafka_native input with a consumer_group"
			if len(groups) > 0 {
				have = fmt.Sprintf("the kafka_native inputs of this config read with consumer_group %s", quoteList(groups))
			}
			f.errors = append(f.errors, fmt.Sprintf(
				"kafka_eos %q: consumer_group %q (Kafka-to-Kafka mode) names no kafka_native input of this config, and %s: "+
					"set both to the same group, or remove the output's consumer_group for plain mode (at-least-once across a crash)",
				id, g, have))
		}
		if parallel {
			inOrder := fmt.Sprintf("pipeline.threads is %s with %d processor(s): set pipeline.threads: 1", threadsText(threads), procs)
			g, _ := conf["consumer_group"].(string)
			switch {
			case conf["dedupe"] != nil:
				f.errors = append(f.errors, fmt.Sprintf(
					"kafka_eos %q: dedupe mode needs the messages in the order the input emitted them, and %s "+
						"(with several threads a later position can reach the output first, and the earlier ones are then dropped as replays)",
					id, inOrder))
			case g != "" && batchingOn(conf["batching"]):
				f.errors = append(f.errors, fmt.Sprintf(
					"kafka_eos %q: Kafka-to-Kafka mode (consumer_group %q) with batching needs the input batches in order, and %s, or remove kafka_eos.batching "+
						"(with several threads the batcher combines input batches out of order, and output batches waiting for each other's ranges are nacked again and again: the copy never finishes)",
					id, g, inOrder))
			}
		}
		cacheName, _ := conf["state_cache"].(string)
		if res, ok := resources[cacheName]; ok {
			if w := durabilityWarning(id, cacheName, res, conf["dedupe"] != nil); w != "" {
				f.warnings = append(f.warnings, w)
			}
		}
	})
	labels := make([]string, 0, len(resources))
	for l := range resources {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	for _, l := range labels {
		ks, ok := resources[l]["kafka_state"].(map[string]any)
		if !ok {
			continue
		}
		for _, w := range stateCacheWarnings(ks) {
			f.warnings = append(f.warnings, fmt.Sprintf("kafka_state %q: %s", l, w))
		}
	}
	return f
}

// pipelineThreads reads the pipeline section: its threads (Benthos' default
// -1, one per CPU), its number of processors, and whether messages can leave
// it out of order: processors on any number of threads but one. Benthos
// builds no pipeline without processors. A threads value that is not a
// number is left to Benthos.
func pipelineThreads(pipeline any) (threads, procs int, parallel bool) {
	threads = -1
	m, _ := pipeline.(map[string]any)
	if l, ok := m["processors"].([]any); ok {
		procs = len(l)
	}
	switch t := m["threads"].(type) {
	case int:
		threads = t
	case float64:
		threads = int(t)
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(t))
		if err != nil {
			return threads, procs, false
		}
		threads = n
	}
	return threads, procs, procs > 0 && threads != 1
}

func threadsText(threads int) string {
	if threads <= 0 {
		return fmt.Sprintf("%d (one thread per CPU)", threads)
	}
	return strconv.Itoa(threads)
}

// batchingOn reports whether an output batching block makes batches
// (Benthos' batch policy is a no-op unless one of these is set).
func batchingOn(b any) bool {
	m, ok := b.(map[string]any)
	if !ok {
		return false
	}
	num := func(k string) int {
		switch v := m[k].(type) {
		case int:
			return v
		case float64:
			return int(v)
		case string:
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
		return 0
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	procs, _ := m["processors"].([]any)
	return num("count") > 1 || num("byte_size") > 0 || str("period") != "" || str("check") != "" || len(procs) > 0
}

// durabilityWarning says what a crash loses when the state cache is one of
// Benthos' caches that do not survive it.
func durabilityWarning(id, label string, res map[string]any, dedupe bool) string {
	var what string
	switch {
	case res["memory"] != nil:
		what = "a memory cache: a restart of the process loses it"
	case res["file"] != nil:
		what = "a file cache, not synced to disk: a crash of the machine can lose it"
	default:
		return ""
	}
	lost := "the recovery identity of the epoch being committed: an epoch in doubt at a crash cannot be resumed, " +
		"the restart's InitProducerID aborts it if it is still open (only without a restart under this transactional_id is it left to transaction_timeout)"
	if dedupe {
		lost += ", and the committed dedupe positions: after a restart every message is written again"
	}
	return fmt.Sprintf("kafka_eos %q: state_cache %q is %s, with %s. Use a kafka_state cache (docs/exactly-once.md)", id, label, what, lost)
}

// stateCacheWarnings are the connection warnings of a kafka_state block.
func stateCacheWarnings(conf map[string]any) []string {
	b, err := json.Marshal(conf)
	if err != nil {
		return nil
	}
	pc, err := statecache.Spec().ParseYAML(string(b), nil)
	if err != nil {
		return nil // the cache reports its own config errors
	}
	conn, err := kafkaconf.FromParsed(pc)
	if err != nil {
		return nil
	}
	return conn.Warnings()
}

// namedProcs is a list of processors of the config and where it is.
type namedProcs struct {
	path string
	list any
}

// findProcessors appends every processors list in v (an input section:
// an input's processors, those of the inputs of a broker) to out.
func findProcessors(v any, path string, out *[]namedProcs) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			if k == "processors" {
				*out = append(*out, namedProcs{path + ".processors", t[k]})
				continue
			}
			findProcessors(t[k], path+"."+k, out)
		}
	case []any:
		for i, e := range t {
			findProcessors(e, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

// walkOutputs calls fn with the block of every component named name in
// the output section v, and the processors of the outputs it sits in (its
// own and those of the brokers, fallbacks and switch cases around it).
func walkOutputs(v any, path, name string, around []namedProcs, fn func(map[string]any, []namedProcs)) {
	switch t := v.(type) {
	case map[string]any:
		if p, ok := t["processors"]; ok {
			around = append(slices.Clip(around), namedProcs{path + ".processors", p})
		}
		for _, k := range sortedKeys(t) {
			if k == "processors" {
				continue
			}
			if k == name {
				if m, ok := t[k].(map[string]any); ok {
					fn(m, around)
					continue
				}
			}
			walkOutputs(t[k], path+"."+k, name, around, fn)
		}
	case []any:
		for i, e := range t {
			walkOutputs(e, fmt.Sprintf("%s[%d]", path, i), name, around, fn)
		}
	}
}

// batchSplitters are the processors that hand one batch on as several.
var batchSplitters = map[string]bool{"split": true, "group_by": true, "group_by_value": true}

// batchMergers are the processors that hand on one batch whatever their
// children make of it (Benthos merges their results again).
var batchMergers = map[string]bool{"for_each": true, "switch": true, "branch": true, "workflow": true, "parallel": true, "retry": true, "cached": true}

// splittingProcessors appends to out where a processor in v (a list of
// processors, or one) hands a batch on as several: a splitter, at any depth
// but inside a merger, and through processor resources (by label).
func splittingProcessors(v any, path string, resources map[string]any, seen map[string]bool, out *[]string) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			e := t[k]
			switch {
			case batchSplitters[k]:
				where := path
				if l, _ := t["label"].(string); l != "" {
					where = fmt.Sprintf("%s (label %q)", path, l)
				}
				*out = append(*out, fmt.Sprintf("the %s processor at %s", k, where))
			case batchMergers[k]:
			case k == "resource":
				name, _ := e.(string)
				if r, ok := resources[name].(map[string]any); ok && !seen[name] {
					seen[name] = true
					r = maps.Clone(r)
					delete(r, "label") // named as the resource
					splittingProcessors(r, fmt.Sprintf("%s (processor resource %q)", path, name), resources, seen, out)
				}
			default:
				splittingProcessors(e, path+"."+k, resources, seen, out)
			}
		}
	case []any:
		for i, e := range t {
			splittingProcessors(e, fmt.Sprintf("%s[%d]", path, i), resources, seen, out)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// walkComponents calls fn with the block of every component named name in
// v, however deep (brokers, fallbacks, switch cases).
func walkComponents(v any, name string, fn func(map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == name {
				if m, ok := t[k].(map[string]any); ok {
					fn(m)
					continue
				}
			}
			walkComponents(t[k], name, fn)
		}
	case []any:
		for _, e := range t {
			walkComponents(e, name, fn)
		}
	}
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// plainValue turns what Benthos' ParsedConfig.FieldAny returns for the
// main config (YAML nodes, or maps and lists holding them) into plain maps
// and lists.
func plainValue(v any) any {
	switch t := v.(type) {
	case interface{ Decode(any) error }: // a *yaml.Node
		var out any
		if err := t.Decode(&out); err != nil {
			return nil
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = plainValue(e)
		}
		return out
	case map[string]any: // a section whose lists hold YAML nodes (pipeline.processors)
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = plainValue(e)
		}
		return out
	}
	return v
}

// checkParsedConfig runs checkConfig on the config Benthos parsed for `run`:
// warnings go to log, errors fail the start.
func checkParsedConfig(pc *service.ParsedConfig, log *service.Logger) error {
	section := func(name string) any {
		if !pc.Contains(name) {
			return nil
		}
		v, _ := pc.FieldAny(name)
		return plainValue(v)
	}
	f := checkConfig(section("input"), section("pipeline"), section("output"), section("cache_resources"), section("processor_resources"))
	for _, w := range f.warnings {
		if log != nil {
			log.Warn(w)
		}
	}
	if len(f.errors) > 0 {
		return fmt.Errorf("%s", strings.Join(f.errors, "; "))
	}
	return nil
}

// isLint tells whether args run `lint`.
func isLint(args []string) bool {
	i := subcommand(args)
	return i < len(args) && args[i] == "lint"
}

// lintConfigs runs checkConfig on the config files named after `lint` (after
// Benthos' own lint passed) and prints what it finds as lint does; it returns
// the exit code: 1 when a check failed. Directories and globs, which Benthos
// expands itself, are skipped.
func lintConfigs(args []string) int {
	code := 0
	for _, path := range args[subcommand(args)+1:] {
		if strings.HasPrefix(path, "-") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		f, err := checkConfigYAML(b)
		if err != nil {
			continue // Benthos' lint already judged the file
		}
		for _, w := range f.warnings {
			fmt.Fprintf(os.Stderr, "%s: warning: %s\n", path, w)
		}
		for _, e := range f.errors {
			fmt.Fprintf(os.Stderr, "%s: %s\n", path, e)
			code = 1
		}
	}
	return code
}

// checkConfigYAML runs checkConfig on a config file's text.
func checkConfigYAML(conf []byte) (configFinding, error) {
	spec := service.NewConfigSpec().
		Field(service.NewAnyField("input").Optional()).
		Field(service.NewAnyField("pipeline").Optional()).
		Field(service.NewAnyField("output").Optional()).
		Field(service.NewAnyField("cache_resources").Optional()).
		Field(service.NewAnyField("processor_resources").Optional())
	pc, err := spec.ParseYAML(string(conf), nil)
	if err != nil {
		return configFinding{}, err
	}
	section := func(name string) any {
		if !pc.Contains(name) {
			return nil
		}
		v, _ := pc.FieldAny(name)
		return v
	}
	return checkConfig(section("input"), section("pipeline"), section("output"), section("cache_resources"), section("processor_resources")), nil
}

// Redpanda Connect's kafka_franz and redpanda components write some fields
// differently, or have fields this project does not: foreignHints says what
// to write instead, for each one a config uses. Benthos' own lint only says
// "expected object value" or "field X not recognised".
var foreignFieldHints = map[string]map[string]string{
	"kafka_native": {
		"start_from_oldest": "use start_offset: earliest (true) or latest (false)",
		"multi_header":      "remove it: a header repeated in one record is always read as a list",
		"checkpoint_limit":  "remove it: batches of a partition are emitted in order, max_batch_records and max_buffered_bytes bound what is in flight",
		"fetch_max_bytes":   "remove it: fetch_max_partition_bytes bounds a fetch per partition",
		"fetch_min_bytes":   "remove it",
		"auto_replay_nacks": "remove it: rejected batches are always replayed (nothing is committed past them)",
		"batching":          "remove it: a batch is one fetch of one partition, cut at max_batch_records / max_batch_bytes",
	},
	"kafka_eos": {
		"timestamp_ms":           "not supported: records get the produce time, because franz-go measures its delivery timeout from the record's timestamp; remove it (Arrow rows can keep their source timestamps with arrow_timestamps)",
		"timestamp":              "not supported: records get the produce time, because franz-go measures its delivery timeout from the record's timestamp; remove it (Arrow rows can keep their source timestamps with arrow_timestamps)",
		"idempotent_write":       "remove it: transactional writes are always idempotent",
		"timeout":                "use commit_timeout (one epoch commit) and transaction_timeout",
		"broker_write_max_bytes": "remove it",
	},
}

// foreignHints returns a hint for every Redpanda Connect form in the config
// (the generic values of its sections).
func foreignHints(sections ...any) []string {
	var hints []string
	for _, sec := range sections {
		walkComponents(sec, "kafka_franz", func(map[string]any) {
			hints = append(hints, "kafka_franz is Redpanda Connect's: use kafka_native as the input and kafka_eos as the output (docs/migration.md)")
		})
		walkComponents(sec, "redpanda", func(map[string]any) {
			hints = append(hints, "redpanda is Redpanda Connect's: use kafka_native as the input and kafka_eos as the output (docs/migration.md)")
		})
		for _, comp := range []string{"kafka_native", "kafka_eos", "kafka_state"} {
			walkComponents(sec, comp, func(conf map[string]any) {
				if list, ok := conf["sasl"].([]any); ok {
					hints = append(hints, comp+": field sasl: "+saslListHint(list))
				}
				if comp == "kafka_native" {
					if topics, ok := conf["topics"].([]any); ok {
						for _, t := range topics {
							for _, e := range strings.Split(fmt.Sprint(t), ",") {
								if strings.Count(e, ":") == 2 {
									hints = append(hints, fmt.Sprintf("kafka_native: field topics: %q: a start offset in the entry (Redpanda Connect's form) is not supported: write the partition (topic:P) in topics and its offset in start_offsets with start_offset: specific", e))
								}
							}
						}
					}
				}
				keys := make([]string, 0, len(conf))
				for k := range conf {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					if h, ok := foreignFieldHints[comp][k]; ok {
						hints = append(hints, fmt.Sprintf("%s: field %s (Redpanda Connect's): %s", comp, k, h))
					}
				}
			})
		}
	}
	return hints
}

// saslListHint says what to write instead of Redpanda Connect's list of SASL
// mechanisms: one object, with the first entry's mechanism and the fields
// that mechanism takes (extensions included).
func saslListHint(list []any) string {
	mech, ext := "SCRAM-SHA-512", false
	if len(list) > 0 {
		if m, ok := list[0].(map[string]any); ok {
			if s, ok := m["mechanism"].(string); ok && s != "" {
				mech = s
			}
			_, ext = m["extensions"]
		}
	}
	const head = "a list of mechanisms (Redpanda Connect's form) is not supported: "
	var obj string
	switch mech {
	case "AWS_MSK_IAM":
		return head + "AWS_MSK_IAM is not supported; the mechanisms are none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER"
	case "OAUTHBEARER":
		obj = "sasl: { mechanism: OAUTHBEARER, token: ... }"
		if ext {
			obj = "sasl: { mechanism: OAUTHBEARER, token: ..., extensions: { key: value } }"
		}
	default:
		obj = "sasl: { mechanism: " + mech + ", username: ..., password: ... }"
	}
	more := ""
	if len(list) > 1 {
		more = " (one mechanism: the one the brokers accept)"
	}
	return head + "write one object" + more + ", e.g. " + obj
}

// configFiles returns the config files args name: -c/--config's value and
// the arguments after the subcommand.
func configFiles(args []string) []string {
	var files []string
	for i := 1; i < len(args); i++ {
		if (args[i] == "-c" || args[i] == "--config") && i+1 < len(args) {
			files = append(files, args[i+1])
		}
	}
	if i := subcommand(args); i < len(args) {
		for _, a := range args[i+1:] {
			if !strings.HasPrefix(a, "-") {
				files = append(files, a)
			}
		}
	}
	return files
}

// printForeignHints prints foreignHints for every config file args name, as
// `path: hint`, and says whether it printed any.
func printForeignHints(args []string) bool {
	printed := false
	for _, path := range configFiles(args) {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		spec := service.NewConfigSpec().
			Field(service.NewAnyField("input").Optional()).
			Field(service.NewAnyField("output").Optional()).
			Field(service.NewAnyField("cache_resources").Optional())
		pc, err := spec.ParseYAML(string(b), nil)
		if err != nil {
			continue
		}
		var secs []any
		for _, name := range []string{"input", "output", "cache_resources"} {
			if pc.Contains(name) {
				v, _ := pc.FieldAny(name)
				secs = append(secs, v)
			}
		}
		for _, h := range foreignHints(secs...) {
			fmt.Fprintf(os.Stderr, "%s: %s\n", path, h)
			printed = true
		}
	}
	return printed
}
