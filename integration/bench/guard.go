package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// The guards of a run on a broker the harness started: a deadline on every
// child and Java tool, a watch on the broker's process, the free disk under
// its log dir before the run, and the peak disk use during it. A broker that
// stops (a full disk fails its only log dir, and Kafka then halts) leaves the
// clients retrying forever; without these a run waited on it until killed.

// errDeadline: a child or a Java tool ran past its deadline and was killed.
var errDeadline = errors.New("killed at its deadline")

// errBrokerDead: the broker's process exited during the run, or stopped
// answering.
var errBrokerDead = errors.New("the broker stopped")

// fatal says whether a contender's error ends the run (a failed count or a
// child's own error is recorded in the table and the run goes on).
func fatal(err error) bool { return errors.Is(err, errDeadline) || errors.Is(err, errBrokerDead) }

// runDeadline is how long one run of a child or a Java tool may take before
// it is killed: three times its planned span (warm-up plus measured span) and
// two minutes more for what surrounds it (a JVM's start, a group's join, a
// reader's first fetch, a record count sized from a rate that came out high).
// A run on a live broker ends well before it; one whose broker stopped
// answering is killed here instead of waiting (franz-go and the Java clients
// retry a broker that does not answer for as long as they run).
func runDeadline(warmup, duration time.Duration) time.Duration {
	return 3*(warmup+duration) + 2*time.Minute
}

// runErr is the error of a child or tool (what, e.g. "eos" or
// "ProducerPerformance") that ctx ended: the broker's death when the broker
// watch ended it, errDeadline when its own deadline (limit) did; nil when ctx
// did not end it.
func runErr(ctx context.Context, what string, limit time.Duration) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, errBrokerDead) {
		return fmt.Errorf("%s: %w", what, cause)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w after %s (3 x its planned span + 2 min): the broker stopped answering or the run hung", what, errDeadline, limit)
	}
	return fmt.Errorf("%s: %w", what, context.Cause(ctx))
}

// withOutput adds the last lines a killed child or tool printed, if any.
func withOutput(err error, out string) error {
	if strings.TrimSpace(out) == "" {
		return err
	}
	return fmt.Errorf("%w; its last lines: %s", err, lastLines(out, 5))
}

// brokerProc is the process and the directories of the broker this run
// started with up.sh (its state dir: pid, logs/server.log, data/).
type brokerProc struct {
	state string
	pid   int
}

// stateRoot is where up.sh puts its brokers' state dirs (lib.sh's
// KAFKA_STATE_ROOT, default ${TMPDIR:-/tmp}).
func stateRoot() string {
	if v := os.Getenv("KAFKA_STATE_ROOT"); v != "" {
		return v
	}
	if v := os.Getenv("TMPDIR"); v != "" {
		return v
	}
	return "/tmp"
}

func stateDir(name string) string { return filepath.Join(stateRoot(), "connect-eos-kafka-"+name) }

func openBrokerProc(name string) (*brokerProc, error) {
	st := stateDir(name)
	b, err := os.ReadFile(filepath.Join(st, "pid"))
	if err != nil {
		return nil, fmt.Errorf("broker %s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("broker %s: pid file: %w", name, err)
	}
	return &brokerProc{state: st, pid: pid}, nil
}

func (p *brokerProc) dataDir() string { return filepath.Join(p.state, "data") }

// alive: the process runs and is this broker (its command line names the
// state dir's server.properties, as lib.sh's owned_pid checks).
func (p *brokerProc) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
	if err != nil {
		return syscall.Kill(p.pid, 0) == nil // no /proc
	}
	return strings.Contains(string(b), filepath.Join(p.state, "server.properties"))
}

// dead is the error of a broker whose process is gone, with the last line
// of its log.
func (p *brokerProc) dead() error {
	return fmt.Errorf("%w: process %d (state dir %s) is gone; its last log line: %s", errBrokerDead, p.pid, p.state, lastLogLine(filepath.Join(p.state, "logs", "server.log")))
}

// watch cancels the run (cancel, with the broker's death as the cause) once
// the broker's process is gone: a child or tool waiting on it is killed at
// once, not at its deadline. It checks every second until ctx ends.
func (p *brokerProc) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !p.alive() {
				err := p.dead()
				logf("%v", err)
				cancel(err)
				return
			}
		}
	}
}

// lastLogLine is the last non-empty line of file (read from its last 64 KiB).
func lastLogLine(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		_, _ = f.Seek(-64<<10, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return "(empty)"
}

// between is the check between two runs: the run was not cancelled, and the
// broker (when this run started it) is alive and answers a metadata request
// within 30 s (a broker that stopped answering, e.g. one whose process is
// stopped, would otherwise cost every later run its deadline).
func (b *bench) between(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if b.proc == nil {
		return nil
	}
	if !b.proc.alive() {
		return b.proc.dead()
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := b.adm.BrokerMetadata(pctx); err != nil {
		if !b.proc.alive() {
			return b.proc.dead()
		}
		return fmt.Errorf("%w: process %d runs but did not answer a metadata request in 30 s (%v); its last log line: %s", errBrokerDead, b.proc.pid, err, lastLogLine(filepath.Join(b.proc.state, "logs", "server.log")))
	}
	return nil
}

// fastDelete sets the broker's log.segment.delete.delay.ms (cluster-wide,
// dynamic; default 60 s) to 0: a deleted topic's files are renamed at once
// but removed only after that delay, and the rows delete topics of gigabytes
// faster than one a minute. Only on a broker this run started.
func fastDelete(ctx context.Context, adm *kadm.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.segment.delete.delay.ms", Value: kadm.StringPtr("0")}})
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("setting log.segment.delete.delay.ms=0 on the broker: %w", err)
	}
	return nil
}

// Record rates the disk plan assumes at most of a reader (the consume
// topic is filled until the fastest reader needs 1.3 durations to read it):
// 4 million records/s and 1 GB/s of values, above what the fastest reader
// (the raw poll) read on the 2-core machine of docs/benchmarks.md at 100 B
// and 1 KiB. recordOverhead is what a record takes on disk beyond its value
// in a batch of many (its length, attributes, deltas, key and header counts,
// plus the batch header shared by the batch), rounded up.
const (
	planRecordsPerSec = 4e6
	planBytesPerSec   = 1e9
	recordOverhead    = 16
	diskSlack         = 2 << 30 // internal topics, the broker's own logs, a topic being deleted
)

// diskNeed is the free space a run needs under the broker's log dir, bytes:
// the largest of its rows' peaks plus diskSlack. A consume size's peak is its
// consume topic (1.3 durations of the fastest reader, plus the refills that
// reach that) and one copy topic (a copy is no faster than a read), both
// assumed at the plan rates; a produce row's, one topic of 1.5 x (warm-up +
// duration) at those rates (the ceiling rows write fastest, and a Java tool's
// record count may overshoot). Topics are deleted once their row's counts are
// asserted, and removed at once (fastDelete), so rows do not add up.
func diskNeed(o options) int64 {
	var peak float64
	for _, size := range o.sizes {
		rate := min(planRecordsPerSec, planBytesPerSec/float64(size)) * float64(size+recordOverhead)
		produce := 1.5 * (o.warmup + o.duration).Seconds() * rate
		peak = max(peak, produce)
		if !o.skipCons && len(o.codecs) == 0 {
			peak = max(peak, (1.3+1)*o.duration.Seconds()*rate)
		}
	}
	return int64(peak) + diskSlack
}

// freeBytes is the space an unprivileged process may still write in the
// file system holding dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// preflight refuses a run whose broker's log dir (under dir) has less free
// space than the run needs.
func preflight(o options, dir string) error {
	free, err := freeBytes(dir)
	if err != nil {
		return fmt.Errorf("free space under %s: %w", dir, err)
	}
	return checkDisk(o, dir, free)
}

func checkDisk(o options, dir string, free int64) error {
	need := diskNeed(o)
	if free < need {
		return fmt.Errorf("%s has %s free, the run needs %s for the broker's logs (its largest topics at -duration %s, -sizes %v, plus %s): free space there, set KAFKA_STATE_ROOT to a larger disk, or shorten -duration",
			dir, gib(free), gib(need), o.duration, o.sizes, gib(diskSlack))
	}
	logf("disk: %s free under %s, the run needs at most %s", gib(free), dir, gib(need))
	return nil
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// diskSampler samples the disk use of the broker's log dir (the blocks of
// its files, as du counts them) every 2 s and keeps the peak.
type diskSampler struct {
	dir  string
	mu   sync.Mutex
	peak int64
	at   time.Time
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func startDiskSampler(dir string) *diskSampler {
	s := &diskSampler{dir: dir, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			n := diskUse(dir)
			s.mu.Lock()
			if n > s.peak {
				s.peak, s.at = n, time.Now()
			}
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling (once; later calls only describe) and describes
// the peak.
func (s *diskSampler) stop() string {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("peak disk use of the broker's log dir (sampled every 2 s): %s at %s UTC", gib(s.peak), s.at.UTC().Format("15:04:05"))
}

// diskUse is the bytes of disk blocks the files under dir take.
func diskUse(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file deleted while walking
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}
