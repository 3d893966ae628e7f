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

// logFilter passes the process's stdout and stderr through pipes while
// Benthos' logger is created, so that the logger (which takes os.Stdout or
// os.Stderr when it is built and offers no other hook) writes through the
// filter; the real files are put back right after, so that components (a
// `stdout` output) and everything else write to them directly.
type logFilter struct {
	dropSigterm atomic.Bool // a fatal stop is pending: drop Benthos' SIGTERM line once
	realOut     *os.File
	realErr     *os.File
	waits       []chan struct{}
	pipes       []*os.File
}

// installLogFilter replaces os.Stdout and os.Stderr with pipes into the
// filter. Call restoreFiles once the logger exists, and close at the end.
func installLogFilter() (*logFilter, error) {
	f := &logFilter{realOut: os.Stdout, realErr: os.Stderr}
	for _, dst := range []**os.File{&os.Stdout, &os.Stderr} {
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

// restoreFiles puts the real stdout and stderr back; writers that already
// hold a pipe (Benthos' logger) keep writing through the filter.
func (f *logFilter) restoreFiles() {
	os.Stdout, os.Stderr = f.realOut, f.realErr
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
