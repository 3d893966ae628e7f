package input

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fenceLoop is a fetch loop without a client: enough for process, whose
// batches go to out.
func fenceLoop(t *testing.T, tr *tracker, out chan readyBatch) *fetchLoop {
	t.Helper()
	cfg := &config{maxBatchRecords: 4, maxBatchBytes: 1 << 20, tombstones: tombstonesEmit}
	return &fetchLoop{cfg: cfg, tr: tr, out: out, met: newInputMetrics(service.MockResources().Metrics()),
		log: service.MockResources().Logger(), lastErrLog: map[string]time.Time{}}
}

func recordsAt(p tp, from, to int64) []*kgo.Record {
	var recs []*kgo.Record
	for o := from; o < to; o++ {
		recs = append(recs, &kgo.Record{Topic: p.Topic, Partition: p.Partition, Offset: o, Value: fmt.Appendf(nil, "%d", o)})
	}
	return recs
}

// A finding of the chaos suite (the TV2 stalls of the unbounded Kafka-to-Kafka chaos
// runs): a fetch the loop holds while the partition is lost and assigned to
// the same member again must not feed the new assignment. Here the loop
// processes records [100, 112) of the old assignment in batches of 4; while
// it waits to hand the first batch over (the pipeline is full, as while the
// broker is down), the partition is lost and assigned again from the
// committed offset 40. Taking the rest for the new assignment would make a
// span [40, 108) holding only the records [104, 108): the output commits 108
// and the records [40, 104) are never copied (the new session's fetch of them
// is then skipped as already consumed).
func TestFetchLoopDropsRecordsOfAReassignedPartition(t *testing.T) {
	p := tp{"t", 0}
	tr := newTracker([]*partPlan{{tp: p, start: 100, stop: noStop, committed: 40}}, time.Now())
	out := make(chan readyBatch)
	f := fenceLoop(t, tr, out)
	oldID, ok := tr.ownerFor(p, tr.endPoll())
	require.True(t, ok)

	// process runs on its own; the test waits until it has advanced the
	// tracking past the first batch (its next step is the blocked send),
	// and only then loses and reassigns the partition. Reassigning any
	// earlier would leave process nothing to send at all.
	done := make(chan bool, 1)
	go func() { done <- f.process(context.Background(), p, oldID, recordsAt(p, 100, 112), time.Now()) }()
	require.Eventually(t, func() bool {
		pos, _, _ := tr.position(p)
		return pos == 104
	}, 30*time.Second, time.Millisecond, "process advances to the end of its first batch")
	tr.remove([]tp{p})
	tr.add([]*partPlan{{tp: p, start: 40, stop: noStop, committed: 40}}, time.Now())

	var bs []readyBatch
	timeout := time.After(30 * time.Second)
collect:
	for {
		select {
		case b := <-out:
			bs = append(bs, b)
		case ok := <-done: // every send was taken before process returned
			require.True(t, ok)
			break collect
		case <-timeout:
			t.Fatalf("process did not return; batches taken: %d", len(bs))
		}
	}

	require.Len(t, bs, 1, "only the batch already handed over leaves; the rest belongs to no assignment")
	assert.Equal(t, int64(100), bs[0].sp.from)
	assert.Equal(t, int64(104), bs[0].sp.to)
	pos, _, _ := tr.position(p)
	assert.Equal(t, int64(40), pos, "the new assignment still starts at the committed offset")
	assert.Empty(t, tr.toCommit(), "nothing of the new assignment is acknowledged")
}

// The same for a whole fetch: a PollFetches that returned before the
// partition was assigned again belongs to the old assignment, one that
// started after to the new one.
func TestFetchFenceNumbersPolls(t *testing.T) {
	p := tp{"t", 0}
	tr := newTracker([]*partPlan{{tp: p, start: 100, stop: noStop, committed: 40}}, time.Now())
	tr.beginPoll()
	before := tr.endPoll()
	_, ok := tr.ownerFor(p, before)
	require.True(t, ok)

	tr.remove([]tp{p})
	_, ok = tr.ownerFor(p, before)
	assert.False(t, ok, "a partition given up takes no fetch")
	tr.add([]*partPlan{{tp: p, start: 40, stop: noStop, committed: 40}}, time.Now())
	_, ok = tr.ownerFor(p, before)
	assert.False(t, ok, "a fetch from before the new assignment is not its own")

	tr.beginPoll()
	after := tr.endPoll()
	id, ok := tr.ownerFor(p, after)
	require.True(t, ok)
	cur, _ := tr.assignmentOf(p)
	assert.Equal(t, cur, id)

	// An assignment never lands while a poll is in flight: add waits for
	// the poll to return, so that poll's fetches are fenced off.
	tr.beginPoll()
	added := make(chan struct{})
	go func() {
		tr.remove([]tp{p})
		tr.add([]*partPlan{{tp: p, start: 40, stop: noStop, committed: 40}}, time.Now())
		close(added)
	}()
	select {
	case <-added:
		t.Fatal("the assignment landed while a poll was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	inFlight := tr.endPoll()
	<-added
	_, ok = tr.ownerFor(p, inFlight)
	assert.False(t, ok, "the poll in flight during the assignment is fenced off")
}
