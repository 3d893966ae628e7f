// Package plugin registers every connect-eos component in Benthos' global
// environment. Add it to your own Benthos or Redpanda Connect build with a
// blank import:
//
//	import _ "github.com/connect-eos/connect-eos/plugin"
//
// It brings the kafka_eos output, the kafka_native input, the kafka_state
// cache and a `prometheus` metrics exporter. If your build already registers
// a metrics exporter named `prometheus` (Redpanda Connect does), import the
// component packages (input, output, statecache) one by one instead, since
// Benthos refuses a second registration under one name.
package plugin

import (
	// The Prometheus metrics exporter (`metrics: prometheus: {}`).
	_ "github.com/connect-eos/connect-eos/internal/promexport"
	// The kafka_native input.
	_ "github.com/connect-eos/connect-eos/input"
	// The kafka_eos output.
	_ "github.com/connect-eos/connect-eos/output"
	// The kafka_state cache.
	_ "github.com/connect-eos/connect-eos/statecache"
)
