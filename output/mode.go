package output

import (
	"fmt"

	"github.com/connect-eos/connect-eos/txnstate"
)

// modeLine is logged once at construction: which mode the output runs in and
// what it promises, so that a config that is not in the mode its author meant
// (a consumer_group left out, a dedupe block misplaced) shows in the first
// lines of the log.
func (c *config) modeLine() string {
	switch c.mode {
	case txnstate.KafkaToKafka:
		return fmt.Sprintf("kafka_eos %q: Kafka-to-Kafka mode for consumer group %q: each epoch commits its records and the group's offsets in one transaction, exactly-once end to end for read_committed readers",
			c.transactionalID, c.group)
	case txnstate.Dedupe:
		return fmt.Sprintf("kafka_eos %q: dedupe mode: a message at or below its key's committed position is dropped, exactly-once end to end for an input that replays in order",
			c.transactionalID)
	default:
		return fmt.Sprintf("kafka_eos %q: plain mode: every epoch is atomic for read_committed readers and a batch is acknowledged once its epoch committed; at-least-once across a crash (set consumer_group with a kafka_native input, or dedupe, for exactly-once)",
			c.transactionalID)
	}
}
