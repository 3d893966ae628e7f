package output

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/statecache"
	"github.com/connect-eos/connect-eos/txnstate"
)

// stateStore reads and writes the recovery identities in the state cache.
//
// Key layout (one transactional_id prefix P):
//
//	P/slots     the largest pool size ever used with P, decimal; written at
//	            start before any slot is initialised, so a later start with
//	            a smaller pool still reads (and cleans up) the larger pool's
//	            slots.
//	P/slot/<n>  the txnstate.Record (JSON) of the newest epoch of slot
//	            P-<n> that reached PREPARE.
//	P/positions dedupe mode only: every committed position (dedupe.go).
//
// The epoch counter is not stored separately: every PREPARE carries its epoch
// number, records are only ever overwritten by larger ones, so the next epoch
// is one past the largest stored.
//
// Promises this relies on: read-your-writes and an atomic value per key
// (every Benthos cache gives both within one process). Durability across a
// machine loss is the cache's: with an in-memory cache a crash loses the
// identity, and an in-doubt epoch cannot be resumed: the restart's
// InitProducerID aborts it if it is still open (the transaction timeout ends
// it only if nothing initialises its transactional id again).
type stateStore struct {
	res    *service.Resources
	cache  string
	prefix string
}

func (s *stateStore) slotsKey() string     { return s.prefix + "/slots" }
func (s *stateStore) slotKey(n int) string { return s.prefix + "/slot/" + strconv.Itoa(n) }

func (s *stateStore) get(ctx context.Context, key string) (v []byte, found bool, err error) {
	aerr := s.res.AccessCache(ctx, s.cache, func(c service.Cache) {
		v, err = c.Get(ctx, key)
	})
	if aerr != nil {
		return nil, false, fmt.Errorf("state cache %q: %w", s.cache, aerr)
	}
	if errors.Is(err, service.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state cache %q: get %s: %w", s.cache, key, err)
	}
	return v, true, nil
}

// set writes key; with a non-zero fence, as owner token fence
// (statecache.WithFence: kafka_state keeps the record of the highest token
// per key, and refuses a lower one with statecache.ErrFenced; other caches
// ignore it).
func (s *stateStore) set(ctx context.Context, key string, v []byte, fence uint64) (err error) {
	if fence != 0 {
		ctx = statecache.WithFence(ctx, fence)
	}
	aerr := s.res.AccessCache(ctx, s.cache, func(c service.Cache) {
		err = c.Set(ctx, key, v, nil)
	})
	if aerr != nil {
		return fmt.Errorf("state cache %q: %w", s.cache, aerr)
	}
	if err != nil {
		return fmt.Errorf("state cache %q: set %s: %w", s.cache, key, err)
	}
	return nil
}

// sync brings this process's view of the cache up to date with every write
// acknowledged so far, by any process (statecache.WithLatest: kafka_state
// otherwise answers from what it read at its first use; other caches read
// their store at every Get).
func (s *stateStore) sync(ctx context.Context) error {
	_, _, err := s.get(statecache.WithLatest(ctx), s.slotsKey())
	return err
}

// slotsHighWater returns the stored largest pool size, 0 if none.
func (s *stateStore) slotsHighWater(ctx context.Context) (int, error) {
	v, ok, err := s.get(ctx, s.slotsKey())
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(v)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("state cache %q: key %s holds %q, not a pool size", s.cache, s.slotsKey(), v)
	}
	return n, nil
}

func (s *stateStore) setSlotsHighWater(ctx context.Context, n int) error {
	return s.set(ctx, s.slotsKey(), []byte(strconv.Itoa(n)), 0)
}

// readSlot returns the record of slot n, if any.
func (s *stateStore) readSlot(ctx context.Context, n int) (txnstate.Record, bool, error) {
	v, ok, err := s.get(ctx, s.slotKey(n))
	if err != nil || !ok {
		return txnstate.Record{}, false, err
	}
	r, err := txnstate.Decode(v)
	if err != nil {
		return txnstate.Record{}, false, fmt.Errorf("state cache %q: key %s: %w", s.cache, s.slotKey(n), err)
	}
	return r, true, nil
}

func (s *stateStore) writeSlot(ctx context.Context, n int, r txnstate.Record) error {
	b, err := r.Encode()
	if err != nil {
		return err
	}
	return s.set(ctx, s.slotKey(n), b, r.Fence)
}

// initFence sets slot s's owner token from its stored record (after
// recovery) and the producer id and epoch its InitProducerID got, which are
// higher than those of every earlier owner of the slot: a replaced instance
// that wakes up writes with a lower token, and its records lose.
func (o *output) initFence(ctx context.Context, s *slot) error {
	r, ok, err := o.store.readSlot(ctx, s.n)
	if err != nil {
		return err
	}
	if ok {
		s.fenceGen, s.fencePID = txnstate.FenceGen(r.Fence), r.ProducerID
	}
	pid, e, err := s.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("transactional id %q: %w", s.id, err)
	}
	s.lastFence = s.fence(pid, e)
	return nil
}

// ownerFence is the token of writes that belong to the whole instance (the
// committed dedupe positions): the highest of its slots'. A later instance
// initialised every slot after this one did, so its tokens are higher.
func (o *output) ownerFence() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var t uint64
	for _, s := range o.slots {
		t = max(t, s.lastFence)
	}
	return t
}

// probeFencing writes a probe key twice, the second time with a lower token,
// and warns if the cache took both: it does not fence (only kafka_state
// does), so a replaced instance's late writes can overwrite the slot records
// of the instance that replaced it.
func (o *output) probeFencing(ctx context.Context) {
	key := o.store.prefix + "/fence-probe"
	t := uint64(time.Now().UnixNano())
	err1 := o.store.set(ctx, key, []byte("1"), t|1)
	err2 := o.store.set(ctx, key, []byte("0"), 1)
	if errors.Is(err1, statecache.ErrFenced) || errors.Is(err2, statecache.ErrFenced) {
		return
	}
	if err1 != nil || err2 != nil {
		o.log.Warnf("kafka_eos %q: state_cache %q: the fencing probe failed: %v %v", o.conf.transactionalID, o.store.cache, err1, err2)
		return
	}
	o.log.Warnf("kafka_eos %q: state_cache %q does not fence stale writers (only kafka_state does): an instance that stalls after another instance took over its transactional_id can overwrite that instance's slot records when it wakes up, and the next start then resolves the stalled instance's epoch instead of the live one's (a committed epoch not seen: in dedupe mode its positions are lost and replays duplicated; in Kafka-to-Kafka mode the offsets stay safe, they commit in the transaction)", o.conf.transactionalID, o.store.cache)
}
