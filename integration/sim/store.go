package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// store is the harness's side of what outlives an instance process: the
// state cache (a durable cache: a crash loses nothing written), the
// sim_source checkpoint, and what the instances report (records acknowledged
// to the source, records taken by the dead-letter output). It injects the
// plan's cache faults, counting operations over every instance of the run.
type store struct {
	faults []CacheFault

	mu         sync.Mutex
	cache      map[string][]byte
	fences     map[string]uint64 // key -> highest fence token written
	ops        map[string]int    // "get" / "set" -> operations so far
	cacheFails int
	cacheSlows int
	checkpoint int
	acked      map[int]int // record index -> acknowledgements
	dlq        map[string]int
	ready      map[string]bool // instances that run their stream
	// slotWrites are the values written to the output's slot records,
	// in the order they landed: recovery's decisions are checked
	// against the epochs they describe.
	slotWrites [][]byte

	srv *http.Server
	ln  net.Listener
}

func newStore(faults []CacheFault) (*store, error) {
	s := &store{faults: faults, cache: map[string][]byte{}, fences: map[string]uint64{}, ops: map[string]int{}, acked: map[int]int{}, dlq: map[string]int{}, ready: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("/cache/", s.handleCache)
	mux.HandleFunc("/source/checkpoint", s.handleCheckpoint)
	mux.HandleFunc("/acked", s.handleAcked)
	mux.HandleFunc("/dlq", s.handleDLQ)
	mux.HandleFunc("/ready", func(_ http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.ready[r.URL.Query().Get("inst")] = true
		s.mu.Unlock()
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *store) addr() string { return s.ln.Addr().String() }

func (s *store) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// fault returns the cache fault the next operation of kind op gets, if any.
func (s *store) fault(op string) (CacheFault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.ops[op]
	s.ops[op] = n + 1
	for _, f := range s.faults {
		if f.Op == op && n >= f.At && n < f.At+f.Count {
			if f.Slow > 0 {
				s.cacheSlows++
			} else {
				s.cacheFails++
			}
			return f, true
		}
	}
	return CacheFault{}, false
}

func (s *store) handleCache(w http.ResponseWriter, r *http.Request) {
	op := r.URL.Path[len("/cache/"):]
	key := r.URL.Query().Get("key")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	kind := "set"
	if op == "get" {
		kind = "get"
	}
	if f, ok := s.fault(kind); ok {
		if f.Slow == 0 {
			http.Error(w, fmt.Sprintf("injected state cache failure (%s)", f), http.StatusServiceUnavailable)
			return
		}
		// A slow operation still lands, late, even if the caller gave
		// up waiting: as a write to a remote cache that timed out.
		time.Sleep(f.Slow)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if op != "get" {
		token, _ := strconv.ParseUint(r.URL.Query().Get("fence"), 10, 64)
		if token < s.fences[key] {
			http.Error(w, fmt.Sprintf("fenced: token %d below %d", token, s.fences[key]), http.StatusConflict)
			return
		}
		s.fences[key] = token
	}
	switch op {
	case "get":
		v, ok := s.cache[key]
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		_, _ = w.Write(v)
		return
	case "add":
		if _, ok := s.cache[key]; ok {
			http.Error(w, "exists", http.StatusNotFound)
			return
		}
	case "set":
	case "delete":
		delete(s.cache, key)
		return
	default:
		http.Error(w, "unknown cache operation "+op, http.StatusBadRequest)
		return
	}
	s.cache[key] = body
	if strings.Contains(key, "/slot/") {
		s.slotWrites = append(s.slotWrites, body)
	}
}

func (s *store) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := r.URL.Query().Get("set"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.checkpoint = n
		return
	}
	_, _ = w.Write([]byte(strconv.Itoa(s.checkpoint)))
}

func (s *store) handleAcked(w http.ResponseWriter, r *http.Request) {
	var ids []int
	if err := json.NewDecoder(r.Body).Decode(&ids); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range ids {
		s.acked[i]++
	}
}

func (s *store) handleDLQ(w http.ResponseWriter, r *http.Request) {
	var ids []string
	if err := json.NewDecoder(r.Body).Decode(&ids); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.dlq[id]++
	}
}

// ackedCount is the number of distinct records acknowledged to the source.
func (s *store) ackedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// isReady reports whether instance inst runs its stream.
func (s *store) isReady(inst string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready[inst]
}
