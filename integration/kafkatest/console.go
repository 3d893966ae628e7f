package kafkatest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ConsoleRecord is one record as Kafka's ConsoleConsumer printed it; a null
// key or value prints as "null".
type ConsoleRecord struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
}

// ConsoleRead reads topic from the beginning with Kafka's own ConsoleConsumer
// under read_committed, an independent second judge (the Java client), and
// returns the records it printed per partition in offset order.
//
// The caller says how many records the judge must read (n, from a read that
// knows its end: ReadCommitted): the ConsoleConsumer stops once it printed n
// (--max-messages). Its idle timeout (idle, for the JVM start, the group join
// and the first fetch) only ends a judge that got stuck: a ConsoleConsumer
// that printed fewer than n records did not reach the end, and ConsoleRead
// returns an error saying so, never the short read.
func ConsoleRead(ctx context.Context, brokers, topic string, n int, idle time.Duration) (map[int32][]ConsoleRecord, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ConsoleRead of %s: want a positive record count, got %d", topic, n)
	}
	cmd, err := ToolCmd(ctx, "consumer.ConsoleConsumer",
		"--bootstrap-server", brokers, "--topic", topic, "--from-beginning",
		"--isolation-level", "read_committed", "--max-messages", strconv.Itoa(n),
		"--timeout-ms", strconv.FormatInt(idle.Milliseconds(), 10),
		"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
		"--formatter-property", "print.key=true")
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	out, got, err := ParseConsole(&stdout)
	if err != nil {
		return nil, err
	}
	if got != n {
		return nil, fmt.Errorf("ConsoleConsumer judge did not reach the end of %s: printed %d of %d records (exit: %v)\n%s",
			topic, got, n, runErr, tail(stderr.String(), 15))
	}
	if runErr != nil {
		return nil, fmt.Errorf("ConsoleConsumer judge of %s: %v\n%s", topic, runErr, tail(stderr.String(), 15))
	}
	return out, nil
}

// ParseConsole parses the lines of a ConsoleConsumer run with print.partition,
// print.offset and print.key ("Partition:P\tOffset:O\tKEY\tVALUE"), and
// returns the records per partition in the order printed and their count. A
// line that is not a record is an error.
func ParseConsole(r *bytes.Buffer) (map[int32][]ConsoleRecord, int, error) {
	out := map[int32][]ConsoleRecord{}
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rec, err := ParseConsoleLine(sc.Text())
		if err != nil {
			return nil, n, err
		}
		out[rec.Partition] = append(out[rec.Partition], rec)
		n++
	}
	return out, n, sc.Err()
}

// ParseConsoleLine parses one line of ParseConsole's format.
func ParseConsoleLine(line string) (ConsoleRecord, error) {
	f := strings.SplitN(line, "\t", 4)
	bad := fmt.Errorf("ConsoleConsumer printed a line that is not a record: %q", line)
	if len(f) != 4 {
		return ConsoleRecord{}, bad
	}
	ps, ok1 := strings.CutPrefix(f[0], "Partition:")
	os, ok2 := strings.CutPrefix(f[1], "Offset:")
	if !ok1 || !ok2 {
		return ConsoleRecord{}, bad
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil {
		return ConsoleRecord{}, bad
	}
	return ConsoleRecord{Partition: int32(p), Offset: o, Key: f[2], Value: f[3]}, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
