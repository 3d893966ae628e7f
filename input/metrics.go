package input

import (
	"strconv"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// inputMetrics are the input's own metrics, next to the ones Benthos keeps
// for every input. Gauges are labelled by topic and partition and published
// every commit_period.
type inputMetrics struct {
	position, committed, lag *service.MetricGauge
	bytes, lost              *service.MetricCounter
	commitsOK, commitsFailed *service.MetricCounter
}

func newInputMetrics(m *service.Metrics) *inputMetrics {
	return &inputMetrics{
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
	}
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

func (m *inputMetrics) publish(snaps []snapshot) {
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
	}
}
