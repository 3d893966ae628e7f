package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunDeadline(t *testing.T) {
	for _, c := range []struct {
		warmup, duration, want time.Duration
	}{
		{time.Second, 10 * time.Second, 153 * time.Second}, // the defaults: 3 x 11 s + 2 min
		{0, 10 * time.Second, 150 * time.Second},           // a reader
		{0, 20 * time.Second, 180 * time.Second},           // the first fill (2 durations)
		{time.Second, 3 * time.Second, 132 * time.Second},  // a short run
	} {
		if got := runDeadline(c.warmup, c.duration); got != c.want {
			t.Errorf("runDeadline(%s, %s) = %s, want %s", c.warmup, c.duration, got, c.want)
		}
		if got := runDeadline(c.warmup, c.duration); got < 2*(c.warmup+c.duration) {
			t.Errorf("runDeadline(%s, %s) = %s leaves no margin", c.warmup, c.duration, got)
		}
	}
}

func TestRunErr(t *testing.T) {
	if err := runErr(context.Background(), "eos", time.Minute); err != nil {
		t.Fatalf("a live context: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	err := runErr(ctx, "copy_arrow", 153*time.Second)
	if !errors.Is(err, errDeadline) || !fatal(err) || errors.Is(err, errBrokerDead) {
		t.Fatalf("deadline: %v", err)
	}
	if !strings.Contains(err.Error(), "copy_arrow") || !strings.Contains(err.Error(), "2m33s") {
		t.Fatalf("deadline error names neither the child nor the limit: %v", err)
	}

	// The broker watch cancels the run's context with the broker's death:
	// a child's context (with its own deadline) reports that cause.
	run, stop := context.WithCancelCause(context.Background())
	child, cancel2 := context.WithTimeout(run, time.Hour)
	defer cancel2()
	stop(fmt.Errorf("%w: process 1 is gone; its last log line: x", errBrokerDead))
	err = runErr(child, "ProducerPerformance", time.Hour)
	if !errors.Is(err, errBrokerDead) || errors.Is(err, errDeadline) || !fatal(err) {
		t.Fatalf("broker dead: %v", err)
	}
	if !strings.Contains(err.Error(), "last log line: x") {
		t.Fatalf("broker dead without its log line: %v", err)
	}

	// Interrupted (Ctrl-C): not fatal in the sense above, but an error.
	intr, stop2 := context.WithCancel(context.Background())
	stop2()
	if err := runErr(intr, "eos", time.Hour); err == nil || fatal(err) {
		t.Fatalf("interrupted: %v", err)
	}
	if fatal(errors.New("the topic holds 3 records")) {
		t.Fatal("a count error ends the run")
	}
}

func TestDiskNeed(t *testing.T) {
	const gb = 1e9
	o := options{sizes: []int{100, 1024}, duration: 10 * time.Second, warmup: time.Second}
	// 1 KiB binds: 976,562 records/s x 1040 B on disk = 1.016 GB/s; the
	// consume topic (1.3 durations) and a copy topic (1 duration) are
	// 2.3 x 10 s of it, 23.4 GB, plus 2 GiB.
	want := int64(2.3*10*(gb/1024)*1040) + diskSlack
	if got := diskNeed(o); got != want {
		t.Fatalf("defaults: diskNeed = %d, want %d", got, want)
	}
	if got := diskNeed(o); got < 20*gb || got > 30*gb {
		t.Fatalf("defaults: diskNeed = %s, not between 20 and 30 GB", gib(got))
	}
	// 100 B alone: 4 M records/s x 116 B = 464 MB/s.
	o.sizes = []int{100}
	if got, want := diskNeed(o), int64(2.3*10*4e6*116)+diskSlack; got != want {
		t.Fatalf("100 B: diskNeed = %d, want %d", got, want)
	}
	// Without the consume rows: one produce topic, 1.5 x 11 s.
	o.skipCons = true
	if got, want := diskNeed(o), int64(1.5*11*4e6*116)+diskSlack; got != want {
		t.Fatalf("produce only: diskNeed = %d, want %d", got, want)
	}
	// A short run needs a third of a 10 s one (past the slack).
	o = options{sizes: []int{100, 1024}, duration: 3 * time.Second, warmup: time.Second}
	short, full := diskNeed(o)-diskSlack, diskNeed(options{sizes: []int{100, 1024}, duration: 10 * time.Second, warmup: time.Second})-diskSlack
	if d := 10*short - 3*full; d < -10 || d > 10 {
		t.Fatalf("3 s: %d, 10 s: %d, want 3:10", short, full)
	}
}

func TestCheckDisk(t *testing.T) {
	o := options{sizes: []int{100, 1024}, duration: 10 * time.Second, warmup: time.Second}
	need := diskNeed(o)
	if err := checkDisk(o, "/tmp", need); err != nil {
		t.Fatalf("exactly enough: %v", err)
	}
	err := checkDisk(o, "/tmp", need-1)
	if err == nil {
		t.Fatal("one byte short: no error")
	}
	for _, s := range []string{"/tmp", gib(need), "KAFKA_STATE_ROOT", "-duration"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q: %v", s, err)
		}
	}
	if err := preflight(o, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a dir that does not exist: no error")
	}
}

func TestLastLogLine(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "server.log")
	body := strings.Repeat("[2026-12-02 12:00:00,000] INFO filler line\n", 3000) +
		"[2026-12-02 12:40:01,000] ERROR Shutdown broker because all log dirs in /tmp/x/data have failed\n\n"
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := lastLogLine(f); !strings.HasSuffix(got, "all log dirs in /tmp/x/data have failed") {
		t.Fatalf("lastLogLine = %q", got)
	}
	if got := lastLogLine(filepath.Join(dir, "none")); !strings.Contains(got, "no such file") {
		t.Fatalf("missing file: %q", got)
	}
}

// TestBrokerProcWatch: the watch sees a process that stands for the broker
// (its command line names the state dir's server.properties) exit, and
// cancels the run with the broker's last log line.
func TestBrokerProcWatch(t *testing.T) {
	st := t.TempDir()
	if err := os.MkdirAll(filepath.Join(st, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st, "logs", "server.log"), []byte("started\nall log dirs have failed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// sh (not exec'ing its last command: "; :") keeps the path in its
	// command line, as the broker's java does.
	cmd := exec.Command("sh", "-c", "sleep 600; :", "broker", filepath.Join(st, "server.properties"))
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh: %v", err)
	}
	p := &brokerProc{state: st, pid: cmd.Process.Pid}
	// Start returns once the child has begun its exec; the kernel sets the
	// new command line a moment later, so /proc may read it empty at first
	// on a loaded machine.
	for deadline := time.Now().Add(30 * time.Second); !p.alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a running broker is not alive after 30 s")
		}
	}
	if other := (&brokerProc{state: t.TempDir(), pid: cmd.Process.Pid}); other.alive() {
		t.Fatal("a process of another state dir counts as the broker")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan struct{})
	go func() { p.watch(ctx, cancel); close(done) }()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the watch did not see the broker exit")
	}
	err := context.Cause(ctx)
	if !errors.Is(err, errBrokerDead) || !strings.Contains(err.Error(), "all log dirs have failed") {
		t.Fatalf("cause: %v", err)
	}
	b := &bench{proc: p}
	if err := b.between(context.Background()); !errors.Is(err, errBrokerDead) {
		t.Fatalf("between on a dead broker: %v", err)
	}
}

func TestDiskUse(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "t-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t-0", "0.log"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := diskUse(dir); n < 1<<20 {
		t.Fatalf("diskUse = %d, want at least 1 MiB", n)
	}
	s := startDiskSampler(dir)
	if got := s.stop(); !strings.Contains(got, "peak disk use") || s.peak < 1<<20 {
		t.Fatalf("sampler: %q (peak %d)", got, s.peak)
	}
	s.stop() // twice is fine
}

func TestWithOutput(t *testing.T) {
	err := fmt.Errorf("eos: %w", errDeadline)
	if got := withOutput(err, " \n"); got != err {
		t.Fatalf("empty output changed the error: %v", got)
	}
	got := withOutput(err, "a\nb\nlast line\n")
	if !errors.Is(got, errDeadline) || !strings.HasSuffix(got.Error(), "its last lines: a\nb\nlast line") {
		t.Fatalf("withOutput = %v", got)
	}
}
