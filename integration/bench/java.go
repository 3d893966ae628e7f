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

// tool runs one of Kafka's tools through integration/kafka/tool.sh.
func tool(ctx context.Context, class string, args ...string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "integration/kafka/tool.sh"), class}, args...)...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %v: %s", class, err, lastLines(stderr.String()+stdout.String(), 15))
	}
	return stdout.String(), nil
}

// runProducerPerf runs ProducerPerformance transactionally with the same
// record count, the same value and epoch interval, acks=all (idempotence is
// the Java client's default), its other settings at their defaults. The value
// comes from a payload file holding exactly the bytes the Go contenders send:
// with --record-size the tool would fill a fresh random payload for every
// record (generateRandomPayload), CPU the Go contenders do not spend.
func runProducerPerf(ctx context.Context, brokers, topic string, records, size int, interval time.Duration, dir string) (result, error) {
	file := filepath.Join(dir, fmt.Sprintf("payload-%d", size))
	if err := os.WriteFile(file, payload(size), 0o644); err != nil {
		return result{}, err
	}
	out, err := tool(ctx, "ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(records), "--throughput", "-1",
		"--payload-file", file,
		"--producer-props", "bootstrap.servers="+brokers, "acks=all",
		"--transactional-id", "bench-pp-"+topic,
		"--transaction-duration-ms", strconv.FormatInt(interval.Milliseconds(), 10))
	if err != nil {
		return result{}, err
	}
	return parseProducerPerf(out)
}

var ppFinal = regexp.MustCompile(`(\d+) records sent, ([0-9.]+) records/sec \(([0-9.]+) MB/sec\)`)

// parseProducerPerf reads ProducerPerformance's final line:
// "N records sent, X records/sec (Y MB/sec), A ms avg latency, ...".
// Intermediate lines ("N records sent, X records/sec ... window") come
// first; the last match is the total.
func parseProducerPerf(out string) (result, error) {
	ms := ppFinal.FindAllStringSubmatch(out, -1)
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
// (a consumer config file) for exactly records records.
func runConsumerPerf(ctx context.Context, brokers, topic string, records int, dir string) (result, error) {
	conf := filepath.Join(dir, "read_committed.properties")
	if err := os.WriteFile(conf, []byte("isolation.level=read_committed\n"), 0o644); err != nil {
		return result{}, err
	}
	out, err := tool(ctx, "ConsumerPerformance",
		"--bootstrap-server", brokers, "--topic", topic, "--num-records", strconv.Itoa(records),
		"--command-config", conf, "--timeout", "30000", "--group", "bench-cp-"+topic+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		return result{}, err
	}
	return parseConsumerPerf(out, records)
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
