package chaos

import (
	"bufio"
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
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// broker is one single-node Apache Kafka started by integration/kafka/up.sh,
// owned by the chaos suite so that it can bounce it.
//
// up.sh and down.sh wipe the state dir, so they cannot restart a broker on its
// data. bounce does it here: it reads the running broker's command line from
// /proc (the exact java invocation up.sh made: heap, log4j config, classpath,
// kafka.Kafka <state>/server.properties), signals the process (SIGKILL for a
// hard bounce, SIGTERM and a wait for a clean one), relaunches the same
// command line on the same data dir and ports, and rewrites <state>/pid, so
// down.sh still finds and stops it.
type broker struct {
	name  string
	tv    int
	dir   string // up.sh's state dir
	addr  string // PLAINTEXT bootstrap address
	kafka string // integration/kafka

	mu    sync.Mutex
	child *exec.Cmd     // the broker when this process relaunched it
	done  chan struct{} // closed when child was reaped

	// cluster is set for the cluster variant (cluster_test.go): addr is
	// then the bootstrap list and dir the cluster's state dir; its rounds
	// act on cluster.nodes.
	cluster *cluster
	// source is, for mirror runs (TestChaosMirror), the cluster the
	// input reads; this broker is then the target.
	source *broker
}

// upBroker starts (or reuses) the broker named name with up.sh.
func upBroker(ctx context.Context, kafkaDir, name string, tv int) (*broker, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(kafkaDir, "up.sh"), "--tv", strconv.Itoa(tv), "--name", name)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("up.sh --tv %d --name %s: %v\n%s", tv, name, err, tail(stderr.String(), 40))
	}
	b := &broker{name: name, tv: tv, kafka: kafkaDir}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "KAFKA_BROKERS="); ok {
			b.addr = strings.TrimSpace(v)
		}
	}
	if b.addr == "" {
		return nil, fmt.Errorf("up.sh --name %s printed no KAFKA_BROKERS line:\n%s", name, stdout.String())
	}
	// The state dir as lib.sh computes it (KAFKA_STATE_ROOT, TMPDIR).
	out, err := exec.CommandContext(ctx, "bash", "-c", `source "$1/lib.sh" && state_dir "$2"`, "_", kafkaDir, name).Output()
	if err != nil {
		return nil, fmt.Errorf("state dir of %s: %v", name, err)
	}
	b.dir = strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(b.dir, "server.properties")); err != nil {
		return nil, fmt.Errorf("broker %s: %v", name, err)
	}
	return b, nil
}

// down stops the broker with down.sh (which removes its state dir).
func (b *broker) down() error {
	out, err := exec.Command("bash", filepath.Join(b.kafka, "down.sh"), "--name", b.name).CombinedOutput()
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(40 * time.Second):
		}
	}
	if err != nil {
		return fmt.Errorf("down.sh --name %s: %v: %s", b.name, err, out)
	}
	return nil
}

// pid returns the broker's PID from the state dir, checking that the process
// is the broker of that dir (as lib.sh's owned_pid does), and its argv.
func (b *broker) pid() (int, []string, string, error) {
	raw, err := os.ReadFile(filepath.Join(b.dir, "pid"))
	if err != nil {
		return 0, nil, "", err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, nil, "", fmt.Errorf("pid file of %s: %v", b.name, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, nil, "", fmt.Errorf("broker %s (pid %d) is not running: %v", b.name, pid, err)
	}
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	props := filepath.Join(b.dir, "server.properties")
	found := false
	for _, a := range argv {
		found = found || a == props
	}
	if !found {
		return 0, nil, "", fmt.Errorf("pid %d is not the broker of %s: %q", pid, b.dir, argv)
	}
	cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return pid, argv, cwd, nil
}

// alive reports whether pid runs (a zombie waiting for its reaper is gone).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !alive(pid)
}

// bounce stops the broker (hard: SIGKILL; otherwise SIGTERM and up to 60 s for
// a controlled shutdown), starts it again with the same command line on the
// same data and ports after down (the time it stays down), and waits until it
// serves the given topics again.
func (b *broker) bounce(ctx context.Context, hard bool, downFor time.Duration, topics ...string) (time.Duration, error) {
	start := time.Now()
	pid, argv, cwd, err := b.pid()
	if err != nil {
		return 0, err
	}
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return 0, fmt.Errorf("signal broker pid %d: %v", pid, err)
	}
	if !waitGone(pid, 60*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, 10*time.Second) {
			return 0, fmt.Errorf("broker pid %d did not stop", pid)
		}
		return 0, fmt.Errorf("broker pid %d ignored SIGTERM for 60s", pid)
	}
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done != nil {
		<-done
	}
	time.Sleep(downFor)

	logf, err := os.OpenFile(filepath.Join(b.dir, "kafka.out"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(logf, "\n=== chaos: relaunched after %v (hard=%v) ===\n", sig, hard)
	var cmd *exec.Cmd
	for attempt := 0; ; attempt++ {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Dir = cwd
		cmd.Stdout, cmd.Stderr = logf, logf
		// Its own process group: a ^C to the test does not reach it; down.sh
		// stops it through the pid file.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			return 0, fmt.Errorf("relaunch broker %s: %v", b.name, err)
		}
		if err := os.WriteFile(filepath.Join(b.dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			return 0, err
		}
		d := make(chan struct{})
		go func(c *exec.Cmd) { _ = c.Wait(); close(d) }(cmd)
		b.mu.Lock()
		b.child, b.done = cmd, d
		b.mu.Unlock()
		err := b.waitReady(ctx, d, topics)
		if err == nil {
			break
		}
		// The old process's ports may linger a moment after a kill -9.
		if errors.Is(err, errExited) && attempt < 3 {
			time.Sleep(2 * time.Second)
			continue
		}
		logf.Close()
		return 0, fmt.Errorf("broker %s after relaunch: %v (see %s/server.log)", b.name, err, b.dir)
	}
	logf.Close()
	return time.Since(start), nil
}

var errExited = errors.New("broker process exited")

// waitReady polls until the broker answers metadata with a leader for every
// partition of topics, or its process exits.
func (b *broker) waitReady(ctx context.Context, exited <-chan struct{}, topics []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(120 * time.Second)
	// Only the copy's topics: the group coordinator can take much longer
	// (tens of seconds after a kill -9) and the copy goes on without it, so
	// waiting for it would let the copy run ahead of the next round.
	want := topics
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		md, err := adm.Metadata(rctx, want...)
		cancel()
		if err == nil {
			last = nil
			for _, name := range want {
				td, ok := md.Topics[name]
				if !ok {
					continue
				}
				if td.Err != nil {
					last = fmt.Errorf("%s: %v", name, td.Err)
					break
				}
				for _, p := range td.Partitions {
					if p.Err != nil || p.Leader < 0 {
						last = fmt.Errorf("%s[%d]: leader %d, %v", name, p.Partition, p.Leader, p.Err)
						break
					}
				}
			}
			if last == nil {
				return nil
			}
		} else {
			last = err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not ready after 120s: %v", last)
}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
