package input

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// An outage is the time since the first of a run of unknown-topic errors no
// two of which are further apart than unknownGap.
func TestOutageIsContinuous(t *testing.T) {
	var o outages
	p := tp{"t", 0}
	t0 := time.Now()
	assert.Equal(t, time.Duration(0), o.observe(p, t0))
	assert.Equal(t, 5*time.Second, o.observe(p, t0.Add(5*time.Second)))
	assert.Equal(t, 10*time.Second, o.observe(p, t0.Add(10*time.Second)))
	// A gap longer than unknownGap: a new outage.
	later := t0.Add(10*time.Second + unknownGap + time.Second)
	assert.Equal(t, time.Duration(0), o.observe(p, later))
	assert.Equal(t, time.Second, o.observe(p, later.Add(time.Second)))
	o.clear(p)
	assert.Equal(t, time.Duration(0), o.observe(p, later.Add(2*time.Second)))
}

// failFetchOnce makes kfake answer the next fetch of the consumer with code
// for partition 0 of topic (id) once each time arm is set. The fetch need not
// list the partition: in an incremental fetch session it usually does not.
func failFetchOnce(c *kfake.Cluster, topic string, id [16]byte, code int16, arm *atomic.Bool, hits *atomic.Int64) {
	c.ControlKey(kmsg.Fetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if req.MaxWaitMillis == 0 || !arm.CompareAndSwap(true, false) {
			return nil, nil, false // the probe's fetches, or not armed
		}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.SessionID = req.SessionID
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = topic, id
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = 0
		sp.ErrorCode = code
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		hits.Add(1)
		return resp, nil, true
	})
}

// Two transient unknown-topic errors far apart on an idle partition of a
// healthy topic (a broker restart, metadata settling) do not stop an
// unbounded stream: the grace measures a continuous outage, and the brokers'
// metadata is asked before anything is raised.
func TestTransientUnknownTopicIsNotFatal(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 2)...)
	var arm atomic.Bool
	var hits atomic.Int64
	meta, err := e.adm.Metadata(context.Background(), topic)
	require.NoError(t, err)
	failFetchOnce(e.fake, topic, meta.Topics[topic].ID, kerr.UnknownTopicOrPartition.Code, &arm, &hits)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\nunknown_topic_grace_period: 1s\n", topic))
	h.mustConnect()
	assert.Equal(t, strs(vals("a", 2)), values(h.readN(2, readTimeout)))
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	done := make(chan error, 1)
	var got []got
	go func() {
		for len(got) < 1 {
			b, ack, err := h.in.ReadBatch(ctx)
			if err != nil {
				done <- err
				return
			}
			got = append(got, toGot(b)...)
			_ = ack(ctx, nil)
		}
		done <- nil
	}()
	arm.Store(true)
	wait(t, 10*time.Second, func() bool { return hits.Load() == 1 })
	time.Sleep(1500 * time.Millisecond) // longer than the grace, without errors
	arm.Store(true)
	wait(t, 10*time.Second, func() bool { return hits.Load() == 2 })
	time.Sleep(500 * time.Millisecond) // the loop handles the second error
	e.produce(t, topic, 0, []byte("after"))
	require.NoError(t, <-done)
	assert.Equal(t, []string{"after"}, values(got))
	select {
	case err := <-h.fatal:
		t.Fatalf("fatal: %v", err)
	default:
	}
}

// fakeEndOnce makes kfake answer the next listing of end offsets (timestamp
// -1) with end for every partition, once each time arm is set.
func fakeEndOnce(c *kfake.Cluster, end int64, arm *atomic.Bool) {
	c.ControlKey(kmsg.ListOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rp.Timestamp != -1 {
					return nil, nil, false
				}
			}
		}
		if !arm.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.Offset, sp.LeaderEpoch, sp.Timestamp = end, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// Log truncation (an unclean leader election): a fetch is answered
// OFFSET_OUT_OF_RANGE and the end of the log is below the position. The
// input reads on from the new end, so the records that the log holds there
// after the truncation are read, as the Java consumer does after it detects
// a truncation (before, the position stayed above them and they were skipped
// without being counted). kfake cannot truncate a log: the fetch error and
// the lower end offset are injected, and the records "written after the
// truncation" are the ones kfake still holds at those offsets.
func TestTruncationReadsOnFromTheNewEnd(t *testing.T) {
	e := newKfakeEnv(t)
	topic := e.topic(t, 1)
	e.produce(t, topic, 0, vals("a", 10)...)
	meta, err := e.adm.Metadata(context.Background(), topic)
	require.NoError(t, err)
	var armFetch, armEnd atomic.Bool
	var hits atomic.Int64
	failFetchOnce(e.fake, topic, meta.Topics[topic].ID, kerr.OffsetOutOfRange.Code, &armFetch, &hits)
	fakeEndOnce(e.fake, 6, &armEnd)
	h := e.newInput(t, fmt.Sprintf("topics: [ %s ]\n", topic))
	h.mustConnect()
	require.Len(t, h.readN(10, readTimeout), 10)
	armEnd.Store(true)
	armFetch.Store(true)
	again := h.readN(4, readTimeout)
	var offs []int64
	for _, g := range again {
		offs = append(offs, g.Offset)
	}
	assert.Equal(t, []int64{6, 7, 8, 9}, offs, "the offsets from the new end are read")
	assert.Equal(t, int64(10), h.raw.conn.tr.snapshots()[0].position)
}
