package output

import (
	"context"
	"fmt"

	"github.com/connect-eos/connect-eos/txnstate"
)

// mode holds what makes the three modes differ: plain (no source positions:
// plainMode), Kafka-to-Kafka (consumer_group: the source offsets commit in
// each epoch, k2kMode in k2k.go) and dedupe (a key and a position per message,
// dedupeMode in dedupe.go). The write path and the committer call it at fixed
// points; every rule of a mode (what to drop, what to wait for, what an abort
// owes) lives behind it. For one batch, in this order:
//
//	read      outside o.mu: what the mode needs of every message (its span;
//	          its key and position). A message whose key cannot be read
//	          fails, and messages that must not be committed past a failed
//	          one (the same source partition or key, later) are held back.
//	skip      under o.mu, before an epoch is joined: true acknowledges the
//	          batch without writing it (dedupe: replays only).
//	admit     under o.mu, with the epoch to join: what of the batch is
//	          dropped, what it waits for (it may wait without o.mu and return
//	          the epoch open then); nil acknowledges the batch without
//	          writing it; an error nacks it.
//	refused   under o.mu: the batch is nacked before it joined an epoch.
//
// For one epoch:
//
//	prepare   committer, after the flush, before PREPARE: what the epoch
//	          commits besides its records, sent into its transaction and
//	          stored in its PREPARE record.
//	committed committer, once EndTxn(commit) is known to have succeeded,
//	          before the ack.
//	settled   committer, after COMMITTED and the ack, before the slot
//	          carries another epoch.
//	aborting  under o.mu: every live epoch from n on aborts (invariant I5).
//	nacked    under o.mu: an aborted epoch's batches are nacked now.
//	stopped   under o.mu: the output stops; released are the live epochs
//	          that will never commit.
type mode interface {
	connect(ctx context.Context) error
	read(w *write)
	skip(w *write) (bool, error)
	admit(ctx context.Context, w *write, ep *epoch) (*epoch, error)
	refused(w *write, err error)
	unjoined(w *write)
	prepare(ctx context.Context, ep *epoch, rec *txnstate.Record) error
	committed(ep *epoch, rec txnstate.Record)
	settled(ctx context.Context, rec txnstate.Record) bool
	aborting(n uint64, live []*epoch)
	nacked(ep *epoch)
	stopped(released []*epoch)
}

// plainMode: every epoch is atomic for read_committed readers and nothing
// else is committed with it; across a crash the input replays what was not
// acknowledged (at-least-once).
type plainMode struct{}

func (plainMode) connect(context.Context) error                                { return nil }
func (plainMode) read(*write)                                                  {}
func (plainMode) skip(*write) (bool, error)                                    { return false, nil }
func (plainMode) admit(_ context.Context, _ *write, ep *epoch) (*epoch, error) { return ep, nil }
func (plainMode) refused(*write, error)                                        {}
func (plainMode) unjoined(*write)                                              {}
func (plainMode) prepare(context.Context, *epoch, *txnstate.Record) error      { return nil }
func (plainMode) committed(*epoch, txnstate.Record)                            {}
func (plainMode) settled(context.Context, txnstate.Record) bool                { return true }
func (plainMode) aborting(uint64, []*epoch)                                    {}
func (plainMode) nacked(*epoch)                                                {}
func (plainMode) stopped([]*epoch)                                             {}

// modeLine is logged once at construction: which mode the output runs in and
// what it promises, so that a config that is not in the mode its author meant
// (a consumer_group left out, a dedupe block misplaced) shows in the first
// lines of the log.
func (c *config) modeLine() string {
	switch c.mode {
	case txnstate.KafkaToKafka:
		return fmt.Sprintf("kafka_eos %q: Kafka-to-Kafka mode for consumer group %q: each epoch commits its records and the group's offsets in one transaction, exactly-once end to end for read_committed readers",
			c.transactionalID, c.group)
	case txnstate.Mirror:
		return fmt.Sprintf("kafka_eos %q: mirror mode for consumer group %q: each epoch commits its records and the source positions (topic %s on this cluster) in one transaction; the input resumes from those positions, exactly-once end to end for read_committed readers",
			c.transactionalID, c.group, c.mirror.positionsTopic)
	case txnstate.Dedupe:
		return fmt.Sprintf("kafka_eos %q: dedupe mode: a message at or below its key's committed position is dropped, exactly-once end to end for an input that replays in order",
			c.transactionalID)
	default:
		return fmt.Sprintf("kafka_eos %q: plain mode: every epoch is atomic for read_committed readers and a batch is acknowledged once its epoch committed; at-least-once across a crash (set consumer_group with a kafka_native input, or dedupe, for exactly-once)",
			c.transactionalID)
	}
}
