package output

import (
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Metric names (the Benthos metrics API, so they reach whatever exporter the
// build has, Prometheus included).
const (
	metricEpochsCommitted = "kafka_eos_epochs_committed"
	metricEpochsAborted   = "kafka_eos_epochs_aborted"
	metricCommitLatency   = "kafka_eos_epoch_commit_latency_ns"
	metricBoundaryStall   = "kafka_eos_epoch_boundary_stall_ns"
	metricRecordsProduced = "kafka_eos_records_produced"
	metricBytesProduced   = "kafka_eos_bytes_produced"
	metricBufferedBytes   = "kafka_eos_buffered_bytes"
	metricInDoubtResolved = "kafka_eos_in_doubt_resolved"
	metricFenced          = "kafka_eos_fenced"
	// metricLastCommit is the Unix time (seconds) of the last committed
	// epoch, or of the output's construction before the first: alert on
	// time() - kafka_eos_last_commit_timestamp_seconds. (A gauge of the age
	// pushed by the process would stop moving with the process itself.)
	metricLastCommit       = "kafka_eos_last_commit_timestamp_seconds"
	metricDedupeDropped    = "kafka_eos_dedupe_dropped"
	metricDedupeOutOfOrder = "kafka_eos_dedupe_nacked_out_of_order"
	// metricK2KOutOfOrder counts batches nacked because they reached the
	// output ahead of their partition's run (Kafka-to-Kafka).
	metricK2KOutOfOrder = "kafka_eos_k2k_nacked_out_of_order"
	// metricK2KRebalance counts what group_membership rebalances made the
	// output do (label event: dropped_batch, revoked_epoch,
	// rejoining_epoch, restamped, revoke_wait_timeout).
	metricK2KRebalance     = "kafka_eos_k2k_rebalance"
	metricLabelEvent       = "event"
	metricLabelOutcome     = "outcome"
	outcomeResumed         = "resumed"
	outcomeFoundCommitted  = "found_committed"
	outcomeFoundAborted    = "found_aborted"
	outcomeAborted         = "aborted"
	outcomeForcedCommitted = "forced_committed"
	outcomeForcedAborted   = "forced_aborted"
)

// metrics wraps the Benthos metrics; tally keeps a copy of the counters in
// memory so tests (and logs) can read them back.
type metrics struct {
	tally tally

	committed     *service.MetricCounter
	aborted       *service.MetricCounter
	commitLatency *service.MetricTimer
	// stall is the time during which a batch waited for a slot to open its
	// epoch on: no record of it could be produced. With a pre-warmed pool
	// it is near zero; a slot initialised on the boundary shows up here.
	stall    *service.MetricTimer
	records  *service.MetricCounter
	bytes    *service.MetricCounter
	buffered *service.MetricGauge
	inDoubt  *service.MetricCounter
	fenced   *service.MetricCounter
	// lastCommit is metricLastCommit.
	lastCommit *service.MetricGauge
	// ddDropped counts messages acknowledged and dropped as replays
	// (dedupe mode); ddOutOfOrder batches nacked to be replayed after an
	// aborted epoch's positions.
	ddDropped    *service.MetricCounter
	ddOutOfOrder *service.MetricCounter
	k2kOutOfOrd  *service.MetricCounter
	k2kRebalance *service.MetricCounter
}

// inDoubtOutcomes are the values of the outcome label of
// kafka_eos_in_doubt_resolved.
var inDoubtOutcomes = []string{outcomeResumed, outcomeFoundCommitted, outcomeFoundAborted, outcomeAborted, outcomeForcedCommitted, outcomeForcedAborted}

func newMetrics(m *service.Metrics) *metrics {
	mt := &metrics{
		committed:     m.NewCounter(metricEpochsCommitted),
		aborted:       m.NewCounter(metricEpochsAborted),
		commitLatency: m.NewTimer(metricCommitLatency),
		stall:         m.NewTimer(metricBoundaryStall),
		records:       m.NewCounter(metricRecordsProduced),
		bytes:         m.NewCounter(metricBytesProduced),
		buffered:      m.NewGauge(metricBufferedBytes),
		inDoubt:       m.NewCounter(metricInDoubtResolved, metricLabelOutcome),
		fenced:        m.NewCounter(metricFenced),
		ddDropped:     m.NewCounter(metricDedupeDropped),
		ddOutOfOrder:  m.NewCounter(metricDedupeOutOfOrder),
		k2kOutOfOrd:   m.NewCounter(metricK2KOutOfOrder),
		k2kRebalance:  m.NewCounter(metricK2KRebalance, metricLabelEvent),
		lastCommit:    m.NewGauge(metricLastCommit),
	}
	// The counters to alert on exist from the start, at 0, so that an
	// alert on their increase sees the first one (a series that appears
	// at 1 has no increase).
	mt.aborted.Incr(0)
	mt.fenced.Incr(0)
	for _, o := range inDoubtOutcomes {
		mt.inDoubt.Incr(0, o)
	}
	mt.lastCommit.Set(time.Now().Unix())
	return mt
}

func since(t time.Time) int64 { return int64(time.Since(t)) }

// tally counts events by name, for tests.
type tally struct {
	mu sync.Mutex
	m  map[string]int64
}

func (t *tally) add(name string, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]int64{}
	}
	t.m[name] += n
}

func (t *tally) get(name string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[name]
}

func (m *metrics) epochCommitted() {
	m.committed.Incr(1)
	m.lastCommit.Set(time.Now().Unix())
	m.tally.add(metricEpochsCommitted, 1)
}
func (m *metrics) epochAborted() { m.aborted.Incr(1); m.tally.add(metricEpochsAborted, 1) }
func (m *metrics) fence()        { m.fenced.Incr(1); m.tally.add(metricFenced, 1) }
func (m *metrics) stallTiming(ns int64) {
	m.stall.Timing(ns)
	m.tally.add(metricBoundaryStall, ns)
	m.tally.add(metricBoundaryStall+"/count", 1)
}

func (m *metrics) commitTiming(ns int64) {
	m.commitLatency.Timing(ns)
	m.tally.add(metricCommitLatency, ns)
}

func (m *metrics) resolved(outcome string) {
	m.inDoubt.Incr(1, outcome)
	m.tally.add(metricInDoubtResolved+"/"+outcome, 1)
}

func (m *metrics) dedupeDropped(n int) {
	m.ddDropped.Incr(int64(n))
	m.tally.add(metricDedupeDropped, int64(n))
}

func (m *metrics) dedupeOutOfOrder() {
	m.ddOutOfOrder.Incr(1)
	m.tally.add(metricDedupeOutOfOrder, 1)
}

func (m *metrics) k2kOutOfOrder() {
	m.k2kOutOfOrd.Incr(1)
	m.tally.add(metricK2KOutOfOrder, 1)
}

// Events of metricK2KRebalance.
const (
	k2kDroppedBatch      = "dropped_batch"
	k2kRevokedEpoch      = "revoked_epoch"
	k2kRejoiningEpoch    = "rejoining_epoch"
	k2kRestamped         = "restamped"
	k2kRevokeWaitTimeout = "revoke_wait_timeout"
)

func (m *metrics) k2kRebalanceEvent(event string) {
	m.k2kRebalance.Incr(1, event)
	m.tally.add(metricK2KRebalance+"/"+event, 1)
}

// Mirror mode metrics.
const (
	// metricMirrorPositions counts the position records committed (one
	// per source partition an epoch advanced).
	metricMirrorPositions = "kafka_eos_mirror_positions_committed"
	// metricMirrorPosition is, per source partition this process copies,
	// the next source offset to copy as committed (where a restart
	// resumes): the source's end offset minus it is the copy's lag.
	metricMirrorPosition = "kafka_eos_mirror_position"
	// metricMirrorClaims counts source partitions claimed (label event:
	// claimed; released, at a revoke or for what a previous run left
	// claimed; fenced_writer, another writer fenced because it held a
	// partition claimed here without releasing it).
	metricMirrorClaims = "kafka_eos_mirror_partitions"
	mirrorClaimed      = "claimed"
	mirrorReleased     = "released"
	mirrorFenced       = "fenced_writer"
)

// mirrorMetrics are the mirror mode's metrics.
type mirrorMetrics struct {
	positions *service.MetricCounter
	position  *service.MetricGauge
	events    *service.MetricCounter
}

func newMirrorMetrics(m *service.Metrics) *mirrorMetrics {
	mm := &mirrorMetrics{
		positions: m.NewCounter(metricMirrorPositions),
		position:  m.NewGauge(metricMirrorPosition, "topic", "partition"),
		events:    m.NewCounter(metricMirrorClaims, metricLabelEvent),
	}
	for _, e := range []string{mirrorClaimed, mirrorReleased, mirrorFenced} {
		mm.events.Incr(0, e)
	}
	return mm
}

func (m *metrics) mirrorEvent(mm *mirrorMetrics, event string, n int) {
	mm.events.Incr(int64(n), event)
	m.tally.add(metricMirrorClaims+"/"+event, int64(n))
}
