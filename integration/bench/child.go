package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// result is one contender's measurement in one round.
type result struct {
	Records int64   `json:"records"` // records in the measured span
	Bytes   int64   `json:"bytes"`   // their value bytes
	Seconds float64 `json:"seconds"` // the measured span
	// Total is every record the process handled (warm-up included), and
	// CPU the user+system CPU seconds of the whole process (its rusage,
	// taken by the parent): CPU / Total is the cost per record that the
	// broker and the other processes sharing the cores do not change much.
	Total int64   `json:"total"`
	CPU   float64 `json:"cpu,omitempty"`
	// Reads are what a reader received per partition (consume rows),
	// checked by the parent against the topic.
	Reads partReads `json:"reads,omitempty"`
	// RSS is the child's peak resident set size (VmHWM), bytes.
	RSS int64 `json:"rss,omitempty"`
	// kafka_eos only (from its metrics), and the probe's epoch count.
	Epochs    int64   `json:"epochs,omitempty"`
	CommitP50 float64 `json:"commit_p50,omitempty"` // seconds
	CommitP99 float64 `json:"commit_p99,omitempty"`
	StallP50  float64 `json:"stall_p50,omitempty"`
	StallP99  float64 `json:"stall_p99,omitempty"`
	// Saturation row (-sample): the highest kafka_eos_buffered_bytes and
	// VmRSS seen by a 20 ms sampler, bytes.
	BufferedPeak int64 `json:"buffered_peak,omitempty"`
	RSSSampled   int64 `json:"rss_sampled,omitempty"`
	// MemLimit is the Go memory limit the child ran with, bytes, when it
	// set the one the binary derives (-binary-memlimit).
	MemLimit int64 `json:"mem_limit,omitempty"`
	// InputBufferedPeak is the highest kafka_native_buffered_bytes the
	// sampler saw (copy rows), bytes.
	InputBufferedPeak int64 `json:"input_buffered_peak,omitempty"`
	// Rate overrides Records/Seconds when a tool reports its own rate.
	// AllocsPerRecord is the heap objects the whole child allocated in
	// the measured span per record (consume and copy rows).
	AllocsPerRecord float64 `json:"allocs_per_record,omitempty"`
	Rate            float64 `json:"rate,omitempty"`
	MBs             float64 `json:"mbs,omitempty"`
	// LogBytes is the size of the topic's log on the broker after the
	// run (compression rows; set by the parent).
	LogBytes int64 `json:"log_bytes,omitempty"`
	// EndedEarly: a time-bounded reader reached the end of its topic.
	EndedEarly bool `json:"ended_early,omitempty"`
}

// RecordsPerSec is the throughput in records/s.
func (r result) RecordsPerSec() float64 {
	if r.Rate > 0 {
		return r.Rate
	}
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Records) / r.Seconds
}

// MBPerSec is the value throughput in MiB/s (ProducerPerformance's "MB").
func (r result) MBPerSec(size int) float64 {
	if r.MBs > 0 {
		return r.MBs
	}
	return r.RecordsPerSec() * float64(size) / (1 << 20)
}

func quantiles(qs []*dto.Quantile) (p50, p99 float64) {
	for _, q := range qs {
		switch q.GetQuantile() {
		case 0.5:
			p50 = q.GetValue()
		case 0.99:
			p99 = q.GetValue()
		}
	}
	return p50, p99
}

const resultPrefix = "BENCHRESULT "

// runChild runs one contender in this process and prints its result as one
// JSON line on stdout.
func runChild(o options) int {
	ctx := context.Background()
	var r result
	var err error
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench child %s: %v\n", o.child, err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench child %s: %v\n", o.child, err)
			return 1
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	switch o.child {
	case "eos", "plain", "native", "native_arrow", "copy_message", "copy_arrow":
		r, err = runPipeline(ctx, o.child, o)
	case "probe":
		r, err = runProbe(ctx, o, o.slots)
	case "rawproduce":
		r, err = runRawProduce(ctx, o)
	case "rawconsume":
		r, err = runRawConsume(ctx, o)
	case "rawcopy":
		r, err = runRawCopy(ctx, o)
	default:
		err = fmt.Errorf("unknown -child %q", o.child)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench child %s: %v\n", o.child, err)
		return 1
	}
	r.RSS = vmHWM()
	b, _ := json.Marshal(r)
	fmt.Printf("%s%s\n", resultPrefix, b)
	return 0
}

// vmHWM reads this process's peak resident set size from /proc (0 where
// there is no /proc).
func vmHWM() int64 { return procStatus("VmHWM:") }

// vmRSS is this process's resident set size now.
func vmRSS() int64 { return procStatus("VmRSS:") }

func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// childRun runs one contender in a child process: this binary with -child.
// The child's CPU time (user + system, from its rusage) is added to the
// result. The child is killed at runDeadline of its warm-up and duration, or
// as soon as ctx ends (the broker watch ends it when the broker stops).
func childRun(ctx context.Context, kind string, o options, topic string, size, records int, interval time.Duration) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	limit := runDeadline(o.warmup, o.duration)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	prof := ""
	if o.profileDir != "" {
		prof = filepath.Join(o.profileDir, fmt.Sprintf("%s-%d-%s.pprof", kind, size, time.Now().Format("150405")))
	}
	cmd := exec.CommandContext(ctx, exe, "-child", kind, "-brokers", o.brokers, "-topic", topic,
		"-size", strconv.Itoa(size), "-records", strconv.Itoa(records), "-interval", interval.String(),
		"-duration", o.duration.String(), "-warmup", o.warmup.String(),
		"-batch", strconv.Itoa(o.batch), "-probe-slots", strconv.Itoa(o.slots),
		"-max-in-flight", strconv.Itoa(o.maxInFlight),
		"-fresh="+strconv.FormatBool(o.fresh), "-sample="+strconv.FormatBool(o.sample),
		"-p-batch-bytes", strconv.Itoa(o.pBatchBytes), "-p-linger", o.pLinger.String(),
		"-p-compression", o.pCompress, "-p-nodelay="+strconv.FormatBool(o.pNoDelay),
		"-p-max-records", strconv.Itoa(o.pMaxRecords), "-p-sticky-kib", strconv.Itoa(o.pStickyKiB),
		"-copy-topic", o.copyTopic, "-child-cpuprofile", prof,
		"-binary-memlimit="+strconv.FormatBool(o.binaryMemLimit),
		"-compression", o.compression, "-payload", o.payload)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if len(o.childEnv) > 0 {
		cmd.Env = append(os.Environ(), o.childEnv...)
	}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if err := runErr(ctx, kind, limit); err != nil {
			return result{}, withOutput(err, stderr.String())
		}
		return result{}, fmt.Errorf("%s: %v: %s", kind, err, lastLines(stderr.String(), 15))
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			var r result
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return result{}, fmt.Errorf("%s: result %q: %w", kind, rest, err)
			}
			r.CPU = cpuSeconds(cmd.ProcessState)
			if prof != "" {
				// The result beside the profile: its records turn
				// the profile's seconds into a cost per record.
				b, _ := json.Marshal(r)
				if err := os.WriteFile(strings.TrimSuffix(prof, ".pprof")+".json", b, 0o644); err != nil {
					logf("%v", err)
				}
				logf("CPU profile of %s: %s", kind, prof)
			}
			return r, nil
		}
	}
	return result{}, fmt.Errorf("%s printed no result: %s", kind, lastLines(stderr.String(), 15))
}

// cpuSeconds is the user + system CPU time of an exited process.
func cpuSeconds(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
