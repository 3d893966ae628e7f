package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Mode is the pipeline a run drives.
type Mode string

// The modes: plain and dedupe run kafka_eos behind the replayable sim_source
// input; the others copy a Kafka topic with kafka_native.
const (
	ModePlain   Mode = "plain"       // sim_source -> kafka_eos, no consumer group: at-least-once
	ModeDedupe  Mode = "dedupe"      // sim_source -> kafka_eos with dedupe: exactly-once
	ModeK2K     Mode = "k2k"         // kafka_native -> kafka_eos, one consumer group, bounded read
	ModeMembers Mode = "k2k-members" // as k2k with group_membership and two members, unbounded
	ModeArrow   Mode = "arrow"       // as k2k with format: arrow
	// ModePlainKafka: kafka_native with a consumer group that it commits
	// itself -> kafka_eos without one: at-least-once.
	ModePlainKafka Mode = "plain-kafka"
	// ModePlainKafkaMembers: as plain-kafka with group_membership and two
	// members, unbounded.
	ModePlainKafkaMembers Mode = "plain-kafka-members"
)

// Kafka-to-Kafka reports whether the mode copies a Kafka topic with the
// group's offsets committed in the output's transactions.
func (m Mode) k2k() bool { return m == ModeK2K || m == ModeMembers || m == ModeArrow }

// kafkaInput reports whether the mode reads a Kafka topic with kafka_native
// and a consumer group.
func (m Mode) kafkaInput() bool { return m.k2k() || m == ModePlainKafka || m == ModePlainKafkaMembers }

// members reports whether the mode runs two group members (group_membership,
// unbounded read).
func (m Mode) members() bool { return m == ModeMembers || m == ModePlainKafkaMembers }

// endToEnd reports whether the mode promises every input record exactly once.
func (m Mode) endToEnd() bool { return m.k2k() || m == ModeDedupe }

// FaultAction is what a request fault does to the request it hits.
type FaultAction string

const (
	// ActError answers the request with an error code; the broker does
	// not apply it (kfake.Fault).
	ActError FaultAction = "error"
	// ActDelay holds the request before the broker handles it.
	ActDelay FaultAction = "delay"
	// ActDropAfter lets the broker apply the request, then closes the
	// connection instead of answering: the client never learns the
	// outcome.
	ActDropAfter FaultAction = "drop-after-apply"
	// ActClose closes the connection before the broker sees the request.
	ActClose FaultAction = "close"
)

// ReqFault is one request-level fault: from the At-th request of kind Key
// after the pipeline started (counted over every client of the run), Count
// requests are hit (-1: every one until the process that got the first one
// exits; only fatal codes).
type ReqFault struct {
	Key    kmsg.Key
	At     int
	Count  int
	Action FaultAction
	Code   int16         // ActError
	Fatal  bool          // ActError with a code no retry fixes: the pipeline must stop (exit 3) naming it
	Delay  time.Duration // ActDelay
}

func (f ReqFault) String() string {
	s := fmt.Sprintf("%s#%d", f.Key.Name(), f.At)
	if f.Count != 1 {
		s += fmt.Sprintf("x%d", f.Count)
	}
	switch f.Action {
	case ActError:
		s += ":" + codeName(f.Code)
	case ActDelay:
		s += ":delay" + f.Delay.String()
	default:
		s += ":" + string(f.Action)
	}
	return s
}

// CacheFault makes state cache operations fail or stall: from the At-th
// operation of kind Op (get or set; add and delete count as set), Count
// operations in a row.
type CacheFault struct {
	Op    string
	At    int
	Count int
	Slow  time.Duration // 0: the operation fails
}

func (f CacheFault) String() string {
	if f.Slow > 0 {
		return fmt.Sprintf("cache-%s#%dx%d:slow%s", f.Op, f.At, f.Count, f.Slow)
	}
	return fmt.Sprintf("cache-%s#%dx%d:fail", f.Op, f.At, f.Count)
}

// EventKind is a process event.
type EventKind string

const (
	// EvCrash stops an instance without any cleanup (SIGKILL) and starts it
	// again on the same state.
	EvCrash EventKind = "crash"
	// EvTerm stops an instance gracefully (SIGTERM) and starts it again.
	EvTerm EventKind = "term"
	// EvZombie freezes the running instance (SIGSTOP), starts a second one
	// with the same transactional_id, optionally crashes that one after a
	// while (and starts it again), then wakes the first (SIGCONT).
	EvZombie EventKind = "zombie"
	// EvRetention deletes the records of one input partition below an
	// offset (DeleteRecords, as retention does), ahead of or behind the
	// copy.
	EvRetention EventKind = "retention"
)

// Event is a process event, fired once the run's progress (the share of
// input records acknowledged, as the broker or the source records it)
// reaches At.
type Event struct {
	Kind EventKind
	At   float64
	// Member is which instance (k2k-members: 0 or 1).
	Member int
	// RestartDelay is how long a crashed or stopped instance stays down.
	RestartDelay time.Duration
	// Zombie only: how long the first instance stays frozen, and whether
	// the second one crashes while it is.
	Stall      time.Duration
	CrashOther bool
	// Retention only: the partition, and the share of its records deleted.
	Partition int32
	Share     float64
}

func (e Event) String() string {
	s := fmt.Sprintf("%s@%.2f", e.Kind, e.At)
	if e.Member != 0 {
		s += fmt.Sprintf("/m%d", e.Member)
	}
	if e.RestartDelay > 0 {
		s += fmt.Sprintf("+%s", e.RestartDelay)
	}
	if e.Kind == EvRetention {
		s += fmt.Sprintf("(in/%d below %.0f%%)", e.Partition, 100*e.Share)
	}
	if e.Kind == EvZombie {
		s += fmt.Sprintf("(stall %s", e.Stall)
		if e.CrashOther {
			s += ", crash the other"
		}
		s += ")"
	}
	return s
}

// Plan is everything a seed decides: the configuration of the pipeline, the
// input, and the fault schedule. Draw makes the same Plan for the same seed.
type Plan struct {
	Seed uint64
	Mode Mode
	TV   int // transaction version of the cluster: 0 or 2

	InPartitions  int32
	OutPartitions int32
	Records       int
	Keys          int   // keys are "k<i % Keys>": repeated across batches and epochs
	ValueMin      int   // value bytes
	ValueMax      int   // value bytes
	Oversized     []int // records whose value is larger than the output's max_message_bytes
	// AbortedTxns is how many aborted transactions the input topic holds
	// between the records (Kafka-to-Kafka modes).
	AbortedTxns int

	MaxInFlight     int
	PoolSize        int
	Batching        int // output batching count, 0 = off
	EpochInterval   time.Duration
	EpochMaxRecords int
	InputBatch      int           // kafka_native max_batch_records / sim_source batch size
	CommitPeriod    time.Duration // kafka_native commit_period / sim_source checkpoint period
	Threads         int           // pipeline threads

	Faults      []ReqFault
	CacheFaults []CacheFault
	Events      []Event

	// StateCache is the output's state cache: "sim" (the harness's, with
	// the cache faults) or "kafka_state" (the project's cache on a
	// compacted topic of the same cluster, faulted by the request faults).
	StateCache string
	// TxnTimeout is the output's transaction_timeout: short in some runs,
	// so that the coordinator aborts epochs left open by a crash.
	TxnTimeout time.Duration
	// HostileHeaders: some input records carry headers named as
	// kafka_native's metadata (kafka_partition, kafka_offset, kafka_key)
	// with other values; a copy must keep each record's own.
	HostileHeaders bool
	// Retention: the run has a retention event; kafka_native gets small
	// per-partition buffers (max_buffered_bytes_per_partition) and a short
	// idle_probe_interval.
	Retention bool
	// Throttle is how long the pipeline spends per record (in sim_tag), so
	// that a run lasts about a second and the events land in the middle of
	// the copy rather than after it; 0 in some runs (as fast as it goes).
	Throttle time.Duration
}

// MaxMessageBytes is the output's max_message_bytes in every run: small, so
// that an oversized record is cheap to make.
const MaxMessageBytes = 8192

// Draw makes the plan of seed. Everything it decides comes from the seed
// alone, in a fixed order, so that a seed replays the same plan.
func Draw(seed uint64) Plan {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed5eed5eed5eed))
	p := Plan{Seed: seed}
	p.Mode = pick(r, []Mode{ModePlain, ModeDedupe, ModeK2K, ModeK2K, ModeMembers, ModeArrow}) // plain-kafka: below
	p.TV = pick(r, []int{0, 2})
	p.InPartitions = int32(1 + r.IntN(3))
	p.OutPartitions = int32(1 + r.IntN(3))
	if p.Mode.k2k() {
		// The copy keeps the partition, so that per-partition order
		// can be checked.
		p.OutPartitions = p.InPartitions
	}
	p.Records = 150 + r.IntN(650)
	p.Keys = pick(r, []int{1, 3, 10, 50})
	p.ValueMin = 1 + r.IntN(40)
	p.ValueMax = p.ValueMin + r.IntN(400)
	if p.Mode != ModeArrow && r.IntN(5) == 0 {
		n := 1 + r.IntN(2)
		for range n {
			p.Oversized = append(p.Oversized, r.IntN(p.Records))
		}
		slices.Sort(p.Oversized)
		p.Oversized = slices.Compact(p.Oversized)
	}
	if p.Mode.k2k() {
		p.AbortedTxns = pick(r, []int{0, 0, 1, 3})
	}
	p.MaxInFlight = pick(r, []int{1, 8, 64})
	if p.Mode == ModeDedupe {
		p.MaxInFlight = 1 // a lint rule: positions must reach the output in order
	}
	p.PoolSize = 2 + r.IntN(3)
	if r.IntN(2) == 0 {
		p.Batching = pick(r, []int{3, 10, 50})
	}
	p.EpochInterval = time.Duration(5+r.IntN(46)) * time.Millisecond
	p.EpochMaxRecords = pick(r, []int{0, 20, 100, 100000})
	p.InputBatch = pick(r, []int{1, 5, 20, 100})
	p.CommitPeriod = time.Duration(20+r.IntN(200)) * time.Millisecond
	p.Threads = 1

	// Request faults: a few, each on one request kind, counted from the
	// first request of that kind once the pipeline runs.
	nf := pick(r, []int{0, 1, 2, 3, 4, 6})
	keys := faultKeys(p.Mode)
	for range nf {
		p.Faults = append(p.Faults, drawFault(r, keys))
	}
	// At most one fatal fault per run, rarely.
	if r.IntN(8) == 0 {
		p.Faults = append(p.Faults, drawFatal(r, p.Mode))
	}
	nc := pick(r, []int{0, 0, 1, 2})
	for range nc {
		f := CacheFault{Op: pick(r, []string{"get", "set", "set"}), At: r.IntN(30), Count: 1 + r.IntN(4)}
		if r.IntN(3) == 0 {
			f.Slow = time.Duration(50+r.IntN(1500)) * time.Millisecond
		}
		p.CacheFaults = append(p.CacheFaults, f)
	}

	ne := pick(r, []int{0, 1, 1, 2, 3})
	for range ne {
		e := Event{Kind: pick(r, []EventKind{EvCrash, EvCrash, EvTerm, EvZombie}), At: 0.05 + 0.8*r.Float64()}
		if p.Mode == ModeMembers {
			e.Member = r.IntN(2)
		}
		if e.Kind == EvZombie {
			e.Stall = time.Duration(200+r.IntN(1500)) * time.Millisecond
			e.CrashOther = r.IntN(2) == 0
		}
		p.Events = append(p.Events, e)
	}
	slices.SortStableFunc(p.Events, func(a, b Event) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})

	// With one batch in flight an epoch holds one batch: at most 150
	// epochs, so that a run stays short.
	if n := 150 * p.InputBatch * p.MaxInFlight; p.Records > n {
		p.Records = n
		p.Oversized = slices.DeleteFunc(p.Oversized, func(i int) bool { return i >= n })
	}

	// Drawn last, so that the draws above stay those of earlier versions.
	p.StateCache = "sim"
	if r.IntN(4) == 0 {
		p.StateCache = "kafka_state"
		p.CacheFaults = nil
	}
	p.TxnTimeout = 10 * time.Second
	if r.IntN(6) == 0 {
		// The shortest the lint rule allows with a 1s commit_timeout.
		p.TxnTimeout = 3 * time.Second
	}
	for i := range p.Events {
		switch n := r.IntN(10); {
		case n < 7:
		case n < 9 || p.TxnTimeout > 3*time.Second:
			p.Events[i].RestartDelay = 300 * time.Millisecond
		default:
			// Down past the transaction timeout: the coordinator
			// aborts what the instance left open.
			p.Events[i].RestartDelay = p.TxnTimeout + time.Second
		}
	}
	if p.Mode == ModePlain && r.IntN(2) == 0 {
		// Half the plain runs read a Kafka topic instead, the input
		// committing the group's offsets itself; a third of those as
		// two members. They get faults of the input's requests too.
		p.Mode = ModePlainKafka
		if r.IntN(3) == 0 {
			p.Mode = ModePlainKafkaMembers
			for i := range p.Events {
				p.Events[i].Member = r.IntN(2)
			}
		}
		keys := []kmsg.Key{kmsg.Fetch, kmsg.ListOffsets, kmsg.OffsetFetch, kmsg.OffsetCommit}
		if p.Mode == ModePlainKafkaMembers {
			keys = append(keys, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat)
		}
		for range r.IntN(3) {
			p.Faults = append(p.Faults, drawFault(r, keys))
		}
	}
	if p.Mode.kafkaInput() && r.IntN(4) == 0 {
		p.HostileHeaders = true
	}
	if p.Mode.kafkaInput() && r.IntN(5) == 0 {
		// Retention under a slow copy: small per-partition buffers
		// pause partitions, and the idle probe runs often.
		p.Retention = true
		p.Events = append(p.Events, Event{Kind: EvRetention, At: 0.05 + 0.6*r.Float64(), Partition: int32(r.IntN(int(p.InPartitions))), Share: 0.1 + 0.9*r.Float64()})
		slices.SortStableFunc(p.Events, func(a, b Event) int {
			switch {
			case a.At < b.At:
				return -1
			case a.At > b.At:
				return 1
			}
			return 0
		})
	}
	if r.IntN(10) < 7 {
		p.Throttle = time.Second / time.Duration(p.Records)
	}
	// Several pipeline threads where the lint rule allows them: not in
	// dedupe mode, nor in Kafka-to-Kafka mode with output batching (the
	// threads hand batches on out of order). Kafka-to-Kafka without output
	// batching keeps each partition's order whatever the threads.
	if p.Mode != ModeDedupe && !(p.Mode.k2k() && p.Batching > 0) && r.IntN(3) == 0 {
		p.Threads = pick(r, []int{2, 4})
	}
	// Now and then a SIGTERM at the very end of a bounded read, where the
	// input's final commit runs (a stop then must still exit 0).
	if p.Mode.kafkaInput() && !p.Mode.members() && r.IntN(6) == 0 {
		p.Events = append(p.Events, Event{Kind: EvTerm, At: 0.9 + 0.1*r.Float64()})
		slices.SortStableFunc(p.Events, func(a, b Event) int {
			switch {
			case a.At < b.At:
				return -1
			case a.At > b.At:
				return 1
			}
			return 0
		})
	}
	return p
}

// faultKeys are the request kinds a mode's pipeline sends.
func faultKeys(m Mode) []kmsg.Key {
	keys := []kmsg.Key{kmsg.Produce, kmsg.Produce, kmsg.InitProducerID, kmsg.AddPartitionsToTxn, kmsg.EndTxn, kmsg.EndTxn,
		kmsg.DescribeTransactions, kmsg.Metadata, kmsg.FindCoordinator}
	if m.k2k() {
		keys = append(keys, kmsg.Fetch, kmsg.Fetch, kmsg.ListOffsets, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.TxnOffsetCommit, kmsg.OffsetFetch)
	}
	if m == ModeMembers {
		keys = append(keys, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.OffsetCommit)
	}
	return keys
}

// retriable are error codes a healthy broker answers for a while (leader
// moves, coordinator loads, rebalances): the pipeline must ride them out.
// Not KAFKA_STORAGE_ERROR nor FENCED_LEADER_EPOCH: franz-go retries those
// once the partition's leader or leader epoch changed, which a one-broker
// kfake never does (the partition then stalls for good, as a real one-broker
// cluster with a failed log directory would).
var retriable = map[kmsg.Key][]int16{
	kmsg.Produce:              {6, 7, 19, 20},      // NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT (applied), NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND (applied)
	kmsg.Fetch:                {6, 5},              // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE
	kmsg.ListOffsets:          {6, 5, 78},          // NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, OFFSET_NOT_AVAILABLE
	kmsg.Metadata:             {5},                 // LEADER_NOT_AVAILABLE
	kmsg.FindCoordinator:      {15, 14},            // COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS
	kmsg.InitProducerID:       {14, 15, 16, 51},    // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
	kmsg.AddPartitionsToTxn:   {14, 15, 16, 51},    // as above
	kmsg.AddOffsetsToTxn:      {14, 15, 16, 51},    // as above
	kmsg.TxnOffsetCommit:      {14, 15, 16, 7},     // ..., REQUEST_TIMED_OUT (applied)
	kmsg.EndTxn:               {14, 15, 16, 51},    // as InitProducerID
	kmsg.DescribeTransactions: {14, 15, 16},        // as above
	kmsg.OffsetFetch:          {14, 15, 16},        // as above
	kmsg.OffsetCommit:         {14, 15, 16, 7, 27}, // ..., REQUEST_TIMED_OUT (applied), REBALANCE_IN_PROGRESS
	kmsg.JoinGroup:            {14, 15, 16},        // as above
	kmsg.SyncGroup:            {14, 15, 16, 27},    // ..., REBALANCE_IN_PROGRESS
	kmsg.Heartbeat:            {14, 15, 16, 27},    // ..., REBALANCE_IN_PROGRESS
}

// fatalCodes are authorization failures: no retry fixes them, the pipeline
// must stop with an error naming them.
var fatalCodes = map[kmsg.Key]int16{
	kmsg.Produce:            29, // TOPIC_AUTHORIZATION_FAILED
	kmsg.InitProducerID:     53, // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	kmsg.AddPartitionsToTxn: 53,
	kmsg.EndTxn:             53,
	kmsg.Fetch:              29,
	kmsg.AddOffsetsToTxn:    30, // GROUP_AUTHORIZATION_FAILED
	kmsg.TxnOffsetCommit:    30,
	kmsg.OffsetFetch:        30,
}

func drawFault(r *rand.Rand, keys []kmsg.Key) ReqFault {
	f := ReqFault{Key: pick(r, keys), At: r.IntN(40), Count: pick(r, []int{1, 1, 1, 2, 5})}
	switch n := r.IntN(10); {
	case n < 5:
		f.Action = ActError
		f.Code = pick(r, retriable[f.Key])
	case n < 7:
		f.Action = ActDelay
		// Up to past the output's commit_timeout (1s in the runs) and
		// the client's request timeouts on the short side.
		f.Delay = pick(r, []time.Duration{50 * time.Millisecond, 300 * time.Millisecond, 1200 * time.Millisecond, 2500 * time.Millisecond})
		f.Count = 1
	case n < 9:
		f.Action = ActDropAfter
		f.Count = 1
	default:
		// franz-go backs off exponentially on a connection that dies
		// under a request: 5 in a row cost it about 20 s.
		f.Action = ActClose
		f.Count = min(f.Count, 2)
	}
	return f
}

func drawFatal(r *rand.Rand, m Mode) ReqFault {
	var keys []kmsg.Key
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.InitProducerID, kmsg.AddPartitionsToTxn, kmsg.EndTxn, kmsg.Fetch, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.OffsetFetch} {
		if !m.k2k() && (k == kmsg.Fetch || k == kmsg.AddOffsetsToTxn || k == kmsg.TxnOffsetCommit || k == kmsg.OffsetFetch) {
			continue
		}
		keys = append(keys, k)
	}
	k := pick(r, keys)
	return ReqFault{Key: k, At: r.IntN(20), Count: -1, Action: ActError, Code: fatalCodes[k], Fatal: true}
}

// codeName is the Kafka name of an error code.
func codeName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) {
			return ke.Message
		}
	}
	return fmt.Sprint(code)
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// String is the plan on one line, for the summary.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode=%s tv=%d in=%d out=%d records=%d keys=%d value=%d..%d", p.Mode, p.TV, p.InPartitions, p.OutPartitions, p.Records, p.Keys, p.ValueMin, p.ValueMax)
	if len(p.Oversized) > 0 {
		fmt.Fprintf(&b, " oversized=%v", p.Oversized)
	}
	if p.AbortedTxns > 0 {
		fmt.Fprintf(&b, " aborted_in=%d", p.AbortedTxns)
	}
	if p.HostileHeaders {
		b.WriteString(" hostile_headers")
	}
	if p.Retention {
		b.WriteString(" small_buffers")
	}
	if p.Throttle > 0 {
		fmt.Fprintf(&b, " throttle=%s", p.Throttle)
	}
	if p.Threads != 1 {
		fmt.Fprintf(&b, " threads=%d", p.Threads)
	}
	fmt.Fprintf(&b, " max_in_flight=%d pool=%d batching=%d epoch=%s/%d in_batch=%d commit=%s cache=%s txn_timeout=%s",
		p.MaxInFlight, p.PoolSize, p.Batching, p.EpochInterval, p.EpochMaxRecords, p.InputBatch, p.CommitPeriod, p.StateCache, p.TxnTimeout)
	var fs []string
	for _, f := range p.Faults {
		fs = append(fs, f.String())
	}
	for _, f := range p.CacheFaults {
		fs = append(fs, f.String())
	}
	if len(fs) > 0 {
		fmt.Fprintf(&b, " faults=[%s]", strings.Join(fs, " "))
	}
	var es []string
	for _, e := range p.Events {
		es = append(es, e.String())
	}
	if len(es) > 0 {
		fmt.Fprintf(&b, " events=[%s]", strings.Join(es, " "))
	}
	return b.String()
}

// Override changes a drawn plan for triage ("which dimension matters?"):
// comma-separated name=value pairs among mode, tv, max_in_flight, pool,
// batching, threads, in_batch, cache (sim or kafka_state), throttle (a
// duration per record), oversized (none), faults (none), cache_faults (none),
// events (none). A failure is reported by its seed alone; an override only
// narrows down its cause.
func Override(p Plan, spec string) (Plan, error) {
	if spec == "" {
		return p, nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return p, fmt.Errorf("override %q: want name=value", kv)
		}
		num := func() (int, error) { return strconv.Atoi(v) }
		var err error
		switch k {
		case "mode":
			p.Mode = Mode(v)
		case "tv":
			p.TV, err = num()
		case "max_in_flight":
			p.MaxInFlight, err = num()
		case "pool":
			p.PoolSize, err = num()
		case "batching":
			p.Batching, err = num()
		case "threads":
			p.Threads, err = num()
		case "in_batch":
			p.InputBatch, err = num()
		case "oversized":
			p.Oversized = nil
		case "faults":
			p.Faults = nil
		case "cache_faults":
			p.CacheFaults = nil
		case "events":
			p.Events = nil
		case "cache":
			p.StateCache = v
		case "throttle":
			p.Throttle, err = time.ParseDuration(v)
		default:
			return p, fmt.Errorf("override %q: unknown name", k)
		}
		if err != nil {
			return p, fmt.Errorf("override %q: %w", kv, err)
		}
	}
	return p, nil
}
