package output

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

// boundsCases are values that can never work: each is rejected by lint and by
// construction with a message naming the field (or, for the timing rule, the
// fields and the condition that failed). Before these checks commit_timeout
// 0 passed both and surfaced later as an in-doubt fatal; max_message_bytes 0
// and max_in_flight 0 passed lint and failed at run; a negative
// epoch.max_records silently meant no limit; and a transaction_timeout too
// short for the epoch was reported as epoch.interval.
var boundsCases = []struct {
	name, extra, want string
}{
	{"commit_timeout zero", "commit_timeout: 0s\n", "field commit_timeout: must be positive"},
	{"commit_timeout negative", "commit_timeout: -1s\n", "field commit_timeout: must be positive"},
	{"transaction_timeout zero", "transaction_timeout: 0s\n", "field transaction_timeout: must be positive"},
	{"epoch.interval zero", "epoch: { interval: 0s }\n", "field epoch.interval: must be positive"},
	{"transaction_timeout too short", "transaction_timeout: 5s\n",
		"fields epoch.interval, commit_timeout and transaction_timeout"},
	{"max_message_bytes zero", "max_message_bytes: 0\n", "field max_message_bytes: 0 is out of range [512, 2147483647]"},
	{"max_message_bytes over int32", "max_message_bytes: 4294967296\nmax_buffered_bytes: 8589934592\n", "field max_message_bytes: 4294967296 is out of range"},
	{"max_in_flight zero", "max_in_flight: 0\n", "field max_in_flight: must be at least 1, got 0"},
	{"epoch.max_records negative", "epoch: { max_records: -1 }\n", "field epoch.max_records: must be 0 (no limit) or positive, got -1"},
	{"epoch.max_bytes negative", "epoch: { max_bytes: -5 }\n", "field epoch.max_bytes: must be 0 (no limit) or positive, got -5"},
	{"partitioner unknown", "partitioner: sticky\n", "field partitioner: value sticky is not one of: murmur2, manual, round_robin"},
	{"compression unknown", "compression: brotli\n", "field compression: value brotli is not one of: none, gzip, snappy, lz4, zstd"},
	{"input_format unknown", "input_format: avro\n", "field input_format: value avro is not one of: auto, message, arrow"},
	{"recovery_override unknown", "recovery_override: commit\n", "field recovery_override: value commit is not one of: none, force_committed, force_aborted"},
	{"sasl mechanism unknown", "sasl: { mechanism: GSSAPI }\n", "field sasl.mechanism: value GSSAPI is not one of: none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"},
}

const boundsBase = `
seed_brokers: [ localhost:9092 ]
topic: out
transactional_id: app
state_cache: state
`

func TestBoundsLint(t *testing.T) {
	for _, tc := range boundsCases {
		t.Run(tc.name, func(t *testing.T) {
			err := service.NewStreamBuilder().AddOutputYAML("kafka_eos:" + indent(boundsBase+tc.extra))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBoundsConstruction(t *testing.T) {
	for _, tc := range boundsCases {
		if strings.Contains(tc.want, "is not one of") {
			continue // an enum: Benthos parses any string, the lint rejects it
		}
		t.Run(tc.name, func(t *testing.T) {
			pc, err := Spec().ParseYAML(boundsBase+tc.extra, nil)
			require.NoError(t, err)
			_, err = newOutputFromParsed(pc, newResources())
			require.ErrorContains(t, err, strings.TrimPrefix(tc.want, "field "))
		})
	}
}
