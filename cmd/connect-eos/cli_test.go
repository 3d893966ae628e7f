package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// proc is the built connect-eos binary running in a test, its output kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// output returns everything the process printed so far (stdout and stderr).
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startBin runs the built binary (kafkatest.Binary: $CONNECT_EOS_BIN or a
// fresh build) with args; the process is killed when the test ends.
func startBin(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(kafkatest.Binary(t), args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("connect-eos %s output:\n%s", strings.Join(args, " "), p.output())
		}
	})
	return p
}

// waitOutput waits (generously: the machine may be loaded) until the process
// printed s.
func (p *proc) waitOutput(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(p.output(), s) {
		select {
		case <-p.done:
			t.Fatalf("connect-eos exited before printing %q", s)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect-eos did not print %q", s)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("connect-eos did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

// cpuTime reads the user+system CPU time a running process has used so far.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command name (which is in parentheses and may
	// hold spaces): utime and stime are fields 14 and 15 of the line.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(t, err)
	st, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err)
	const ticksPerSecond = 100 // USER_HZ, 100 on every Linux ABI
	return time.Duration(ut+st) * time.Second / ticksPerSecond
}

func writeConfig(t *testing.T, conf string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(f, []byte(conf), 0o644))
	return f
}

// TestShutdownStaysIdle: a process asked to stop with SIGTERM while its
// output cannot finish a write (the broker holds every produce request
// unanswered) spends the graceful shutdown waiting, not spinning. The stop
// takes the whole shutdown_timeout; the CPU time the process uses meanwhile
// is read from /proc before the signal and from its rusage at exit, and must
// stay far below one core. A loop that re-signalled itself without pause
// used a whole core here.
func TestShutdownStaysIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built binary for several seconds")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "held"))
	require.NoError(t, err)
	release := make(chan struct{})
	var held atomic.Bool
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		held.Store(true)
		cluster.SleepControl(func() { <-release })
		return nil, nil, false
	})
	t.Cleanup(func() { close(release); cluster.Close() })
	conf := writeConfig(t, fmt.Sprintf(`
shutdown_timeout: 6s
http:
  enabled: false
input:
  generate:
    mapping: 'root = "x"'
    interval: 10ms
output:
  kafka_eos:
    seed_brokers: [ %q ]
    topic: held
    transactional_id: spin
    state_cache: c
cache_resources:
  - label: c
    memory: {}
`, cluster.ListenAddrs()[0]))
	p := startBin(t, "run", conf)
	p.waitOutput(t, "Output type kafka_eos is now active")
	kafkatest.Wait(t, time.Minute, held.Load)

	before := cpuTime(t, p.cmd.Process.Pid)
	stopAt := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.wait(t)
	stopping := time.Since(stopAt)
	st := p.cmd.ProcessState
	used := st.UserTime() + st.SystemTime() - before

	t.Logf("stopping took %v and %v of CPU time", stopping.Round(time.Millisecond), used)
	require.Greater(t, stopping, 3*time.Second,
		"the stop ended before the output gave up: this test no longer measures a long shutdown")
	require.Less(t, float64(used), 0.25*float64(stopping),
		"the process used %v of CPU in %v while stopping", used, stopping)
}

// scanLines returns the lines of s that contain sub.
func scanLines(s, sub string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			out = append(out, sc.Text())
		}
	}
	return out
}
