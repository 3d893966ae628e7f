// Package input implements the kafka_native Benthos input: a franz-go consumer
// built for exactly-once pipelines. It reads committed data only
// (read_committed) by default, can read a bounded range and end (the stop
// offsets), commits a consumer group's offsets only after Benthos acked the
// records, and stops the stream through the project's fatal-stop path on
// errors that no retry fixes. The consume semantics are specified in
// shared/design/native-input.md.
//
// Files: spec.go (the config surface), config.go (parsing into a config),
// offsets.go (start and stop resolution), reader.go (the fetch loop),
// probe.go (the idle-partition position probe), tracker.go (per-partition
// positions and the ack FIFO), commit.go (the commit step and its seam),
// group.go (group_membership), discover.go (partition discovery of unbounded
// reads), stall.go (the stall warning), errors.go (classification),
// metrics.go, progress.go, input.go (the service.BatchInput).
package input

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	// The lint rule below uses parse_duration, a method of the pure bundle,
	// which must be registered before this package's spec is (see the same
	// import in output/spec.go).
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
	"github.com/connect-eos/connect-eos/internal/retrynacks"
)

// Name is the component name the input is registered under.
const Name = "kafka_native"

// Field names of the kafka_native input. The connection fields come from
// kafkaconf.
const (
	knFieldTopics              = "topics"
	knFieldRegexpTopics        = "regexp_topics"
	knFieldDiscovery           = "partition_discovery_interval"
	knFieldConsumerGroup       = "consumer_group"
	knFieldGroupMembership     = "group_membership"
	knFieldInstanceID          = "instance_id"
	knFieldRackID              = "rack_id"
	knFieldRevokeTimeout       = "revoke_ack_timeout"
	knFieldSessionTimeout      = "session_timeout"
	knFieldRebalanceTimeout    = "rebalance_timeout"
	knFieldHeartbeatInterval   = "heartbeat_interval"
	knFieldIsolationLevel      = "isolation_level"
	knFieldStartOffset         = "start_offset"
	knFieldStartOffsets        = "start_offsets"
	knFieldStartTimestamp      = "start_timestamp_ms"
	knFieldResetOffset         = "reset_offset"
	knFieldStopOffset          = "stop_offset"
	knFieldStopOffsets         = "stop_offsets"
	knFieldStopTimestamp       = "stop_timestamp_ms"
	knFieldStopAtHWM           = "stop_at_high_watermark"
	knFieldStopHWMWaitTimeout  = "high_watermark_wait_timeout"
	knFieldTombstones          = "tombstones"
	knFieldFormat              = "format"
	knFieldMaxBatchRecords     = "max_batch_records"
	knFieldMaxBatchBytes       = "max_batch_bytes"
	knFieldMaxPartitionBytes   = "fetch_max_partition_bytes"
	knFieldMaxBufferedBytes    = "max_buffered_bytes_per_partition"
	knFieldMaxBufferedTotal    = "max_buffered_bytes"
	knFieldMaxDecompressed     = "max_decompressed_batch_bytes"
	knFieldStallWarning        = "stall_warning_interval"
	knFieldCommitPeriod        = "commit_period"
	knFieldConnectTimeout      = "connect_timeout"
	knFieldUnknownTopicGrace   = "unknown_topic_grace_period"
	knFieldIdleProbeInterval   = "idle_probe_interval"
	knFieldProgressLogInterval = "progress_log_interval"
)

// Values of the enum fields.
const (
	isolationReadCommitted   = "read_committed"
	isolationReadUncommitted = "read_uncommitted"

	offsetEarliest  = "earliest"
	offsetLatest    = "latest"
	offsetCommitted = "committed"
	offsetTimestamp = "timestamp"
	offsetSpecific  = "specific"
	offsetNone      = "none"

	tombstonesEmit = "emit"
	tombstonesDrop = "drop"
	tombstonesFail = "fail"

	formatMessage = "message"
	formatArrow   = "arrow"
)

// specLint rejects the combinations that can never work, so that
// `connect-eos lint` reports them before a broker is contacted.
const specLint = `
let start = this.start_offset | "earliest"
let stop = this.stop_offset | "none"
let reset = this.reset_offset | if $start == "committed" { "none" } else { "earliest" }
let group = this.consumer_group | ""
let member = this.group_membership | false
# A value that is no duration parses as 0 here and is left to the field's own
# error.
let session = (this.session_timeout | "45s").parse_duration().catch(0)
let rebalance = (this.rebalance_timeout | "1m").parse_duration().catch(0)
let heartbeat = (this.heartbeat_interval | "3s").parse_duration().catch(0)
let revoke = (this.revoke_ack_timeout | "10s").parse_duration().catch(0)
root = match {
  $start == "committed" && $group == "" => [ "start_offset committed needs a consumer_group: the committed offsets are the group's" ],
  $stop == "committed" && $group == "" => [ "stop_offset committed needs a consumer_group: the committed offsets are the group's" ],
  $stop == "committed" && $start == "committed" => [ "start_offset committed with stop_offset committed reads nothing: start elsewhere (earliest, a timestamp, specific offsets)" ],
  $reset == "none" && $start != "committed" && $start != "specific" => [ "reset_offset none applies only to start_offset committed or specific" ],
  $start == "specific" && (this.start_offsets | {}).keys().length() == 0 => [ "start_offset specific needs start_offsets" ],
  $stop == "specific" && (this.stop_offsets | {}).keys().length() == 0 => [ "stop_offset specific needs stop_offsets" ],
  $start == "timestamp" && (this.start_timestamp_ms | -1) < 0 => [ "start_offset timestamp needs start_timestamp_ms" ],
  $stop == "timestamp" && (this.stop_timestamp_ms | -1) < 0 => [ "stop_offset timestamp needs stop_timestamp_ms" ],
  (this.stop_at_high_watermark | false) && $stop != "latest" => [ "stop_at_high_watermark applies only to stop_offset latest" ],
  (this.group_membership | false) && $group == "" => [ "field group_membership: needs a consumer_group" ],
  (this.instance_id | "") != "" && !(this.group_membership | false) => [ "field instance_id: static membership needs group_membership: true" ],
  (this.group_membership | false) && $stop != "none" => [ "field group_membership: needs stop_offset none (a bounded read never uses membership), got %v".format($stop) ],
  (this.group_membership | false) && $start != "committed" => [ "field group_membership: needs start_offset committed, got %v".format($start) ],
  (this.fetch_max_partition_bytes | 1).int64().catch(1) < 1 || (this.fetch_max_partition_bytes | 1).int64().catch(1) > 2147483647 => [ "field fetch_max_partition_bytes: %v is out of range [1, 2147483647]".format(this.fetch_max_partition_bytes) ],
  (this.group_membership | false) && (this.topics | []).any(t -> t.contains(":")) => [ "group_membership reads whole topics: the group assigns the partitions" ],
  $member && $session > 0 && $heartbeat >= $session => [ "heartbeat_interval must be shorter than session_timeout (a third of it or less is usual): the coordinator drops a member whose heartbeats are further apart" ],
  $member && $rebalance > 0 && $revoke * 2 >= $rebalance => [ "revoke_ack_timeout must be less than half of rebalance_timeout: a revoke waits up to revoke_ack_timeout for acks and again for the output's epochs, and a member that takes longer than rebalance_timeout is dropped from the group" ],
  (this.format | "message") == "arrow" && (this.tombstones | "emit") == "fail" => [ "tombstones fail cannot apply to one record of an Arrow message (format arrow): use emit (null values are kept) or drop" ],
  _ => [],
}
`

// Spec returns the config spec of the kafka_native input. It is a function so
// that tests and the docs generator share it.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Reads records from Kafka with franz-go, committed data only by default, optionally as a bounded range that ends the stream.").
		Description(`
By default partitions are assigned directly (no group membership): every partition of every listed topic is read by this input, and a `+"`consumer_group`"+`, when set, is used only as an offset store, as Flink's KafkaSource does. Two instances with the same group then both read everything; split the partitions between them with pinned `+"`topics`"+` entries, or, for unbounded reads, set `+"`group_membership: true`"+` to let the group balance them. Bounded reads never use membership: a partition reassigned after its first owner finished would resolve its stop again, later.

### Start and stop

Start offsets are resolved with the admin API before the first fetch, so the position is known before any record arrives. `+"`committed`"+` reads the group's offsets; a partition with no committed offset, or with one outside the log, follows `+"`reset_offset`"+`, which is `+"`none`"+` unless set: the stream fails with an error naming the partition rather than silently re-reading the whole topic for a new or mistyped group. Set `+"`reset_offset: earliest`"+` to start a new group at the log start. Every partition that falls back to `+"`reset_offset`"+` is logged.

With a `+"`stop_offset`"+` the input reads a bounded range: each partition's stop is captured once, before its first fetch, and only records below it are emitted. A partition is finished when its consumer position reaches the stop, which includes transaction markers and aborted records that produce no message. Once every partition is finished and every batch was acknowledged (and, with a group, the stops were committed), the input ends and the stream exits 0. Under `+"`read_committed`"+`, `+"`stop_offset: latest`"+` is the last stable offset (the end of the committed data); `+"`stop_at_high_watermark`"+` waits, up to `+"`high_watermark_wait_timeout`"+`, for open transactions to end and stops at the high watermark instead.

### Order

Batches are emitted in offset order per partition (each batch holds records of one partition). Benthos keeps that order only if nothing downstream processes batches concurrently: set `+"`pipeline.threads: 1`"+` and an output `+"`max_in_flight: 1`"+` when per-partition order matters; several processor threads reorder batches.

### Offsets

With a `+"`consumer_group`"+`, offsets are committed after Benthos acknowledged the records (the ack is the checkpoint), every `+"`commit_period`"+` and once at the end of a bounded read. The committed offset never passes a batch that was not acknowledged (rejected batches are replayed), and a finished partition commits its stop, so the group's lag is 0 even behind a trailing transaction marker. A failed periodic commit is counted and logged and does not stop the stream; a failed final commit of a bounded read does.

### Errors

Errors that no retry fixes stop the stream with a non-zero exit: authentication and authorization failures, a topic that stays unknown after `+"`unknown_topic_grace_period`"+` (or was deleted and created again), a batch that decompresses past `+"`max_decompressed_batch_bytes`"+`, and an out-of-range offset or data loss under `+"`reset_offset: none`"+`. A broker that is unreachable at start is retried. Other fetch errors are retried and logged as warnings naming the partition and offset (at most every 10s per partition and error), and a partition that makes no progress for `+"`stall_warning_interval`"+` while records are there gets a warning with the reason.

### Metrics

Besides the metrics Benthos keeps for every input: `+"`kafka_native_position`"+`, `+"`kafka_native_committed_offset`"+` and `+"`kafka_native_lag`"+` (gauges per `+"`topic`"+` and `+"`partition`"+`; lag is the records between the position and the stop, or the end of the log last seen when unbounded), `+"`kafka_native_bytes_in`"+` (keys and values of the records fetched below the stop, counted as they arrive) and `+"`kafka_native_data_loss_records`"+` (counters per partition), `+"`kafka_native_commits_succeeded`"+`, `+"`kafka_native_commits_failed`"+` (from the start at 0), `+"`kafka_native_assigned_partitions`"+` (a gauge: the partitions this input reads), `+"`kafka_native_buffered_bytes`"+` (a gauge: the bytes handed to the pipeline and not yet acknowledged, all partitions together, counted as `+"`max_buffered_bytes`"+` counts them, as of the last check of that bound: before each poll, and every poll timeout while a batch waits for the pipeline) and, with `+"`group_membership`"+`, `+"`kafka_native_rebalances`"+` (a counter per `+"`event`"+`: `+"`assigned`"+`, `+"`revoked`"+`, `+"`lost`"+`); a partition this member gave up reports lag 0 here, its new owner the real lag, so the lag summed over the members counts each partition once; from the franz-go client: `+"`kafka_native_client_fetch_batches`"+` and `+"`kafka_native_client_fetch_compressed_bytes`"+` (per topic, as sent by the brokers, markers and aborted batches included), `+"`kafka_native_client_connects`"+`, `+"`kafka_native_client_connect_errors`"+` and `+"`kafka_native_client_throttle_ms`"+`. With a stop, the progress (offsets done of the total, rate, ETA) is logged every `+"`progress_log_interval`"+` and a summary at the end.

### Metadata

This input adds the following metadata fields to each message:

`+"```text"+`
- kafka_key
- kafka_topic
- kafka_partition
- kafka_offset
- kafka_timestamp_ms
- kafka_timestamp_unix (the same timestamp in seconds)
- kafka_tombstone_message
- All record headers
`+"```"+`

The seven keys above always hold the input's own values. Record headers are set under their own names, except a header named like one of those seven, which is kept as `+"`kafka_header_<name>`"+` (a header `+"`kafka_offset`"+` is read as `+"`kafka_header_kafka_offset`"+`): whoever can write to the topic cannot change the offset, partition, topic, key, timestamp or tombstone flag a pipeline sees (a dedupe keyed on `+"`kafka_offset`"+`, a copy partitioned by `+"`kafka_partition`"+`). A header name that appears several times in one record keeps every value: its metadata value is then a list of the values in record order (`+"`@name`"+` reads the list; a name that appears once is a string). A null key reads the same as an empty one (`+"`kafka_key`"+` is empty). A tombstone (a record with a null value) is emitted with an empty body and `+"`kafka_tombstone_message: true`"+`, unlike a record with an empty value (`+"`false`"+`).

### Arrow format

With `+"`format: arrow`"+` each message holds a whole batch of one partition as an Arrow IPC stream: one message (and one metadata map) per batch instead of per record, which is what a high-volume copy wants. The records travel exactly (null and empty keys and values apart, every header in order), so a `+"`kafka_eos`"+` output writes them back unchanged. Its metadata: `+"`kafka_topic`"+`, `+"`kafka_partition`"+`, `+"`kafka_first_offset`"+`, `+"`kafka_last_offset`"+` and `+"`kafka_record_count`"+`. The per-record keys above are not set. Raise `+"`max_batch_records`"+` (default 1024) for larger messages.
`).
		Fields(kafkaconf.Fields()...).
		Fields(
			service.NewStringListField(knFieldTopics).
				Description("Topics to read. An entry `name` reads every partition of the topic, `name:P` only partition P, `name:A-B` partitions A to B (both included); several entries (or one entry with several separated by commas) add up. The partitions of whole topics are those listed at start; an unbounded read also picks up partitions added later (see `partition_discovery_interval`). With `regexp_topics` every entry is a regular expression instead. Per-partition offsets are set in `start_offsets` and `stop_offsets`.").
				Example([]string{"orders"}).
				Example([]string{"orders:0", "orders:2-3", "payments,refunds"}),
			service.NewBoolField(knFieldRegexpTopics).
				Description("Read every topic whose whole name matches one of the `topics` entries, each a regular expression (RE2 syntax, matched against the whole name; one expression per entry, commas included; internal topics are never matched). A bounded read takes the matching topics listed at start; an unbounded one also picks up matching topics created later (see `partition_discovery_interval`). Partitions cannot be pinned. Default false.").
				Default(false),
			service.NewDurationField(knFieldDiscovery).
				Description("How often an unbounded read looks for partitions to add: partitions added to a topic read whole and, with `regexp_topics`, new matching topics (Flink's partition discovery). A partition found this way starts at the group's committed offset if it has one, else at its log start, so no record written before it was found is missed. Bounded reads never add partitions. With `group_membership` the group assigns new partitions itself and this sets how often the client refreshes its metadata. `0s` disables it. Default 5m, as Flink.").
				Default("5m").
				Advanced(),
			service.NewStringField(knFieldConsumerGroup).
				Description("The consumer group whose offsets are read for `start_offset: committed` (and `stop_offset: committed`) and to which offsets are committed after ack (except with `stop_offset: committed`, which only reads them). Empty (the default) means no group: nothing is committed, and no group is ever invented.").
				Default(""),
			service.NewStringField(knFieldInstanceID).
				Description("Static group membership (KIP-345), with `group_membership`: a member id that survives restarts. A member restarted with the same instance id within `session_timeout` gets its partitions back without a rebalance of the group; a member that stops does not leave the group (its partitions wait for it until `session_timeout`). Unique per process of the group, e.g. the pod name. Empty (the default): dynamic membership.").
				Default("").
				Advanced(),
			service.NewStringField(knFieldRackID).
				Description("The rack this process runs in: with brokers whose `replica.selector.class` is `org.apache.kafka.common.replica.RackAwareReplicaSelector` (KIP-392), fetches go to a replica in the same rack instead of the leader. Empty (the default): fetch from leaders.").
				Default("").
				Advanced(),
			service.NewBoolField(knFieldGroupMembership).
				Description("Join `consumer_group` as a member, so that several processes with the same group share the partitions of `topics` (the group balances them). Only for unbounded reads (`stop_offset: none`) starting at `start_offset: committed` from whole topics. On a revoke the input waits up to `revoke_ack_timeout` for the batches of the revoked partitions to be acknowledged, commits synchronously and lets them go; acknowledgements that arrive later are ignored (the new owner reads those records again: at-least-once, or exactly-once with a `kafka_eos` output committing this group's offsets, which then finishes the epochs holding the revoked partitions' records before the rebalance goes on and drops their later batches). A lost partition (session expired) commits nothing; one given to this member again by the session it rejoins with under a new member id starts over from the group's committed offset, as a newly assigned one does (another member may have read it meanwhile). Default false: partitions are assigned directly and the group is only an offset store.").
				Default(false),
			service.NewDurationField(knFieldRevokeTimeout).
				Description("With `group_membership`, how long a revoke waits for the batches of the revoked partitions to be acknowledged before committing what was, and then (with a `kafka_eos` output committing this group's offsets) how long it waits for that output's epochs holding their records to finish. A revoke can take twice this, so it must be less than half of `rebalance_timeout` (a lint rule checks). Default 10s.").
				Default("10s").
				Advanced(),
			service.NewDurationField(knFieldSessionTimeout).
				Description("With `group_membership`, how long the group coordinator waits without a heartbeat from this member before it drops it and gives its partitions to the others: the partitions of a process that crashed are read by nobody for that long. The broker accepts values between its `group.min.session.timeout.ms` (6s by default) and `group.max.session.timeout.ms` (30m by default) and fails the join otherwise, which stops the stream with an error naming this field. Default 45s, as the Java consumer and franz-go.").
				Default("45s").
				Advanced(),
			service.NewDurationField(knFieldRebalanceTimeout).
				Description("With `group_membership`, how long the coordinator waits for every member to rejoin in a rebalance, which includes the time this input spends finishing a revoke (see `revoke_ack_timeout`); a member that takes longer is dropped from the group. Default 1m, as franz-go.").
				Default("1m").
				Advanced(),
			service.NewDurationField(knFieldHeartbeatInterval).
				Description("With `group_membership`, how often this member sends a heartbeat to the coordinator, which is also how soon it learns of a rebalance. Must be shorter than `session_timeout`; a third of it or less is usual. Default 3s, as the Java consumer and franz-go.").
				Default("3s").
				Advanced(),
			kafkaconf.EnumField(knFieldIsolationLevel, isolationReadCommitted, isolationReadUncommitted).
				Description("`read_committed` (the default) emits only records of committed transactions and non-transactional records; `read_uncommitted` also emits records of open and aborted transactions.").
				Default(isolationReadCommitted),
			kafkaconf.EnumField(knFieldStartOffset, offsetEarliest, offsetLatest, offsetCommitted, offsetTimestamp, offsetSpecific).
				Description("Where to start reading each partition: `earliest` (the log start, the default), `latest` (the end of the log at start: the last stable offset under read_committed, the high watermark otherwise), `committed` (the group's committed offset; needs `consumer_group`), `timestamp` (the first offset whose timestamp is at or after `start_timestamp_ms`, the end of the log when there is none) or `specific` (the offsets in `start_offsets`).").
				Default(offsetEarliest),
			service.NewIntMapField(knFieldStartOffsets).
				Description("Start offsets per partition for `start_offset: specific`, keyed `topic:partition`. A partition without an entry starts at the committed offset of `consumer_group` (when set and the group has one in the log), as Flink does; a partition with neither, or whose offset lies outside the log, follows `reset_offset`.").
				Example(map[string]any{"orders:0": 1200, "orders:1": 1180}).
				Optional(),
			service.NewIntField(knFieldStartTimestamp).
				Description("Unix milliseconds for `start_offset: timestamp`.").
				Default(-1),
			kafkaconf.EnumField(knFieldResetOffset, offsetEarliest, offsetLatest, offsetNone).
				Description("What a `committed` or `specific` start does for a partition with no committed (or given) offset, or with one outside the log: `earliest` (start at the log start), `latest` (at the end), or `none`, which fails the stream with an error naming the partition. Not set, it is `none` with `start_offset: committed` (as Flink's committed-offsets initializer and Redpanda Connect's `committed` start: a new or mistyped group fails instead of re-reading the whole topic; set `earliest` to start a new group at the log start) and `earliest` otherwise. Every partition that falls back is logged with the reason and its start. Under `none`, data loss found while reading (the log start moved past the position) is fatal too; otherwise it is logged and counted.").
				Optional(),
			kafkaconf.EnumField(knFieldStopOffset, offsetNone, offsetLatest, offsetTimestamp, offsetSpecific, offsetCommitted).
				Description("Where to stop: `none` (the default) reads forever; `latest` stops at the end of each partition as listed before its first fetch (the last stable offset under read_committed, see `stop_at_high_watermark`); `timestamp` stops at the first offset whose timestamp is at or after `stop_timestamp_ms` (the end of the log listed at start when there is none); `specific` stops at the offsets in `stop_offsets`; `committed` stops at the committed offsets of `consumer_group` listed before the first fetch (Flink's `committedOffsets()` as the stopping offsets), and then the group is only read, never committed to (its offsets are the stops); a partition without a committed offset fails the stream unless `reset_offset` is set (`earliest`: stop at the log start, `latest`: at the end). The stop itself is not read. With a stop the input ends once every partition reached it and every batch was acknowledged.").
				Default(offsetNone),
			service.NewIntMapField(knFieldStopOffsets).
				Description("Stop offsets per partition for `stop_offset: specific`, keyed `topic:partition`; every partition read needs one. A stop above the current end of the log waits for the records to be written.").
				Example(map[string]any{"orders:0": 5000, "orders:1": 4800}).
				Optional(),
			service.NewIntField(knFieldStopTimestamp).
				Description("Unix milliseconds for `stop_offset: timestamp`.").
				Default(-1),
			service.NewBoolField(knFieldStopAtHWM).
				Description("Under read_committed with `stop_offset: latest`, stop at the high watermark rather than at the last stable offset. Records of transactions open at start are then included once they commit; the input waits for them up to `high_watermark_wait_timeout` and fails naming the blocking producer if they do not end. Default false.").
				Default(false).
				Advanced(),
			service.NewDurationField(knFieldStopHWMWaitTimeout).
				Description("How long `stop_at_high_watermark` waits for open transactions below the high watermark to end. Default 1m; the broker aborts a transaction after its timeout (transaction.max.timeout.ms, 15m by default).").
				Default("1m").
				Advanced(),
			kafkaconf.EnumField(knFieldTombstones, tombstonesEmit, tombstonesDrop, tombstonesFail).
				Description("What to do with a record with a null value (a tombstone): `emit` it as a message with an empty body and `kafka_tombstone_message: true` (the default), `drop` it, or `fail` it: emit it flagged with an error, so that a `catch` processor or a `switch` output on `errored()` can handle it. The offset advances past it in every case.").
				Default(tombstonesEmit),
			kafkaconf.EnumField(knFieldFormat, formatMessage, formatArrow).
				Description("`message` (the default) emits one message per record. `arrow` emits one message per batch (the records of one fetch of one partition, cut at `max_batch_records` and `max_batch_bytes`) whose body is an Arrow IPC stream in the schema of the project's `arrow` package (one row per record: topic, partition, offset, timestamp, key, value, headers; null keys, tombstones and duplicate headers kept as they are), with the metadata `kafka_topic`, `kafka_partition`, `kafka_first_offset`, `kafka_last_offset` (the offsets of its first and last row) and `kafka_record_count`. A `kafka_eos` output writes the rows back as records. Offsets, acks, stops and the Kafka-to-Kafka hand-over work as in `message` mode: the message covers the whole offset range of its batch, markers and aborted records included. With `tombstones: emit` a tombstone is a row with a null value, with `drop` it is left out; `fail` is rejected (one row cannot fail alone).").
				Default(formatMessage),
			service.NewIntField(knFieldMaxBatchRecords).
				Description("The most records in one Benthos batch. A batch holds the records of one fetch of one partition, split at this cap. Default 1024.").
				Default(1024),
			kafkaconf.BytesField(knFieldMaxBatchBytes).
				Description("The most record bytes (key + value) in one Benthos batch; a single larger record forms a batch of its own. Default 1048576 (1 MiB).").
				Default(1<<20),
			kafkaconf.BytesField(knFieldMaxPartitionBytes).
				Description("The fetch.max.partition.bytes sent to the brokers: how much one fetch returns per partition at most (a larger first batch is still returned whole). Default 1048576 (1 MiB).").
				Default(1<<20).
				Advanced(),
			kafkaconf.BytesField(knFieldMaxBufferedBytes).
				Description("A partition is paused while the bytes it has handed to the pipeline and not yet had acknowledged exceed this bound, and resumed when they drop below it, so one slow or stuck batch cannot grow memory. Bytes are counted as what the records take on the heap: their keys, values and headers, plus 1000 bytes per record for the Benthos message and metadata around each (1320 when a `kafka_eos` output in mirror mode keeps each record with its message) and 144 per header (48 per row and 16 per header in `format: arrow`); a `kafka_eos` output adds what it keeps for each record (its own record, about 280 bytes, and the key and headers it made) while it holds the batch. Default 67108864 (64 MiB).").
				Default(64<<20).
				Advanced(),
			kafkaconf.BytesField(knFieldMaxBufferedTotal).
				Description("Every partition is paused while the bytes handed to the pipeline and not yet acknowledged, all partitions together (counted as for `max_buffered_bytes_per_partition`), exceed this bound, and resumed when they drop below it: the input's read-ahead, bounded whatever the number of partitions. It can be passed by up to one fetch per partition. Under a Go memory limit (`GOMEMLIMIT`, or the one `connect-eos run` sets for a copy pipeline) the bound is the lesser of this and two thirds of that limit: the process holds more than this count, and with its live data near the limit the garbage collector would run constantly. Default 268435456 (256 MiB).").
				Default(256<<20).
				Advanced(),
			service.NewIntField(knFieldMaxDecompressed).
				Description("The most bytes one fetched record batch may decompress to. franz-go stops reading a partition at a batch that decompresses to more, since reading it again fails the same way: the stream then fails with an error naming the partition and the batch's offset. Default 1073741824 (1 GiB, franz-go's).").
				Default(1<<30).
				Advanced(),
			service.NewDurationField(knFieldStallWarning).
				Description("A partition whose position has not moved for this long while records are there (its end offset is past the position) gets a warning naming it and the reason: paused because the pipeline did not acknowledge what it was handed, a fetch error (a batch that cannot be decoded, a broker error), or an open transaction holding the last stable offset under read_committed; repeated at this interval while it lasts. `0s` disables it. Default 1m.").
				Default("1m").
				Advanced(),
			service.NewDurationField(knFieldCommitPeriod).
				Description("How often acknowledged offsets are committed to the consumer group. Default 1s.").
				Default("1s").
				Advanced(),
			service.NewDurationField(knFieldConnectTimeout).
				Description("The deadline of the checks made when connecting (topic metadata, offset listings, the group's offsets). On expiry the connection is retried. Default 10s.").
				Default("10s").
				Advanced(),
			service.NewDurationField(knFieldUnknownTopicGrace).
				Description("How long a topic or partition may be unknown to the brokers (while metadata settles after it was created, or during a broker restart) before the stream fails. It measures one continuous outage: unknown-topic errors less than 15s apart (while reading; at start, failed connection attempts in a row), and the stream fails only if a metadata request then confirms that the topic or partition does not exist. Default 30s.").
				Default("30s").
				Advanced(),
			service.NewDurationField(knFieldIdleProbeInterval).
				Description("With a stop, how long a partition below its stop may deliver nothing before its position is probed directly. The probe finishes partitions whose remaining offsets hold only aborted records or markers behind another producer's open transaction, or hold such records that were deleted (retention, DeleteRecords) after the consumer had skipped them: cases in which the consumer delivers nothing and reports nothing. One round probes every idle partition with one Fetch per partition leader; a partition whose probes find nothing is probed at doubling intervals up to 30s, and a paused partition (see `max_buffered_bytes_per_partition`) is not probed: offsets deleted under it are reported by the consumer once it resumes. Default 2s.").
				Default("2s").
				Advanced(),
			service.NewDurationField(knFieldProgressLogInterval).
				Description("With a stop, how often the progress (records to the stops done and total, rate, ETA) is logged. A summary is logged at the end. `0s` disables progress logs. Default 10s.").
				Default("10s").
				Advanced(),
		).
		LintRule(specLint).
		Example("Bounded copy of a topic",
			"Reads the committed records of every partition of `orders` up to the end captured at start, commits the group's offsets (lag 0 at the end) and exits 0.",
			`
input:
  kafka_native:
    seed_brokers: [ localhost:9092 ]
    topics: [ orders ]
    consumer_group: orders-backfill
    start_offset: committed
    reset_offset: earliest
    stop_offset: latest
`).
		Example("Pinned partitions from given offsets",
			"Reads partitions 0 and 1 of `orders` from given offsets to given stops, without a group.",
			`
input:
  kafka_native:
    seed_brokers: [ localhost:9092 ]
    topics: [ "orders:0", "orders:1" ]
    start_offset: specific
    start_offsets: { "orders:0": 100, "orders:1": 120 }
    stop_offset: specific
    stop_offsets: { "orders:0": 200, "orders:1": 220 }
`)
}

func init() {
	err := service.RegisterBatchInput(Name, Spec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchInput, error) {
			in, err := newInputFromParsed(conf, mgr)
			if err != nil {
				return nil, err
			}
			// Rejected batches are replayed until they are acknowledged, so
			// the committed offset never passes one (see tracker.go); retrynacks
			// keeps every rejected message of a replay that was narrowed, and
			// replays rejected batches in the order read, with backoff.
			return retrynacks.Wrap(in), nil
		})
	if err != nil {
		panic(err)
	}
}
