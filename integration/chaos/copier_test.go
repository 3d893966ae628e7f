package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"time"
)

// copier is one connect-eos process (`connect-eos run <config>`), with its
// stdout and stderr appended to a log file.
type copier struct {
	slot    int // which config (process index) it runs
	gen     int // how many processes ran this slot before it
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}

	mu        sync.Mutex
	signalled []string // signals the suite sent it
	code      int      // exit code, -1 when killed by a signal
	err       error
}

func startCopier(bin, conf, logPath string, slot, gen int) (*copier, error) {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== chaos: process %d.%d starts at %s ===\n", slot, gen, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, "run", conf)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	c := &copier{slot: slot, gen: gen, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.err = err
		c.code = cmd.ProcessState.ExitCode()
		c.mu.Unlock()
		fmt.Fprintf(f, "=== chaos: process %d.%d ended: %v (exit %d) ===\n", slot, gen, cmd.ProcessState, c.code)
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *copier) signal(sig syscall.Signal) error {
	c.mu.Lock()
	c.signalled = append(c.signalled, sig.String())
	c.mu.Unlock()
	return c.cmd.Process.Signal(sig)
}

func (c *copier) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the process to exit and returns its exit code.
func (c *copier) wait(d time.Duration) (int, error) {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.code, nil
	case <-time.After(d):
		return 0, errors.New("timed out")
	}
}

// unsignalled reports whether the process exited without the suite having
// signalled it (a clean end, or a crash of its own).
func (c *copier) unsignalled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.signalled) == 0
}

// killedBySignal reports whether the process ended by a signal (a SIGKILL
// that landed), not by exiting on its own.
func (c *copier) killedBySignal() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

func (c *copier) exitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code
}

// waitRunning waits up to d until the process logged a line of its own, or
// exited: the binary holds SIGTERM from the start of its run on, so a SIGTERM
// sent before (to a process just started, still loading) would kill it by the
// signal's default action instead of stopping it gracefully.
func (c *copier) waitRunning(d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && !c.exited(); time.Sleep(50 * time.Millisecond) {
		if len(grepLines(c.logPath, ownLine, 1)) > 0 {
			return
		}
	}
}

// ownLine matches a line the binary logged (logfmt), not the suite's
// "=== chaos:" lines.
var ownLine = regexp.MustCompile(`^time=.* level=`)

func (c *copier) kill() {
	if !c.exited() {
		_ = c.signal(syscall.SIGKILL)
		_, _ = c.wait(10 * time.Second)
	}
}

// recoveryLine matches the output's log line for each in-doubt epoch it
// decided at start (output/recovery.go), e.g.
// kafka_eos: recovery: epoch 12 on \"x-0\": abort-open (open in plain mode).
var recoveryLine = regexp.MustCompile(`kafka_eos: recovery: epoch (\d+) on \\?"([^"\\]*)\\?": ([a-z-]+) \(`)

// runtimeLine matches the output's log line when an EndTxn(commit) answer was
// lost while running (output/commit.go resolveInDoubt): the epoch is then
// resolved on the spot (retried EndTxn, DescribeTransactions) or the pipeline
// stops and the next start resolves it.
var runtimeLine = regexp.MustCompile(`kafka_eos: EndTxn\(commit\) of epoch \d+ on .*outcome unknown`)

// recoveryDecisions counts the in-doubt decisions logged in a log file by
// action (mark-committed, mark-aborted, resume-commit, abort-open, stop), and
// the EndTxn answers lost while running (endtxn-unknown-while-running).
func recoveryDecisions(path string, into map[string]int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := recoveryLine.FindStringSubmatch(sc.Text()); m != nil {
			into[m[3]]++
		} else if runtimeLine.MatchString(sc.Text()) {
			into["endtxn-unknown-while-running"]++
		}
	}
	return sc.Err()
}

// grepLines returns the lines of path that match re (at most max).
func grepLines(path string, re *regexp.Regexp, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && len(out) < max {
		if re.MatchString(sc.Text()) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// slotsReadyLine matches the output's log line once every slot's
// InitProducerID is done (output/output.go): from then on an older process
// with the same transactional_id is fenced.
var slotsReadyLine = regexp.MustCompile(`kafka_eos: \d+ slots of .* ready`)

// fatalLine matches the lines of a process stopping on a fatal error (a
// fence): the error as Benthos logs it, and connect-eos' exit line.
var fatalLine = regexp.MustCompile(`msg=".*fatal: |connect-eos: exit code 3 after a fatal error`)

// stopping waits up to d until c exited or logged a fatal error, after which
// it stops (draining for up to its shutdown_timeout first); its exit code
// says how it stopped.
func (c *copier) stopping(d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		if c.exited() || len(grepLines(c.logPath, fatalLine, 1)) > 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// lostLine matches the input's log line when the group took the process's
// partitions away because its session ended (kafka_native with
// group_membership).
var lostLine = regexp.MustCompile(`msg="Lost map\[`)

// logSize is the length of the process's log so far.
func (c *copier) logSize() int64 {
	fi, err := os.Stat(c.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// loggedSince reports whether a line of the process's log from offset off on
// matches re.
func (c *copier) loggedSince(off int64, re *regexp.Regexp) bool {
	f, err := os.Open(c.logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return false
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if re.MatchString(sc.Text()) {
			return true
		}
	}
	return false
}
