package input

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// The scenarios of shared/design/native-input.md. Each runs against kfake
// (TestScenariosKfake) and, in scenarios_kafka_test.go, against Apache Kafka
// when its address is in the environment.
var scenarios = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"BoundedMultiPartition", scenarioBoundedMultiPartition},
	{"StartEqualsStop", scenarioStartEqualsStop},
	{"NoOvershoot", scenarioNoOvershoot},
	{"AbortedTxnMarkerAtTail", scenarioAbortedTxnMarkerAtTail},
	{"CommittedTxnMarkerAtTail", scenarioCommittedTxnMarkerAtTail},
	{"AbortedBelowLSOMarkerAboveOpenTxn", scenarioAbortedBelowLSOMarkerAboveOpenTxn},
	{"OpenTxnAtTailLSO", scenarioOpenTxnAtTailLSO},
	{"OpenTxnAtTailHWMWaitTimeout", scenarioOpenTxnAtTailHWMWaitTimeout},
	{"OpenTxnAtTailHWMWaitCommits", scenarioOpenTxnAtTailHWMWaitCommits},
	{"OpenTxnAtTailHWMWaitAborts", scenarioOpenTxnAtTailHWMWaitAborts},
	{"LogStartPastStopWhileIdle", scenarioLogStartPastStopWhileIdle},
	{"LogStartPastStopWhileIdleProbe", scenarioLogStartPastStopProbe},
	{"LogStartPastStopResetNone", scenarioLogStartPastStopResetNone},
	{"LogStartMovedBelowStopWhilePaused", scenarioLogStartMovedBelowStopWhilePaused},
	{"DeletedAfterConsumerSkipped", scenarioDeletedAfterConsumerSkipped},
	{"TombstonesEmit", scenarioTombstonesEmit},
	{"TombstonesDrop", scenarioTombstonesDrop},
	{"TombstonesFail", scenarioTombstonesFail},
	{"HeadersNeverOverwriteMetadata", scenarioHeadersNeverOverwriteMetadata},
	{"CommittedStartResets", scenarioCommittedStartResets},
	{"SpecificStartFallsBackToCommitted", scenarioSpecificStartFallsBackToCommitted},
	{"StopAtCommitted", scenarioStopAtCommitted},
	{"TopicListsAsWritten", scenarioTopicListsAsWritten},
	{"RegexpTopics", scenarioRegexpTopics},
	{"PartitionDiscovery", scenarioPartitionDiscovery},
	{"NoDiscoveryWhenBounded", scenarioNoDiscoveryWhenBounded},
	{"GroupRegexpTopics", scenarioGroupRegexpTopics},
	{"NackedBatchReplayedNeverCommittedPast", scenarioNackReplay},
	{"UnboundedMultiPartition", scenarioUnboundedMultiPartition},
	{"UnboundedDataLoss", scenarioUnboundedDataLoss},
	{"PauseResumeUnderBackpressure", scenarioBackpressure},
	{"PauseResumeOverTotalBudget", scenarioTotalBudget},
	{"PauseResumeOverMemoryShare", scenarioMemoryShare},
	{"UnknownTopic", scenarioUnknownTopic},
	{"TopicDeletedWhileReading", scenarioTopicDeleted},
	{"TopicRecreatedWhileReading", scenarioTopicRecreated},
	{"RestoreFromCommitted", scenarioRestore},
	{"TimestampStartAndStop", scenarioTimestamps},
	{"CLIRunBoundedToFile", scenarioCLIRun},
	{"GroupRebalance", scenarioGroupRebalance},
	{"GroupRestore", scenarioGroupRestore},
	{"GroupRevokeUnacked", scenarioGroupRevokeUnacked},
	{"GroupSessionTimeoutRefused", scenarioGroupSessionTimeoutRefused},
	{"GroupSessionTimeoutKill", scenarioGroupSessionTimeoutKill},
}

func TestScenariosKfake(t *testing.T) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) { s.fn(t, newKfakeEnv(t)) })
	}
}

const readTimeout = 30 * time.Second

func scenarioBoundedMultiPartition(t *testing.T, e *env) {
	topic := e.topic(t, 3)
	p0 := vals("a", 5)
	for _, v := range p0 {
		e.produce(t, topic, 0, v) // one record batch each
	}
	p2 := vals("c", 3)
	e.produce(t, topic, 2, p2...)
	h, group := e.boundedRead(t, topic, `
max_batch_records: 2
commit_period: 50ms
`)
	gs := h.readAll(readTimeout)
	bp := byPartition(gs)
	assert.Equal(t, strs(p0), bp[0])
	assert.Empty(t, bp[1])
	assert.Equal(t, strs(p2), bp[2])
	for _, g := range gs {
		assert.Equal(t, topic, g.Topic)
	}
	// Offsets are committed before the input ends: lag 0.
	assert.Equal(t, int64(5), e.committed(t, group, topic, 0))
	assert.Equal(t, int64(0), e.committed(t, group, topic, 1))
	assert.Equal(t, int64(3), e.committed(t, group, topic, 2))
}

func scenarioStartEqualsStop(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 5)...)
	e.produce(t, topic, 1, vals("b", 5)...)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
start_offset: specific
start_offsets: { "%[1]s:0": 2, "%[1]s:1": 4 }
stop_offset: specific
stop_offsets: { "%[1]s:0": 2, "%[1]s:1": 5 }
`, topic))
	h.mustConnect()
	gs := h.readAll(readTimeout)
	assert.Equal(t, []string{"b4"}, values(gs))
}

func scenarioNoOvershoot(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 3)...)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: latest
`, topic))
	h.mustConnect() // captures latest = 3
	e.produce(t, topic, 0, vals("late", 3)...)
	assert.Equal(t, strs(vals("a", 3)), values(h.readAll(readTimeout)))
}

func scenarioAbortedTxnMarkerAtTail(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 3)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("aborted", 2)...)
	x.end(false)
	end := int64(6) // 3 records, 2 aborted, 1 ABORT marker
	e.waitEnd(t, topic, 0, end)
	h, group := e.boundedRead(t, topic, "")
	assert.Equal(t, strs(vals("a", 3)), values(h.readAll(readTimeout)))
	assert.Equal(t, end, e.committed(t, group, topic, 0), "a finished partition commits its stop: lag 0 behind the marker")
}

func scenarioCommittedTxnMarkerAtTail(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("t", 2)...)
	x.end(true)
	end := int64(5) // 2 records, 2 in the transaction, 1 COMMIT marker
	e.waitEnd(t, topic, 0, end)
	h, group := e.boundedRead(t, topic, "")
	assert.Equal(t, []string{"a0", "a1", "t0", "t1"}, values(h.readAll(readTimeout)))
	assert.Equal(t, end, e.committed(t, group, topic, 0))
}

// Aborted records below the LSO whose ABORT marker sits above another
// producer's open transaction: nothing is delivered for them, so only the
// probe can finish the partition.
func scenarioAbortedBelowLSOMarkerAboveOpenTxn(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	a := e.beginTxn(t)
	a.produce(topic, 0, vals("aborted", 2)...) // 2, 3
	b := e.beginTxn(t)
	bOffs := b.produce(topic, 0, []byte("open")) // 4
	a.end(false)                                 // marker at 5, above the LSO 4
	t.Cleanup(func() { b.end(false) })
	// Wait for A's marker: until it is written A's transaction is
	// open too and the LSO is 2.
	wait(t, 20*time.Second, func() bool { return e.endOffset(t, topic, 0) == 6 })
	h, group := e.boundedRead(t, topic, `
idle_probe_interval: 300ms
`)
	assert.Equal(t, strs(vals("a", 2)), values(h.readAll(readTimeout)))
	assert.Equal(t, bOffs[0], e.committed(t, group, topic, 0), "the stop is the LSO, the open transaction's first offset")
	assert.Equal(t, int64(2), h.raw.conn.tr.snapshots()[0].probed, "the aborted records were consumed by the probe")
}

func scenarioOpenTxnAtTailLSO(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("open", 2)...)
	t.Cleanup(func() { x.end(false) })
	h, group := e.boundedRead(t, topic, "")
	start := time.Now()
	assert.Equal(t, strs(vals("a", 2)), values(h.readAll(readTimeout)))
	// Well under the 1m a wait for the open transaction would take.
	assert.Less(t, time.Since(start), 25*time.Second, "the LSO stop does not wait for the open transaction")
	assert.Equal(t, int64(2), e.committed(t, group, topic, 0))
}

func scenarioOpenTxnAtTailHWMWaitTimeout(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("open", 2)...)
	t.Cleanup(func() { x.end(false) })
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: latest
stop_at_high_watermark: true
high_watermark_wait_timeout: 1s
`, topic))
	err := h.connect()
	requireFatal(t, h, err, nil)
	var ot *OpenTransactionError
	require.ErrorAs(t, err, &ot)
	assert.Contains(t, err.Error(), topic+":0 below stop 4")
	// The error names the blocking producer and its transactional.id.
	assert.Contains(t, err.Error(), "transaction open since offset 2")
	assert.Contains(t, err.Error(), `transactional.id "txn-`)
}

func scenarioOpenTxnAtTailHWMWaitCommits(t *testing.T, e *env) {
	hwmWait(t, e, true)
}

// The open transaction aborts during the wait: its records are below the
// stop (the high watermark captured at start), its marker above it.
func scenarioOpenTxnAtTailHWMWaitAborts(t *testing.T, e *env) {
	hwmWait(t, e, false)
}

func hwmWait(t *testing.T, e *env, commit bool) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	x := e.beginTxn(t)
	x.produce(topic, 0, vals("t", 2)...)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: latest
stop_at_high_watermark: true
high_watermark_wait_timeout: 20s
`, topic))
	go func() {
		time.Sleep(500 * time.Millisecond)
		x.end(commit)
	}()
	h.mustConnect()
	e.produce(t, topic, 0, []byte("late"))
	want := []string{"a0", "a1"}
	if commit {
		want = append(want, "t0", "t1")
	}
	assert.Equal(t, want, values(h.readAll(readTimeout)))
}

// deleteRecords moves the log start of a partition to at.
func (e *env) deleteRecords(t testing.TB, topic string, partition int32, at int64) {
	t.Helper()
	os := kadm.Offsets{}
	os.AddOffset(topic, partition, at, -1)
	resp, err := e.adm.DeleteRecords(context.Background(), os)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// The log start moves past the stop while the partition waits (here: paused
// by backpressure, nothing acknowledged): the deleted range is data loss,
// reported, and the partition finishes at its stop.
func scenarioLogStartPastStopWhileIdle(t *testing.T, e *env) {
	logStartPastStop(t, e, 0)
}

// The same, with the partition left paused for several probe intervals after
// the deletion: a paused partition is not probed (the consumer does not fetch
// it, so nothing disagrees); once resumed, the consumer's own
// OFFSET_OUT_OF_RANGE reports the loss and the partition finishes.
func scenarioLogStartPastStopProbe(t *testing.T, e *env) {
	logStartPastStop(t, e, time.Second)
}

// The consumer skipped aborted records below the LSO whose ABORT marker lies
// above another producer's open transaction (under read_committed nothing is
// delivered and its cursor moves past them), and the log start then moved past
// them (retention, DeleteRecords) before the probe looked. The probe finds the
// offsets deleted, but the consumer, past the new log start, reports nothing:
// they held no record for us, so they are consumed as skipped, not counted as
// lost, and under reset_offset none the read does not fail.
func scenarioDeletedAfterConsumerSkipped(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, []byte("a0")) // 0
	a := e.beginTxn(t)
	a.produce(topic, 0, vals("aborted", 2)...) // 1, 2
	b := e.beginTxn(t)
	b.produce(topic, 0, []byte("open")) // 3: the LSO stays here
	t.Cleanup(func() { b.end(false) })
	a.end(false) // ABORT marker at 4, above the LSO
	wait(t, 20*time.Second, func() bool { return e.endOffset(t, topic, 0) == 5 })
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
start_offset: specific
start_offsets: { "%s:0": 0 }
reset_offset: none
stop_offset: latest
idle_probe_interval: 2s
`, topic, topic))
	h.mustConnect()
	require.Equal(t, int64(3), h.raw.conn.tr.snapshots()[0].stop, "stop_offset latest is the LSO")
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	bt, ack, err := h.in.ReadBatch(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a0"}, values(toGot(bt)))
	require.NoError(t, ack(ctx, nil))
	e.deleteRecords(t, topic, 0, 3) // before the first probe (2s idle)
	rest, err := h.readUntilEnd(readTimeout)
	require.NoError(t, err)
	assert.Empty(t, rest)
	s := h.raw.conn.tr.snapshots()[0]
	assert.True(t, s.finished)
	assert.Equal(t, int64(0), s.lost, "aborted records the consumer had skipped are not lost")
	assert.Equal(t, int64(2), s.probed)
}

func logStartPastStop(t *testing.T, e *env, idle time.Duration) {
	topic := e.topic(t, 1)
	for _, v := range vals("a", 3) {
		e.produce(t, topic, 0, v)
	}
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: specific
stop_offsets: { "%s:0": 8 }
max_batch_records: 1
max_buffered_bytes_per_partition: 1
fetch_max_partition_bytes: 1
idle_probe_interval: 300ms
`, topic, topic))
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	b, ack, err := h.in.ReadBatch(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a0"}, values(toGot(b)))
	wait(t, 10*time.Second, func() bool { return h.raw.conn.tr.snapshots()[0].paused })
	for _, v := range vals("b", 7) {
		e.produce(t, topic, 0, v) // offsets 3..9
	}
	e.deleteRecords(t, topic, 0, 9)
	if idle > 0 {
		time.Sleep(idle)
		assert.False(t, h.raw.conn.tr.snapshots()[0].finished, "a paused partition is not probed")
	}
	require.NoError(t, ack(ctx, nil))
	rest, err := h.readUntilEnd(readTimeout)
	require.NoError(t, err)
	// Up to two records may have been fetched before the pause took
	// effect; everything from 3 on was deleted before it was read.
	for _, g := range rest {
		assert.Less(t, g.Offset, int64(3))
	}
	s := h.raw.conn.tr.snapshots()[0]
	assert.Equal(t, int64(8), s.position)
	assert.GreaterOrEqual(t, s.lost, int64(5))
	assert.Equal(t, int64(0), s.probed, "deleted offsets count as lost, not as probed-empty")
}

// A slow backfill of a topic with retention: the log start moves past the
// position of a partition paused by backpressure, but not past its stop. Once
// resumed, the read goes on at the new log start and ends at the stop, with
// the deleted offsets counted as lost; the consumer and the input's position
// never disagree (before, the position was moved past the deleted range but
// the consumer's was not, and it refetched the deleted offset forever).
func scenarioLogStartMovedBelowStopWhilePaused(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	for _, v := range vals("a", 3) {
		e.produce(t, topic, 0, v)
	}
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: specific
stop_offsets: { "%s:0": 10 }
max_batch_records: 1
max_buffered_bytes_per_partition: 1
fetch_max_partition_bytes: 1
idle_probe_interval: 200ms
`, topic, topic))
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	b, ack, err := h.in.ReadBatch(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a0"}, values(toGot(b)))
	wait(t, 10*time.Second, func() bool { return h.raw.conn.tr.snapshots()[0].paused })
	for _, v := range vals("b", 7) {
		e.produce(t, topic, 0, v) // offsets 3..9
	}
	e.deleteRecords(t, topic, 0, 6)
	// Several probe intervals while paused (the probe used to move the
	// position past the deleted range here, without the consumer).
	time.Sleep(time.Second)
	require.NoError(t, ack(ctx, nil))
	rest, err := h.readUntilEnd(readTimeout)
	require.NoError(t, err, "the bounded read ends")
	var tail []int64
	for _, g := range rest {
		if g.Offset >= 3 {
			tail = append(tail, g.Offset)
		}
	}
	assert.Equal(t, []int64{6, 7, 8, 9}, tail, "the records left after the deletion are read")
	s := h.raw.conn.tr.snapshots()[0]
	assert.Equal(t, int64(10), s.position)
	assert.True(t, s.finished)
	assert.GreaterOrEqual(t, s.lost, int64(3), "the deleted offsets [3, 6) at least count as lost")
	assert.Equal(t, int64(10)-int64(len(rest))-1, s.lost, "every offset not emitted was lost")
}

func scenarioLogStartPastStopResetNone(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	for _, v := range vals("a", 3) {
		e.produce(t, topic, 0, v)
	}
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
start_offset: specific
start_offsets: { "%s:0": 0 }
reset_offset: none
stop_offset: specific
stop_offsets: { "%s:0": 8 }
max_batch_records: 1
max_buffered_bytes_per_partition: 1
fetch_max_partition_bytes: 1
idle_probe_interval: 300ms
`, topic, topic, topic))
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	_, ack, err := h.in.ReadBatch(ctx)
	require.NoError(t, err)
	wait(t, 10*time.Second, func() bool { return h.raw.conn.tr.snapshots()[0].paused })
	for _, v := range vals("b", 7) {
		e.produce(t, topic, 0, v)
	}
	e.deleteRecords(t, topic, 0, 9)
	require.NoError(t, ack(ctx, nil))
	_, err = h.readUntilEnd(readTimeout)
	requireFatal(t, h, err, nil)
	var dl *DataLossError
	require.ErrorAs(t, err, &dl)
}

// tombstoneTopic writes a, tombstone, empty (not null), b, tombstone (tail).
func tombstoneTopic(t *testing.T, e *env) string {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, []byte("a"), nil, []byte{}, []byte("b"), nil)
	return topic
}

func scenarioTombstonesEmit(t *testing.T, e *env) {
	topic := tombstoneTopic(t, e)
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\n", topic, group))
	h.mustConnect()
	gs := h.readAll(readTimeout)
	require.Len(t, gs, 5)
	assert.Equal(t, []string{"a", "", "", "b", ""}, values(gs))
	var tombs []bool
	for _, g := range gs {
		tombs = append(tombs, g.Tombstone)
		assert.False(t, g.Failed)
	}
	assert.Equal(t, []bool{false, true, false, false, true}, tombs)
	assert.Equal(t, int64(5), e.committed(t, group, topic, 0))
}

func scenarioTombstonesDrop(t *testing.T, e *env) {
	topic := tombstoneTopic(t, e)
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: latest\ntombstones: drop\n", topic, group))
	h.mustConnect()
	gs := h.readAll(readTimeout)
	assert.Equal(t, []string{"a", "", "b"}, values(gs))
	assert.Equal(t, int64(5), e.committed(t, group, topic, 0), "a dropped tombstone at the tail still advances the offset")
}

func scenarioTombstonesFail(t *testing.T, e *env) {
	topic := tombstoneTopic(t, e)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nstop_offset: latest\ntombstones: fail\n", topic))
	h.mustConnect()
	gs := h.readAll(readTimeout)
	require.Len(t, gs, 5)
	var failed []bool
	for _, g := range gs {
		failed = append(failed, g.Failed)
	}
	assert.Equal(t, []bool{false, true, false, false, true}, failed)
}

func scenarioCommittedStartResets(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 5)...)
	run := func(t *testing.T, group, reset string) ([]string, error) {
		if reset != "" {
			reset = "reset_offset: " + reset
		}
		h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
start_offset: committed
%s
stop_offset: latest
`, topic, group, reset))
		if err := h.connect(); err != nil {
			return nil, err
		}
		gs, err := h.readUntilEnd(readTimeout)
		return values(gs), err
	}
	t.Run("committed", func(t *testing.T) {
		g := uniq(t, "g")
		e.commit(t, g, topic, 0, 2)
		got, err := run(t, g, "none")
		require.NoError(t, err)
		assert.Equal(t, []string{"a2", "a3", "a4"}, got)
	})
	for _, outOfRange := range []bool{false, true} {
		prep := func(t *testing.T) string {
			g := uniq(t, "g")
			if outOfRange {
				e.commit(t, g, topic, 0, 100)
			}
			return g
		}
		name := "none committed"
		if outOfRange {
			name = "out of range"
		}
		t.Run(name+"/earliest", func(t *testing.T) {
			got, err := run(t, prep(t), "earliest")
			require.NoError(t, err)
			assert.Equal(t, strs(vals("a", 5)), got)
		})
		t.Run(name+"/latest", func(t *testing.T) {
			got, err := run(t, prep(t), "latest")
			require.NoError(t, err)
			assert.Empty(t, got)
		})
		t.Run(name+"/none", func(t *testing.T) {
			_, err := run(t, prep(t), "none")
			var re *OffsetResetError
			require.ErrorAs(t, err, &re)
			assert.Contains(t, err.Error(), topic+":0")
		})
		// No reset_offset written: a committed start behaves as none
		// (Flink's committedOffsets(), Redpanda Connect's committed
		// start), never as a silent re-read of the whole topic.
		t.Run(name+"/default", func(t *testing.T) {
			_, err := run(t, prep(t), "")
			var re *OffsetResetError
			require.ErrorAs(t, err, &re)
			assert.Contains(t, err.Error(), topic+":0")
			assert.Contains(t, err.Error(), "reset_offset")
		})
	}
}

// stop_offset committed: each partition stops at the group's committed
// offset listed before its first fetch (Flink's committedOffsets() as the
// stopping initializer). The group is only read: its offsets are the stops,
// and the input commits nothing to it. A partition with no committed offset
// fails the stream unless reset_offset says where to stop instead.
func scenarioStopAtCommitted(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 5)...)
	e.produce(t, topic, 1, vals("b", 3)...)
	group := uniq(t, "g")
	e.commit(t, group, topic, 0, 3)
	conf := func(extra string) string {
		return fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: committed\ncommit_period: 10ms\n%s", topic, group, extra)
	}
	t.Run("missing", func(t *testing.T) {
		h := e.newInput(t, conf(""))
		err := h.connect()
		var re *OffsetResetError
		require.ErrorAs(t, err, &re)
		assert.Contains(t, err.Error(), topic+":1")
	})
	e.commit(t, group, topic, 1, 1)
	h := e.newInput(t, conf(""))
	h.mustConnect()
	bp := byPartition(h.readAll(readTimeout))
	assert.Equal(t, []string{"a0", "a1", "a2"}, bp[0])
	assert.Equal(t, []string{"b0"}, bp[1])
	assert.Equal(t, int64(3), e.committed(t, group, topic, 0), "the group's offsets are only read")
	assert.Equal(t, int64(1), e.committed(t, group, topic, 1))

	t.Run("reset latest", func(t *testing.T) {
		g2 := uniq(t, "g")
		e.commit(t, g2, topic, 0, 2)
		h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nconsumer_group: %s\nstop_offset: committed\nreset_offset: latest\n", topic, g2))
		h.mustConnect()
		bp := byPartition(h.readAll(readTimeout))
		assert.Equal(t, []string{"a0", "a1"}, bp[0])
		assert.Equal(t, strs(vals("b", 3)), bp[1], "no committed offset: stops at the end (reset_offset latest)")
	})
}

// start_offset specific with a partition missing from start_offsets: the
// group's committed offset, then reset_offset (Flink's specific-offsets
// initializer does the same).
func scenarioSpecificStartFallsBackToCommitted(t *testing.T, e *env) {
	topic := e.topic(t, 3)
	for p := range int32(3) {
		e.produce(t, topic, p, vals(fmt.Sprintf("p%d-", p), 4)...)
	}
	group := uniq(t, "g")
	e.commit(t, group, topic, 1, 2)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %[1]s ]
consumer_group: %[2]s
start_offset: specific
start_offsets: { "%[1]s:0": 3 }
reset_offset: latest
stop_offset: latest
`, topic, group))
	h.mustConnect()
	bp := byPartition(h.readAll(readTimeout))
	assert.Equal(t, []string{"p0-3"}, bp[0], "the given offset")
	assert.Equal(t, []string{"p1-2", "p1-3"}, bp[1], "no given offset: the committed one")
	assert.Empty(t, bp[2], "neither: reset_offset (latest)")
}

func scenarioNackReplay(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 6)...)
	h, group := e.boundedRead(t, topic, `
max_batch_records: 2
commit_period: 20ms
`)
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	b1, ack1, err := h.in.ReadBatch(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a0", "a1"}, values(toGot(b1)))
	require.NoError(t, ack1(ctx, errors.New("downstream rejected")))

	// The rejected batch comes back; later batches may be acked meanwhile,
	// but nothing is committed past the rejected one.
	var replayed bool
	var rest []string
	for !replayed {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		vs := values(toGot(b))
		if vs[0] == "a0" {
			replayed = true
			time.Sleep(200 * time.Millisecond) // several commit periods
			assert.LessOrEqual(t, e.committed(t, group, topic, 0), int64(0), "committed past a rejected batch")
			require.NoError(t, ack(ctx, nil))
			continue
		}
		rest = append(rest, vs...)
		require.NoError(t, ack(ctx, nil))
	}
	more, err := h.readUntilEnd(readTimeout)
	require.NoError(t, err)
	rest = append(rest, values(more)...)
	assert.Equal(t, []string{"a2", "a3", "a4", "a5"}, rest)
	assert.Equal(t, int64(6), e.committed(t, group, topic, 0))
}

func scenarioUnboundedMultiPartition(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 3)...)
	e.produce(t, topic, 1, vals("b", 2)...)
	group := uniq(t, "g")
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
commit_period: 50ms
`, topic, group))
	h.mustConnect()
	bp := byPartition(h.readN(5, readTimeout))
	assert.Equal(t, strs(vals("a", 3)), bp[0])
	assert.Equal(t, strs(vals("b", 2)), bp[1])
	e.produce(t, topic, 1, []byte("b-late"))
	assert.Equal(t, []string{"b-late"}, values(h.readN(1, readTimeout)))
	wait(t, 10*time.Second, func() bool {
		return e.committed(t, group, topic, 0) == 3 && e.committed(t, group, topic, 1) == 3
	})
}

func scenarioBackpressure(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	for _, v := range vals("a", 20) {
		e.produce(t, topic, 0, v)
	}
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: latest
max_batch_records: 1
max_buffered_bytes_per_partition: 1024
fetch_max_partition_bytes: 1
`, topic))
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var acks []func()
	var gs []got
	// Read without acking: the partition is paused once more than 1024
	// bytes are unacknowledged (each record counts its key and value and
	// 1000 bytes for its message: two records).
	for len(gs) < 2 {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		gs = append(gs, toGot(b)...)
		acks = append(acks, func() { require.NoError(t, ack(ctx, nil)) })
	}
	var pausedAt int64
	wait(t, 10*time.Second, func() bool {
		s := h.raw.conn.tr.snapshots()[0]
		pausedAt = s.position
		return s.paused
	})
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, pausedAt, h.raw.conn.tr.snapshots()[0].position, "a paused partition is not read")
	for _, a := range acks {
		a()
	}
	// Resumed: it reads on (and pauses again at the next unacked bytes).
	wait(t, 10*time.Second, func() bool { return h.raw.conn.tr.snapshots()[0].position > pausedAt })
	gs = append(gs, h.readAll(readTimeout)...)
	assert.Equal(t, strs(vals("a", 20)), values(gs))
}

// scenarioTotalBudget: max_buffered_bytes bounds the bytes handed to the
// pipeline and not acknowledged across partitions: with three partitions,
// each far below its own bound, every partition is paused once the total
// passes it, and all resume once the batches are acknowledged.
func scenarioTotalBudget(t *testing.T, e *env) {
	pausesOverTotal(t, e, "max_buffered_bytes_per_partition: 1MiB\nmax_buffered_bytes: 3500\n", nil)
}

// scenarioMemoryShare: under a Go memory limit the same total is bounded by
// the partitions' share of it (memlimit.InputShare, 3500 bytes here) where
// that is below max_buffered_bytes (its default, 256 MiB).
func scenarioMemoryShare(t *testing.T, e *env) {
	pausesOverTotal(t, e, "", func() int64 { return 3500 })
}

// pausesOverTotal reads three partitions of 10 records each with the input
// options conf (and the memory share, if not nil) bounding all partitions'
// unacknowledged bytes at 3500: four records read without acking pause every
// partition, and acking them resumes all.
func pausesOverTotal(t *testing.T, e *env, conf string, share func() int64) {
	topic := e.topic(t, 3)
	for p := range int32(3) {
		for _, v := range vals(fmt.Sprintf("p%d", p), 10) {
			e.produce(t, topic, p, v)
		}
	}
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: latest
max_batch_records: 1
fetch_max_partition_bytes: 1
%s`, topic, conf))
	h.raw.memShare = share
	h.mustConnect()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var acks []func()
	var gs []got
	// Read without acking: four records (4 x (1000 + key and value: 5
	// bytes)) pass 3500 bytes, after which every partition is paused.
	for len(gs) < 4 {
		b, ack, err := h.in.ReadBatch(ctx)
		require.NoError(t, err)
		gs = append(gs, toGot(b)...)
		acks = append(acks, func() { require.NoError(t, ack(ctx, nil)) })
	}
	allPaused := func() bool {
		for _, s := range h.raw.conn.tr.snapshots() {
			if !s.paused && !s.finished {
				return false
			}
		}
		return true
	}
	wait(t, 10*time.Second, allPaused)
	var before int64
	for _, s := range h.raw.conn.tr.snapshots() {
		before += s.position
	}
	time.Sleep(300 * time.Millisecond)
	var after int64
	for _, s := range h.raw.conn.tr.snapshots() {
		after += s.position
	}
	assert.Equal(t, before, after, "paused partitions are not read")
	for _, a := range acks {
		a()
	}
	gs = append(gs, h.readAll(readTimeout)...)
	bp := byPartition(gs)
	for p := range int32(3) {
		assert.Equal(t, strs(vals(fmt.Sprintf("p%d", p), 10)), bp[p])
	}
}

func scenarioUnknownTopic(t *testing.T, e *env) {
	const grace = time.Second
	h := e.newInput(t, `
topics: [ does-not-exist ]
unknown_topic_grace_period: 1s
connect_timeout: 2s
`)
	// The grace period runs from the input's first sight of the missing
	// topic, somewhere inside the first Connect: the bounds are measured
	// from that call, not from a sleep on the test's clock.
	before := time.Now()
	err := h.connectOnce()
	took := time.Since(before)
	require.Error(t, err)
	if took < grace {
		// The grace cannot have run out yet, however slow the machine.
		select {
		case <-h.fatal:
			t.Fatal("fatal before the grace period")
		default:
		}
		var fe *fatal.Error
		require.False(t, errors.As(err, &fe), "fatal before the grace period: %v", err)
	} else {
		t.Logf("the first Connect took %v, longer than the grace period: not checking that it was not fatal", took)
	}
	// Past the grace period however late the first sight came.
	time.Sleep(time.Until(before.Add(took + grace + 50*time.Millisecond)))
	err = h.connectOnce()
	requireFatal(t, h, err, nil)
	assert.Contains(t, err.Error(), "does-not-exist")
}

// Restore: a bounded read interrupted after some acks resumes from the
// committed offsets in a second run and, together, the runs emit every record.
func scenarioRestore(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 6)...)
	e.produce(t, topic, 1, vals("b", 4)...)
	group := uniq(t, "g")
	conf := fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
start_offset: committed
reset_offset: earliest
stop_offset: latest
max_batch_records: 2
commit_period: 20ms
`, topic, group)
	h1 := e.newInput(t, conf)
	h1.mustConnect()
	first := h1.readN(2, readTimeout)
	wait(t, 10*time.Second, func() bool {
		return e.committed(t, group, topic, first[0].Partition) == first[len(first)-1].Offset+1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h1.in.Close(ctx))

	h2 := e.newInput(t, conf)
	h2.mustConnect()
	all := append(first, h2.readAll(readTimeout)...)
	bp := byPartition(all)
	// At-least-once: the second run starts at the committed offsets, so a
	// record may repeat only if it was read but not committed.
	assert.Subset(t, bp[0], strs(vals("a", 6)))
	assert.Subset(t, strs(vals("a", 6)), bp[0])
	assert.Subset(t, strs(vals("b", 4)), bp[1])
	assert.Subset(t, bp[1], strs(vals("b", 4)))
	assert.Equal(t, int64(6), e.committed(t, group, topic, 0))
	assert.Equal(t, int64(4), e.committed(t, group, topic, 1))
}

// A topic deleted while it is read: kgo retries UNKNOWN_TOPIC_OR_PARTITION
// silently by default; the input keeps those errors and stops the stream once
// they outlived the grace period.
func scenarioTopicDeleted(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
unknown_topic_grace_period: 1s
`, topic))
	h.mustConnect()
	assert.Equal(t, strs(vals("a", 2)), values(h.readN(2, readTimeout)))
	_, err := e.adm.DeleteTopic(context.Background(), topic)
	require.NoError(t, err)
	err = h.readError()
	requireFatal(t, h, err, nil)
	assert.True(t, isUnknownTopic(err), "%v", err)
	assert.Contains(t, err.Error(), topic)
}

// A topic deleted and created again under the same name while it is read: the
// consumer never adopts the new topic (kgo fails its fetches with
// UNKNOWN_TOPIC_ID), and the brokers' metadata lists a topic of that name, but
// with another topic ID: the topic read is gone, and the stream fails once
// the grace period passed (it must not read on forever).
func scenarioTopicRecreated(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
unknown_topic_grace_period: 1s
`, topic))
	h.mustConnect()
	assert.Equal(t, strs(vals("a", 2)), values(h.readN(2, readTimeout)))
	_, err := e.adm.DeleteTopic(context.Background(), topic)
	require.NoError(t, err)
	wait(t, 20*time.Second, func() bool {
		resp, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, topic)
		return err == nil && resp.Err == nil
	})
	err = h.readError()
	requireFatal(t, h, err, nil)
	assert.True(t, isUnknownTopic(err), "%v", err)
	assert.Contains(t, err.Error(), topic)
}

func scenarioTimestamps(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 6 {
		r := &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "a%d", i), Timestamp: base.Add(time.Duration(i) * time.Second)}
		require.NoError(t, e.cl.ProduceSync(ctx, r).FirstErr())
	}
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
start_offset: timestamp
start_timestamp_ms: %d
stop_offset: timestamp
stop_timestamp_ms: %d
`, topic, base.Add(1500*time.Millisecond).UnixMilli(), base.Add(4*time.Second).UnixMilli()))
	h.mustConnect()
	gs := h.readAll(readTimeout)
	assert.Equal(t, []string{"a2", "a3"}, values(gs), "from the first record at or after the start time to the first at or after the stop time, excluded")

	// A stop time after the last record stops at the end listed at start.
	h2 := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
stop_offset: timestamp
stop_timestamp_ms: %d
`, topic, time.Now().Add(time.Hour).UnixMilli()))
	h2.mustConnect()
	e.produce(t, topic, 0, []byte("late"))
	assert.Len(t, h2.readAll(readTimeout), 6)
}

// Unbounded: the log start moves past the position while the partition is
// paused (backpressure): the deleted range is counted as lost and reading
// goes on from the log start; under reset_offset none it is fatal.
func scenarioUnboundedDataLoss(t *testing.T, e *env) {
	for _, none := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset none %v", none), func(t *testing.T) {
			topic := e.topic(t, 1)
			for _, v := range vals("a", 3) {
				e.produce(t, topic, 0, v)
			}
			start := "start_offset: earliest"
			if none {
				start = fmt.Sprintf("start_offset: specific\nstart_offsets: { \"%s:0\": 0 }\nreset_offset: none", topic)
			}
			h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
%s
max_batch_records: 1
max_buffered_bytes_per_partition: 1
fetch_max_partition_bytes: 1
`, topic, start))
			h.mustConnect()
			ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
			defer cancel()
			_, ack, err := h.in.ReadBatch(ctx)
			require.NoError(t, err)
			wait(t, 10*time.Second, func() bool { return h.raw.conn.tr.snapshots()[0].paused })
			for _, v := range vals("b", 5) {
				e.produce(t, topic, 0, v) // 3..7
			}
			e.deleteRecords(t, topic, 0, 6)
			require.NoError(t, ack(ctx, nil))
			if none {
				for {
					_, ack, err := h.in.ReadBatch(ctx)
					if err != nil {
						var dl *DataLossError
						require.ErrorAs(t, err, &dl)
						return
					}
					require.NoError(t, ack(ctx, nil))
				}
			}
			var rest []got
			for len(rest) == 0 || rest[len(rest)-1].Value != "b4" {
				b, ack, err := h.in.ReadBatch(ctx)
				require.NoError(t, err)
				rest = append(rest, toGot(b)...)
				require.NoError(t, ack(ctx, nil))
			}
			vs := values(rest)
			assert.Equal(t, []string{"b3", "b4"}, vs[len(vs)-2:], "reading goes on at the log start")
			assert.GreaterOrEqual(t, h.raw.conn.tr.snapshots()[0].lost, int64(1))
		})
	}
}
