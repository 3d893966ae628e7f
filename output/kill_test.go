package output

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// childEnv carries a stream config to a re-executed test binary, which then
// runs that stream instead of the tests (TestMain): a real process to SIGKILL.
const childEnv = "KAFKA_EOS_TEST_CHILD_YAML"

func TestMain(m *testing.M) {
	if yaml := os.Getenv(childEnv); yaml != "" {
		os.Exit(runChild(yaml))
	}
	code := m.Run()
	for _, stop := range stopAfterTests { // brokers the tests started (hanging_kafka_test.go)
		stop()
	}
	os.Exit(code)
}

func runChild(yaml string) int {
	childHooks()
	sb := service.NewStreamBuilder()
	if err := sb.SetYAML(yaml); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := sb.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// childYAML: generate emits batches of 10 messages "<run>:<batch>:<i>", the
// output writes them in epochs with the kafka_state cache.
func childYAML(brokers []string, topic, txnID, stateTopic, run string, count int) string {
	interval := "1ms"
	if count > 0 {
		interval = ""
	}
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
    max_in_flight: 8
cache_resources:
  - label: state
    kafka_state:
      seed_brokers: [ %s ]
      topic: %s
`, count, interval, run, strings.Join(brokers, ","), topic, txnID, strings.Join(brokers, ","), stateTopic)
}

func startChild(t *testing.T, yaml string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+yaml)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr // the Benthos logger writes to stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stderr
}

// killChild starts a child process running yaml, waits up to timeout for
// progressed (nil: no wait; past the timeout the child is killed and the test
// fails with its output), pauses pause plus a random part of jitter so the
// kill lands at a random point of the commit sequence, SIGKILLs the child,
// reaps it and logs its recovery decisions under name.
func killChild(t *testing.T, name, yaml string, progressed func() bool, timeout, pause, jitter time.Duration) {
	t.Helper()
	cmd, stderr := startChild(t, yaml)
	if progressed != nil {
		deadline := time.Now().Add(timeout)
		for !progressed() {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("%s: no progress in %v:\n%s", name, timeout, stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if jitter > 0 {
		pause += time.Duration(rand.Int64N(int64(jitter)))
	}
	time.Sleep(pause)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	logRecovery(t, name, stderr.String())
}

// runChildToEnd starts a child process running yaml (a bounded input) and
// fails the test unless it exits cleanly within timeout; logs its recovery
// decisions under "final".
func runChildToEnd(t *testing.T, yaml string, timeout time.Duration) {
	t.Helper()
	cmd, stderr := startChild(t, yaml)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("final run: %v\n%s", err, stderr)
		}
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("final run did not finish:\n%s", stderr)
	}
	logRecovery(t, "final", stderr.String())
}

// Crash injection by SIGKILL of a real process, at random points of the
// commit sequence, three times; then a clean run. A read_committed consumer
// must see every batch (and so every epoch) whole or not at all, and every
// restart must recover and carry on.
func TestKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	c := newCluster(t)
	testKillNine(t, c.ListenAddrs(), testTopic, "kill", "kill-state")
}

func testKillNine(t *testing.T, brokers []string, topic, txnID, stateTopic string) {
	countRun := func(run string) (whole, partial int) {
		groups := map[string]int{}
		for _, v := range readCommitted(t, brokers, topic) {
			if strings.HasPrefix(v, run+":") {
				groups[v]++
			}
		}
		for _, n := range groups {
			if n == 10 {
				whole++
			} else {
				partial++
			}
		}
		return whole, partial
	}
	for round := range 3 {
		run := fmt.Sprintf("r%d", round)
		killChild(t, run, childYAML(brokers, topic, txnID, stateTopic, run, 0), nil, 0, 700*time.Millisecond, time.Second)
		whole, partial := countRun(run)
		t.Logf("round %d: killed with %d whole batches visible", round, whole)
		if partial != 0 {
			t.Fatalf("round %d: %d batches partly visible", round, partial)
		}
	}
	// A clean, bounded run after the kills: recovers and delivers all.
	runChildToEnd(t, childYAML(brokers, topic, txnID, stateTopic, "final", 50), 60*time.Second)
	whole, partial := countRun("final")
	if whole != 5 || partial != 0 {
		t.Fatalf("final run: %d whole, %d partial batches, want 5 whole", whole, partial)
	}
	for round := range 3 {
		if _, partial := countRun(fmt.Sprintf("r%d", round)); partial != 0 {
			t.Fatalf("round %d: partial batches after recovery", round)
		}
	}
}

// logRecovery shows the recovery decisions a child took at start.
func logRecovery(t *testing.T, run, stderr string) {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "recovery") || strings.Contains(l, "orphaned") || strings.Contains(l, "level=error") {
			if i := strings.Index(l, "msg="); i >= 0 {
				l = l[i:]
			}
			t.Logf("%s: %s", run, l)
		}
	}
}
