package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// injector applies a plan's request faults to a kfake cluster. Error codes
// and delays go through kfake's ControlKey hooks (an error is a kfake.Fault
// pinned to the one request the hook picked, so the broker answers it with
// the code for every entity and does not apply it); connection closes and
// answers dropped after the broker applied the request go through the
// cluster's listener (kfake.ListenFn), which sees the bytes of every request
// and response. Both count the requests of each kind from the moment the
// injector is armed, over every client (only the pipeline's clients talk to
// the cluster while it is armed).
type injector struct {
	faults []ReqFault
	// trace, if set, is told every request and the error codes of its
	// answer (SIM_TRACE), for triage.
	trace func(format string, args ...any)

	mu       sync.Mutex
	armed    bool
	ctlCount map[kmsg.Key]int // requests seen by the control hooks
	netCount map[kmsg.Key]int // requests seen by the listener
	fatalOff bool             // the fatal fault has been lifted
	hits     []int            // per fault
	fatalHit bool
}

func newInjector(faults []ReqFault) *injector {
	return &injector{faults: faults, ctlCount: map[kmsg.Key]int{}, netCount: map[kmsg.Key]int{}, hits: make([]int, len(faults))}
}

func (in *injector) arm(on bool) {
	in.mu.Lock()
	in.armed = on
	in.mu.Unlock()
}

// liftFatal ends the fatal fault (the operator fixed the ACLs): called once
// an instance stopped on it.
func (in *injector) liftFatal() {
	in.mu.Lock()
	in.fatalOff = true
	in.mu.Unlock()
}

// fatalSeen reports whether the fatal fault hit a request.
func (in *injector) fatalSeen() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fatalHit
}

// pick counts a request of kind key and returns the fault it gets among
// those the caller handles, or -1.
func (in *injector) pick(key kmsg.Key, counts map[kmsg.Key]int, handles func(FaultAction) bool) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.armed {
		return -1
	}
	n := counts[key]
	counts[key] = n + 1
	for i, f := range in.faults {
		if f.Key != key || !handles(f.Action) || n < f.At {
			continue
		}
		if f.Count < 0 {
			if in.fatalOff {
				continue
			}
			in.fatalHit = true
		} else if n >= f.At+f.Count {
			continue
		}
		in.hits[i]++
		return i
	}
	return -1
}

// install adds the control hooks to c.
func (in *injector) install(c *kfake.Cluster) {
	seen := map[kmsg.Key]bool{}
	for _, f := range in.faults {
		if seen[f.Key] || (f.Action != ActError && f.Action != ActDelay) {
			continue
		}
		seen[f.Key] = true
		key := f.Key
		c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if harnessRequest(req) {
				return nil, nil, false
			}
			i := in.pick(key, in.ctlCount, func(a FaultAction) bool { return a == ActError || a == ActDelay })
			if i < 0 {
				return nil, nil, false
			}
			f := in.faults[i]
			switch f.Action {
			case ActError:
				c.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Err: codeErr(f.Code), Count: 1, When: func(r kmsg.Request) bool { return r == req }})
			case ActDelay:
				c.SleepControl(func() { time.Sleep(f.Delay) })
			}
			return nil, nil, false
		})
	}
}

// harnessRequest reports a request of the harness's own (pollOffsets' OffsetFetch,
// which names harnessMarker): the faults leave it alone and do not count it.
func harnessRequest(req kmsg.Request) bool {
	r, ok := req.(*kmsg.OffsetFetchRequest)
	if !ok {
		return false
	}
	for _, t := range r.Topics {
		if t.Topic == harnessMarker {
			return true
		}
	}
	for _, g := range r.Groups {
		for _, t := range g.Topics {
			if t.Topic == harnessMarker {
				return true
			}
		}
	}
	return false
}

func codeErr(code int16) *kerr.Error {
	var ke *kerr.Error
	if errors.As(kerr.ErrorForCode(code), &ke) {
		return ke
	}
	return kerr.UnknownServerError
}

// listen is the cluster's kfake.ListenFn: every accepted connection is
// wrapped in a faultConn.
func (in *injector) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &faultListener{Listener: ln, in: in}, nil
}

type faultListener struct {
	net.Listener
	in *injector
}

func (l *faultListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, in: l.in, drop: map[int32]bool{}, reqs: map[int32][2]int16{}}, nil
}

// faultConn hands kfake one request frame at a time (kfake reads the 4-byte
// size, then the body), looking at each frame's header first: a request to
// close is never handed over (the connection closes), a request whose answer
// is to be dropped is handed over and its answer, when kfake writes it (one
// Write per response frame), closes the connection instead.
type faultConn struct {
	net.Conn
	in *injector

	buf []byte // the rest of the current frame, not yet read by kfake

	mu   sync.Mutex
	drop map[int32]bool     // correlation ids whose answers are dropped
	reqs map[int32][2]int16 // correlation id -> key and version (trace)
}

var errInjectedClose = errors.New("sim: connection closed by an injected fault")

func (c *faultConn) Read(p []byte) (int, error) {
	if len(c.buf) == 0 {
		if err := c.nextFrame(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// nextFrame reads one whole request frame and decides its fault.
func (c *faultConn) nextFrame() error {
	var size [4]byte
	if _, err := io.ReadFull(c.Conn, size[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(size[:])
	frame := make([]byte, 4+int(n))
	copy(frame, size[:])
	if _, err := io.ReadFull(c.Conn, frame[4:]); err != nil {
		return err
	}
	if n >= 8 {
		key := kmsg.Key(int16(binary.BigEndian.Uint16(frame[4:6])))
		corr := int32(binary.BigEndian.Uint32(frame[8:12]))
		if c.in.trace != nil {
			c.mu.Lock()
			c.reqs[corr] = [2]int16{int16(key), int16(binary.BigEndian.Uint16(frame[6:8]))}
			c.mu.Unlock()
		}
		i := -1
		if !bytes.Contains(frame, []byte(harnessMarker)) {
			i = c.in.pick(key, c.in.netCount, func(a FaultAction) bool { return a == ActClose || a == ActDropAfter })
		}
		if i >= 0 {
			switch c.in.faults[i].Action {
			case ActClose:
				c.Conn.Close()
				return errInjectedClose
			case ActDropAfter:
				c.mu.Lock()
				c.drop[corr] = true
				c.mu.Unlock()
			}
		}
	}
	c.buf = frame
	return nil
}

func (c *faultConn) Write(p []byte) (int, error) {
	if len(p) >= 8 {
		corr := int32(binary.BigEndian.Uint32(p[4:8]))
		c.mu.Lock()
		d := c.drop[corr]
		delete(c.drop, corr)
		kv, traced := c.reqs[corr]
		delete(c.reqs, corr)
		c.mu.Unlock()
		if traced {
			c.in.traceAnswer(c.Conn.RemoteAddr().String(), kv[0], kv[1], p[8:], d)
		}
		if d {
			c.Conn.Close()
			return 0, errInjectedClose
		}
	}
	return c.Conn.Write(p)
}

// traceAnswer reports an answer's error codes (every ErrorCode field of the
// response, in order; "ok" when all are 0).
func (in *injector) traceAnswer(conn string, key, version int16, body []byte, dropped bool) {
	resp := kmsg.ResponseForKey(key)
	if resp == nil {
		return
	}
	resp.SetVersion(version)
	if resp.IsFlexible() && key != int16(kmsg.ApiVersions) && len(body) > 0 {
		body = body[1:] // the response header's empty tagged fields
	}
	var codes []string
	if err := resp.ReadFrom(body); err == nil {
		collectCodes(reflect.ValueOf(resp), &codes)
	}
	what := "ok"
	if len(codes) > 0 {
		what = strings.Join(codes, ",")
	}
	if dropped {
		what += " (dropped)"
	}
	in.trace("kafka %s %s v%d: %s", conn, kmsg.Key(key).Name(), version, what)
}

// collectCodes appends the names of the non-zero ErrorCode fields under v.
func collectCodes(v reflect.Value, codes *[]string) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			collectCodes(v.Elem(), codes)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Field(i)
			if v.Type().Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 && f.Int() != 0 {
				*codes = append(*codes, codeName(int16(f.Int())))
				continue
			}
			collectCodes(f, codes)
		}
	case reflect.Slice:
		for i := range v.Len() {
			collectCodes(v.Index(i), codes)
		}
	}
}
