package statecache

import (
	"context"
	"fmt"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// Field names of kafka_state, besides the shared connection fields.
const (
	ksFieldTopic             = "topic"
	ksFieldPartitions        = "partitions"
	ksFieldReplicationFactor = "replication_factor"
)

// Spec returns the config spec of the kafka_state cache. It is a function so
// that tests and the docs generator use the same spec as the registration.
func Spec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("A durable cache backed by a compacted Kafka topic; the state cache of the kafka_eos output.").
		Description(`
Every key is a record key and every value a record value of one compacted topic; deleting a key writes a tombstone. On first use the cache reads the topic from the beginning to the end offsets listed at that moment and keeps the result in memory; `+"`Get`"+` is served from memory.

### What it promises

- **Durable once a write returns.** Set, add and delete produce one record synchronously with `+"`acks=all`"+` on an idempotent producer (the franz-go defaults, which the cache relies on and does not override), and return only once the broker acknowledged it. The record is sent at once: the producer does not linger (franz-go's default is 10 ms), since each write is one record and the next waits for it. Durable means what Kafka means: in the log of every in-sync replica, not fsynced. To survive the loss of a machine, use `+"`replication_factor: 3`"+` (or a broker default of 3) with `+"`min.insync.replicas=2`"+` on the topic.
- **Read-your-writes within one process.** The in-memory copy changes only after the broker acknowledged a write.
- **Last write per key wins**, by offset within the key's partition, which is what compaction keeps; unless the writes carry fence tokens (below), where the highest token wins.
- **A restart sees every acknowledged write**: a new process reads the whole topic on first use. A process does not see another live process's later writes until it reads the topic again (Go callers: `+"`Refresh`"+`).
- **A refresh never misses a delete.** Compaction removes a tombstone, with the values it deleted, once `+"`delete.retention.ms`"+` (Kafka default 1 day) has passed since it was written. A refresh reads on from where the previous read stopped only while that is safe: when more than `+"`delete.retention.ms`"+` less a tenth has passed since the previous read listed the end of the topic (the refresh describes the topic's current value each time), it reads the whole topic again from the start, keeps serving the old values until that read is complete, and then serves the new ones. The bound Kafka sets for any reader of a compacted topic remains: a read of the whole topic must complete within `+"`delete.retention.ms`"+`.
- **Every call returns by its context's deadline.** A write the broker has not answered by then returns an error saying the write may or may not have happened: the record can still land afterwards, and is then read like any other write. A process makes its writes one at a time; a write queued behind an unanswered one gives up at its own deadline and writes nothing. A reader waiting for another's read of the topic gives up at its deadline too, and a load cut short resumes where it stopped on the next call.
- **Close does not wait** for reads or writes in flight: it closes the Kafka client, which ends them. A read in flight returns "cache is closed"; a write in flight returns an error that wraps it and says the write may or may not have happened (the broker may already hold the record).
- **Never torn.** A value is exactly one record, never split: after a crash mid-write a key has its old value or its new one. A value whose record batch would exceed the topic's `+"`max.message.bytes`"+` is rejected before anything is sent, with an error naming the key, the size and the limit.
- **Every value it accepts can be read back.** Whatever the topic's `+"`max.message.bytes`"+` allows, a record batch is at most 100 MiB less 64 KiB (104,792,064 bytes): a write is one produce request, which Apache Kafka refuses over `+"`socket.request.max.bytes`"+` (default 100 MiB), and a read gets the batch in one fetch response, which franz-go refuses over 100 MiB, so a larger record, once written, would make the topic unreadable to every process. A larger value is rejected at the write with an error saying so. (Another writer of the topic is not held to this: a batch over 100 MiB that it writes makes the topic unreadable to the cache.)
- **Transactions count once committed.** Records another producer wrote to the topic inside a Kafka transaction become visible when the commit marker is read, never if the transaction aborts. An open transaction does not hide the records after it: the cache reads uncommitted and resolves transactions from their markers, because a `+"`read_committed`"+` reader stops at the first open transaction.

### Fencing a replaced owner (Go callers)

A component that owns a key (the kafka_eos output owns its slot records) can stop an owner it replaced, a process that stalled and wakes up later, from overwriting its value. It writes with a context from `+"`statecache.WithFence(ctx, token)`"+`, where the token grows with every change of owner and stays the same for all the writes of one owner. The cache receives the context a component passes through Benthos's `+"`AccessCache`"+` unchanged, so this works through a cache resource. The token is stored in the record key: the key, a NUL byte, `+"`kafka_state/fence/`"+` and the token in 16 hex digits (a write without a fence uses the key alone, token 0), so that each owner's record of a key has a record key of its own and compaction, which keeps the last record of each record key, never replaces one owner's value with another's.

- **At read** (the first load and every refresh), per key, the record with the highest token wins, whatever its offset, before and after compaction. Among records of one token the later wins.
- **At write**, a set, add or delete whose token is lower than the highest token this process has seen for the key (read from the topic or written itself) fails with `+"`statecache.ErrFenced`"+` (a `+"`*statecache.FencedError`"+` naming the key and both tokens) and writes nothing. A replaced owner that has not read the newer token is not stopped at its write: its record lands and loses at every read.
- **A winning write cleans up**: it deletes (with tombstones) the records of lower tokens of the key that this process has read, so a key keeps one record once its new owner has written it.
- **A delete with a token** keeps the key's token in memory: a later write with a lower token fails in every process that has read the delete, and loses at read while the tombstone is in the topic. Compaction removes the tombstone `+"`delete.retention.ms`"+` after it was written; a lower-token record written after the delete is the key's value from then on.
- Keys containing a NUL byte followed by `+"`kafka_state/`"+` are reserved and refused.

### What it does not promise

- `+"`add`"+` fails with "key already exists" when this process knows the key; it is **not** a compare-and-set across processes: two processes adding the same key both succeed and the later record wins.
- **No TTL.** A compacted topic keeps the last value of a key until the key is deleted, so a write with a TTL is rejected rather than stored forever.
- A write that returns an error other than a refusal (TTL, size, fence, reserved key, a topic the cache stopped on, a write that gave up waiting for an earlier one, which says "nothing written", the broker refusing the principal, below) may still have been written: the produce outcome is unknown, and the next read of the topic tells.
- Memory: the whole key space is held in memory (a deleted key is forgotten once a read has passed its tombstone, except after a fenced delete, whose token stays), and a new process reads the whole topic. This is a cache for small state (offsets, recovery records), not for bulk data.

### The topic

If the topic does not exist it is created with `+"`partitions`"+` and `+"`replication_factor`"+`, `+"`cleanup.policy=compact`"+` and `+"`segment.ms=3600000`"+` (compaction never touches the active segment, which Kafka rolls after 7 days or 1 GiB by default; one hour keeps the uncompacted tail, which every new process reads, to an hour of writes). `+"`min.compaction.lag.ms`"+` stays 0 (nothing needs old values to outlive their successor), and `+"`delete.retention.ms`"+` (Kafka default 1 day) is how long a tombstone stays readable. Tune these with kafka-configs if needed.

An existing topic must have a `+"`cleanup.policy`"+` containing `+"`compact`"+`; `+"`compact,delete`"+` is accepted only with `+"`retention.ms=-1`"+` and `+"`retention.bytes=-1`"+`, since a finite retention deletes keys not rewritten in time. Anything else fails with an error naming the topic. Keys are spread over partitions with the Java client's murmur2 key hash (franz-go's default); another writer to the topic must use the same partitioner.

### When the topic changes under the cache

- **Deleted and created again** under the same name: the next write (franz-go's produce fails on the old topic id, and nothing is sent) or `+"`Refresh`"+` stops the cache with an error naming the topic, the old and new topic ids, and how many keys it held; every later call, `+"`Get`"+` included, returns that error. Until then `+"`Get`"+` serves the values read before, as it does between refreshes. A new process cannot tell a recreated topic from a new one: it starts from what the topic holds, empty. A topic deleted and not (yet) recreated fails each call with "not found" until it is back.
- **Partitions added**: keys would hash to other partitions, where neither compaction nor the cache orders their old and new values. A running process stops at its next `+"`Refresh`"+` (or write that fails) with an error naming the old and new partition counts, and until then writes each key to the partition it hashed to before; a new process stops at load when it reads a key in a partition its hash does not point to (also what a writer with another partitioner leaves behind). Move the state to a new topic instead.

### Permissions

With ACLs the principal needs, on the topic: Describe, DescribeConfigs, Read and Write, and Create if the cache is to create it (or create the topic beforehand). Brokers before Kafka 3.0 also want IdempotentWrite on the cluster for the idempotent producer. A write the broker refuses for a missing ACL or bad credentials (`+"`TOPIC_AUTHORIZATION_FAILED`"+`, `+"`CLUSTER_AUTHORIZATION_FAILED`"+`) returns at once with an error naming the key and the topic, saying the broker refused the write and that no retry fixes it, and wrapping the broker's error; the request wrote nothing. The kafka_eos output stops on it (connect-eos exits 3) rather than retry it.`).
		Fields(kafkaconf.Fields()...).
		Fields(
			service.NewStringField(ksFieldTopic).
				Description("The compacted topic holding the values. Created if missing. Use one topic per deployment (or per pipeline): every process reads all of it."),
			service.NewIntField(ksFieldPartitions).
				Description("Partitions of the topic when the cache creates it. One is enough for state of a few thousand keys and keeps the read at start a single sequential read.").
				Default(int(DefaultPartitions)).
				Advanced(),
			service.NewIntField(ksFieldReplicationFactor).
				Description("Replication factor of the topic when the cache creates it. `-1` uses the broker's `default.replication.factor` (Kafka 2.4+). Use 3 in production: with 1, a write is on one broker only.").
				Default(int(DefaultReplicationFactor)).
				Advanced(),
		).
		LintRule(`root = match {
  this.partitions.or(1) < 1 => [ "field partitions must be at least 1" ],
  this.replication_factor.or(-1) == 0 || this.replication_factor.or(-1) < -1 => [ "field replication_factor must be -1 (broker default) or at least 1" ],
  _ => [],
}`).
		Example("State cache of a kafka_eos output",
			"A cache resource the kafka_eos output names in `state_cache`. The topic is created compacted on first use.",
			`
cache_resources:
  - label: eos_state
    kafka_state:
      seed_brokers: [ "${KAFKA_BROKERS:localhost:9092}" ]
      topic: connect_eos_state
      replication_factor: 3
`)
}

func init() {
	if err := service.RegisterCache("kafka_state", Spec(), func(conf *service.ParsedConfig, mgr *service.Resources) (service.Cache, error) {
		return newCacheFromParsed(conf, mgr)
	}); err != nil {
		panic(err)
	}
}

// resourceKey is the key under which a kafka_state cache resource stores
// itself in the stream's generic resource store (see Lookup).
type resourceKey struct{ label string }

// newCacheFromParsed builds the cache from its parsed config. It does not
// contact the cluster: the topic is created or checked, and read, on first
// use. A cache built as a labelled resource registers itself so that Lookup
// can find it.
func newCacheFromParsed(conf *service.ParsedConfig, mgr *service.Resources) (*Cache, error) {
	conn, err := kafkaconf.FromParsed(conf)
	if err != nil {
		return nil, err
	}
	if mgr != nil {
		conn.LogWarnings(mgr.Logger())
	}
	topic, err := conf.FieldString(ksFieldTopic)
	if err != nil {
		return nil, err
	}
	parts, err := conf.FieldInt(ksFieldPartitions)
	if err != nil {
		return nil, err
	}
	rf, err := conf.FieldInt(ksFieldReplicationFactor)
	if err != nil {
		return nil, err
	}
	if parts < 1 || parts > 1<<20 {
		return nil, fmt.Errorf("field %s: must be at least 1, got %d", ksFieldPartitions, parts)
	}
	if rf == 0 || rf < -1 || rf > 1<<14 {
		return nil, fmt.Errorf("field %s: must be -1 (broker default) or at least 1, got %d", ksFieldReplicationFactor, rf)
	}
	cfg := Config{
		Opts:              conn.Opts(),
		Topic:             topic,
		Partitions:        int32(parts),
		ReplicationFactor: int16(rf),
	}
	if mgr != nil {
		cfg.Logger = mgr.Logger()
	}
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if mgr != nil && mgr.Label() != "" {
		mgr.SetGeneric(resourceKey{mgr.Label()}, c)
	}
	return c, nil
}

// Lookup returns the kafka_state cache resource labelled label in the stream
// of mgr, for the Go API Benthos's cache interface does not carry (Refresh,
// Uncommitted, Topic): Resources.AccessCache hands out a wrapper that cannot
// be type-asserted back to *Cache. It returns false when no kafka_state
// resource has that label (another cache type, or none).
//
// Benthos builds cache resources lazily, on first access, so Lookup accesses
// the resource once to have it built (the constructor then registers it).
func Lookup(ctx context.Context, mgr *service.Resources, label string) (*Cache, bool) {
	if err := mgr.AccessCache(ctx, label, func(service.Cache) {}); err != nil {
		return nil, false
	}
	v, ok := mgr.GetGeneric(resourceKey{label})
	if !ok {
		return nil, false
	}
	c, ok := v.(*Cache)
	return c, ok && c != nil
}
