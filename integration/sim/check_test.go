package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCheckerFindsPlantedFaults runs the checker on an output topic with a
// planted fault of every kind it looks for, and on a clean one: each check
// must fire on its fault, and none on the clean topic.
func TestCheckerFindsPlantedFaults(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, outTopic), kfake.SeedTopics(1, inTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	adm, err := harnessClient(addr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p := Plan{Seed: 1, Mode: ModeDedupe, Records: 10, Keys: 2, InPartitions: 1, OutPartitions: 1, ValueMin: 5, ValueMax: 5, MaxInFlight: 1, InputBatch: 1}
	rec := func(i int, batch string) *kgo.Record {
		return &kgo.Record{Topic: outTopic, Key: []byte(recordKey(p, i)), Value: recordValue(p, i),
			Headers: []kgo.RecordHeader{{Key: "sim_batch", Value: []byte(batch)}}}
	}
	txn := func(id string, commit bool, recs ...*kgo.Record) (*kgo.Client, []*kgo.Record) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.DefaultProduceTopic(outTopic))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		res := cl.ProduceSync(ctx, recs...)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var out []*kgo.Record
		for _, r := range res {
			out = append(out, r.Record)
		}
		if commit {
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		}
		return cl, out
	}
	// Key k0 holds the even records, k1 the odd ones. Planted: r3 never
	// written (though acknowledged), r4 written twice, r6 before r2 (key
	// k0 out of order), batch m0/1/3 seen with 2 of its 3 records, an
	// aborted epoch whose recovery was logged as mark-committed, and a
	// transaction left open. Not planted: a committed epoch decided
	// abort-open whose decision was then not written.
	cl, _ := txn("t-a", true, rec(0, "m0/1/3"), rec(1, "m0/2/1"), rec(6, "m0/3/1"), rec(2, "m0/1/3"))
	cl.Close()
	cl, committed := txn("t-b", true, rec(4, "m0/4/1"), rec(5, "m0/5/1"), rec(4, "m0/6/1"), rec(7, "m0/7/1"), rec(8, "m0/8/1"), rec(9, "m0/9/1"))
	cl.Close()
	cl, aborted := txn("t-c", false, rec(9, "m0/10/1"))
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	open, _ := txn("t-d", false, rec(8, "m0/11/1"))
	defer open.Close()

	st, err := newStore(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	for i := range p.Records {
		st.acked[i] = 1
	}
	prepare, _ := json.Marshal(map[string]any{
		"transactional_id": "sim-0-1", "epoch": 7, "producer_id": aborted[0].ProducerID, "state": "PREPARED",
		"partitions": []map[string]any{{"topic": outTopic, "partition": 0, "first_offset": aborted[0].Offset, "pid": aborted[0].ProducerID}},
	})
	st.slotWrites = append(st.slotWrites, prepare)
	// Not a failure: epoch 8 decided abort-open, then not written (its
	// previous owner committed it and wrote COMMITTED before the fence).
	prepare, _ = json.Marshal(map[string]any{
		"transactional_id": "sim-0-2", "epoch": 8, "producer_id": committed[0].ProducerID, "state": "PREPARED",
		"partitions": []map[string]any{{"topic": outTopic, "partition": 0, "first_offset": committed[0].Offset, "pid": committed[0].ProducerID}},
	})
	st.slotWrites = append(st.slotWrites, prepare)
	// Not failures either: committed epochs 9 and 10 decided abort-open by
	// connect attempts that never got their slots ready (one failed and
	// was retried, one was killed): those decisions were never written.
	for _, e := range []int{9, 10} {
		prepare, _ = json.Marshal(map[string]any{
			"transactional_id": "sim-0-0", "epoch": e, "producer_id": committed[0].ProducerID, "state": "PREPARED",
			"partitions": []map[string]any{{"topic": outTopic, "partition": 0, "first_offset": committed[0].Offset, "pid": committed[0].ProducerID}},
		})
		st.slotWrites = append(st.slotWrites, prepare)
	}
	dir := t.TempDir()
	logf := filepath.Join(dir, "m0.log")
	line := `time="x" level=info msg="kafka_eos: recovery: epoch 9 on \"sim-0-0\": abort-open (observed open)"` + "\n" +
		`time="x" level=error msg="Failed to connect to kafka_eos: transactional id \"sim-0-0\": init producer id: broker closed the connection"` + "\n" +
		`time="x" level=info msg="kafka_eos: recovery: epoch 7 on \"sim-0-1\": mark-committed (found committed)"` + "\n" +
		`time="x" level=info msg="kafka_eos: recovery: epoch 8 on \"sim-0-2\": abort-open (observed open)"` + "\n" +
		`time="x" level=info msg="kafka_eos: recovery: slot \"sim-0-2\" holds epoch 8 COMMITTED, written by its previous owner after recovery read epoch 8 there: the decision on epoch 8 is not written over it"` + "\n" +
		`time="x" level=info msg="kafka_eos: 3 slots of \"sim-0\" ready (transaction version 0), next epoch 11"` + "\n" +
		`time="x" level=info msg="kafka_eos: recovery: epoch 10 on \"sim-0-0\": abort-open (observed open)"` + "\n"
	if err := os.WriteFile(logf, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}

	res := &Result{Plan: p}
	r := &runner{p: p, res: res, adm: adm, addr: addr, st: st, all: []*instance{{name: "m0", logf: logf}}, committed: map[int32]int64{}}
	r.check()
	want := []string{
		"transactions left open on the output",
		"acknowledged but not committed (I2): 1 records, e.g. [r3]",
		"lost: 1 input records never reached the output, e.g. [r3]",
		"duplicated in an end-to-end mode: 1 records, e.g. [r4 x2]",
		"order: in key k0, r2 comes after r6",
		"batch m0/1/3 seen in part by read_committed readers: 2 of 3 records",
		`recovery decided epoch 7 on "sim-0-1": mark-committed, but the broker's log says aborted`,
	}
	for _, w := range want {
		found := false
		for _, f := range res.Failures {
			if strings.Contains(f, w) {
				found = true
			}
		}
		if !found {
			t.Errorf("the checker missed %q; it found:\n%s", w, strings.Join(res.Failures, "\n"))
		}
	}
	if len(res.Failures) != len(want) {
		t.Errorf("the checker found %d failures, want %d:\n%s", len(res.Failures), len(want), strings.Join(res.Failures, "\n"))
	}

	// Committed offsets that move backwards.
	k := &runner{p: Plan{Mode: ModeK2K, InPartitions: 1}, res: &Result{}, adm: adm, addr: addr, committed: map[int32]int64{}}
	commit := func(at int64) {
		resp, err := kadm.NewClient(adm).CommitOffsets(ctx, group, kadm.OffsetsFromRecords(kgo.Record{Topic: inTopic, Partition: 0, Offset: at - 1}))
		if err != nil || resp.Error() != nil {
			t.Fatalf("commit: %v %v", err, resp.Error())
		}
	}
	commit(5)
	if _, err := k.pollOffsets(); err != nil {
		t.Fatal(err)
	}
	commit(3)
	if _, err := k.pollOffsets(); err != nil {
		t.Fatal(err)
	}
	if len(k.res.Failures) != 1 || !strings.Contains(k.res.Failures[0], "moved backwards from 5 to 3") {
		t.Errorf("offsets moving backwards: failures %q", k.res.Failures)
	}
}

// TestClassifySeparatesDefects: a failure is counted against the defect
// that explains it, not against a look-alike.
func TestClassifySeparatesDefects(t *testing.T) {
	plainKafka := Plan{Mode: ModePlainKafka}
	members := Plan{Mode: ModePlainKafkaMembers}
	stateAuth := Plan{Mode: ModePlain, StateCache: "kafka_state", Faults: []ReqFault{{Key: kmsg.Produce, Fatal: true, Code: 29}}}
	probe := Plan{Mode: ModeArrow, Faults: []ReqFault{{Key: kmsg.Fetch, Fatal: true, Code: 29}}}
	refusedProduce := []ReqFault{
		{Key: kmsg.Produce, At: 2, Count: 5, Action: ActError, Code: 6},
		{Key: kmsg.Produce, At: 6, Count: 5, Action: ActError, Code: 6},
		{Key: kmsg.Produce, At: 3, Count: 1, Action: ActError, Code: 20},
	}
	for _, c := range []struct {
		r    Result
		f    string
		want string
	}{
		{Result{Plan: plainKafka, Stats: Stats{Zombies: 1}}, "the committed offset of in/2 moved backwards from 65 to 62", "plain-zombie-commit"},
		{Result{Plan: plainKafka}, "the committed offset of in/2 moved backwards from 65 to 62", "offsets-backwards"},
		{Result{Plan: members, Stats: Stats{Zombies: 1}}, "the committed offset of in/2 moved backwards from 65 to 62", "offsets-backwards"},
		// Seed 8238807779827990775: eleven restarts stopped on
		// kfake-unknown-loop; the first instance's waits made the stall
		// hint.
		{Result{Plan: Plan{Mode: ModeMembers, AbortedTxns: 3}, Stats: Stats{KfakeUnknown: 11}}, "hang: the run did not end within 45s (progress 1.00, running [m1 m0.13]; 0 timers, member 0: live m0.13, done false, member 1: live m1, done false) [a batch waits for the batch before it, nacked, over and over]", "kfake-unknown-loop"},
		{Result{Plan: members}, "hang: the run did not end within 45s (progress 1.00, running [m0 m1.13]; 0 timers, member 0: live m0, done false, member 1: live m1.13, done false) [" + stallContradiction + "]", "plain-stale-abort-stop"},
		{Result{Plan: stateAuth}, "the fatal fault Produce#16x-1:TOPIC_AUTHORIZATION_FAILED hit, and no instance stopped on it within 20s", "state-auth-retry"},
		{Result{Plan: probe}, `m0.1 stopped on a fatal error that does not name the injected TOPIC_AUTHORIZATION_FAILED: "fatal: kafka_eos: epoch 11 is in doubt: unknown: the broker and the probe identify nothing"`, "probe-error-hidden"},
		// Seed 6354734720346763460: a stop in doubt with the plan's
		// fatal Fetch fault never hit is not the probe's refusal hidden.
		{Result{Plan: Plan{Mode: ModeK2K, Faults: probe.Faults}}, `m0.1z stopped on a fatal error that does not name the injected TOPIC_AUTHORIZATION_FAILED (the fault never hit): "fatal: kafka_eos: epoch 9 is in doubt: unknown: the broker and the probe identify nothing"`, "offsets-only-unknown"},
		// Seed 1099609616224070459: kfake's timeout abort read as a fence
		// with the plan's fatal Fetch fault active; with a zombie it is not
		// kfake's (ZombieFence covers a fence where a zombie ran).
		{Result{Plan: probe}, `m0.2 stopped on a fatal error that does not name the injected TOPIC_AUTHORIZATION_FAILED: "fatal: kafka_eos: transactional id \"sim-0-0\" was fenced by another producer (is a second instance running with this transactional_id?): PRODUCER_FENCED"`, "kfake-timeout-fence"},
		{Result{Plan: Plan{Mode: ModeMembers, Oversized: []int{3}, Retention: true}}, "hang: the run did not end within 45s", "members-oversized-stall"},
		{Result{Plan: Plan{Mode: ModeK2K, Retention: true}, Stats: Stats{KfakeUnknown: 4, Deleted: 500}}, "hang: the run did not end within 45s", "kfake-unknown-loop"},
		// Seed 9211068402085997459: a member restarted 13 times on
		// kfake-unknown-loop in a plan with an oversized record is the
		// limitation's hang, not members-oversized-stall's.
		{Result{Plan: Plan{Mode: ModeMembers, Oversized: []int{3}}, Stats: Stats{KfakeUnknown: 11}}, "hang: the run did not end within 45s", "kfake-unknown-loop"},
		{Result{Plan: Plan{Mode: ModeK2K}, Stats: Stats{KfakeUnknown: 9}}, "hang: members still stop in doubt after 4 restarts at the end of the run", "kfake-unknown-loop"},
		{Result{Plan: Plan{Mode: ModeK2K, Retention: true}, Stats: Stats{Deleted: 500}}, "hang: the run did not end within 45s", "retention-hang"},
		{Result{Plan: Plan{Mode: ModeMembers, AbortedTxns: 3}, Stats: Stats{CacheFaults: 3}}, "hang: the run did not end within 45s (progress 0.98: in/1 committed 0 of 12, ...)", "offsets-only-abort"},
		// Seed 2912630832260719389, FAIL(offsets-only-abort) in a sweep:
		// an output batch merging in/0's and the given-up in/1's input
		// batches, nacked whole over and over.
		{Result{Plan: Plan{Mode: ModeMembers, AbortedTxns: 3, Batching: 50}, Stats: Stats{Zombies: 1}},
			"hang: the run did not end within 45s (progress 0.98: in/0 committed 302 of 313, ...) [" + stallMixedStale + "]", "members-mixed-stale"},
		// Seed 7928656101515859177, FAIL(dedupe-owed-crawl) in a sweep:
		// kafka_state's writes of the committed dedupe positions unanswered
		// by commit_timeout, one after another, behind injected Produce
		// answers that cost 5s each.
		{Result{Plan: Plan{Mode: ModeDedupe, Batching: 50, Oversized: []int{86}, StateCache: "kafka_state"}, Stats: Stats{KfakeFence: 2, FatalExits: 2}},
			"hang: the run did not end within 45s (progress 0.09, running [m0.1]; 0 timers, member 0: live m0.1, done false) [" + stallStateWrites + "]", "state-write-stall"},
		{Result{Plan: Plan{Mode: ModeDedupe, Batching: 50, Oversized: []int{86}}}, "hang: the run did not end within 45s (progress 0.31, ...)", "dedupe-owed-crawl"},
		// Seed 1548330889915747987 before the fix: every start stopped on
		// recovery's contradiction (the first instance's log also held
		// batches waiting for the batch before them).
		{Result{Plan: Plan{Mode: ModeK2K, CacheFaults: []CacheFault{{Op: "set", At: 3, Count: 1, Slow: time.Second}}}, Stats: Stats{InDoubtStops: 18, FatalExits: 18}},
			"hang: the run did not end within 2m12s (progress 0.01: in/0 committed 5 of 612, ...) [" + stallContradiction + "]", "stale-abort-contradiction"},
		// Seeds 8161861579037314397 and 1327419902656170225, FAIL(new) in
		// sweeps run before dlq-crash-loss was known: a zombie froze the
		// instance between the epoch that committed past the record and
		// the dead-letter route.
		// Seed 7353689995965390664, FAIL(new) in a sweep: the woken
		// zombie re-initialised sim-0-0 after the last start and left a
		// transaction open there.
		{Result{Plan: Plan{Mode: ModeK2K, Oversized: []int{31, 96}, AbortedTxns: 1}, Stats: Stats{Zombies: 1}},
			"transactions left open on the output after every instance stopped: [out/1: producer 5732183019233151618, 5 records from offset 186]", "zombie-rewarm"},
		// A start cut short (as in seed 6936658676135035244, without its
		// zombie): a fatal stop in doubt, then a start with nothing left
		// to read whose recovery never ran.
		{Result{Plan: Plan{Mode: ModePlain}, Stats: Stats{FatalExits: 1}},
			"transactions left open on the output after every instance stopped: [out/2: producer 5732183019233151617, 100 records from offset 387]", "start-cut-short"},
		// Seed 1458363239458492436, FAIL(new) in a sweep: a slow
		// cache set of epoch 4's COMMITTED landed over epoch 6's PREPARE.
		{Result{Plan: Plan{Mode: ModeDedupe, CacheFaults: []CacheFault{{Op: "set", At: 13, Count: 2, Slow: 1547 * time.Millisecond}, {Op: "set", At: 22, Count: 3}}}, Stats: Stats{Crashes: 1}},
			"duplicated in an end-to-end mode: 100 records, e.g. [r500 x2 r501 x2]", "late-write-regress"},
		// Seed 4886304739810381260, FAIL(new) in a sweep: nine Produce
		// requests in a row refused NOT_LEADER_FOR_PARTITION, 5s each.
		{Result{Plan: Plan{Mode: ModeDedupe, Faults: refusedProduce}, Stats: Stats{KfakeFence: 3, FatalExits: 3}},
			"hang: the run did not end within 45s (progress 0.48, running [m0.4]; 0 timers, member 0: live m0.4, done false)", "produce-refresh-wait"},
		// Seed 2536963500243852082, FAIL(new) in a sweep: k2k members,
		// five Produce answers NOT_ENOUGH_REPLICAS (19) held two epochs to
		// their deadline, and the bound ran out at progress 1.00 while
		// the last member started.
		{Result{Plan: Plan{Mode: ModeMembers, Faults: []ReqFault{{Key: kmsg.Produce, At: 7, Count: 5, Action: ActError, Code: 19}}}, Stats: Stats{Zombies: 1, KfakeEvicted: 1, FatalExits: 4}},
			"hang: the run did not end within 45s (progress 1.00, running [m1.1 m0.5]; 0 timers, member 0: live m0.5, done false, member 1: live m1.1, done false)", "produce-refresh-wait"},
		{Result{Plan: Plan{Mode: ModeDedupe, Batching: 3, Faults: refusedProduce}}, "hang: the run did not end within 45s", "dedupe-owed-crawl"},
		{Result{Plan: Plan{Mode: ModeK2K, Retention: true, Faults: refusedProduce}, Stats: Stats{Deleted: 500}}, "hang: the run did not end within 45s", "retention-hang"},
		{Result{Plan: Plan{Mode: ModeK2K, Oversized: []int{125, 244}, Threads: 2}, Stats: Stats{Zombies: 1}}, "the oversized record r125 reached neither the output nor the dead-letter output", "dlq-crash-loss"},
		{Result{Plan: Plan{Mode: ModeMembers, Oversized: []int{114, 150}, Threads: 4}, Stats: Stats{Zombies: 1}}, "the oversized record r114 reached neither the output nor the dead-letter output", "dlq-crash-loss"},
	} {
		c.r.Failures = []string{c.f}
		defects, unmatched := Classify(c.r)
		if len(unmatched) > 0 || len(defects) != 1 || defects[0] != c.want {
			t.Errorf("%s in %s: defects %v, unmatched %v; want %s", c.f, c.r.Plan.Mode, defects, unmatched, c.want)
		}
	}
}

// TestClassifyZombieOnlyHang: a hang of a copy that was over (offsets at the
// ends, the member done) with only a woken zombie still stopping is neither
// offsets-only-abort nor retention-hang, which claimed seed
// 6751914236821000242's in a sweep.
func TestClassifyZombieOnlyHang(t *testing.T) {
	r := Result{Plan: Plan{Mode: ModeK2K, AbortedTxns: 3, Retention: true}, Stats: Stats{Zombies: 2, Deleted: 167},
		Failures: []string{"hang: the run did not end within 45s (progress 1.00, running [m0.2]; 0 timers, member 0: live none, done true, zombie m0.2 exited false)"}}
	if defects, unmatched := Classify(r); len(defects) != 0 || len(unmatched) != 1 {
		t.Errorf("defects %v, unmatched %v; want none and the hang unmatched", defects, unmatched)
	}
	// The same plan with the group behind is still offsets-only-abort
	// and retention-hang.
	r.Failures = []string{"hang: the run did not end within 45s (progress 0.97: in/0 committed 370 of 381, running [m0.7]; 0 timers, member 0: live m0.7, done false)"}
	if defects, unmatched := Classify(r); len(defects) != 2 || len(unmatched) != 0 {
		t.Errorf("defects %v, unmatched %v; want offsets-only-abort and retention-hang", defects, unmatched)
	}
}

// TestOnlyLimits: the fixed set lets a run pass on limitations only, never
// on a defect of the product or a failure nothing explains.
func TestOnlyLimits(t *testing.T) {
	hang := "hang: the run did not end within 45s"
	loop := Result{Plan: Plan{Mode: ModeK2K}, Stats: Stats{KfakeUnknown: 3}, Failures: []string{hang}}
	if !OnlyLimits(loop) {
		t.Errorf("a hang with in-doubt stops on kfake: want limitation only")
	}
	plainZombie := Result{Plan: Plan{Mode: ModePlainKafka}, Stats: Stats{Zombies: 1}, Failures: []string{"the committed offset of in/2 moved backwards from 65 to 62"}}
	if !OnlyLimits(plainZombie) {
		t.Errorf("plain mode's woken zombie moving the group back: want limitation only")
	}
	fenced := `m0.2 stopped on a fatal error that does not name the injected TOPIC_AUTHORIZATION_FAILED: "fatal: kafka_eos: transactional id \"sim-0-0\" was fenced by another producer"`
	if !OnlyLimits(Result{Plan: Plan{Mode: ModeArrow}, Failures: []string{fenced}}) {
		t.Errorf("kfake's timeout abort read as a fence with no zombie: want limitation only")
	}
	for name, r := range map[string]Result{
		"ok":                   {Plan: Plan{Mode: ModeK2K}},
		"hang, no kfake":       {Plan: Plan{Mode: ModeK2K}, Failures: []string{hang}},
		"loop and a loss":      {Plan: Plan{Mode: ModeK2K}, Stats: Stats{KfakeUnknown: 3}, Failures: []string{hang, "lost: 3 records"}},
		"loop and new":         {Plan: Plan{Mode: ModeK2K}, Stats: Stats{KfakeUnknown: 3}, Failures: []string{hang, "something nobody has seen"}},
		"backwards, no zombie": {Plan: Plan{Mode: ModePlainKafka}, Failures: []string{"the committed offset of in/2 moved backwards from 65 to 62"}},
		"fence with a zombie":  {Plan: Plan{Mode: ModeK2K}, Stats: Stats{Zombies: 1}, Failures: []string{fenced}},
	} {
		if OnlyLimits(r) {
			t.Errorf("%s: OnlyLimits = true, want false", name)
		}
	}
}

// TestInputCheckFindsUnlandedFill runs the check of a filled input on a fill
// that landed, and on two that did not land as the runner recorded it: a
// transaction the filler took for committed was aborted (its records are
// missing), and a record committed twice (a duplicate in the input). The
// check must pass the first and name what is wrong in the others.
func TestInputCheckFindsUnlandedFill(t *testing.T) {
	p := Plan{Seed: 7, Mode: ModeK2K, Records: 120, Keys: 7, InPartitions: 2, OutPartitions: 1, ValueMin: 5, ValueMax: 40, AbortedTxns: 1, MaxInFlight: 1, InputBatch: 1}
	newRunner := func(t *testing.T) *runner {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(p.InPartitions, inTopic))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		r := &runner{p: p, c: c, addr: c.ListenAddrs()[0], offsetOf: map[int]int64{}}
		if r.adm, err = harnessClient(r.addr, 2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.adm.Close)
		if err := r.fill(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	produce := func(t *testing.T, r *runner, commit bool, recs ...*kgo.Record) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.addr), kgo.TransactionalID("planted"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(r *runner) error { return r.checkInput() }

	t.Run("landed", func(t *testing.T) {
		if err := check(newRunner(t)); err != nil {
			t.Fatalf("a fill that landed was refused: %v", err)
		}
	})
	t.Run("aborted", func(t *testing.T) {
		r := newRunner(t)
		// Records the runner takes for committed (offsetOf), in a
		// transaction that was aborted.
		var recs []*kgo.Record
		for i := p.Records; i < p.Records+3; i++ {
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: 1, Value: fmt.Appendf(nil, "r%d:", i)})
		}
		produce(t, r, false, recs...)
		r.p.Records += 3
		for i, rec := range recs {
			r.offsetOf[p.Records+i] = rec.Offset
		}
		err := check(r)
		if err == nil || !strings.Contains(err.Error(), "3 of 123 records are not committed") {
			t.Fatalf("an aborted fill transaction was not named: %v", err)
		}
	})
	t.Run("twice", func(t *testing.T) {
		r := newRunner(t)
		produce(t, r, true, &kgo.Record{Topic: inTopic, Partition: 0, Value: recordValue(p, 0)})
		err := check(r)
		if err == nil || !strings.Contains(err.Error(), "r0 at offset") {
			t.Fatalf("a record committed twice was not named: %v", err)
		}
	})
}
