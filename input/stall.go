package input

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// checkStalls warns about every partition whose position has not moved for
// stall_warning_interval while records are there (its end offset is past the
// position), naming the reason: paused for unacknowledged bytes, the last
// fetch error, or an open transaction holding the last stable offset. It
// lists end offsets only when some partition has not moved for that long.
// A warning repeats at the interval while the stall lasts.
func (b *bookkeeper) checkStalls(ctx context.Context, now time.Time) {
	d := b.cfg.stallWarning
	if d <= 0 || b.adm == nil {
		return
	}
	var stalled []snapshot
	var total int64 // unacknowledged bytes of every partition
	snaps := b.tr.snapshots()
	b.tr.mu.Lock()
	share := b.tr.memShare
	b.tr.mu.Unlock()
	for _, s := range snaps {
		total += s.unackedBytes
	}
	for _, s := range snaps {
		if !s.finished && now.Sub(s.lastAdvance) >= d && now.Sub(s.stallWarned) >= d {
			stalled = append(stalled, s)
		}
	}
	if len(stalled) == 0 {
		return
	}
	var topics []string
	seen := map[string]bool{}
	for _, s := range stalled {
		if !seen[s.Topic] {
			seen[s.Topic] = true
			topics = append(topics, s.Topic)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	hwms, err := b.adm.ListEndOffsets(lctx, topics...)
	if err != nil {
		b.log.Debugf("Listing end offsets for the stall check: %v", err)
		return
	}
	var lsos kadm.ListedOffsets
	if b.cfg.readCommitted {
		if lsos, err = b.adm.ListCommittedOffsets(lctx, topics...); err != nil {
			b.log.Debugf("Listing last stable offsets for the stall check: %v", err)
			return
		}
	}
	for _, s := range stalled {
		hwm, err := lookup(hwms, s.tp)
		if err != nil {
			continue
		}
		end := hwm
		if lsos != nil {
			if end, err = lookup(lsos, s.tp); err != nil {
				continue
			}
		}
		if s.stop != noStop {
			end = min(end, s.stop)
			hwm = min(hwm, s.stop)
		}
		var why string
		switch {
		case s.paused && s.unackedBytes > b.cfg.maxBufferedBytes:
			why = fmt.Sprintf("paused: %d bytes handed to the pipeline are not acknowledged (%s %d); the pipeline or the output is slow or stuck", s.unackedBytes, knFieldMaxBufferedBytes, b.cfg.maxBufferedBytes)
		case s.paused && total > b.cfg.maxBufferedTotal:
			why = fmt.Sprintf("paused: %d bytes handed to the pipeline by all partitions are not acknowledged (%s %d); the pipeline or the output is slow or stuck", total, knFieldMaxBufferedTotal, b.cfg.maxBufferedTotal)
		case s.paused && total > share:
			why = fmt.Sprintf("paused: %d bytes handed to the pipeline by all partitions are not acknowledged, more than their share of the Go memory limit (two thirds of it: %d); the pipeline or the output is slow or stuck", total, share)
		case end > s.position && s.lastErr != "" && now.Sub(s.lastErrAt) < d:
			why = fmt.Sprintf("fetching it fails: %s (%v ago)", s.lastErr, now.Sub(s.lastErrAt).Round(time.Millisecond))
		case end > s.position:
			why = "no fetch returned its records (see the brokers' logs)"
		case hwm > s.position:
			why = fmt.Sprintf("an open transaction holds its last stable offset at %d (high watermark %d): read_committed reads nothing past it until the transaction ends", end, hwm)
		default:
			continue // no records there: idle, not stalled
		}
		b.tr.update(s.tp, func(ps *partState) { ps.stallWarned = now })
		b.log.Warnf("Partition %s: no progress for %v at position %d with records up to %d: %s", s.tp, now.Sub(s.lastAdvance).Round(time.Second), s.position, max(end, hwm), why)
	}
}
