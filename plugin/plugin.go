// Package plugin registers every connect-eos component in Benthos' global
// environment. Add it to your own Benthos or Redpanda Connect build with a
// blank import:
//
//	import _ "github.com/connect-eos/connect-eos/plugin"
//
// It brings the kafka_eos output, the kafka_native input, the kafka_state
// cache and a `prometheus` metrics exporter (skip the last one if your build
// already has one: see package promexport).
package plugin

import (
	// The Prometheus metrics exporter (`metrics: prometheus: {}`).
	_ "github.com/connect-eos/connect-eos/internal/promexport"
)
