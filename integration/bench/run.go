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

// The contenders. Produce rows: the pipelines, the raw franz-go loops and
// ProducerPerformance; consume rows: the readers; copy rows: the exactly-once
// copies and their limit.
const (
	cEOS      = "kafka_eos"
	cPlain    = "plain idempotent"
	cProbe    = "raw franz-go txn"
	cCadence  = "raw franz-go txn at kafka_eos's epochs/s"
	cRawNoTxn = "raw franz-go, no txn (ceiling)"
	cPPTuned  = "ProducerPerformance txn, tuned"
	cPPDef    = "ProducerPerformance txn, defaults"
	cPPNoTxn  = "ProducerPerformance tuned, no txn (ceiling)"

	cRawC        = "raw franz-go poll"
	cNative      = "kafka_native (message)"
	cNativeArrow = "kafka_native (Arrow)"
	cCP          = "ConsumerPerformance read_committed"

	cCopyRaw   = "raw franz-go copy loop"
	cCopyMsg   = "copy (message)"
	cCopyArrow = "copy (Arrow)"
	// cCopySat is the copy's saturation row: copy (message) with
	// max_in_flight raised so far (satCopyInFlight) that the input's
	// max_buffered_bytes, not the output, bounds what is in flight, and the
	// Go memory limit the binary derives for it.
	cCopySat = "copy (message), saturated"
)

// The contenders of each kind of row, in the order of the first round (later
// rounds rotate it). The Go loops come first so that the Java tools' first
// record counts can be sized from a measured rate; cCadence is not rotated: it
// runs right after kafka_eos, at the epochs per second kafka_eos just ran.
var (
	produceContenders = []string{cEOS, cPlain, cProbe, cRawNoTxn, cPPTuned, cPPDef, cPPNoTxn}
	consumeContenders = []string{cRawC, cNative, cNativeArrow, cCP}
	copyContenders    = []string{cCopyRaw, cCopyMsg, cCopyArrow}
)

// slugs are the -only names of the contenders.
var slugs = map[string]string{
	cEOS: "kafkaeos", cPlain: "plain", cProbe: "raw", cCadence: "rawcadence", cRawNoTxn: "rawnotxn",
	cPPTuned: "pptuned", cPPDef: "ppdefaults", cPPNoTxn: "ppnotxn",
	cRawC: "rawpoll", cNative: "kafkanative", cNativeArrow: "kafkanativearrow", cCP: "consumerperformance",
	cCopyRaw: "rawcopy", cCopyMsg: "copymessage", cCopyArrow: "copyarrow", cCopySat: "copysat",
}

func slug(name string) string { return slugs[name] }

// contextRow: a contender that carries no target (a limit or a reference).
func contextRow(name string) bool {
	switch name {
	case cCadence, cRawNoTxn, cPPDef, cPPNoTxn:
		return true
	}
	return false
}

// cell is one row of a table: its parameters and, per contender, one result
// per round (nil where the run failed or did not run; errs says why).
type cell struct {
	size     int
	interval time.Duration // produce: the epoch interval; copy: the copy's
	rounds   map[string][]*result
	errs     []string
	kind     string // "produce", "consume" or "copy"
}

func newCell(kind string, size int, interval time.Duration) *cell {
	return &cell{kind: kind, size: size, interval: interval, rounds: map[string][]*result{}}
}

// bench is one invocation's state.
type bench struct {
	o     options
	adm   *kadm.Client
	cl    *kgo.Client
	tmp   string
	stamp string
	// est is the last measured rate (records/s) per contender and
	// size, to size the Java tools' record counts to the duration.
	est map[string]float64
	// fillRate is the records/s of the last fill of a consume topic.
	fillRate float64
	// filled is the count index of each consume topic, from its last
	// fill: the consume and copy checks count below their bounds with it.
	filled map[string]*countIndex
	// proc is the broker this run started (nil with -brokers).
	proc *brokerProc
}

func (b *bench) estKey(name string, size int) string { return fmt.Sprintf("%s/%d", name, size) }

func run(ctx context.Context, o options) error {
	started := time.Now()
	root, err := repoRoot()
	if err != nil {
		return err
	}
	kafka := "single node KRaft, transaction.version=2, 512 MiB heap, on the same machine"
	if o.brokers != "" {
		kafka = "the broker at -brokers " + o.brokers
	}
	var proc *brokerProc
	if o.brokers == "" {
		if err := preflight(o, stateRoot()); err != nil {
			return err
		}
		addr, err := brokerUp(ctx, root, o.brokerName)
		if err != nil {
			return err
		}
		o.brokers = addr
		if !o.keep {
			defer brokerDown(root, o.brokerName)
		}
		if proc, err = openBrokerProc(o.brokerName); err != nil {
			return err
		}
	}
	// Registered after brokerDown, so it runs first: the watch ends
	// before the broker is stopped.
	ctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	var disk *diskSampler
	if proc != nil {
		go proc.watch(ctx, cancelRun)
		disk = startDiskSampler(proc.dataDir())
		defer func() { logf("%s", disk.stop()) }()
	}
	logf("broker %s", o.brokers)
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers))
	if err != nil {
		return err
	}
	defer cl.Close()
	tmp, err := os.MkdirTemp("", "connect-eos-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &bench{o: o, adm: kadm.NewClient(cl), cl: cl, tmp: tmp, stamp: time.Now().Format("150405"), est: map[string]float64{}, filled: map[string]*countIndex{}, proc: proc}
	if proc != nil {
		if err := fastDelete(ctx, b.adm); err != nil {
			return err
		}
	}

	loads := startLoadSampler()
	if len(o.codecs) > 0 {
		cells, err := b.codecRows(ctx)
		if err != nil {
			return err
		}
		machine := describeMachine(ctx, root, kafka)
		if l := loads.stop(); l != "" {
			machine = append(machine, l)
		}
		md := codecMarkdown(o, cells, machine)
		fmt.Println(md)
		if o.out != "" {
			if err := writeCodecBlock(o.out, md); err != nil {
				return err
			}
			logf("wrote %s", o.out)
		}
		return nil
	}
	var produce, consume, copies []*cell
	for _, size := range o.sizes {
		for _, iv := range o.intervals {
			c := newCell("produce", size, iv)
			produce = append(produce, c)
			for r := 0; r < o.runs; r++ {
				if err := b.produceRound(ctx, c, r); err != nil {
					return err
				}
			}
		}
	}
	if !o.skipCons {
		for _, size := range o.sizes {
			cc, cp, err := b.consumeRows(ctx, size)
			if cc != nil {
				consume = append(consume, cc)
			}
			if cp != nil {
				copies = append(copies, cp)
			}
			if err != nil {
				return err
			}
		}
	}

	var sat []*satCell
	if !o.skipSat && o.selected(cEOS) {
		if sat, err = b.runSaturation(ctx); err != nil {
			return err
		}
	}

	rep := report{opts: o, produce: produce, consume: consume, copies: copies, saturation: sat, started: started, elapsed: time.Since(started)}
	if md, err := kadm.NewClient(cl).BrokerMetadata(ctx); err == nil && len(md.Brokers) > 1 {
		kafka = fmt.Sprintf("%d brokers (-brokers %s), on the same machine", len(md.Brokers), o.brokers)
	}
	rep.machine = describeMachine(ctx, root, kafka)
	if l := loads.stop(); l != "" {
		rep.machine = append(rep.machine, l)
	}
	if disk != nil {
		rep.machine = append(rep.machine, disk.stop())
	}
	md := rep.markdown()
	fmt.Println(md)
	if o.plot != "" {
		if err := writePlot(o.plot, produce, consume, copies); err != nil {
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

// runs says whether contender name runs in round r.
func (o options) runsIn(name string, r int) bool {
	if !o.selected(name) {
		return false
	}
	if name == cPPTuned || name == cPPDef || name == cPPNoTxn {
		if o.skipJava {
			return false
		}
	}
	return !contextRow(name) || o.contextRuns == 0 || r < o.contextRuns
}

// produceRound runs round r of a produce row: every contender once, each on a
// fresh topic, the count of records in the topic asserted against what the
// contender says it wrote.
func (b *bench) produceRound(ctx context.Context, c *cell, r int) error {
	o := b.o
	for i := range produceContenders {
		name := produceContenders[(i+r)%len(produceContenders)]
		if !o.runsIn(name, r) {
			continue
		}
		res, err := b.produceOne(ctx, name, c, r, 0)
		if err := b.done(ctx, c, name, r, res, err); err != nil {
			return err
		}
		if name == cEOS && err == nil && o.runsIn(cCadence, r) && res.Epochs > 0 {
			iv := time.Duration(res.Seconds / float64(res.Epochs) * float64(time.Second))
			res2, err := b.produceOne(ctx, cCadence, c, r, iv)
			if err := b.done(ctx, c, cCadence, r, res2, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// produceOne runs one produce contender on a fresh topic and checks the
// topic's record count. cadence is cCadence's epoch interval.
// ProducerPerformance runs once more, with a record count sized from the rate
// it showed, if its steady-state span came out shorter than 90 % of the
// duration.
func (b *bench) produceOne(ctx context.Context, name string, c *cell, r int, cadence time.Duration) (result, error) {
	o := b.o
	for attempt := 0; ; attempt++ {
		topic := fmt.Sprintf("bench-%s-%d-%s-%d-%d-%s", slug(name), c.size, c.interval, r, attempt, b.stamp)
		res, err := withTopic(ctx, b.adm, topic, o.partitions, func() (result, error) {
			res, err := b.produceRun(ctx, name, topic, c.size, c.interval, cadence)
			if err != nil {
				return res, err
			}
			counts, err := countRecords(ctx, b.cl, topic, nil)
			if err != nil {
				return res, fmt.Errorf("counting %s: %w", topic, err)
			}
			if n := sum(counts); n != res.Total {
				return res, fmt.Errorf("the topic holds %d records (read_committed), the contender wrote %d", n, res.Total)
			}
			return res, nil
		})
		if err != nil {
			return res, err
		}
		if res.Bytes == 0 {
			res.Bytes = res.Records * int64(c.size)
		}
		b.est[b.estKey(name, c.size)] = res.RecordsPerSec()
		if res.Rate == 0 || res.Seconds >= 0.9*o.duration.Seconds() || attempt == 1 {
			return res, nil
		}
		logf("%s ran %.1fs at %.0f records/s, shorter than the duration: once more with a record count sized from that rate", name, res.Seconds, res.RecordsPerSec())
	}
}

func (b *bench) produceRun(ctx context.Context, name, topic string, size int, iv, cadence time.Duration) (result, error) {
	o := b.o
	switch name {
	case cEOS:
		return childRun(ctx, "eos", o, topic, size, 0, iv)
	case cPlain:
		return childRun(ctx, "plain", o, topic, size, 0, iv)
	case cProbe:
		return childRun(ctx, "probe", o, topic, size, 0, iv)
	case cCadence:
		return childRun(ctx, "probe", o, topic, size, 0, cadence)
	case cRawNoTxn:
		return childRun(ctx, "rawproduce", o, topic, size, 0, iv)
	case cPPTuned, cPPDef, cPPNoTxn:
		k := ppKind{tuned: name != cPPDef, txn: name != cPPNoTxn}
		// A record count that lasts about warmup + duration at the
		// expected rate: the last measured one, at first the raw
		// transactional loop's (1.4x the raw loop's without
		// transactions). A count too small costs a whole second run
		// (JVM start, warm-up, duration), one too large only its
		// excess: ProducerPerformance ran at about 0.65-1.35x the raw
		// transactional loop and 1.25-1.4x the raw ceiling here, and
		// half and 0.7x of them made every first run a second one.
		//
		// The other two configurations are sized from the tuned one
		// (1.2x its rate) where it ran: on a loaded machine the JVM falls
		// further behind the raw loops than the configurations of one
		// tool fall behind each other (at a load average of 11 the raw
		// loops' rates made counts 3-9x too large, each run lasting that
		// much longer; the tuned row's made them 1.2-3x).
		//
		// At a size where it has not run yet, a configuration's rate at
		// the size it ran, scaled as its reference loop's rate scaled
		// between the two sizes, comes first: the JVM's rate against the
		// raw loops moves less between sizes than between rounds
		// (0.45x-0.66x the raw transactional loop over the sizes of one
		// run, where the raw loop's own rate was the estimate).
		ref, frac := cProbe, 1.0
		if !k.txn {
			ref, frac = cRawNoTxn, 1.4
		}
		est := b.est[b.estKey(name, size)]
		if est == 0 {
			est = b.scaledEst(name, ref, size)
		}
		if v := b.est[b.estKey(cPPTuned, size)]; est == 0 && name != cPPTuned && v > 0 {
			est = v * 1.2
		}
		if est == 0 {
			if v := b.est[b.estKey(ref, size)]; v > 0 {
				est = v * frac
			} else {
				est = 100e6 / float64(size) // 100 MB/s
			}
		}
		warm := int(est * o.warmup.Seconds())
		n := warm + int(est*o.duration.Seconds()*1.05)
		return runProducerPerf(ctx, runDeadline(o.warmup, o.duration), k, o.brokers, topic, n, warm, size, iv, b.tmp)
	}
	return result{}, fmt.Errorf("unknown contender %q", name)
}

// consumeRows fills a topic transactionally (1 s transactions, so that
// read_committed readers cross markers) and runs the consume rows and the copy
// rows on it.
func (b *bench) consumeRows(ctx context.Context, size int) (*cell, *cell, error) {
	o := b.o
	topic := fmt.Sprintf("bench-consume-%d-%s", size, b.stamp)
	if err := createTopic(ctx, b.adm, topic, o.partitions); err != nil {
		return nil, nil, err
	}
	defer deleteTopic(b.adm, topic)
	// Enough for the duration of the fastest reader: filled for twice the
	// duration first, more once a reader reaches the end.
	available, err := b.fill(ctx, topic, size, 2*o.duration, 0)
	if err != nil {
		return nil, nil, err
	}
	var cc, cp *cell
	if anySelected(o, consumeContenders) {
		cc = newCell("consume", size, 0)
		for r := 0; r < o.runs; r++ {
			for i := range consumeContenders {
				name := consumeContenders[(i+r)%len(consumeContenders)]
				if !o.runsIn(name, r) {
					continue
				}
				var res result
				for attempt := 0; ; attempt++ {
					res, err = b.consumeOne(ctx, name, topic, size, available)
					if !errors.Is(err, errEndedEarly) || attempt == 3 {
						break
					}
					// Enough for 1.5 times the duration at the rate
					// it read, at the rate the last fill wrote: a
					// reader often reads faster on its second run,
					// and each time it reaches the end costs a run.
					want := res.RecordsPerSec() * o.duration.Seconds() * 1.5
					d := time.Duration((want - float64(available)) / b.fillRate * float64(time.Second))
					d = max(d, time.Second)
					logf("%s read the whole topic (%d records) in %.1fs: filling for %s more", name, available, res.Seconds, d.Round(time.Second))
					if available, err = b.fill(ctx, topic, size, d, available); err != nil {
						return cc, cp, err
					}
				}
				if err := b.done(ctx, cc, name, r, res, err); err != nil {
					return cc, cp, err
				}
			}
		}
	}
	names := copyContenders
	if size == satSize && !o.skipSat {
		// Rotated with the others: its ratio to copy (message) is
		// taken per round, from two runs back to back.
		names = append(names[:len(names):len(names)], cCopySat)
	}
	if anySelected(o, names) {
		cp = newCell("copy", size, o.copyInterval)
		for r := 0; r < o.runs; r++ {
			for i := range names {
				name := names[(i+r)%len(names)]
				if !o.runsIn(name, r) {
					continue
				}
				res, err := b.copyOne(ctx, name, topic, size, r)
				if err := b.done(ctx, cp, name, r, res, err); err != nil {
					return cc, cp, err
				}
			}
		}
	}
	return cc, cp, nil
}

func anySelected(o options, names []string) bool {
	for _, n := range names {
		if o.selected(n) {
			return true
		}
	}
	return false
}

// fill adds records to topic with the raw transactional loop (1 s
// transactions) for d, and returns the records the topic then holds (had:
// those it held before).
func (b *bench) fill(ctx context.Context, topic string, size int, d time.Duration, had int64) (int64, error) {
	fo := b.o
	fo.warmup, fo.duration, fo.profileDir = 0, d, ""
	if _, err := childRun(ctx, "probe", fo, topic, size, 0, time.Second); err != nil {
		return 0, fmt.Errorf("filling %s: %w", topic, err)
	}
	counts, idx, err := countIndexed(ctx, b.cl, topic)
	if err != nil {
		return 0, err
	}
	b.filled[topic] = idx
	n := sum(counts)
	b.fillRate = float64(n-had) / d.Seconds()
	logf("filled %s: %d records of %d B (%d more, %.0f records/s)", topic, n, size, n-had, b.fillRate)
	return n, nil
}

// scaledEst estimates name's rate at size from its last rate at another size,
// times how ref's rate changed between the two sizes (0: no such pair).
func (b *bench) scaledEst(name, ref string, size int) float64 {
	here := b.est[b.estKey(ref, size)]
	if here == 0 {
		return 0
	}
	for _, other := range b.o.sizes {
		if other == size {
			continue
		}
		own, there := b.est[b.estKey(name, other)], b.est[b.estKey(ref, other)]
		if own > 0 && there > 0 {
			return own * here / there
		}
	}
	return 0
}

// countBelow is countRecords(topic, upTo), from the topic's count index where
// it has one that covers the bounds.
func (b *bench) countBelow(ctx context.Context, topic string, upTo map[int32]int64) (map[int32]int64, error) {
	if counts, ok := b.filled[topic].below(upTo); ok {
		return counts, nil
	}
	return countRecords(ctx, b.cl, topic, upTo)
}

// consumeOne runs one reader and checks what it read against the topic.
func (b *bench) consumeOne(ctx context.Context, name, topic string, size int, available int64) (result, error) {
	o := b.o
	var r result
	var err error
	switch name {
	case cNative:
		r, err = childRun(ctx, "native", o, topic, size, 0, 0)
	case cNativeArrow:
		r, err = childRun(ctx, "native_arrow", o, topic, size, 0, 0)
	case cRawC:
		r, err = childRun(ctx, "rawconsume", o, topic, size, int(available), 0)
	case cCP:
		return b.consumerPerf(ctx, topic, size, available)
	default:
		err = fmt.Errorf("unknown contender %q", name)
	}
	if err == nil && r.EndedEarly {
		err = errEndedEarly
	}
	if err != nil {
		return r, err
	}
	// Exactly the topic's records below the last offset read, per
	// partition: nothing lost, nothing twice.
	upTo := map[int32]int64{}
	for p := range int32(o.partitions) {
		upTo[p] = 0
	}
	for p, pr := range r.Reads {
		upTo[p] = pr.Next
	}
	counts, err := b.countBelow(ctx, topic, upTo)
	if err != nil {
		return r, fmt.Errorf("counting %s: %w", topic, err)
	}
	for p, n := range counts {
		var got int64
		if pr := r.Reads[p]; pr != nil {
			got = pr.N
		}
		if got != n {
			return r, fmt.Errorf("partition %d: read %d records below offset %d, the topic holds %d there", p, got, upTo[p], n)
		}
	}
	r.Bytes = r.Records * int64(size)
	b.est[b.estKey(name, size)] = r.RecordsPerSec()
	return r, nil
}

// consumerPerf runs ConsumerPerformance for a record count that lasts about
// the duration at its expected rate (at most the topic's records), once more
// if it came out shorter than 90 % of it. Short because it read every record
// of the topic, it returns errEndedEarly: the caller fills the topic further
// and runs it again.
func (b *bench) consumerPerf(ctx context.Context, topic string, size int, available int64) (result, error) {
	o := b.o
	est := b.est[b.estKey(cCP, size)]
	if est == 0 {
		// At first 1.3x the raw poll's: it read at about 1-1.25x of
		// it here, and a count too small costs a whole second run.
		if v := b.est[b.estKey(cRawC, size)]; v > 0 {
			est = v * 1.3
		} else {
			est = 200e6 / float64(size)
		}
	}
	for attempt := 0; ; attempt++ {
		n := min(int64(est*o.duration.Seconds()*1.05), available)
		res, err := runConsumerPerf(ctx, runDeadline(0, o.duration), o.brokers, topic, int(n), b.tmp)
		if err != nil {
			return res, err
		}
		res.Bytes = res.Records * int64(size)
		short := res.Seconds < 0.9*o.duration.Seconds()
		b.est[b.estKey(cCP, size)] = res.RecordsPerSec()
		if short && n == available {
			// It read the whole topic: as the Go readers, it runs
			// again once the topic is filled further.
			return res, errEndedEarly
		}
		if !short || attempt == 1 {
			if short {
				logf("ConsumerPerformance ran %.1fs only (%d records)", res.Seconds, n)
			}
			return res, nil
		}
		est = res.RecordsPerSec()
	}
}

// copyOne runs one copy contender from the consume topic to a fresh topic on
// a fresh group, and checks the copy: it holds exactly the records that went
// through the copy, and those are exactly the source's records below the
// group's committed offsets.
func (b *bench) copyOne(ctx context.Context, name, topic string, size, round int) (result, error) {
	o := b.o
	kind := map[string]string{cCopyRaw: "rawcopy", cCopyMsg: "copy_message", cCopyArrow: "copy_arrow", cCopySat: "copy_message"}[name]
	co := o
	co.copyTopic = fmt.Sprintf("bench-%s-%d-%d-%s", slug(name), size, round, b.stamp)
	switch name {
	case cCopySat:
		co.maxInFlight, co.sample, co.binaryMemLimit = satCopyInFlight, true, true
	case cCopyMsg, cCopyArrow:
		// What connect-eos run sets for these pipelines.
		co.binaryMemLimit = true
	}
	return withTopic(ctx, b.adm, co.copyTopic, o.partitions, func() (result, error) {
		r, err := childRun(ctx, kind, co, topic, size, 0, o.copyInterval)
		if err != nil {
			return r, err
		}
		group := "bench-copy-" + co.copyTopic
		offs, err := b.adm.FetchOffsets(ctx, group)
		if err != nil {
			return r, fmt.Errorf("committed offsets of %s: %w", group, err)
		}
		upTo := map[int32]int64{}
		for p := range int32(o.partitions) {
			upTo[p] = 0
			if or, ok := offs.Lookup(topic, p); ok && or.Err == nil {
				upTo[p] = or.At
			}
		}
		src, err := b.countBelow(ctx, topic, upTo)
		if err != nil {
			return r, err
		}
		dst, err := countRecords(ctx, b.cl, co.copyTopic, nil)
		if err != nil {
			return r, err
		}
		ns, nd := sum(src), sum(dst)
		for p := range src {
			if src[p] != dst[p] {
				return r, fmt.Errorf("partition %d: the copy holds %d records, the source %d below the committed offset %d", p, dst[p], src[p], upTo[p])
			}
		}
		if nd != r.Total {
			return r, fmt.Errorf("the copy holds %d records (source below the committed offsets: %d), %d went through the pipeline", nd, ns, r.Total)
		}
		r.Bytes = r.Records * int64(size)
		return r, nil
	})
}

// satCopyInFlight is the saturated copy's max_in_flight: 512 batches of up to
// 1024 records of 1 KiB (one fetch of one partition) are about 1.1 GiB as
// kafka_native counts them while kafka_eos holds them (value + 1000 bytes per
// record, and 280 for the output's record), more than four times its
// max_buffered_bytes default (256 MiB), so the input's budget binds, where
// the default 64 batches (144 MiB) leave it unreached.
const satCopyInFlight = 512

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

const satSize = 1024

func (b *bench) runSaturation(ctx context.Context) ([]*satCell, error) {
	o := b.o
	var out []*satCell
	lims := []string{""}
	if o.satGoMemLimit != "" {
		lims = append(lims, o.satGoMemLimit)
	}
	for _, lim := range lims {
		sc := &satCell{goMemLimit: lim, rounds: make([]*result, o.runs)}
		out = append(out, sc)
		so := o
		so.fresh, so.sample, so.batch, so.maxInFlight = true, true, o.satBatch, 0
		if lim != "" {
			so.childEnv = []string{"GOMEMLIMIT=" + lim}
		}
		for r := 0; r < o.runs; r++ {
			topic := fmt.Sprintf("bench-sat-%d-%d-%s", len(out), r, b.stamp)
			res, err := withTopic(ctx, b.adm, topic, o.partitions, func() (result, error) {
				return childRun(ctx, "eos", so, topic, satSize, 0, time.Second)
			})
			label := "saturation, " + sc.label()
			if err != nil {
				msg := fmt.Sprintf("round %d %s: %v", r+1, label, err)
				sc.errs = append(sc.errs, msg)
				logf("FAILED %s", msg)
			} else {
				res.Bytes = res.Records * satSize
				sc.rounds[r] = &res
				logf("round %d %s: %.0f records/s, peak buffered %d MiB, VmHWM %d MiB", r+1, label, res.RecordsPerSec(), res.BufferedPeak>>20, res.RSS>>20)
			}
			if fatal(err) {
				return nil, fmt.Errorf("round %d %s: %w", r+1, label, err)
			}
			if err := b.between(ctx); err != nil {
				return nil, fmt.Errorf("after round %d %s: %w", r+1, label, err)
			}
		}
	}
	return out, nil
}

// label names round round of contender name in this row, as the log and the
// errors do.
func (c *cell) label(name string, round int) string {
	label := fmt.Sprintf("round %d %s, %s %d B", round+1, name, c.kind, c.size)
	if c.interval > 0 {
		label += ", " + c.interval.String()
	}
	return label
}

// done records a run of contender name and checks the run may go on: the
// error of a run killed at its deadline or on a stopped broker, or of a
// broker found stopped after the run, ends the whole run, naming the row.
func (b *bench) done(ctx context.Context, c *cell, name string, round int, res result, err error) error {
	c.record(name, round, b.o.runs, res, err)
	if fatal(err) {
		return fmt.Errorf("%s: %w", c.label(name, round), err)
	}
	if err := b.between(ctx); err != nil {
		return fmt.Errorf("after %s: %w", c.label(name, round), err)
	}
	return nil
}

func (c *cell) record(name string, round, runs int, res result, err error) {
	if c.rounds[name] == nil {
		c.rounds[name] = make([]*result, runs)
	}
	label := c.label(name, round)
	if err != nil {
		msg := fmt.Sprintf("%s: %v", label, err)
		c.errs = append(c.errs, msg)
		logf("FAILED %s", msg)
		return
	}
	c.rounds[name][round] = &res
	extra := ""
	if res.Epochs > 0 {
		extra = fmt.Sprintf(", %.1f epochs/s", float64(res.Epochs)/res.Seconds)
	}
	if res.CommitP50 > 0 {
		extra += fmt.Sprintf(", commit p50/p99 %s/%s ms", fmtMs(res.CommitP50), fmtMs(res.CommitP99))
	}
	logf("%s: %.0f records/s (%.1f MB/s) over %.1fs, %.2f CPU s per M records%s", label, res.RecordsPerSec(), res.MBPerSec(c.size), res.Seconds, res.CPUPerMillion(), extra)
}

// selected says whether -only lets contender name run.
func (o options) selected(name string) bool { return o.only == nil || o.only[slug(name)] }

// withTopic runs fn on a fresh topic and deletes the topic afterwards (the
// machine's disk is not the subject).
func withTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int, fn func() (result, error)) (result, error) {
	if err := createTopic(ctx, adm, topic, partitions); err != nil {
		return result{}, err
	}
	defer deleteTopic(adm, topic)
	return fn()
}

// createTopic creates topic with the broker's default replication factor (1
// on up.sh's broker; 3 with min.insync.replicas 2 on up-cluster.sh's, for
// -brokers naming a node of that cluster).
func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
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
