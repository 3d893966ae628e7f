package output

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

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
// identity, and an in-doubt epoch is then left to the transaction timeout.
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

func (s *stateStore) set(ctx context.Context, key string, v []byte) (err error) {
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
	return s.set(ctx, s.slotsKey(), []byte(strconv.Itoa(n)))
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
	return s.set(ctx, s.slotKey(n), b)
}
