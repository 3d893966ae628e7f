package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
	return startBinEnv(t, nil, args...)
}

// startBinEnv is startBin with env added to the process's environment.
func startBinEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(kafkatest.Binary(t), args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
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
	code := p.wait(t)
	stopping := time.Since(stopAt)
	st := p.cmd.ProcessState
	used := st.UserTime() + st.SystemTime() - before

	t.Logf("stopping took %v and %v of CPU time", stopping.Round(time.Millisecond), used)
	require.Greater(t, stopping, 3*time.Second,
		"the stop ended before the output gave up: this test no longer measures a long shutdown")
	require.Less(t, float64(used), 0.25*float64(stopping),
		"the process used %v of CPU in %v while stopping", used, stopping)
	// A stop whose output did not finish within shutdown_timeout still
	// exits 0, saying so (docs/operations.md, exit codes).
	require.Equal(t, 0, code)
	require.Contains(t, p.output(), "Some components prevented forced termination")
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

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// httpStatus waits until addr answers (generously) and returns the status of
// method on path.
func httpStatus(t *testing.T, method, url, body string) int {
	t.Helper()
	var lastErr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	t.Fatalf("%s %s: %v", method, url, lastErr)
	return 0
}

// readyStatus is httpStatus of GET url (a /ready endpoint), asked again while
// it answers 404: Benthos' HTTP server listens before the stream is built, and
// /ready is registered by the stream, so a first answer can be a 404 from a
// server that has no /ready yet.
func readyStatus(t *testing.T, url string) int {
	t.Helper()
	code := http.StatusNotFound
	for deadline := time.Now().Add(60 * time.Second); code == http.StatusNotFound && time.Now().Before(deadline); {
		if code = httpStatus(t, "GET", url, ""); code == http.StatusNotFound {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return code
}

const idleStream = `
input:
  generate:
    mapping: 'root = "x"'
    interval: 1h
output:
  drop: {}
`

// TestHTTPListensOnLoopbackByDefault: with no http section the server binds
// to 127.0.0.1:4195 (Benthos' own default is 0.0.0.0:4195, every interface).
// The log line names the address before the server listens, so this holds
// even when another process has the port.
func TestHTTPListensOnLoopbackByDefault(t *testing.T) {
	conf := writeConfig(t, idleStream)
	p := startBin(t, "run", conf)
	p.waitOutput(t, "Listening for HTTP requests at:")
	require.Contains(t, p.output(), "Listening for HTTP requests at: http://"+DefaultHTTPAddress)

	echo, err := exec.Command(kafkatest.Binary(t), "echo", conf).CombinedOutput()
	require.NoError(t, err, "%s", echo)
	require.Contains(t, string(echo), "address: "+DefaultHTTPAddress)
}

// TestHTTPAddressFromConfig: an address in the config is used as written,
// every interface included.
func TestHTTPAddressFromConfig(t *testing.T) {
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	p := startBin(t, "run", writeConfig(t, "http:\n  address: 0.0.0.0:"+port+"\n"+idleStream))
	p.waitOutput(t, "Listening for HTTP requests at: http://0.0.0.0:"+port)
	require.Equal(t, http.StatusOK, readyStatus(t, "http://127.0.0.1:"+port+"/ready"))
}

// commandStream is a stream config that would run a shell command (touch a
// file) if the binary had Benthos' command processor.
func commandStream(marker string) string {
	return fmt.Sprintf(`
input:
  generate:
    mapping: 'root = "x"'
    count: 1
pipeline:
  processors:
    - command:
        name: touch
        args_mapping: '[ %q ]'
output:
  drop: {}
`, marker)
}

// TestStreamsAPIIsOptIn: `streams` serves no stream API unless started with
// --api; with it, the API works but a stream config that would run a command
// is refused (the binary has no command or subprocess components) and
// nothing runs.
func TestStreamsAPIIsOptIn(t *testing.T) {
	addr := freeAddr(t)
	obs := writeConfig(t, "http:\n  address: "+addr+"\n")

	off := startBin(t, "streams", "-o", obs)
	off.waitOutput(t, "Listening for HTTP requests at:")
	require.Equal(t, http.StatusOK, readyStatus(t, "http://"+addr+"/ready"))
	require.Equal(t, http.StatusNotFound, httpStatus(t, "GET", "http://"+addr+"/streams", ""))
	require.Contains(t, off.output(), "start with `streams --api`")
	require.NoError(t, off.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, off.wait(t))

	on := startBin(t, "streams", "--api", "-o", obs)
	on.waitOutput(t, "Listening for HTTP requests at:")
	require.Equal(t, http.StatusOK, httpStatus(t, "GET", "http://"+addr+"/streams", ""))
	marker := filepath.Join(t.TempDir(), "ran")
	code := httpStatus(t, "POST", "http://"+addr+"/streams/x", commandStream(marker))
	require.GreaterOrEqual(t, code, 400, "a stream config with a command processor was accepted")
	require.Equal(t, http.StatusOK, httpStatus(t, "POST", "http://"+addr+"/streams/y", idleStream))
	_, err := os.Stat(marker)
	require.True(t, os.IsNotExist(err), "the command ran: %v", err)
}

// TestNoProcessSpawningComponents: configs using command or subprocess do not
// lint, with an error naming the component.
func TestNoProcessSpawningComponents(t *testing.T) {
	for name, conf := range map[string]string{
		"command processor": commandStream("/tmp/x"),
		"subprocess input":  "input:\n  subprocess:\n    name: cat\noutput:\n  drop: {}\n",
		"subprocess output": "input:\n  generate:\n    mapping: root = 1\noutput:\n  subprocess:\n    name: cat\n",
	} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(kafkatest.Binary(t), "lint", writeConfig(t, conf)).CombinedOutput()
			require.Error(t, err, "%s", out)
			require.Regexp(t, `command|subprocess`, string(out))
		})
	}
}

// TestHTTPBasicAuth: the docs/security.md recipe for exposing metrics: with
// http.basic_auth (password_hash the base64 of the password's SHA-256)
// /metrics, /ready and /version answer 401 without the password and 200
// with it.
func TestHTTPBasicAuth(t *testing.T) {
	addr := freeAddr(t)
	sum := sha256.Sum256([]byte("s3cret"))
	conf := fmt.Sprintf(`
http:
  address: %s
  basic_auth:
    enabled: true
    username: prometheus
    password_hash: %s
    algorithm: sha256
metrics:
  prometheus: {}
`, addr, base64.StdEncoding.EncodeToString(sum[:])) + idleStream
	p := startBin(t, "run", writeConfig(t, conf))
	p.waitOutput(t, "Listening for HTTP requests at:")
	for _, path := range []string{"/metrics", "/ready", "/version"} {
		require.Equal(t, http.StatusUnauthorized, httpStatus(t, "GET", "http://"+addr+path, ""), path)
		if path == "/ready" {
			require.Equal(t, http.StatusOK, readyStatus(t, "http://prometheus:s3cret@"+addr+path), path)
		} else {
			require.Equal(t, http.StatusOK, httpStatus(t, "GET", "http://prometheus:s3cret@"+addr+path, ""), path)
		}
		require.Equal(t, http.StatusUnauthorized, httpStatus(t, "GET", "http://prometheus:wrong@"+addr+path, ""), path)
	}
}

// TestVersion: --version prints the main module's version and the commit
// the binary was built from, as Go stamped them into the build (a build from
// a git checkout: `git rev-parse HEAD`), or as set with -ldflags.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	build := func(t *testing.T, flags ...string) string {
		bin := filepath.Join(t.TempDir(), "connect-eos")
		args := append([]string{"build", "-buildvcs=auto", "-o", bin}, flags...)
		cmd := exec.Command("go", append(args, "./cmd/connect-eos")...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return bin
	}
	version := func(t *testing.T, bin string) string {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}

	t.Run("stamped", func(t *testing.T) {
		bin := build(t)
		info, err := exec.Command("go", "version", "-m", bin).Output()
		require.NoError(t, err)
		var mod, rev string
		modified := false
		for _, l := range strings.Split(string(info), "\n") {
			f := strings.Fields(l)
			switch {
			case len(f) >= 3 && f[0] == "mod":
				mod = f[2]
			case len(f) == 2 && strings.HasPrefix(f[1], "vcs.revision="):
				rev = strings.TrimPrefix(f[1], "vcs.revision=")
			case len(f) == 2 && f[1] == "vcs.modified=true":
				modified = true
			}
		}
		require.NotEmpty(t, mod)
		if st, err := os.Stat(filepath.Join(root, ".git")); err == nil && st.IsDir() {
			// A git checkout (Go does not stamp builds in a git worktree,
			// whose .git is a file): the commit must be there.
			head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
			require.NoError(t, err)
			require.Equal(t, strings.TrimSpace(string(head)), rev, "vcs.revision of the build")
		}
		want := rev
		if want == "" {
			want = "unknown"
		}
		if modified {
			want += ", modified"
		}
		require.Contains(t, version(t, bin), fmt.Sprintf("Version: %s (commit %s)\n", mod, want))
	})
	t.Run("ldflags", func(t *testing.T) {
		bin := build(t, "-ldflags", "-X main.Version=v1.2.3 -X main.Commit=0123abc")
		require.Contains(t, version(t, bin), "Version: v1.2.3 (commit 0123abc")
	})
}

// TestFatalErrorLoggedOnce: a fatal error (here the input's topic does not
// exist after its grace period) shows once in the log, from the component
// that raised it, and once in the exit line; the SIGTERM the binary sends
// itself to stop gracefully is not reported as if someone had sent it.
func TestFatalErrorLoggedOnce(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	p := startBin(t, "run", writeConfig(t, fmt.Sprintf(`
http:
  enabled: false
input:
  kafka_native:
    seed_brokers: [ %q ]
    topics: [ no_such_topic ]
    unknown_topic_grace_period: 1s
output:
  drop: {}
`, cluster.ListenAddrs()[0])))
	require.Equal(t, ExitFatal, p.wait(t))
	out := p.output()
	require.Len(t, scanLines(out, "grace_period 1s"), 2, "the fatal error once in the log and once in the exit line")
	require.Len(t, scanLines(out, "connect-eos: exit code 3 after a fatal error: "), 1)
	require.Empty(t, scanLines(out, "Received SIGTERM"))
}

// TestFatalErrorLoggedOnceInAGroup: the same with a group member reading
// (group_membership) when the output stops the pipeline: the member leaves
// its group as on any stop, and no "Lost ... nothing committed" line makes
// the stop look like a lost session.
func TestFatalErrorLoggedOnceInAGroup(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("in"))
	require.NoError(t, err)
	defer cl.Close()
	for i := range 20 {
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr())
	}
	p := startBin(t, "run", writeConfig(t, fmt.Sprintf(`
http:
  enabled: false
input:
  kafka_native:
    seed_brokers: [ %[1]q ]
    topics: [ in ]
    consumer_group: g
    group_membership: true
    start_offset: committed
    reset_offset: earliest
output:
  kafka_eos:
    seed_brokers: [ %[1]q ]
    topic: no_such_topic
    transactional_id: fatal-group
    state_cache: state
    unknown_topic_grace_period: 2s
cache_resources:
  - label: state
    memory: {}
`, cluster.ListenAddrs()[0])))
	require.Equal(t, ExitFatal, p.wait(t))
	out := p.output()
	require.Len(t, scanLines(out, "connect-eos: exit code 3 after a fatal error: "), 1)
	require.Len(t, scanLines(out, "unknown_topic_grace_period 2s"), 2, "the fatal error once in the log and once in the exit line")
	require.Empty(t, scanLines(out, "Received SIGTERM"))
	require.Empty(t, scanLines(out, "nothing committed for them"))
}

// TestSigtermStillLogged: a SIGTERM from outside is still reported.
func TestSigtermStillLogged(t *testing.T) {
	p := startBin(t, "run", writeConfig(t, "http:\n  enabled: false\n"+idleStream))
	p.waitOutput(t, "is now active")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t))
	require.Len(t, scanLines(p.output(), "Received SIGTERM, the service is closing"), 1)
}

// k2kDevConfig is a Kafka-to-Kafka copy of orders into orders_copy for `dev`
// (the quickstart's shape), with extra pipeline and input lines.
func k2kDevConfig(t *testing.T, httpAddr, inputExtra, pipeline string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`
http:
  address: %s
input:
  kafka_native:
    seed_brokers: [ "${KAFKA_BROKERS}" ]
    topics: [ orders ]
    consumer_group: copy
%s
pipeline:
  processors: [ %s ]
output:
  kafka_eos:
    seed_brokers: [ "${KAFKA_BROKERS}" ]
    topic: orders_copy
    transactional_id: copy
    consumer_group: copy
    state_cache: state
    epoch: { interval: 100ms }
cache_resources:
  - label: state
    kafka_state:
      seed_brokers: [ "${KAFKA_BROKERS}" ]
      topic: copy_state
metrics:
  prometheus: {}
`, httpAddr, inputExtra, pipeline))
}

// TestDevQuickstart runs `make quickstart`'s command on the built binary,
// with more records so that the counters pass a million: the copy is exact
// and every counter prints as an integer.
func TestDevQuickstart(t *testing.T) {
	p := startBin(t, "dev", "--topic", "orders:3", "--fill", "orders:40000", "--topic", "orders_copy:3",
		"--report", "orders_copy", "../../config/examples/quickstart.yaml")
	require.Equal(t, 0, p.wait(t))
	out := p.output()
	require.Contains(t, out, "dev: records out (read_committed) in orders_copy: 40000, duplicates: 0, missing: 0")
	require.Contains(t, out, "dev: kafka_eos_records_produced = 40000\n")
	require.Contains(t, out, `kafka_eos \"quickstart-copy\": Kafka-to-Kafka mode for consumer group \"quickstart-copy\"`, "the quickstart runs the exactly-once mode")
	bytes := scanLines(out, "dev: kafka_eos_bytes_produced = ")
	require.Len(t, bytes, 1)
	require.Regexp(t, `= [0-9]{7,}$`, bytes[0], "a counter over a million prints as an integer")
	for _, l := range scanLines(out, "dev: kafka_") {
		require.Regexp(t, `= -?[0-9]+(\.[0-9]+)?$`, l)
	}
}

// TestDevTimeoutIsIncomplete: a run stopped by --timeout (an unbounded
// input) is reported as incomplete, with what was copied so far, and not as
// records missing; it exits non-zero.
func TestDevTimeoutIsIncomplete(t *testing.T) {
	p := startBin(t, "dev", "--topic", "orders:1", "--fill", "orders:100", "--topic", "orders_copy:1",
		"--report", "orders_copy", "--timeout", "3s", k2kDevConfig(t, freeAddr(t), "", ""))
	require.Equal(t, 1, p.wait(t))
	out := p.output()
	require.Contains(t, out, "the run is incomplete: the stream was stopped by --timeout 3s before its input ended")
	require.Contains(t, out, "in orders_copy so far: ")
	require.NotContains(t, out, "missing")
	require.NotContains(t, out, "not exactly once")
}

// TestDevReportCount: a pipeline that changes every value fails the value
// comparison of --report (every record "missing") but passes --report-count,
// which compares only how many records arrived.
func TestDevReportCount(t *testing.T) {
	conf := k2kDevConfig(t, freeAddr(t), "    stop_offset: latest", "{ mapping: 'root = content().uppercase()' }")
	args := []string{"dev", "--topic", "orders:2", "--fill", "orders:500", "--topic", "orders_copy:2"}
	p := startBin(t, append(args, "--report-count", "orders_copy", conf)...)
	require.Equal(t, 0, p.wait(t), "--report-count")
	require.Contains(t, p.output(), "dev: records out (read_committed) in orders_copy: 500, records in: 500 (count only: values not compared)")

	p = startBin(t, append(args, "--report", "orders_copy", conf)...)
	require.Equal(t, 1, p.wait(t), "--report")
	require.Contains(t, p.output(), "missing: 500")
}

// TestDevServesMetrics: the config's metrics and http sections are served
// while dev runs: its /metrics shows the components' counters.
func TestDevServesMetrics(t *testing.T) {
	addr := freeAddr(t)
	p := startBin(t, "dev", "--topic", "orders:1", "--fill", "orders:100", "--topic", "orders_copy:1",
		"--report", "orders_copy", k2kDevConfig(t, addr, "", ""))
	p.waitOutput(t, "dev: serving metrics at http://"+addr+"/metrics")
	kafkatest.Wait(t, time.Minute, func() bool {
		res, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return regexp.MustCompile(`(?m)^kafka_eos_records_produced(\{[^}]*\})? 100$`).Match(b)
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 1, p.wait(t))
	require.Contains(t, p.output(), "the run is incomplete: the stream was stopped by a signal")
}
