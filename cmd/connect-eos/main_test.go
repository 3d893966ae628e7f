package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"

	"github.com/connect-eos/connect-eos/internal/fatal"
)

// TestExamplesLint runs `connect-eos lint` over every shipped example and
// resource file: an example that does not lint is a broken promise in the docs.
func TestExamplesLint(t *testing.T) {
	files, err := filepath.Glob("../../config/examples/*.yaml")
	require.NoError(t, err)
	res, err := filepath.Glob("../../resources/*.yaml")
	require.NoError(t, err)
	files = append(files, res...)
	if len(files) == 0 {
		t.Fatal("no example configs found in config/examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code := run(t.Context(), []string{"connect-eos", "lint", "--deprecated", f})
			require.Equal(t, 0, code, "connect-eos lint %s", f)
		})
	}
}

// TestLintFailsOnBadConfig proves the lint test above can fail.
func TestLintFailsOnBadConfig(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(f, []byte("input:\n  generate:\n    mapping: 'root = 1'\n    no_such_field: 1\noutput:\n  drop: {}\n"), 0o644))
	require.NotEqual(t, 0, run(t.Context(), []string{"connect-eos", "lint", f}))
}

func init() {
	// fatal_after_test is a test-only input that raises a fatal error after
	// emitting a few messages, to prove the binary's fatal-stop path.
	err := service.RegisterInput("fatal_after_test", service.NewConfigSpec().Field(service.NewIntField("after")),
		func(conf *service.ParsedConfig, _ *service.Resources) (service.Input, error) {
			n, err := conf.FieldInt("after")
			return &fatalAfter{left: n}, err
		})
	if err != nil {
		panic(err)
	}
}

type fatalAfter struct{ left int }

func (f *fatalAfter) Connect(context.Context) error { return nil }
func (f *fatalAfter) Read(ctx context.Context) (*service.Message, service.AckFunc, error) {
	if f.left > 0 {
		f.left--
		return service.NewMessage([]byte("x")), func(context.Context, error) error { return nil }, nil
	}
	err := fatal.Raise(errors.New("SASL authentication failed for user alice"))
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(100 * time.Millisecond):
	}
	return nil, nil, err
}
func (f *fatalAfter) Close(context.Context) error { return nil }

// runFatalAfter runs the CLI on a stream whose input raises a fatal error
// after emitting `after` messages, and returns the exit code.
func runFatalAfter(t *testing.T, after int) int {
	t.Helper()
	f := filepath.Join(t.TempDir(), "fatal.yaml")
	// Benthos arms an os.Exit(1) at shutdown_timeout+1s after a CLI run; keep
	// it past the test.
	conf := fmt.Sprintf("shutdown_timeout: 1h\nhttp:\n  enabled: false\ninput:\n  fatal_after_test:\n    after: %d\noutput:\n  drop: {}\n", after)
	require.NoError(t, os.WriteFile(f, []byte(conf), 0o644))
	done := make(chan int, 1)
	go func() { done <- run(context.Background(), []string{"connect-eos", "run", f}) }()
	select {
	case code := <-done:
		return code
	case <-time.After(60 * time.Second):
		t.Fatal("the stream did not stop after a fatal error")
		return 0
	}
}

// TestFatalErrorExitsNonZero: the stream shuts down by itself (it has no
// other end) and the exit code is ExitFatal, not the 0 that Benthos returns.
func TestFatalErrorExitsNonZero(t *testing.T) {
	require.Equal(t, ExitFatal, runFatalAfter(t, 3))
}

// TestFatalBeforeBenthosListensExitsNonZero raises the fatal error at once
// (as an input failing to authenticate in Connect does), before Benthos has
// installed its signal handler: the process must still shut down gracefully
// and exit ExitFatal rather than die of its own SIGTERM.
func TestFatalBeforeBenthosListensExitsNonZero(t *testing.T) {
	require.Equal(t, ExitFatal, runFatalAfter(t, 0))
}

func TestStreamsAPIOptInArgs(t *testing.T) {
	for _, c := range []struct {
		in, want []string
		off      bool
	}{
		{[]string{"ce", "run", "x.yaml"}, []string{"ce", "run", "x.yaml"}, false},
		{[]string{"ce", "streams"}, []string{"ce", "streams", "--no-api"}, true},
		{[]string{"ce", "streams", "--api", "-o", "o.yaml"}, []string{"ce", "streams", "-o", "o.yaml"}, false},
		{[]string{"ce", "--log.level", "debug", "-r", "r.yaml", "streams", "a.yaml"}, []string{"ce", "--log.level", "debug", "-r", "r.yaml", "streams", "--no-api", "a.yaml"}, true},
		{[]string{"ce", "-c", "streams", "run"}, []string{"ce", "-c", "streams", "run"}, false},
		{[]string{"ce", "--chilled", "streams", "--no-api"}, []string{"ce", "--chilled", "streams", "--no-api"}, true},
		{[]string{"ce", "--set=a=b", "streams", "--api=true"}, []string{"ce", "--set=a=b", "streams"}, false},
	} {
		got, off := streamsAPIOptIn(c.in)
		require.Equal(t, c.want, got, "%v", c.in)
		require.Equal(t, c.off, off, "%v", c.in)
	}
}
