package input

import (
	"context"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// discoverer adds, to an unbounded read with direct assignment, the
// partitions that appeared since it started: partitions added to a topic read
// whole and, with regexp_topics, matching topics created later (Flink's
// partition discovery). Bounded reads never add partitions: their stops were
// captured at start, and a partition found later would have none. With
// group_membership the group assigns new partitions itself.
//
// A partition found this way starts at the group's committed offset when it
// has one in the log, else at its log start: it did not exist (or did not
// match) when the read started, so every record in it is one the read must
// not miss.
type discoverer struct {
	cfg *config
	adm *kadm.Client
	cl  *kgo.Client // the consuming client
	tr  *tracker
	res *service.Resources
	log *service.Logger
}

func (d *discoverer) discover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.connectTimeout)
	defer cancel()
	l, parts, err := d.cfg.list(ctx, d.adm, d.log)
	if err != nil {
		d.log.Debugf("Partition discovery: %v", err)
		return
	}
	var fresh []tp
	for _, p := range parts {
		if _, tracked := d.tr.assignmentOf(p); !tracked {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return
	}
	dc := *d.cfg
	dc.start, dc.reset, dc.resetSet = offsetEarliest, offsetEarliest, true
	if dc.group != "" {
		dc.start = offsetCommitted
		if err := keptStarts(ctx, d.res, d.adm, dc.group, l, fresh, -1); err != nil {
			d.log.Warnf("Partition discovery: %v", err)
			return
		}
	}
	plans, err := dc.resolve(ctx, d.adm, l, fresh)
	if err != nil {
		d.log.Debugf("Partition discovery: resolving the starts of %v: %v", fresh, err)
		return
	}
	add := map[string]map[int32]kgo.Offset{}
	for _, pp := range plans {
		if add[pp.Topic] == nil {
			add[pp.Topic] = map[int32]kgo.Offset{}
		}
		add[pp.Topic][pp.Partition] = kgo.NewOffset().At(pp.start)
		d.log.Infof("Partition %s: found by partition discovery; reading from offset %d (log start %d, committed %d)", pp.tp, pp.start, pp.logStart, pp.committed)
	}
	// Tracked first (its first fetch belongs to it: the fetch fence), the
	// output told where it starts, then fetched.
	d.tr.add(plans, time.Now())
	if d.cfg.commits() {
		handOverStarts(d.res, d.cfg.group, plans)
	}
	d.cl.AddConsumePartitions(add)
}
