package statecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic configs set when the cache creates its topic.
//
// cleanup.policy=compact keeps the last record of every key forever (a
// tombstone goes after delete.retention.ms, Kafka default 1 day).
//
// segment.ms=1h: compaction never touches the active segment, which Kafka
// rolls only after segment.ms (default 7 days) or segment.bytes (default 1
// GiB). A state topic written ten times a second would otherwise be read
// uncompacted, possibly a GiB of it, by every new process. One hour bounds
// that to an hour of writes.
//
// min.compaction.lag.ms is left at its default 0: nothing here needs old
// values to outlive their successor. Operators may change any of these with
// kafka-configs; the cache checks only cleanup.policy (and retention, if the
// policy also deletes).
var createConfigs = map[string]*string{
	"cleanup.policy": strPtr("compact"),
	"segment.ms":     strPtr("3600000"),
}

// maxBatchBytes is the largest record batch the cache writes, whatever the
// topic's max.message.bytes allows: 100 MiB less 64 KiB. A write is one
// produce request holding one batch, and Apache Kafka closes the connection
// on a request over socket.request.max.bytes (default 100 MiB), where
// franz-go retries; a read gets the batch in one fetch response (Kafka
// returns a first batch whole even above the fetch size limits), which
// franz-go refuses over BrokerMaxReadBytes (default 100 MiB), and a batch
// the cache could write but not read would make the topic unreadable to
// every process. 64 KiB is room for the request and response headers (topic
// name, client id).
const maxBatchBytes = 100<<20 - 64<<10

func strPtr(s string) *string { return &s }

// topicMeta is what the cache learnt about its topic at load.
type topicMeta struct {
	topic           string
	id              kadm.TopicID // all zero from brokers without topic ids
	partitions      int32
	maxMessageBytes int // max.message.bytes: the largest record batch the broker accepts
}

// batchLimit is the largest record batch the cache writes to the topic: its
// max.message.bytes, at most maxBatchBytes.
func (m topicMeta) batchLimit() int { return min(m.maxMessageBytes, maxBatchBytes) }

// partitionFor returns the partition of key: franz-go's default key hash,
// murmur2 as the Java client, so that the output (or any writer using the
// default partitioner) puts a key where the cache does.
func (m topicMeta) partitionFor(key []byte) int32 {
	if m.partitions <= 1 {
		return 0
	}
	tp := kgo.StickyKeyPartitioner(nil).ForTopic(m.topic)
	return int32(tp.Partition(&kgo.Record{Key: key}, int(m.partitions)))
}

// ensureTopic creates the topic if it does not exist and checks that an
// existing one is compacted. Creating races with another process creating it
// are fine: TOPIC_ALREADY_EXISTS falls through to the check.
func (c *Cache) ensureTopic(ctx context.Context) (topicMeta, error) {
	topic := c.cfg.Topic
	meta := topicMeta{topic: topic}

	created := false
	for attempt := 0; ; attempt++ {
		tds, err := c.adm.ListTopics(ctx, topic)
		if err != nil {
			return meta, fmt.Errorf("kafka_state: describing topic %q: %w", topic, err)
		}
		td := tds[topic]
		switch {
		case errors.Is(td.Err, kerr.UnknownTopicOrPartition) && !created:
			resp, err := c.adm.CreateTopic(ctx, c.cfg.Partitions, c.cfg.ReplicationFactor, createConfigs, topic)
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return meta, fmt.Errorf("kafka_state: creating topic %q (partitions %d, replication_factor %d): %w %s", topic, c.cfg.Partitions, c.cfg.ReplicationFactor, err, resp.ErrMessage)
			}
			created = true
			c.logInfof("kafka_state: created topic %s (partitions %d, cleanup.policy=compact)", topic, c.cfg.Partitions)
			continue
		case td.Err != nil || len(td.Partitions) == 0:
			// Just created: the metadata may lag the controller.
			if (td.Err == nil || kerr.IsRetriable(td.Err) || errors.Is(td.Err, kerr.UnknownTopicOrPartition)) && attempt < 50 {
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return meta, err
				}
				continue
			}
			return meta, fmt.Errorf("kafka_state: describing topic %q: %w", topic, td.Err)
		}
		meta.partitions = int32(len(td.Partitions))
		meta.id = td.ID
		break
	}

	cfgs, err := c.topicConfigs(ctx)
	if err != nil {
		return meta, err
	}
	if err := checkPolicy(topic, cfgs); err != nil {
		return meta, err
	}
	meta.maxMessageBytes = 1048588 // Kafka's default message.max.bytes
	if v, ok := cfgs["max.message.bytes"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return meta, fmt.Errorf("kafka_state: topic %q: max.message.bytes %q: %w", topic, v, err)
		}
		meta.maxMessageBytes = n
	}
	return meta, nil
}

// topicConfigs returns the topic's configs as the broker describes them.
func (c *Cache) topicConfigs(ctx context.Context) (map[string]string, error) {
	topic := c.cfg.Topic
	rcs, err := c.adm.DescribeTopicConfigs(ctx, topic)
	if err == nil && len(rcs) == 1 {
		err = rcs[0].Err
	}
	if err == nil && len(rcs) != 1 {
		err = fmt.Errorf("got %d config resources, want 1", len(rcs))
	}
	if err != nil {
		return nil, fmt.Errorf("kafka_state: describing configs of topic %q: %w", topic, err)
	}
	cfgs := make(map[string]string)
	for _, kv := range rcs[0].Configs {
		if kv.Value != nil {
			cfgs[kv.Key] = *kv.Value
		}
	}
	return cfgs, nil
}

// deleteRetention returns the topic's delete.retention.ms, described afresh
// (an operator may change it), Kafka's default of a day if unset.
func (c *Cache) deleteRetention(ctx context.Context) (time.Duration, error) {
	cfgs, err := c.topicConfigs(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := cfgs["delete.retention.ms"]
	if !ok {
		return 24 * time.Hour, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, fmt.Errorf("kafka_state: topic %q: delete.retention.ms %q is not a duration in milliseconds", c.cfg.Topic, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// checkTopic stops the cache (a *TopicChangedError, for good) when the topic is
// no longer the one it loaded: another topic id (deleted and created again
// under the same name) or another partition count. A topic not found is an
// error for this call only: it may be deleted, or metadata may lag.
func (c *Cache) checkTopic(ctx context.Context) error {
	topic := c.cfg.Topic
	// A metadata request of its own: kadm answers from the client's
	// metadata cache, which can be MetadataMinAge old.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.admCl)
	if err != nil {
		return fmt.Errorf("kafka_state: describing topic %q: %w", topic, err)
	}
	var (
		id    kadm.TopicID
		parts int
		terr  error = kerr.UnknownTopicOrPartition
	)
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == topic {
			id, parts, terr = t.TopicID, len(t.Partitions), kerr.ErrorForCode(t.ErrorCode)
		}
	}
	var reason string
	switch {
	case errors.Is(terr, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("kafka_state: topic %q not found (deleted?): %w", topic, terr)
	case terr != nil:
		return fmt.Errorf("kafka_state: describing topic %q: %w", topic, terr)
	case id != c.meta.id && id != (kadm.TopicID{}) && c.meta.id != (kadm.TopicID{}):
		reason = fmt.Sprintf("was deleted and recreated (topic id %s when the cache read it first, %s now): the values written before are gone from Kafka", c.meta.id, id)
	case int32(parts) != c.meta.partitions:
		reason = fmt.Sprintf("has %d partitions, %d when the cache read it first: %s", parts, c.meta.partitions, partitionsAdvice)
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.breakLocked(&TopicChangedError{Topic: topic, Reason: reason, Keys: c.lenLocked()})
}

// partitionsAdvice ends the errors about a changed partition count.
const partitionsAdvice = "keys hash to other partitions now, where neither compaction nor the cache orders their old and new values; move the state to a new topic (or give this one its old partition count back)"

// checkPlacementLocked stops the cache when r, of key, sits in a partition key does not
// hash to under the current partition count: partitions were added after it
// was written (or a writer used another partitioner). c.mu is held.
func (c *Cache) checkPlacementLocked(key string, r *kgo.Record) error {
	if want := c.meta.partitionFor([]byte(key)); r.Partition != want {
		return &TopicChangedError{Topic: c.cfg.Topic, Keys: c.lenLocked(), Reason: fmt.Sprintf(
			"holds key %q in partition %d (offset %d), but with %d partitions the key hashes to partition %d: partitions were added after it was written, or a writer used another partitioner than the Java client's murmur2; %s",
			key, r.Partition, r.Offset, c.meta.partitions, want, partitionsAdvice)}
	}
	return nil
}

// checkPolicy accepts "compact", and "compact,delete" only when nothing is
// deleted by time or size (retention.ms and retention.bytes both -1): with a
// finite retention, a key not rewritten within it disappears, which a state
// cache (a persisted epoch counter written once a day, say) cannot allow.
func checkPolicy(topic string, cfgs map[string]string) error {
	policy := cfgs["cleanup.policy"]
	var compact, del bool
	for _, p := range strings.Split(policy, ",") {
		switch strings.TrimSpace(p) {
		case "compact":
			compact = true
		case "delete":
			del = true
		}
	}
	if !compact {
		return &TopicPolicyError{Topic: topic, Policy: policy, Reason: "kafka_state needs a compacted topic (cleanup.policy=compact), or old values are deleted with their segments; use another topic or alter this one with kafka-configs --alter --add-config cleanup.policy=compact"}
	}
	if del {
		for _, k := range []string{"retention.ms", "retention.bytes"} {
			if v, ok := cfgs[k]; ok && v != "-1" {
				return &TopicPolicyError{Topic: topic, Policy: policy, Reason: fmt.Sprintf("delete with %s=%s removes keys not rewritten within the retention; set cleanup.policy=compact, or %s=-1", k, v, k)}
			}
		}
	}
	return nil
}

// recordBatchSize is the size of a record batch holding the one record,
// uncompressed, as the broker measures it against max.message.bytes: the 61
// byte batch header and the record (attributes, timestamp and offset deltas,
// key, value, no headers), with its varint length prefix.
func recordBatchSize(key, value []byte) int {
	body := 1 + 1 + 1 + varlen(int64(len(key))) + len(key) + 1 // attrs, ts delta 0, offset delta 0, key, header count 0
	if value == nil {
		body += varlen(-1)
	} else {
		body += varlen(int64(len(value))) + len(value)
	}
	return 61 + varlen(int64(body)) + body
}

// varlen is the length of v as a zigzag varint.
func varlen(v int64) int {
	u := uint64((v << 1) ^ (v >> 63))
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// reservedPrefix starts the keys the cache writes for itself (the read
// barrier); they are never returned by Get. Writes refuse a key that holds
// it anywhere, which also keeps fenceSep (which starts with it) out of keys.
var reservedPrefix = []byte("\x00kafka_state/")

func isReserved(key []byte) bool { return bytes.HasPrefix(key, reservedPrefix) }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (c *Cache) logInfof(format string, args ...any) {
	if c.log != nil {
		c.log.Infof(format, args...)
	}
}

func (c *Cache) logErrorf(format string, args ...any) {
	if c.log != nil {
		c.log.Errorf(format, args...)
	}
}

func (c *Cache) logDebugf(format string, args ...any) {
	if c.log != nil {
		c.log.Debugf(format, args...)
	}
}

func (c *Cache) logWarnf(format string, args ...any) {
	if c.log != nil {
		c.log.Warnf(format, args...)
	}
}
