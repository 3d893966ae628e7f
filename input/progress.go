package input

import (
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// progress logs how far a bounded read is, as a progress bar would: offsets
// done of the total to the stops, the rate since start and an ETA. Offsets,
// not records, are counted: markers and aborted records take offsets too, and
// the total is known before the first fetch only in offsets.
type progress struct {
	log     *service.Logger
	started time.Time
	total   int64
}

func newProgress(log *service.Logger, plans []*partPlan, now time.Time) *progress {
	p := &progress{log: log, started: now}
	for _, pp := range plans {
		if pp.stop > pp.start {
			p.total += pp.stop - pp.start
		}
	}
	return p
}

func (p *progress) done(snaps []snapshot) (done, emitted, lost int64, finished int) {
	for _, s := range snaps {
		if s.stop > s.start {
			done += min(s.position, s.stop) - s.start
		}
		emitted += s.emitted
		lost += s.lost
		if s.finished {
			finished++
		}
	}
	return
}

func (p *progress) report(snaps []snapshot, summary bool) {
	done, emitted, lost, finished := p.done(snaps)
	elapsed := time.Since(p.started)
	rate := float64(done) / max(elapsed.Seconds(), 1e-3)
	if summary {
		p.log.Infof("Bounded read finished: %d offsets of %d partitions read (%d messages emitted, %d offsets lost to deletion) in %v (%.0f offsets/s)",
			done, len(snaps), emitted, lost, elapsed.Round(time.Millisecond), rate)
		return
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(done) / float64(p.total)
	}
	eta := "unknown"
	if rate > 0 {
		eta = time.Duration(float64(p.total-done) / rate * float64(time.Second)).Round(time.Second).String()
	}
	p.log.Infof("Progress: %d/%d offsets (%.1f%%), %d/%d partitions finished, %.0f offsets/s, ETA %s",
		done, p.total, pct, finished, len(snaps), rate, eta)
}
