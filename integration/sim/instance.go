package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one pipeline process: the test binary re-executed with
// ChildEnv set.
type instance struct {
	name   string // "m0", "m0.1" (second incarnation), "m0z" (zombie's rival)
	member int
	cmd    *exec.Cmd
	logf   string
	start  time.Time

	done chan struct{} // closed once the process exited
	mu   sync.Mutex
	code int       // exit code; -1 after a signal
	at   time.Time // when it exited
	sig  bool      // we killed it
	// frozen is set while the process is SIGSTOPped.
	frozen bool
}

// startInstance starts an instance of member m named name.
func startInstance(o Options, p Plan, brokers, storeAddr, name string, m int) (*instance, error) {
	bin, dir := o.Bin, o.Dir
	spec := childSpec{Seed: p.Seed, Instance: name, Store: storeAddr, YAML: streamYAML(p, brokers, name, m, o.LogLevel), Shutdown: shutdownTimeout, Grace: stopGrace, Override: o.Override}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	logf := filepath.Join(dir, name+".log")
	f, err := os.Create(logf)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(js), "GOMAXPROCS=2")
	cmd.Stdout = f
	cmd.Stderr = f
	// An instance never outlives the harness (killed or crashed).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	in := &instance{name: name, member: m, cmd: cmd, logf: logf, start: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		in.mu.Lock()
		in.code = cmd.ProcessState.ExitCode()
		in.at = time.Now()
		var ee *exec.ExitError
		if errors.As(err, &ee) && !ee.Exited() {
			in.code = -1
		}
		in.mu.Unlock()
		close(in.done)
	}()
	return in, nil
}

func (in *instance) exited() bool {
	select {
	case <-in.done:
		return true
	default:
		return false
	}
}

// killed reports whether the harness SIGKILLed the instance.
// exitedAt returns when the process exited, if it did.
func (in *instance) exitedAt() (time.Time, bool) {
	if !in.exited() {
		return time.Time{}, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.at, true
}

func (in *instance) killed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sig
}

func (in *instance) exitCode() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.code
}

func (in *instance) signal(sig syscall.Signal) {
	if in.exited() {
		return
	}
	in.mu.Lock()
	if sig == syscall.SIGKILL {
		in.sig = true
	}
	switch sig {
	case syscall.SIGSTOP:
		in.frozen = true
	case syscall.SIGCONT:
		in.frozen = false
	}
	in.mu.Unlock()
	_ = in.cmd.Process.Signal(sig)
}

// kill stops the process at once, as a crash would, and waits for it.
func (in *instance) kill() {
	in.signal(syscall.SIGKILL)
	<-in.done
}

// wait waits up to d for the process to exit.
func (in *instance) wait(d time.Duration) bool {
	select {
	case <-in.done:
		return true
	case <-time.After(d):
		return false
	}
}

// fatalLine is the fatal error the instance reported on its way out ("" if
// none).
func (in *instance) fatalLine() string {
	f, err := os.Open(in.logf)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	last := ""
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "sim child: stopping: ") {
			last = strings.TrimPrefix(l, "sim child: stopping: ")
			break
		} else if strings.HasPrefix(l, "sim child: exited after a fatal error: ") {
			last = strings.TrimPrefix(l, "sim child: exited after a fatal error: ")
		}
	}
	return last
}

// outputReady reports whether the instance's kafka_eos finished its start
// (recovery, every slot initialised: the transactions a crashed
// predecessor left open are aborted by then).
func (in *instance) outputReady() bool {
	b, err := os.ReadFile(in.logf)
	if err != nil {
		return false
	}
	return strings.Contains(string(b), `ready (transaction version`)
}

// lastLines is the end of the instance's log, for a failure report.
func (in *instance) lastLines(n int) string {
	b, err := os.ReadFile(in.logf)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (in *instance) String() string { return fmt.Sprintf("%s (pid %d)", in.name, in.cmd.Process.Pid) }
