package input

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/require"
)

// boundsCases are rejected by lint and by construction with a message naming
// the field and, for a combined rule, the condition that failed. Before,
// fetch_max_partition_bytes over 2^31-1 was silently truncated to an int32,
// an enum value outside the options was reported without the field or the
// valid values, and group_membership's three conditions shared one message.
var boundsCases = []struct {
	name, conf, want string
}{
	{"partition bytes over int32", "topics: [ a ]\nfetch_max_partition_bytes: 4294967296",
		"field fetch_max_partition_bytes: 4294967296 is out of range [1, 2147483647]"},
	{"partition bytes zero", "topics: [ a ]\nfetch_max_partition_bytes: 0",
		"field fetch_max_partition_bytes: 0 is out of range [1, 2147483647]"},
	{"membership without group", "topics: [ a ]\nstart_offset: committed\ngroup_membership: true",
		"needs a consumer_group"},
	{"membership bounded", "topics: [ a ]\nconsumer_group: g\nstart_offset: committed\ngroup_membership: true\nstop_offset: latest",
		"field group_membership: needs stop_offset none (a bounded read never uses membership), got latest"},
	{"membership from earliest", "topics: [ a ]\nconsumer_group: g\nstart_offset: earliest\ngroup_membership: true",
		"field group_membership: needs start_offset committed, got earliest"},
	{"start_offset unknown", "topics: [ a ]\nstart_offset: oldest",
		"field start_offset: value oldest is not one of: earliest, latest, committed, timestamp, specific"},
	{"reset_offset unknown", "topics: [ a ]\nreset_offset: smallest",
		"field reset_offset: value smallest is not one of: earliest, latest, none"},
	{"stop_offset unknown", "topics: [ a ]\nstop_offset: end",
		"field stop_offset: value end is not one of: none, latest, timestamp, specific"},
	{"isolation unknown", "topics: [ a ]\nisolation_level: committed",
		"field isolation_level: value committed is not one of: read_committed, read_uncommitted"},
	{"tombstones unknown", "topics: [ a ]\ntombstones: skip",
		"field tombstones: value skip is not one of: emit, drop, fail"},
	{"format unknown", "topics: [ a ]\nformat: avro",
		"field format: value avro is not one of: message, arrow"},
}

func TestBoundsLint(t *testing.T) {
	for _, tc := range boundsCases {
		t.Run(tc.name, func(t *testing.T) {
			err := service.NewStreamBuilder().AddInputYAML(fmt.Sprintf("kafka_native:\n  seed_brokers: [ localhost:9092 ]\n  %s\n",
				strings.ReplaceAll(tc.conf, "\n", "\n  ")))
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
			pc, err := Spec().ParseYAML("seed_brokers: [ localhost:9092 ]\n"+tc.conf, nil)
			require.NoError(t, err)
			_, err = configFromParsed(pc)
			require.ErrorContains(t, err, strings.TrimPrefix(tc.want, "field "))
		})
	}
}
