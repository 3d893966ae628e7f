// Package statecache provides kafka_state, a Benthos cache backed by a
// compacted Kafka topic.
//
// Benthos core has no durable cache: `file` writes in place without fsync and
// the others live in memory. The kafka_eos output keeps its recovery identity
// (PREPARED / COMMITTED / ABORTED per epoch, and positions) in a cache, so the
// project ships one whose writes are durable once they return.
//
// What the cache promises:
//
//   - Durable once Set, Add or Delete returns: every write is one ProduceSync
//     with acks=all on an idempotent producer (both franz-go defaults, relied
//     upon here and not overridden). "Durable" means what Kafka means: in the
//     log of every in-sync replica. With replication factor 1 that is one
//     broker's page cache (Kafka does not fsync per write); survive machine
//     loss with replication factor >= 3 and min.insync.replicas >= 2.
//
//   - Read-your-writes within one process: the in-memory map is updated only
//     after the broker acknowledged the write, and Get serves from the map.
//
//   - Last write per key wins, as compaction decides it: by offset within the
//     key's partition. Writes made under WithFence carry a token, and the
//     highest token wins (see WithFence).
//
//   - A new process sees everything acknowledged before it started: the
//     topic is read to the end offsets listed at start on first use, and
//     Refresh reads to the then-current end.
//
//   - Never torn: one value is one Kafka record, never split, so a crash
//     mid-write leaves the old value or the new one.
//
//   - Every call returns by its context's deadline, and Close does not wait
//     for calls in flight (it closes the client, which ends them).
//
// What it does not promise: Add is a compare-and-set only against other
// writes of the same process, not across processes; TTLs are
// refused (ErrTTLUnsupported); a write that returns an error may still have
// been written (the produce outcome is unknown), a later Refresh tells.
//
// Values written to the topic inside a Kafka transaction (the kafka_eos output
// writes its epoch's positions record in the epoch's transaction) count only
// once the transaction commits. The cache reads read_uncommitted and applies
// a transaction's records itself when it meets the commit marker, instead of
// reading read_committed: a read_committed reader cannot read past the first
// open transaction (the last stable offset), so a crashed output's in-doubt
// transaction would hide every later record, including the PREPARE record
// the output needs to resolve that very transaction, until the broker times
// the transaction out. Records of transactions still open at the end of a
// read are kept aside and listed by Uncommitted.
package statecache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config is the Go form of the kafka_state fields.
type Config struct {
	// Opts are the franz-go options that connect to the cluster
	// (kafkaconf.Conn.Opts()). The cache appends its own producer and
	// consumer options.
	Opts []kgo.Opt

	// Topic is the compacted topic holding the values. Required.
	Topic string

	// Partitions is used only when the cache creates the topic. Default 1.
	// Keys are spread with franz-go's default key hash (murmur2, the Java
	// client's), so any other writer of the topic must use the same
	// partitioner for last-write-wins to hold.
	Partitions int32

	// ReplicationFactor is used only when the cache creates the topic.
	// Default (0 or -1): the broker's default.replication.factor (Kafka
	// 2.4+).
	ReplicationFactor int16

	// Logger may be nil.
	Logger *service.Logger
}

// metadataMinAge is the cache's clients' kgo.MetadataMinAge: how soon
// franz-go may refresh metadata again (see load).
const metadataMinAge = 100 * time.Millisecond

// Defaults for Config fields left zero.
const (
	DefaultPartitions        int32 = 1
	DefaultReplicationFactor int16 = -1
)

// entry is the latest value of a key seen so far, with where it was read from
// so that an older record read later (a refresh re-reading this process's own
// write, or a committed transaction's record that precedes a later plain
// write) does not overwrite a newer one.
type entry struct {
	value     []byte // nil for a tombstone
	token     uint64 // fence token (WithFence), 0 without one
	partition int32
	offset    int64

	// others are the key's records of lower tokens (each token has a
	// record key of its own, see fenceSep): the owners' before this one,
	// and a replaced owner's late writes. The winner's owner deletes the
	// live ones; a tombstone's offset orders it against its record.
	others map[uint64]other
}

// other is the last record read of one lower token of a key.
type other struct {
	offset int64
	live   bool // false: a tombstone
}

// Cache is a key-value cache backed by a compacted Kafka topic. It implements
// service.Cache. Create it with New; it connects lazily, on the first call.
type Cache struct {
	cfg Config
	log *service.Logger

	adm    *kadm.Client // admin requests, on admCl
	admCl  *kgo.Client
	closed atomic.Bool

	// listEnd lists end offsets: adm.ListEndOffsets, replaced by tests to
	// simulate a tail that reading cannot reach.
	listEnd func(context.Context, ...string) (kadm.ListedOffsets, error)

	// loadSem (capacity 1) serialises the initial load and refreshes: one
	// reader polls the topic at a time. Writes do not take it. A channel
	// rather than a mutex, so that a caller waiting for another's read
	// gives up at its own deadline.
	loadSem chan struct{}
	loaded  atomic.Bool
	meta    topicMeta // set by load, read-only after

	// cl is the producer and consumer, built by load. clMu guards the
	// pointer only: Close reads it without waiting for a load or a write
	// (either can be blocked on the broker, and only closing the client
	// ends them). Callers past ensureLoaded read c.cl directly: loaded is
	// stored after cl.
	clMu sync.Mutex
	cl   *kgo.Client

	// mu guards the views and broken.
	mu     sync.RWMutex
	broken error // set once the topic cannot be trusted; every call returns it
	v      *view // what Get serves
	reload *view // a read of the topic from its start in progress, nil if none

	// writeSem (capacity 1) holds the one record in flight: a write takes
	// it before producing and the record's promise gives it back, when
	// franz-go has settled the record, which can be after the writer
	// gave up at its deadline. So every record batch holds exactly one
	// record and the size checked against max.message.bytes is the size
	// the broker sees (franz-go would otherwise batch concurrent writes
	// together, and a batch of two fitting values can exceed the limit
	// and fail both). It also makes Add a compare-and-set against every
	// write of this process. The cost is latency under concurrent
	// writes, which a state cache written a few times per epoch does not
	// have.
	writeSem chan struct{}
}

var _ service.Cache = (*Cache)(nil)

// New returns a cache for cfg. It validates cfg and builds the admin client
// without contacting the cluster; the topic is created or checked and read
// on the first call (or by an explicit Refresh).
func New(cfg Config) (*Cache, error) {
	if cfg.Topic == "" {
		return nil, errors.New("kafka_state: field topic is required")
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.Partitions < 0 {
		return nil, fmt.Errorf("kafka_state: field partitions must be >= 1, got %d", cfg.Partitions)
	}
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = DefaultReplicationFactor
	}
	if cfg.ReplicationFactor < -1 {
		return nil, fmt.Errorf("kafka_state: field replication_factor must be -1 (broker default) or >= 1, got %d", cfg.ReplicationFactor)
	}
	// kadm answers from franz-go's metadata cache, which keeps a topic
	// unknown for MetadataMinAge (default 5s) after the cache created it;
	// admin requests are rare here (load and Refresh), so a short age
	// costs nothing.
	admCl, err := kgo.NewClient(append(append([]kgo.Opt{}, cfg.Opts...), kgo.MetadataMinAge(metadataMinAge))...)
	if err != nil {
		return nil, fmt.Errorf("kafka_state: %w", err)
	}
	c := &Cache{
		cfg:      cfg,
		log:      cfg.Logger,
		admCl:    admCl,
		adm:      kadm.NewClient(admCl),
		loadSem:  make(chan struct{}, 1),
		writeSem: make(chan struct{}, 1),
		v:        newView(),
	}
	c.listEnd = c.adm.ListEndOffsets
	return c, nil
}

// Topic returns the topic backing the cache.
func (c *Cache) Topic() string { return c.cfg.Topic }

// Get returns the value of key, or service.ErrKeyNotFound. The first call
// reads the topic to its end; later calls are served from memory, unless ctx
// comes from WithLatest (then Get reads to the current end first, as Refresh
// does). The returned slice is a copy.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) {
	load := c.ensureLoaded
	if latestOf(ctx) {
		load = c.Refresh
	}
	if err := load(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	e, ok := c.v.entries[key]
	broken := c.broken
	c.mu.RUnlock()
	if broken != nil {
		return nil, broken
	}
	if !ok || e.value == nil {
		return nil, service.ErrKeyNotFound
	}
	return append([]byte{}, e.value...), nil
}

// Set writes value for key and returns once the broker acknowledged it
// (acks=all). ttl must be nil (ErrTTLUnsupported).
//
// Set returns by ctx's deadline. An error other than a refusal before
// producing (TTL, size, fence, a topic the cache stopped on) means the write
// may or may not have happened: a record the broker has not answered by the
// deadline can still land afterwards, and is then applied when it does (or
// read by the next Refresh). Writes of one Cache are made one at a time; a
// write waiting behind an unanswered one gives up at its own deadline
// without writing anything.
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl *time.Duration) error {
	if ttl != nil {
		return ErrTTLUnsupported
	}
	return c.write(ctx, key, nonNil(value), false)
}

// Add writes value for key unless the key has a value, in which case it
// returns service.ErrKeyAlreadyExists. The check is against this process's
// view of the topic and is atomic only against writes made through this
// Cache: two processes can both Add the same key, and the later record
// wins. ttl must be nil.
func (c *Cache) Add(ctx context.Context, key string, value []byte, ttl *time.Duration) error {
	if ttl != nil {
		return ErrTTLUnsupported
	}
	return c.write(ctx, key, nonNil(value), true)
}

// Delete writes a tombstone for key (a record with a null value), which
// compaction eventually removes together with the older values of the key,
// after the topic's delete.retention.ms (Kafka default 1 day). Deleting a
// missing key writes a tombstone all the same and returns nil.
func (c *Cache) Delete(ctx context.Context, key string) error {
	return c.write(ctx, key, nil, false)
}

// Close closes the Kafka clients. It does not wait for reads or writes in
// flight: closing the client is what ends them. A write in flight returns an
// error wrapping ErrClosed that says its outcome is unknown (the broker may
// have its record); a load or Refresh in flight returns ErrClosed.
func (c *Cache) Close(ctx context.Context) error {
	if c.closed.Swap(true) {
		return nil
	}
	c.admCl.Close()
	c.clMu.Lock()
	cl := c.cl
	c.clMu.Unlock()
	if cl != nil {
		cl.Close()
	}
	return nil
}

// Refresh reads the topic up to its current end offsets, so that this
// process sees what other processes wrote since it started (or since the last
// Refresh). The first call of any method does this anyway.
//
// A transaction's records count from its commit marker, and Kafka writes the
// markers after EndTxn has returned to the producer: a Refresh right after
// another client's commit can still list that transaction in Uncommitted.
// Poll if the commit must be seen.
func (c *Cache) Refresh(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if !c.loaded.Load() {
		return c.ensureLoaded(ctx)
	}
	if err := c.lockLoad(ctx); err != nil {
		return err
	}
	defer c.unlockLoad()
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.brokenErr(); err != nil {
		return err
	}
	if err := c.checkTopic(ctx); err != nil {
		return err
	}
	return c.read(ctx)
}

// UncommittedRecord is a record of a Kafka transaction that was still open
// when the cache last read the end of the topic.
type UncommittedRecord struct {
	Key           string
	Value         []byte // nil for a tombstone
	ProducerID    int64
	ProducerEpoch int16
	Partition     int32
	Offset        int64
}

// Uncommitted returns the records of transactions that were open at the end
// of the last read (load or Refresh), in offset order per producer and
// partition. They are
// not visible through Get: they count once a later Refresh reads their
// commit marker, and never if the transaction aborts. The kafka_eos output
// uses this to see the positions of an in-doubt epoch.
func (c *Cache) Uncommitted() []UncommittedRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []UncommittedRecord
	for _, rs := range c.v.open {
		for _, h := range rs {
			r := h.r
			out = append(out, UncommittedRecord{
				Key:           h.key,
				Value:         cloneBytes(r.Value),
				ProducerID:    r.ProducerID,
				ProducerEpoch: r.ProducerEpoch,
				Partition:     r.Partition,
				Offset:        r.Offset,
			})
		}
	}
	return out
}

// Len returns the number of keys with a value.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lenLocked()
}

func (c *Cache) lenLocked() int {
	n := 0
	for _, e := range c.v.entries {
		if e.value != nil {
			n++
		}
	}
	return n
}

// cloneBytes copies v, keeping nil nil (a tombstone).
func cloneBytes(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append([]byte{}, v...)
}

func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{} // a nil value would be a tombstone
	}
	return v
}

// write produces one record for key and, once acknowledged, applies it to the
// map. value nil writes a tombstone.
func (c *Cache) write(ctx context.Context, key string, value []byte, add bool) error {
	if bytes.Contains([]byte(key), reservedPrefix) {
		return fmt.Errorf("%w: %q", ErrReservedKey, key)
	}
	if err := c.ensureLoaded(ctx); err != nil {
		return err
	}
	token := fenceOf(ctx)
	rk := recordKey(key, token)
	if size := recordBatchSize(rk, value); size > c.meta.batchLimit() {
		return c.tooLarge(key, value, size)
	}

	if err := c.lockWrite(ctx); err != nil {
		return fmt.Errorf("kafka_state: writing key %q to topic %q: an earlier write of this process is still unanswered, nothing written: %w", key, c.cfg.Topic, err)
	}
	c.mu.RLock()
	e, ok := c.v.entries[key]
	current := e.token
	if c.reload != nil {
		if re, rok := c.reload.entries[key]; rok && re.token > current {
			current = re.token
		}
	}
	broken := c.broken
	c.mu.RUnlock()
	if broken != nil {
		c.unlockWrite()
		return broken
	}
	if token < current {
		c.unlockWrite()
		return &FencedError{Topic: c.cfg.Topic, Key: key, Token: token, Current: current}
	}
	if add && ok && e.value != nil {
		c.unlockWrite()
		return service.ErrKeyAlreadyExists
	}

	// The value is copied: Benthos message bytes are shared, and the map
	// must not change under a caller that reuses its buffer.
	var v []byte
	if value != nil {
		v = append([]byte{}, value...)
	}
	r := &kgo.Record{
		Topic:     c.cfg.Topic,
		Key:       rk,
		Value:     v,
		Partition: c.meta.partitionFor([]byte(key)),
	}
	var stale []uint64 // the key's live records of lower tokens, once applied
	err := c.produce(ctx, r, func() {
		c.putOwn(key, token, r)
		e := c.v.entries[key]
		current = e.token
		if current == token {
			for t, o := range e.others {
				if o.live {
					stale = append(stale, t)
				}
			}
		}
	})
	switch {
	case err == nil:
	case errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge):
		return c.tooLarge(key, value, recordBatchSize(rk, v))
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("kafka_state: writing key %q to topic %q: the cache was closed with the write in flight (the write may or may not have happened): %w", key, c.cfg.Topic, ErrClosed)
	case errors.Is(err, errNoAnswer):
		return fmt.Errorf("kafka_state: writing key %q to topic %q: no answer from the broker before the deadline (the write may or may not have happened; the record may still land, a later read of the topic tells): %w", key, c.cfg.Topic, ctx.Err())
	case isRefusal(err):
		// A missing ACL or bad credentials: the broker answered, and
		// every retry gets the same answer until an operator fixes them.
		return fmt.Errorf("kafka_state: writing key %q to topic %q: the broker refused the write (not authorized: a missing ACL or bad credentials, which no retry fixes; this request wrote nothing): %w", key, c.cfg.Topic, err)
	default:
		// Nothing was sent when the topic changed under the client
		// (UNKNOWN_TOPIC_ID): say that rather than an unknown outcome.
		if ctx.Err() == nil {
			if cerr := c.checkTopic(ctx); errors.Is(cerr, ErrTopicChanged) {
				return cerr
			}
		}
		return fmt.Errorf("kafka_state: writing key %q to topic %q (the write may or may not have happened): %w", key, c.cfg.Topic, err)
	}
	if current > token {
		// A read running alongside brought a higher token after the
		// check above: the record is in the topic and loses there.
		return &FencedError{Topic: c.cfg.Topic, Key: key, Token: token, Current: current, Written: true}
	}
	c.deleteOthers(ctx, key, stale)
	return nil
}

// isRefusal reports a produce error that is the broker refusing the
// principal (an authorization or authentication failure): definite, and
// the same at every retry.
func isRefusal(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.SaslAuthenticationFailed)
}

// putOwn applies a record this process wrote, once acknowledged: to the view
// Get serves and to a reload in progress, which may have listed its end
// before the record and would not read it. c.mu is held.
func (c *Cache) putOwn(key string, token uint64, r *kgo.Record) {
	c.v.put(key, token, r.Value, r.Partition, r.Offset)
	if c.reload != nil {
		c.reload.put(key, token, r.Value, r.Partition, r.Offset)
	}
}

// deleteOthers writes tombstones for the records of key with the lower
// tokens given, after a write that won: they can never win again, and
// without this every owner a key ever had would leave a record in the topic.
// A failure is left for the next winning write of the key to retry: the
// records lose at every read meanwhile.
func (c *Cache) deleteOthers(ctx context.Context, key string, tokens []uint64) {
	for _, t := range tokens {
		r := &kgo.Record{Topic: c.cfg.Topic, Key: recordKey(key, t), Partition: c.meta.partitionFor([]byte(key))}
		if err := c.lockWrite(ctx); err != nil {
			return
		}
		if err := c.produce(ctx, r, func() { c.putOwn(key, t, r) }); err != nil {
			c.logDebugf("kafka_state: topic %s: deleting the record of key %q with the lower token %d: %v (retried at the next write of the key)", c.cfg.Topic, key, t, err)
			return
		}
	}
}

// errNoAnswer is what produce returns when ctx ended before franz-go settled
// the record.
var errNoAnswer = errors.New("no answer before the deadline")

// produce sends r, which the caller made under the write slot (lockWrite),
// and waits for its outcome until ctx is done. The slot stays taken until
// franz-go settles the record, so that the next write's record is never in
// a batch with this one; onAck runs under c.mu if and when the broker
// acknowledges r, whether or not the caller still waits (a record the
// caller gave up on can land, and is then applied like any other).
//
// franz-go, by default, refuses to fail an idempotent record whose request
// may have reached the broker (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
// a connection lost after the request went out) and retries it until the
// broker answers, whatever the record's context says. The cache sets
// AllowIdempotentProduceCancellation so that the record's context does end
// it (franz-go then bumps the producer epoch, and the broker refuses a late
// copy of the record once a later one is in: writes stay ordered); but that
// happens at franz-go's next retry, and a request can wait for its answer
// for the produce request timeout, so the caller does not wait for it:
// errNoAnswer at ctx's end, ErrClosed when the client was closed.
func (c *Cache) produce(ctx context.Context, r *kgo.Record, onAck func()) error {
	done := make(chan error, 1)
	c.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		if err == nil && onAck != nil {
			c.mu.Lock()
			onAck()
			c.mu.Unlock()
		}
		c.unlockWrite()
		done <- err
	})
	select {
	case err := <-done:
		if err != nil && (errors.Is(err, kgo.ErrClientClosed) || c.closed.Load()) {
			return ErrClosed
		}
		return err
	case <-ctx.Done():
		select {
		case err := <-done: // settled meanwhile
			if err == nil {
				return nil
			}
		default:
		}
		if c.closed.Load() {
			return ErrClosed
		}
		return errNoAnswer
	}
}

func (c *Cache) lockWrite(ctx context.Context) error { return acquire(ctx, c.writeSem) }
func (c *Cache) unlockWrite()                        { <-c.writeSem }
func (c *Cache) lockLoad(ctx context.Context) error  { return acquire(ctx, c.loadSem) }
func (c *Cache) unlockLoad()                         { <-c.loadSem }

// acquire takes the slot of sem (capacity 1), or returns ctx's error.
func acquire(ctx context.Context, sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensureLoaded creates or checks the topic and reads it to its end, once. A
// failed load is retried by the next call, which continues the read where the
// failed one stopped: a caller with a short deadline on a large topic still
// makes progress call after call.
func (c *Cache) ensureLoaded(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if c.loaded.Load() {
		return c.brokenErr()
	}
	if err := c.lockLoad(ctx); err != nil {
		return fmt.Errorf("kafka_state: reading topic %q: %w", c.cfg.Topic, err)
	}
	defer c.unlockLoad()
	if c.closed.Load() {
		return ErrClosed
	}
	if c.loaded.Load() {
		return c.brokenErr()
	}
	if err := c.load(ctx); err != nil {
		return err
	}
	c.loaded.Store(true)
	return nil
}

// load checks the topic and builds the client the first time, then reads to
// the end. Until the client exists, every attempt checks the topic again, so
// an operator fixing a rejected topic does not need a restart.
func (c *Cache) load(ctx context.Context) error {
	if c.cl != nil {
		if err := c.checkTopic(ctx); err != nil {
			return err
		}
		return c.read(ctx)
	}
	meta, err := c.ensureTopic(ctx)
	if err != nil {
		return err
	}
	c.meta = meta

	parts := make(map[int32]kgo.Offset, meta.partitions)
	for p := int32(0); p < meta.partitions; p++ {
		parts[p] = kgo.NewOffset().AtStart()
	}
	opts := append([]kgo.Opt{}, c.cfg.Opts...)
	opts = append(opts,
		// Writes: acks=all and idempotence are franz-go's defaults and
		// are what makes a write durable once ProduceSync returns; they
		// are not overridden. Compression is off so that the size
		// checked against max.message.bytes is the size sent; the
		// partition is chosen by partitionFor (Java-compatible murmur2),
		// so that the stall barrier (read.go) can target a partition.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// franz-go counts a batch with a 4 byte array length (or a
		// varint of up to 5) on top of what the broker checks; with one
		// record per batch (writeSem), this lets a record of exactly
		// max.message.bytes through and leaves the check to write.
		kgo.ProducerBatchMaxBytes(clampBatchBytes(meta.batchLimit()+5)),
		// A write is one record and the next waits for it, so a
		// linger (franz-go's default is 10 ms) would only delay every
		// write by its length: two writes sit in every epoch's commit.
		kgo.ProducerLinger(0),
		// Reads: every partition from its start, uncommitted, with
		// transaction markers, so transactions are resolved here (see
		// the package doc for why not read_committed).
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.Topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
	)
	// franz-go's default request and response limits (100 MiB each) stay:
	// batchLimit keeps every write's request under the first and every
	// fetch response under the second (see maxBatchBytes).
	//
	// The record's context ends a write whose outcome is unknown (see
	// produce).
	opts = append(opts, kgo.AllowIdempotentProduceCancellation())
	// franz-go retries a write the broker refused without writing it
	// (NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS) only after a
	// metadata refresh, and refreshes at most once per MetadataMinAge
	// (default 5s): each such answer would cost a write up to 5s, and two
	// in a row outlast the kafka_eos output's commit_timeout (default 10s;
	// shorter where commits must be quick), whose retry meets the next
	// one. A write is a few per epoch, so a refresh per answer costs
	// nothing.
	opts = append(opts, kgo.MetadataMinAge(metadataMinAge))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka_state: %w", err)
	}
	c.clMu.Lock()
	if c.closed.Load() {
		c.clMu.Unlock()
		cl.Close()
		return ErrClosed
	}
	c.cl = cl
	c.clMu.Unlock()
	return c.read(ctx)
}

// brokenErr returns the error that stopped the cache, nil if none.
func (c *Cache) brokenErr() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.broken
}

// breakLocked stops the cache with err: every later call returns it. The
// first error stays. c.mu is held.
func (c *Cache) breakLocked(err error) error {
	if c.broken == nil {
		c.broken = err
		c.logErrorf("%v", err)
	}
	return c.broken
}

// tooLarge is the error for a value whose record batch is size bytes.
func (c *Cache) tooLarge(key string, value []byte, size int) error {
	return &TooLargeError{Topic: c.cfg.Topic, Key: key, ValueBytes: len(value), BatchBytes: size, Limit: c.meta.batchLimit(), TopicLimit: c.meta.maxMessageBytes}
}

func clampBatchBytes(n int) int32 {
	return int32(max(512, min(n, 1<<30))) // franz-go accepts [512, 1 GiB]
}
