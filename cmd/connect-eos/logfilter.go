package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"sync/atomic"
)

// benthosSigtermLine is what Benthos logs when a SIGTERM starts its shutdown.
// After a fatal error the binary sends that SIGTERM itself (see stopRelay),
// and the line would tell an operator that something outside stopped the
// process; so while a fatal stop is pending the binary drops it.
var benthosSigtermLine = []byte("Received SIGTERM, the service is closing")

// logFilter passes the process's stdout through a pipe while Benthos' logger
// is created, so that the logger (which takes os.Stdout when it is built and
// offers no other hook) writes through the filter; the real file is put back
// right after, so that components (a `stdout` output) and everything else
// write to it directly. Stderr is left alone: Benthos writes its goroutine
// dump there just before a forced os.Exit, which a pipe could cut short.
// (With a `stdout` output Benthos logs to stderr, and the SIGTERM line is
// then not filtered.)
type logFilter struct {
	dropSigterm atomic.Bool // a fatal stop is pending: drop Benthos' SIGTERM line once
	realOut     *os.File
	waits       []chan struct{}
	pipes       []*os.File
}

// installLogFilter replaces os.Stdout with a pipe into the filter. Call
// restoreFiles once the logger exists, and close at the end.
func installLogFilter() (*logFilter, error) {
	f := &logFilter{realOut: os.Stdout}
	for _, dst := range []**os.File{&os.Stdout} {
		pr, pw, err := os.Pipe()
		if err != nil {
			f.close()
			return nil, err
		}
		done := make(chan struct{})
		go f.copyLines(pr, *dst, done)
		f.waits = append(f.waits, done)
		f.pipes = append(f.pipes, pw)
		*dst = pw
	}
	return f, nil
}

// restoreFiles puts the real stdout back; a writer that already holds the
// pipe (Benthos' logger) keeps writing through the filter.
func (f *logFilter) restoreFiles() {
	os.Stdout = f.realOut
}

// close restores the files, closes the pipes and waits until everything
// written to them is out.
func (f *logFilter) close() {
	f.restoreFiles()
	for _, p := range f.pipes {
		_ = p.Close()
	}
	for _, w := range f.waits {
		<-w
	}
}

func (f *logFilter) copyLines(src io.ReadCloser, dst io.Writer, done chan struct{}) {
	defer close(done)
	defer src.Close()
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && !(bytes.Contains(line, benthosSigtermLine) && f.dropSigterm.CompareAndSwap(true, false)) {
			_, _ = dst.Write(line)
		}
		if err != nil {
			return
		}
	}
}
