// Command connect-eos is a Benthos binary with the core bundles (pure, io,
// pure/extended) and the connect-eos components: the kafka_eos output, the
// kafka_native input, the kafka_state cache and a Prometheus exporter. The
// usual Benthos CLI works (run, lint, list, create, test, echo), plus `dev`,
// which runs a config against an embedded Kafka-compatible broker.
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
	"syscall"

	"github.com/redpanda-data/benthos/v4/public/service"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure/extended"

	"github.com/connect-eos/connect-eos/internal/fatal"
	_ "github.com/connect-eos/connect-eos/plugin"
)

// ExitFatal is the exit code after a fatal component error.
const ExitFatal = 3

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	os.Exit(run(context.Background(), os.Args))
}

func run(ctx context.Context, args []string) int {
	// A fatal error stops the stream the way an operator would: SIGTERM to
	// ourselves starts Benthos' graceful shutdown (inputs close, in-flight
	// transactions finish or abort), and the exit code is set below.
	restore := fatal.SetHandler(func(err error) {
		fmt.Fprintf(os.Stderr, "connect-eos: stopping: %v\n", err)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	})
	defer restore()

	code, err := service.RunCLIToCode(ctx,
		service.CLIOptSetArgs(args...),
		service.CLIOptSetBinaryName("connect-eos"),
		service.CLIOptSetProductName("connect-eos"),
		service.CLIOptSetVersion(Version, ""),
		service.CLIOptSetDocumentationURL("https://github.com/connect-eos/connect-eos/tree/main/docs"),
		service.CLIOptAddCommand(devCommand()),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err.Error())
	}
	if ferr := fatal.Err(); ferr != nil {
		fmt.Fprintf(os.Stderr, "connect-eos: exited after a fatal error: %v\n", ferr)
		return ExitFatal
	}
	return code
}
