package output

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	// The lint rule below uses parse_duration, a method of the pure bundle.
	// Benthos parses a spec's lint rule when the spec is registered, against
	// the bloblang methods registered so far, so the bundle must initialise
	// before this package does.
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// Name is the component name in configs.
const Name = "kafka_eos"

// Field names of the kafka_eos output (the shared connection fields live in
// internal/kafkaconf).
const (
	keoFieldTopic             = "topic"
	keoFieldKey               = "key"
	keoFieldPartitioner       = "partitioner"
	keoFieldPartition         = "partition"
	keoFieldMetadata          = "metadata"
	keoFieldCompression       = "compression"
	keoFieldMaxMessageBytes   = "max_message_bytes"
	keoFieldTransactionalID   = "transactional_id"
	keoFieldPoolSize          = "producer_pool_size"
	keoFieldTxnTimeout        = "transaction_timeout"
	keoFieldEpoch             = "epoch"
	keoFieldEpochMaxRecords   = "max_records"
	keoFieldEpochMaxBytes     = "max_bytes"
	keoFieldEpochInterval     = "interval"
	keoFieldStateCache        = "state_cache"
	keoFieldMaxBufferedBytes  = "max_buffered_bytes"
	keoFieldMaxInFlight       = "max_in_flight"
	keoFieldBatching          = "batching"
	keoFieldRecoveryOverride  = "recovery_override"
	keoFieldCommitBudget      = "commit_timeout"
	keoFieldConsumerGroup     = "consumer_group"
	keoFieldInputFormat       = "input_format"
	keoFieldArrowTimestamps   = "arrow_timestamps"
	keoFieldUnknownTopicGrace = "unknown_topic_grace_period"
	keoInputFormatAuto        = "auto"
	keoInputFormatMessage     = "message"
	keoInputFormatArrow       = "arrow"
	keoFieldDedupe            = "dedupe"
	keoFieldDedupeKey         = "key"
	keoFieldDedupePosition    = "position"
	keoFieldDedupeMaxKeys     = "max_keys"
	keoFieldMirror            = "mirror"
	keoFieldMirrorPositions   = "positions_topic"
	keoFieldMirrorPrefix      = "topic_prefix"
	keoFieldMirrorTopics      = "topics"
	keoFieldMirrorCreate      = "create_topics"
	keoPartitionerMurmur2     = "murmur2"
	keoPartitionerMurmur2Hash = "murmur2_hash" // Redpanda Connect's name for murmur2
	keoPartitionerManual      = "manual"
	keoPartitionerRoundRobin  = "round_robin"
	keoOverrideNone           = "none"
	keoOverrideForceCommitted = "force_committed"
	keoOverrideForceAborted   = "force_aborted"
)

// Defaults, named once so the docs and the code agree.
const (
	defaultPoolSize         = 2
	defaultTxnTimeout       = "60s"
	defaultEpochInterval    = "100ms"
	defaultEpochMaxRecords  = 100000
	defaultEpochMaxBytes    = 32 << 20
	defaultMaxBufferedBytes = 256 << 20
	defaultMaxMessageBytes  = 1 << 20
	defaultMaxInFlight      = 64
	defaultCommitBudget     = "10s"
	defaultDedupeMaxKeys    = 10000
)

// lintRule is the one cross-field rule of the spec (Benthos takes one bloblang
// rule per spec): the bounds of the numeric and duration fields, the timing
// check of the brief, the pool minimum, and the manual partitioner's partition
// field. The timing check mirrors txnstate.CheckTiming with a margin of 10% of
// the timeout and runs only once each duration in it is valid on its own, so
// that every error names the condition that failed. A value that is no
// duration parses as 0 here and is left to the field's own error.
const lintRule = `
let timeoutStr = this.transaction_timeout | "60s"
let intervalStr = this.epoch.interval | "100ms"
let budgetStr = this.commit_timeout | "10s"
let timeout = $timeoutStr.parse_duration().catch(-1)
let interval = $intervalStr.parse_duration().catch(-1)
let budget = $budgetStr.parse_duration().catch(-1)
let pool = this.producer_pool_size | 2
let part = this.partitioner | "murmur2"
let format = this.input_format | "auto"
# Byte sizes may be strings ("1MiB"): their bounds are checked at construction.
let maxMsgRaw = this.max_message_bytes | 1048576
let maxMsg = $maxMsgRaw.int64().catch(1048576)
let maxBufRaw = this.max_buffered_bytes | 268435456
let maxBuf = $maxBufRaw.int64().catch(268435456)
let epochBytesRaw = this.epoch.max_bytes | 0
let epochBytes = $epochBytesRaw.int64().catch(0)
root = [
  if $timeout == 0 || ($timeout < 0 && $timeout != -1) {
    "field transaction_timeout: must be positive, got %v".format($timeoutStr)
  },
  if $interval == 0 || ($interval < 0 && $interval != -1) {
    "field epoch.interval: must be positive, got %v".format($intervalStr)
  },
  if $budget == 0 || ($budget < 0 && $budget != -1) {
    "field commit_timeout: must be positive (how long one epoch commit may take), got %v".format($budgetStr)
  },
  if $timeout > 0 && $interval > 0 && $budget > 0 && $interval + 2 * $budget >= $timeout - $timeout / 10 {
    "fields epoch.interval, commit_timeout and transaction_timeout: epoch.interval (%v) plus twice commit_timeout (%v) must stay below transaction_timeout (%v) minus a 10%% margin: raise transaction_timeout or lower the others".format($intervalStr, $budgetStr, $timeoutStr)
  },
  if $maxMsg < 512 || $maxMsg > 2147483647 {
    "field max_message_bytes: %v is out of range [512, 2147483647]".format($maxMsg)
  },
  if $maxBuf < $maxMsg {
    "field max_buffered_bytes: %v is below max_message_bytes (%v)".format($maxBuf, $maxMsg)
  },
  if (this.max_in_flight | 64) < 1 {
    "field max_in_flight: must be at least 1, got %v".format(this.max_in_flight | 64)
  },
  if (this.epoch.max_records | 0) < 0 {
    "field epoch.max_records: must be 0 (no limit) or positive, got %v".format(this.epoch.max_records)
  },
  if $epochBytes < 0 {
    "field epoch.max_bytes: must be 0 (no limit) or positive, got %v".format($epochBytes)
  },
  if this.timestamp_ms != null || this.timestamp != null {
    "field timestamp_ms: not supported (Redpanda Connect's kafka_franz sets record timestamps from it): records get the produce time, because franz-go measures its delivery timeout from the record's timestamp; remove it (Arrow rows can keep their source timestamps with arrow_timestamps)"
  },
  if $pool < 2 {
    "field producer_pool_size: must be at least 2 (epoch N+1 produces while N commits), got %v".format($pool)
  },
  if $part == "manual" && (this.partition | "") == "" && $format != "arrow" {
    "field partition: required when partitioner is manual"
  },
  if $format == "arrow" && (this.partition | "") != "" {
    "field partition: not used with input_format arrow: under partitioner manual each row keeps its own partition"
  },
  if $format == "arrow" && (this.key | "") != "" {
    "field key: not used with input_format arrow: each row keeps its own key"
  },
  if $format == "arrow" && ((this.metadata.include_prefixes | []).length() > 0 || (this.metadata.include_patterns | []).length() > 0) {
    "field metadata: not used with input_format arrow: each row keeps its own headers"
  },
  if $part != "manual" && (this.partition | "") != "" {
    "field partition: only used when partitioner is manual"
  },
  if this.dedupe != null && (this.consumer_group | "") != "" {
    "field dedupe: dedupe mode and consumer_group (Kafka-to-Kafka mode) are mutually exclusive"
  },
  if this.dedupe != null && $format == "arrow" {
    "field dedupe: not with input_format arrow: an Arrow message is a whole source batch whose boundaries can differ on a replay, and dedupe keeps or drops whole messages"
  },
  if this.dedupe != null && (this.state_cache | "") == "" {
    "field dedupe: dedupe mode needs state_cache (the committed positions live there)"
  },
  if this.mirror == null && (this.topic | "") == "" {
    "field topic: required (except in mirror mode)"
  },
  if this.mirror != null && (this.consumer_group | "") == "" {
    "field mirror: mirror mode needs consumer_group: the consumer_group of the kafka_native input that reads the source cluster"
  },
  if this.mirror != null && this.dedupe != null {
    "field mirror: mirror mode and dedupe mode are mutually exclusive"
  },
  if this.mirror != null && (this.topic | "") != "" {
    "field topic: not used in mirror mode: each record goes to its source topic, renamed by mirror.topic_prefix and mirror.topics"
  },
  if this.mirror != null && (this.key | "") != "" {
    "field key: not used in mirror mode: each record keeps its key"
  },
  if this.mirror != null && (this.partition | "") != "" {
    "field partition: not used in mirror mode: each record keeps its partition"
  },
  if this.mirror != null && !["murmur2", "manual"].contains($part) {
    "field partitioner: not used in mirror mode: each record keeps its partition"
  },
  if this.mirror != null && ((this.metadata.include_prefixes | []).length() > 0 || (this.metadata.include_patterns | []).length() > 0) {
    "field metadata: not used in mirror mode: each record keeps its headers"
  },
  if this.mirror != null && (this.mirror.topics | {}).values().unique().length() != (this.mirror.topics | {}).values().length() {
    "field mirror.topics: two source topics map to one target topic: a target partition would mix two source partitions"
  },
  if this.dedupe != null && (this.max_in_flight | 64) != 1 {
    "field dedupe: dedupe mode needs max_in_flight: 1 (batches in flight together reach the output in any order, and a position below one already written counts as a replay), got %v".format(this.max_in_flight | 64)
  },
].filter(v -> v != null)
`

// Spec is the kafka_eos config spec; tests and the docs generator reuse it.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Writes to Kafka in transactions that commit exactly once: every epoch (one or more whole batches) is one Kafka transaction, recovered after a crash from a durable state cache.").
		Description(`
Records are grouped into epochs. An epoch is one Kafka transaction holding one or
more whole Benthos batches (a batch is never split across epochs); it closes when
it reaches `+"`epoch.max_records`"+` or `+"`epoch.max_bytes`"+`, after
`+"`epoch.interval`"+`, or as soon as no earlier epoch is still committing (group
commit: the batches that arrive while one epoch commits gather in the next one,
which closes the moment its predecessor is settled). Epochs commit in order; a
batch is acknowledged only once its epoch has committed. If an epoch fails before
its commit, it and every later epoch are aborted and their batches nacked; an
epoch whose commit outcome is unknown is never nacked nor aborted blindly: the
output retries the commit with the same producer id and epoch, asks the
coordinator, and if nothing is certain stops with an error (the next start
resolves it).

Transactions run on a pool of `+"`producer_pool_size`"+` transactional producers,
the slots `+"`<transactional_id>-<n>`"+`. Each slot is initialised once and reused,
so the epoch boundary costs a flush and an EndTxn while the next epoch already
produces on the next slot. One running instance per `+"`transactional_id`"+`: a second
instance with the same id fences the first, which stops with an error naming the id.

A record's timestamp is the produce time: the time the output hands the record's
batch to its producer, read once per batch (mirrored records, and Arrow rows with
`+"`arrow_timestamps`"+`, keep their source timestamp).

### Delivery guarantees

This output on its own (plain mode) makes every epoch atomic for consumers with
`+"`isolation_level: read_committed`"+`, and acknowledges a batch only after its
epoch committed. Across a crash it is at-least-once: an epoch whose commit was in
doubt is aborted at restart (unless Kafka says it committed) and the input
replays its batches. End-to-end exactly-once needs the Kafka-to-Kafka or dedupe
modes (source offsets or dedupe positions committed in the same transaction).

Kafka-to-Kafka mode (`+"`consumer_group`"+` set to the group of a `+"`kafka_native`"+` input
of the same stream) is exactly-once end to end: each epoch commits, inside its
transaction, the group's offsets for the source ranges it holds (per partition the
end of the contiguous run of acknowledged ranges, so batches that arrive out of
order or are filtered out never make an offset skip a range or move backwards),
so records and offsets commit or abort together; ranges acknowledged without
reaching the output are committed with the next epoch, or one of offsets only.
The input tells the output where it starts reading every partition (the committed
offset, or the start that start_offset, start_offsets, start_timestamp or
reset_offset resolved) before it delivers any batch of it, so every epoch carries
its offsets from a partition's first record on, whether or not the group has
committed anything. At start the input
waits for the output's recovery before it reads the committed offsets; an epoch
left in doubt and still open is resumed (committed) under transaction version 2;
under version 0 it is aborted and its records are copied again from the group's
offsets (there the producer epoch does not move between a slot's transactions, so
the open transaction may be a later one of a previous owner still running). Every member of the
group should read with `+"`isolation_level: read_committed`"+`. A batch that reaches the output
ahead of its partition's contiguous run (several pipeline threads or batches in
flight reorder them) waits until the batch before it joined an epoch, was
handed over or committed, so that an epoch never commits records past its
offsets. A waiting batch does not count against `+"`max_in_flight`"+`: in this mode
Benthos may hand the output up to 8 batches more than `+"`max_in_flight`"+` at once,
of which `+"`max_in_flight`"+` write at a time, so the batch before it still reaches
the output (several pipeline threads above `+"`max_in_flight`"+` reorder batches, and a
waiting batch holding the only call of `+"`max_in_flight: 1`"+` kept its predecessor
out). After 5s it is nacked with a warning (after 1s once every call Benthos may
make at once waits, and 100ms then if the batch before it is one this output
nacked: Benthos may hold the predecessor behind it, e.g. a batch nacked by an
aborted epoch and queued for replay; never while another call has not joined
an epoch yet, e.g. waits for a turn to write: it may hold the predecessor) and
Benthos replays it after its predecessor. A batch merging input batches (output `+"`batching`"+`) writes those
that continue their partition's run at once and nacks only the others, and
writes its records in source order per partition, so per-partition order
holds. With `+"`group_membership`"+` (several processes in one group, each with its
own `+"`transactional_id`"+`), offsets follow KIP-447: a partition's offsets are committed
only while this member owns it under the assignment its records were read in, with
the group generation and member id of commit time (a partition kept across a
rebalance is committed under the new generation; should a rebalance move the
generation between the plan and the commit while the member keeps the partition,
the offsets are sent again under the new one). When partitions are revoked or lost,
the input's rebalance callback waits (up to its `+"`revoke_ack_timeout`"+`) until the
epochs holding their records finished: those already committing commit under the
generation still current, the others abort; batches of those partitions that reach
the output afterwards are acknowledged without being written (the input ignores
those acknowledgements, and the partition's next owner reads them again from the
committed offset, which the input reads with require_stable, waiting for pending
transactional commits).

Dedupe mode (`+"`dedupe`"+` set) is exactly-once end to end for inputs that replay
unacknowledged messages in their order (a topic read without a consumer group, a
file from its start, a generated sequence): each message's key and position
(`+"`dedupe.key`"+`, `+"`dedupe.position`"+`) are read; each epoch stores the highest
position per key it wrote with its recovery identity at PREPARE, so the positions
commit or not with its transaction, and after the commit they are the committed
positions (also kept in `+"`<transactional_id>/positions`"+`). A message at or below its
key's committed position, or at or below a position already in an epoch still in
flight, is acknowledged and dropped. An aborted epoch's positions are rolled back;
a batch that arrives before their replay (Benthos replays nacked batches from a
retry list, possibly after batches already read) is nacked so that it is replayed
after them. At start an in-doubt epoch still open is resumed (committed) and its
positions applied under transaction version 2; under version 0 it is aborted and the
input replays it. Positions must increase strictly per key in the order messages
reach the output: one pipeline thread, `+"`max_in_flight: 1`"+` (checked), and no
processor that reorders a key's messages. Dedupe keeps or drops whole messages, so
it does not go with Arrow messages (a whole source batch each, whose boundaries can
differ on a replay): `+"`input_format: arrow`"+` is rejected, and under `+"`auto`"+` the
input must not send them.

### Arrow messages

A message holding an Arrow IPC stream in the Kafka record schema (a `+"`kafka_native`"+`
input with `+"`format: arrow`"+` writes one per fetched batch; see `+"`input_format`"+`) is
written as one record per row, all in the epoch of the message's batch: an Arrow
message is atomic like a batch, and the epoch and recovery semantics are
unchanged. Each record gets the row's key (null stays null), value (a null value
is a tombstone, an empty one stays empty), headers (in order, duplicates and null
values kept) and, with `+"`arrow_timestamps: true`"+`, timestamp. The topic is
`+"`topic`"+` evaluated on the message (`+"`${! metadata(\"kafka_topic\") }`"+` is the source
topic). Under `+"`partitioner: manual`"+` each row goes to its own partition (the source
partition: the target needs at least as many partitions); otherwise the
partitioner chooses, by key. Keys and values are produced straight from the
message's bytes, without a copy per record. A body that does not decode (not
Arrow, damaged, another schema under `+"`input_format: arrow`"+`) cannot be written:
the message fails with an error naming the column or byte at fault (see Messages
that cannot be written). In Kafka-to-Kafka mode the message's span (the
source range of the whole Arrow batch, markers included) is committed with the
epoch, as for a batch of plain messages.

### State cache

`+"`state_cache`"+` names a cache resource that holds, per slot, the recovery
identity of the newest epoch that reached its commit: the transactional id,
producer id and epoch, transaction version and, per partition written, the first
offset. At start the output reads it, resolves any epoch left in doubt from the
broker's state and an exact Fetch probe, and only then initialises its producers.
Benthos core's caches are in memory or unsynced files: with them a restart
(memory) or a crash of the machine (file) loses the identity, and an epoch left
in doubt is never resumed. When the process starts again with the same
`+"`transactional_id`"+`, its producers' InitProducerID aborts the epoch if it is still
open (its batches were never acknowledged: the input replays them); only an
epoch whose transactional id no process initialises again (the restart uses
another `+"`transactional_id`"+`) is left to `+"`transaction_timeout`"+`.
Use the project's `+"`kafka_state`"+` cache for a durable identity.

### Messages that cannot be written

A message whose topic, key or partition cannot be computed (or is negative),
larger than `+"`max_message_bytes`"+`, whose dedupe key or position cannot be read,
or whose Arrow body does not decode can never be written as it is. It is never
acknowledged: it fails alone, with an error that begins with
`+"`kafka_eos: message cannot be written`"+` and names its source (topic, partition
and offset from the `+"`kafka_*`"+` metadata) and the field. Its batch-mates are
written and acknowledged once committed; in Kafka-to-Kafka mode the group's offset of
its partition is held at it (with where the copy reached past it in the offset's
metadata) until the input hands a position past it over, once a dead-letter route
took it: after a crash before that, the next owner reads it again and fails it again
for the route (which may then get it twice), and acknowledges the records written
past it without writing them again (a source record a processor made several
messages of is held whole: its other messages fail with it, for the route, so that
none of them is written twice); in dedupe mode the later messages of its key are held
back (they fail with an error that begins with `+"`kafka_eos: not written: held back`"+`
and are replayed). A record the broker or the client refuses for good (larger than the
topic's `+"`max.message.bytes`"+`, invalid for the topic, a partition the topic does
not have) aborts its epoch the first time; its message fails in the same way, and
its replay fails before anything is produced.

Route such messages away with a `+"`fallback`"+` output whose second output sends the
messages whose `+"`@fallback_error`"+` begins with that text to a dead-letter output
and rejects the others (they are replayed); see
`+"`config/examples/kafka_eos_dead_letter.yaml`"+`. A message reported this way that
comes back to the output (nacked and replayed: no route took it) stops the
pipeline with an error naming it: replaying it cannot help. A plain `+"`fallback`"+` to
a dead-letter output would also divert the messages of an aborted epoch, which
are fine to replay. Under output `+"`batching`"+` Benthos reports errors per input batch:
the dead-letter output receives the whole input batch of such a message (the others
are written to the topic as well). A route that rejects those others sends them back
written: their replay is acknowledged without writing them again (in dedupe mode
their positions drop it). In Kafka-to-Kafka mode output `+"`batching`"+` needs
`+"`pipeline.threads: 1`"+`: with several threads the batcher combines input batches out of
order, and output batches that wait for each other's ranges are nacked again and again.

### Errors

A record for a topic that does not exist aborts its epoch; its batch is nacked
with an error naming the topic, partition and size.
Authentication and authorization failures, and a fence by another producer, stop
the pipeline (connect-eos exits non-zero); so does a state cache write the broker
refuses that way (a missing Write ACL on the `+"`kafka_state`"+` topic), which is never
retried. Our own transaction timing out is not a fence: the epoch is aborted, nacked
and retried on a fresh producer.

### Metrics

`+"`kafka_eos_epochs_committed`"+`, `+"`kafka_eos_epochs_aborted`"+`,
`+"`kafka_eos_epoch_commit_latency_ns`"+`, `+"`kafka_eos_epoch_boundary_stall_ns`"+` (time a
batch waited for a producer slot before it could be produced; the `+"`prometheus`"+` exporter
serves timings in seconds, as `+"`kafka_eos_epoch_commit_latency_seconds`"+` and
`+"`kafka_eos_epoch_boundary_stall_seconds`"+`), `+"`kafka_eos_last_commit_timestamp_seconds`"+`
(a gauge: the Unix time of the last committed epoch, the output's start before the first; alert
on `+"`time() - kafka_eos_last_commit_timestamp_seconds`"+`),
`+"`kafka_eos_records_produced`"+`, `+"`kafka_eos_bytes_produced`"+`,
`+"`kafka_eos_buffered_bytes`"+`, `+"`kafka_eos_in_doubt_resolved`"+` (label `+"`outcome`"+`:
resumed, found_committed, found_aborted, aborted, forced_committed,
forced_aborted) and `+"`kafka_eos_fenced`"+`; in dedupe mode `+"`kafka_eos_dedupe_dropped`"+` (messages acknowledged
and dropped as replays) and `+"`kafka_eos_dedupe_nacked_out_of_order`"+` (batches nacked because
they arrived before the replay of an aborted epoch's positions); in Kafka-to-Kafka mode
`+"`kafka_eos_k2k_nacked_out_of_order`"+` (batches nacked because they reached the output ahead
of their partition's run) and `+"`kafka_eos_k2k_rebalance`"+` (label `+"`event`"+`: dropped_batch, a
batch of a partition this member gave up acknowledged unwritten; revoked_epoch, an epoch
aborted because it held one; rejoining_epoch, an epoch aborted because the member was
rejoining its group when it was to commit its offsets; restamped, offsets sent again under a newer generation;
revoke_wait_timeout, a revoke that went on before the epochs holding its partitions
finished). `+"`kafka_eos_epochs_aborted`"+`, `+"`kafka_eos_fenced`"+` and
`+"`kafka_eos_in_doubt_resolved`"+` (every outcome) exist from the start at 0, so that an alert
on their increase sees the first one.
`).
		Fields(kafkaconf.Fields()...).
		Fields(
			service.NewInterpolatedStringField(keoFieldTopic).
				Description("The topic to write to. Topics must exist: transactional writes to an auto-created topic are not retried. Required, except in mirror mode (`mirror`), where each record goes to its renamed source topic.").
				Optional(),
			service.NewInterpolatedStringField(keoFieldKey).
				Description("The record key. Unset means a null key.").
				Optional(),
			kafkaconf.EnumField(keoFieldPartitioner, keoPartitionerMurmur2, keoPartitionerManual, keoPartitionerRoundRobin, keoPartitionerMurmur2Hash).
				Description("How records are assigned partitions. `murmur2` (the default) is the Java client's default: keyed records go to murmur2(key) mod partitions, unkeyed records are spread in sticky batches. `murmur2_hash` (Redpanda Connect's name) is the same. `manual` uses `partition`.").
				Default(keoPartitionerMurmur2),
			service.NewInterpolatedStringField(keoFieldPartition).
				Description("The partition, with `partitioner: manual`.").
				Optional(),
			service.NewMetadataFilterField(keoFieldMetadata).
				Description("Which metadata keys are written as record headers. A list value is written as one header per element, in order (`kafka_native` reads a header name repeated in one record as such a list). The default writes none.").
				Optional(),
			kafkaconf.EnumField(keoFieldCompression, kafkaconf.CompressionNames...).
				Description("The compression codec of produced batches. Default `snappy`, chosen by measurement (docs/benchmarks.md, compression): on JSON order events snappy stores a record in about a third of the bytes (35 % at 100 B, 27 % at 1 KiB) for the least CPU of the codecs (3 % more CPU per record than `none` at 100 B, 60 % more at 1 KiB); `lz4` stores as much for more CPU; `zstd` and `gzip` store it in a quarter (100 B) to a fifth (1 KiB) of the bytes for 1.3 to 2.5 times snappy's CPU. `none` suits values that do not compress (encrypted or already compressed).").
				Default("snappy").
				Advanced(),
			kafkaconf.BytesField(keoFieldMaxMessageBytes).
				Description("The largest record batch sent to a broker, in bytes (the producer's max.request.size per batch). Default 1 MiB, the broker's default message.max.bytes; at least 512.").
				Default(defaultMaxMessageBytes).
				Advanced(),
			service.NewStringField(keoFieldTransactionalID).
				Description("The transactional id prefix: slots use `<transactional_id>-<n>`. Unique per running instance: another deployment must not use this id, nor `<transactional_id>-<n>`."),
			service.NewIntField(keoFieldPoolSize).
				Description("The number of transactional producers (slots). At least 2: epoch N+1 produces while epoch N commits. It may be lowered between runs: every start fences the slots beyond the pool that a larger pool used (an InitProducerID each), so that a previous instance still running commits nothing there. Default 2.").
				Default(defaultPoolSize).
				Advanced(),
			service.NewDurationField(keoFieldTxnTimeout).
				Description("The transaction timeout sent to the coordinator (transaction.timeout.ms), which aborts a transaction that long after it began, however busy it is. At most the broker's transaction.max.timeout.ms (15m by default). Default 60s.").
				Default(defaultTxnTimeout).
				Advanced(),
			service.NewDurationField(keoFieldCommitBudget).
				Description("How long each step of an epoch commit may take before it counts as failed (or, for EndTxn, in doubt): the state cache write, the positions records of mirror mode, EndTxn. The flush of the epoch's records is bounded by the epoch's deadline instead (`transaction_timeout` less a margin), since it may carry up to `max_buffered_bytes`. Also how long a start (recovery of what the previous run left in doubt) may go on once the stream stops as it starts. Default 10s.").
				Default(defaultCommitBudget).
				Advanced(),
			service.NewObjectField(keoFieldEpoch,
				service.NewIntField(keoFieldEpochMaxRecords).
					Description("Close the epoch once it holds this many records (checked after each whole batch). 0 means no limit. Default 100000.").
					Default(defaultEpochMaxRecords),
				kafkaconf.BytesField(keoFieldEpoch+"."+keoFieldEpochMaxBytes).
					Description("Close the epoch once it holds this many bytes of keys and values (checked after each whole batch). 0 means no limit. Default 32 MiB.").
					Default(defaultEpochMaxBytes),
				service.NewDurationField(keoFieldEpochInterval).
					Description("Close the epoch this long after its first batch. Must be well below `transaction_timeout`. Default 100ms (Kafka Streams' exactly-once commit interval).").
					Default(defaultEpochInterval),
			).Description("When an epoch (one Kafka transaction) closes."),
			service.NewStringField(keoFieldStateCache).
				Description("The name of a cache resource holding the recovery identity of each slot's newest epoch. Keys used: `<transactional_id>/slots` and `<transactional_id>/slot/<n>`, and in dedupe mode `<transactional_id>/positions`."),
			kafkaconf.BytesField(keoFieldMaxBufferedBytes).
				Description("The only bound on records buffered in the producers (the record-count cap of franz-go is disabled): writes block once this many bytes wait to be acknowledged. Shared evenly by the `producer_pool_size` slots (each gets at least `max_message_bytes`). Default 256 MiB. It bounds what the producers hold, not the process: the batches in flight (`max_in_flight`) stay in memory until their epoch commits, and Go's garbage collector lets the heap grow to about twice the live data unless `GOMEMLIMIT` is set (docs/benchmarks.md, saturation row).").
				Default(defaultMaxBufferedBytes).
				Advanced(),
			service.NewIntField(keoFieldMaxInFlight).
				Description("The maximum number of batches in flight across epochs; when that many wait, the open epoch closes. A batch is held until its epoch commits, so this caps both the size of an epoch and the memory of the output: about `max_in_flight` x the bytes of a batch (plus a few hundred bytes per record). In Kafka-to-Kafka mode (`consumer_group`, not `mirror`) Benthos may hand the output up to 8 batches more, which wait there for a turn to write or for the batch before them in their partition: count them in the memory too. With small batches (Benthos inputs that emit one message per batch) raise it or set `batching`, or epochs stay tiny. Default 64 (measured in docs/benchmarks.md, \"Long epochs and max_in_flight\": at 100 B records 256 read 70 to 74 % more records per second than 64, at 1 KiB nothing, for about 2.5 times the peak memory).").
				Default(defaultMaxInFlight),
			kafkaconf.EnumField(keoFieldRecoveryOverride, keoOverrideNone, keoOverrideForceCommitted, keoOverrideForceAborted).
				Description("For operators only: how to decide an in-doubt epoch that neither the broker's transaction state nor the Fetch probe identifies (its records were deleted or compacted away). `none` (the default) refuses to start.").
				Default(keoOverrideNone).
				Advanced(),
			service.NewStringField(keoFieldConsumerGroup).
				Description("Kafka-to-Kafka mode: the consumer group whose offsets this output commits inside its transactions. "+
					"Set it to the `consumer_group` of a `kafka_native` input in the same process (the same stream): the input then never commits "+
					"that group itself, waits for this output's start-up recovery before it reads the committed offsets, and every epoch commits "+
					"the source offsets of its records (the end of the contiguous run of acknowledged ranges per partition, never backwards) atomically "+
					"with them, so that the copy is exactly-once end to end. Ranges acknowledged without reaching this output (filtered batches, "+
					"transaction markers, a bounded read's stops) are committed with the next epoch, or an epoch of offsets only. "+
					"Only one output per group. Without a `kafka_native` input of that group nothing calls this output's offset hand-over: "+
					"no source offsets are committed and the output behaves as in plain mode (this cannot be checked at construction, the input registers lazily).").
				Default("").
				Advanced(),
			kafkaconf.EnumField(keoFieldInputFormat, keoInputFormatAuto, keoInputFormatMessage, keoInputFormatArrow).
				Description("Which messages are Arrow IPC streams whose rows are written as records (see Arrow messages). "+
					"`auto` (the default): a message that a `kafka_native` input of this stream wrote with `format: arrow` is written as its rows "+
					"(the input marks the message itself, in a way no record content can); every other message is one record whose value is its body, "+
					"whatever the body looks like: a value that a producer of the input topic shaped as an Arrow stream is copied as bytes, never unpacked. "+
					"A marked message whose body no longer decodes (a processor replaced it) cannot be written (see Messages that cannot be written). "+
					"`message`: every message is one record. `arrow`: every message must be such a stream, whoever wrote it (the operator's choice, "+
					"for a topic of stored Arrow batches); `key`, `metadata` and `partition` are then rejected, since the rows carry their own.").
				Default(keoInputFormatAuto),
			service.NewBoolField(keoFieldArrowTimestamps).
				Description("Records written from Arrow rows keep the row's timestamp (the source record's, as a mirror does) instead of the produce time. "+
					"franz-go measures its record delivery timeout from the record's timestamp, so with this set (and `input_format` not `message`) the client's delivery timeout is off "+
					"and records are bounded by the epoch's deadline instead (the commit aborts an epoch whose flush outlives `transaction_timeout` minus 10%). Default false: the produce time, as for plain messages.").
				Default(false).
				Advanced(),
			service.NewObjectField(keoFieldDedupe,
				service.NewInterpolatedStringField(keoFieldDedupeKey).
					Description("The dedupe key of a message: positions are compared per key (e.g. `${! metadata(\"kafka_partition\") }`)."),
				service.NewInterpolatedStringField(keoFieldDedupePosition).
					Description("The position of a message within its key, a decimal integer that increases strictly per key in the order the input delivers the messages (e.g. `${! metadata(\"kafka_offset\") }`). A message whose position does not parse as an integer fails with an error naming the message and the value (its whole batch is nacked, nothing of it is acknowledged)."),
				service.NewIntField(keoFieldDedupeMaxKeys).
					Description("The most keys whose positions are kept. The committed positions of every key are one state cache value (about the key's length plus 25 bytes per key, JSON), which must fit the cache's value limit (`kafka_state`: the topic's max.message.bytes, 1 MiB by default) and is rewritten after every epoch; the first message with a new key beyond the bound stops the pipeline with an error naming the key, this field and the value to raise it to (keys are never forgotten: a forgotten key's replays would be written again). Default 10000.").
					Default(defaultDedupeMaxKeys).
					Advanced(),
			).
				Description("Dedupe mode: exactly-once end to end for inputs that replay unacknowledged messages in order (a file read from the start, a Kafka topic without a consumer group, a sequence). Each epoch stores, with its recovery identity at PREPARE, the highest position it wrote per key; once it committed these are the committed positions. A message at or below its key's committed position, or at or below a position already written by an epoch still in flight, is acknowledged and dropped, never produced again (metric `kafka_eos_dedupe_dropped`). At start an epoch left open between PREPARE and its commit is resumed (committed) and its positions applied under transaction version 2; under version 0 it is aborted and the input replays it (there the producer epoch does not move between a slot's transactions, so the open transaction may be a later one of a previous owner still running). Needs `max_in_flight: 1` and, in the pipeline, `threads: 1`: positions are compared in the order the messages reach the output. Mutually exclusive with `consumer_group`.").
				Optional().
				Advanced(),
			service.NewObjectField(keoFieldMirror,
				service.NewStringField(keoFieldMirrorPositions).
					Description("The positions topic on this output's cluster: a compacted topic holding, per source partition and writer (`transactional_id`), the next source offset to copy, written inside each epoch's transaction. It is the only record of the copy's progress: shared by every process of the mirror (every member of `consumer_group`), never by two mirrors. Created (compacted, one partition, the broker's default replication factor) if it does not exist; an existing one must be compacted without deletion."),
				service.NewStringField(keoFieldMirrorPrefix).
					Description("Prefixed to a source topic's name to name its target topic (e.g. `us-east.`), unless `topics` names it. Default empty: the same name.").
					Default(""),
				service.NewStringMapField(keoFieldMirrorTopics).
					Description("Target topic names by source topic, for renames (`{orders: orders_copy}`); two source topics must not map to one target. Topics not listed get `topic_prefix` and their source name.").
					Default(map[string]any{}),
				service.NewBoolField(keoFieldMirrorCreate).
					Description("Create a missing target topic when a partition of it is first claimed, with as many partitions as its source topic and the configs set on the source topic (read from the source cluster with DescribeConfigs: the input's user needs it on the source topics; the target cluster's default replication factor and defaults for the rest), but not `message.timestamp.type`, the `message.timestamp.*.max.ms` bounds, `min.insync.replicas`, `unclean.leader.election.enable`, the replication throttles, nor `confluent.*` and `redpanda.*` configs. Records keep their source timestamps, so a target with a shorter `retention.ms` than its source would delete copied records. If the source's configs cannot be read the target is not created and the claim fails. Default false: a missing target topic fails the records written to it, as in the other modes (see `unknown_topic_grace_period`). Either way a target topic with fewer partitions than its source stops the pipeline with an error naming both.").
					Default(false),
			).
				Description("Mirror mode: a copy from another cluster (the `kafka_native` input of `consumer_group` reads it) to this output's cluster, exactly-once across restarts, crashes and rebalances without relying on anything on the source cluster. Each epoch writes, inside its transaction, the source positions it copied to the positions topic on this cluster; the input starts every partition from them (at start, after a restart, and for a group member at every assignment). Records keep their partition, key (null stays null), value (a tombstone stays one), headers (order and repeats kept) and timestamp; the target topic is the source topic renamed by `topic_prefix` and `topics`. `topic`, `key`, `partition`, `partitioner` and `metadata` are not used. Needs `consumer_group`; not with `dedupe`. See docs/mirror.md.").
				Optional().
				Advanced(),
			service.NewDurationField(keoFieldUnknownTopicGrace).
				Description("How long records may keep failing because their topic or partition is unknown to the brokers (each such failure aborts the epoch and the batch is replayed) before the pipeline stops (connect-eos exits 3) with an error naming the topic. It measures one outage, from the first such failure after the last committed epoch; a committed epoch ends it. The error is raised at the first failure past this period (Benthos backs off between replays, so that can be some seconds later). The same default as `kafka_native`'s. Default 30s.").
				Default("30s").
				Advanced(),
			repairHangingField(),
			service.NewBatchPolicyField(keoFieldBatching),
		).
		LintRule(lintRule).
		Example("Atomic epochs to one topic", "Every 100ms, the batches received are committed in one transaction.", `
output:
  kafka_eos:
    seed_brokers: [ localhost:9092 ]
    topic: events
    key: ${! metadata("id") }
    transactional_id: events-writer
    state_cache: eos_state
`).
		Example("Dedupe mode", "Exactly-once from a source that replays in order: a topic read without a consumer group (from its start at every start), deduplicated on the source partition and offset.", `
input:
  kafka_native:
    seed_brokers: [ localhost:9092 ]
    topics: [ orders ]
    start_offset: earliest
pipeline:
  threads: 1
output:
  kafka_eos:
    seed_brokers: [ localhost:9092 ]
    topic: orders_copy
    transactional_id: orders-copy
    state_cache: eos_state
    max_in_flight: 1
    dedupe:
      key: ${! metadata("kafka_partition") }
      position: ${! metadata("kafka_offset") }
`)
}

func init() {
	if err := service.RegisterBatchOutput(Name, Spec(), func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		o, err := newOutputFromParsed(conf, mgr)
		if err != nil {
			return nil, service.BatchPolicy{}, 0, err
		}
		return o, o.conf.batching, o.calls, nil
	}); err != nil {
		panic(err)
	}
}
