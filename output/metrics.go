package output

import (
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// Metric names (the Benthos metrics API, so they reach whatever exporter the
// build has, Prometheus included).
const (
	metricEpochsCommitted  = "kafka_eos_epochs_committed"
	metricEpochsAborted    = "kafka_eos_epochs_aborted"
	metricCommitLatency    = "kafka_eos_epoch_commit_latency_ns"
	metricBoundaryStall    = "kafka_eos_epoch_boundary_stall_ns"
	metricRecordsProduced  = "kafka_eos_records_produced"
	metricBytesProduced    = "kafka_eos_bytes_produced"
	metricBufferedBytes    = "kafka_eos_buffered_bytes"
	metricInDoubtResolved  = "kafka_eos_in_doubt_resolved"
	metricFenced           = "kafka_eos_fenced"
	metricLabelOutcome     = "outcome"
	outcomeResumed         = "resumed"
	outcomeFoundCommitted  = "found_committed"
	outcomeFoundAborted    = "found_aborted"
	outcomeAborted         = "aborted"
	outcomeForcedCommitted = "forced_committed"
	outcomeForcedAborted   = "forced_aborted"
)

type metrics struct {
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
}

func newMetrics(m *service.Metrics) *metrics {
	return &metrics{
		committed:     m.NewCounter(metricEpochsCommitted),
		aborted:       m.NewCounter(metricEpochsAborted),
		commitLatency: m.NewTimer(metricCommitLatency),
		stall:         m.NewTimer(metricBoundaryStall),
		records:       m.NewCounter(metricRecordsProduced),
		bytes:         m.NewCounter(metricBytesProduced),
		buffered:      m.NewGauge(metricBufferedBytes),
		inDoubt:       m.NewCounter(metricInDoubtResolved, metricLabelOutcome),
		fenced:        m.NewCounter(metricFenced),
	}
}

func since(t time.Time) int64 { return int64(time.Since(t)) }
