package output

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModeLine: the output says at start which mode it runs in and what that
// promises; plain mode says it is at-least-once across a crash.
func TestModeLine(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"", `kafka_eos "app": plain mode: every epoch is atomic for read_committed readers and a batch is acknowledged once its epoch committed; at-least-once across a crash`},
		{"consumer_group: g\n", `kafka_eos "app": Kafka-to-Kafka mode for consumer group "g": each epoch commits its records and the group's offsets in one transaction, exactly-once end to end`},
		{"max_in_flight: 1\ndedupe: { key: k, position: '1' }\n", `kafka_eos "app": dedupe mode: a message at or below its key's committed position is dropped, exactly-once end to end`},
	} {
		pc, err := Spec().ParseYAML(boundsBase+tc.extra, nil)
		require.NoError(t, err)
		c, err := configFromParsed(pc, newResources())
		require.NoError(t, err)
		require.Contains(t, c.modeLine(), tc.want)
	}
}
