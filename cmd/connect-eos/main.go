// Command connect-eos is a Benthos binary with the core bundles (pure, io,
// pure/extended) and the connect-eos components: the kafka_eos output, the
// kafka_native input, the kafka_state cache and a Prometheus exporter. The
// usual Benthos CLI works (run, lint, list, create, test, echo), plus `dev`,
// which runs a config against an embedded Kafka-compatible broker.
//
// Secure by default: the HTTP server (metrics, readiness, and in streams
// mode the API that creates streams) binds to 127.0.0.1:4195 unless the
// config's http.address says otherwise; the streams API is off unless
// `streams --api` is given; and the binary does not ship Benthos' command
// and subprocess components, which run programs on the host.
//
// Memory: `run` sets a Go memory limit from the config's byte budgets when
// GOMEMLIMIT is not set and the input bounds what the pipeline holds (a
// kafka_native input feeding a kafka_eos output; see memlimit.go), and logs
// the limit chosen or why none.
//
// Exit codes: 0 after a clean shutdown (including a bounded input that
// reached its stop offsets), 1 for a CLI or config error, 3 when a component
// raised a fatal error (see package internal/fatal): the stream is shut down
// gracefully first, as on SIGTERM, so nothing in flight is acked unless it was
// committed.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure/extended"

	"github.com/connect-eos/connect-eos/internal/fatal"
	_ "github.com/connect-eos/connect-eos/plugin"
)

// ExitFatal is the exit code after a fatal component error.
const ExitFatal = 3

// Version and Commit may be set at build time with -ldflags "-X
// main.Version=... -X main.Commit=...". When they are not, versionInfo takes
// them from the build information Go stamps into the binary: the main
// module's version (a pseudo-version such as v0.0.0-20260102150405-abcdef123456
// when built from a git checkout, "(devel)" when the build had no VCS
// information) and the commit (vcs.revision).
var (
	Version = ""
	Commit  = ""
)

// versionInfo returns what `connect-eos --version` and /version print:
// "<module version> (commit <hash>[, modified])" and the commit's time.
func versionInfo() (version, date string) {
	v, commit, modified := Version, Commit, false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, st := range bi.Settings {
			switch st.Key {
			case "vcs.revision":
				if commit == "" {
					commit = st.Value
				}
			case "vcs.modified":
				modified = st.Value == "true"
			case "vcs.time":
				date = st.Value
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if commit == "" {
		commit = "unknown"
	}
	if modified {
		commit += ", modified"
	}
	return fmt.Sprintf("%s (commit %s)", v, commit), date
}

func main() {
	os.Exit(run(context.Background(), os.Args))
}

func run(ctx context.Context, args []string) int {
	relay := newStopRelay()
	defer relay.close()
	// The component that raised a fatal error logged it; the binary prints
	// it once more when it exits, and nothing in between.
	var filter *logFilter
	if runsStream(args) {
		if f, err := installLogFilter(); err == nil {
			filter = f
			defer filter.close()
		}
	}
	restore := fatal.SetHandler(func(error) {
		if filter != nil {
			filter.dropSigterm.Store(true)
		}
		relay.requestStop()
	})
	defer restore()

	version, date := versionInfo()
	env := binaryEnvironment()
	var logger *service.Logger
	cliArgs, apiOff := streamsAPIOptIn(args)
	if apiOff {
		fmt.Fprintln(os.Stderr, "connect-eos: streams mode: the HTTP API that creates streams is off; start with `streams --api` to turn it on")
	}
	code, err := service.RunCLIToCode(ctx,
		service.CLIOptSetEnvironment(env),
		service.CLIOptSetMainSchemaFrom(func() *service.ConfigSchema { return mainSchema(env) }),
		service.CLIOptSetArgs(cliArgs...),
		service.CLIOptSetBinaryName("connect-eos"),
		service.CLIOptSetProductName("connect-eos"),
		service.CLIOptSetVersion(version, date),
		service.CLIOptSetDocumentationURL("https://github.com/connect-eos/connect-eos/tree/main/docs"),
		service.CLIOptAddCommand(devCommand()),
		service.CLIOptOnLoggerInit(func(l *service.Logger) {
			logger = l
			if filter != nil {
				filter.restoreFiles()
			}
		}),
		service.CLIOptOnConfigParse(func(pc *service.ParsedConfig) error {
			if err := checkParsedConfig(pc, logger); err != nil {
				return err
			}
			if runsOneStream(args) {
				applyMemoryLimit(pc, logger)
			}
			return nil
		}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
	}
	if isLint(args) || (code != 0 && runsStream(args)) {
		// Redpanda Connect's forms, with what to write instead.
		if printForeignHints(args) && code == 0 {
			code = 1
		}
	}
	if code == 0 && err == nil && isLint(args) {
		code = lintConfigs(args)
	}
	if ferr := fatal.Err(); ferr != nil {
		fmt.Fprintf(os.Stderr, "connect-eos: exit code %d after a fatal error: %v\n", ExitFatal, ferr)
		return ExitFatal
	}
	return code
}

// spawningComponents are Benthos components (in its io bundle) that run
// programs on the host. A config could then run any command as the
// process's user; connect-eos has no use for them, so the binary drops them.
var spawningComponents = []string{"command", "subprocess"}

// binaryEnvironment is the plugin environment of the binary: every
// registered component but spawningComponents.
func binaryEnvironment() *service.Environment {
	return service.GlobalEnvironment().Without(spawningComponents...)
}

// DefaultHTTPAddress is the binary's default for http.address: loopback
// only. Benthos' own default, 0.0.0.0:4195, serves /metrics, /ready and
// /version (and in streams mode an API that creates streams) to anyone who
// can reach the host.
const DefaultHTTPAddress = "127.0.0.1:4195"

// mainSchema is Benthos' config schema with the binary's own defaults.
func mainSchema(env *service.Environment) *service.ConfigSchema {
	s := env.FullConfigSchema(versionInfo())
	s.SetFieldDefault(DefaultHTTPAddress, "http", "address")
	return s
}

// streamsAPIFlag enables the streams mode's HTTP API (`connect-eos streams
// --api`), which Benthos enables by default: it accepts new stream configs
// from anyone who can reach the HTTP server.
const streamsAPIFlag = "--api"

// valueFlags are Benthos' global flags that take a value as the next
// argument; streamsAPIOptIn skips them when looking for the subcommand.
var valueFlags = map[string]bool{
	"-c": true, "--config": true, "-r": true, "--resources": true, "-s": true, "--set": true,
	"-e": true, "--env-file": true, "-t": true, "--templates": true, "--log.level": true,
}

// subcommand returns the index in args of the subcommand (len(args) when
// there is none: Benthos then runs the config of -c).
func subcommand(args []string) int {
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		if valueFlags[args[i]] {
			i++
		}
		i++
	}
	return i
}

// runsStream tells whether args run a stream (run, streams, or no
// subcommand), the commands whose logs a fatal stop concerns.
func runsStream(args []string) bool {
	i := subcommand(args)
	return i >= len(args) || args[i] == "run" || args[i] == "streams"
}

// streamsAPIOptIn makes the streams mode's HTTP API opt-in: for the
// `streams` subcommand it removes --api when given and otherwise adds
// Benthos' --no-api (apiOff reports that). Other commands' arguments are
// returned unchanged.
func streamsAPIOptIn(args []string) (out []string, apiOff bool) {
	i := subcommand(args)
	if i >= len(args) || args[i] != "streams" {
		return args, false
	}
	out = append([]string{}, args[:i+1]...)
	api := false
	for _, a := range args[i+1:] {
		switch a {
		case streamsAPIFlag, streamsAPIFlag + "=true":
			api = true
			continue
		case "--no-api", "--no-api=true":
			continue
		}
		out = append(out, a)
	}
	if !api {
		out = append(out[:i+1], append([]string{"--no-api"}, out[i+1:]...)...)
	}
	return out, !api
}

// stopRelay turns a stop request (a fatal error, or SIGTERM/SIGINT) into the
// graceful shutdown Benthos performs on SIGTERM.
//
// Benthos listens for SIGTERM only once its stream is running, and cancelling
// the run context would skip the graceful shutdown (the shutdown context is
// derived from it). A fatal error can be raised before Benthos listens (an
// input failing to authenticate in Connect), and a SIGTERM arriving then would
// kill the process with the default action. So the relay holds SIGTERM and
// SIGINT from the start, and once a stop was requested it sends SIGTERM to the
// process every relayInterval until the run returns: the first one after
// Benthos listens starts its shutdown, and ones sent while it is already
// shutting down are dropped by its signal channel.
type stopRelay struct {
	sigs   chan os.Signal
	stop   chan struct{}
	done   chan struct{}
	exited chan struct{}
}

// relayInterval is how often a pending stop is re-signalled.
const relayInterval = 250 * time.Millisecond

func newStopRelay() *stopRelay {
	r := &stopRelay{
		sigs:   make(chan os.Signal, 1),
		stop:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	signal.Notify(r.sigs, syscall.SIGTERM, os.Interrupt)
	go r.loop()
	return r
}

func (r *stopRelay) requestStop() {
	select {
	case r.stop <- struct{}{}:
	default:
	}
}

func (r *stopRelay) loop() {
	defer close(r.exited)
	select {
	case <-r.sigs:
	case <-r.stop:
	case <-r.done:
		return
	}
	t := time.NewTicker(relayInterval)
	defer t.Stop()
	for {
		// The relay's own channel receives every SIGTERM sent here too: take
		// delivery of the one just sent (so that it cannot arrive after
		// close, with nobody listening, and kill the process by its default
		// action) and then wait for the next tick. Waking on a received
		// signal instead would make the loop signal itself without pause.
		drainSignals(r.sigs)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case <-r.sigs:
		case <-time.After(time.Second):
		}
		select {
		case <-r.done:
			return
		case <-t.C:
		}
	}
}

// drainSignals empties ch without blocking.
func drainSignals(ch chan os.Signal) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// close ends the relay; signals received after it take their default action
// again (or go to whoever else listens).
func (r *stopRelay) close() {
	close(r.done)
	<-r.exited
	signal.Stop(r.sigs)
}
