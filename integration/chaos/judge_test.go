package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// record is one record as a judge saw it.
type record struct {
	offset int64
	value  int
}

// fill writes n records with the unique values 0..n-1 to topic with Kafka's
// VerifiableProducer (the Java client's defaults: idempotent, acks=all) and
// returns, per partition, the values in offset order as the producer's
// acknowledgements report them.
func fill(ctx context.Context, brokers, topic string, n int) (map[int32][]int, error) {
	cmd, err := kafkatest.ToolCmd(ctx, "VerifiableProducer", "--bootstrap-server", brokers,
		"--topic", topic, "--max-messages", strconv.Itoa(n), "--throughput", "-1")
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	recs := map[int32][]record{}
	acked := -1
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Name      string `json:"name"`
			Value     string `json:"value"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Acked     int    `json:"acked"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		switch ev.Name {
		case "producer_send_success":
			v, err := strconv.Atoi(ev.Value)
			if err != nil {
				return nil, fmt.Errorf("VerifiableProducer value %q: %v", ev.Value, err)
			}
			recs[ev.Partition] = append(recs[ev.Partition], record{ev.Offset, v})
		case "tool_data":
			acked = ev.Acked
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("VerifiableProducer: %v\n%s", err, tail(stderr.String(), 20))
	}
	if acked != n {
		return nil, fmt.Errorf("VerifiableProducer acked %d of %d records\n%s", acked, n, tail(stderr.String(), 20))
	}
	out := map[int32][]int{}
	total := 0
	for p, rs := range recs {
		slices.SortFunc(rs, func(a, b record) int { return int(a.offset - b.offset) })
		for i, r := range rs {
			if i > 0 && r.offset == rs[i-1].offset {
				return nil, fmt.Errorf("VerifiableProducer reported offset %d of partition %d twice", r.offset, p)
			}
			out[p] = append(out[p], r.value)
		}
		total += len(rs)
	}
	if total != n {
		return nil, fmt.Errorf("VerifiableProducer reported %d successes for %d records", total, n)
	}
	return out, nil
}

// tailSize is how many of n input records are written only after the rounds
// ran (fillTail): a tenth, at least 2.
func tailSize(n int) int { return max(2, n/10) }

// tailSplit spreads n tail records over the input's two partitions: value
// head+i goes to partition i mod 2.
func tailSplit(n int) map[int32]int { return map[int32]int{0: (n + 1) / 2, 1: n / 2} }

// checkEnds checks that each input partition ends right after the records
// fill reported (offsets 0..len-1), so that the stops computed from it are
// the ends the tail completes.
func checkEnds(ctx context.Context, brokers, topic string, input map[int32][]int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	hwms, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = hwms.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets of %s: %v", topic, err)
	}
	for p := range int32(2) {
		o, _ := hwms.Lookup(topic, p)
		if o.Offset != int64(len(input[p])) {
			return fmt.Errorf("input partition %d ends at %d, but the producer reported %d records", p, o.Offset, len(input[p]))
		}
	}
	return nil
}

// fillTail writes the tail: the values head, head+1, ... (split per
// partition as tailSplit says, value head+i to partition i mod 2) with an
// idempotent producer (acks=all), and checks that each landed at the offset
// the processes' stops count on (right after the head). It returns the tail
// values per partition in offset order.
func fillTail(ctx context.Context, brokers, topic string, head int, split map[int32]int, input map[int32][]int, extra map[int32]int) (map[int32][]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := range split[0] + split[1] {
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: []byte(strconv.Itoa(head + i))})
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return nil, fmt.Errorf("writing the tail of %s: %v", topic, err)
	}
	out := map[int32][]int{}
	for _, r := range res {
		p := r.Record.Partition
		if want := int64(len(input[p]) + extra[p] + len(out[p])); r.Record.Offset != want {
			return nil, fmt.Errorf("tail record %s landed at %d/%d, want offset %d (the processes' stop counts on it)", r.Record.Value, p, r.Record.Offset, want)
		}
		v, _ := strconv.Atoi(string(r.Record.Value))
		out[p] = append(out[p], v)
	}
	return out, nil
}

// addTail appends each partition's tail values to its input values: every
// partition of the tail, also one the head left empty (the
// VerifiableProducer's sticky partitioner can put a whole head in one
// partition, and fill then reports no other).
func addTail(input, tail map[int32][]int) {
	for p, vs := range tail {
		input[p] = append(input[p], vs...)
	}
}

// writeOversized writes the batching variant's record too large for the
// output to partition 0 of topic, where it must land at offset at (the
// processes' stops count on it).
func writeOversized(ctx context.Context, brokers, topic string, at int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: oversized}).First()
	if err != nil {
		return fmt.Errorf("writing the oversized record to %s: %v", topic, err)
	}
	if r.Offset != at {
		return fmt.Errorf("the oversized record landed at 0/%d, want %d", r.Offset, at)
	}
	return nil
}

// consoleJudge is Kafka's ConsoleConsumer reading a topic from the beginning
// under read_committed, parsed as it prints.
type consoleJudge struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	count  atomic.Int64
	done   chan struct{}

	mu     sync.Mutex
	recs   map[int32][]kafkatest.ConsoleRecord
	bad    []string
	stderr strings.Builder
	err    error
}

// startJudge starts a ConsoleConsumer on topic that exits after idle without
// a record (the judge that runs through the chaos: it is stopped, once it
// reached the final judge's ends, see reached).
func startJudge(brokers, topic string, idle time.Duration) (*consoleJudge, error) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd, err := kafkatest.ToolCmd(ctx, "consumer.ConsoleConsumer",
		"--bootstrap-server", brokers, "--topic", topic, "--from-beginning",
		"--isolation-level", "read_committed", "--timeout-ms", strconv.FormatInt(idle.Milliseconds(), 10),
		"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
		"--formatter-property", "print.key=true")
	if err != nil {
		cancel()
		return nil, err
	}
	j := &consoleJudge{cmd: cmd, cancel: cancel, done: make(chan struct{}), recs: map[int32][]kafkatest.ConsoleRecord{}}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	cmd.Stderr = &lockedWriter{mu: &j.mu, w: &j.stderr}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(j.done)
		j.parse(stdout)
		err := cmd.Wait()
		j.mu.Lock()
		j.err = err
		j.mu.Unlock()
	}()
	return j, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (j *consoleJudge) parse(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rec, err := kafkatest.ParseConsoleLine(sc.Text())
		j.mu.Lock()
		if err == nil {
			j.recs[rec.Partition] = append(j.recs[rec.Partition], rec)
		} else if len(j.bad) < 10 {
			j.bad = append(j.bad, sc.Text())
		}
		j.mu.Unlock()
		if err == nil {
			j.count.Add(1)
		}
	}
}

// reached reports "" once the judge has read, in each partition, the offset
// given (the last record the final judge read there), or else how far it is.
func (j *consoleJudge) reached(last map[int32]int64) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var behind []string
	for p, want := range last {
		at := int64(-1)
		for _, r := range j.recs[p] {
			at = max(at, r.Offset)
		}
		if at < want {
			behind = append(behind, fmt.Sprintf("partition %d at offset %d of %d", p, at, want))
		}
	}
	slices.Sort(behind)
	return strings.Join(behind, "; ")
}

// stop ends the judge (SIGTERM: it prints its total and exits) and returns
// what it read.
func (j *consoleJudge) stop() (map[int32][]kafkatest.ConsoleRecord, error) {
	j.cancel()
	<-j.done
	return j.result()
}

func (j *consoleJudge) result() (map[int32][]kafkatest.ConsoleRecord, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.bad) > 0 {
		return j.recs, fmt.Errorf("ConsoleConsumer printed lines that are not records: %q", j.bad)
	}
	// On its idle timeout (--timeout-ms) the ConsoleConsumer of Kafka 4
	// logs "ERROR Error processing message, terminating consumer process"
	// with a TimeoutException: that is its normal end. Any other ERROR is not.
	for _, line := range strings.Split(j.stderr.String(), "\n") {
		if strings.Contains(line, " ERROR ") && !strings.Contains(line, "Error processing message, terminating consumer process") {
			return j.recs, fmt.Errorf("ConsoleConsumer logged errors:\n%s", tail(j.stderr.String(), 20))
		}
	}
	return j.recs, nil
}

// progress counts the distinct values a read_committed franz-go consumer has
// seen in a topic: the progress of the copy, as a reader sees it.
type progress struct {
	seen     []bool
	distinct atomic.Int64
	total    atomic.Int64
	cancel   context.CancelFunc
	done     chan struct{}
}

func startProgress(brokers, topic string, n int) (*progress, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &progress{seen: make([]bool, n), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				p.total.Add(1)
				v, err := strconv.Atoi(string(r.Value))
				if err == nil && v >= 0 && v < n && !p.seen[v] {
					p.seen[v] = true
					p.distinct.Add(1)
				}
			})
		}
	}()
	return p, nil
}

func (p *progress) stop() { p.cancel(); <-p.done }

// groupLag returns, per partition of topic, the end offset minus the group's
// committed offset (the end offset when nothing is committed).
func groupLag(ctx context.Context, adm *kadm.Client, group, topic string) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	lag := map[int32]int64{}
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		c, ok := committed.Lookup(topic, o.Partition)
		if !ok || c.Err != nil {
			lag[o.Partition] = o.Offset
			return
		}
		lag[o.Partition] = o.Offset - c.At
	})
	return lag, ferr
}

// openTransactions lists the transactions the coordinator still holds open
// (Ongoing, PrepareCommit, PrepareAbort, PrepareEpochFence).
func openTransactions(ctx context.Context, adm *kadm.Client) ([]string, error) {
	ls, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		return nil, err
	}
	var open []string
	for _, l := range ls.Sorted() {
		switch l.State {
		case "Empty", "CompleteCommit", "CompleteAbort", "Dead":
		default:
			open = append(open, fmt.Sprintf("%s=%s(pid %d)", l.TxnID, l.State, l.ProducerID))
		}
	}
	return open, nil
}

// hangingTransactions runs Kafka's `TransactionsCommand find-hanging`: open
// transactions in the partition logs that the coordinator does not know.
func hangingTransactions(ctx context.Context, brokers string) ([]string, error) {
	cmd, err := kafkatest.ToolCmd(ctx, "TransactionsCommand", "--bootstrap-server", brokers, "find-hanging", "--broker-id", "1")
	if err != nil {
		return nil, err
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("TransactionsCommand find-hanging: %v", err)
	}
	var rows []string
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if i == 0 && strings.HasPrefix(line, "Topic") {
			continue
		}
		if strings.TrimSpace(line) != "" {
			rows = append(rows, line)
		}
	}
	return rows, nil
}
