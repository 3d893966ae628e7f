package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// repoRoot is the directory holding this module's go.mod, found from the
// working directory upwards (make bench runs at the root).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/connect-eos/connect-eos\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the connect-eos repository")
		}
		dir = parent
	}
}

// tool runs one of Kafka's tools through integration/kafka/tool.sh with the
// JVM flags heap (KAFKA_TOOL_HEAP; tool.sh's default when empty) and returns
// its stdout and the CPU seconds of the JVM (tool.sh execs it: the child's
// rusage is the JVM's). The tool is killed after limit (runDeadline of the
// run it stands for) or as soon as ctx ends.
func tool(ctx context.Context, limit time.Duration, heap, class string, args ...string) (string, float64, error) {
	root, err := repoRoot()
	if err != nil {
		return "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "integration/kafka/tool.sh"), class}, args...)...)
	cmd.WaitDelay = 10 * time.Second
	if heap != "" {
		cmd.Env = append(os.Environ(), "KAFKA_TOOL_HEAP="+heap)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if err := runErr(ctx, class, limit); err != nil {
			return stdout.String(), 0, withOutput(err, stderr.String()+stdout.String())
		}
		return stdout.String(), 0, fmt.Errorf("%s: %v: %s", class, err, lastLines(stderr.String()+stdout.String(), 15))
	}
	return stdout.String(), cpuSeconds(cmd.ProcessState), nil
}

// ppKind is one configuration of ProducerPerformance.
type ppKind struct {
	// tuned: batch.size=1048576 linger.ms=5 buffer.memory=268435456 and
	// -Xmx1g, what a Java user sets for throughput; otherwise the
	// client's defaults and the heap kafka-producer-perf-test.sh gives
	// (-Xmx512M).
	tuned bool
	// txn: transactional (--transactional-id, --transaction-duration-ms).
	txn bool
}

// ppTunedProps are the tuned row's producer settings.
var ppTunedProps = []string{"batch.size=1048576", "linger.ms=5", "buffer.memory=268435456"}

// runProducerPerf runs ProducerPerformance with acks=all (idempotence is the
// Java client's default) on the same value as the Go contenders, for records
// records of which warmup are --warmup-records, and reads its steady-state
// line (the records after the warm-up, from when the warm-up ended until the
// producer closed). The value comes from a payload file holding exactly the
// bytes the Go contenders send: with --record-size the tool would fill a fresh
// random payload for every record (generateRandomPayload), CPU the Go
// contenders do not spend.
func runProducerPerf(ctx context.Context, limit time.Duration, k ppKind, brokers, topic string, records, warmup, size int, interval time.Duration, dir string) (result, error) {
	file := filepath.Join(dir, fmt.Sprintf("payload-%d", size))
	if err := os.WriteFile(file, payload(size), 0o644); err != nil {
		return result{}, err
	}
	args := []string{"--topic", topic, "--num-records", strconv.Itoa(records), "--throughput", "-1",
		"--payload-file", file, "--warmup-records", strconv.Itoa(warmup),
		"--bootstrap-server", brokers,
		// One --command-property with every setting: the option takes a
		// list, and a second occurrence replaces the first.
		"--command-property", "acks=all"}
	heap := "-Xmx512m"
	if k.tuned {
		heap = "-Xmx1g"
		args = append(args, ppTunedProps...)
	}
	if k.txn {
		args = append(args, "--transactional-id", "bench-pp-"+topic,
			"--transaction-duration-ms", strconv.FormatInt(interval.Milliseconds(), 10))
	}
	out, cpu, err := tool(ctx, limit, heap, "ProducerPerformance", args...)
	if err != nil {
		return result{}, err
	}
	r, err := parseProducerPerf(out)
	if err != nil {
		return result{}, err
	}
	r.Total, r.CPU = int64(records), cpu
	return r, nil
}

var (
	ppFinal  = regexp.MustCompile(`(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\)`)
	ppSteady = regexp.MustCompile(`(\d+) steady state records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\)`)
)

// parseProducerPerf reads ProducerPerformance's steady-state line ("N steady
// state records sent, X records/sec (Y MB/sec), ..."), printed after the
// total line when --warmup-records is given, or else its final line.
func parseProducerPerf(out string) (result, error) {
	ms := ppSteady.FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		ms = ppFinal.FindAllStringSubmatch(out, -1)
	}
	if len(ms) == 0 {
		return result{}, fmt.Errorf("ProducerPerformance printed no total line: %s", lastLines(out, 5))
	}
	m := ms[len(ms)-1]
	n, _ := strconv.ParseInt(m[1], 10, 64)
	rate, err1 := strconv.ParseFloat(m[2], 64)
	mbs, err2 := strconv.ParseFloat(m[3], 64)
	if err1 != nil || err2 != nil || rate <= 0 {
		return result{}, fmt.Errorf("ProducerPerformance total line %q", m[0])
	}
	return result{Records: n, Seconds: float64(n) / rate, Rate: rate, MBs: mbs}, nil
}

// runConsumerPerf runs ConsumerPerformance with isolation.level=read_committed
// (a consumer config file) for records records, on a fresh group. Its rate
// (fetch.nMsg.sec) runs from the group's assignment to the last record: its
// offset lookup and first fetch are in it, as the Go readers' connection and
// first fetch are in theirs.
func runConsumerPerf(ctx context.Context, limit time.Duration, brokers, topic string, records int, dir string) (result, error) {
	conf := filepath.Join(dir, "read_committed.properties")
	if err := os.WriteFile(conf, []byte("isolation.level=read_committed\n"), 0o644); err != nil {
		return result{}, err
	}
	out, cpu, err := tool(ctx, limit, "-Xmx512m", "ConsumerPerformance",
		"--bootstrap-server", brokers, "--topic", topic, "--num-records", strconv.Itoa(records),
		"--command-config", conf, "--timeout", "30000", "--group", "bench-cp-"+topic+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		return result{}, err
	}
	r, err := parseConsumerPerf(out, records)
	if err != nil {
		return result{}, err
	}
	r.Total, r.CPU = r.Records, cpu
	return r, nil
}

// parseConsumerPerf reads ConsumerPerformance's CSV (a header line and a
// values line) and takes fetch.nMsg.sec and fetch.MB.sec: the rates without
// the group join (rebalance) time.
func parseConsumerPerf(out string, want int) (result, error) {
	var header []string
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Split(line, ",")
		for i := range fields {
			fields[i] = strings.TrimSpace(fields[i])
		}
		if len(fields) < 5 {
			continue
		}
		if fields[0] == "start.time" {
			header = fields
			continue
		}
		if header == nil || len(fields) != len(header) {
			continue
		}
		get := func(name string) float64 {
			for i, h := range header {
				if h == name {
					v, _ := strconv.ParseFloat(fields[i], 64)
					return v
				}
			}
			return 0
		}
		n := get("data.consumed.in.nMsg")
		rate, mbs := get("fetch.nMsg.sec"), get("fetch.MB.sec")
		if rate <= 0 {
			return result{}, fmt.Errorf("ConsumerPerformance line %q: no fetch.nMsg.sec", line)
		}
		if int(n) < want {
			return result{}, fmt.Errorf("ConsumerPerformance read %v records, want %d", n, want)
		}
		return result{Records: int64(n), Seconds: n / rate, Rate: rate, MBs: mbs}, nil
	}
	return result{}, fmt.Errorf("ConsumerPerformance printed no stats: %s", lastLines(out, 5))
}
