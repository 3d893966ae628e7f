package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/txnstate"
)

// readSlotFresh reads slot n's record of txnID as a new process would: a
// kafka_state cache of its own on stateTopic.
func readSlotFresh(t *testing.T, brokers []string, stateTopic, txnID string, n int) (txnstate.Record, bool) {
	t.Helper()
	s := &stateStore{res: kafkaStateResources(t, brokers, stateTopic), cache: "state", prefix: txnID}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, ok, err := s.readSlot(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return r, ok
}

// A stalled zombie's late state-cache writes never overwrite the live
// instance's slot record. A flushes epoch 2 and stalls before its PREPARE; B
// starts (fencing A), commits epoch 2 on the same slot and crashes before its
// COMMITTED; A wakes and writes its PREPARE for that slot, then is fenced at
// its EndTxn. The next start must find B's epoch 2 (committed), not A's. On
// the original code A's plain Set overwrote B's PREPARE: the restart resolved
// A's epoch (aborted) and never saw B's commit (in dedupe mode its positions
// were lost, a duplicate on the next replay).
func TestStalledZombieKfake(t *testing.T) {
	for _, tv := range kfakeTVs {
		t.Run(tv.name, func(t *testing.T) {
			c := newCluster(t, tv.opts...)
			testStalledZombieInProcess(t, c.ListenAddrs(), testTopic, "zombie", "zombie-state")
		})
	}
}

func testStalledZombieInProcess(t *testing.T, brokers []string, topic, txnID, stateTopic string) {
	fc, restore := catchFatal(t)
	defer restore()
	yaml := yamlFor(brokers, topic, txnID, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)
	if err := a.WriteBatch(ctx, batchOf("a1", 2)); err != nil {
		t.Fatal(err)
	}
	stalled, wake := make(chan struct{}), make(chan struct{})
	a.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
		if s == stepProduced && n == 2 {
			close(stalled)
			<-wake // A stalls after its flush, before its PREPARE
		}
		return nil
	}}
	aDone := make(chan error, 1)
	go func() { aDone <- a.WriteBatch(ctx, batchOf("a2", 2)) }()
	<-stalled

	b := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)
	b.hooks = crashAt(stepEnded, 2) // committed, then crashed before COMMITTED
	if err := b.WriteBatch(ctx, batchOf("b2", 2)); !errors.Is(err, errCrash) {
		t.Fatalf("B: %v, want the crash after its commit", err)
	}
	slot := txnstate.SlotFor(2, len(b.slots))
	recB, ok := readSlotFresh(t, brokers, stateTopic, txnID, slot)
	if !ok || recB.Epoch != 2 || recB.State != txnstate.Prepared {
		t.Fatalf("B's record %+v (found %v), want epoch 2 PREPARED", recB, ok)
	}

	close(wake)
	select {
	case err := <-aDone:
		if err == nil {
			t.Fatal("the zombie's epoch was acked")
		}
		t.Logf("A: %v", err)
	case <-ctx.Done():
		t.Fatal("A never settled")
	}
	if fc.err() == nil {
		t.Fatal("A did not stop as a zombie")
	}

	restore()
	restore = func() {}
	c := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yaml)
	got, _ := slotRecord(t, c, slot)
	if got.Epoch != 2 || got.ProducerID != recB.ProducerID || got.ProducerEpoch != recB.ProducerEpoch || got.State != txnstate.Committed {
		t.Fatalf("after the restart slot %d holds %+v, want B's epoch 2 (producer %d/%d) found committed", slot, got, recB.ProducerID, recB.ProducerEpoch)
	}
	visible := map[string]int{}
	for _, v := range readCommitted(t, brokers, topic) {
		visible[v]++
	}
	if visible["b2-0"] != 1 || visible["b2-1"] != 1 || visible["a2-0"] != 0 {
		t.Fatalf("visible %v, want B's epoch 2 once and nothing of A's", visible)
	}
}

// Child process hooks (see runChild): childStallEnv "<epoch>:<file>" makes the
// child print "EOS-STALL <epoch>" once that epoch is flushed, before its
// PREPARE, and wait there until file exists (the parent stops it with
// SIGSTOP meanwhile); childCrashEnv "<epoch>" makes it exit at once (a crash)
// after that epoch's EndTxn(commit) succeeded, before its COMMITTED. A fatal
// stop exits the child with code 3, as the binary does.
const (
	childStallEnv = "KAFKA_EOS_TEST_STALL"
	childCrashEnv = "KAFKA_EOS_TEST_CRASH"
)

func childHooks() {
	var stallAt, crashAt uint64
	var release string
	if v := os.Getenv(childStallEnv); v != "" {
		e, f, _ := strings.Cut(v, ":")
		stallAt, _ = strconv.ParseUint(e, 10, 64)
		release = f
	}
	if v := os.Getenv(childCrashEnv); v != "" {
		crashAt, _ = strconv.ParseUint(v, 10, 64)
	}
	if stallAt == 0 && crashAt == 0 {
		return
	}
	fatal.SetHandler(func(err error) {
		fmt.Println("EOS-FATAL", err)
		os.Exit(3)
	})
	testOutputHook = func(o *output) {
		o.hooks = &testHooks{atStep: func(s commitStep, n uint64) error {
			switch {
			case s == stepProduced && n == stallAt:
				fmt.Println("EOS-STALL", n)
				for {
					if _, err := os.Stat(release); err == nil {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
			case s == stepEnded && n == crashAt:
				fmt.Println("EOS-CRASH", n)
				os.Exit(137)
			}
			return nil
		}}
	}
}

// syncBuffer is a bytes.Buffer safe to read while a child writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChildEnv(t *testing.T, yaml string, env ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+yaml), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out
}

// waitExit waits up to d for cmd to exit and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, out *syncBuffer, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("child still running after %v:\n%s", d, out)
		return -1
	}
}

// zombieChildYAML: generate emits batches of 10 messages "<run>:<batch>",
// count in all, one batch per interval, one batch in flight: one epoch per
// batch.
func zombieChildYAML(brokers []string, topic, txnID, stateTopic, run string, count int, interval string) string {
	return fmt.Sprintf(`
logger: { level: info }
input:
  generate:
    count: %d
    interval: "%s"
    batch_size: 10
    mapping: 'root = "%s:" + ((counter() - 1) / 10).floor().string()'
output:
  kafka_eos:
    seed_brokers: [ %s ]
    topic: %s
    transactional_id: %s
    state_cache: state
    epoch: { interval: 20ms }
    max_in_flight: 1
cache_resources:
  - label: state
    kafka_state:
      seed_brokers: [ %s ]
      topic: %s
`, count, interval, run, strings.Join(brokers, ","), topic, txnID, strings.Join(brokers, ","), stateTopic)
}

// The stalled zombie with real processes: A flushes epoch 2 and is stopped
// (SIGSTOP) before its PREPARE; B starts (fencing A), commits epoch 2 on the
// same slot and crashes (exits) before its COMMITTED; A is continued
// (SIGCONT), writes its late PREPARE and is fenced. The restart finds B's
// epoch 2 committed.
func TestStalledZombieProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	c := newCluster(t)
	testStalledZombieProcess(t, c.ListenAddrs(), testTopic, "zproc", "zproc-state")
}

func TestKafkaStalledZombieProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	forEachKafka(t, func(t *testing.T, env kafkaEnv) {
		testStalledZombieProcess(t, env.brokers, env.topic, env.txnID, env.stateTopic(t))
	})
}

func testStalledZombieProcess(t *testing.T, brokers []string, topic, txnID, stateTopic string) {
	release := filepath.Join(t.TempDir(), "release")
	a, aOut := startChildEnv(t, zombieChildYAML(brokers, topic, txnID, stateTopic, "A", 30, "300ms"), childStallEnv+"=2:"+release)
	kafkatest.Wait(t, 60*time.Second, func() bool { return strings.Contains(aOut.String(), "EOS-STALL 2") })
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b, bOut := startChildEnv(t, zombieChildYAML(brokers, topic, txnID, stateTopic, "B", 10, ""), childCrashEnv+"=2")
	if code := waitExit(t, b, bOut, 60*time.Second); code != 137 || !strings.Contains(bOut.String(), "EOS-CRASH 2") {
		t.Fatalf("B exited %d, want its crash after epoch 2's commit:\n%s", code, bOut)
	}
	slot := txnstate.SlotFor(2, 2)
	recB, ok := readSlotFresh(t, brokers, stateTopic, txnID, slot)
	if !ok || recB.Epoch != 2 || recB.State != txnstate.Prepared {
		t.Fatalf("B's record %+v (found %v), want epoch 2 PREPARED", recB, ok)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, a, aOut, 90*time.Second); code != 3 || !strings.Contains(aOut.String(), "fenced") {
		t.Fatalf("A exited %d, want a fatal stop as a zombie:\n%s", code, aOut)
	}
	logRecovery(t, "A", aOut.String())

	c := newTestOutput(t, kafkaStateResources(t, brokers, stateTopic), yamlFor(brokers, topic, txnID, ""))
	got, _ := slotRecord(t, c, slot)
	if got.Epoch != 2 || got.ProducerID != recB.ProducerID || got.ProducerEpoch != recB.ProducerEpoch || got.State != txnstate.Committed {
		t.Fatalf("after the restart slot %d holds %+v, want B's epoch 2 (producer %d/%d) found committed", slot, got, recB.ProducerID, recB.ProducerEpoch)
	}
	visible := map[string]int{}
	for _, v := range readCommitted(t, brokers, topic) {
		visible[v]++
	}
	if visible["B:0"] != 10 || visible["A:0"] != 10 || visible["A:1"] != 0 {
		t.Fatalf("visible %v, want A's epoch 1 and B's epoch 2 whole, nothing of A's epoch 2", visible)
	}
}

// The owner token grows with the producer epoch and across a change of
// producer id (the TV2 epoch limit hands out a new id at epoch 0, and kfake
// draws ids at random): a later owner, which starts from the stored record's
// gen, always holds a higher token.
func TestSlotFenceOrder(t *testing.T) {
	a := &slot{}
	t1 := a.fence(900, 32766)
	t2 := a.fence(17, 0) // a new producer id, lower in value, at the limit
	if t2 <= t1 {
		t.Fatalf("token %x after the producer id changed, not above %x", t2, t1)
	}
	// A new owner reads the record a wrote last (producer 17, token t2)
	// and its InitProducerID bumps producer 17's epoch.
	b := &slot{fenceGen: txnstate.FenceGen(t2), fencePID: 17}
	if tb := b.fence(17, 1); tb <= t2 {
		t.Fatalf("new owner's token %x, not above %x", tb, t2)
	}
	// Or it got another producer id (the limit again): a new gen.
	c := &slot{fenceGen: txnstate.FenceGen(t2), fencePID: 17}
	if tc := c.fence(3, 0); tc <= t2 {
		t.Fatalf("new owner's token %x after a new producer id, not above %x", tc, t2)
	}
}
