package input

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// inputMetrics are the input's own metrics, next to the ones Benthos keeps
// for every input. Gauges are labelled by topic and partition and published
// every commit_period.
type inputMetrics struct {
	position, committed, lag *service.MetricGauge
	bytes, lost              *service.MetricCounter
	commitsOK, commitsFailed *service.MetricCounter
	// assigned counts the partitions this input reads; rebalances counts
	// group_membership's assigned, revoked and lost callbacks.
	assigned   *service.MetricGauge
	rebalances *service.MetricCounter
	// buffered is what max_buffered_bytes bounds.
	buffered *service.MetricGauge

	// mu orders publish and gaveUp, so that a publish whose snapshot still
	// held a partition cannot set its lag again after gaveUp zeroed it.
	mu sync.Mutex

	// franz-go client metrics, from kgo hooks (cheap: counters only).
	fetchBatches, fetchCompressed *service.MetricCounter
	connects, connectErrors       *service.MetricCounter
	throttleMs                    *service.MetricCounter
}

func newInputMetrics(m *service.Metrics) *inputMetrics {
	im := &inputMetrics{
		// The next offset to read, all offsets below it consumed.
		position: m.NewGauge("kafka_native_position", "topic", "partition"),
		// The last offset committed for the group (or, at start, found).
		committed: m.NewGauge("kafka_native_committed_offset", "topic", "partition"),
		// Records between the position and the stop (bounded) or the
		// end of the log last seen (unbounded).
		lag:           m.NewGauge("kafka_native_lag", "topic", "partition"),
		bytes:         m.NewCounter("kafka_native_bytes_in", "topic", "partition"),
		lost:          m.NewCounter("kafka_native_data_loss_records", "topic", "partition"),
		commitsOK:     m.NewCounter("kafka_native_commits_succeeded"),
		commitsFailed: m.NewCounter("kafka_native_commits_failed"),
		assigned:      m.NewGauge("kafka_native_assigned_partitions"),
		// The bytes handed to the pipeline and not yet acknowledged, all
		// partitions together, as max_buffered_bytes counts them: set at
		// every flow-control check (before each poll, and every poll
		// timeout while a batch waits for the pipeline).
		buffered:   m.NewGauge("kafka_native_buffered_bytes"),
		rebalances: m.NewCounter("kafka_native_rebalances", "event"),

		fetchBatches:    m.NewCounter("kafka_native_client_fetch_batches", "topic"),
		fetchCompressed: m.NewCounter("kafka_native_client_fetch_compressed_bytes", "topic"),
		connects:        m.NewCounter("kafka_native_client_connects"),
		connectErrors:   m.NewCounter("kafka_native_client_connect_errors"),
		throttleMs:      m.NewCounter("kafka_native_client_throttle_ms"),
	}
	// A counter to alert on exists from the start, at 0.
	im.commitsFailed.Incr(0)
	return im
}

// clientHooks feeds franz-go's hooks into the metrics. Record batches are
// counted as the broker sent them (markers and aborted batches included),
// unlike kafka_native_bytes_in, which counts what reached the pipeline.
type clientHooks struct{ m *inputMetrics }

var (
	_ kgo.HookFetchBatchRead = clientHooks{}
	_ kgo.HookBrokerConnect  = clientHooks{}
	_ kgo.HookBrokerThrottle = clientHooks{}
)

func (h clientHooks) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, fm kgo.FetchBatchMetrics) {
	h.m.fetchBatches.Incr(1, topic)
	h.m.fetchCompressed.Incr(int64(fm.CompressedBytes), topic)
}

func (h clientHooks) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.m.connectErrors.Incr(1)
		return
	}
	h.m.connects.Incr(1)
}

func (h clientHooks) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.m.throttleMs.Incr(d.Milliseconds())
}

func pLabel(p tp) string { return strconv.Itoa(int(p.Partition)) }

func (m *inputMetrics) bytesIn(p tp, n int64) {
	if n > 0 {
		m.bytes.Incr(n, p.Topic, pLabel(p))
	}
}

func (m *inputMetrics) dataLoss(p tp, n int64) {
	if n > 0 {
		m.lost.Incr(n, p.Topic, pLabel(p))
	}
}

func (m *inputMetrics) commitSucceeded() { m.commitsOK.Incr(1) }
func (m *inputMetrics) commitFailed()    { m.commitsFailed.Incr(1) }

// rebalance counts a group_membership callback (event: assigned, revoked or
// lost).
func (m *inputMetrics) rebalance(event string) { m.rebalances.Incr(1, event) }

// gaveUp zeroes the lag of partitions this member no longer reads, so that
// the lag summed over the group's members counts each partition once: the
// new owner reports it. Position and committed offset keep their last value.
func (m *inputMetrics) gaveUp(parts []tp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range parts {
		m.lag.Set(0, p.Topic, pLabel(p))
	}
}

// publish sets the gauges from the snapshots the tracker gives under m.mu
// (called after the partitions given up were removed from it, as gaveUp is).
func (m *inputMetrics) publish(snapshots func() []snapshot) {
	m.mu.Lock()
	defer m.mu.Unlock()
	snaps := snapshots()
	m.assigned.Set(int64(len(snaps)))
	for _, s := range snaps {
		part := pLabel(s.tp)
		m.position.Set(s.position, s.Topic, part)
		if s.committed >= 0 {
			m.committed.Set(s.committed, s.Topic, part)
		}
		end := s.end
		if s.stop != noStop {
			end = s.stop
		}
		m.lag.Set(max(end-s.position, 0), s.Topic, part)
		// The data-loss counter of a partition exists at 0 once it is
		// read, so that an alert on its increase sees the first loss.
		m.lost.Incr(0, s.Topic, part)
	}
}
