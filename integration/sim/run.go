package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Options are how a run is executed (never what it does: that is the seed's).
type Options struct {
	// Bin is the executable started as an instance with ChildEnv set: the
	// test binary (os.Args[0]), whose TestMain calls ChildMain.
	Bin string
	// Dir receives the instances' logs.
	Dir string
	// Timeout bounds the run on an idle machine (stretched by the load,
	// load.go): a run still going then is a hang.
	Timeout time.Duration
	// Trace narrates every request to the cluster and the error codes of
	// its answer.
	Trace bool
	// LogLevel is the instances' log level (default info; debug keeps the
	// output's dedupe and admission decisions).
	LogLevel string
	// Override changes the drawn plan (see Override), for triage only.
	Override string
	// Logf, if set, narrates the run.
	Logf func(format string, args ...any)
}

// Result is what a run found.
type Result struct {
	Seed     uint64
	Plan     Plan
	Failures []string
	Elapsed  time.Duration
	Stats    Stats
}

// Stats count what happened in a run, for the summary line.
type Stats struct {
	Starts, Crashes, Terms, Zombies, FatalExits int
	EventsFired                                 int
	FaultHits                                   int
	CacheFaults                                 int
	Out, Dups, Missing, DLQ                     int
	// KfakeUnknown counts restarts stopped by an in-doubt epoch that
	// kfake's transaction states cannot identify (see reap).
	KfakeUnknown int
	// KfakeFence counts instances that took kfake's transaction timeout
	// abort for a fence by another instance (see reap).
	KfakeFence int
	// ZombieFence counts instances fenced where a zombie ran.
	ZombieFence int
	// KfakeEvicted counts group members of exited instances that kfake
	// kept past Apache Kafka's session timeout, removed by the harness
	// (evictDead).
	KfakeEvicted int
	// InDoubtStops counts stops on an EndTxn outcome unknown.
	InDoubtStops int
	// Recoveries counts the recovery decisions checked against the log.
	Recoveries int
	// Deleted counts the input records retention deleted.
	Deleted int64
	// Refills counts fills of the input done again on a new cluster
	// (setup): the filler's franz-go ended a commit with an abort.
	Refills int
}

// refills is the summary's refills field, shown only when setup filled the
// input again.
func refills(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" refills=%d", n)
}

// OK reports whether the run found nothing wrong.
func (r Result) OK() bool { return len(r.Failures) == 0 }

// Summary is the run on one line.
func (r Result) Summary() string {
	verdict := "ok"
	if !r.OK() {
		verdict = "FAIL"
		if defects, unmatched := Classify(r); len(unmatched) > 0 {
			verdict += "(new"
			if len(defects) > 0 {
				verdict += "," + strings.Join(defects, ",")
			}
			verdict += ")"
		} else {
			verdict += "(" + strings.Join(defects, ",") + ")"
		}
	}
	s := r.Stats
	return fmt.Sprintf("sim: seed=%d %s elapsed=%.1fs starts=%d crashes=%d terms=%d zombies=%d fatal_exits=%d in_doubt_stops=%d zombie_fence=%d kfake_unknown=%d kfake_fence=%d kfake_evicted=%d recoveries=%d events=%d/%d fault_hits=%d cache_faults=%d out=%d dups=%d missing=%d dlq=%d%s | %s",
		r.Seed, verdict, r.Elapsed.Seconds(), s.Starts, s.Crashes, s.Terms, s.Zombies, s.FatalExits, s.InDoubtStops, s.ZombieFence, s.KfakeUnknown, s.KfakeFence, s.KfakeEvicted, s.Recoveries, s.EventsFired, len(r.Plan.Events),
		s.FaultHits, s.CacheFaults, s.Out, s.Dups, s.Missing, s.DLQ, refills(s.Refills), r.Plan)
}

// runner is the state of one run.
type runner struct {
	p    Plan
	o    Options
	res  *Result
	c    *kfake.Cluster
	inj  *injector
	st   *store
	adm  *kgo.Client // the harness's client: fill, offsets, check
	addr string

	ends      map[int32]int64 // input end offsets (Kafka-to-Kafka)
	offsetOf  map[int]int64   // input record -> its offset
	deleted   map[int32]int64 // input partition -> log start after retention events
	committed map[int32]int64 // the group's committed offsets as last polled

	live   map[int]*instance // the current instance of each member
	extra  []*instance       // frozen or woken zombies, still to exit
	done   map[int]bool      // members whose bounded run ended
	incarn map[int]int
	timers []timed
	all    []*instance

	unexpected  int          // unexpected exits, bounded restarts
	zombied     map[int]bool // members that had a zombie
	stoppingNow bool
	fatalSince  time.Time
	load        loadWatch // stretches the run's bounds
	lastEvict   time.Time // evictDeadMembers
}

type timed struct {
	at time.Time
	fn func()
}

func (r *runner) logf(format string, args ...any) {
	if r.o.Logf != nil {
		r.o.Logf(format, args...)
	}
}

func (r *runner) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.res.Failures = append(r.res.Failures, msg)
	r.logf("FAIL: %s", msg)
}

// Run executes the run of seed and checks its invariants.
func Run(seed uint64, o Options) Result {
	start := time.Now()
	plan, err := Override(Draw(seed), o.Override)
	res := Result{Seed: seed, Plan: plan}
	r := &runner{p: res.Plan, o: o, res: &res, live: map[int]*instance{}, done: map[int]bool{}, incarn: map[int]int{}, zombied: map[int]bool{}, offsetOf: map[int]int64{}, deleted: map[int32]int64{}, committed: map[int32]int64{}}
	defer r.cleanup()
	if err != nil {
		r.fail("%v", err)
		return res
	}
	if err := r.setup(); err != nil {
		r.fail("setup: %v", err)
		res.Elapsed = time.Since(start)
		return res
	}
	r.loop(start)
	r.inj.arm(false)
	r.stopAll()
	r.check()
	r.inj.mu.Lock()
	for _, h := range r.inj.hits {
		res.Stats.FaultHits += h
	}
	r.inj.mu.Unlock()
	r.st.mu.Lock()
	res.Stats.CacheFaults = r.st.cacheFails + r.st.cacheSlows
	r.st.mu.Unlock()
	res.Elapsed = time.Since(start)
	return res
}

func (r *runner) cleanup() {
	for _, in := range r.all {
		if !in.exited() {
			in.signal(syscall.SIGCONT)
			in.kill()
		}
	}
	if r.adm != nil {
		r.adm.Close()
	}
	if r.st != nil {
		r.st.close()
	}
	if r.c != nil {
		r.c.Close()
	}
}

// fillAttempts bounds how many clusters setup fills before it gives up: a
// fill that fails or does not land as recorded (checkInput) is done again
// from the start on a new cluster, so that the input is what the seed says.
const fillAttempts = 3

func (r *runner) setup() error {
	p := r.p
	var err error
	for attempt := 1; ; attempt++ {
		err = r.startCluster()
		if err == nil {
			break
		}
		var fe fillError
		if !errors.As(err, &fe) || attempt == fillAttempts {
			return err
		}
		r.logf("setup: %v; filling a new cluster (attempt %d of %d)", err, attempt+1, fillAttempts)
		r.res.Stats.Refills++
		r.adm.Close()
		r.c.Close()
		r.adm, r.c = nil, nil
		r.offsetOf = map[int]int64{}
	}
	if r.st, err = newStore(p.CacheFaults); err != nil {
		return err
	}
	if err := os.MkdirAll(r.o.Dir, 0o755); err != nil {
		return err
	}
	r.inj.arm(true)
	members := 1
	if p.Mode.members() {
		members = 2
	}
	for m := range members {
		if err := r.startMember(m, ""); err != nil {
			return err
		}
	}
	return nil
}

// fillError is a fill of the input that failed or did not land: setup fills
// a new cluster.
type fillError struct{ err error }

func (e fillError) Error() string { return "filling the input: " + e.err.Error() }
func (e fillError) Unwrap() error { return e.err }

// startCluster starts the cluster with the injector's hooks (not armed) and
// the harness's client and, with a Kafka input, fills the input and checks
// that the fill landed.
func (r *runner) startCluster() error {
	p := r.p
	r.inj = newInjector(p.Faults)
	if r.o.Trace {
		r.inj.trace = r.logf
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(p.InPartitions, inTopic),
		kfake.SeedTopics(p.OutPartitions, outTopic),
		kfake.ListenFn(r.inj.listen),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
	}
	if p.TV == 0 {
		opts = append(opts, kfake.MaxVersions(kversion.V3_9_0()))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	r.c = c
	r.inj.install(c)
	r.addr = c.ListenAddrs()[0]
	if r.adm, err = harnessClient(r.addr, p.TV); err != nil {
		return err
	}
	if !p.Mode.kafkaInput() {
		return nil
	}
	if err := r.fill(); err != nil {
		return fillError{err}
	}
	if err := r.checkInput(); err != nil {
		return fillError{err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(r.adm).ListEndOffsets(ctx, inTopic)
	if err != nil {
		return err
	}
	r.ends = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { r.ends[o.Partition] = o.Offset })
	if _, err := r.pollOffsets(); err != nil {
		return fmt.Errorf("offsets: %w", err)
	}
	return nil
}

// harnessClient is the harness's own client. It asks for offsets with
// OffsetFetch v7 (one group, topics listed), sent straight to the seed
// broker (pollOffsets).
func harnessClient(addr string, tv int) (*kgo.Client, error) {
	vs := kversion.Stable()
	if tv == 0 {
		vs = kversion.V3_9_0()
	}
	vs.SetMaxKeyVersion(int16(kmsg.OffsetFetch), 7)
	return kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(vs))
}

// fill writes the input topic: the plan's records in transactions of 50,
// with AbortedTxns aborted transactions of "x<j>" records in between.
func (r *runner) fill() error {
	p := r.p
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.addr), kgo.TransactionalID("sim-filler"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(4*MaxMessageBytes))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	txn := func(recs []*kgo.Record, commit bool) error {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			return err
		}
		for _, pr := range res {
			if i := recordIndex(recordID(pr.Record.Value)); i >= 0 {
				r.offsetOf[i] = pr.Record.Offset
			}
		}
		return cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	}
	const chunk = 50
	chunks := (p.Records + chunk - 1) / chunk
	abortAfter := map[int]int{}
	for j := range p.AbortedTxns {
		abortAfter[(j+1)*chunks/(p.AbortedTxns+1)]++
	}
	xj := 0
	for k := range chunks {
		var recs []*kgo.Record
		for i := k * chunk; i < min((k+1)*chunk, p.Records); i++ {
			rec := &kgo.Record{Topic: inTopic, Partition: recordPartition(p, i), Key: []byte(recordKey(p, i)), Value: recordValue(p, i)}
			if p.HostileHeaders && i%7 == 3 {
				// Values a copy could write: the next partition, a
				// key of its own, an offset far back.
				rec.Headers = []kgo.RecordHeader{
					{Key: "kafka_partition", Value: []byte(strconv.Itoa(int((recordPartition(p, i) + 1) % p.InPartitions)))},
					{Key: "kafka_offset", Value: []byte("0")},
					{Key: "kafka_key", Value: []byte("hostile")},
				}
			}
			recs = append(recs, rec)
		}
		if err := txn(recs, true); err != nil {
			return err
		}
		for range abortAfter[k] {
			var xs []*kgo.Record
			for q := range p.InPartitions {
				for range 3 {
					xs = append(xs, &kgo.Record{Topic: inTopic, Partition: q, Key: []byte("x"), Value: fmt.Appendf(nil, "x%d:aborted", xj)})
					xj++
				}
			}
			if err := txn(xs, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// pollOffsets reads the group's committed offsets (read_uncommitted: what
// is committed now, pending transactional commits excluded) and checks that
// none moved backwards.
func (r *runner) pollOffsets() (map[int32]int64, error) {
	parts := make([]int32, r.p.InPartitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	in := kmsg.NewOffsetFetchRequestTopic()
	in.Topic, in.Partitions = inTopic, parts
	mark := kmsg.NewOffsetFetchRequestTopic()
	mark.Topic, mark.Partitions = harnessMarker, []int32{0}
	req.Topics = []kmsg.OffsetFetchRequestTopic{in, mark}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kresp, err := r.adm.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := kresp.(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode == kerr.GroupIDNotFound.Code {
		return map[int32]int64{}, nil
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		if t.Topic != inTopic {
			continue
		}
		for _, pt := range t.Partitions {
			if pt.ErrorCode != 0 || pt.Offset < 0 {
				continue
			}
			out[pt.Partition] = pt.Offset
			if prev, ok := r.committed[pt.Partition]; ok && pt.Offset < prev {
				r.fail("the committed offset of %s/%d moved backwards from %d to %d", inTopic, pt.Partition, prev, pt.Offset)
			}
			r.committed[pt.Partition] = pt.Offset
		}
	}
	return out, nil
}

// progress is the share of the input acknowledged so far: the group's
// committed offsets against the input's ends, or the records acknowledged to
// sim_source.
func (r *runner) progress() float64 {
	if !r.p.Mode.kafkaInput() {
		return float64(r.st.ackedCount()) / float64(r.p.Records)
	}
	var got, want int64
	for p, end := range r.ends {
		want += end
		got += r.committed[p]
	}
	if want == 0 {
		return 1
	}
	return float64(got) / float64(want)
}

// offsetsBehind names, for a hang report, the input partitions whose
// committed offset has not reached the end ("": none, or not a Kafka input).
func (r *runner) offsetsBehind() string {
	if !r.p.Mode.kafkaInput() {
		return ""
	}
	var parts []string
	for p, end := range r.ends {
		if c := r.committed[p]; c != end {
			parts = append(parts, fmt.Sprintf("%s/%d committed %d of %d", inTopic, p, c, end))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return ": " + strings.Join(parts, ", ")
}

func (r *runner) lag0() bool {
	for p, end := range r.ends {
		if r.committed[p] != end {
			return false
		}
	}
	return true
}

func (r *runner) startMember(m int, suffix string) error {
	name := fmt.Sprintf("m%d", m)
	if k := r.incarn[m]; k > 0 {
		name += fmt.Sprintf(".%d", k)
	}
	r.incarn[m]++
	name += suffix
	in, err := startInstance(r.o, r.p, r.addr, r.st.addr(), name, m)
	if err != nil {
		return err
	}
	r.res.Stats.Starts++
	r.all = append(r.all, in)
	r.live[m] = in
	r.logf("started %s", in)
	return nil
}

func (r *runner) restart(m int) {
	if err := r.startMember(m, ""); err != nil {
		r.fail("restart of member %d: %v", m, err)
	}
}

// stallContradiction is stallHint's words for starts that all stop on
// recovery's contradiction (an epoch found committed after an earlier one
// found aborted).
const stallContradiction = "every start stops: an epoch committed after an earlier aborted epoch"

// stallHint names what the instances' logs say about a stall, if anything
// known.
func (r *runner) stallHint() string {
	for _, in := range r.all {
		// Every start stopping on recovery's contradiction also leaves
		// batches that waited for the batch before them in the first
		// instance's log: named first.
		if b, err := os.ReadFile(in.logf); err == nil && strings.Contains(string(b), "committed after an earlier aborted epoch") {
			return " [" + stallContradiction + "]"
		}
	}
	for _, in := range r.all {
		// A batch mixing owned and given-up partitions nacked over and
		// over also leaves the batches of the owned partition after it
		// waiting for it: named first.
		b, err := os.ReadFile(in.logf)
		if err == nil && strings.Count(string(b), "a batch mixes records of partitions this member owns and of ones it gave up") >= 5 {
			return " [" + stallMixedStale + "]"
		}
	}
	for _, in := range r.all {
		// kafka_state's writes unanswered by their deadline, write after
		// write (the output's retry loops hold the committer meanwhile,
		// and batches wait behind it): named first.
		b, err := os.ReadFile(in.logf)
		if err == nil && strings.Count(string(b), "no answer from the broker before the deadline")+
			strings.Count(string(b), "an earlier write of this process is still unanswered") >= 5 {
			return " [" + stallStateWrites + "]"
		}
	}
	for _, in := range r.all {
		b, err := os.ReadFile(in.logf)
		// "waited 5s for the batch before it", "waited 1s ...", "the
		// batch before it was nacked and is replayed after it": over
		// and over, not once.
		if err == nil && strings.Count(string(b), "the batch before it") >= 5 {
			return " [a batch waits for the batch before it, nacked, over and over]"
		}
	}
	return ""
}

// stallMixedStale is stallHint's words for a batch merging input batches of
// owned and given-up partitions, nacked whole over and over (the output's
// error before the fix of members-mixed-stale).
const stallMixedStale = "a batch mixing owned and given-up partitions nacked, over and over"

// stallStateWrites is stallHint's words for kafka_state writes that time out
// one after another (the output's error before the fix of state-write-stall).
const stallStateWrites = "state cache writes unanswered by their deadline, over and over"

// state describes the runner's view of the instances, for a hang report.
func (r *runner) state() string {
	var parts []string
	for m, in := range r.live {
		name := "none"
		if in != nil {
			name = in.name
		}
		parts = append(parts, fmt.Sprintf("member %d: live %s, done %v", m, name, r.done[m]))
	}
	for _, in := range r.extra {
		parts = append(parts, fmt.Sprintf("zombie %s exited %v", in.name, in.exited()))
	}
	parts = append(parts, fmt.Sprintf("%d timers", len(r.timers)))
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// restartAfter starts member m again after d.
func (r *runner) restartAfter(m int, d time.Duration) {
	if d == 0 {
		r.restart(m)
		return
	}
	r.timers = append(r.timers, timed{time.Now().Add(d), func() { r.restart(m) }})
}

// loop drives the run until it ends or its bound (Options.Timeout, stretched
// by the load) passes.
func (r *runner) loop(start time.Time) {
	next := 0
	for {
		if bound := r.load.bound(r.o.Timeout); time.Since(start) > bound {
			var running []string
			for _, in := range r.all {
				if !in.exited() {
					running = append(running, in.name)
				}
			}
			r.fail("hang: the run did not end within %s%s (progress %.2f%s, running %v; %s)%s", bound, &r.load, r.progress(), r.offsetsBehind(), running, r.state(), r.stallHint())
			return
		}
		if r.p.Mode.kafkaInput() {
			_, _ = r.pollOffsets()
		}
		now := time.Now()
		kept := r.timers[:0]
		var due []timed
		for _, t := range r.timers {
			if now.After(t.at) {
				due = append(due, t)
			} else {
				kept = append(kept, t)
			}
		}
		r.timers = kept
		for _, t := range due {
			t.fn()
		}
		r.reap()
		r.evictDeadMembers()
		if len(r.res.Failures) > 0 && r.unexpected > 3 {
			return
		}
		r.checkFatalBound()
		if next < len(r.p.Events) && r.progress() >= r.p.Events[next].At && r.targetReady(r.p.Events[next]) {
			r.fire(r.p.Events[next])
			next++
			r.res.Stats.EventsFired++
		}
		if r.finished() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reap handles the instances that exited.
func (r *runner) reap() {
	for m, in := range r.live {
		if in == nil || !in.exited() {
			continue
		}
		r.live[m] = nil
		code := in.exitCode()
		r.logf("%s exited %d", in.name, code)
		if in.killed() {
			continue // stopped by the harness
		}
		switch code {
		case 0:
			if r.p.Mode.members() && !r.stopping() {
				r.unexpectedExit(m, in, "exited 0 on its own, reading an unbounded input")
				continue
			}
			r.done[m] = true
		case ExitFatal:
			r.res.Stats.FatalExits++
			msg := in.fatalLine()
			if r.expectedFatal(in, msg) {
				r.restart(m)
				continue
			}
			r.unexpectedExit(m, in, fmt.Sprintf("stopped on a fatal error with no fatal fault injected: %q", msg))
		default:
			r.unexpectedExit(m, in, fmt.Sprintf("exited %d:\n%s", code, in.lastLines(8)))
		}
	}
	kept := r.extra[:0]
	for _, in := range r.extra {
		if !in.exited() {
			kept = append(kept, in)
			continue
		}
		code := in.exitCode()
		r.logf("zombie %s exited %d (%s)", in.name, code, in.fatalLine())
		if code == ExitFatal {
			r.res.Stats.FatalExits++
		}
		if code != 0 && code != ExitFatal && code != -1 {
			r.fail("zombie %s exited %d:\n%s", in.name, code, in.lastLines(8))
		}
	}
	r.extra = kept
}

func (r *runner) unexpectedExit(m int, in *instance, what string) {
	r.fail("%s %s", in.name, what)
	r.unexpected++
	if r.unexpected <= 3 && !r.stopping() {
		r.restart(m)
	}
}

// activeFatal is the fatal fault, if it hit a request and is still on.
// liftedFatal returns the fatal fault once it hit and was lifted.
func (r *runner) liftedFatal() (ReqFault, bool) {
	if !r.inj.fatalSeen() {
		return ReqFault{}, false
	}
	r.inj.mu.Lock()
	off := r.inj.fatalOff
	r.inj.mu.Unlock()
	if !off {
		return ReqFault{}, false
	}
	for _, f := range r.p.Faults {
		if f.Fatal {
			return f, true
		}
	}
	return ReqFault{}, false
}

func (r *runner) activeFatal() (ReqFault, bool) {
	if !r.inj.fatalSeen() {
		return ReqFault{}, false
	}
	r.inj.mu.Lock()
	off := r.inj.fatalOff
	r.inj.mu.Unlock()
	if off {
		return ReqFault{}, false
	}
	for _, f := range r.p.Faults {
		if f.Fatal {
			return f, true
		}
	}
	return ReqFault{}, false
}

// fatalBound is how long a fatal fault may hit (on an idle machine) before
// an instance stops on it. An input's fetch refused for good surfaces when the
// pipeline takes its next batch: an output waiting meanwhile (state cache
// writes answered NOT_LEADER_FOR_PARTITION five times, each retried after a
// metadata refresh) holds it back for 25 s.
const fatalBound = 40 * time.Second

// checkFatalBound fails the run when a fatal fault has hit for fatalBound
// (stretched by the load) without an instance stopping on it (retried
// forever), and lifts it.
func (r *runner) checkFatalBound() {
	f, ok := r.activeFatal()
	if !ok {
		return
	}
	if r.fatalSince.IsZero() {
		r.fatalSince = time.Now()
		return
	}
	if bound := r.load.bound(fatalBound); time.Since(r.fatalSince) > bound {
		r.fail("the fatal fault %s hit, and no instance stopped on it within %s%s", f, bound, &r.load)
		r.inj.liftFatal()
	}
}

func (r *runner) stopping() bool { return r.stoppingNow }

// finished reports whether the run is over: every member's bounded run
// ended; in k2k-members, the group committed the input's ends, after which
// the members are stopped.
func (r *runner) finished() bool {
	if len(r.timers) > 0 {
		return false
	}
	if r.p.Mode.members() {
		if !r.lag0() {
			return false
		}
		// Every member's output finished its start, so that what a
		// crashed predecessor left open is aborted before the stop; and
		// no member is stopping on a fatal error: it exits, and the one
		// restarted after an in-doubt stop aborts, in its start, the
		// other slots' epochs the stop left open.
		for _, in := range r.live {
			if in != nil && !in.exited() && (!in.outputReady() || in.fatalLine() != "") {
				return false
			}
		}
		return true
	}
	for m := range r.live {
		if !r.done[m] {
			return false
		}
	}
	for _, in := range r.extra {
		if !in.exited() {
			return false
		}
	}
	return true
}

// stopAll stops what still runs at the end: SIGTERM (members of an unbounded
// run; they must stop within the shutdown timeout), then SIGKILL.
func (r *runner) stopAll() {
	r.stoppingNow = true
	for round := 0; ; round++ {
		r.stopRunning()
		started := len(r.all)
		r.reap()
		if len(r.all) == started || len(r.res.Failures) > 0 {
			// Nothing started again, or the run failed already (a
			// hang): what started is killed with the rest.
			return
		}
		// reap started again a member that stopped in doubt (its
		// SIGTERM's last commit had an unknown outcome): its start
		// resolves that epoch and aborts what the stop left open on its
		// other slots. Let it finish its start, then stop it too.
		if round == 3 {
			r.fail("hang: members still stop in doubt after %d restarts at the end of the run", round+1)
			return
		}
		r.awaitStarts()
	}
}

// awaitStarts waits, within the hang bound of a start (stretched by the
// load), until every running member's output finished its start.
func (r *runner) awaitStarts() {
	bound := r.load.bound(20 * time.Second)
	deadline := time.Now().Add(bound)
	for {
		pending := ""
		for _, in := range r.live {
			if in != nil && !in.exited() && !in.outputReady() {
				pending = in.name
			}
		}
		if pending == "" {
			return
		}
		if time.Now().After(deadline) {
			r.fail("%s, started at the end of the run after an in-doubt stop, did not finish its start within %s%s", pending, bound, &r.load)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stopRunning SIGTERMs what runs and waits for it to exit (SIGKILL after
// stopWait).
func (r *runner) stopRunning() {
	for _, in := range r.all {
		if in.exited() {
			continue
		}
		in.signal(syscall.SIGCONT)
		if !r.st.isReady(in.name) {
			// Still starting: its SIGTERM handler may not be there
			// yet. Nothing to stop gracefully.
			in.kill()
			continue
		}
		in.signal(syscall.SIGTERM)
	}
	for _, in := range r.all {
		if in.exited() {
			continue
		}
		if !in.wait(stopWait) {
			r.fail("%s did not stop within %s of a SIGTERM", in.name, stopWait)
			in.kill()
		}
	}
}

// targetReady reports whether the instance an event hits runs its stream
// (or is gone, and the event will say so).
func (r *runner) targetReady(e Event) bool {
	in := r.live[e.Member]
	return in == nil || in.exited() || r.st.isReady(in.name)
}

// fire executes a process event.
func (r *runner) fire(e Event) {
	if e.Kind == EvRetention {
		r.deleteRecords(e)
		return
	}
	m := e.Member
	in := r.live[m]
	if in == nil || in.exited() {
		r.logf("event %s: member %d not running", e, m)
		return
	}
	r.logf("event %s on %s (progress %.2f)", e, in.name, r.progress())
	switch e.Kind {
	case EvCrash:
		in.kill()
		r.live[m] = nil
		r.res.Stats.Crashes++
		r.restartAfter(m, e.RestartDelay)
	case EvTerm:
		in.signal(syscall.SIGTERM)
		r.res.Stats.Terms++
		d := stopWait
		if !in.wait(d) {
			r.fail("%s did not stop within %s of a SIGTERM", in.name, d)
			in.kill()
		}
		r.live[m] = nil
		code := in.exitCode()
		r.logf("%s exited %d after SIGTERM", in.name, code)
		if code == ExitFatal {
			r.res.Stats.FatalExits++
			if msg := in.fatalLine(); !r.expectedFatal(in, msg) {
				r.fail("%s exited %d after a SIGTERM (a graceful stop exits 0): %q", in.name, code, msg)
			}
		} else if code != 0 {
			r.fail("%s exited %d after a SIGTERM (a graceful stop exits 0):\n%s", in.name, code, in.lastLines(8))
		}
		r.restartAfter(m, e.RestartDelay)
	case EvZombie:
		in.signal(syscall.SIGSTOP)
		r.zombied[m] = true
		r.res.Stats.Zombies++
		r.live[m] = nil
		r.extra = append(r.extra, in)
		if err := r.startMember(m, "z"); err != nil {
			r.fail("zombie rival: %v", err)
			return
		}
		if e.CrashOther {
			r.timers = append(r.timers, timed{time.Now().Add(e.Stall / 2), func() {
				if b := r.live[m]; b != nil && !b.exited() {
					r.logf("crash %s while %s is frozen", b.name, in.name)
					b.kill()
					r.live[m] = nil
					r.res.Stats.Crashes++
					r.restart(m)
				}
			}})
		}
		r.timers = append(r.timers, timed{time.Now().Add(e.Stall), func() {
			r.logf("wake %s", in.name)
			in.signal(syscall.SIGCONT)
		}})
	}
}

// deleteRecords deletes the records of an input partition below a share of
// its end, as retention does: the copy may have read them or not.
func (r *runner) deleteRecords(e Event) {
	at := int64(e.Share * float64(r.ends[e.Partition]))
	req := kmsg.NewPtrDeleteRecordsRequest()
	req.TimeoutMillis = 5000
	t := kmsg.NewDeleteRecordsRequestTopic()
	t.Topic = inTopic
	pt := kmsg.NewDeleteRecordsRequestTopicPartition()
	pt.Partition, pt.Offset = e.Partition, at
	t.Partitions = append(t.Partitions, pt)
	req.Topics = append(req.Topics, t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kresp, err := r.adm.SeedBrokers()[0].Request(ctx, req)
	if err == nil {
		resp := kresp.(*kmsg.DeleteRecordsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && err == nil {
					err = e
				}
			}
		}
	}
	if err != nil {
		r.fail("retention: deleting %s/%d below %d: %v", inTopic, e.Partition, at, err)
		return
	}
	if at > r.deleted[e.Partition] {
		r.res.Stats.Deleted += at - r.deleted[e.Partition]
	}
	r.deleted[e.Partition] = max(r.deleted[e.Partition], at)
	r.logf("retention: deleted %s/%d below offset %d (progress %.2f)", inTopic, e.Partition, at, r.progress())
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[int32]V) []int32 {
	ks := make([]int32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// expectedFatal reports whether a fatal stop of in with message msg is one
// the run expects, and counts it:
//   - the plan's fatal fault is on: the message must name its code;
//   - a fence by another producer, of a member that had a zombie: the
//     newest InitProducerID wins, and a frozen instance that wakes in the
//     middle of its start fences the live one;
//   - a fence with no zombie ever: kfake's coordinator leaves Empty after
//     its transaction timeout aborted an epoch, the state another instance's
//     InitProducerID leaves, so the output takes the abort for a zombie
//     fence (Apache Kafka leaves PrepareAbort or CompleteAbort);
//   - an in-doubt epoch nothing identifies: kfake's DescribeTransactions
//     knows only Ongoing and Empty, so an epoch committed before a crash is
//     identified by the Fetch probe alone, which cannot see past the crashed
//     instance's other open transactions until the transaction timeout
//     aborts them (Apache Kafka answers CompleteCommit); the operator's move
//     is to start again later, which the harness does.
func (r *runner) expectedFatal(in *instance, msg string) bool {
	if f, ok := r.activeFatal(); ok {
		if !strings.Contains(msg, codeName(f.Code)) {
			// A stop on something else before the instance met the
			// fatal fault (it may have been blocked: an input's fetch
			// error surfaces once the pipeline takes its next batch):
			// the next start gets the whole bound to stop on it.
			r.fatalSince = time.Time{}
		}
		if !strings.Contains(msg, codeName(f.Code)) && strings.Contains(msg, "is in doubt: ") && !kfakeUnknown(msg) {
			// The documented stop of an EndTxn whose outcome stayed
			// unknown, before the instance met the fatal fault: the
			// fault stays for the next start.
			r.res.Stats.InDoubtStops++
			r.logf("%s: stopped in doubt (EndTxn outcome unknown) with the fatal fault active; restarting", in.name)
			return true
		}
		if !strings.Contains(msg, codeName(f.Code)) && kfakeFence(msg) && r.zombied[in.member] {
			// Fenced where a zombie ran, before the instance met the
			// fatal fault: the fault stays for the next start.
			r.res.Stats.ZombieFence++
			r.logf("%s: fenced by a zombie's rival or a woken zombie, with the fatal fault active", in.name)
			return true
		}
		if !strings.Contains(msg, codeName(f.Code)) && kfakeFence(msg) {
			// kfake's timeout abort taken for a fence (below), before
			// the instance met the fatal fault: the fault stays for the
			// next start.
			r.res.Stats.KfakeFence++
			r.logf("%s: fenced with no other instance (kfake's timeout abort), with the fatal fault active; restarting", in.name)
			return true
		}
		if !strings.Contains(msg, codeName(f.Code)) {
			hit := ""
			if !r.inj.fatalSeen() {
				hit = " (the fault never hit)"
			}
			r.fail("%s stopped on a fatal error that does not name the injected %s%s: %q", in.name, codeName(f.Code), hit, msg)
		}
		r.inj.liftFatal()
		r.fatalSince = time.Time{}
		return true
	}
	if f, ok := r.liftedFatal(); ok && strings.Contains(msg, codeName(f.Code)) {
		// Another instance (a second group member) got the error
		// before the fault was lifted, and stops on it too.
		return true
	}
	switch {
	case kfakeFence(msg) && r.zombied[in.member]:
		r.res.Stats.ZombieFence++
		r.logf("%s: fenced by a zombie's rival or a woken zombie", in.name)
		return true
	case kfakeFence(msg):
		r.res.Stats.KfakeFence++
		r.logf("%s: fenced with no other instance (kfake's timeout abort); restarting", in.name)
		return true
	case strings.Contains(msg, "is in doubt: ") && !kfakeUnknown(msg):
		// The documented stop of an EndTxn whose outcome stayed
		// unknown within commit_timeout: the next start resolves it.
		r.res.Stats.InDoubtStops++
		r.logf("%s: stopped in doubt (EndTxn outcome unknown); restarting", in.name)
		return true
	case kfakeUnknown(msg):
		r.res.Stats.KfakeUnknown++
		r.logf("%s: in doubt, unknown on kfake (a kfake limitation); restarting", in.name)
		return true
	}
	return false
}

// kfakeFence reports a fatal stop on a fence by another producer.
func kfakeFence(msg string) bool {
	return strings.Contains(msg, "was fenced by another producer")
}

// kfakeUnknown reports a fatal stop on an in-doubt epoch nothing identified.
func kfakeUnknown(msg string) bool {
	return strings.Contains(msg, "is in doubt: unknown: the broker and the probe identify nothing")
}

// checkInput reads the filled input back as the broker holds it and checks
// that every record the fill recorded is committed at its recorded offset,
// once, and that nothing else is visible to a read_committed reader. The
// fill cannot take franz-go's word for its commits: v1.22.3 can end a
// transaction it was asked to commit with an abort and return nil (it logs
// "no produce succeeded in this transaction but produces were attempted"),
// seen about once in 4,500 fills on a loaded machine.
func (r *runner) checkInput() error {
	view, err := readCommitted(r.adm, r.addr, inTopic)
	if err != nil {
		return err
	}
	if len(view.open) > 0 {
		return fmt.Errorf("transactions left open on the input: %v", view.open)
	}
	seen := map[int]int64{}
	for _, o := range view.visible {
		i := recordIndex(o.id)
		if i < 0 {
			return fmt.Errorf("%q at offset %d/%d is visible, not a committed record of the fill", o.id, o.partition, o.offset)
		}
		if at, dup := seen[i]; dup {
			return fmt.Errorf("%s at offset %d/%d and %d: committed twice", o.id, o.partition, at, o.offset)
		}
		seen[i] = o.offset
		if want, ok := r.offsetOf[i]; !ok || want != o.offset || recordPartition(r.p, i) != o.partition {
			return fmt.Errorf("%s at offset %d/%d, recorded at %d/%d", o.id, o.partition, o.offset, recordPartition(r.p, i), want)
		}
	}
	var missing []string
	for i := range r.p.Records {
		if _, ok := seen[i]; !ok {
			missing = append(missing, "r"+strconv.Itoa(i))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d records are not committed (%s)", len(missing), r.p.Records, abbrev(missing, 8))
	}
	return nil
}

// abbrev joins the first n of xs, and says how many more there are.
func abbrev(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, " ")
	}
	return strings.Join(xs[:n], " ") + fmt.Sprintf(" and %d more", len(xs)-n)
}
