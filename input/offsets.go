package input

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// noStop marks an unbounded partition.
const noStop = -1

// partPlan is what the resolution before the first fetch decided for one
// partition. The start is exact: kgo is handed it with Offset.At and never
// asked to resolve (or silently clamp) anything itself.
type partPlan struct {
	tp
	start     int64
	stop      int64 // noStop when unbounded
	logStart  int64 // listed at start
	end       int64 // the LSO under read_committed, the HWM otherwise
	hwm       int64
	committed int64 // the group's committed offset at start, -1 if none
	leader    int32
	topicID   [16]byte // the topic's ID when it was listed (zero if unknown)
	// fallback says why the start followed reset_offset ("" if it did
	// not): logged per partition.
	fallback string
}

// logFallback logs, at info level, a start that followed reset_offset.
func (pp *partPlan) logFallback(log *service.Logger, c *config) {
	if pp.fallback != "" {
		log.Infof("Partition %s: start_offset %s: %s; starting at %d (%s %s)", pp.tp, c.start, pp.fallback, pp.start, knFieldResetOffset, c.reset)
	}
}

// listing is what the admin API returned for the topics read.
type listing struct {
	meta      kadm.Metadata
	logStarts kadm.ListedOffsets
	hwms      kadm.ListedOffsets
	lsos      kadm.ListedOffsets // nil under read_uncommitted
	committed kadm.OffsetResponses
	// groupReadKnown is whether checkGroupRead could tell that the client
	// may commit the group's offsets.
	groupReadKnown bool
	// topics are the topics read, sorted: those listed, or those the
	// patterns of regexp_topics matched.
	topics []string
}

// topicMetadata returns the metadata of the topics read and their names:
// the listed topics, or, with regexp_topics, every topic (internal ones
// excepted) whose whole name a pattern matches.
func (c *config) topicMetadata(ctx context.Context, adm *kadm.Client) (kadm.Metadata, []string, error) {
	if !c.regexpTopics {
		meta, err := adm.Metadata(ctx, c.topicOrder...)
		if err != nil {
			// kadm turns a topic's TOPIC_AUTHORIZATION_FAILED into an
			// error for the whole request, without the topic: name them.
			return meta, nil, fmt.Errorf("metadata of topics %s: %w", strings.Join(c.topicOrder, ", "), err)
		}
		return meta, c.topicOrder, nil
	}
	meta, err := adm.Metadata(ctx) // every topic
	if err != nil {
		return meta, nil, fmt.Errorf("metadata of all topics (%s): %w", knFieldRegexpTopics, err)
	}
	var names []string
	for name, td := range meta.Topics {
		if !td.IsInternal && td.Err == nil && c.matches(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return meta, names, nil
}

// partitionsOf returns the partitions of topics read, in order, from the
// metadata.
func (c *config) partitionsOf(meta kadm.Metadata, topics []string) ([]tp, error) {
	var out []tp
	for _, topic := range topics {
		td, ok := meta.Topics[topic]
		if !ok {
			return nil, &UnknownTopicError{Topic: topic, Partition: -1, Err: kerr.UnknownTopicOrPartition}
		}
		if td.Err != nil {
			if errors.Is(td.Err, kerr.UnknownTopicOrPartition) || errors.Is(td.Err, kerr.UnknownTopicID) {
				return nil, &UnknownTopicError{Topic: topic, Partition: -1, Err: td.Err}
			}
			return nil, fmt.Errorf("topic %s metadata: %w", topic, td.Err)
		}
		sel := c.selOf(topic)
		if sel.all {
			for _, pd := range td.Partitions.Sorted() {
				out = append(out, tp{topic, pd.Partition})
			}
			continue
		}
		var ps []int32
		for p := range sel.partitions {
			if _, ok := td.Partitions[p]; !ok {
				return nil, &UnknownTopicError{Topic: topic, Partition: p, Err: kerr.UnknownTopicOrPartition}
			}
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		for _, p := range ps {
			out = append(out, tp{topic, p})
		}
	}
	return out, nil
}

// list fetches metadata, log starts, end offsets and the group's offsets. It
// is the preflight of Connect: a bad password, a denied ACL or a missing
// topic fails here, before any fetch.
func (c *config) list(ctx context.Context, adm *kadm.Client, log *service.Logger) (*listing, []tp, error) {
	l := &listing{}
	var err error
	if l.meta, l.topics, err = c.topicMetadata(ctx, adm); err != nil {
		return nil, nil, err
	}
	parts, err := c.partitionsOf(l.meta, l.topics)
	if err != nil {
		return nil, nil, err
	}
	if len(l.topics) == 0 {
		// No topic matched (yet): listing offsets of no topics would
		// list every topic's.
		return l, nil, nil
	}
	if l.logStarts, err = listOK(adm.ListStartOffsets(ctx, l.topics...)); err != nil {
		return nil, nil, fmt.Errorf("listing log start offsets: %w", err)
	}
	if l.hwms, err = listOK(adm.ListEndOffsets(ctx, l.topics...)); err != nil {
		return nil, nil, fmt.Errorf("listing end offsets (high watermarks): %w", err)
	}
	if c.readCommitted {
		// Despite its name, ListCommittedOffsets lists with
		// read_committed isolation: it returns the last stable offset.
		if l.lsos, err = listOK(adm.ListCommittedOffsets(ctx, l.topics...)); err != nil {
			return nil, nil, fmt.Errorf("listing last stable offsets: %w", err)
		}
	}
	if c.group != "" {
		l.committed, err = fetchStable(ctx, adm, c.group, l.topics, log)
		if errors.Is(err, kerr.GroupIDNotFound) {
			// kfake answers GROUP_ID_NOT_FOUND for a group that
			// never committed; Kafka answers with no offsets.
			l.committed, err = kadm.OffsetResponses{}, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("fetching the committed offsets of group %s: %w", c.group, err)
		}
		if err = l.committed.Error(); err != nil {
			return nil, nil, fmt.Errorf("fetching the committed offsets of group %s: %w", c.group, err)
		}
		if c.commits() {
			if l.groupReadKnown, err = checkGroupRead(ctx, adm, c.group); err != nil {
				return nil, nil, err
			}
		}
	}
	return l, parts, nil
}

// fetchStable fetches the group's committed offsets of topics with
// require_stable (KIP-447): while a transaction that commits offsets of a
// partition is pending (a kafka_eos output's epoch, ours from before a crash or
// another member's from before a rebalance), Kafka answers
// UNSTABLE_OFFSET_COMMIT for it rather than the offset the transaction is about
// to replace. Reading that older offset would copy the transaction's records
// again once it commits; so retry until it ended (a dead producer's
// transaction is aborted by the coordinator within its transaction timeout) or
// ctx ends. A transaction the coordinator no longer tracks (a hanging
// transaction: seen under transaction version 2 after broker restarts, see
// docs/exactly-once.md) never ends: from stableWarnAfter on, a warning names
// the partitions every stableWarnAfter (log may be nil).
func fetchStable(ctx context.Context, adm *kadm.Client, group string, topics []string, log *service.Logger) (kadm.OffsetResponses, error) {
	backoff := 50 * time.Millisecond
	start, warned := time.Now(), time.Time{}
	for {
		resp, err := adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), group, topics...)
		unstable := errors.Is(err, kerr.UnstableOffsetCommit)
		if err == nil {
			unstable = errors.Is(resp.Error(), kerr.UnstableOffsetCommit)
		}
		if !unstable {
			return resp, err
		}
		if log != nil && time.Since(start) >= stableWarnAfter && time.Since(warned) >= stableWarnAfter {
			warned = time.Now()
			var held []string
			resp.Each(func(o kadm.OffsetResponse) {
				if errors.Is(o.Err, kerr.UnstableOffsetCommit) {
					held = append(held, fmt.Sprintf("%s:%d", o.Topic, o.Partition))
				}
			})
			log.Warnf("Group %s: the committed offsets of %v are held by a pending transactional offset commit for %v; reading them waits until that transaction ends (if no producer's transaction is open for that long, look for a hanging transaction: kafka-transactions.sh find-hanging)", group, held, time.Since(start).Round(time.Second))
		}
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-ctx.Done():
			return resp, fmt.Errorf("waiting for a pending transactional offset commit of group %s: %w", group, ctx.Err())
		}
	}
}

// stableWarnAfter is how long fetchStable waits for a pending transactional
// offset commit before it warns (then again at that interval): longer than
// a healthy epoch, shorter than the default transaction timeout (60 s).
const stableWarnAfter = 30 * time.Second

// errGroupRead is the message of a missing Read ACL on the group.
func errGroupRead(group, detail string) error {
	return fmt.Errorf("group %s: this client may not commit its offsets (the Read ACL on the group is missing%s): %w",
		group, detail, kerr.GroupAuthorizationFailed)
}

// checkCommitAccess is the fallback of checkGroupRead for a group that does
// not exist yet (Kafka describes no operations for it): it commits one
// partition's offset the group would get anyway, its committed offset
// (unchanged) or, with none, the start resolved for this run. Only an
// authorization failure counts; anything else is left to the regular commits.
func checkCommitAccess(ctx context.Context, adm *kadm.Client, group string, pp *partPlan) error {
	at := pp.committed
	if at < 0 {
		at = pp.start
	}
	var os kadm.Offsets
	os.AddOffset(pp.Topic, pp.Partition, at, -1)
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.GroupAuthorizationFailed) {
		return errGroupRead(group, "")
	}
	return nil
}

// checkGroupRead fails when the client may not commit the group's offsets.
// OffsetFetch needs only Describe on the group and OffsetCommit needs Read,
// so without this check a bounded run with Describe alone would read
// everything and fail at its final commit. DescribeGroups reports the
// operations the client is allowed on the group (KIP-430); a broker that
// omits them, or a failed describe, skips the check (the commit then reports
// the error).
func checkGroupRead(ctx context.Context, adm *kadm.Client, group string) (known bool, _ error) {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		if isFatal(err) {
			return true, fmt.Errorf("describing group %s: %w", group, err)
		}
		return false, nil
	}
	dg, ok := described[group]
	if !ok {
		return false, nil
	}
	if dg.Err != nil {
		// GROUP_ID_NOT_FOUND for a group that does not exist yet
		// (Kafka 4: DescribeGroups v6).
		if isFatal(dg.Err) {
			return true, fmt.Errorf("describing group %s: %w", group, dg.Err)
		}
		return false, nil
	}
	if len(dg.AuthorizedOperations) == 0 {
		return false, nil
	}
	for _, op := range dg.AuthorizedOperations {
		if op == kadm.OpRead || op == kadm.OpAll {
			return true, nil
		}
	}
	return true, errGroupRead(group, fmt.Sprintf("; it has %v", dg.AuthorizedOperations))
}

// topicsOf returns the topics of parts, sorted, each once.
func topicsOf(parts []tp) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range parts {
		if !seen[p.Topic] {
			seen[p.Topic] = true
			out = append(out, p.Topic)
		}
	}
	sort.Strings(out)
	return out
}

// listOK folds the per-partition errors of a listing into its error.
func listOK(l kadm.ListedOffsets, err error) (kadm.ListedOffsets, error) {
	if err != nil {
		return nil, err
	}
	return l, l.Error()
}

func lookup(l kadm.ListedOffsets, p tp) (int64, error) {
	o, ok := l.Lookup(p.Topic, p.Partition)
	if !ok {
		return 0, &UnknownTopicError{Topic: p.Topic, Partition: p.Partition, Err: kerr.UnknownTopicOrPartition}
	}
	if o.Err != nil {
		return 0, fmt.Errorf("%s: %w", p, o.Err)
	}
	return o.Offset, nil
}

// resolve decides the start and stop of every partition read. Errors that no
// retry fixes (reset none, a missing stop offset) are *ConfigError or
// *OffsetResetError and are fatal; others are retried by Connect.
func (c *config) resolve(ctx context.Context, adm *kadm.Client, l *listing, parts []tp) ([]*partPlan, error) {
	var startTS, stopTS kadm.ListedOffsets
	var err error
	if len(parts) == 0 {
		return nil, nil
	}
	topics := topicsOf(parts)
	if c.start == offsetTimestamp {
		if startTS, err = listOK(adm.ListOffsetsAfterMilli(ctx, c.startMillis, topics...)); err != nil {
			return nil, fmt.Errorf("listing offsets after %d ms: %w", c.startMillis, err)
		}
	}
	if c.stop == offsetTimestamp {
		if stopTS, err = listOK(adm.ListOffsetsAfterMilli(ctx, c.stopMillis, topics...)); err != nil {
			return nil, fmt.Errorf("listing offsets after %d ms: %w", c.stopMillis, err)
		}
	}
	plans := make([]*partPlan, 0, len(parts))
	for _, p := range parts {
		pp := &partPlan{tp: p, committed: -1, stop: noStop, leader: -1}
		if td, ok := l.meta.Topics[p.Topic]; ok {
			pp.leader = td.Partitions[p.Partition].Leader
			pp.topicID = td.ID
		}
		if pp.logStart, err = lookup(l.logStarts, p); err != nil {
			return nil, err
		}
		if pp.hwm, err = lookup(l.hwms, p); err != nil {
			return nil, err
		}
		pp.end = pp.hwm
		if l.lsos != nil {
			if pp.end, err = lookup(l.lsos, p); err != nil {
				return nil, err
			}
		}
		if l.committed != nil {
			if o, ok := l.committed.Lookup(p.Topic, p.Partition); ok && o.Err == nil && o.At >= 0 {
				pp.committed = o.At
			}
		}
		if err := c.resolveStart(pp, startTS); err != nil {
			return nil, err
		}
		if err := c.resolveStop(pp, stopTS); err != nil {
			return nil, err
		}
		plans = append(plans, pp)
	}
	if c.stop == offsetLatest && c.stopAtHWM && c.readCommitted {
		if err := c.waitForHWM(ctx, adm, plans); err != nil {
			return nil, err
		}
	}
	return plans, nil
}

func (c *config) resolveStart(pp *partPlan, startTS kadm.ListedOffsets) error {
	var (
		want   int64 = -1
		reason string
	)
	switch c.start {
	case offsetEarliest:
		pp.start = pp.logStart
		return nil
	case offsetLatest:
		pp.start = pp.end
		return nil
	case offsetTimestamp:
		o, err := lookup(startTS, pp.tp)
		if err != nil {
			return err
		}
		if o < 0 || o > pp.end {
			o = pp.end
		}
		pp.start = o
		return nil
	case offsetCommitted:
		want, reason = pp.committed, "no committed offset"
	case offsetSpecific:
		// A partition missing from start_offsets starts at the group's
		// committed offset, then follows reset_offset (as Flink's
		// specific-offsets initializer does).
		if o, ok := c.startOffsets[pp.tp]; ok {
			want = o
		} else {
			want, reason = pp.committed, "no offset in "+knFieldStartOffsets
			if c.group != "" {
				reason += " and no committed offset"
			}
		}
	}
	if want >= 0 {
		if want >= pp.logStart && want <= pp.hwm {
			pp.start = want
			return nil
		}
		reason = fmt.Sprintf("offset %d is outside the log [%d, %d]", want, pp.logStart, pp.hwm)
	}
	switch c.reset {
	case offsetEarliest:
		pp.start = pp.logStart
	case offsetLatest:
		pp.start = pp.end
	default:
		return &OffsetResetError{TP: pp.tp, Start: c.start, Reason: reason, Implicit: !c.resetSet}
	}
	pp.fallback = reason
	return nil
}

func (c *config) resolveStop(pp *partPlan, stopTS kadm.ListedOffsets) error {
	switch c.stop {
	case offsetNone:
		pp.stop = noStop
	case offsetLatest:
		pp.stop = pp.end
		if c.stopAtHWM {
			pp.stop = pp.hwm
		}
	case offsetTimestamp:
		o, err := lookup(stopTS, pp.tp)
		if err != nil {
			return err
		}
		if o < 0 || o > pp.end {
			o = pp.end
		}
		pp.stop = o
	case offsetSpecific:
		o, ok := c.stopOffsets[pp.tp]
		if !ok {
			return &ConfigError{Field: knFieldStopOffsets, Err: fmt.Errorf("no stop offset for %s", pp.tp)}
		}
		pp.stop = o
	case offsetCommitted:
		reason := "no committed offset"
		if pp.committed >= 0 {
			if pp.committed >= pp.logStart && pp.committed <= pp.hwm {
				pp.stop = pp.committed
				return nil
			}
			reason = fmt.Sprintf("offset %d is outside the log [%d, %d]", pp.committed, pp.logStart, pp.hwm)
		}
		// Only an explicit reset_offset says where to stop instead:
		// its default for a non-committed start (earliest) would read
		// nothing of the partition without a word.
		switch {
		case c.resetSet && c.reset == offsetEarliest:
			pp.stop = pp.logStart
		case c.resetSet && c.reset == offsetLatest:
			pp.stop = pp.end
		default:
			return &OffsetResetError{TP: pp.tp, Start: c.stop, Stop: true, Reason: reason, Implicit: !c.resetSet}
		}
	}
	return nil
}

// waitForHWM waits until the last stable offset of every partition reached its
// stop (the high watermark captured at start), that is until the transactions
// open below the stops ended. On timeout the error names the producers whose
// open transactions block.
func (c *config) waitForHWM(ctx context.Context, adm *kadm.Client, plans []*partPlan) error {
	deadline := time.Now().Add(c.hwmWaitTimeout)
	var parts []tp
	for _, pp := range plans {
		parts = append(parts, pp.tp)
	}
	topics := topicsOf(parts)
	if len(topics) == 0 {
		return nil
	}
	for {
		lsos, err := listOK(adm.ListCommittedOffsets(ctx, topics...))
		if err != nil {
			return fmt.Errorf("listing last stable offsets: %w", err)
		}
		var blocked []*partPlan
		for _, pp := range plans {
			lso, err := lookup(lsos, pp.tp)
			if err != nil {
				return err
			}
			if lso < pp.stop && pp.start < pp.stop {
				blocked = append(blocked, pp)
			}
		}
		if len(blocked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return &OpenTransactionError{Waited: c.hwmWaitTimeout, Blocking: describeBlocking(ctx, adm, blocked)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// describeBlocking names the producers with an open transaction below the
// stops, best effort.
func describeBlocking(ctx context.Context, adm *kadm.Client, blocked []*partPlan) string {
	set := kadm.TopicsSet{}
	for _, pp := range blocked {
		if set[pp.Topic] == nil {
			set[pp.Topic] = map[int32]struct{}{}
		}
		set[pp.Topic][pp.Partition] = struct{}{}
	}
	described, err := adm.DescribeProducers(ctx, set)
	// Name the transactional.id of each blocking producer, which is what an
	// operator can act on (kafka-transactions.sh abort / find-hanging).
	txnIDs := map[int64]string{}
	if err == nil {
		var pids []int64
		described.EachProducer(func(d kadm.DescribedProducer) {
			if d.CurrentTxnStartOffset >= 0 {
				pids = append(pids, d.ProducerID)
			}
		})
		if len(pids) > 0 {
			if listed, lerr := adm.ListTransactions(ctx, pids, nil); lerr == nil {
				listed.Each(func(lt kadm.ListedTransaction) { txnIDs[lt.ProducerID] = lt.TxnID })
			}
		}
	}
	var out []string
	for _, pp := range blocked {
		s := fmt.Sprintf("%s below stop %d", pp.tp, pp.stop)
		if err == nil {
			described.EachPartition(func(dp kadm.DescribedProducersPartition) {
				if dp.Topic != pp.Topic || dp.Partition != pp.Partition {
					return
				}
				dp.ActiveProducers.Each(func(d kadm.DescribedProducer) {
					if d.CurrentTxnStartOffset >= 0 && d.CurrentTxnStartOffset < pp.stop {
						id := ""
						if tid, ok := txnIDs[d.ProducerID]; ok {
							id = fmt.Sprintf("transactional.id %q, ", tid)
						}
						s += fmt.Sprintf(" (%sproducer id %d epoch %d, transaction open since offset %d)", id, d.ProducerID, d.ProducerEpoch, d.CurrentTxnStartOffset)
					}
				})
			})
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}
