package output

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/handover"
	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/txnstate"
)

// mirrorEnv is a mirror job between two kfake clusters: the source topic on
// A, its target (renamed or not) and the positions topic on B.
type mirrorEnv struct {
	a, b      []string
	src, dst  string
	group     string
	positions string
	// state, if set, is a kafka_state topic on B for the state cache
	// (durable across streams); else a memory cache.
	state string
	// id prefixes the transactional ids and state topics (unique on a
	// real broker).
	id string
}

const mirrorSrc = "src"

func newMirrorEnv(t testing.TB, parts int32, opts ...kfake.Opt) mirrorEnv {
	t.Helper()
	ca, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(parts, mirrorSrc)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ca.Close)
	cb, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(parts, "copy-"+mirrorSrc)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cb.Close)
	return mirrorEnv{a: ca.ListenAddrs(), b: cb.ListenAddrs(), src: mirrorSrc, dst: "copy-" + mirrorSrc, group: "mirror-g", positions: "mirror-positions", id: "mirror-"}
}

// fillSource writes n records to the source, round-robin over its
// partitions: value "v-<i>"; key "k-<i>", except every 5th (null) and every
// 7th (empty); every 3rd has two headers of one name and one of another;
// every 11th is a tombstone (null value); timestamps are i ms after an
// instant an hour ago. It returns them as produced (with partitions and
// offsets).
func fillSource(t testing.TB, brokers []string, topic string, from, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	// Recent timestamps: on a real broker, records older than its
	// retention (7 days by default) are deleted at its next retention
	// check (every 5 minutes), under the test, source and target alike.
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for j := range recs {
		i := from + j
		r := &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("v-%d", i)), Timestamp: base.Add(time.Duration(i) * time.Millisecond)}
		switch {
		case i%5 == 0:
		case i%7 == 0:
			r.Key = []byte{}
		default:
			r.Key = []byte(fmt.Sprintf("k-%d", i))
		}
		if i%3 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "x", Value: nil}, {Key: "h", Value: []byte("2")}}
		}
		if i%11 == 0 {
			r.Value = nil
		}
		recs[j] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// mirrorYAML is a kafka_native (A) -> kafka_eos mirror (B) stream. extraIn
// and extraOut are added to the input's and output's blocks (lines indented
// by 4), proc to the processors (items indented by 4).
func (e mirrorEnv) mirrorYAML(txnID, extraIn, extraOut, proc string) string {
	return fmt.Sprintf(`
logger: { level: warn }
input:
  kafka_native:
    seed_brokers: [ %[1]s ]
    topics: [ %[3]s ]
    consumer_group: %[4]s
    start_offset: committed
    reset_offset: earliest
    max_batch_records: 7
    commit_period: 50ms
%[7]s
pipeline:
  threads: 1
  processors:
    - mapping: 'root = this.catch(content())'
%[9]s
output:
  kafka_eos:
    seed_brokers: [ %[2]s ]
    transactional_id: %[5]s
    consumer_group: %[4]s
    state_cache: state
    epoch: { interval: 20ms }
    max_in_flight: 4
    transaction_timeout: 10s
    commit_timeout: 2s
    mirror:
      positions_topic: %[6]s
      topics: { %[3]s: %[10]s }
%[8]s
%[11]s`, strings.Join(e.a, ","), strings.Join(e.b, ","), e.src, e.group, txnID, e.positions, extraIn, extraOut, proc, e.dst, e.cacheYAML())
}

func (e mirrorEnv) cacheYAML() string {
	if e.state == "" {
		return "cache_resources:\n  - label: state\n    memory: {}\n"
	}
	return fmt.Sprintf("cache_resources:\n  - label: state\n    kafka_state:\n      seed_brokers: [ %s ]\n      topic: %s\n", strings.Join(e.b, ","), e.state)
}

// mirrorDeadline bounds every wait of the mirror tests for a condition (a
// stream's end, records copied, a fence): generous, since a loaded machine
// is slow, which is never a verdict.
const mirrorDeadline = 3 * time.Minute

// bounded makes the input read to the source's end and stop.
const bounded = "    stop_offset: latest\n"

// checkMirror asserts that the target holds exactly the source's records,
// each in its partition and in its order, with key (null and empty apart),
// value (tombstones kept), headers and timestamp.
func checkMirror(t testing.TB, e mirrorEnv, want int) {
	t.Helper()
	s, d := readRecords(t, e.a, e.src), readRecords(t, e.b, e.dst)
	total := 0
	for p, rs := range s {
		total += len(rs)
		if len(d[p]) != len(rs) {
			t.Fatalf("partition %d: %d records in the target, %d in the source", p, len(d[p]), len(rs))
		}
		for i, r := range rs {
			if err := sameRecord(r, d[p][i]); err != nil {
				t.Fatalf("partition %d record %d (source offset %d): %v", p, i, r.Offset, err)
			}
		}
	}
	n := 0
	for _, rs := range d {
		n += len(rs)
	}
	if n != total || total != want {
		t.Fatalf("target holds %d records, source %d, want %d (source: end offsets %v, last stable offsets %v; target: end offsets %v)",
			n, total, want, sourceEnds(t, e), stableOffsets(t, e.a, e.src), endOffsets(t, e.b, e.dst))
	}
}

// stableOffsets returns the last stable offsets of topic (where a
// read_committed reader stops).
func stableOffsets(t testing.TB, brokers []string, topic string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lsos, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	lsos.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// mirrorSeen records, per run (the count_mirror processor's run field), the
// source partition and offset of every message that reached the pipeline:
// what the input read from the source.
var mirrorSeen = struct {
	sync.Mutex
	runs map[string]map[[2]int64]int
}{runs: map[string]map[[2]int64]int{}}

func init() {
	if err := service.RegisterProcessor("count_mirror", service.NewConfigSpec().Field(service.NewStringField("run")),
		func(pc *service.ParsedConfig, _ *service.Resources) (service.Processor, error) {
			run, err := pc.FieldString("run")
			return countProc{run}, err
		}); err != nil {
		panic(err)
	}
}

type countProc struct{ run string }

func (c countProc) Process(_ context.Context, m *service.Message) (service.MessageBatch, error) {
	mirrorSeen.Lock()
	defer mirrorSeen.Unlock()
	if mirrorSeen.runs[c.run] == nil {
		mirrorSeen.runs[c.run] = map[[2]int64]int{}
	}
	if r, ok := handover.RecordOf(m); ok {
		mirrorSeen.runs[c.run][[2]int64{int64(r.Partition), r.Offset}]++
		return service.MessageBatch{m}, nil
	}
	// An Arrow message: its rows' offsets.
	p, _ := m.MetaGetMut("kafka_partition")
	first, _ := m.MetaGetMut("kafka_first_offset")
	last, _ := m.MetaGetMut("kafka_last_offset")
	pi, _ := p.(int64)
	fi, _ := first.(int64)
	li, _ := last.(int64)
	for o := fi; o <= li; o++ {
		mirrorSeen.runs[c.run][[2]int64{pi, o}]++
	}
	return service.MessageBatch{m}, nil
}

func (countProc) Close(context.Context) error { return nil }

// countYAML is the count_mirror processor item for run.
func countYAML(run string) string { return fmt.Sprintf("    - count_mirror: { run: %q }\n", run) }

// runSeq makes runName's names unique in the test binary: -count=N runs a
// test again under the same name, and a run's counts must start empty.
var runSeq atomic.Int64

// runName names one stream's count_mirror run.
func runName(t testing.TB, what string) string {
	return fmt.Sprintf("%s/%s#%d", t.Name(), what, runSeq.Add(1))
}

// seen returns the source records run read (each once).
func seen(run string) map[[2]int64]int {
	mirrorSeen.Lock()
	defer mirrorSeen.Unlock()
	return maps.Clone(mirrorSeen.runs[run])
}

// positionsOf reads the positions topic on B (read_committed).
func positionsOf(t testing.TB, e mirrorEnv) txnstate.Positions {
	t.Helper()
	var st txnstate.Positions
	for _, r := range readCommittedRecords(t, e.b, e.positions, 10*time.Second, time.Minute) {
		pr, err := txnstate.ParsePositionRecord(r.Key, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		st.Apply(pr)
	}
	return st
}

func sourceEnds(t testing.TB, e mirrorEnv) map[int32]int64 {
	t.Helper()
	return endOffsets(t, e.a, e.src)
}

// TestMirrorCopyAndResume: a bounded mirror copies every record to the same
// partition of the renamed target with its key, value, headers and
// timestamp; the positions topic on B holds every partition's end, the
// source group on A the same (after the fact). A second run after more
// records were written reads only those from A (the positions, not a
// replay) and copies them once.
func TestMirrorCopyAndResume(t *testing.T) { testMirrorCopyAndResume(t, newMirrorEnv(t, 3)) }

func testMirrorCopyAndResume(t *testing.T, e mirrorEnv) {
	fillSource(t, e.a, e.src, 0, 200)
	run1, run2 := runName(t, "1"), runName(t, "2")
	runStream(t, e.mirrorYAML(e.id+"resume", bounded, "", countYAML(run1)), mirrorDeadline)
	checkMirror(t, e, 200)
	if got := len(seen(run1)); got != 200 {
		t.Fatalf("first run read %d records, want 200", got)
	}
	st := positionsOf(t, e)
	for p, end := range sourceEnds(t, e) {
		if n, ok := st.Next(txnstate.SourcePartition{Topic: e.src, Partition: p}); !ok || n != end {
			t.Fatalf("partition %d: position %d (%v), want the end %d", p, n, ok, end)
		}
	}
	wait(t, mirrorDeadline, "the group's offsets on A", func() bool {
		offs := groupOffsets(t, e.a, e.group, e.src)
		for p, end := range sourceEnds(t, e) {
			if offs[p] != end {
				return false
			}
		}
		return true
	})

	fillSource(t, e.a, e.src, 200, 60)
	runStream(t, e.mirrorYAML(e.id+"resume", bounded, "", countYAML(run2)), mirrorDeadline)
	checkMirror(t, e, 260)
	if got := len(seen(run2)); got != 60 {
		t.Fatalf("second run read %d records from A, want the 60 new ones", got)
	}
}

// TestMirrorArrow: the same mirror with Arrow batches (the input's format:
// arrow, rows written whole per message): an exact copy.
func TestMirrorArrow(t *testing.T) { testMirrorArrow(t, newMirrorEnv(t, 2)) }

func testMirrorArrow(t *testing.T, e mirrorEnv) {
	fillSource(t, e.a, e.src, 0, 150)
	runStream(t, e.mirrorYAML(e.id+"arrow", bounded+"    format: arrow\n", "", ""), mirrorDeadline)
	checkMirror(t, e, 150)
	fillSource(t, e.a, e.src, 150, 40)
	runStream(t, e.mirrorYAML(e.id+"arrow", bounded+"    format: arrow\n", "", ""), mirrorDeadline)
	checkMirror(t, e, 190)
}

// mirrorBatch and mirrorInFlight are the batch size and max_in_flight of
// mirrorYAML: at a crash, at most the batches in flight and the one in the
// pipeline were read and not committed.
const (
	mirrorBatch    = 7
	mirrorInFlight = 4
)

// TestMirrorCrash: the mirror stops dead (clients closed, nothing ended, as a
// crash) at each point of an epoch's commit sequence, then a new stream on the
// same state cache finishes the copy: every record exactly once, in order,
// and the restart, half way through the copy, reads again from A at most
// what was in flight at the crash (the positions committed with the epochs
// before it, or with the crashed one when its commit is resumed or found),
// never the copy so far.
func TestMirrorCrash(t *testing.T) {
	testMirrorCrash(t, func(t *testing.T) mirrorEnv { return newMirrorEnv(t, 3) })
}

func testMirrorCrash(t *testing.T, env func(t *testing.T) mirrorEnv) {
	for _, tc := range []struct {
		name string
		step commitStep
	}{
		{"before-prepare", stepProduced}, // aborted at restart: replayed
		{"after-prepare", stepPrepared},  // resumed at restart
		{"after-endtxn", stepEnded},      // found committed at restart
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env(t)
			e.state = e.id + "crash-state"
			const n = 2000
			fillSource(t, e.a, e.src, 0, n)
			run1, run2 := runName(t, "1"), runName(t, "2")
			crashed := make(chan struct{})
			var atCrash map[[2]int64]int
			// open: the source records of the epochs that had not
			// committed at the crash (those after the crashed one, and
			// the crashed one itself unless its EndTxn went through:
			// after PREPARE the restart commits it, or aborts it when
			// the broker timed it out first); epochs: their number; held: the
			// batches of every live epoch at the crash (the output's
			// unacknowledged batches that joined one); largest: the
			// largest epoch of the run, in source records.
			var open, epochs, held, largest int
			testOutputHook = func(o *output) {
				o.hooks = &testHooks{atStep: func(step commitStep, ep uint64) error {
					o.mu.Lock()
					defer o.mu.Unlock()
					for _, l := range o.live {
						size := 0
						for _, b := range l.batches {
							size += len(b.batch)
						}
						largest = max(largest, size)
					}
					if step != tc.step || atCrash != nil || len(seen(run1)) < n/2 {
						return nil
					}
					atCrash = seen(run1)
					for _, l := range o.live {
						held += len(l.batches)
						if l.n > ep || (l.n == ep && step != stepEnded) {
							epochs++
							for _, b := range l.batches {
								open += len(b.batch)
							}
						}
					}
					close(crashed)
					return errCrash
				}}
			}
			s := buildStream(t, e.mirrorYAML(e.id+"crash", bounded, "", countYAML(run1)+"    - sleep: { duration: 2ms }\n"))
			done := make(chan error, 1)
			go func() { done <- s.Run(context.Background()) }()
			select {
			case <-crashed:
			case err := <-done:
				t.Fatalf("the stream ended before the crash: %v", err)
			case <-time.After(mirrorDeadline):
				t.Fatalf("no crash within %v", mirrorDeadline)
			}
			testOutputHook = nil
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = s.Stop(sctx)
			cancel()
			<-done
			if len(atCrash) >= n {
				t.Fatalf("the first run read everything (%d) before its crash", len(atCrash))
			}

			runStream(t, e.mirrorYAML(e.id+"crash", bounded, "", countYAML(run2)), mirrorDeadline)
			checkMirror(t, e, n)
			again := 0
			for k := range seen(run2) {
				if atCrash[k] > 0 {
					again++
				}
			}
			t.Logf("crash after %d records read: the restart read %d of them again; %d records in the %d epochs not committed at the crash, %d batches in live epochs, largest epoch %d records, bound %d",
				len(atCrash), again, open, epochs, held, largest, (mirrorInFlight+1)*mirrorBatch)
			// What the restart reads again is what had not committed:
			// the open epochs' records, the batches the output held that
			// had not joined an epoch yet (at most max_in_flight less
			// those that had) and the batch in the pipeline.
			if waiting := mirrorInFlight - held; again > open+(waiting+1)*mirrorBatch {
				t.Fatalf("the restart read %d records again, more than the %d of the epochs open at the crash, %d batches waiting to join one and the batch in the pipeline (%d records each)", again, open, waiting, mirrorBatch)
			}
			// An epoch holds at most max_in_flight batches (a batch is
			// acknowledged only when its epoch commits), and so do the
			// open epochs together: at most one epoch's worth.
			if largest > mirrorInFlight*mirrorBatch || open > mirrorInFlight*mirrorBatch {
				t.Fatalf("an epoch of %d records, %d in the open epochs: more than max_in_flight (%d) batches of %d", largest, open, mirrorInFlight, mirrorBatch)
			}
			if again > (mirrorInFlight+1)*mirrorBatch {
				t.Fatalf("the restart read %d records again, more than one epoch's worth (max_in_flight %d batches of %d) and the batch in the pipeline", again, mirrorInFlight, mirrorBatch)
			}
		})
	}
}

// mirrorMember is the YAML of one member of an unbounded mirror sharing the
// source's partitions through group_membership. Its revoke_ack_timeout is
// generous (20s, under half the default rebalance_timeout of 1m): a member
// whose revoke outlives it releases nothing, and its partitions' next owner
// fences it, which stops it; on a loaded machine a clean rebalance must stay
// clean.
func (e mirrorEnv) mirrorMember(txnID, run string) string {
	return e.mirrorMemberTimed(txnID, run, "    session_timeout: 6s\n    heartbeat_interval: 500ms\n    revoke_ack_timeout: 20s\n")
}

// mirrorMemberTimed is mirrorMember with the group timings given.
func (e mirrorEnv) mirrorMemberTimed(txnID, run, timings string) string {
	return e.mirrorYAML(txnID, "    stop_offset: none\n    group_membership: true\n"+timings, "", countYAML(run)+"    - sleep: { duration: 1ms }\n")
}

// cleanMemberTimings are the group timings of a member that must never be
// dropped by the coordinator on a loaded machine (a run of the race
// detector beside other jobs can pause a process for seconds): a session
// of 30s, a rebalance of 2m and a revoke of 50s, so that every move is a
// release and a claim. A member whose session ended or whose revoke timed
// out is fenced by its partitions' next owner, which is right, but that is
// not the clean rebalance the test checks.
const cleanMemberTimings = "    session_timeout: 30s\n    heartbeat_interval: 1s\n    rebalance_timeout: 2m\n    revoke_ack_timeout: 50s\n"

// waitCopied waits until the target holds n records (read_committed).
func waitCopied(t testing.TB, e mirrorEnv, n int, d time.Duration) {
	t.Helper()
	wait(t, d, fmt.Sprintf("%d records in the target", n), func() bool { return len(readCommittedNow(t, e.b, e.dst)) >= n })
}

// TestMirrorMembersRebalance: two members (each its own transactional_id)
// share the source's partitions; the second joins mid-copy and the first
// leaves mid-copy, so partitions move both ways with batches in flight. Every
// move is a release by the old owner and a claim by the new one: nobody is
// fenced, every record lands exactly once and in order.
func TestMirrorMembersRebalance(t *testing.T) { testMirrorMembersRebalance(t, newMirrorEnv(t, 4)) }

func testMirrorMembersRebalance(t *testing.T, e mirrorEnv) {
	const n = 1500
	fillSource(t, e.a, e.src, 0, n)
	var outs []*output
	var mu sync.Mutex
	testOutputHook = func(o *output) {
		mu.Lock()
		outs = append(outs, o)
		mu.Unlock()
	}
	defer func() { testOutputHook = nil }()
	run := func(s *service.Stream) chan error {
		done := make(chan error, 1)
		go func() { done <- s.Run(context.Background()) }()
		return done
	}
	stopped := map[*service.Stream]bool{}
	stop := func(s *service.Stream, done chan error) {
		if stopped[s] {
			return
		}
		stopped[s] = true
		sctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
		defer cancel()
		if err := s.Stop(sctx); err != nil {
			t.Logf("stop: %v", err)
		}
		<-done
	}
	// A failure stops both members too: a member left running would go on
	// copying (or retrying a fenced start) through the tests after this one.
	var stops []func()
	defer func() {
		for _, f := range stops {
			f()
		}
	}()
	start := func(name string) (*service.Stream, chan error) {
		s := buildStream(t, e.mirrorMemberTimed(e.id+name, t.Name()+"/"+name, cleanMemberTimings))
		done := run(s)
		stops = append(stops, func() { stop(s, done) })
		return s, done
	}
	a, aDone := start("member-a")
	waitCopied(t, e, n/10, mirrorDeadline)
	b, bDone := start("member-b")
	at := len(readCommittedNow(t, e.b, e.dst))
	waitCopied(t, e, at+n/10, mirrorDeadline)
	t.Logf("a leaves at %d of %d", len(readCommittedNow(t, e.b, e.dst)), n)
	stop(a, aDone)
	waitCopied(t, e, n, mirrorDeadline)
	stop(b, bDone)
	checkMirror(t, e, n)
	mu.Lock()
	defer mu.Unlock()
	for _, o := range outs {
		if f := o.m.tally.get(metricMirrorClaims + "/" + mirrorFenced); f != 0 {
			t.Errorf("%s fenced %d writers in a clean rebalance", o.conf.transactionalID, f)
		}
		t.Logf("%s: claimed %d, released %d", o.conf.transactionalID, o.m.tally.get(metricMirrorClaims+"/"+mirrorClaimed), o.m.tally.get(metricMirrorClaims+"/"+mirrorReleased))
	}
}

// TestMirrorDocShowsExample: docs/mirror.md shows the example config as it is,
// whole, comments included (the example's lint runs in cmd/connect-eos,
// TestExamplesLint).
func TestMirrorDocShowsExample(t *testing.T) {
	ex, err := os.ReadFile("../config/examples/kafka_mirror_cross_cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/mirror.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```yaml\n"+string(ex)+"```\n") {
		t.Fatal("docs/mirror.md does not show config/examples/kafka_mirror_cross_cluster.yaml whole, as it is")
	}
}

// TestMirrorMembersKillNine: two member processes (child processes) share
// the source; one is SIGKILLed mid-copy and stays down: the other takes its
// partitions over after its session times out, fencing its transactional ids
// (it released nothing), and resumes them from the killed one's last
// committed positions. Then the killed one restarts (what it held was
// released in its name by the fence), the survivor is killed, and the
// restarted one takes everything over, fencing the survivor. Every record
// exactly once, in order.
//
// A member is killed only once the positions topic shows that it holds
// partitions (a claim committed), and the records are written only once
// the members it is to copy with hold theirs: a member killed before its
// claim committed (a process slow to start on a loaded machine, while the
// other copied alone) holds nothing, and nobody has a reason to fence it.
func TestMirrorMembersKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	testMirrorMembersKillNine(t, newMirrorEnv(t, 4))
}

// memberChild is a member process of testMirrorMembersKillNine; done is
// closed once it exited and was reaped.
type memberChild struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// exited reports whether the child exited.
func (c *memberChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func testMirrorMembersKillNine(t *testing.T, e mirrorEnv) {
	e.state = e.id + "kill-state"
	// The copy in two parts: the first while a and b share the source
	// until a is killed, the second once the restarted a shares it with b
	// until b is killed. Each kill leaves most of its part to copy.
	const first, n = 1500, 3000
	const d = mirrorDeadline
	writer := func(id string) string { return e.id + "kill-" + id }
	member := func(id string) string {
		y := e.mirrorMember(writer(id), "child")
		y = strings.Replace(y, "logger: { level: warn }", "logger: { level: info }", 1)
		return strings.Replace(y, countYAML("child"), "", 1)
	}
	start := func(id string) *memberChild {
		c := &memberChild{name: id, cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &syncBuffer{}, done: make(chan struct{})}
		c.cmd.Env = append(os.Environ(), childEnv+"="+member(id))
		c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = c.cmd.Wait()
			close(c.done)
		}()
		t.Cleanup(func() {
			_ = c.cmd.Process.Kill()
			<-c.done
		})
		return c
	}
	// alive fails the test, with its output, if a child the test counts on
	// exited.
	alive := func(cs ...*memberChild) {
		t.Helper()
		for _, c := range cs {
			if c.exited() {
				t.Fatalf("member %s exited (%v) while the test counts on it:\n%s", c.name, c.cmd.ProcessState, c.out)
			}
		}
	}
	copied := func(want int, cs ...*memberChild) {
		t.Helper()
		wait(t, d, fmt.Sprintf("%d records in the target", want), func() bool {
			alive(cs...)
			return len(readCommittedNow(t, e.b, e.dst)) >= want
		})
	}
	holding := func(cs ...*memberChild) {
		t.Helper()
		wait(t, d, "every running member holding partitions of the source", func() bool {
			alive(cs...)
			for _, c := range cs {
				if heldBy(t, e, writer(c.name)) == 0 {
					return false
				}
			}
			return true
		})
	}
	fenced := func(by *memberChild, id string) bool {
		return strings.Contains(by.out.String(), fmt.Sprintf(`writer \"%s\" holds partitions`, writer(id)))
	}
	kill := func(c *memberChild) {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
		logRecovery(t, c.name, c.out.String())
	}
	progress := func() int { return len(readCommittedNow(t, e.b, e.dst)) }

	a, b := start("a"), start("b")
	holding(a, b)
	fillSource(t, e.a, e.src, 0, first)
	copied(first/5, a, b)
	kill(a)
	t.Logf("a killed at %d of %d", progress(), first)
	wait(t, d, "b fences a to take its partitions over", func() bool {
		alive(b)
		return fenced(b, "a")
	})
	copied(first, b)
	a = start("a")
	holding(a, b)
	fillSource(t, e.a, e.src, first, n-first)
	copied(first+(n-first)/5, a, b)
	kill(b)
	t.Logf("b killed at %d of %d", progress(), n)
	copied(n, a)
	wait(t, d, "the restarted a fencing b to take its partitions over", func() bool {
		alive(a)
		return fenced(a, "b")
	})
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	<-a.done
	for _, l := range strings.Split(a.out.String()+b.out.String(), "\n") {
		if !strings.Contains(l, "mirror:") && !strings.Contains(l, "level=warn") && !strings.Contains(l, "level=error") && !strings.Contains(l, "Assigned") && !strings.Contains(l, "Revoked") {
			continue
		}
		if i := strings.Index(l, "msg="); i >= 0 {
			l = l[i:] // a line the child's logger wrote; any other as it is
		}
		t.Log(l)
	}
	checkMirror(t, e, n)
}

// heldBy returns how many source partitions writer holds (its latest word
// on them a claim or a position) in the positions topic on B, as committed
// now; none while the topic does not exist yet.
func heldBy(t testing.TB, e mirrorEnv, writer string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, e.positions)
	if err != nil {
		t.Fatalf("metadata of the positions topic %s: %v", e.positions, err)
	}
	if !topics.Has(e.positions) {
		return 0
	}
	ends, err := kafkatest.SettledEnds(ctx, cl, e.positions, 0)
	if err != nil {
		t.Fatalf("read_committed reader of %s: %v", e.positions, err)
	}
	byPart, err := kafkatest.ReadCommittedTo(ctx, cl, e.positions, ends)
	if err != nil {
		t.Fatalf("read_committed reader of %s: %v", e.positions, err)
	}
	var st txnstate.Positions
	for _, p := range slices.Sorted(maps.Keys(byPart)) {
		for _, r := range byPart[p] {
			pr, err := txnstate.ParsePositionRecord(r.Key, r.Value)
			if err != nil {
				t.Fatal(err)
			}
			st.Apply(pr)
		}
	}
	return len(st.Held(writer))
}

// TestMirrorConfig: what mirror mode refuses, as a lint rule (connect-eos
// lint) and at construction, each naming the field.
func TestMirrorConfig(t *testing.T) {
	const base = "seed_brokers: [ localhost:9092 ]\ntransactional_id: app\nstate_cache: state\n"
	const mirror = "mirror: { positions_topic: pos }\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"no consumer_group", base + mirror, "field mirror: mirror mode needs consumer_group"},
		{"topic", base + "consumer_group: g\ntopic: out\n" + mirror, "field topic: not used in mirror mode"},
		{"key", base + "consumer_group: g\nkey: k\n" + mirror, "field key: not used in mirror mode"},
		{"partition", base + "consumer_group: g\npartitioner: manual\npartition: '1'\n" + mirror, "field partition: not used in mirror mode"},
		{"partitioner", base + "consumer_group: g\npartitioner: round_robin\n" + mirror, "field partitioner: not used in mirror mode"},
		{"metadata", base + "consumer_group: g\nmetadata: { include_prefixes: [ x ] }\n" + mirror, "field metadata: not used in mirror mode"},
		{"two sources one target", base + "consumer_group: g\nmirror: { positions_topic: pos, topics: { a: z, b: z } }\n", "field mirror.topics: two source topics map to one target topic"},
		{"no topic without mirror", base, "field topic: required (except in mirror mode)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := service.NewStreamBuilder()
			if err := sb.AddOutputYAML("kafka_eos:\n" + indent(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("lint: %v, want %q", err, tc.want)
			}
			pc, err := Spec().ParseYAML(tc.yaml, nil)
			if err == nil {
				_, err = newOutputFromParsed(pc, newResources())
			}
			field := strings.TrimPrefix(strings.SplitN(tc.want, ":", 2)[0], "field ")
			if err == nil || !strings.Contains(err.Error(), "field "+field) {
				t.Errorf("construction: %v, want an error naming field %s", err, field)
			}
		})
	}
	// The example's shape lints and builds.
	pc, err := Spec().ParseYAML(base+"consumer_group: g\nmirror: { positions_topic: pos, topic_prefix: 'a.', topics: { x: y }, create_topics: true }\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOutputFromParsed(pc, newResources())
	if err != nil {
		t.Fatal(err)
	}
	if got := o.conf.mirror.target("x") + " " + o.conf.mirror.target("orders"); got != "y a.orders" {
		t.Fatalf("targets %q, want y a.orders", got)
	}
	if !o.conf.keepsRowTimestamps() || o.conf.partitioner != keoPartitionerManual {
		t.Fatal("mirror mode keeps timestamps and partitions")
	}
}

// mirrorOutput builds and connects a mirror mode output writing e's target,
// as writer txnID, with the source group state fg.
func mirrorOutput(t *testing.T, e mirrorEnv, txnID string, fg *fakeGroup) *output {
	t.Helper()
	return mirrorOutputWith(t, e, txnID, fg, "")
}

// mirrorOutputWith is mirrorOutput with extra lines in the output's block.
func mirrorOutputWith(t *testing.T, e mirrorEnv, txnID string, fg *fakeGroup, extra string) *output {
	t.Helper()
	return mirrorOutputConf(t, e, txnID, fg, "", extra)
}

// mirrorOutputConf is mirrorOutputWith with mirrorExtra (", field: value" ...)
// added to the mirror block.
func mirrorOutputConf(t *testing.T, e mirrorEnv, txnID string, fg *fakeGroup, mirrorExtra, extra string) *output {
	t.Helper()
	o := newTestOutput(t, newResources(), fmt.Sprintf(`
seed_brokers: [ %s ]
transactional_id: %s
consumer_group: %s
state_cache: state
transaction_timeout: 10s
commit_timeout: 2s
epoch: { interval: 20ms }
mirror: { positions_topic: %s, topics: { %s: %s }%s }
%s`, strings.Join(e.b, ","), txnID, e.group, e.positions, e.src, e.dst, mirrorExtra, extra))
	if fg != nil {
		o.Member(fg)
	}
	return o
}

// sourceBatch is n messages read from partition p of e's source at offsets
// [from, from+n), with their records and span (assignment id 1).
func sourceBatch(e mirrorEnv, p int32, from int64, n int) service.MessageBatch {
	b := make(service.MessageBatch, n)
	for i := range b {
		r := &kgo.Record{Topic: e.src, Partition: p, Offset: from + int64(i), Key: []byte("k"), Value: []byte(fmt.Sprintf("v-%d-%d", p, from+int64(i))), Timestamp: time.UnixMilli(1_700_000_000_000)}
		b[i] = handover.WithRecord(service.NewMessage(r.Value), r)
	}
	handover.WithSpan(b, handover.Span{Topic: e.src, Partition: p, From: from, To: from + int64(n), Generation: 1, MemberID: "m", Assignment: 1})
	return b
}

func claim(t *testing.T, o *output, e mirrorEnv, parts ...int32) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	got, err := o.mirror.positions(ctx, handover.PositionsRequest{Partitions: map[string][]int32{e.src: parts}, PartitionCounts: map[string]int32{e.src: 3}, Generation: 1})
	if err != nil {
		t.Fatalf("%s claims %v: %v", o.conf.transactionalID, parts, err)
	}
	return got[e.src]
}

// TestMirrorClaimFencesHolder: a writer that holds a partition (it claimed it
// and committed records of it, and never released it: it missed its revoke)
// is fenced by the next writer's claim before that one reads the position:
// the position read is the holder's last committed one, and the holder can
// commit nothing afterwards (it stops as a zombie does).
func TestMirrorClaimFencesHolder(t *testing.T) {
	e := newMirrorEnv(t, 3)
	fc, restore := catchFatal(t)
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x := mirrorOutput(t, e, "mirror-x", &fakeGroup{owned: map[int32]uint64{0: 1}, gen: 1, member: "m"})
	if got := claim(t, x, e, 0); len(got) != 0 {
		t.Fatalf("first claim: positions %v, want none", got)
	}
	x.StartAt(map[string]map[int32]int64{e.src: {0: 0}})
	if err := x.WriteBatch(ctx, sourceBatch(e, 0, 0, 5)); err != nil {
		t.Fatal(err)
	}
	// y takes partition 0 over while x still believes it owns it.
	y := mirrorOutput(t, e, "mirror-y", &fakeGroup{owned: map[int32]uint64{0: 1}, gen: 2, member: "n"})
	if got := claim(t, y, e, 0); got[0] != 5 {
		t.Fatalf("y's claim: position %v, want x's committed 5", got)
	}
	if f := y.m.tally.get(metricMirrorClaims + "/" + mirrorFenced); f != 1 {
		t.Fatalf("y fenced %d writers, want x", f)
	}
	// x, the zombie, writes on: nothing of it commits, and it stops.
	if err := x.WriteBatch(ctx, sourceBatch(e, 0, 5, 5)); err == nil {
		t.Fatal("the fenced writer committed an epoch")
	}
	wait(t, mirrorDeadline, "x stopped by the fence", func() bool { return fc.err() != nil })
	y.StartAt(map[string]map[int32]int64{e.src: {0: 5}})
	if err := y.WriteBatch(ctx, sourceBatch(e, 0, 5, 5)); err != nil {
		t.Fatal(err)
	}
	got := readCommitted(t, e.b, e.dst)
	if want := []string{"v-0-0", "v-0-1", "v-0-2", "v-0-3", "v-0-4", "v-0-5", "v-0-6", "v-0-7", "v-0-8", "v-0-9"}; !slices.Equal(got, want) {
		t.Fatalf("target %v, want %v", got, want)
	}
	st := positionsOf(t, e)
	if n, _ := st.Next(txnstate.SourcePartition{Topic: e.src, Partition: 0}); n != 10 {
		t.Fatalf("position %d, want 10", n)
	}
	if h := st.Holders(txnstate.SourcePartition{Topic: e.src, Partition: 0}, "mirror-y"); len(h) != 0 {
		t.Fatalf("x still holds partition 0 in the positions topic: %v (y released it in x's name)", h)
	}
}

// TestMirrorConcurrentClaim: two writers claim one partition at once (y reads
// the positions, then x claims and commits, then y writes its claim): y's
// read after its claim sees x's claim and fences x, so at most one of them
// copies.
func TestMirrorConcurrentClaim(t *testing.T) {
	e := newMirrorEnv(t, 3)
	fc, restore := catchFatal(t)
	defer restore()
	x := mirrorOutput(t, e, "mirror-x", &fakeGroup{owned: map[int32]uint64{1: 1}, gen: 1, member: "m"})
	y := mirrorOutput(t, e, "mirror-y", &fakeGroup{owned: map[int32]uint64{1: 1}, gen: 2, member: "n"})
	y.mirror.afterFence = func() {
		y.mirror.afterFence = nil
		claim(t, x, e, 1)
	}
	claim(t, y, e, 1)
	if f := y.m.tally.get(metricMirrorClaims + "/" + mirrorFenced); f != 1 {
		t.Fatalf("y fenced %d writers, want x (its claim came between y's read and y's claim)", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x.StartAt(map[string]map[int32]int64{e.src: {1: 0}})
	if err := x.WriteBatch(ctx, sourceBatch(e, 1, 0, 3)); err == nil {
		t.Fatal("x, fenced by y's claim, committed an epoch")
	}
	wait(t, mirrorDeadline, "x stopped by the fence", func() bool { return fc.err() != nil })
	if got := readCommitted(t, e.b, e.dst); len(got) != 0 {
		t.Fatalf("target %v, want nothing of x", got)
	}
}

// TestMirrorStartBelowPositions: an input that does not start from the
// positions (start_offset other than committed) would copy again what the
// target holds: the output stops with an error naming start_offset.
func TestMirrorStartBelowPositions(t *testing.T) {
	e := newMirrorEnv(t, 3)
	fillSource(t, e.a, e.src, 0, 60)
	runStream(t, e.mirrorYAML(e.id+"below", bounded, "", ""), mirrorDeadline)
	checkMirror(t, e, 60)
	fc, restore := catchFatal(t)
	defer restore()
	y := strings.Replace(e.mirrorYAML(e.id+"below", bounded, "", ""), "start_offset: committed", "start_offset: earliest", 1)
	s := buildStream(t, y)
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	go func() { _ = s.Run(ctx) }()
	wait(t, mirrorDeadline, "the stop", func() bool { return fc.err() != nil })
	if err := fc.err(); !strings.Contains(err.Error(), "start_offset: committed") {
		t.Fatalf("stopped with %v, want an error naming start_offset", err)
	}
	_ = s.Stop(ctx)
	checkMirror(t, e, 60)
}

// TestMirrorReleaseKeepsPosition: a release never lowers its writer's
// recorded position (one record per writer and partition, so a release
// without one would erase it): a revoke of a partition this run never
// claimed writes nothing, and one of a claimed partition carries the
// position committed.
func TestMirrorReleaseKeepsPosition(t *testing.T) {
	e := newMirrorEnv(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fg := &fakeGroup{owned: map[int32]uint64{0: 1}, gen: 1, member: "m"}
	x := mirrorOutput(t, e, "mirror-x", fg)
	claim(t, x, e, 0)
	x.StartAt(map[string]map[int32]int64{e.src: {0: 0}})
	if err := x.WriteBatch(ctx, sourceBatch(e, 0, 0, 5)); err != nil {
		t.Fatal(err)
	}
	fg.revoke(0)
	x.Revoked(ctx, map[string][]int32{e.src: {0}})
	sp := txnstate.SourcePartition{Topic: e.src, Partition: 0}
	st := positionsOf(t, e)
	if n := st.WriterNext(sp, "mirror-x"); n != 5 {
		t.Fatalf("x's release says %d, want 5", n)
	}
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The next run of x is revoked a partition it never claimed.
	x2 := mirrorOutput(t, e, "mirror-x", &fakeGroup{owned: map[int32]uint64{}, gen: 2, member: "m"})
	x2.Revoked(ctx, map[string][]int32{e.src: {0}})
	st = positionsOf(t, e)
	if n := st.WriterNext(sp, "mirror-x"); n != 5 {
		t.Fatalf("x's record says %d after a revoke of a partition it never claimed, want 5", n)
	}
	if n, _ := st.Next(sp); n != 5 {
		t.Fatalf("position %d, want 5", n)
	}
}
