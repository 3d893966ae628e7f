package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/fatal"
	"github.com/connect-eos/connect-eos/internal/retrynacks"
	"github.com/connect-eos/connect-eos/statecache"
	// The project's components: kafka_native, kafka_eos, kafka_state.
	_ "github.com/connect-eos/connect-eos/plugin"
)

// ChildEnv names the environment variable that turns the test binary into
// one pipeline instance (see ChildMain): its value is a childSpec in JSON.
const ChildEnv = "SIM_CHILD"

// ExitFatal is the instance's exit code after a fatal error, as the
// connect-eos binary's.
const ExitFatal = 3

// childSpec is what an instance process needs from the harness.
type childSpec struct {
	Seed     uint64        // the plan is drawn again from it (the sim_source records)
	Instance string        // names the instance in the store's records
	Store    string        // the harness's HTTP address (state cache, source checkpoint, acks)
	YAML     string        // the stream
	Shutdown time.Duration // shutdown_timeout
	Grace    time.Duration // how long past it a stop may still run (stopGrace)
	Override string        // Options.Override
}

// ChildMain runs one pipeline instance in this process, as the connect-eos
// binary runs a stream: a fatal error stops it gracefully and exits
// ExitFatal, SIGTERM stops it gracefully and exits 0, the end of the input
// exits 0. It returns the exit code.
func ChildMain(specJSON string) int {
	// SIGTERM is held from the start: the harness sends it once the
	// instance reported ready, but a default action must never kill it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "sim child: %v\n", err)
		return 2
	}
	st := &storeClient{base: "http://" + spec.Store, inst: spec.Instance, hc: &http.Client{Timeout: 30 * time.Second}}
	p, err := Override(Draw(spec.Seed), spec.Override)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim child: %v\n", err)
		return 2
	}
	env := service.GlobalEnvironment().Clone()
	if err := registerChildComponents(env, p, st); err != nil {
		fmt.Fprintf(os.Stderr, "sim child: %v\n", err)
		return 2
	}
	sb := env.NewStreamBuilder()
	if err := sb.SetYAML(spec.YAML); err != nil {
		fmt.Fprintf(os.Stderr, "sim child: %v\n", err)
		return 2
	}
	stream, err := sb.Build()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sim child: %v\n", err)
		return 2
	}
	stop := make(chan struct{}, 1)
	restore := fatal.SetHandler(func(err error) {
		fmt.Fprintf(os.Stderr, "sim child: stopping: %v\n", err)
		select {
		case stop <- struct{}{}:
		default:
		}
	})
	defer restore()
	done := make(chan error, 1)
	go func() { done <- stream.Run(context.Background()) }()
	if _, err := st.call(context.Background(), "/ready", nil, nil); err != nil {
		fmt.Fprintf(os.Stderr, "sim child: %v\n", err)
	}
	// As the connect-eos binary (Benthos' CLI): a stop still running
	// stopGrace after shutdown_timeout (the stream's Stop overran its
	// deadline) exits 1 with the goroutines dumped. A stop that returned
	// disarms it: the process then exits with the stop's own code, however
	// long the exit itself takes (under -race on a loaded machine, seconds).
	var exitMu sync.Mutex
	stopReturned := false
	watchdog := func() {
		go func() {
			time.Sleep(spec.Shutdown + spec.Grace)
			exitMu.Lock()
			if stopReturned {
				exitMu.Unlock()
				return
			}
			fmt.Fprintln(os.Stderr, "sim child: failed to close cleanly within shutdown_timeout; exiting forcefully")
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			os.Exit(1)
		}()
	}
	// A stop returns once the stream stopped or shutdown_timeout passed;
	// then the process exits, as Benthos' CLI does, without waiting for
	// components that did not stop (their work is abandoned, as at exit).
	stopStream := func() error {
		watchdog()
		err := stream.StopWithin(spec.Shutdown)
		exitMu.Lock()
		stopReturned = true
		exitMu.Unlock()
		select {
		case runErr := <-done:
			return runErr
		case <-time.After(100 * time.Millisecond):
			if err != nil {
				fmt.Fprintf(os.Stderr, "sim child: stop: %v\n", err)
			}
			return nil
		}
	}
	var runErr error
	select {
	case runErr = <-done:
	case <-sigs:
		fmt.Fprintln(os.Stderr, "sim child: SIGTERM")
		runErr = stopStream()
	case <-stop:
		runErr = stopStream()
	}
	if ferr := fatal.Err(); ferr != nil {
		fmt.Fprintf(os.Stderr, "sim child: exited after a fatal error: %v\n", ferr)
		return ExitFatal
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		fmt.Fprintf(os.Stderr, "sim child: stream: %v\n", runErr)
		return 1
	}
	fmt.Fprintln(os.Stderr, "sim child: exited")
	return 0
}

// storeClient talks to the harness's store (store.go).
type storeClient struct {
	base string
	inst string
	hc   *http.Client
}

// errNotFound is the store's answer for a missing cache key, errFenced for a
// write whose fence token is lower than the key's highest.
var (
	errNotFound = errors.New("not found")
	errFenced   = errors.New("fenced")
)

func (s *storeClient) call(ctx context.Context, path string, q url.Values, body []byte) ([]byte, error) {
	if q == nil {
		q = url.Values{}
	}
	q.Set("inst", s.inst)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return b, nil
	case http.StatusNotFound:
		return nil, errNotFound
	case http.StatusConflict:
		return nil, errFenced
	}
	return nil, fmt.Errorf("sim store %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
}

func registerChildComponents(env *service.Environment, p Plan, st *storeClient) error {
	if err := env.RegisterCache("sim_cache", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.Cache, error) {
		return &simCache{st: st}, nil
	}); err != nil {
		return err
	}
	if err := env.RegisterBatchInput("sim_source", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchInput, error) {
		return retrynacks.Wrap(newSimSource(p, st)), nil
	}); err != nil {
		return err
	}
	if err := env.RegisterBatchProcessor("sim_tag", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchProcessor, error) {
		return &simTag{inst: st.inst, throttle: p.Throttle}, nil
	}); err != nil {
		return err
	}
	return env.RegisterBatchOutput("sim_dlq", service.NewConfigSpec(), func(*service.ParsedConfig, *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		return &simDLQ{st: st}, service.BatchPolicy{}, 1, nil
	})
}

// simCache is the state cache: every operation goes to the harness, which
// keeps the values across instance restarts (a durable cache) and injects
// the plan's cache faults.
type simCache struct{ st *storeClient }

func (c *simCache) Get(ctx context.Context, key string) ([]byte, error) {
	b, err := c.st.call(ctx, "/cache/get", url.Values{"key": {key}}, nil)
	if errors.Is(err, errNotFound) {
		return nil, service.ErrKeyNotFound
	}
	return b, err
}

// The writes honour statecache.WithFence as kafka_state does: per key, a
// write with a token lower than the highest one written is refused
// (statecache.ErrFenced), so that a replaced instance that wakes up cannot
// overwrite the slot records of the instance that replaced it.

func (c *simCache) write(ctx context.Context, op, key string, value []byte) error {
	q := url.Values{"key": {key}, "fence": {strconv.FormatUint(statecache.FenceOf(ctx), 10)}}
	_, err := c.st.call(ctx, "/cache/"+op, q, value)
	if errors.Is(err, errFenced) {
		return &statecache.FencedError{Topic: "sim_cache", Key: key, Token: statecache.FenceOf(ctx)}
	}
	return err
}

func (c *simCache) Set(ctx context.Context, key string, value []byte, _ *time.Duration) error {
	return c.write(ctx, "set", key, value)
}

func (c *simCache) Add(ctx context.Context, key string, value []byte, _ *time.Duration) error {
	err := c.write(ctx, "add", key, value)
	if errors.Is(err, errNotFound) {
		return service.ErrKeyAlreadyExists
	}
	return err
}

func (c *simCache) Delete(ctx context.Context, key string) error {
	return c.write(ctx, "delete", key, nil)
}

func (c *simCache) Close(context.Context) error { return nil }

// simSource is the replayable non-Kafka input of the plain and dedupe modes:
// the plan's records in order, from a checkpoint kept by the harness (the
// end of the contiguous run of acknowledged records, written every
// CommitPeriod and at a graceful close), as a file read from a stored line
// number would be. Nacked batches are replayed by retrynacks.Wrap.
type simSource struct {
	p  Plan
	st *storeClient

	next int // the next record to read

	mu       sync.Mutex
	acked    map[int]int // batch start -> end, acknowledged, not yet in the checkpoint
	cp       int         // the checkpoint as known here
	written  int         // the checkpoint as stored
	stopTick chan struct{}
	ticking  sync.WaitGroup
}

func newSimSource(p Plan, st *storeClient) *simSource {
	return &simSource{p: p, st: st, acked: map[int]int{}, stopTick: make(chan struct{})}
}

func (s *simSource) Connect(ctx context.Context) error {
	b, err := s.st.call(ctx, "/source/checkpoint", nil, nil)
	if err != nil && !errors.Is(err, errNotFound) {
		return err
	}
	cp := 0
	if len(b) > 0 {
		if cp, err = strconv.Atoi(string(b)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.next, s.cp, s.written = cp, cp, cp
	s.mu.Unlock()
	s.ticking.Add(1)
	go s.tick()
	return nil
}

func (s *simSource) tick() {
	defer s.ticking.Done()
	t := time.NewTicker(s.p.CommitPeriod)
	defer t.Stop()
	for {
		select {
		case <-s.stopTick:
			return
		case <-t.C:
			s.flush(context.Background())
		}
	}
}

// flush stores the checkpoint if it moved.
func (s *simSource) flush(ctx context.Context) {
	s.mu.Lock()
	cp := s.cp
	s.mu.Unlock()
	if cp == s.written {
		return
	}
	if _, err := s.st.call(ctx, "/source/checkpoint", url.Values{"set": {strconv.Itoa(cp)}}, nil); err == nil {
		s.written = cp
	}
}

func (s *simSource) ReadBatch(ctx context.Context) (service.MessageBatch, service.AckFunc, error) {
	if s.next >= s.p.Records {
		return nil, nil, service.ErrEndOfInput
	}
	from := s.next
	to := min(from+s.p.InputBatch, s.p.Records)
	s.next = to
	b := make(service.MessageBatch, 0, to-from)
	for i := from; i < to; i++ {
		m := service.NewMessage(recordValue(s.p, i))
		m.MetaSetMut("sim_key", recordKey(s.p, i))
		m.MetaSetMut("sim_pos", strconv.Itoa(i))
		b = append(b, m)
	}
	return b, func(ctx context.Context, err error) error {
		if err != nil {
			return nil // replayed by retrynacks.Wrap
		}
		ids := make([]int, 0, to-from)
		for i := from; i < to; i++ {
			ids = append(ids, i)
		}
		body, _ := json.Marshal(ids)
		if _, err := s.st.call(ctx, "/acked", nil, body); err != nil {
			return err
		}
		s.mu.Lock()
		s.acked[from] = to
		for {
			end, ok := s.acked[s.cp]
			if !ok {
				break
			}
			delete(s.acked, s.cp)
			s.cp = end
		}
		s.mu.Unlock()
		return nil
	}, nil
}

func (s *simSource) Close(ctx context.Context) error {
	select {
	case <-s.stopTick:
	default:
		close(s.stopTick)
	}
	s.ticking.Wait()
	s.flush(ctx)
	return nil
}

// simTag takes the plan's Throttle per record, then stamps every message of
// a batch with the batch's identity and size
// (metadata sim_batch = "<instance>/<n>/<size>"), which the output writes as
// a header: the checker then sees whether a batch reached read_committed
// readers whole. It also marks oversized messages (sim_oversized) for
// sim_dlq.
type simTag struct {
	inst     string
	throttle time.Duration // per record
	mu       sync.Mutex
	n        int
}

func (p *simTag) ProcessBatch(ctx context.Context, b service.MessageBatch) ([]service.MessageBatch, error) {
	if p.throttle > 0 {
		n := 0
		for _, m := range b {
			n++
			if v, ok := m.MetaGetMut("kafka_record_count"); ok {
				if c, ok := v.(int64); ok && c > 1 {
					n += int(c) - 1
				}
			}
		}
		select {
		case <-time.After(time.Duration(n) * p.throttle):
		case <-ctx.Done():
		}
	}
	p.mu.Lock()
	p.n++
	id := fmt.Sprintf("%s/%d/%d", p.inst, p.n, len(b))
	p.mu.Unlock()
	for _, m := range b {
		m.MetaSetMut("sim_batch", id)
		if v, err := m.AsBytes(); err == nil && len(v) > MaxMessageBytes {
			m.MetaSetMut("sim_oversized", "1")
		}
	}
	return []service.MessageBatch{b}, nil
}

func (p *simTag) Close(context.Context) error { return nil }

// simDLQ is the fallback output behind kafka_eos when the input holds
// oversized records: it takes the oversized messages (reporting them to the
// harness) and refuses every other one, which then goes back to the input
// and is retried on kafka_eos. So only a message kafka_eos can never write
// leaves the pipeline here.
type simDLQ struct{ st *storeClient }

func (d *simDLQ) Connect(context.Context) error { return nil }

func (d *simDLQ) WriteBatch(ctx context.Context, b service.MessageBatch) error {
	var ids []string
	var berr *service.BatchError
	for i, m := range b {
		if _, ok := m.MetaGetMut("sim_oversized"); ok {
			v, _ := m.AsBytes()
			ids = append(ids, recordID(v))
			continue
		}
		if berr == nil {
			berr = service.NewBatchError(b, errors.New("sim_dlq: not oversized, back to the input"))
		}
		berr = berr.Failed(i, errors.New("sim_dlq: not oversized, back to the input"))
	}
	if len(ids) > 0 {
		body, _ := json.Marshal(ids)
		if _, err := d.st.call(ctx, "/dlq", nil, body); err != nil {
			return err
		}
	}
	if berr != nil {
		return berr
	}
	return nil
}

func (d *simDLQ) Close(context.Context) error { return nil }
