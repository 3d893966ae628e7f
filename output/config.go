package output

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
	"github.com/connect-eos/connect-eos/txnstate"
)

// config is a parsed kafka_eos block.
type config struct {
	conn            *kafkaconf.Conn
	topic           *service.InterpolatedString
	key             *service.InterpolatedString // nil: null keys
	partitioner     string
	partition       *service.InterpolatedString // manual only
	metadata        *service.MetadataFilter     // nil: no headers
	compression     string
	maxMessageBytes int
	transactionalID string
	poolSize        int
	txnTimeout      time.Duration
	commitBudget    time.Duration
	epochMaxRecords int
	epochMaxBytes   int
	epochInterval   time.Duration
	stateCache      string
	maxBuffered     int
	maxInFlight     int
	batching        service.BatchPolicy
	override        txnstate.Override
	mode            txnstate.Mode
	// group is the consumer group whose offsets the output commits
	// (Kafka-to-Kafka mode), "" in plain mode.
	group string
	// inputFormat says which messages are Arrow IPC streams whose rows are
	// written as records (keoInputFormat*).
	inputFormat     string
	arrowTimestamps bool
	// dedupe is set in dedupe mode.
	dedupe *dedupeConf
	// mirror is set in mirror mode.
	mirror *mirrorConf
	// unknownTopicGrace bounds one outage of unknown-topic failures.
	unknownTopicGrace time.Duration
	// repairHanging: close our own hanging transactions (hanging.go).
	repairHanging bool

	// topicF, keyF and partF are topic, key and partition with their fast
	// paths (fastfield.go); keyF and partF are nil when key and partition
	// are.
	topicF, keyF, partF *field
}

// dedupeConf is the dedupe block: how to read a message's key and position.
type dedupeConf struct {
	key      *service.InterpolatedString
	position *service.InterpolatedString
	maxKeys  int
}

// mirrorConf is the mirror block: where the positions live and how source
// topics map to target topics.
type mirrorConf struct {
	positionsTopic string
	prefix         string
	topics         map[string]string
	create         bool
}

// target returns the target topic of a source topic: its entry in
// mirror.topics, else the source name behind mirror.topic_prefix.
func (m *mirrorConf) target(source string) string {
	if t, ok := m.topics[source]; ok {
		return t
	}
	return m.prefix + source
}

// ErrConfig is wrapped by every configuration error; the message names the
// field.
var ErrConfig = errors.New("kafka_eos: invalid config")

func fieldErr(field string, err error) error {
	return fmt.Errorf("%w: field %s: %v", ErrConfig, field, err)
}

// timeoutMargin is kept free in the transaction timeout for clock and network
// slack (10%, as the lint rule).
func timeoutMargin(timeout time.Duration) time.Duration { return timeout / 10 }

// metadataMinAge is the least time between two metadata refreshes of a slot
// client: 250ms (franz-go's own pace for an immediate refresh that found
// errors), and at most half the timeout's margin, so that an epoch aborted at
// its deadline while a partition waits for a refresh ends before the
// coordinator's timeout does (franz-go allows no less than 10ms).
func metadataMinAge(timeout time.Duration) time.Duration {
	return max(min(250*time.Millisecond, timeoutMargin(timeout)/2), 10*time.Millisecond)
}

func configFromParsed(conf *service.ParsedConfig, mgr *service.Resources) (*config, error) {
	c := &config{mode: txnstate.Plain}
	var err error
	if c.conn, err = kafkaconf.FromParsed(conf); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if conf.Contains(keoFieldTopic) {
		if c.topic, err = conf.FieldInterpolatedString(keoFieldTopic); err != nil {
			return nil, fieldErr(keoFieldTopic, err)
		}
	}
	if conf.Contains(keoFieldKey) {
		if c.key, err = conf.FieldInterpolatedString(keoFieldKey); err != nil {
			return nil, fieldErr(keoFieldKey, err)
		}
	}
	if c.partitioner, err = conf.FieldString(keoFieldPartitioner); err != nil {
		return nil, fieldErr(keoFieldPartitioner, err)
	}
	if conf.Contains(keoFieldPartition) {
		if c.partition, err = conf.FieldInterpolatedString(keoFieldPartition); err != nil {
			return nil, fieldErr(keoFieldPartition, err)
		}
	}
	// The fields' fast paths (static, one metadata key), from their
	// expressions as written.
	raw := func(name string) string {
		s, _ := conf.FieldString(name)
		return s
	}
	if c.topic != nil {
		c.topicF = newField(c.topic, raw(keoFieldTopic))
	}
	if c.key != nil {
		c.keyF = newField(c.key, raw(keoFieldKey))
	}
	if c.partition != nil {
		c.partF = newField(c.partition, raw(keoFieldPartition))
	}
	if c.inputFormat, err = conf.FieldString(keoFieldInputFormat); err != nil {
		return nil, fieldErr(keoFieldInputFormat, err)
	}
	if c.arrowTimestamps, err = conf.FieldBool(keoFieldArrowTimestamps); err != nil {
		return nil, fieldErr(keoFieldArrowTimestamps, err)
	}
	arrowOnly := c.inputFormat == keoInputFormatArrow
	switch {
	case c.partitioner == keoPartitionerManual && c.partition == nil && !arrowOnly:
		return nil, fieldErr(keoFieldPartition, errors.New("required when partitioner is manual"))
	case c.partitioner != keoPartitionerManual && c.partition != nil:
		return nil, fieldErr(keoFieldPartition, errors.New("only used when partitioner is manual"))
	case arrowOnly && c.partition != nil:
		return nil, fieldErr(keoFieldPartition, errors.New("not used with input_format arrow: under partitioner manual each row keeps its own partition"))
	case arrowOnly && c.key != nil:
		return nil, fieldErr(keoFieldKey, errors.New("not used with input_format arrow: each row keeps its own key"))
	}
	if conf.Contains(keoFieldMetadata) {
		if c.metadata, err = conf.FieldMetadataFilter(keoFieldMetadata); err != nil {
			return nil, fieldErr(keoFieldMetadata, err)
		}
		// A filter that includes nothing (its default) writes no
		// header: not walked per message.
		empty := true
		for _, f := range []string{"include_prefixes", "include_patterns"} {
			if l, _ := conf.FieldStringList(keoFieldMetadata, f); len(l) > 0 {
				empty = false
			}
		}
		if empty {
			c.metadata = nil
		}
	}
	if arrowOnly && conf.Contains(keoFieldMetadata) {
		// The filter has defaults: it is set when it includes anything.
		for _, f := range []string{"include_prefixes", "include_patterns"} {
			if l, _ := conf.FieldStringList(keoFieldMetadata, f); len(l) > 0 {
				return nil, fieldErr(keoFieldMetadata, errors.New("not used with input_format arrow: each row keeps its own headers"))
			}
		}
		c.metadata = nil
	}
	if c.compression, err = conf.FieldString(keoFieldCompression); err != nil {
		return nil, fieldErr(keoFieldCompression, err)
	}
	var n int64
	if n, err = kafkaconf.FieldBytes(conf, keoFieldMaxMessageBytes); err != nil {
		return nil, fieldErr(keoFieldMaxMessageBytes, err)
	}
	c.maxMessageBytes = int(n)
	if c.maxMessageBytes < 512 || c.maxMessageBytes > math.MaxInt32 {
		// franz-go refuses batches capped below 512 bytes.
		return nil, fieldErr(keoFieldMaxMessageBytes, fmt.Errorf("%d is out of range [512, %d]", c.maxMessageBytes, math.MaxInt32))
	}
	if c.transactionalID, err = conf.FieldString(keoFieldTransactionalID); err != nil {
		return nil, fieldErr(keoFieldTransactionalID, err)
	}
	if c.transactionalID == "" {
		return nil, fieldErr(keoFieldTransactionalID, errors.New("must not be empty"))
	}
	if c.poolSize, err = conf.FieldInt(keoFieldPoolSize); err != nil {
		return nil, fieldErr(keoFieldPoolSize, err)
	}
	if c.poolSize < txnstate.MinPoolSize {
		return nil, fieldErr(keoFieldPoolSize, fmt.Errorf("must be at least %d, got %d", txnstate.MinPoolSize, c.poolSize))
	}
	if c.txnTimeout, err = conf.FieldDuration(keoFieldTxnTimeout); err != nil {
		return nil, fieldErr(keoFieldTxnTimeout, err)
	}
	if c.txnTimeout <= 0 {
		return nil, fieldErr(keoFieldTxnTimeout, fmt.Errorf("must be positive, got %v", c.txnTimeout))
	}
	if c.commitBudget, err = conf.FieldDuration(keoFieldCommitBudget); err != nil {
		return nil, fieldErr(keoFieldCommitBudget, err)
	}
	if c.commitBudget <= 0 {
		// A budget of zero would time out every commit at once, and an
		// EndTxn that never got a chance reads as in doubt.
		return nil, fieldErr(keoFieldCommitBudget, fmt.Errorf("must be positive (how long one epoch commit may take), got %v", c.commitBudget))
	}
	ep := conf.Namespace(keoFieldEpoch)
	if c.epochMaxRecords, err = ep.FieldInt(keoFieldEpochMaxRecords); err != nil {
		return nil, fieldErr("epoch."+keoFieldEpochMaxRecords, err)
	}
	if c.epochMaxRecords < 0 {
		return nil, fieldErr("epoch."+keoFieldEpochMaxRecords, fmt.Errorf("must be 0 (no limit) or positive, got %d", c.epochMaxRecords))
	}
	if n, err = kafkaconf.FieldBytes(ep, keoFieldEpochMaxBytes); err != nil {
		return nil, fieldErr("epoch."+keoFieldEpochMaxBytes, err)
	}
	c.epochMaxBytes = int(n)
	if c.epochMaxBytes < 0 {
		return nil, fieldErr("epoch."+keoFieldEpochMaxBytes, fmt.Errorf("must be 0 (no limit) or positive, got %d", c.epochMaxBytes))
	}
	if c.epochInterval, err = ep.FieldDuration(keoFieldEpochInterval); err != nil {
		return nil, fieldErr("epoch."+keoFieldEpochInterval, err)
	}
	if c.epochInterval <= 0 {
		return nil, fieldErr("epoch."+keoFieldEpochInterval, errors.New("must be positive"))
	}
	if err := txnstate.CheckTiming(c.epochInterval, c.commitBudget, c.txnTimeout, timeoutMargin(c.txnTimeout)); err != nil {
		return nil, fmt.Errorf("%w: fields epoch.%s, %s and %s: %v: raise %s or lower the others", ErrConfig,
			keoFieldEpochInterval, keoFieldCommitBudget, keoFieldTxnTimeout, err, keoFieldTxnTimeout)
	}
	if c.stateCache, err = conf.FieldString(keoFieldStateCache); err != nil {
		return nil, fieldErr(keoFieldStateCache, err)
	}
	if !mgr.HasCache(c.stateCache) {
		return nil, fieldErr(keoFieldStateCache, fmt.Errorf("cache resource %q not found", c.stateCache))
	}
	if n, err = kafkaconf.FieldBytes(conf, keoFieldMaxBufferedBytes); err != nil {
		return nil, fieldErr(keoFieldMaxBufferedBytes, err)
	}
	c.maxBuffered = int(n)
	if c.maxBuffered < c.maxMessageBytes {
		return nil, fieldErr(keoFieldMaxBufferedBytes, fmt.Errorf("%d is below max_message_bytes %d", c.maxBuffered, c.maxMessageBytes))
	}
	if c.maxInFlight, err = conf.FieldInt(keoFieldMaxInFlight); err != nil {
		return nil, fieldErr(keoFieldMaxInFlight, err)
	}
	if c.maxInFlight < 1 {
		return nil, fieldErr(keoFieldMaxInFlight, fmt.Errorf("must be at least 1, got %d", c.maxInFlight))
	}
	ov, err := conf.FieldString(keoFieldRecoveryOverride)
	if err != nil {
		return nil, fieldErr(keoFieldRecoveryOverride, err)
	}
	switch ov {
	case keoOverrideForceCommitted:
		c.override = txnstate.ForceCommitted
	case keoOverrideForceAborted:
		c.override = txnstate.ForceAborted
	}
	if c.unknownTopicGrace, err = conf.FieldDuration(keoFieldUnknownTopicGrace); err != nil {
		return nil, fieldErr(keoFieldUnknownTopicGrace, err)
	}
	if c.unknownTopicGrace <= 0 {
		return nil, fieldErr(keoFieldUnknownTopicGrace, fmt.Errorf("must be positive, got %v", c.unknownTopicGrace))
	}
	if c.batching, err = conf.FieldBatchPolicy(keoFieldBatching); err != nil {
		return nil, fieldErr(keoFieldBatching, err)
	}
	if c.group, err = conf.FieldString(keoFieldConsumerGroup); err != nil {
		return nil, fieldErr(keoFieldConsumerGroup, err)
	}
	if c.group != "" {
		c.mode = txnstate.KafkaToKafka
	}
	if conf.Contains(keoFieldDedupe) {
		if c.group != "" {
			return nil, fieldErr(keoFieldDedupe, errors.New("dedupe mode and consumer_group (Kafka-to-Kafka mode) are mutually exclusive"))
		}
		if c.maxInFlight != 1 {
			return nil, fieldErr(keoFieldDedupe, fmt.Errorf("dedupe mode needs max_in_flight: 1 (batches in flight together reach the output in any order), got %d", c.maxInFlight))
		}
		if c.inputFormat == keoInputFormatArrow {
			return nil, fieldErr(keoFieldDedupe, errors.New("not with input_format arrow: an Arrow message is a whole source batch whose boundaries can differ on a replay, and dedupe keeps or drops whole messages"))
		}
		dd := conf.Namespace(keoFieldDedupe)
		d := &dedupeConf{}
		if d.key, err = dd.FieldInterpolatedString(keoFieldDedupeKey); err != nil {
			return nil, fieldErr(keoFieldDedupe+"."+keoFieldDedupeKey, err)
		}
		if d.position, err = dd.FieldInterpolatedString(keoFieldDedupePosition); err != nil {
			return nil, fieldErr(keoFieldDedupe+"."+keoFieldDedupePosition, err)
		}
		if d.maxKeys, err = dd.FieldInt(keoFieldDedupeMaxKeys); err != nil {
			return nil, fieldErr(keoFieldDedupe+"."+keoFieldDedupeMaxKeys, err)
		}
		if d.maxKeys < 1 {
			return nil, fieldErr(keoFieldDedupe+"."+keoFieldDedupeMaxKeys, fmt.Errorf("must be at least 1, got %d", d.maxKeys))
		}
		c.dedupe = d
		c.mode = txnstate.Dedupe
	}
	if c.repairHanging, err = conf.FieldBool(keoFieldRepairHangs); err != nil {
		return nil, fieldErr(keoFieldRepairHangs, err)
	}
	if conf.Contains(keoFieldMirror) {
		if err := c.mirrorFromParsed(conf); err != nil {
			return nil, err
		}
	} else if c.topic == nil {
		return nil, fieldErr(keoFieldTopic, errors.New("required (except in mirror mode)"))
	}
	return c, nil
}

// mirrorFromParsed reads the mirror block: mirror mode copies every record to
// the same partition of its (renamed) source topic with its key, headers and
// timestamp, so the fields that would choose them are refused.
func (c *config) mirrorFromParsed(conf *service.ParsedConfig) error {
	switch {
	case c.group == "":
		return fieldErr(keoFieldMirror, errors.New("mirror mode needs consumer_group: the consumer_group of the kafka_native input that reads the source cluster"))
	case c.dedupe != nil:
		return fieldErr(keoFieldMirror, errors.New("mirror mode and dedupe mode are mutually exclusive"))
	case c.topic != nil:
		return fieldErr(keoFieldTopic, errors.New("not used in mirror mode: each record goes to its source topic, renamed by mirror.topic_prefix and mirror.topics"))
	case c.key != nil:
		return fieldErr(keoFieldKey, errors.New("not used in mirror mode: each record keeps its key"))
	case c.partition != nil:
		return fieldErr(keoFieldPartition, errors.New("not used in mirror mode: each record keeps its partition"))
	case c.partitioner != keoPartitionerMurmur2 && c.partitioner != keoPartitionerManual:
		return fieldErr(keoFieldPartitioner, errors.New("not used in mirror mode: each record keeps its partition"))
	}
	if c.metadata != nil {
		for _, f := range []string{"include_prefixes", "include_patterns"} {
			if l, _ := conf.FieldStringList(keoFieldMetadata, f); len(l) > 0 {
				return fieldErr(keoFieldMetadata, errors.New("not used in mirror mode: each record keeps its headers"))
			}
		}
		c.metadata = nil
	}
	mc := conf.Namespace(keoFieldMirror)
	m := &mirrorConf{}
	var err error
	if m.positionsTopic, err = mc.FieldString(keoFieldMirrorPositions); err != nil {
		return fieldErr(keoFieldMirror+"."+keoFieldMirrorPositions, err)
	}
	if m.positionsTopic == "" {
		return fieldErr(keoFieldMirror+"."+keoFieldMirrorPositions, errors.New("must not be empty"))
	}
	if m.prefix, err = mc.FieldString(keoFieldMirrorPrefix); err != nil {
		return fieldErr(keoFieldMirror+"."+keoFieldMirrorPrefix, err)
	}
	if m.topics, err = mc.FieldStringMap(keoFieldMirrorTopics); err != nil {
		return fieldErr(keoFieldMirror+"."+keoFieldMirrorTopics, err)
	}
	seen := map[string]string{}
	for src, dst := range m.topics {
		if src == "" || dst == "" {
			return fieldErr(keoFieldMirror+"."+keoFieldMirrorTopics, fmt.Errorf("empty topic name in %q: %q", src, dst))
		}
		if other, dup := seen[dst]; dup {
			return fieldErr(keoFieldMirror+"."+keoFieldMirrorTopics, fmt.Errorf("topics %q and %q both map to %q: a target partition would mix two source partitions", other, src, dst))
		}
		seen[dst] = src
	}
	if m.create, err = mc.FieldBool(keoFieldMirrorCreate); err != nil {
		return fieldErr(keoFieldMirror+"."+keoFieldMirrorCreate, err)
	}
	c.mirror = m
	c.mode = txnstate.Mirror
	c.partitioner = keoPartitionerManual
	c.arrowTimestamps = true
	return nil
}

// keepsRowTimestamps says whether records may carry a timestamp set before
// the produce call (Arrow rows with arrow_timestamps).
func (c *config) keepsRowTimestamps() bool {
	return c.mirror != nil || (c.inputFormat != keoInputFormatMessage && c.arrowTimestamps)
}

// slotBufferedBytes is one slot's share of max_buffered_bytes.
func (c *config) slotBufferedBytes() int {
	return max(c.maxBuffered/max(c.poolSize, 1), c.maxMessageBytes)
}

// producerOpts are the options of every slot client, beside the connection
// and the transactional id.
func (c *config) producerOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.TransactionTimeout(c.txnTimeout),
		// The byte budget is the only bound (brief, I7): franz-go's
		// default 50,000-record cap would stall small records long
		// before the budget.
		kgo.MaxBufferedRecords(math.MaxInt32),
		// The budget is the output's, shared evenly by its slots: each
		// slot is its own client with its own buffer, so a per-client
		// budget of max_buffered_bytes let the pool buffer pool_size
		// times as much (measured: 311 MiB buffered under a 256 MiB
		// budget, docs/benchmarks.md). At least one record of
		// max_message_bytes per slot, or a large record could never fit.
		kgo.MaxBufferedBytes(c.slotBufferedBytes()),
		kgo.ProducerBatchMaxBytes(int32(c.maxMessageBytes)),
		// Records go out as soon as a connection is free (no linger), the
		// franz-go default, stated so nobody "tunes" it into the boundary.
		kgo.ProducerLinger(0),
		// A topic that does not exist fails its records after a few
		// metadata refreshes instead of stalling the epoch until the
		// transaction times out.
		kgo.UnknownTopicRetries(3),
		// franz-go retries a batch refused NOT_LEADER_FOR_PARTITION (or
		// NOT_ENOUGH_REPLICAS, ...) with no hint of the new leader only
		// after a metadata refresh, and refreshes at most once per
		// MetadataMinAge, 5s by default: each refusal after the first
		// then cost 5s of the epoch's transaction timeout, and a few in
		// a row aborted every epoch until they ended.
		kgo.MetadataMinAge(metadataMinAge(c.txnTimeout)),
	}
	if !c.keepsRowTimestamps() {
		// A record may take as long as its epoch may live; franz-go
		// refuses less than 1s. franz-go measures this timeout from
		// Record.Timestamp, not from the produce call: a record that keeps
		// an older source timestamp (Arrow rows, arrow_timestamps) would
		// time out before it is sent. Without it the bound is the epoch's
		// own deadline, which the commit applies to the flush (and then
		// aborts the buffered records).
		opts = append(opts, kgo.RecordDeliveryTimeout(max(c.txnTimeout-timeoutMargin(c.txnTimeout), time.Second)))
	}
	switch c.partitioner {
	case keoPartitionerManual:
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	case keoPartitionerRoundRobin:
		opts = append(opts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	default:
		// The Java client's default since 3.3 (KIP-794): murmur2 of the
		// key masked to 31 bits mod partitions for keyed records
		// (KafkaHasher(murmur2), the nil hasher), sticky uniform batches
		// for unkeyed ones. StickyKeyPartitioner(nil) hashes keys the same
		// way but does not balance unkeyed records by bytes.
		opts = append(opts, kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil)))
	}
	opts = append(opts, kafkaconf.Compression(c.compression))
	return opts
}
