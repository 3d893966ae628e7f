package input

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The committed offset is the end of the longest acknowledged prefix: with
// acks in random order it never passes an unacknowledged span, never passes
// the stop, and reaches the stop once everything was acknowledged.
func TestTrackerAckedPrefixProperty(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		p := tp{"t", 0}
		start := int64(r.IntN(50))
		stop := start + int64(r.IntN(200))
		tr := newTracker([]*partPlan{{tp: p, start: start, stop: stop, committed: -1}}, time.Now())
		type sp struct {
			s       *span
			pending bool
		}
		var spans []sp
		pos := start
		for pos < stop {
			to := pos + 1 + int64(r.IntN(10))
			if r.IntN(5) == 0 {
				to = stop + int64(r.IntN(5)) // a batch that reaches past the stop
			}
			pending := r.IntN(3) != 0 // others: markers, aborted gaps, dropped tombstones
			s := tr.advance(p, to, 10, pending, time.Now())
			require.NotNil(t, s)
			spans = append(spans, sp{s, pending})
			pos = min(to, stop)
		}
		_, _, finished := tr.position(p)
		require.True(t, finished, "seed %d", seed)

		order := r.Perm(len(spans))
		acked := make([]bool, len(spans))
		for i := range spans {
			if !spans[i].pending {
				acked[i] = true
			}
		}
		check := func() {
			want := start
			for i, s := range spans {
				if !acked[i] {
					break
				}
				want = s.s.to
			}
			got := tr.toCommit()[p]
			if want == start && len(tr.toCommit()) == 0 {
				return // nothing new to commit yet
			}
			assert.Equal(t, want, got, "seed %d", seed)
			assert.LessOrEqual(t, got, stop)
		}
		check()
		for _, i := range order {
			if spans[i].pending {
				tr.ack(p, spans[i].s)
				acked[i] = true
			}
			check()
		}
		assert.True(t, tr.allAcked(), "seed %d", seed)
		assert.Equal(t, stop, tr.toCommit()[p], "seed %d: a finished partition commits its stop", seed)
		assert.Equal(t, int64(0), tr.snapshots()[0].unackedBytes)
	}
}

// An ack of a span from a revoked assignment does not touch the partition
// assigned again later.
func TestTrackerIgnoresAcksFromRevokedAssignment(t *testing.T) {
	p := tp{"t", 0}
	tr := newTracker([]*partPlan{{tp: p, start: 0, stop: noStop, committed: -1}}, time.Now())
	old := tr.advance(p, 5, 100, true, time.Now())
	tr.remove([]tp{p})
	tr.add([]*partPlan{{tp: p, start: 5, stop: noStop, committed: 5}}, time.Now())
	fresh := tr.advance(p, 8, 10, true, time.Now())
	tr.ack(p, old)
	s := tr.snapshots()[0]
	assert.Equal(t, int64(10), s.unackedBytes)
	assert.Equal(t, int64(5), s.ackedTo)
	tr.ack(p, fresh)
	assert.Equal(t, int64(8), tr.toCommit()[p])
}

// hold adds to a span's unacknowledged bytes until the span is acknowledged
// (the ack releases what was held with it); a hold after the ack, or on a
// span of a revoked assignment, changes nothing.
func TestTrackerHold(t *testing.T) {
	p := tp{"t", 0}
	tr := newTracker([]*partPlan{{tp: p, start: 0, stop: noStop, committed: -1}}, time.Now())
	unacked := func() int64 { return tr.snapshots()[0].unackedBytes }
	a := tr.advance(p, 5, 100, true, time.Now())
	b := tr.advance(p, 9, 50, true, time.Now())
	tr.hold(p, a, 30)
	assert.Equal(t, int64(180), unacked())
	tr.hold(p, a, -30) // the output let its records go
	tr.hold(p, a, 20)
	assert.Equal(t, int64(170), unacked())
	tr.ack(p, a)
	assert.Equal(t, int64(50), unacked(), "the ack releases the span with what was held on it")
	tr.hold(p, a, -20)
	tr.hold(p, a, 7)
	assert.Equal(t, int64(50), unacked(), "a hold after the ack changes nothing")

	tr.remove([]tp{p})
	tr.add([]*partPlan{{tp: p, start: 9, stop: noStop, committed: 9}}, time.Now())
	fresh := tr.advance(p, 12, 10, true, time.Now())
	tr.hold(p, b, 1000)
	assert.Equal(t, int64(10), unacked(), "a hold on a revoked assignment's span changes nothing")
	tr.hold(p, fresh, 5)
	assert.Equal(t, int64(15), unacked())
}

// rewind (log truncation) drops the spans at or past the new end, cuts the
// one that straddles it, ignores late acks of dropped spans and keeps the
// unacknowledged bytes right.
func TestTrackerRewind(t *testing.T) {
	p := tp{"t", 0}
	now := time.Now()
	tr := newTracker([]*partPlan{{tp: p, start: 0, stop: noStop, committed: -1}}, now)
	tr.ack(p, tr.advance(p, 3, 5, true, now))
	mid := tr.advance(p, 6, 5, true, now)
	late := tr.advance(p, 9, 5, true, now)
	tr.rewind(p, 4, now)
	s := tr.snapshots()[0]
	assert.Equal(t, int64(4), s.position)
	assert.Equal(t, int64(3), s.ackedTo)
	assert.Equal(t, int64(5), s.unackedBytes)
	tr.ack(p, late)
	assert.Equal(t, int64(3), tr.snapshots()[0].ackedTo, "an ack of a dropped span is ignored")
	assert.Equal(t, int64(5), tr.snapshots()[0].unackedBytes)
	tr.ack(p, mid)
	s = tr.snapshots()[0]
	assert.Equal(t, int64(4), s.ackedTo, "the straddling span ends at the new end")
	assert.Equal(t, int64(0), s.unackedBytes)
	require.NotNil(t, tr.advance(p, 5, 1, false, now), "reading goes on from the new end")
	assert.Equal(t, map[tp]int64{p: 5}, tr.toCommit())
}
