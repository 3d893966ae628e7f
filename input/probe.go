package input

import (
	"context"
	"fmt"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// probeTimeout bounds one probe; the fetch loop waits for it.
const probeTimeout = 5 * time.Second

// prober learns the position of an idle partition below its stop, which the
// consumer cannot show: kgo never returns a FetchPartition with no records and
// no error, so a partition whose remaining offsets below the stop hold no
// record for us stays silent. Two cases hang a reader that only waits for
// records:
//
//   - aborted records below the LSO whose ABORT marker lies above another
//     producer's open transaction (so above the LSO): read_committed drops
//     them and the marker is not returned until the other transaction ends;
//   - retention, compaction or DeleteRecords moved the log start to or past
//     the stop: nothing is returned and no error is raised.
//
// The probe lists the log start (deleted offsets are data loss: fatal under
// reset_offset none, a counted warning otherwise) and then sends its own
// Fetch at the position to the partition leader and runs the response through
// kgo.ProcessFetchPartition with the consumer's isolation level and control
// records kept. If no data record lies between the position and the stop, the
// offsets up to min(next offset processed, stop) are consumed as an
// already-acknowledged span; the consumer skips records below the position
// when it delivers them later.
type prober struct {
	cfg *config
	cl  *kgo.Client // the admin client; Broker(leader).Request sends the fetch
	adm *kadm.Client
	tr  *tracker
	met *inputMetrics
	log *service.Logger
}

func (pr *prober) probe(ctx context.Context, p tp) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	pos, stop, finished := pr.tr.position(p)
	if finished || stop == noStop || pos >= stop {
		return nil
	}

	starts, err := listOK(pr.adm.ListStartOffsets(ctx, p.Topic))
	if err != nil {
		return fmt.Errorf("listing the log start: %w", err)
	}
	logStart, err := lookup(starts, p)
	if err != nil {
		return err
	}
	if logStart > pos {
		to := min(logStart, stop)
		dl := &DataLossError{TP: p, From: pos, To: to}
		pr.met.dataLoss(p, to-pos)
		pr.tr.update(p, func(ps *partState) { ps.lost += to - pos })
		if pr.cfg.reset == offsetNone {
			return &ConfigError{Field: knFieldResetOffset, Err: dl}
		}
		pr.log.Warnf("%v; skipping them", dl)
		pr.tr.advance(p, to, 0, false, time.Now())
		if pos = to; pos >= stop {
			return nil
		}
	}

	meta, err := pr.adm.Metadata(ctx, p.Topic)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	td, ok := meta.Topics[p.Topic]
	if !ok || td.Err != nil {
		return fmt.Errorf("metadata of %s: %v", p, td.Err)
	}
	pd, ok := td.Partitions[p.Partition]
	if !ok || pd.Err != nil || pd.Leader < 0 {
		return fmt.Errorf("no leader for %s", p)
	}

	iso := kgo.ReadUncommitted()
	var isoLevel int8
	if pr.cfg.readCommitted {
		iso, isoLevel = kgo.ReadCommitted(), 1
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = pr.cfg.maxPartitionBytes
	req.IsolationLevel = isoLevel
	req.SessionEpoch = -1 // a full fetch, outside any fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = p.Topic
	rt.TopicID = td.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p.Partition
	rp.FetchOffset = pos
	rp.CurrentLeaderEpoch = -1
	rp.LastFetchedEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = pr.cfg.maxPartitionBytes
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	kresp, err := pr.cl.Broker(int(pd.Leader)).Request(ctx, req)
	if err != nil {
		return fmt.Errorf("probe fetch: %w", err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("probe fetch: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("probe fetch: unexpected response shape")
	}
	fp := &resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		// OFFSET_OUT_OF_RANGE here means the log start moved between the
		// listing and the fetch: the next probe sees it.
		return fmt.Errorf("probe fetch: %w", err)
	}
	processed, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		KeepControlRecords: true,
		Offset:             pos,
		IsolationLevel:     iso,
		Topic:              p.Topic,
		Partition:          p.Partition,
	}, fp, kgo.DefaultDecompressor(), nil)
	if processed.Err != nil {
		return fmt.Errorf("probe fetch: %w", processed.Err)
	}
	for _, r := range processed.Records {
		if r.Offset >= stop {
			break
		}
		if !r.Attrs.IsControl() {
			// Data below the stop: the consumer delivers it.
			return nil
		}
	}
	if next > pos {
		to := min(next, stop)
		pr.log.Debugf("Probe of %s: offsets [%d, %d) hold no data record for this isolation level", p, pos, to)
		if pr.tr.advance(p, to, 0, false, time.Now()) != nil {
			pr.tr.update(p, func(ps *partState) { ps.probed += to - pos })
		}
	}
	return nil
}
