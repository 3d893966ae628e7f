package output

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// flakyCache is an in-memory state cache whose writes can be made to fail
// (a cache that is down), for tests. Registered as the cache plugin
// "eos_test_flaky"; flakyResources builds resources with one labelled
// "state" and returns it.
type flakyCache struct {
	mu     sync.Mutex
	vals   map[string][]byte
	down   atomic.Bool // Set and Add fail while true
	failed atomic.Int64
}

func init() { registerTestCache("eos_test_flaky") }

var errCacheDown = errors.New("test cache down")

func (f *flakyCache) Get(_ context.Context, key string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.vals[key]
	if !ok {
		return nil, service.ErrKeyNotFound
	}
	return append([]byte(nil), v...), nil
}

func (f *flakyCache) Set(_ context.Context, key string, value []byte, _ *time.Duration) error {
	if f.down.Load() {
		f.failed.Add(1)
		return errCacheDown
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vals[key] = append([]byte(nil), value...)
	return nil
}

func (f *flakyCache) Add(ctx context.Context, key string, value []byte, ttl *time.Duration) error {
	f.mu.Lock()
	_, ok := f.vals[key]
	f.mu.Unlock()
	if ok {
		return service.ErrKeyAlreadyExists
	}
	return f.Set(ctx, key, value, ttl)
}

func (f *flakyCache) Delete(_ context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.vals, key)
	return nil
}

func (f *flakyCache) Close(context.Context) error { return nil }

// flakyResources returns resources with a flakyCache labelled "state"; share
// them between outputs to model a restart with a durable cache.
func flakyResources(t testing.TB) (*service.Resources, *flakyCache) {
	t.Helper()
	f := &flakyCache{vals: map[string][]byte{}}
	return testCacheResources(t, "eos_test_flaky", f), f
}
