// Package fatal is the project's fatal-stop path.
//
// Benthos gives a component no way to fail its stream: an input's ReadBatch
// error is logged and retried forever, service.ErrEndOfInput exits 0, and an
// output's errors nack and retry. A bounded job that cannot authenticate would
// therefore spin or look successful. Components call Raise with an error that
// no retry can fix (authentication, authorization, a fence by another
// instance, an out-of-range offset with reset none); the first one is kept and
// handed to the installed handler.
//
// The connect-eos binary installs a handler that logs the error and asks the
// running stream to shut down gracefully (as on SIGTERM), then exits non-zero
// once the shutdown has finished. In another Benthos build with no handler
// installed, Raise only records the error: the component that raised it keeps
// refusing to read or write (returning the error on every call), so nothing is
// lost or acked, and the error shows in the logs until an operator stops the
// process.
package fatal

import (
	"sync"
)

var (
	mu      sync.Mutex
	first   error
	handler func(error)
)

// Error wraps a fatal error so that callers up the stack can tell it from a
// retriable one with errors.As.
type Error struct{ Err error }

func (e *Error) Error() string { return "fatal: " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Raise records err as fatal and calls the handler for the first one only.
// It returns the wrapped error, so components can `return fatal.Raise(err)`.
// A nil err is ignored.
func Raise(err error) error {
	if err == nil {
		return nil
	}
	fe := &Error{Err: err}
	mu.Lock()
	isFirst := first == nil
	if isFirst {
		first = fe
	}
	h := handler
	mu.Unlock()
	if isFirst && h != nil {
		h(fe)
	}
	return fe
}

// Err returns the first fatal error raised, or nil.
func Err() error {
	mu.Lock()
	defer mu.Unlock()
	return first
}

// SetHandler installs fn to be called (once, from the raising goroutine) with
// the first fatal error. It returns a function that restores the previous
// handler and clears the recorded error, for tests.
func SetHandler(fn func(error)) (restore func()) {
	mu.Lock()
	prev := handler
	handler = fn
	mu.Unlock()
	return func() {
		mu.Lock()
		handler = prev
		first = nil
		mu.Unlock()
	}
}
