package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The contenders of the produce rows and of the consume rows.
const (
	cEOS    = "kafka_eos"
	cPlain  = "plain idempotent"
	cProbe  = "raw franz-go txn"
	cPP     = "ProducerPerformance txn"
	cNative = "kafka_native (message)"
	cCP     = "ConsumerPerformance read_committed"
	cRawC   = "raw franz-go poll"
	// The Arrow rows (issue 6): the input in format: arrow, and the
	// exactly-once copy kafka_native -> kafka_eos per message and as Arrow.
	cNativeArrow = "kafka_native (Arrow)"
	cCopyMsg     = "copy (message)"
	cCopyArrow   = "copy (Arrow)"
)

var (
	produceContenders = []string{cEOS, cPlain, cProbe, cPP}
	consumeContenders = []string{cNative, cNativeArrow, cCP, cRawC}
	copyContenders    = []string{cCopyMsg, cCopyArrow}
)

// cell is one row of a table: its parameters and, per contender, one result
// per round (nil where the run failed; errs says why).
type cell struct {
	size     int
	interval time.Duration // 0 for consume rows
	rounds   map[string][]*result
	errs     []string
	copy     bool // a copy row (interval is the copy's epoch interval)
}

func newCell(size int, interval time.Duration) *cell {
	return &cell{size: size, interval: interval, rounds: map[string][]*result{}}
}

func run(ctx context.Context, o options) error {
	started := time.Now()
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if o.brokers == "" {
		addr, err := brokerUp(ctx, root, o.brokerName)
		if err != nil {
			return err
		}
		o.brokers = addr
		if !o.keep {
			defer brokerDown(root, o.brokerName)
		}
	}
	logf("broker %s", o.brokers)
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tmp, err := os.MkdirTemp("", "connect-eos-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	loads := startLoadSampler()
	stamp := time.Now().Format("150405")
	var produce, consume, copies []*cell
	for _, size := range o.sizes {
		for _, iv := range o.intervals {
			c := newCell(size, iv)
			produce = append(produce, c)
			for r := 0; r < o.runs; r++ {
				for i := range produceContenders {
					name := produceContenders[(i+r)%len(produceContenders)]
					if name == cPP && o.skipJava || !o.selected(name) {
						continue
					}
					topic := fmt.Sprintf("bench-%s-%d-%s-%d-%s", slug(name), size, iv, r, stamp)
					res, err := withTopic(ctx, adm, topic, o.partitions, func() (result, error) {
						return runProduce(ctx, name, o, topic, size, iv, tmp)
					})
					c.record(name, r, o.runs, res, err)
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
		}
	}
	if !o.skipCons {
		for _, size := range o.sizes {
			c := newCell(size, 0)
			consume = append(consume, c)
			topic := fmt.Sprintf("bench-consume-%d-%s", size, stamp)
			if err := createTopic(ctx, adm, topic, o.partitions); err != nil {
				return err
			}
			// Filled transactionally (1 s epochs), so read_committed
			// readers cross transaction markers: +slots warm-up records.
			fillOpts := o
			fillOpts.topic, fillOpts.size, fillOpts.interval = topic, size, time.Second
			if _, err := runProbe(ctx, fillOpts, o.slots); err != nil {
				return fmt.Errorf("filling %s: %w", topic, err)
			}
			total := o.records + o.slots
			logf("filled %s with %d records of %d B", topic, total, size)
			for r := 0; r < o.runs; r++ {
				for i := range consumeContenders {
					name := consumeContenders[(i+r)%len(consumeContenders)]
					if name == cCP && o.skipJava || !o.selected(name) {
						continue
					}
					res, err := runConsume(ctx, name, o, topic, size, total, tmp)
					c.record(name, r, o.runs, res, err)
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
			// The copy rows read the same topic (same data), each
			// run on a fresh group into a fresh topic.
			cc := newCell(size, o.intervals[0])
			cc.copy = true
			if o.selected(cCopyMsg) || o.selected(cCopyArrow) {
				copies = append(copies, cc)
			}
			for r := 0; r < o.runs; r++ {
				for i := range copyContenders {
					name := copyContenders[(i+r)%len(copyContenders)]
					if !o.selected(name) {
						continue
					}
					res, err := runCopy(ctx, adm, name, o, topic, size, total, r, stamp)
					cc.record(name, r, o.runs, res, err)
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
			}
			deleteTopic(adm, topic)
		}
	}

	var sat []*satCell
	if !o.skipSat && o.selected(cEOS) {
		if sat, err = runSaturation(ctx, adm, o, stamp, tmp); err != nil {
			return err
		}
	}

	rep := report{opts: o, produce: produce, consume: consume, copies: copies, saturation: sat, started: started, elapsed: time.Since(started)}
	rep.machine = describeMachine(ctx, root)
	if l := loads.stop(); l != "" {
		rep.machine = append(rep.machine, l)
	}
	md := rep.markdown()
	fmt.Println(md)
	if o.plot != "" {
		if err := writePlot(o.plot, produce); err != nil {
			logf("plot: %v", err)
		} else {
			logf("wrote %s", o.plot)
		}
	}
	if o.out != "" {
		if err := writeBlock(o.out, md); err != nil {
			return err
		}
		logf("wrote %s", o.out)
	}
	return nil
}

// satCell is one configuration of the saturation row: kafka_eos with 1 KiB
// records, a fresh value per message (a real input allocates every record),
// batches of -sat-batch records and the output's defaults (max_in_flight 64,
// max_buffered_bytes 256 MiB), so that max_in_flight x batch bytes reaches
// the byte budget; optionally with GOMEMLIMIT set on the child.
type satCell struct {
	goMemLimit string
	rounds     []*result
	errs       []string
}

// satGoMemLimit is the GOMEMLIMIT of the second saturation configuration:
// the bound, max_buffered_bytes (256 MiB default) + 64 MiB.
const satGoMemLimit = "320MiB"

const satSize = 1024

func runSaturation(ctx context.Context, adm *kadm.Client, o options, stamp, tmp string) ([]*satCell, error) {
	var out []*satCell
	for _, lim := range []string{"", satGoMemLimit} {
		sc := &satCell{goMemLimit: lim, rounds: make([]*result, o.runs)}
		out = append(out, sc)
		so := o
		so.fresh, so.sample, so.batch, so.maxInFlight = true, true, o.satBatch, 0
		if lim != "" {
			so.childEnv = []string{"GOMEMLIMIT=" + lim}
		}
		for r := 0; r < o.runs; r++ {
			topic := fmt.Sprintf("bench-sat-%d-%d-%s", len(out), r, stamp)
			res, err := withTopic(ctx, adm, topic, o.partitions, func() (result, error) {
				return childRun(ctx, "eos", so, topic, satSize, o.satRecords, time.Second)
			})
			label := "saturation, GOMEMLIMIT " + lim
			if lim == "" {
				label = "saturation, no GOMEMLIMIT"
			}
			if err != nil {
				msg := fmt.Sprintf("round %d %s: %v", r+1, label, err)
				sc.errs = append(sc.errs, msg)
				logf("FAILED %s", msg)
			} else {
				sc.rounds[r] = &res
				logf("round %d %s: %.0f records/s, peak buffered %d MiB, VmHWM %d MiB", r+1, label, res.RecordsPerSec(), res.BufferedPeak>>20, res.RSS>>20)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return out, nil
}

func (c *cell) record(name string, round, runs int, res result, err error) {
	if c.rounds[name] == nil {
		c.rounds[name] = make([]*result, runs)
	}
	label := fmt.Sprintf("%s, %d B", name, c.size)
	if c.interval > 0 {
		label += ", " + c.interval.String()
	}
	if err != nil {
		msg := fmt.Sprintf("round %d %s: %v", round+1, label, err)
		c.errs = append(c.errs, msg)
		logf("FAILED %s", msg)
		return
	}
	c.rounds[name][round] = &res
	logf("round %d %s: %.0f records/s (%.1f MB/s)", round+1, label, res.RecordsPerSec(), res.MBPerSec(c.size))
}

func runProduce(ctx context.Context, name string, o options, topic string, size int, iv time.Duration, tmp string) (result, error) {
	switch name {
	case cEOS:
		return childRun(ctx, "eos", o, topic, size, o.records, iv)
	case cPlain:
		return childRun(ctx, "plain", o, topic, size, o.records, iv)
	case cProbe:
		return childRun(ctx, "probe", o, topic, size, o.records, iv)
	case cPP:
		return runProducerPerf(ctx, o.brokers, topic, o.records, size, iv, tmp)
	}
	return result{}, fmt.Errorf("unknown contender %q", name)
}

func runConsume(ctx context.Context, name string, o options, topic string, size, total int, tmp string) (result, error) {
	var r result
	var err error
	switch name {
	case cNative:
		r, err = childRun(ctx, "native", o, topic, size, total, 0)
	case cNativeArrow:
		r, err = childRun(ctx, "native_arrow", o, topic, size, total, 0)
	case cRawC:
		r, err = childRun(ctx, "rawconsume", o, topic, size, total, 0)
	case cCP:
		r, err = runConsumerPerf(ctx, o.brokers, topic, total, tmp)
	default:
		err = fmt.Errorf("unknown contender %q", name)
	}
	if err == nil && r.Bytes == 0 {
		r.Bytes = r.Records * int64(size)
	}
	return r, err
}

// selected says whether -only lets contender name run.
func (o options) selected(name string) bool { return o.only == nil || o.only[slug(name)] }

// runCopy runs one copy contender: an exactly-once copy of the consume topic
// (total records) to a fresh topic with as many partitions.
func runCopy(ctx context.Context, adm *kadm.Client, name string, o options, topic string, size, total, round int, stamp string) (result, error) {
	kind := "copy_message"
	if name == cCopyArrow {
		kind = "copy_arrow"
	}
	o.copyTopic = fmt.Sprintf("bench-%s-%d-%d-%s", strings.ReplaceAll(kind, "_", "-"), size, round, stamp)
	r, err := withTopic(ctx, adm, o.copyTopic, o.partitions, func() (result, error) {
		return childRun(ctx, kind, o, topic, size, total, o.intervals[0])
	})
	if err == nil && r.Records != int64(total) {
		err = fmt.Errorf("copied %d records, want %d", r.Records, total)
	}
	if err == nil {
		r.Bytes = r.Records * int64(size)
	}
	return r, err
}

func slug(name string) string {
	return strings.NewReplacer(" ", "", "(", "", ")", "", "_", "").Replace(strings.ToLower(strings.Fields(name)[0]))
}

// withTopic runs fn on a fresh topic and deletes the topic afterwards (the
// machine's disk is not the subject).
func withTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int, fn func() (result, error)) (result, error) {
	if err := createTopic(ctx, adm, topic, partitions); err != nil {
		return result{}, err
	}
	defer deleteTopic(adm, topic)
	return fn()
}

func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		m, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := m.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == partitions {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no leaders: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func deleteTopic(adm *kadm.Client, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		logf("delete topic %s: %v", topic, err)
	}
}

// brokerUp starts the bench broker with up.sh and returns its address. The
// name is unique per run by default (bench-<pid>): up.sh reuses a running
// broker of the same name and down.sh stops it, so a fixed name would let two
// runs on a shared machine measure on, and stop, one broker.
func brokerUp(ctx context.Context, root, name string) (string, error) {
	logf("starting Apache Kafka: integration/kafka/up.sh --tv 2 --name %s --no-sasl-ssl", name)
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "integration/kafka/up.sh"), "--tv", "2", "--name", name, "--no-sasl-ssl")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("up.sh: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "KAFKA_BROKERS="); ok && v != "" {
			return v, nil
		}
	}
	return "", errors.New("up.sh printed no KAFKA_BROKERS= line")
}

func brokerDown(root, name string) {
	cmd := exec.Command("bash", filepath.Join(root, "integration/kafka/down.sh"), "--name", name)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		logf("down.sh: %v", err)
	}
}

// loadSampler reads the 1-minute load average every 10 s during the run: the
// machine is shared, and the load at the end alone says little about the
// rounds before it.
type loadSampler struct {
	mu   sync.Mutex
	vals []float64
	done chan struct{}
}

func startLoadSampler() *loadSampler {
	l := &loadSampler{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			if b, err := os.ReadFile("/proc/loadavg"); err == nil {
				var v float64
				if _, err := fmt.Sscan(string(b), &v); err == nil {
					l.mu.Lock()
					l.vals = append(l.vals, v)
					l.mu.Unlock()
				}
			}
			select {
			case <-l.done:
				return
			case <-t.C:
			}
		}
	}()
	return l
}

// stop ends the sampling and describes it ("" without samples).
func (l *loadSampler) stop() string {
	close(l.done)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.vals) == 0 {
		return ""
	}
	lo, hi := l.vals[0], l.vals[0]
	for _, v := range l.vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("1-minute load average during the run (every 10 s, %d samples): min %.1f, median %.1f, max %.1f", len(l.vals), lo, median(l.vals), hi)
}
