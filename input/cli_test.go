package input

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scenarioCLIRun is the acceptance run of the input: a bounded Kafka-to-file
// pipeline run through the Benthos CLI (`run`, as `connect-eos run` does)
// over partitions with awkward tails emits exactly the committed non-control
// records below the stops, in per-partition order, exits 0, and leaves the
// group's committed offsets at the stops.
//
//	p0: records, then an aborted transaction: the ABORT marker is the last entry
//	p1: empty
//	p2: records, a tombstone in the middle and one at the tail (dropped)
//	p3: records, a committed transaction, then another producer's open
//	    transaction at the tail (the stop is the LSO)
//	p4: records, then a committed transaction: the COMMIT marker is last
//
// Records appended after the run started are not read.
func scenarioCLIRun(t *testing.T, e *env) {
	topic := e.topic(t, 5)
	want := map[int32][]string{}
	add := func(p int32, vs ...[]byte) {
		for _, v := range vs {
			if v != nil {
				want[p] = append(want[p], string(v))
			}
		}
	}
	p0 := vals("p0-", 4)
	e.produce(t, topic, 0, p0...)
	add(0, p0...)
	abort := e.beginTxn(t)
	abort.produce(topic, 0, vals("p0-aborted-", 2)...)
	abort.end(false)

	p2 := [][]byte{[]byte("p2-0"), nil, []byte("p2-2"), []byte("p2-3"), nil}
	e.produce(t, topic, 2, p2...)
	add(2, p2...)

	p3 := vals("p3-", 3)
	e.produce(t, topic, 3, p3...)
	add(3, p3...)
	commit := e.beginTxn(t)
	commit.produce(topic, 3, vals("p3-txn-", 2)...)
	add(3, vals("p3-txn-", 2)...)
	c4 := vals("p4-", 2)
	e.produce(t, topic, 4, c4...)
	add(4, c4...)
	commit.produce(topic, 4, vals("p4-txn-", 2)...)
	add(4, vals("p4-txn-", 2)...)
	commit.end(true)

	e.waitEnd(t, topic, 0, 7) // 4 + 2 aborted + marker
	e.waitEnd(t, topic, 3, 6) // 3 + 2 + marker
	e.waitEnd(t, topic, 4, 5) // 2 + 2 + marker
	open := e.beginTxn(t)
	open.produce(topic, 3, vals("p3-open-", 2)...)
	t.Cleanup(func() { open.end(false) })

	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	group := uniq(t, "g")
	conf := filepath.Join(dir, "bounded.yaml")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, `
http:
  enabled: false
# Benthos' CLI leaves a goroutine behind that calls os.Exit(1) at
# shutdown_timeout + 1s after the run, even a clean one: harmless in a binary
# that exits right away, fatal for the test binary that ran it in-process.
shutdown_timeout: 1h
logger:
  level: warn
input:
  kafka_native:
    seed_brokers: [ %s ]
    topics: [ %s ]
    consumer_group: %s
    stop_offset: latest
    tombstones: drop
    max_batch_records: 2
pipeline:
  threads: 1 # several threads process batches concurrently and reorder them
  processors:
    - mapping: 'root = "%%v\t%%v\t%%s".format(@kafka_partition, @kafka_offset, content().string())'
output:
  file:
    path: %s
    codec: lines
`, strings.Join(e.brokers, ","), topic, group, out), 0o644))

	// Appends once the run emitted its first record, so after the stops
	// were captured: they are never read.
	stops := map[int32]int64{0: 7, 1: 0, 2: 5, 3: 6, 4: 5}
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if fi, err := os.Stat(out); err == nil && fi.Size() > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		for p := int32(0); p < 5; p++ {
			if p != 3 { // p3's tail is the open transaction
				e.produce(t, topic, p, []byte("late"))
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, err := service.RunCLIToCode(ctx, service.CLIOptSetArgs("connect-eos", "run", conf))
	require.NoError(t, err)
	require.Equal(t, 0, code, "a bounded run exits 0")

	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	got := map[int32][]string{}
	lastOffset := map[int32]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 3)
		require.Len(t, f, 3, line)
		p, _ := strconv.Atoi(f[0])
		off, _ := strconv.ParseInt(f[1], 10, 64)
		if last, ok := lastOffset[int32(p)]; ok {
			require.Greater(t, off, last, "per-partition order")
		}
		lastOffset[int32(p)] = off
		require.Less(t, off, stops[int32(p)], "read past the stop: %s", line)
		got[int32(p)] = append(got[int32(p)], f[2])
	}
	<-appended
	for p := int32(0); p < 5; p++ {
		assert.Equal(t, want[p], got[p], "partition %d", p)
	}
	for p := int32(0); p < 5; p++ {
		assert.Equal(t, stops[p], e.committed(t, group, topic, p), "partition %d: committed at the stop", p)
	}

	if judge := readCommittedJudge; judge != nil && e.fake == nil {
		// Kafka's own consumer (read_committed) sees the same records
		// below the stops.
		all := judge(t, e, topic)
		for p := int32(0); p < 5; p++ {
			var j []string
			for _, r := range all[p] {
				if r.offset < stops[p] && r.value != "null" {
					j = append(j, r.value)
				}
			}
			assert.Equal(t, want[p], j, "Kafka's ConsoleConsumer, partition %d", p)
		}
	}
}

type judged struct {
	offset int64
	value  string
}

// readCommittedJudge, when set (against Apache Kafka), reads a topic with
// Kafka's own ConsoleConsumer under read_committed and returns the values per
// partition (a tombstone reads "null").
var readCommittedJudge func(t *testing.T, e *env, topic string) map[int32][]judged
