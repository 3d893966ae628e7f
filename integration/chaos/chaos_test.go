package chaos

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// Knobs. The defaults are the CI scale that `make test` runs (a few minutes
// over both transaction versions); the large scale of docs/evidence.md is
//
//	CHAOS=1 CHAOS_RECORDS=1000000 CHAOS_KILLS=20 CHAOS_BROKER_RESTARTS=2 CHAOS_RATE=0 \
//	  go test ./integration/chaos -run TestChaos -v -timeout 120m
type knobs struct {
	records        int // CHAOS_RECORDS: records in the input topic
	kills          int // CHAOS_KILLS: SIGKILL rounds
	sigterms       int // CHAOS_SIGTERMS: SIGTERM rounds
	brokerRestarts int // CHAOS_BROKER_RESTARTS: broker bounces, alternately kill -9 and clean (the first is kill -9)
	zombies        int // CHAOS_ZOMBIES: rounds that start a second process with the same transactional_id
	processes      int // CHAOS_PROCESSES: connect-eos processes (1 or 2; 2 pin one input partition each); the unbounded variant runs 2 unless it is set
	rate           int // CHAOS_RATE: records/s over all processes (0: unthrottled)
	maxInFlight    int // CHAOS_MAX_IN_FLIGHT: the output's max_in_flight in the 2to3 variant (0: its default, 64)
	batch          int // CHAOS_BATCH: the input's max_batch_records (0: its default, 1024)
	// k2kStrict (CHAOS_K2K_STRICT, default 0): 1 runs the Kafka-to-Kafka
	// runs in the configuration the output needed before the input handed
	// its starts over (output/spec.go): max_in_flight 1 and a committed
	// starting offset for every input partition (committed here, at the log
	// start, before the first process). 0 runs them like the plain runs
	// (CHAOS_MAX_IN_FLIGHT, nothing committed at first).
	k2kStrict bool
	step      float64 // CHAOS_STEP: each round waits for at least this share of the records left before the tail (see fillTail)
	tvs       []int   // CHAOS_TVS: transaction versions (default 0,2)
	runs      []string
	seed      uint64 // CHAOS_SEED
	timeout   time.Duration
	keep      bool // CHAOS_KEEP=1 keeps the logs of a passing run
	// brokerKill9 (default true): broker bounces alternate kill -9 and
	// clean; false bounces cleanly only. The unbounded variant sets it
	// false unless CHAOS_UNBOUNDED_BROKER_KILL9=1: on this single-node
	// KRaft broker a kill -9 can leave a hanging transaction that holds
	// the group's offsets for good (KAFKA-5202, docs/exactly-once.md), a
	// Kafka limitation that a multi-broker cluster does not have.
	brokerKill9 bool
	// zombieFirst: the zombie round comes first of the long rounds. The
	// unbounded variant sets it: its zombie may need a second try while
	// the copy still has records for it (see zombieMember in runChaos).
	zombieFirst bool
	// cluster: the cluster variant's rounds (cluster_test.go), none in
	// the single-node runs.
	cluster clusterKnobs
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func loadKnobs(t *testing.T) knobs {
	k := knobs{
		records:        envInt(t, "CHAOS_RECORDS", 60000),
		kills:          envInt(t, "CHAOS_KILLS", 3),
		sigterms:       envInt(t, "CHAOS_SIGTERMS", 1),
		brokerRestarts: envInt(t, "CHAOS_BROKER_RESTARTS", 2),
		zombies:        envInt(t, "CHAOS_ZOMBIES", 1),
		processes:      envInt(t, "CHAOS_PROCESSES", 1),
		rate:           envInt(t, "CHAOS_RATE", 2000),
		// While the broker is down the pipeline goes on handing batches to
		// the output until max_in_flight wait (64 x 1024 records by
		// default): at CI scale that would be the whole remaining input, and
		// the copy would end before the last rounds.
		maxInFlight: envInt(t, "CHAOS_MAX_IN_FLIGHT", 8),
		batch:       envInt(t, "CHAOS_BATCH", 256),
		k2kStrict:   envInt(t, "CHAOS_K2K_STRICT", 0) == 1,
		step:        0.2,
		tvs:         []int{0, 2},
		runs:        []string{"plain/2to3", "k2k/2to3", "k2k/1to1", "k2k/1to1-arrow", "k2k/1to1-batching", "dedupe/2to3", "k2k/2to3-unbounded"},
		seed:        uint64(time.Now().UnixNano()),
		timeout:     10 * time.Minute,
		keep:        os.Getenv("CHAOS_KEEP") == "1",
		brokerKill9: true,
	}
	if v := os.Getenv("CHAOS_STEP"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f >= 1 {
			t.Fatalf("CHAOS_STEP=%q: want a share in (0, 1)", v)
		}
		k.step = f
	}
	if v := os.Getenv("CHAOS_TVS"); v != "" {
		k.tvs = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || (n != 0 && n != 2) {
				t.Fatalf("CHAOS_TVS=%q: want 0, 2 or 0,2", v)
			}
			k.tvs = append(k.tvs, n)
		}
	}
	if v := os.Getenv("CHAOS_RUNS"); v != "" {
		k.runs = strings.Split(v, ",")
	}
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", v, err)
		}
		k.seed = n
	}
	if v := os.Getenv("CHAOS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_TIMEOUT=%q: %v", v, err)
		}
		k.timeout = d
	}
	if k.processes < 1 || k.processes > 2 {
		t.Fatalf("CHAOS_PROCESSES=%d: the input topic has 2 partitions, so 1 or 2 processes", k.processes)
	}
	if k.records < 100 {
		t.Fatalf("CHAOS_RECORDS=%d: at least 100", k.records)
	}
	return k
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary returns the connect-eos binary: $CONNECT_EOS_BIN (scripts/test.sh
// builds it) or one built once from ./cmd/connect-eos.
func binary(t *testing.T) string {
	binOnce.Do(func() {
		if p := os.Getenv("CONNECT_EOS_BIN"); p != "" {
			binPath = p
			return
		}
		dir, err := os.MkdirTemp("", "chaos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "connect-eos")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/connect-eos").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/connect-eos: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestChaos runs every chaos run (mode/variant) once per transaction version,
// each version on its own broker (started here with up.sh, so that the suite
// can bounce it). Modes: plain (at-least-once across crashes: no record
// missing, duplicates counted), k2k (Kafka-to-Kafka: exactly-once) and dedupe
// (exactly-once); variants: 2to3 (input 2 partitions, output 3, keyed by the
// value), 1to1 (2 and 2, partition kept, per-partition order checked),
// 1to1-arrow (1to1 with both sides in Arrow mode: kafka_native format: arrow,
// kafka_eos input_format: arrow, each row keeping its partition),
// 1to1-batching (k2k 1to1 with output batching, a dead-letter route, and a
// record too large for the output in the input: reported there, everything
// else exactly once) and 2to3-unbounded (group membership, no stop, two processes: every kill is a
// rebalance; a dead member holds its partitions for its 10 s session
// timeout; broker bounces are clean, see knobs.brokerKill9).
//
// Every planned round must land, or the run fails (missedChaos): the input's
// last tenth (the tail) is written only after the rounds ran, and the bounded
// processes stop at the end offsets the tail completes, so no copy can end
// before its chaos. The verdicts come from judges that know their end
// (kafkatest.ReadCommitted on positions, and Kafka's ConsoleConsumer that ran
// through the chaos, which must reach the same last offsets): a judge that
// does not reach the end fails as a judge, never as a loss.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not short")
	}
	k := loadKnobs(t)
	kafkaDir, err := filepath.Abs("../kafka")
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range k.tvs {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			// Each version has its own broker, and the copies are throttled
			// (CHAOS_RATE): the two run side by side.
			t.Parallel()
			// The suite runs where the real-broker tests run (make test sets
			// KAFKA_BROKERS_TV0/2 and KAFKATEST_REQUIRE), or on demand with
			// CHAOS=1. It starts and bounces its own broker, never those.
			if os.Getenv("CHAOS") != "1" {
				if os.Getenv(kafkatest.EnvVar(tv)) == "" {
					t.Log("the chaos suite starts its own brokers; it runs where the real-broker tests run, or with CHAOS=1")
				}
				kafkatest.Brokers(t, tv)
			}
			bin := binary(t)
			// A per-process name: several developers run the suite on one
			// machine, and up.sh reuses a broker that already runs under a name.
			name := fmt.Sprintf("chaos-tv%d-%d", tv, os.Getpid())
			var b *broker
			for attempt := 1; ; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				b, err = upBroker(ctx, kafkaDir, name, tv)
				cancel()
				if err == nil {
					break
				}
				if attempt == 3 {
					t.Fatal(err)
				}
				// Seen: up.sh edited while it ran (bash reads a script as
				// it goes) fails with a syntax error. Another try is cheap.
				t.Logf("starting the broker failed, retrying: %v", err)
				time.Sleep(5 * time.Second)
			}
			t.Cleanup(func() {
				if err := b.down(); err != nil {
					t.Log(err)
				}
			})
			t.Logf("broker %s (transaction.version=%d) at %s, state %s", name, tv, b.addr, b.dir)
			for i, run := range k.runs {
				mode, variant, _ := strings.Cut(run, "/")
				t.Run(strings.ReplaceAll(run, "/", "_"), func(t *testing.T) {
					runChaos(t, k, b, bin, mode, variant, k.seed+uint64(tv)*1000+uint64(i))
				})
			}
		})
	}
}

// event is one chaos round.
type event string

const (
	evKill        event = "kill"
	evTerm        event = "sigterm"
	evBrokerHard  event = "broker-kill9"
	evBrokerClean event = "broker-clean"
	evZombie      event = "zombie"
)

// plan returns the rounds in a random order; broker bounces alternate kill -9
// and clean, the first being kill -9 (all clean without brokerKill9). The rounds that take long (broker
// bounces, the zombie, SIGTERMs) fall in the first two thirds: each round
// waits for a share of the records left before the tail, so the last rounds
// have little left, and a long round there would let the copy reach the
// tail's gate first (the rounds then still land, on a copy waiting for the
// tail, with nothing in flight); a transaction coordinator's kill -9 is the
// first of them. In the cluster variant each SIGKILL follows one of the
// cluster rounds (see below).
func (k knobs) plan(rng *rand.Rand) []event {
	var special []event
	for range k.sigterms {
		special = append(special, evTerm)
	}
	for range k.zombies {
		special = append(special, evZombie)
	}
	for range k.brokerRestarts {
		special = append(special, evBrokerHard) // alternated in time order below
	}
	special = append(special, k.cluster.events()...)
	rng.Shuffle(len(special), func(i, j int) { special[i], special[j] = special[j], special[i] })
	if i := slices.Index(special, evZombie); k.zombieFirst && i > 0 {
		special[0], special[i] = special[i], special[0]
	}
	// A transaction coordinator's kill -9 comes first of them: its failover
	// is measured by the slot's next commit, which needs a copy still
	// running (on a loaded machine the long rounds before it could let the
	// copy reach the tail's gate, where nothing commits).
	if i := slices.Index(special, evTxnCoordKill); i > 0 {
		special[0], special[i] = special[i], special[0]
	}
	total := len(special) + k.kills
	evs := make([]event, total)
	if len(k.cluster.events()) > 0 {
		// The cluster variant: its rounds take 15 s to 2 min each (a
		// node's restart, every replica back in sync), so SIGKILLs after
		// all of them would land on a copy waiting at the tail's gate.
		// Each SIGKILL follows one of them instead, at random.
		after := make([]int, len(special)) // SIGKILLs right after special[i]
		for range k.kills {
			after[rng.IntN(len(special))]++
		}
		evs = evs[:0]
		for i, ev := range special {
			evs = append(evs, ev)
			for range after[i] {
				evs = append(evs, evKill)
			}
		}
	}
	// Positions for the special rounds among the first two thirds (or
	// wherever they fit).
	if len(k.cluster.events()) == 0 {
		room := max(len(special), (2*total+2)/3)
		pos := rng.Perm(room)[:len(special)]
		slices.Sort(pos)
		for i, p := range pos {
			evs[p] = special[i]
		}
	}
	n := 0
	for i := range evs {
		switch evs[i] {
		case "":
			evs[i] = evKill
		case evBrokerHard:
			if n%2 == 1 || !k.brokerKill9 {
				evs[i] = evBrokerClean
			}
			n++
		}
	}
	return evs
}

type runCfg struct {
	mode, variant string
	brokers       string
	in, out       string
	outParts      int32
	group, state  string
	txnID         string
	// srcBrokers is where the input reads when it is not brokers (mirror
	// mode: the source cluster; brokers is then the target's).
	srcBrokers string
	// positions is the mirror's positions topic (on the target).
	positions   string
	processes   int
	rate        int
	maxInFlight int
	batch       int
	// deadLetters is the directory of the batching variant's dead-letter
	// output.
	deadLetters string
	// stops are the input's end offsets once its last records (the tail)
	// are written, after the rounds: the bounded processes read to them
	// (stop_offset: specific), so no copy can finish before its rounds ran.
	stops map[int32]int64
}

// unbounded: the processes read with group membership and no stop; the
// suite stops them once everything is copied.
func (c runCfg) unbounded() bool { return strings.HasSuffix(c.variant, "-unbounded") }

// batching: output batching and a record too large for the output in the
// input, routed to a dead-letter directory.
func (c runCfg) batching() bool { return strings.HasSuffix(c.variant, "-batching") }

// indent prefixes every line of s with pre.
func indent(s, pre string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pre + l
		}
	}
	return strings.Join(lines, "")
}

// oversized is the value of the batching variant's record too large for the
// output (max_message_bytes 65536 there).
var oversized = bytes.Repeat([]byte("X"), 100_000)

// arrow: both sides in Arrow mode (kafka_native format: arrow, one message
// per partition batch; kafka_eos input_format: arrow, one record per row).
func (c runCfg) arrow() bool { return strings.Contains(c.variant, "-arrow") }

// inBrokers is where the input reads.
func (c runCfg) inBrokers() string { return cmp.Or(c.srcBrokers, c.brokers) }

// config writes the connect-eos config of process slot i.
func (c runCfg) config(dir string, i int) (string, error) {
	topics := c.in
	if c.processes > 1 && !c.unbounded() {
		topics = fmt.Sprintf("'%s:%d'", c.in, i)
	}
	// CHAOS_LOG_LEVEL (default info): debug keeps the output's dedupe
	// decisions (positions taken, dropped, committed, owed) in the logs.
	level := cmp.Or(os.Getenv("CHAOS_LOG_LEVEL"), "info")
	var b strings.Builder
	fmt.Fprintf(&b, `http:
  enabled: false
logger:
  level: %[3]s
  format: logfmt
shutdown_timeout: 30s
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[2]s ]
`, c.inBrokers(), topics, level)
	if c.mode == "dedupe" {
		// A replayable ordered source: no consumer group, every start
		// reads each partition from its beginning; the output drops what
		// its committed positions cover.
		b.WriteString("    start_offset: earliest\n")
	} else {
		fmt.Fprintf(&b, "    consumer_group: %s\n    start_offset: committed\n    reset_offset: earliest\n", c.group)
	}
	if c.unbounded() {
		// The group balances the partitions between the processes; a
		// kill or a new process is a rebalance. A killed member's
		// partitions wait for its session to time out: 10s rather
		// than the default 45s.
		b.WriteString("    stop_offset: none\n    group_membership: true\n    session_timeout: 10s\n    heartbeat_interval: 1s\n")
	} else {
		// The processes stop at the input's final end offsets, which the
		// suite reaches only when it writes the tail after the rounds:
		// until then a process has records left to read and cannot end.
		var stops []string
		for p := int32(0); p < 2; p++ {
			if c.processes > 1 && p != int32(i) {
				continue // this process reads only partition i
			}
			stops = append(stops, fmt.Sprintf("%q: %d", fmt.Sprintf("%s:%d", c.in, p), c.stops[p]))
		}
		fmt.Fprintf(&b, "    stop_offset: specific\n    stop_offsets: { %s }\n", strings.Join(stops, ", "))
	}
	if c.batch > 0 {
		fmt.Fprintf(&b, "    max_batch_records: %d\n", c.batch)
	}
	if c.arrow() {
		b.WriteString("    format: arrow\n")
	}
	b.WriteString("pipeline:\n  threads: 1\n")
	if c.rate > 0 {
		b.WriteString("  processors:\n    - rate_limit:\n        resource: throttle\n")
	}
	out := &strings.Builder{}
	fmt.Fprintf(out, `    seed_brokers: [ %[1]s ]
    transactional_id: %[2]s-%[3]d
    state_cache: eos_state
    epoch:
      interval: 100ms
`, c.brokers, c.txnID, i)
	if c.mode != "mirror" {
		fmt.Fprintf(out, "    topic: %s\n", c.out)
	}
	ob := b
	b = strings.Builder{}
	switch {
	case c.mode == "mirror":
		// Each record keeps its partition, key, headers and timestamp;
		// the target is the source topic renamed. Batches in flight
		// together keep each partition's order, as in Kafka-to-Kafka
		// mode.
		fmt.Fprintf(&b, "    consumer_group: %s\n    max_in_flight: %s\n    mirror:\n      positions_topic: %s\n      topics: { %s: %s }\n",
			c.group, inFlight(c.mode, c.variant, c.maxInFlight), c.positions, c.in, c.out)
	default:
		c.outputFields(&b)
	}
	out.WriteString(b.String())
	b = ob
	if c.batching() {
		// The dead-letter route of config/examples/kafka_eos_dead_letter.yaml:
		// a message that cannot be written goes to a file named by its
		// source partition and offset; any other failure is rejected
		// (replayed).
		fmt.Fprintf(&b, `output:
  fallback:
    - kafka_eos:
%s    - switch:
        cases:
          - check: '@fallback_error.has_prefix("kafka_eos: message cannot be written")'
            output:
              file:
                path: '%s/${! metadata("kafka_partition") }-${! metadata("kafka_offset") }.msg'
                codec: all-bytes
          - output:
              reject: '${! @fallback_error }'
`, indent(out.String(), "    "), c.deadLetters)
	} else {
		b.WriteString("output:\n  kafka_eos:\n" + out.String())
	}
	fmt.Fprintf(&b, `cache_resources:
  - label: eos_state
    kafka_state:
      seed_brokers: [ %s ]
      topic: %s
`, c.brokers, c.state)
	switch {
	case c.rate > 0 && c.arrow():
		// rate_limit counts messages, and an Arrow message holds a batch
		// (max_batch_records, 1024 by default): one message per the time
		// that many records take at the rate.
		batch := cmp.Or(c.batch, 1024)
		every := time.Duration(batch*c.processes) * time.Second / time.Duration(c.rate)
		fmt.Fprintf(&b, "rate_limit_resources:\n  - label: throttle\n    local:\n      count: 1\n      interval: %s\n", every)
	case c.rate > 0:
		per := max(1, c.rate/c.processes/10)
		fmt.Fprintf(&b, "rate_limit_resources:\n  - label: throttle\n    local:\n      count: %d\n      interval: 100ms\n", per)
	}
	path := filepath.Join(dir, fmt.Sprintf("process-%d.yaml", i))
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// outputFields writes the kafka_eos fields of the modes other than mirror
// that depend on the variant and the mode.
func (c runCfg) outputFields(b *strings.Builder) {
	switch c.variant {
	case "2to3", "2to3-unbounded":
		b.WriteString("    key: '${! content() }'\n    partitioner: murmur2\n")
		if c.maxInFlight > 0 {
			fmt.Fprintf(b, "    max_in_flight: %d\n", c.maxInFlight)
		}
	case "1to1", "1to1-batching":
		// Each record keeps its partition; order per partition is checked.
		// Kafka-to-Kafka mode keeps it with batches in flight together
		// (each waits for its predecessor, epochs write a partition in
		// order); plain mode only with one in flight.
		b.WriteString("    partitioner: manual\n    partition: '${! metadata(\"kafka_partition\") }'\n")
		fmt.Fprintf(b, "    max_in_flight: %s\n", inFlight(c.mode, c.variant, c.maxInFlight))
		if c.batching() {
			// Output batching across input batches, and a record in the
			// input too large for max_message_bytes (runChaos writes it).
			b.WriteString("    max_message_bytes: 65536\n    batching:\n      count: 64\n      period: 20ms\n")
		}
	case "1to1-arrow":
		// Each row keeps its partition under the manual partitioner.
		// Source timestamps kept: the producer then runs without franz-go's
		// record delivery timeout (measured from the record's timestamp),
		// bounded by the epoch's deadline.
		b.WriteString("    input_format: arrow\n    arrow_timestamps: true\n    partitioner: manual\n    max_in_flight: 1\n")
	}
	if c.mode == "k2k" {
		fmt.Fprintf(b, "    consumer_group: %s\n", c.group)
	}
	if c.mode == "dedupe" {
		b.WriteString("    dedupe:\n      key: '${! metadata(\"kafka_partition\") }'\n      position: '${! metadata(\"kafka_offset\") }'\n")
	}
}

// lint reports whether the binary accepts a config (used to find out whether
// a mode's fields exist yet).
func lint(bin, path string) (bool, string) {
	out, err := exec.Command(bin, "lint", path).CombinedOutput()
	return err == nil, strings.TrimSpace(string(out))
}

type stats struct {
	kills, sigterms, brokerHard, brokerClean, zombies int
	unplanned                                         []string
	zombieExits                                       []int
	idleZombies                                       int
	zombieNudges                                      int     // zombie rounds where the other processes stopped to hand the zombie every partition
	killsAt                                           []int64 // the copy's progress when each SIGKILL landed
	cl                                                clusterStats
	srcBounces                                        int // mirror: the bounces of the source cluster
	downKills                                         int // mirror: SIGKILLs after which the process stayed down past its session
}

func runChaos(t *testing.T, k knobs, b *broker, bin, mode, variant string, seed uint64) {
	switch variant {
	case "2to3", "1to1", "2to3-unbounded", "1to1-arrow", "1to1-batching", "1to1-unbounded", "1to1-arrow-unbounded":
	default:
		t.Fatalf("unknown variant %q (2to3, 1to1, 2to3-unbounded, 1to1-arrow, 1to1-batching; mirror: 1to1-unbounded, 1to1-arrow-unbounded)", variant)
	}
	if variant == "1to1-batching" && mode != "k2k" {
		t.Fatalf("the batching variant runs in k2k mode, not %s", mode)
	}
	switch mode {
	case "plain", "k2k":
	case "mirror":
		if b.source == nil {
			t.Fatal("mirror mode runs in TestChaosMirror, with a source and a target cluster")
		}
		if variant != "1to1" && variant != "1to1-unbounded" && variant != "1to1-arrow-unbounded" {
			t.Fatalf("mirror mode keeps partitions: variants 1to1, 1to1-unbounded, 1to1-arrow-unbounded, not %q", variant)
		}
	case "dedupe":
		if variant != "2to3" && variant != "1to1" {
			t.Fatalf("dedupe mode runs the bounded variants (2to3, 1to1), not %q: without a consumer group the input replays from the start at every restart", variant)
		}
	default:
		t.Fatalf("unknown mode %q (plain, k2k, dedupe, mirror)", mode)
	}
	if strings.HasSuffix(variant, "-unbounded") {
		// Two members make every kill, SIGTERM and new process a
		// rebalance between them.
		if os.Getenv("CHAOS_PROCESSES") == "" {
			k.processes = 2
		}
		k.brokerKill9 = os.Getenv("CHAOS_UNBOUNDED_BROKER_KILL9") == "1"
		k.zombieFirst = true
	}
	// src is the cluster the input reads: the target's own except in
	// mirror mode.
	src := b
	if mode == "mirror" {
		src = b.source
		// The offsets that matter are the positions on the target, not
		// the group's on the source: kill -9 bounces of both clusters
		// unless CHAOS_MIRROR_BROKER_KILL9=0.
		k.brokerKill9 = os.Getenv("CHAOS_MIRROR_BROKER_KILL9") != "0"
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	// A failed run prints no summary line: the seed replays its plan.
	t.Logf("seed %d (the rounds' plan; CHAOS_SEED=%d replays it for the first run of the first version)", seed, seed)
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), k.timeout)
	defer cancel()

	logDir, err := os.MkdirTemp("", "chaos-"+mode+"-"+variant+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || k.keep {
			t.Logf("logs and configs kept in %s", logDir)
			return
		}
		os.RemoveAll(logDir)
	})

	outParts := int32(3)
	if strings.HasPrefix(variant, "1to1") {
		outParts = 2
	}
	uniq := fmt.Sprintf("chaos-%s-%s-%d", mode, variant, time.Now().UnixNano())
	c := runCfg{
		mode: mode, variant: variant, brokers: b.addr, positions: uniq + "-positions",
		in: "lint-in", out: "lint-out", outParts: outParts,
		group: uniq + "-group", state: uniq + "-state", txnID: uniq,
		processes: k.processes, rate: k.rate, maxInFlight: k.maxInFlight, batch: k.batch,
		stops:       map[int32]int64{0: 1, 1: 1}, // for lint; set below
		deadLetters: filepath.Join(logDir, "dead-letters"),
	}
	if mode == "mirror" {
		c.srcBrokers = src.addr
	}
	if err := os.MkdirAll(c.deadLetters, 0o755); err != nil {
		t.Fatal(err)
	}
	strict := mode == "k2k" && k.k2kStrict
	if strict || mode == "dedupe" {
		// Dedupe mode needs one batch in flight (its lint rule).
		c.maxInFlight = 1
	}
	if mode == "dedupe" && c.rate > 0 {
		// Every restart replays the input from its start through the
		// throttle (the replays are dropped by the output, a batch of
		// replays opens no epoch): three times the rate keeps the run
		// near the others' length.
		c.rate *= 3
	}
	// The binary must accept the run's config: a lint error is a failure
	// of the run, never a reason to skip it.
	lintConf, err := c.config(logDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ok, out := lint(bin, lintConf); !ok {
		t.Fatalf("connect-eos lint %s: %s", lintConf, out)
	}
	c.in, c.out = kafkatest.Topic(t, src.addr, 2), kafkatest.Topic(t, b.addr, outParts)

	// The input: the head, n-tail unique integers from Kafka's
	// VerifiableProducer, now; the tail, the last values, only after the
	// rounds ran (fillTail). The bounded processes stop at the end offsets
	// the tail completes, so every round lands on a copy still under way.
	nTail := tailSize(k.records)
	head := k.records - nTail
	fctx, fcancel := context.WithTimeout(ctx, 5*time.Minute)
	input, err := fill(fctx, src.addr, c.in, head)
	fcancel()
	if err != nil {
		t.Fatal(err)
	}
	split := tailSplit(nTail)
	if err := checkEnds(ctx, src.addr, c.in, input); err != nil {
		t.Fatal(err)
	}
	// The batching variant: one record too large for the output at the end
	// of partition 0's head, copied through the rounds like the rest.
	extra := map[int32]int{}
	if c.batching() {
		if err := writeOversized(ctx, src.addr, c.in, int64(len(input[0]))); err != nil {
			t.Fatal(err)
		}
		extra[0] = 1
	}
	c.stops = map[int32]int64{}
	for p := range int32(2) {
		c.stops[p] = int64(len(input[p]) + extra[p] + split[p])
	}
	t.Logf("input %s head filled: %d of %d records (partition 0: %d, partition 1: %d); the tail completes the ends %v", c.in, head, k.records, len(input[0]), len(input[1]), c.stops)
	confs := make([]string, k.processes)
	for i := range confs {
		if confs[i], err = c.config(logDir, i); err != nil {
			t.Fatal(err)
		}
	}

	if strict {
		// The starting offsets the output's Kafka-to-Kafka mode needed
		// before the input handed its starts over: without them a
		// partition's first epochs committed records without offsets (a
		// crash then copied them again).
		cadm := kadm.NewClient(kafkatest.Client(t, src.addr))
		var offs kadm.Offsets
		for p := range int32(2) {
			offs.AddOffset(c.in, p, 0, -1)
		}
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := cadm.CommitOffsets(cctx, c.group, offs)
		ccancel()
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("committing the starting offsets of %s: %v", c.group, err)
		}
	}
	prog, err := startProgress(b.addr, c.out, k.records)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.stop()
	// The judge that runs through the chaos: started before the first
	// process, it must end up with exactly what the judge started after sees.
	live, err := startJudge(b.addr, c.out, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer live.cancel()

	// The processes, one per slot; cur[i] is the one that runs slot i.
	cur := make([]*copier, k.processes)
	gens := make([]int, k.processes)
	finished := make([]bool, k.processes)
	var all []*copier
	start := func(i int) {
		cp, err := startCopier(bin, confs[i], filepath.Join(logDir, fmt.Sprintf("process-%d.%d.log", i, gens[i])), i, gens[i])
		if err != nil {
			t.Fatal(err)
		}
		gens[i]++
		cur[i] = cp
		all = append(all, cp)
	}
	defer func() {
		for _, cp := range all {
			if !cp.exited() {
				_ = cp.signal(syscall.SIGCONT)
				cp.kill()
			}
		}
	}()
	for i := range cur {
		start(i)
	}

	var st stats
	// supervise restarts processes that ended on their own with an error
	// (e.g. a commit left in doubt by a broker bounce stops the pipeline by
	// design) and marks the slots that finished (exit 0, not signalled).
	supervise := func() {
		for i, cp := range cur {
			if finished[i] || !cp.exited() || !cp.unsignalled() {
				continue
			}
			if code := cp.exitCode(); code == 0 && !c.unbounded() {
				finished[i] = true
				continue
			}
			why := fmt.Sprintf("process %d.%d exit %d: %s", cp.slot, cp.gen, cp.exitCode(),
				strings.Join(grepLines(cp.logPath, regexp.MustCompile(`level=(error|fatal)|connect-eos: `), 3), " | "))
			st.unplanned = append(st.unplanned, why)
			t.Logf("%s; restarting", why)
			if len(st.unplanned) > 50 {
				t.Fatalf("more than 50 unplanned exits; last: %s", why)
			}
			time.Sleep(500 * time.Millisecond)
			start(i)
		}
	}
	allFinished := func() bool {
		for _, f := range finished {
			if !f {
				return false
			}
		}
		return true
	}
	lastMove, lastDistinct := time.Now(), int64(-1)
	// waitFor waits until the output holds at least target distinct records
	// (read_committed), supervising the processes meanwhile.
	waitFor := func(target int64) bool {
		for {
			supervise()
			d := prog.distinct.Load()
			if d >= target {
				return true
			}
			if allFinished() {
				return false
			}
			if d != lastDistinct {
				lastMove, lastDistinct = time.Now(), d
			}
			if time.Since(lastMove) > 2*time.Minute {
				// Go prints every goroutine's stack on SIGQUIT: the
				// process logs then show where a stuck copier waits.
				for _, cp := range cur {
					if !cp.exited() {
						_ = cp.signal(syscall.SIGQUIT)
					}
				}
				time.Sleep(2 * time.Second)
				t.Logf("no progress: %s", stallReport(b, c))
				// The broker's state dir goes with the run: keep its
				// log (transaction marker errors show there).
				args := []string{"-r", filepath.Join(b.dir, "logs"), filepath.Join(logDir, "broker-logs")}
				if b.cluster != nil { // every node's, under logDir/<its path>
					nodes, _ := filepath.Glob(filepath.Join(b.dir, "n*", "logs"))
					args = append(append([]string{"-r", "--parents"}, nodes...), logDir)
				}
				if out, err := exec.Command("cp", args...).CombinedOutput(); err != nil {
					t.Logf("copying the broker's logs: %v: %s", err, out)
				}
				t.Fatalf("no progress for 2 minutes at %d of %d records (goroutine dumps of the live processes, SIGQUIT, in the logs in %s)", d, k.records, logDir)
			}
			if ctx.Err() != nil {
				t.Fatalf("run timed out (CHAOS_TIMEOUT %v) at %d of %d records", k.timeout, d, k.records)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	pick := func() int {
		var live []int
		for i, cp := range cur {
			if !finished[i] && !cp.exited() {
				live = append(live, i)
			}
		}
		if len(live) == 0 {
			return -1
		}
		return live[rng.IntN(len(live))]
	}

	n := int64(k.records)
	// Until the tail is written the copy can reach at most the head.
	gate := int64(head)
	plan := k.plan(rng)
	// livePick waits (supervising) until a process runs that a round can
	// signal: one may have ended on its own a moment ago.
	livePick := func() int {
		for deadline := time.Now().Add(2 * time.Minute); ; {
			supervise()
			if i := pick(); i >= 0 || time.Now().After(deadline) {
				return i
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var zombies []*copier
	// zombieMember is the zombie round of the unbounded runs, where the
	// processes share the partitions through group membership. A frozen
	// member keeps its partitions only for its session (10 s): past it
	// the group hands them to the others, and the old process, woken,
	// joins again as a new member that may get no partition with records
	// left; it then never writes again, never learns that it was fenced,
	// and the round did not happen. So the old process wakes as soon as
	// the new one is ready (its InitProducerID fenced the old producer),
	// still the owner of its partitions, with what it fetched before it
	// froze in flight. If it has not stopped on the fence within 20 s (5 s
	// after it logged its partitions lost: its session ended first), or
	// it owned nothing with records left, every other process stops
	// (SIGTERM, leaving the group) so that the group hands every
	// partition to the old one, which must then be refused; if even that
	// finds it idle (the copy at the gate), it is
	// stopped and the round is tried again on a process picked afresh,
	// while the copy is short of the gate (3 tries). The verdict
	// (missedChaos) counts the zombies that exited 3, never the tries.
	zombieMember := func(round, i int) {
		for try := 1; ; try++ {
			// The new process starts first and the old one freezes once
			// the new one runs: frozen only while the new one's output
			// connects (a start under load can take longer than the
			// session).
			old := cur[i]
			start(i)
			cur[i].waitRunning(60 * time.Second)
			_ = old.signal(syscall.SIGSTOP)
			for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && !cur[i].exited(); time.Sleep(50 * time.Millisecond) {
				if len(grepLines(cur[i].logPath, slotsReadyLine, 1)) > 0 {
					break
				}
			}
			woke := old.logSize()
			_ = old.signal(syscall.SIGCONT)
			st.zombies++
			t.Logf("round %d: zombie %d.%d woken once %d.%d was ready (try %d)", round+1, old.slot, old.gen, i, cur[i].gen, try)
			// Fenced: it stops. Its session ended while it was frozen
			// (it lost its partitions): it gets 5 s more to be handed
			// one with records left, 20 s in all.
			fenced := false
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if old.exited() || old.loggedSince(0, fatalLine) {
					fenced = true
					break
				}
				if time.Now().After(deadline) {
					break
				}
				if lost := time.Now().Add(5 * time.Second); lost.Before(deadline) && old.loggedSince(woke, lostLine) {
					deadline = lost
				}
			}
			if fenced {
				zombies = append(zombies, old) // its exit code is checked at the end
				return
			}
			st.zombieNudges++
			// Every other member leaves the group (SIGTERM): the zombie,
			// alone, is handed every partition, and any records left
			// before the gate make it write.
			var others []int
			for j, cp := range cur {
				if !cp.exited() {
					others = append(others, j)
				}
			}
			t.Logf("round %d: zombie %d.%d has not written since it woke: the other members (slots %v) stop (SIGTERM) so that the group hands it every partition", round+1, old.slot, old.gen, others)
			for _, j := range others {
				cur[j].waitRunning(60 * time.Second)
				_ = cur[j].signal(syscall.SIGTERM)
			}
			for _, j := range others {
				code, err := cur[j].wait(90 * time.Second)
				if err != nil {
					t.Fatalf("zombie round: process %d.%d did not stop within 90s of a SIGTERM (logs in %s)", j, cur[j].gen, logDir)
				}
				if code != 0 {
					t.Errorf("zombie round: process %d.%d exited %d after a SIGTERM, want 0 (a graceful stop)", j, cur[j].gen, code)
				}
			}
			fenced = old.stopping(60 * time.Second)
			for _, j := range others {
				start(j)
			}
			if fenced {
				zombies = append(zombies, old)
				return
			}
			if try == 3 || prog.distinct.Load() >= gate {
				// Left to the end: the tail may still give it records.
				t.Logf("round %d: zombie %d.%d still idle after %d tries (copy at %d/%d records)", round+1, old.slot, old.gen, try, prog.distinct.Load(), n)
				zombies = append(zombies, old)
				return
			}
			t.Logf("round %d: zombie %d.%d still idle: stopping it, another try", round+1, old.slot, old.gen)
			_ = old.signal(syscall.SIGTERM)
			code, err := old.wait(90 * time.Second)
			if err != nil {
				t.Fatalf("zombie: process %d.%d did not stop within 90s of a SIGTERM", old.slot, old.gen)
			}
			st.zombieExits = append(st.zombieExits, code)
			st.idleZombies++
			if i = livePick(); i < 0 {
				t.Fatalf("round %d (zombie, try %d): no live process for 2 minutes", round+1, try+1)
			}
		}
	}
	for round, ev := range plan {
		base := prog.distinct.Load()
		// Each round waits for a share of what is left before the gate;
		// once the copy reached the gate, the rounds follow each other
		// (the processes still have the tail to copy).
		target := min(gate, base+int64(float64(max(0, gate-base))*(k.step+rng.Float64()*k.step/4))+1)
		if !waitFor(target) {
			t.Fatalf("round %d: every process finished before the tail was written (at %d of %d records): the copy ended early", round+1, prog.distinct.Load(), n)
		}
		at := prog.distinct.Load()
		i := livePick()
		if i < 0 && (ev == evKill || ev == evTerm || ev == evZombie) {
			t.Fatalf("round %d (%s): no live process for 2 minutes", round+1, ev)
		}
		t.Logf("round %d: %s at %d/%d records (%.0f%%)", round+1, ev, at, n, 100*float64(at)/float64(n))
		switch ev {
		case evKill:
			// A kill counts when it lands on a running copier; one that
			// ended on its own a moment before (an unplanned exit) is
			// restarted and the kill tried again.
			for attempt := 1; ; attempt++ {
				// A random moment inside the round, not just the threshold.
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				_ = cur[i].signal(syscall.SIGKILL)
				code, err := cur[i].wait(30 * time.Second)
				if err != nil {
					t.Fatalf("SIGKILL: process %d did not exit", i)
				}
				if cur[i].killedBySignal() {
					st.kills++
					st.killsAt = append(st.killsAt, prog.distinct.Load())
					if mode == "mirror" && c.unbounded() && st.kills%2 == 1 {
						// Down past its session timeout (10s): the
						// other member takes its partitions over, and
						// must fence it (it released nothing).
						st.downKills++
						time.Sleep(15 * time.Second)
					}
					start(i)
					break
				}
				t.Logf("round %d: process %d.%d exited %d before the SIGKILL landed", round+1, i, cur[i].gen, code)
				st.unplanned = append(st.unplanned, fmt.Sprintf("process %d.%d exit %d just before a SIGKILL", i, cur[i].gen, code))
				if code == 0 && !c.unbounded() {
					finished[i] = true // the copy ended early: missedChaos says so
					break
				}
				start(i)
				if attempt == 3 {
					break
				}
				time.Sleep(2 * time.Second)
			}
		case evTerm:
			cur[i].waitRunning(60 * time.Second)
			_ = cur[i].signal(syscall.SIGTERM)
			code, err := cur[i].wait(90 * time.Second)
			if err != nil {
				t.Fatalf("SIGTERM: process %d did not stop within 90s (logs in %s)", i, logDir)
			}
			if code != 0 {
				t.Errorf("SIGTERM: process %d.%d exited %d, want 0 (a graceful stop)", i, cur[i].gen, code)
			}
			st.sigterms++
			start(i)
		case evBrokerHard, evBrokerClean:
			// Mirror mode bounces both clusters: the target, the source,
			// the source, the target, ... (with kill -9 and clean
			// alternating in time, each cluster gets both).
			bb, which, topics := b, "broker", []string{c.in, c.out}
			if mode == "mirror" {
				bb, which, topics = b, "target", []string{c.out}
				if n := st.brokerHard + st.brokerClean; n%4 == 1 || n%4 == 2 {
					bb, which, topics = src, "source", []string{c.in}
					st.srcBounces++
				}
			}
			took, err := bb.bounce(ctx, ev == evBrokerHard, time.Duration(rng.IntN(2000))*time.Millisecond, topics...)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("round %d: %s back after %v", round+1, which, took.Round(time.Millisecond))
			if ev == evBrokerHard {
				st.brokerHard++
			} else {
				st.brokerClean++
			}
		case evTxnCoordKill, evLeaderKill, evGroupCoordKill, evRolling:
			if b.cluster == nil {
				t.Fatalf("round %d: %s needs the cluster variant", round+1, ev)
			}
			started := time.Now()
			if err := b.cluster.round(ctx, ev, c, i, rng, &st.cl); err != nil {
				t.Fatalf("round %d: %v", round+1, err)
			}
			t.Logf("round %d: %s done in %v (%s)", round+1, ev, time.Since(started).Round(time.Millisecond), st.cl.targets[len(st.cl.targets)-1])
		case evZombie:
			// The old process freezes (SIGSTOP) as if partitioned away; a
			// new one with the same transactional_id takes over (its
			// recovery and InitProducerID fence the old one); once it made
			// progress (or the copy reached the gate), the old one wakes
			// up. It must stop with an error (exit 3) and write nothing
			// visible (the judges check); the tail, written after the
			// rounds, gives it records to try to write. In the unbounded
			// runs it wakes sooner, while still a member of the group
			// (zombieMember).
			if c.unbounded() {
				zombieMember(round, i)
				continue
			}
			old := cur[i]
			_ = old.signal(syscall.SIGSTOP)
			start(i)
			goal := min(gate, at+max(1, int64(float64(n-at)*k.step/2)))
			deadline := time.Now().Add(60 * time.Second)
			for prog.distinct.Load() < goal && time.Now().Before(deadline) && !cur[i].exited() {
				time.Sleep(20 * time.Millisecond)
			}
			_ = old.signal(syscall.SIGCONT)
			// Its exit is checked at the end: a fenced process drains for
			// up to shutdown_timeout, and the rounds go on meanwhile.
			zombies = append(zombies, old)
			st.zombies++
		}
	}
	// The rounds ran: the tail lets the copy end.
	at := prog.distinct.Load()
	t.Logf("the %d rounds ran (copy at %d/%d records); writing the input's last %d records", len(plan), at, n, nTail)
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	tail, err := fillTail(tctx, src.addr, c.in, head, split, input, extra)
	tcancel()
	if err != nil {
		t.Fatal(err)
	}
	addTail(input, tail)
	// The copy may have waited at the gate through the last rounds: the
	// no-progress watch starts again from the tail.
	lastMove = time.Now()
	// The last runs finish the copy. Unbounded: once every record reached
	// the output and the group's lag is 0, every process gets a SIGTERM
	// and must stop cleanly.
	if c.unbounded() {
		ladm := kadm.NewClient(kafkatest.Client(t, src.addr))
		waitFor(n)
		for {
			supervise()
			lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
			lag, err := groupLag(lctx, ladm, c.group, c.in)
			lcancel()
			done := err == nil && len(lag) == 2
			for _, l := range lag {
				done = done && l == 0
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("unbounded: the group's lag is still %v (%v) at the run's timeout", lag, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		for i, cp := range cur {
			_ = cp.signal(syscall.SIGTERM)
			code, err := cp.wait(90 * time.Second)
			if err != nil {
				t.Fatalf("unbounded: process %d.%d did not stop within 90s of a SIGTERM", i, cp.gen)
			}
			if code != 0 {
				t.Errorf("unbounded: process %d.%d exited %d after the final SIGTERM, want 0", i, cp.gen, code)
			}
			finished[i] = true
		}
	}
	for !allFinished() {
		waitFor(n + 1) // returns once every slot finished
	}
	copied := time.Since(started)
	for _, z := range zombies {
		if c.unbounded() && !z.exited() {
			// With group membership the woken process rejoins the group
			// and learns of the fence only when it writes again: if the
			// group gave it no partition with records left, it idles.
			if _, err := z.wait(10 * time.Second); err != nil {
				t.Logf("zombie: process %d.%d never wrote again (no partition with records left for it), still a group member: stopping it", z.slot, z.gen)
				_ = z.signal(syscall.SIGTERM)
				code, err := z.wait(90 * time.Second)
				if err != nil {
					t.Fatalf("zombie: process %d.%d did not stop within 90s of a SIGTERM", z.slot, z.gen)
				}
				st.zombieExits = append(st.zombieExits, code)
				st.idleZombies++
				continue
			}
		}
		code, err := z.wait(90 * time.Second)
		if err != nil {
			t.Fatalf("zombie: the old process %d.%d still runs 90s after it woke up (logs in %s)", z.slot, z.gen, logDir)
		}
		st.zombieExits = append(st.zombieExits, code)
		if code != 3 {
			t.Errorf("zombie: the fenced process %d.%d exited %d, want 3 (stopped by a fatal error); log: %s", z.slot, z.gen, code,
				strings.Join(grepLines(z.logPath, regexp.MustCompile(`level=(error|warning)|connect-eos: `), 5), " | "))
		}
	}

	// The final judge, after the chaos. It gives a verdict only on an
	// output read to its end: first every transaction must have ended (the
	// last stable offsets at the high watermarks; an open one would hide
	// records from any read_committed reader), then a position reader reads
	// every partition to those ends (kafkatest.ReadCommitted). A judge that
	// cannot get there fails as a judge, never as a loss.
	jctx, jcancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer jcancel()
	jcl := kafkatest.Client(t, b.addr)
	ends, err := settledEnds(jctx, kadm.NewClient(jcl), c.out, 2*time.Minute)
	if err != nil {
		t.Fatalf("final judge: the output never settled, so no reader can read it to its end: %v; %s", err, stallReport(b, c))
	}
	byPart, err := kafkatest.ReadCommittedTo(jctx, jcl, c.out, ends)
	if err != nil {
		t.Fatalf("final judge: %v", err)
	}
	outRecs := map[int32][]outRecord{}
	total := 0
	for p, rs := range byPart {
		for _, r := range rs {
			outRecs[p] = append(outRecs[p], outRecord{offset: r.Offset, key: r.Key, value: r.Value})
		}
		total += len(rs)
	}

	// Verdicts.
	v := judgeOutput(input, outRecs, mode, variant, outParts)

	// Kafka's ConsoleConsumer that ran through the chaos (started before
	// the first process) is the second, independent judge (the Java
	// client): it must reach the same last offsets, and then hold the same
	// (offset, key, value) records; one that does not get there fails as a
	// judge.
	lastData := map[int32]int64{}
	for p, rs := range outRecs {
		if len(rs) > 0 {
			lastData[p] = rs[len(rs)-1].offset
		}
	}
	reached := ""
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if reached = live.reached(lastData); reached == "" || time.Now().After(deadline) {
			break
		}
	}
	liveRecs, liveErr := live.stop()

	decisions := map[string]int{}
	for _, cp := range all {
		if err := recoveryDecisions(cp.logPath, decisions); err != nil {
			t.Error(err)
		}
	}
	var dec []string
	for a, c := range decisions {
		dec = append(dec, fmt.Sprintf("%s:%d", a, c))
	}
	slices.Sort(dec)
	summary := fmt.Sprintf("chaos: mode=%s variant=%s tv=%d processes=%d records_in=%d records_out=%d duplicates=%d missing=%d extra=%d wrong_key=%d wrong_partition=%d "+
		"kills=%d sigterms=%d broker_restarts=%d (kill9=%d clean=%d) zombies=%d zombie_exit=%v idle_zombies=%d zombie_nudges=%d unplanned_exits=%d in_doubt_resolved={%s} "+
		"rate=%d max_in_flight=%s batch=%d start_offsets=%v seed=%d copy_s=%.0f",
		mode, variant, b.tv, k.processes, n, total, v.dups, v.missing, v.extra, v.wrongKey, v.wrongPart,
		st.kills, st.sigterms, st.brokerHard+st.brokerClean, st.brokerHard, st.brokerClean, st.zombies, st.zombieExits, st.idleZombies, st.zombieNudges,
		len(st.unplanned), strings.Join(dec, " "), c.rate, inFlight(mode, variant, c.maxInFlight), cmp.Or(k.batch, 1024), strict, seed, copied.Seconds())
	if mode == "mirror" {
		var logs []string
		for _, cp := range all {
			logs = append(logs, cp.logPath)
		}
		// Fences: a member took over partitions another had not
		// released (it died, or missed its revoke); releases at start:
		// a restarted process gave up what its previous run held.
		fences := countLines(logs, regexp.MustCompile(`kafka_eos: mirror: writer .* holds partitions`))
		restarts := countLines(logs, regexp.MustCompile(`left claimed by the previous run`))
		summary += fmt.Sprintf(" source_restarts=%d target_restarts=%d kills_down_past_session=%d writers_fenced=%d released_at_start=%d",
			st.srcBounces, st.brokerHard+st.brokerClean-st.srcBounces, st.downKills, fences, restarts)
	}
	if b.cluster != nil {
		var logs []string
		for _, cp := range all {
			logs = append(logs, cp.logPath)
		}
		found, closed := processLogCounts(logs)
		summary += st.cl.summary() + fmt.Sprintf(" hanging_found=%d hanging_closed=%d", found, closed)
		k.keep = k.keep || found > 0 // the logs say what hung and why
	}
	fmt.Println(summary)
	t.Log(summary)
	if f := os.Getenv("CHAOS_SUMMARY"); f != "" {
		if fh, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintln(fh, summary)
			fh.Close()
		}
	}
	for _, u := range st.unplanned {
		t.Logf("unplanned exit: %s", u)
	}
	t.Logf("SIGKILLs landed at %v of %d records", st.killsAt, n)

	// Chaos that did not happen fails the run: every planned round must
	// have landed (a SIGKILL on a running copier, each bounce, each zombie
	// fenced).
	for _, m := range missedChaos(plan, st) {
		t.Errorf("CHAOS THAT DID NOT HAPPEN: %s (seed %d)", m, seed)
	}

	for _, f := range v.failures {
		t.Error(f)
	}
	if c.batching() {
		// The record too large for the output is never in it (extra
		// above) and was reported: the dead-letter output holds it,
		// named by its offset, at least once (a kill after the dead
		// letter was written and before its batch's offsets committed
		// writes it again).
		want := fmt.Sprintf("0-%d.msg", c.stops[0]-int64(split[0])-1)
		if b, err := os.ReadFile(filepath.Join(c.deadLetters, want)); err != nil || !bytes.Equal(b, oversized) {
			names, _ := filepath.Glob(filepath.Join(c.deadLetters, "*"))
			t.Errorf("REPORT: the record too large for the output is not in the dead-letter output as %s (%v); it holds %d files", want, err, len(names))
		}
	}
	if v.missing > 0 {
		writeMissing(filepath.Join(logDir, "missing.txt"), v.seen, input)
		t.Logf("every missing record in %s", filepath.Join(logDir, "missing.txt"))
	}
	if v.dups > 0 {
		writeDuplicates(filepath.Join(logDir, "duplicates.txt"), outRecs, v.seen, input)
		if mode == "plain" {
			t.Logf("plain mode (at-least-once across a crash): %d duplicates, e.g. values %v", v.dups, v.dupEx)
		}
		t.Logf("every copy of every duplicate in %s", filepath.Join(logDir, "duplicates.txt"))
	}
	// The judge that ran through the chaos saw exactly the same thing.
	if liveErr != nil {
		t.Errorf("live judge: %v", liveErr)
	}
	if reached != "" {
		t.Errorf("live judge (the ConsoleConsumer that ran through the chaos) did not reach the end: %s", reached)
	}
	// A consumer may read a range again after a broker bounce (its own
	// offsets are at-least-once), so the comparison is per offset: the same
	// log read under read_committed gives the same (offset, key, value),
	// whenever it is read; an offset only one judge saw is a record that was
	// visible and then was not (or the reverse).
	for p := range outParts {
		lv, err := byOffset(liveRecs[p])
		if err != nil {
			t.Errorf("partition %d: the judge that ran through the chaos: %v", p, err)
			continue
		}
		if d := sameRecords(outRecs[p], lv); d != "" {
			t.Errorf("partition %d: the judge that ran through the chaos and the final judge differ: %s", p, d)
		}
	}

	// The group's lag is 0 (mirror: the group on the source, committed
	// after the fact, and the positions on the target) and no transaction
	// is left open.
	adm := kadm.NewClient(kafkatest.Client(t, b.addr))
	sadm := kadm.NewClient(kafkatest.Client(t, src.addr))
	actx, acancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer acancel()
	// Retried: a broker bounced a little earlier can still answer
	// LEADER_NOT_AVAILABLE for a moment.
	var lag map[int32]int64
	for range 60 {
		if mode == "dedupe" {
			break // no consumer group: the positions are the output's
		}
		if lag, err = groupLag(actx, sadm, c.group, c.in); err == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil && mode != "dedupe" {
		t.Errorf("group lag: %v", err)
	}
	for p, l := range lag {
		if l != 0 {
			t.Errorf("group %s: lag %d on %s[%d] after the copy finished", c.group, l, c.in, p)
		}
	}
	if mode == "mirror" {
		if err := checkPositions(actx, b.addr, c.positions, c.in, input); err != nil {
			t.Error(err)
		}
	}
	var open []string
	for range 60 {
		if open, err = openTransactions(actx, adm); err == nil && len(open) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("ListTransactions: %v", err)
	} else if len(open) > 0 {
		t.Errorf("transactions left open: %v", open)
	}
	hanging, err := hangingTransactions(actx, b.addr)
	if err != nil {
		t.Errorf("find-hanging: %v", err)
	} else if len(hanging) > 0 {
		t.Errorf("hanging transactions: %v", hanging)
	}
	if b.cluster != nil {
		// find-hanging lists only transactions open longer than the
		// maximum transaction timeout (15 minutes): with every process
		// stopped, nothing may be open in the output or the offsets.
		octx, ocancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ocancel()
		if open, err := openAtEnd(octx, adm, 2*time.Minute, c.out, "__consumer_offsets"); err != nil {
			t.Errorf("DescribeProducers at the end: %v", err)
		} else if len(open) > 0 {
			t.Errorf("transactions still open at the end (every process stopped): %v", open)
		}
	}
}

// byOffset sorts records by offset and drops repeated reads of an offset,
// failing if one offset was read with two keys or values.
func byOffset(rs []kafkatest.ConsoleRecord) ([]kafkatest.ConsoleRecord, error) {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b kafkatest.ConsoleRecord) int { return cmp.Compare(a.Offset, b.Offset) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Offset == r.Offset {
			if out[n-1] != r {
				return nil, fmt.Errorf("offset %d read as %+v and as %+v", r.Offset, out[n-1], r)
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// settledEnds waits up to wait for every transaction on topic to end (each
// partition's last stable offset at its high watermark) and returns those
// ends; an error says which partition is still held back.
func settledEnds(ctx context.Context, adm *kadm.Client, topic string, wait time.Duration) (map[int32]int64, error) {
	var why string
	for deadline := time.Now().Add(wait); ; {
		lsos, lerr := adm.ListCommittedOffsets(ctx, topic)
		hwms, herr := adm.ListEndOffsets(ctx, topic)
		if err := cmp.Or(lerr, herr); err != nil {
			why = err.Error()
		} else if err := cmp.Or(lsos.Error(), hwms.Error()); err != nil {
			why = err.Error()
		} else {
			ends := map[int32]int64{}
			var held []string
			hwms.Each(func(h kadm.ListedOffset) {
				l, _ := lsos.Lookup(topic, h.Partition)
				ends[h.Partition] = l.Offset
				if l.Offset != h.Offset {
					held = append(held, fmt.Sprintf("partition %d: last stable offset %d, high watermark %d", h.Partition, l.Offset, h.Offset))
				}
			})
			if len(held) == 0 && len(ends) > 0 {
				return ends, nil
			}
			slices.Sort(held)
			why = strings.Join(held, "; ")
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("after %v: %s", wait, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// firstDiff describes where two sequences first differ.
func firstDiff(want, got []int) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			lo := max(0, i-2)
			return fmt.Sprintf("at index %d: want %v..., got %v...", i, want[lo:min(len(want), i+5)], got[lo:min(len(got), i+5)])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(want), len(got))
}

// inFlight names the output's max_in_flight of a run (and for the summary):
// the knob, or 1 where order needs it (plain mode's 1to1, Arrow) or the mode
// does (dedupe's lint rule).
func inFlight(mode, variant string, knob int) string {
	switch {
	case mode == "dedupe", variant == "1to1-arrow", mode == "plain" && strings.HasPrefix(variant, "1to1"):
		return "1"
	case knob > 0:
		return strconv.Itoa(knob)
	}
	return "64"
}

// writeDuplicates writes, for every value read more than once, its input
// partition and offset and each output partition and offset holding it.
func writeDuplicates(path string, out map[int32][]outRecord, seen []int, input map[int32][]int) {
	type at struct {
		p int32
		o int64
	}
	inAt := map[int]at{}
	for p, vs := range input {
		for o, v := range vs {
			if seen[v] > 1 {
				inAt[v] = at{p, int64(o)}
			}
		}
	}
	copies := map[int][]at{}
	for p, rs := range out {
		for _, r := range rs {
			v, err := strconv.Atoi(string(r.value))
			if err == nil && v >= 0 && v < len(seen) && seen[v] > 1 {
				copies[v] = append(copies[v], at{p, r.offset})
			}
		}
	}
	vals := make([]int, 0, len(copies))
	for v := range copies {
		vals = append(vals, v)
	}
	slices.Sort(vals)
	var b strings.Builder
	b.WriteString("value\tinput partition/offset\toutput partition/offset of each copy\n")
	for _, v := range vals {
		fmt.Fprintf(&b, "%d\t%d/%d\t", v, inAt[v].p, inAt[v].o)
		for i, c := range copies[v] {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%d/%d", c.p, c.o)
		}
		b.WriteString("\n")
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeMissing writes, for every input value missing from the output, its
// input partition and offset (the dedupe position of the message).
func writeMissing(path string, seen []int, input map[int32][]int) {
	var b strings.Builder
	b.WriteString("value\tinput partition/offset\n")
	for p := int32(0); p < int32(len(input)); p++ {
		for o, v := range input[p] {
			if v >= 0 && v < len(seen) && seen[v] == 0 {
				fmt.Fprintf(&b, "%d\t%d/%d\n", v, p, o)
			}
		}
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// stallReport says what the broker shows when a run stops progressing: the
// group's lag on the input (are the copiers done?), the output partitions'
// last stable offset against their high watermark (does an open transaction
// hold read_committed readers back?), and the open and hanging transactions.
func stallReport(b *broker, c runCfg) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.addr, ",")...))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var parts []string
	lagAdm := adm
	if c.srcBrokers != "" {
		scl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.srcBrokers, ",")...))
		if err != nil {
			return err.Error()
		}
		defer scl.Close()
		lagAdm = kadm.NewClient(scl)
	}
	lag, err := groupLag(ctx, lagAdm, c.group, c.in)
	parts = append(parts, fmt.Sprintf("input lag %v (%v)", lag, err))
	hwm, herr := adm.ListEndOffsets(ctx, c.out)
	lso, lerr := adm.ListCommittedOffsets(ctx, c.out)
	if herr == nil && lerr == nil {
		var ends []string
		hwm.Each(func(o kadm.ListedOffset) {
			l, _ := lso.Lookup(o.Topic, o.Partition)
			ends = append(ends, fmt.Sprintf("%d: lso %d hwm %d", o.Partition, l.Offset, o.Offset))
		})
		sort.Strings(ends)
		parts = append(parts, "output "+strings.Join(ends, ", "))
	} else {
		parts = append(parts, fmt.Sprintf("output offsets: %v %v", herr, lerr))
	}
	open, err := openTransactions(ctx, adm)
	parts = append(parts, fmt.Sprintf("open transactions %v (%v)", open, err))
	hanging, err := hangingTransactions(ctx, b.addr)
	parts = append(parts, fmt.Sprintf("hanging %v (%v)", hanging, err))
	// find-hanging only reports transactions open longer than the
	// maximum transaction timeout (15 minutes by default): list every
	// producer with a transaction open in the output and in the offsets
	// topic (a pending transactional offset commit), with what the
	// coordinator says of its transactional id.
	parts = append(parts, "open in the logs: "+openInLogs(ctx, adm, c.out))
	return strings.Join(parts, "; ")
}

// openInLogs lists the producers with a transaction open in the partitions of
// topic and of __consumer_offsets (DescribeProducers), and the coordinator's
// state of their transactional ids.
func openInLogs(ctx context.Context, adm *kadm.Client, topic string) string {
	ds, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: nil, "__consumer_offsets": nil})
	if err != nil {
		return err.Error()
	}
	var rows []string
	pids := map[int64]bool{}
	ds.EachProducer(func(p kadm.DescribedProducer) {
		if p.CurrentTxnStartOffset < 0 {
			return
		}
		pids[p.ProducerID] = true
		rows = append(rows, fmt.Sprintf("%s/%d from %d: pid %d epoch %d coordinator epoch %d last write %s",
			p.Topic, p.Partition, p.CurrentTxnStartOffset, p.ProducerID, p.ProducerEpoch, p.CoordinatorEpoch,
			time.UnixMilli(p.LastTimestamp).UTC().Format("15:04:05.000")))
	})
	sort.Strings(rows)
	if len(pids) == 0 {
		return "none"
	}
	if ls, err := adm.ListTransactions(ctx, nil, nil); err != nil {
		rows = append(rows, "list transactions: "+err.Error())
	} else {
		var ids []string
		for _, l := range ls.Sorted() {
			if pids[l.ProducerID] {
				ids = append(ids, l.TxnID)
				delete(pids, l.ProducerID)
			}
		}
		for pid := range pids {
			rows = append(rows, fmt.Sprintf("coordinator: no transactional id with pid %d", pid))
		}
		if len(ids) == 0 {
			// Nothing to describe (no ids would describe them all).
		} else if dts, err := adm.DescribeTransactions(ctx, ids...); err != nil {
			rows = append(rows, "describe transactions: "+err.Error())
		} else {
			for _, d := range dts.Sorted() {
				rows = append(rows, fmt.Sprintf("coordinator: %s %s pid %d epoch %d timeout %dms started %s partitions %v",
					d.TxnID, d.State, d.ProducerID, d.ProducerEpoch, d.TimeoutMillis,
					time.UnixMilli(d.StartTimestamp).UTC().Format("15:04:05.000"), d.Topics))
			}
		}
	}
	return strings.Join(rows, " | ")
}
